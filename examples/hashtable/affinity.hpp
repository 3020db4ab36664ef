// Pinning benchmark threads to CPUs (Linux): the CPUs this process may run on, and pinning the
// calling thread to the n-th of them. tlptm-workloads and tlptm-scale pin by default
// (--no-pin turns it off).
//
// Why: on a machine whose CPUs do not share every cache level, a thread that the scheduler
// starts on another CPU than the one that loaded the table finds it cold. On the 2-vCPU AMD
// EPYC guest of 2026-12-05, an unpinned run of workload c came out 30-40 ns a transaction
// slower than a pinned one, and the volatile table's walk 50-70 ns (docs/workloads.md,
// "Options"); where the worker landed changed from run to run.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace workloads {

/// The CPUs in the calling thread's affinity mask (taskset and cgroups count), ascending;
/// empty if the mask cannot be read.
inline std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof set, &set) != 0)
        return cpus;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set))
            cpus.push_back(cpu);
    return cpus;
}

/// Pins the calling thread to cpus[n % cpus.size()]. False (and the thread stays where it
/// may run) if `cpus` is empty or the kernel refuses.
inline bool pin_thread(const std::vector<int>& cpus, unsigned n) {
    if (cpus.empty())
        return false;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[n % cpus.size()], &one);
    return ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
}

/// The main thread's side of a pinned run: pins the calling thread (which loads and checks
/// the data) to the first allowed CPU, beside worker 0, and returns the CPUs the workers are
/// to be pinned to. If that fails, says so on stderr as `program` and returns none: the run
/// goes on unpinned, as with --no-pin.
inline std::vector<int> pin_main_thread(const char* program) {
    std::vector<int> cpus = allowed_cpus();
    if (pin_thread(cpus, 0))
        return cpus;
    std::fprintf(stderr,
                 "%s: cannot pin threads to CPUs (%s); running unpinned, as with --no-pin\n",
                 program, cpus.empty() ? "sched_getaffinity failed" : "sched_setaffinity failed");
    return {};
}

/// A worker's side: pins the calling worker t to cpus[t mod their number], before anything
/// else. Null if it is pinned or `cpus` is empty (not pinned); else the error to report.
inline std::exception_ptr pin_worker(const std::vector<int>& cpus, unsigned t) {
    if (cpus.empty() || pin_thread(cpus, t))
        return nullptr;
    return std::make_exception_ptr(
        std::runtime_error("cannot pin worker " + std::to_string(t) + " to CPU " +
                           std::to_string(cpus[t % cpus.size()]) + " (run with --no-pin)"));
}

} // namespace workloads
