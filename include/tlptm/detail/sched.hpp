// tlptm — scheduling points for the crash-consistency harness.
//
// The library calls sched(point, address) at each of its synchronisation points (orec lock and
// unlock, the clock, in_flight, reads and writes of the checkpoint, the allocator's reclaim).
// In a normal build the call is empty and vanishes. A test executable compiled with
// TLPTM_SCHED_HOOKS defined (on every translation unit of the program) gets a hook that a
// seeded scheduler installs, so that it can decide which thread runs next at each point and
// explore interleavings deterministically (tests/harness/scheduler.hpp). The persistence
// policy's calls (stream, flush, fence, stored) are scheduling points as well: the harness's
// policy yields there itself.
#pragma once

#include <atomic>
#include <cstdint>

// TLPTM_TSAN: a ThreadSanitizer build (pools at addresses TSan supports, no asymmetric fences).
#if defined(__SANITIZE_THREAD__)
#define TLPTM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TLPTM_TSAN 1
#endif
#endif

namespace tlptm::detail {

/// Where a thread is when it reaches a scheduling point.
enum class sched_point : std::uint8_t {
    tx_begin,    ///< an attempt starts (after it is marked active)
    orec_lock,   ///< before taking an orec at commit
    orec_unlock, ///< before releasing the orecs of a commit
    clock,       ///< before taking a commit timestamp
    in_flight,   ///< before publishing or clearing in_flight
    ct_read,     ///< before a decision that reads the durable checkpoint
    ct_write,    ///< before persisting a new checkpoint
    reclaim,     ///< before the allocator hands out freed blocks
    write_back,  ///< before a write-back (own or settled for another slot)
    slot,        ///< before taking or releasing a thread slot
    spin,        ///< waiting for another thread (each turn of a spin loop)
};

/// Deliberate bugs the harness switches on to prove that it catches them (mutation testing of
/// rules the persistence trace alone cannot break). Compiled out without TLPTM_SCHED_HOOKS.
enum class mutation : std::uint8_t {
    none,
    volatile_ct,        ///< CT decisions read the header word instead of the durable CT (I2)
    no_commit_cleanup,  ///< a commit whose persistence fails leaves locks and in_flight behind
    aalo_not_covered,   ///< allocated blocks get neither F0 nor a CRC in the entry (I4)
    late_in_flight,     ///< a commit publishes in_flight after its F1, not before taking ts (I2)
    no_heavy_fence,     ///< the rare side of an asymmetric fence skips its barrier
    no_revoke_check,    ///< an attempt takes its held slot without checking for a thief
    carried_as_flushed, ///< eager: a line left to the next write-back counts as durable (I2)
    own_version_only,   ///< a read above the snapshot at the slot's last ts counts as its own
                        ///< without the orec being one that the slot's last commit released
    deferred_lines_dropped, ///< a commit that leaves its write-back unflushed (lazy, or
                            ///< adaptive) forgets the lines earlier commits left unflushed
    pending_line_stale,     ///< deferred write-back: a line whose recorded position lies past
                            ///< the end of dirty_lines (cleared by a batch) counts as pending
    solo_clock_not_raised,  ///< a slot takes the pool solo, or is made to give it back, without
                            ///< raising the clock past the commits before
    prompt_flushed_by_any,  ///< prompt: a commit takes the previous commit's lines as flushed
                            ///< although another thread flushed them (its fence does not
                            ///< complete that thread's flushes)
    taken_slot_forgotten,   ///< a thread that took a slot but could not enter it takes another
                            ///< one next, and holds both
    exit_ignores_solo,      ///< an exiting thread settles its slot as before 2026-12-07: it
                            ///< may take the pool solo as it enters, and leaves the pool held
                            ///< solo unless it has write-back to settle (then it revokes it)
    tail_line_not_kept,     ///< log_write::non_temporal_lines: an entry's first line is
                            ///< written with zeros before the entry instead of the bytes of
                            ///< the entries there (it erases committed entries)
    // Attribution switches (paired_bench_hooks): each removes one persistence step (or all of
    // them), so that its cost can be measured; the crash tests catch each.
    no_commit_fence,        ///< a commit skips F1: it returns before its entry is durable
    no_write_back_flush,    ///< eager: a commit does not flush the previous write-back's lines
    no_persistence,         ///< a commit neither writes its entry nor flushes anything (its
                            ///< fences stay, with nothing pending): the transaction machinery
    prompt_lines_unflushed, ///< prompt: a commit counts its lines as flushed after its
                            ///< write-back without flushing them
    // A comparison switch (paired_bench_hooks), durable: the old way of a step, kept to
    // measure the new one against it.
    flush_new_blocks, ///< the blocks an entry covers are flushed, never streamed, and adaptive
                      ///< write-back does not defer a commit that covers any (before 2026-12-06)
};

#if defined(TLPTM_SCHED_HOOKS)
/// The installed hook, or nullptr. Set by the harness before threads start.
inline void (*sched_hook)(sched_point, const void*) = nullptr;
/// The mutation in force (none in every real run).
inline std::atomic<mutation> active_mutation{mutation::none};

inline void sched(sched_point p, const void* addr) {
    if (auto* h = sched_hook)
        h(p, addr);
}
inline bool mutated(mutation m) noexcept {
    return active_mutation.load(std::memory_order_relaxed) == m;
}
#else
inline void sched(sched_point, const void*) noexcept {}
constexpr bool mutated(mutation) noexcept {
    return false;
}
#endif

} // namespace tlptm::detail
