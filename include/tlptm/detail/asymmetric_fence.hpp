// tlptm — asymmetric fences: store-load ordering that the frequent side gets for free and the
// rare side pays for.
//
// Several protocols of the library are Dekker-shaped: a thread stores a mark, then loads
// another thread's flag, and the other thread stores its flag, then loads the mark; at least
// one of them must see the other's store. On x86 a load may pass an earlier store (the store
// waits in the store buffer), so each side needs a full barrier between its store and its
// load: a locked instruction or MFENCE. Those waits are costly on the transaction path: a
// locked instruction also waits for the non-temporal stores and flushes of the previous
// commit, and every store after a commit's fence waits in the store buffer until that fence
// completes.
//
// Here the frequent side (a transaction marking its slot active, a commit publishing its
// in_flight bound or taking its own write-back) only stores and keeps the compiler from
// reordering (`publish`), and the rare side (an exclusive section, the checkpoint, a
// reclaimer, a thread settling another slot's write-back or taking an idle slot) makes every
// other running thread of the process execute a full barrier (`heavy_fence`, the Linux
// membarrier system call, private expedited command: an inter-processor interrupt to each CPU
// that runs a thread of this process; a thread that does not run passed a context switch,
// which is a full barrier). Then either the frequent side's store is visible to the rare
// side's loads after `heavy_fence`, or the frequent side's barrier point came before its store
// and its later load sees the rare side's store. This is the technique of liburcu and of
// folly's asymmetric thread fence.
//
// Where the system call is missing (a kernel before 4.14, a seccomp profile that refuses it),
// on CPUs other than x86-64 (whose weaker ordering this reasoning does not cover) and under
// ThreadSanitizer (which does not know the system call), `publish` is a sequentially
// consistent exchange (a locked instruction) and `heavy_fence` does nothing: the rare side's
// stores and loads are sequentially consistent already, so the protocols hold by the C++
// memory model alone.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <mutex>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <tlptm/detail/sched.hpp>

namespace tlptm::detail {

#if defined(TLPTM_TSAN)
#define TLPTM_NO_ASYMMETRIC_FENCE 1
#endif
#if !defined(__x86_64__) || !defined(__linux__) || !defined(__NR_membarrier)
#define TLPTM_NO_ASYMMETRIC_FENCE 1
#endif

/// True once the process uses light `publish` (set by enable_asymmetric_fences, before any
/// pool of the process is open, and never cleared).
inline std::atomic<bool> asymmetric_fences_on{false};

#if !defined(TLPTM_NO_ASYMMETRIC_FENCE)
inline long membarrier_call(int cmd) noexcept {
    return ::syscall(__NR_membarrier, cmd, 0, 0);
}
#endif

/// Chooses, once per process, whether fences are asymmetric: if the kernel offers the private
/// expedited membarrier, registers the process for it. Called by every pool opening before the
/// pool's first transaction; thread-safe.
inline void enable_asymmetric_fences() noexcept {
#if !defined(TLPTM_NO_ASYMMETRIC_FENCE)
    static std::once_flag once;
    std::call_once(once, [] {
        long cmds = membarrier_call(MEMBARRIER_CMD_QUERY);
        if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
            membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
            return; // symmetric fences: publish is a locked instruction
        asymmetric_fences_on.store(true, std::memory_order_release);
    });
#endif
}

/// The frequent side's store: `a = v`, ordered before the caller's later loads as far as a
/// thread that calls heavy_fence() between its own store and load can tell (release as to the
/// caller's earlier accesses). A plain store with asymmetric fences, else a seq_cst exchange.
template <class T> inline void publish(std::atomic<T>& a, T v) noexcept {
    if (asymmetric_fences_on.load(std::memory_order_relaxed)) {
        a.store(v, std::memory_order_release);
        std::atomic_signal_fence(std::memory_order_seq_cst); // the compiler keeps the order
        return;
    }
    a.exchange(v, std::memory_order_seq_cst);
}

/// The rare side's barrier, between its (seq_cst) stores and its (seq_cst) loads of what
/// frequent sides publish: every thread of the process executes a full barrier before this
/// returns. Nothing to do with symmetric fences.
inline void heavy_fence() noexcept {
#if !defined(TLPTM_NO_ASYMMETRIC_FENCE)
    if (!asymmetric_fences_on.load(std::memory_order_relaxed))
        return;
    if (mutated(mutation::no_heavy_fence)) // the bug this prevents, for the litmus test
        return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
        // EPERM: not registered (a child of fork on a kernel that drops the registration):
        // register again. Failing that, a global barrier (slower) has the same effect; with
        // neither, the protocols that rely on this barrier cannot be kept.
        const bool again = errno == EPERM &&
                           membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
                           membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
        if (!again && membarrier_call(MEMBARRIER_CMD_GLOBAL) != 0)
            std::terminate();
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

} // namespace tlptm::detail
