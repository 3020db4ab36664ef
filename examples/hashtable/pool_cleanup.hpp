// Removes a benchmark's pool file when the program is interrupted (a pool in /dev/shm holds RAM
// until it is removed). Shared by tlptm-workloads and tlptm-scale.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace workloads {

/// The pool file of the running process.
inline char interrupted_pool_path[4096];

inline void remove_pool_and_exit(int sig) {
    ::unlink(interrupted_pool_path); // async-signal-safe, as is _exit
    ::_exit(128 + sig);
}

/// Removes `path` on SIGINT, SIGTERM or SIGHUP, then exits with 128 + the signal.
inline void remove_pool_on_interrupt(const std::string& path) {
    if (path.size() >= sizeof interrupted_pool_path)
        return;
    std::memcpy(interrupted_pool_path, path.c_str(), path.size() + 1);
    struct sigaction sa {};
    sa.sa_handler = remove_pool_and_exit;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        ::sigaction(sig, &sa, nullptr);
}

} // namespace workloads
