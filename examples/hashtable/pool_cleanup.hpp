// Removes a benchmark's pool file when the program is interrupted (a pool in /dev/shm holds RAM
// until it is removed). Shared by tlptm-workloads, tlptm-scale and paired_bench.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace workloads {

/// The pool files of the running process (an empty string: none).
inline char interrupted_pool_paths[2][4096];

inline void remove_pool_and_exit(int sig) {
    for (const char* p : interrupted_pool_paths)
        if (p[0] != '\0')
            ::unlink(p); // async-signal-safe, as is _exit
    ::_exit(128 + sig);
}

/// Removes `path` (and `second`, if not empty) on SIGINT, SIGTERM or SIGHUP, then exits with
/// 128 + the signal. A later call replaces the files.
inline void remove_pool_on_interrupt(const std::string& path, const std::string& second = {}) {
    if (path.size() >= sizeof interrupted_pool_paths[0] ||
        second.size() >= sizeof interrupted_pool_paths[1])
        return;
    std::memcpy(interrupted_pool_paths[0], path.c_str(), path.size() + 1);
    std::memcpy(interrupted_pool_paths[1], second.c_str(), second.size() + 1);
    struct sigaction sa {};
    sa.sa_handler = remove_pool_and_exit;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        ::sigaction(sig, &sa, nullptr);
}

} // namespace workloads
