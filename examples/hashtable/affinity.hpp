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

} // namespace workloads
