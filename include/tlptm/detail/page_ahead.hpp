// tlptm — a pool's page-ahead thread: makes the pages of the superblocks the allocator will
// take next present for the process before a transaction writes them (pool_options::
// populate_ahead).
//
// Why. On some machines the first access of a page costs microseconds even after madvise
// (MADV_POPULATE_WRITE) has mapped it: measured 7 us a 4 KiB page on a 2-vCPU guest whose
// hypervisor maps each page for user space on its first user access (docs/design.md,
// "Allocator"), so an insert of 32-byte nodes paid about 56 ns on average, once per 128
// inserts. The cost falls on whichever thread touches the page first, so a thread that reads
// one byte of each page ahead of time takes it off the allocating thread's path. Reading changes
// nothing in the pool, and the thread reads only superblocks that the heap lists as free.
//
// The thread starts on the first request and sleeps between requests (one per superblock the
// allocator takes fresh). It runs on the CPUs the process was given when it started (its
// affinity at static initialisation: what taskset, numactl or a cgroup's cpuset allowed),
// whatever the affinity of the thread that started it: an inserting thread pinned to one CPU
// would otherwise have its pages readied on the core that waits for them, and a thread set to
// every CPU would leave a taskset restriction (pool_options::populate_ahead off keeps every
// thread of the library where the application put it). It is never started in a forked child
// of the process that started it (its mutex may have been copied locked); a child's pool simply
// does without it.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TLPTM_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TLPTM_LSAN 1
#endif
#endif
#if defined(TLPTM_LSAN)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace tlptm::detail {

/// The CPUs this process may run on as it started: the main thread's affinity when the
/// library's static objects are initialised, before main() can pin it (taskset, numactl and a
/// cgroup's cpuset all show here). Every CPU if the kernel does not say.
inline cpu_set_t affinity_at_startup() noexcept {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) == 0)
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
            CPU_SET(cpu, &set);
    return set;
}
inline const cpu_set_t startup_cpus = affinity_at_startup();

/// startup_cpus, or, for a pool opened by another static object's initialiser before that
/// variable's own (it is then still all zeros), the calling thread's affinity now.
inline cpu_set_t process_cpus() noexcept {
    return CPU_COUNT(&startup_cpus) != 0 ? startup_cpus : affinity_at_startup();
}

/// One background thread that runs a job each time it is poked (several pokes while it works
/// count as one), until stopped.
class page_ahead {
public:
    /// The thread will run on `cpus` (default: the process's CPUs at startup).
    explicit page_ahead(const cpu_set_t& cpus = process_cpus()) { sync_->cpus = cpus; }
    page_ahead(const page_ahead&) = delete;
    page_ahead& operator=(const page_ahead&) = delete;
    ~page_ahead() {
        stop();
        // In a forked child the copied condition variable still counts the parent thread as a
        // waiter (destroying it would wait forever) and the mutex may be copied locked: leave
        // them be.
        if (forked_child()) {
            sync_state* left = sync_.release();
#if defined(TLPTM_LSAN)
            __lsan_ignore_object(left); // on purpose, not a leak to report at the child's exit
#else
            (void)left;
#endif
        }
    }

    /// Runs `job` soon on the background thread, starting it the first time (the first job
    /// given is kept). Returns false, doing nothing, in a forked child of the process that
    /// started the thread or if the thread cannot be created.
    bool poke(const std::function<void()>& job) noexcept {
        if (forked_child())
            return false; // the thread is not there, and its mutex may be locked
        std::lock_guard lk(sync_->mutex);
        if (sync_->failed || sync_->stopping)
            return false;
        if (!sync_->started) {
            try {
                sync_->job = job;
            } catch (...) {
                sync_->failed = true;
                return false;
            }
            // Every signal blocked in the new thread: the application's handlers run on its
            // own threads.
            sigset_t all, old;
            sigfillset(&all);
            pthread_sigmask(SIG_SETMASK, &all, &old);
            const int rc = pthread_create(&thread_, nullptr, &page_ahead::run, sync_.get());
            pthread_sigmask(SIG_SETMASK, &old, nullptr);
            if (rc != 0) {
                sync_->failed = true;
                return false;
            }
            sync_->started = true;
            owner_.store(::getpid(), std::memory_order_release);
        }
        sync_->wanted = true;
        sync_->cv.notify_one();
        return true;
    }

    /// Stops the thread and waits for it (after its current job). Nothing to do if it never
    /// started, or in a forked child.
    void stop() noexcept {
        if (owner_.load(std::memory_order_acquire) != ::getpid())
            return; // never started, or a forked child
        {
            std::lock_guard lk(sync_->mutex);
            if (!sync_->started)
                return;
            sync_->stopping = true;
        }
        sync_->cv.notify_one();
        pthread_join(thread_, nullptr);
        std::lock_guard lk(sync_->mutex);
        sync_->started = false;
    }

    /// Jobs run so far (tests).
    std::uint64_t jobs_run() const noexcept {
        return sync_->jobs.load(std::memory_order_acquire);
    }

    /// How many CPUs the thread may run on (at least 1).
    std::size_t cpu_count() const noexcept {
        return static_cast<std::size_t>(std::max(1, CPU_COUNT(&sync_->cpus)));
    }

    /// The running thread's affinity (tests); false if it has not started or is not this
    /// process's.
    bool thread_cpus(cpu_set_t& out) const noexcept {
        if (owner_.load(std::memory_order_acquire) != ::getpid())
            return false;
        std::lock_guard lk(sync_->mutex);
        return sync_->started && ::pthread_getaffinity_np(thread_, sizeof out, &out) == 0;
    }

private:
    /// What the thread shares with its owner; left alone in a forked child.
    struct sync_state {
        std::mutex mutex;
        std::condition_variable cv;
        std::function<void()> job;
        cpu_set_t cpus; ///< where the thread runs
        bool started = false, stopping = false, wanted = false, failed = false;
        std::atomic<std::uint64_t> jobs{0};
    };

    /// Whether this process is a child forked after the thread started.
    bool forked_child() const noexcept {
        const pid_t owner = owner_.load(std::memory_order_acquire);
        return owner != 0 && owner != ::getpid();
    }

    static void* run(void* p) {
        sync_state& s = *static_cast<sync_state*>(p);
        // Not pinned where its creator is (an inserting thread, maybe pinned to one CPU: the
        // pages would then be readied on the core that waits for them), but within the CPUs it
        // was given. If the kernel refuses them (a cpuset shrunk since), the inherited set
        // stays.
        (void)pthread_setaffinity_np(pthread_self(), sizeof s.cpus, &s.cpus);
        std::unique_lock lk(s.mutex);
        for (;;) {
            s.cv.wait(lk, [&] { return s.wanted || s.stopping; });
            if (s.stopping)
                return nullptr;
            s.wanted = false;
            lk.unlock();
            try {
                s.job();
            } catch (...) {
                // Best effort: a job that fails leaves the pages to their first use.
            }
            s.jobs.fetch_add(1, std::memory_order_release);
            lk.lock();
        }
    }

    std::unique_ptr<sync_state> sync_ = std::make_unique<sync_state>();
    pthread_t thread_{};
    std::atomic<pid_t> owner_{0}; ///< the process that started the thread (0: not started)
};

} // namespace tlptm::detail
