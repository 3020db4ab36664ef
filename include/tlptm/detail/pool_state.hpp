// tlptm — the shared state of an open pool: the mapping, the header, the persistence path, the
// thread slots with their log rings, and the transaction clock.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <tlptm/detail/append_vector.hpp>
#include <tlptm/detail/asymmetric_fence.hpp>
#include <tlptm/detail/heap.hpp>
#include <tlptm/detail/layout.hpp>
#include <tlptm/detail/page_ahead.hpp>
#include <tlptm/detail/sched.hpp>
#include <tlptm/detail/stm.hpp>
#include <tlptm/detail/write_set.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/log.hpp>
#include <tlptm/options.hpp>
#include <tlptm/persist.hpp>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14; older C libraries lack the name
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14; older C libraries lack the name
#endif

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

namespace tlptm::detail {

/// Maps the pages of [p, p + n) in one system call, `advice` MADV_POPULATE_READ or
/// MADV_POPULATE_WRITE, so that the accesses about to come take no page fault per page. Best
/// effort: a kernel without it (before Linux 5.14) leaves the faults to first use. Never
/// changes the contents; reading dirties nothing, so it suits msync durability too. The range
/// must lie in mapped memory (the page holding its first byte included).
inline void populate_pages(const void* p, std::size_t n, int advice) noexcept {
    if (n == 0)
        return;
    auto a = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{4095};
    auto e = reinterpret_cast<std::uintptr_t>(p) + n;
    (void)::madvise(reinterpret_cast<void*>(a), e - a, advice);
}

struct pool_state;

/// What other threads read of a thread: the holder of a slot is a thread's record. Records
/// are reused but never freed, so a thread that read a slot's holder may look at the record
/// even if that thread has exited meanwhile (its flag is then clear, or its new owner's).
struct alignas(64) thread_record {
    /// Set while the thread takes a slot it holds for an attempt and until the attempt ends
    /// (published: a plain store with asymmetric fences). A thread that takes an idle slot from
    /// its holder reads it after a heavy fence.
    std::atomic<std::uint32_t> entering{0};
    thread_record* next_free = nullptr; ///< guarded by the pool of records' mutex

    std::uintptr_t token() const noexcept { return reinterpret_cast<std::uintptr_t>(this); }
    static thread_record& of(std::uintptr_t token) noexcept {
        return *reinterpret_cast<thread_record*>(token);
    }

    /// A record for a new thread (reused, or new).
    static thread_record& acquire() {
        std::lock_guard lk(free_mutex());
        if (thread_record* r = free_list()) {
            free_list() = r->next_free;
            return *r;
        }
        return *new thread_record; // never freed (see above)
    }
    /// Gives back the record of an exiting thread.
    static void release(thread_record& r) noexcept {
        r.entering.store(0, std::memory_order_release);
        std::lock_guard lk(free_mutex());
        r.next_free = free_list();
        free_list() = &r;
    }

private:
    // Function-local and never destroyed: threads may exit after static destruction began.
    static std::mutex& free_mutex() noexcept {
        static auto* m = new std::mutex;
        return *m;
    }
    static thread_record*& free_list() noexcept {
        static thread_record* head = nullptr;
        return head;
    }
};

/// An orec of the read-set (the version a read saw) or of the locked set (the version it held
/// before the lock).
struct orec_ref {
    std::uint32_t index;   ///< the orec's index in the orec table
    std::uint64_t version; ///< the orec word seen (a version, not a lock)
};

/// True if the pool's log mode compresses entries (CBLO).
inline bool compresses(log_mode mode) noexcept {
    return mode == log_mode::cblo || mode == log_mode::tlptm;
}

/// The largest write-set (in words) whose entry surely fits in the slot's ring, whatever its
/// contents: below it no store needs a size check.
inline std::size_t words_that_surely_fit(log_mode mode, std::size_t cap) noexcept {
    if (compresses(mode)) {
        std::size_t fixed = max_compressed_header_bytes + codec::put_varint_writable_bytes;
        return cap > fixed ? (cap - fixed) / compressed_bound_per_record : 0;
    }
    return cap > baseline_header_bytes ? (cap - baseline_header_bytes) / 24 : 0;
}

/// One thread slot: its log ring, the ring's volatile write position, the persistence context
/// and the transaction descriptor. A thread holds a slot from one transaction to the next
/// (`holder`), and one transaction attempt at a time runs in it (active_since != 0); a thread
/// that finds every slot held takes an idle one from its holder.
struct alignas(64) thread_slot { // slots written by different threads share no cache line
    pool_state* pool = nullptr;
    std::uint32_t index = 0;

    // Log ring (DESIGN §3).
    log_ring ring;
    std::size_t head = 0;      ///< next write offset in the ring's data area
    std::uint64_t gen = 0;     ///< generation entries are sealed with
    bool attached = false;     ///< generation advanced in this opening of the pool
    std::uint64_t last_ts = 0; ///< timestamp of the newest entry in the ring
    /// The orecs that the slot's last commit released at version last_ts (own_count of them),
    /// so that the next transaction reads that commit's words without a snapshot extension
    /// (read_granule, released_by_last_commit). Emptied when a commit starts locking; filled
    /// only by a commit's final unlock, and left empty if it released more than fit.
    std::array<std::uint32_t, 16> own_orecs{};
    std::uint32_t own_count = 0;
    /// The ring's line at head & ~63 as this slot last wrote it, zeros from head on (entries
    /// go out as whole words or whole lines: the next entry rewrites the bytes before it from
    /// here). All zeros while head % 64 == 0. Kept by advance_tail_line.
    std::array<std::uint8_t, 64> tail_line{};

    persist_ctx pctx;

    // Transaction descriptor (owned by the thread that holds the slot).
    write_set writes;
    entry_builder entry;
    /// Orecs read and the version seen: validated on snapshot extension and at commit.
    append_vector<orec_ref> reads;
    /// Orecs locked at commit and the version they held before.
    append_vector<orec_ref> locks;
    std::uint64_t snapshot = 0; ///< rv: every value read is as of this timestamp
    bool serial = false;        ///< running alone (after repeated aborts): cannot conflict
    /// The attempt runs solo: the pool is this slot's (pool_state::try_solo) and no other
    /// attempt can start before it ends, so it reads and commits without orecs.
    bool solo = false;
    /// Attempts of the slot until it next looks whether it may take the pool solo, how many it
    /// waits before its first look after losing the pool (pool_options::solo_after; solo_lost
    /// doubles it, up to solo_window_max, when another thread took the pool back soon after the
    /// slot took it, and halves it after a long hold; later looks come every solo_after
    /// attempts), whether the pool was the slot's at its last attempt, the other slots'
    /// transaction count when it last looked (try_solo), and the slot's solo transaction count
    /// when it took the pool.
    std::uint32_t solo_countdown = 0;
    std::uint32_t solo_window = 0;
    bool held_solo = false;
    std::uint64_t solo_seen_others = 0;
    std::uint64_t solo_taken_at = 0;
    bool doomed = false;    ///< a conflict was signalled; the attempt must not commit
    bool committed = false; ///< the attempt committed (its allocations stay)
    /// The first exception that left a nested atomic of this attempt: the outermost atomic
    /// rethrows it instead of committing (the whole transaction aborts, as in PMDK).
    std::exception_ptr nested_error;
    /// Write-set size (words) at which the entry's size is checked next (early log_overflow).
    std::size_t overflow_check_at = 0;
    /// The largest write-set whose entry surely fits in the ring (words_that_surely_fit).
    std::size_t surely_fit_words = 0;
    append_vector<write_set::run> size_check_runs; ///< scratch of that check
    /// The blocks the commit's entry covers instead of a fence of their own (F0), sorted.
    std::vector<pool_range> covered;
    alloc_tx_state alloc;                  ///< the attempt's allocations, AALO ranges and frees
    std::vector<std::uint8_t> copy_buffer; ///< tx::memcpy's bytes in transit

    /// Between taking a commit timestamp and the moment its write-back is durable: a lower
    /// bound of the oldest such timestamp of this slot, else 0. CT may not pass it (I2). With
    /// lazy write-back it stays at the first commit since the slot's last write-back batch.
    std::atomic<std::uint64_t> in_flight{0};
    /// Non-zero (the timestamp of one of them) while commits of the slot have write-back that is
    /// not yet durable, 0 when none has; only whether it is 0 is ever read. And the lines
    /// written back in place since the last batch (eager: flushed, waiting for the next fence;
    /// lazy: not flushed at all). The slot's next F1 completes eager flushes; a batch
    /// (pool_state::settle_locked) completes both; a thread that needs CT to pass them settles
    /// them itself.
    std::atomic<std::uint64_t> unapplied_ts{0};
    /// The slot's newest commit timestamp (0: none yet): a checkpoint raises the clock to the
    /// largest of them before it reads it, since commits do not advance the clock.
    std::atomic<std::uint64_t> committed_ts{0};
    /// Guarded by the commit section: written by the owner while `committing`, by a helper
    /// while `settle_wanted` and the owner is not committing (pool_state::settle).
    append_vector<std::uint64_t> dirty_lines;
    /// Deferred write-back (lazy, and adaptive's updates): where a line was last
    /// appended to dirty_lines, by a hash of the line (record_write_back). A line found at its
    /// recorded position is pending already and not appended again, so that a hot line counts
    /// once towards write_back_lines and the batch needs no sort to drop duplicates. The
    /// position is checked against dirty_lines itself, so a clear or a helper's settle needs
    /// no update here; two lines that share a hash only let a duplicate through, which is
    /// flushed twice. Owner only, in its commits.
    static constexpr unsigned pending_line_hash_bits = 9;
    std::array<std::uint32_t, std::size_t{1} << pending_line_hash_bits> pending_line_at{};
    /// write_back::prompt: the commit that recorded dirty_lines also flushed them right after
    /// its write-back: the thread that did (its record's token, the slot's holder then), else 0.
    /// The slot's next commit only looks at them if it runs on that same thread: a fence
    /// completes only its own core's flushes, so a commit of another thread (the slot taken
    /// over, take_idle_slot) flushes them again, as a helper that settles the slot does. Read
    /// and written by the attempt that runs in the slot, in its commits only.
    std::uintptr_t lines_flushed_by = 0;

    /// The two sides of the lock between a commit and a helper that settles the slot's
    /// write-back (asymmetric: the owner publishes `committing` with a plain store, the helper
    /// pays a heavy fence). The owner sets `committing` from commit step 1 to the end of its
    /// write-back, and waits while `settle_wanted` is set; a helper sets `settle_wanted`, then
    /// waits until `committing` is clear (commit_section, pool_state::settle).
    std::atomic<std::uint32_t> committing{0};
    std::atomic<std::uint32_t> settle_wanted{0};
    spin_lock helper_lock; ///< one helper at a time settles this slot

    /// While an attempt runs: 1 + a lower bound of its snapshot, else 0 (published: a plain
    /// store with asymmetric fences). Read by exclusive sections (which wait for it to clear)
    /// and by I3 (memory freed at ts f is reused only once every running attempt's snapshot is
    /// >= f), both after a heavy fence.
    std::atomic<std::uint64_t> active_since{0};
    /// The thread that holds the slot between its attempts (its thread_record's token), 0:
    /// none. Only the holder writes active_since; its attempts take the slot without a locked
    /// instruction (pool_state::enter_held).
    std::atomic<std::uintptr_t> holder{0};
    /// Set while another thread takes the slot from its holder: the holder's next attempt sees
    /// it after publishing `entering` and goes elsewhere (pool_state::take_idle_slot).
    std::atomic<std::uint32_t> revoke{0};
};

/// write_back::automatic chooses adaptive write-back when store + CLWB + SFENCE of a small
/// entry measured at least this many times a non-temporal one. Adaptive saves, on each update,
/// the difference between the two (its fence then waits for its entry only),
/// and costs a batch flush per line later; on the AMD EPYC guest of 2026-12-06 the ratio was
/// 1.5-1.7 and adaptive made c up to 14 % faster (docs/design.md, "Adaptive write-back"); the
/// Intel Xeon guests of earlier sessions wrote small entries faster with stores and CLWB (so
/// the rule keeps eager there), and lazy write-back, which defers the same updates, was not
/// faster on c.
inline constexpr double adaptive_flush_ratio = 1.3;

/// The write-back policy in force for `asked` (write_back::automatic resolved with the pool's
/// log-write measurement).
inline tlptm::write_back resolve_write_back(tlptm::write_back asked,
                                            const log_write_choice& c) noexcept {
    if (asked != write_back::automatic)
        return asked;
    if (!c.measured || c.method == log_write::store_and_flush)
        return write_back::eager;
    const double entry_ns = c.non_temporal_chosen_small_ns();
    if (entry_ns > 0 && c.store_and_flush_small_ns >= adaptive_flush_ratio * entry_ns)
        return write_back::adaptive;
    return write_back::eager;
}

/// Everything an open pool shares between threads. Created by create_state / open_state, owned
/// by tlptm::pool through a shared_ptr (threads hold weak references to release their slot).
struct pool_state {
    std::string path;
    int fd = -1;
    std::uint8_t* base = nullptr;
    std::size_t size = 0;
    pool_header* header = nullptr;
    log_mode mode = log_mode::tlptm;
    tlptm::write_back write_back_mode = tlptm::write_back::eager;
    std::size_t write_back_lines = 0; ///< lazy: dirty lines of a slot that trigger a batch
    persistence persist;
    log_write_choice log_choice;  ///< how persist writes log entries, and why (log_write)
    bool map_sync = false;        ///< mapped with MAP_SYNC (real persistent memory)
    bool populate_on_use = false; ///< pool_options::populate in effect (see populate())
    bool populate_ahead = false;  ///< pool_options::populate_ahead in effect
    std::uint64_t id = next_id();

    std::uint64_t heap_begin = 0, heap_end = 0; ///< user-writable offsets
    std::uint64_t meta_begin = 0, meta_end = 0;

    /// The global version clock (GV5-style): a lower bound on the timestamps of commits to
    /// come, and the source of every snapshot. A commit reads it and takes a timestamp above
    /// it, above its snapshot, above its slot's last commit and above the versions of the
    /// orecs it locked, but does not write it: two threads committing disjoint data touch no
    /// common cache line. It is raised (advance_clock) only when something needs a newer
    /// snapshot: a read that finds a version above its snapshot, a checkpoint, an allocation
    /// waiting for frees. Alone in its cache line, which stays shared in every core's cache
    /// while nobody raises it.
    alignas(64) std::atomic<std::uint64_t> clock{0};
    alignas(64) orec_table orecs;
    /// Non-zero while a serial transaction or an exclusive section (close, recover) runs (1), or
    /// while a slot holds the pool solo (solo_flag_base + the slot's index: try_solo).
    std::atomic<std::uint32_t> exclusive_flag{0};
    /// Set by a thread that wants a solo slot to give the pool back (revoke_solo).
    std::atomic<std::uint32_t> solo_revoke{0};
    /// Threads waiting to run while a slot held the pool solo, until they run (solo_waiter):
    /// no slot takes the pool while one waits, or a slot whose peers could not run (so ran no
    /// transaction) would take it again and again before them.
    std::atomic<std::uint32_t> solo_waiters{0};
    /// The thread (its record's token) that took the pool solo: only it runs solo in the slot;
    /// a thread that takes the slot over (take_idle_slot) takes the pool back first.
    std::atomic<std::uintptr_t> solo_thread{0};
    /// pool_options::solo_after (0: never solo).
    std::uint32_t solo_after = 0;
    std::mutex checkpoint_mutex; ///< persisted CT only grows (I2): one writer at a time
    /// The CT value known durable (see durable_checkpoint()); written under checkpoint_mutex.
    std::atomic<std::uint64_t> durable_ct{0};
    std::atomic<bool> poison_flag{false};
    mutable std::mutex poison_mutex;
    std::string poison_reason; ///< guarded by poison_mutex
    std::mutex root_mutex;
    heap allocator; ///< volatile allocator state, rebuilt by recovery
    /// pool_options::populate_ahead: the thread, and which superblocks it has readied (a bit
    /// each; a superblock stays readied while the pool is mapped).
    page_ahead ahead;
    std::unique_ptr<std::atomic<std::uint64_t>[]> ahead_done;
    std::size_t ahead_words = 0;

    std::vector<std::unique_ptr<thread_slot>> slots;
    std::atomic<std::uint32_t> next_suggestion{0}; ///< see suggest_slot()
    persist_ctx admin_ctx; ///< persistence context of open/close/recover (not a thread slot)

    pool_state() = default;
    pool_state(const pool_state&) = delete;
    pool_state& operator=(const pool_state&) = delete;

    ~pool_state() {
        ahead.stop(); // it reads the mapping
        if (base)
            ::munmap(base, size);
        if (fd >= 0)
            ::close(fd); // also drops the flock
    }

    static std::uint64_t next_id() noexcept {
        static std::atomic<std::uint64_t> n{0};
        return ++n;
    }

    std::uint64_t offset_of(const void* p) const noexcept {
        return static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(p) - base);
    }
    bool contains(const void* p, std::size_t n) const noexcept {
        auto a = reinterpret_cast<std::uintptr_t>(p);
        auto b = reinterpret_cast<std::uintptr_t>(base);
        return a >= b && a - b <= size && n <= size - (a - b);
    }
    /// True if [offset, offset + n) lies in the heap: the memory transactions may write.
    bool in_heap(std::uint64_t offset, std::size_t n) const noexcept {
        return offset >= heap_begin && offset <= heap_end && n <= heap_end - offset;
    }
    /// I5: the only offsets a replayed log record may touch (heap or allocator metadata).
    bool replayable(std::uint64_t offset) const noexcept {
        // Written so that no sum can overflow: offset comes from the log, i.e. from a file.
        return offset % 8 == 0 &&
               ((offset >= heap_begin && offset < heap_end && heap_end - offset >= 8) ||
                (offset >= meta_begin && offset < meta_end && meta_end - offset >= 8));
    }
    std::uint64_t* word_at(std::uint64_t offset) const noexcept {
        return reinterpret_cast<std::uint64_t*>(base + offset);
    }

    /// The range of in-pool pointer values (the compressed log codes them as offsets).
    pointer_range pointers() const noexcept {
        return {reinterpret_cast<std::uint64_t>(base), size};
    }

    /// pool_options::populate: maps the pages of [p, p + n) for writing in one system call, so
    /// that the stores about to come take no page fault each. Best effort (a kernel without
    /// MADV_POPULATE_WRITE leaves the faults to first use); never changes the contents.
    void populate(const void* p, std::size_t n) const noexcept {
        if (populate_on_use)
            populate_pages(p, n, MADV_POPULATE_WRITE);
    }

    /// Superblocks the page-ahead thread keeps ready beyond the one the allocator took last.
    static constexpr std::size_t superblocks_ahead = 4;

    /// The allocator took free superblock i (pool_options::populate): maps its pages now unless
    /// the page-ahead thread has done so, and asks that thread to ready the next ones.
    void populate_superblock(std::uint32_t i) noexcept {
        if (!populate_on_use)
            return;
        if (!populate_ahead || !ahead_ready(i))
            populate(base + allocator.sb_offset(i), superblock_bytes);
        if (populate_ahead && running_attempts() < ahead.cpu_count())
            (void)ahead.poke([this] { ready_next_superblocks(); });
    }

    /// Attempts running now, the caller's included (a snapshot: relaxed loads). While they
    /// keep every CPU the process may use busy, the page-ahead thread is not woken: it would
    /// only take a core from them (two inserting threads on two CPUs measured 9-24 % fewer
    /// transactions a second with it), and each allocating thread maps its own superblocks.
    std::size_t running_attempts() const noexcept {
        std::size_t n = 0;
        for (const auto& s : slots)
            n += s->active_since.load(std::memory_order_relaxed) != 0 ? 1 : 0;
        return n;
    }

    /// Whether the page-ahead thread has readied superblock i.
    bool ahead_ready(std::uint32_t i) const noexcept {
        return ahead_done && i / 64 < ahead_words &&
               (ahead_done[i / 64].load(std::memory_order_acquire) >> (i % 64) & 1) != 0;
    }

    /// The page-ahead thread's job: maps and reads one byte of every page of the next
    /// superblocks_ahead free superblocks not readied before. A superblock taken meanwhile is
    /// only read, which changes nothing.
    void ready_next_superblocks() {
        std::uint32_t next[superblocks_ahead];
        const std::size_t n = allocator.next_free(next, superblocks_ahead);
        for (std::size_t k = 0; k < n; ++k) {
            const std::uint32_t i = next[k];
            if (i / 64 >= ahead_words || ahead_ready(i))
                continue;
            const std::uint8_t* p = base + allocator.sb_offset(i);
            populate_pages(p, superblock_bytes, MADV_POPULATE_WRITE);
            for (std::size_t at = 0; at < superblock_bytes; at += 4096) {
                const std::uint8_t b = __atomic_load_n(p + at, __ATOMIC_RELAXED);
                asm volatile("" : : "r"(b)); // the load happens
            }
            ahead_done[i / 64].fetch_or(std::uint64_t{1} << (i % 64), std::memory_order_release);
        }
    }

    /// CT known to be durable (I2). Every decision that relies on CT — handing out a freed
    /// block, a new ring generation that hides old entries — reads this, never the header word:
    /// the header word may hold a value another thread has stored but not yet flushed and
    /// fenced, and a crash would then leave the durable CT below it. Published only after the
    /// fence that made it durable (checkpoint(), recovery).
    std::uint64_t durable_checkpoint() const noexcept {
        if (mutated(mutation::volatile_ct)) // the bug this rule prevents, for the harness
            return __atomic_load_n(&header->checkpoint_ts, __ATOMIC_ACQUIRE);
        return durable_ct.load(std::memory_order_acquire);
    }

    /// Raises the clock to at least v (never lowers it); returns its value afterwards. One
    /// locked instruction on the clock's line if it is below v, else only a load.
    std::uint64_t advance_clock(std::uint64_t v) noexcept {
        std::uint64_t now = clock.load(std::memory_order_seq_cst);
        while (now < v && !clock.compare_exchange_weak(now, v, std::memory_order_seq_cst))
            ;
        return now < v ? v : now;
    }

    /// The newest commit timestamp of any slot (as far as this thread sees).
    std::uint64_t newest_commit() const noexcept {
        std::uint64_t newest = 0;
        for (const auto& s : slots)
            newest = std::max(newest, s->committed_ts.load(std::memory_order_relaxed));
        return newest;
    }

    /// The largest t such that every transaction with ts <= t is applied and durable: the
    /// clock, first raised past every slot's newest commit, lowered below every timestamp
    /// still between step 1 and step 6 (I2).
    std::uint64_t safe_checkpoint() noexcept {
        // Order matters: a committer publishes in_flight (publish(), or it already held an
        // older bound) before it reads the clock, and takes a ts above what it read; this
        // reads the clock, issues a heavy fence, then reads in_flight. After the fence a
        // committer's bound is visible below, or its clock read came after the fence and saw
        // at least `safe`: any ts <= safe belongs to a committer whose in_flight is visible
        // (or whose write-back is already durable).
        std::uint64_t safe = advance_clock(newest_commit());
        heavy_fence();
        for (const auto& s : slots) {
            std::uint64_t f = s->in_flight.load(std::memory_order_seq_cst);
            if (f != 0 && f - 1 < safe)
                safe = f - 1;
        }
        return safe;
    }

    /// Makes slot x's pending write-back durable — flush its dirty lines (again, from this
    /// thread: a flush from any core writes the line back) and fence once — so that CT may pass
    /// its commits. Safe from any thread but x's owner while it commits; waits while x is
    /// committing.
    void settle(thread_slot& x, persist_ctx& ctx) {
        thread_slot* one[] = {&x};
        settle_slots(one, ctx);
    }

    /// settle() of several slots, with one heavy fence for all of them.
    template <class Slots> void settle_slots(const Slots& xs, persist_ctx& ctx) {
        std::vector<thread_slot*> held;
        for (auto& x : xs) {
            thread_slot& slot = *x;
            if (slot.unapplied_ts.load(std::memory_order_acquire) == 0)
                continue;
            slot.helper_lock.lock();
            slot.settle_wanted.store(1, std::memory_order_seq_cst);
            held.push_back(&slot);
        }
        if (held.empty())
            return;
        // The owner publishes `committing` with a plain store: after this barrier it is
        // visible, or the owner's next look at settle_wanted sees the request and waits.
        heavy_fence();
        auto release = [&] {
            for (thread_slot* slot : held) {
                slot->settle_wanted.store(0, std::memory_order_release);
                slot->helper_lock.unlock();
            }
        };
        try {
            for (thread_slot* slot : held) {
                while (slot->committing.load(std::memory_order_seq_cst) != 0) {
                    sched(sched_point::spin, slot);
                    cpu_relax();
                }
                settle_locked(*slot, ctx);
            }
        } catch (...) {
            release();
            throw;
        }
        release();
    }

    /// settle() for a caller that owns x's write-back: its owner in a commit section, or a
    /// helper that holds settle_wanted while the owner is not committing.
    void settle_locked(thread_slot& x, persist_ctx& ctx) {
        if (x.unapplied_ts.load(std::memory_order_relaxed) == 0)
            return;
        sched(sched_point::write_back, &x);
        auto& lines = x.dirty_lines;
        // CLWB takes the lines in any order, and a duplicate costs a flush of a clean line; a
        // sort of a full batch of random lines cost more than that (about 9 us for 256 lines,
        // 34 ns a transaction). msync merges adjacent pages (note_msync), and a test policy
        // gets each line once: for them, ascending and unique.
        if (!persist.flushes_cpu_lines()) {
            std::sort(lines.begin(), lines.end());
            lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
        }
        guarded([&] {
            persist.flush_lines(ctx, base, lines.data(), lines.size());
            persist.fence(ctx);
        });
        thread_counters::add(ctx.counters.write_back_batches, 1);
        lines.clear();
        x.unapplied_ts.store(0, std::memory_order_release);
        sched(sched_point::in_flight, &x);
        x.in_flight.store(0, std::memory_order_release); // only lets CT move up: no StoreLoad
    }

    /// Runs f, a sequence of persistence operations; if one fails, the pool is poisoned
    /// (DESIGN §6) and the exception propagates.
    template <class F> void guarded(F&& f) {
        try {
            f();
        } catch (const std::exception& e) {
            poison(e.what());
            throw;
        } catch (...) {
            poison("an exception of unknown type");
            throw;
        }
    }

    /// I2: persists CT = safe_checkpoint() if that is larger than the durable CT, first
    /// settling every slot's deferred write-back, and publishes it as durable after its fence.
    /// Does nothing on a poisoned pool (nothing can be made durable any more). Thread-safe.
    void checkpoint(persist_ctx& ctx) {
        if (poisoned())
            return;
        settle_slots(slots, ctx);
        std::uint64_t safe = safe_checkpoint();
        std::lock_guard lk(checkpoint_mutex);
        if (safe > durable_ct.load(std::memory_order_relaxed)) {
            sched(sched_point::ct_write, &header->checkpoint_ts);
            guarded([&] { persist.persist_word(ctx, &header->checkpoint_ts, safe); });
            // Only now is `safe` durable: publish it to those who rely on it (I2).
            durable_ct.store(safe, std::memory_order_release);
        }
    }

    /// After recovery (no transaction runs): the header's CT is durable.
    void publish_recovered_checkpoint() noexcept {
        durable_ct.store(__atomic_load_n(&header->checkpoint_ts, __ATOMIC_ACQUIRE),
                         std::memory_order_release);
    }

    // ---- persistence failure (DESIGN §6): the pool is poisoned ---------------------------

    /// True once a flush, fence, non-temporal copy or msync failed: durability can no longer
    /// be promised, so every later transaction throws pool_error. Reopening the pool recovers
    /// from its log.
    bool poisoned() const noexcept { return poison_flag.load(std::memory_order_acquire); }

    /// Marks the pool poisoned with the reason (the first reason wins).
    void poison(const std::string& why) noexcept {
        try {
            std::lock_guard lk(poison_mutex);
            if (!poison_flag.load(std::memory_order_relaxed))
                poison_reason = why;
        } catch (...) {
            // The flag below is what matters; the reason is a courtesy.
        }
        poison_flag.store(true, std::memory_order_release);
    }

    /// Throws the pool_error of a poisoned pool.
    [[noreturn]] void throw_poisoned() const {
        std::string why;
        {
            std::lock_guard lk(poison_mutex);
            why = poison_reason;
        }
        throw pool_error(path, "a persistence operation failed earlier (" + why +
                                   "), so durability can no longer be promised: no further "
                                   "transaction runs on this pool object; close it and open the "
                                   "pool again to recover from its log");
    }

    /// The smallest clock value at which a running attempt began (UINT64_MAX if none runs).
    std::uint64_t oldest_active() const noexcept {
        // Marks are published with plain stores (asymmetric fences): after this barrier an
        // attempt's mark is visible, or every read the attempt makes comes after the barrier
        // and sees what was written before it.
        heavy_fence();
        std::uint64_t m = ~std::uint64_t{0};
        for (const auto& s : slots) {
            std::uint64_t a = s->active_since.load(std::memory_order_seq_cst);
            if (a != 0 && a - 1 < m)
                m = a - 1;
        }
        return m;
    }

    /// True if stores into memory allocated by the same transaction skip the log (AALO).
    bool aalo() const noexcept { return mode == log_mode::aalo || mode == log_mode::tlptm; }

    // ---- thread slots: held by threads, one attempt at a time ----------------------------
    //
    // A thread holds a slot (its log ring and transaction descriptor) from one transaction to
    // the next: `holder` names the thread's record, taken once with a compare-and-swap. An
    // attempt publishes its thread's `entering` flag, checks that it still holds the slot and
    // that nobody is taking it (revoke), then publishes the slot's mark (active_since) and
    // checks that no exclusive section runs. Both are plain stores (publish): the Dekker pairs
    // with take_idle_slot (on `entering` and `revoke`) and with lock_exclusive and I3's scan
    // (on the mark and `exclusive_flag`) get their barriers from the rare side's heavy fence,
    // so the common attempt issues no locked instruction (one would wait for the previous
    // commit's non-temporal stores and flushes). Only the holder writes the slot's mark: a
    // thread that still thinks it holds a slot taken from it writes only its own record.
    // A thread without a slot takes a free one; when every slot is held it takes one whose
    // holder is not entering or running an attempt, and when every slot is busy it waits.

    /// The attempt of `me`'s thread takes `s` if that thread holds it and nobody wants it:
    /// publishes `entering`, checks the slot, publishes the slot's mark (clock + 1, a lower
    /// bound of the snapshot begin() will take), checks for an exclusive section. False (and
    /// neither flag left set) otherwise. `may_go_solo`: the attempt may look at taking the pool
    /// solo (not the settling of an exiting thread, which runs no transaction after it); a
    /// template argument, so that the attempts' path tests nothing more for it.
    template <bool may_go_solo = true> bool enter_held(thread_slot& s, thread_record& me) noexcept {
        if (s.holder.load(std::memory_order_relaxed) != me.token())
            return false;
        sched(sched_point::slot, &s); // a thief may take the slot before `entering` is set
        publish(me.entering, std::uint32_t{1});
        if (mutated(mutation::no_revoke_check) || // the bug this check prevents, for the harness
            (s.revoke.load(std::memory_order_seq_cst) == 0 &&
             s.holder.load(std::memory_order_seq_cst) == me.token())) {
            // Ours until leave(): no thief takes a slot whose holder is entering. I3: the mark
            // may be read before begin() takes the snapshot; clock + 1 is at most snapshot + 1
            // (reading the clock first only makes the bound lower).
            publish(s.active_since, clock.load(std::memory_order_acquire) + 1);
            const std::uint32_t f = exclusive_flag.load(std::memory_order_seq_cst);
            if (f == 0) {
                if (s.held_solo) [[unlikely]] // another thread took the pool back
                    solo_lost(s);
                if (may_go_solo && solo_after != 0 && --s.solo_countdown == 0) [[unlikely]]
                    try_solo(s, me);
                return true;
            }
            // The slot holds the pool solo, and nobody asked for it back (revoke_solo). The flag
            // is read again after solo_revoke: a thread that took the pool back cleared the flag
            // before it cleared solo_revoke, so a cleared solo_revoke read here comes with the
            // cleared flag (the first read may predate both).
            if (f == solo_flag(s) && solo_thread.load(std::memory_order_relaxed) == me.token() &&
                solo_revoke.load(std::memory_order_seq_cst) == 0 &&
                exclusive_flag.load(std::memory_order_seq_cst) == f) {
                s.solo = true;
                return true;
            }
            s.active_since.store(0, std::memory_order_release);
        }
        me.entering.store(0, std::memory_order_release);
        return false;
    }

    /// Takes a slot for a transaction attempt of `me`'s thread, `preferred` (the slot it held
    /// last) first, waiting while an exclusive section runs or while every slot is busy.
    [[gnu::always_inline]] thread_slot& enter(thread_slot* preferred, thread_record& me) noexcept {
        sched(sched_point::slot, preferred);
        if (preferred && enter_held(*preferred, me)) [[likely]]
            return *preferred;
        return enter_slow(preferred, me);
    }

    /// enter() when the thread's slot cannot be taken at once.
    [[gnu::noinline]] thread_slot& enter_slow(thread_slot* preferred, thread_record& me) noexcept {
        solo_waiter waiting(*this); // until this attempt runs
        for (unsigned spins = 0;; ++spins) {
            wait_for_no_exclusive(waiting);
            thread_slot* s = nullptr;
            if (preferred && preferred->holder.load(std::memory_order_relaxed) == me.token())
                s = preferred; // held, but an exclusive section or a thief was in the way
            else
                s = take_free_slot(me);
            if (!s)
                s = take_idle_slot(me);
            if (s && enter_held(*s, me))
                return *s;
            // A slot taken but not entered (an exclusive section or a solo slot in the way) is
            // the thread's now: the next turn enters it, not another one. Taking a second slot
            // left the first held by the thread with nobody to settle it (its pending
            // write-back kept in_flight and held CT back) or to give it up.
            if (s && !mutated(mutation::taken_slot_forgotten))
                preferred = s;
            sched(sched_point::spin, preferred); // every slot is busy
            if (spins < 64)
                cpu_relax();
            else if (spins < 4096)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    /// Makes `me`'s thread the holder of a slot that nobody holds; nullptr if none.
    thread_slot* take_free_slot(thread_record& me) noexcept {
        for (auto& s : slots) {
            std::uintptr_t expect = 0;
            if (s->holder.load(std::memory_order_relaxed) == 0 &&
                s->holder.compare_exchange_strong(expect, me.token(), std::memory_order_seq_cst))
                return s.get();
        }
        return nullptr;
    }

    /// Takes a slot from a holder that is not entering or running an attempt in it (more
    /// threads than slots): sets `revoke`, so that the holder's next attempt goes elsewhere,
    /// and after a heavy fence checks the holder's `entering` flag (its record outlives it).
    /// nullptr if every slot is busy.
    thread_slot* take_idle_slot(thread_record& me) noexcept {
        for (auto& s : slots) {
            if (s->active_since.load(std::memory_order_relaxed) != 0 ||
                s->revoke.exchange(1, std::memory_order_seq_cst) != 0)
                continue;
            sched(sched_point::slot, s.get());
            heavy_fence(); // the holder's `entering` is visible now, or it will see revoke
            std::uintptr_t h = s->holder.load(std::memory_order_seq_cst);
            bool taken = false;
            if (h != me.token() &&
                (h == 0 || !thread_record::of(h).entering.load(std::memory_order_seq_cst)))
                taken = s->holder.compare_exchange_strong(h, me.token(), std::memory_order_seq_cst);
            s->revoke.store(0, std::memory_order_release);
            if (taken)
                return s.get();
        }
        return nullptr;
    }

    /// `me`'s thread gives up `s` (it exits, or leaves the pool).
    void release_slot(thread_slot& s, thread_record& me) noexcept {
        std::uintptr_t expect = me.token();
        s.holder.compare_exchange_strong(expect, 0, std::memory_order_seq_cst);
    }

    /// Ends the attempt: its last access to the slot (release: the next attempt in the slot,
    /// of any thread, sees the descriptor as this one left it).
    void leave(thread_slot& s, thread_record& me) noexcept {
        if (s.solo)
            s.solo = false;
        s.active_since.store(0, std::memory_order_release);
        me.entering.store(0, std::memory_order_release);
    }

    /// Takes a slot for a serial attempt; the caller holds the exclusive section, so no
    /// attempt runs. The thread's own slot if it holds one, else a free one, else one taken
    /// from its holder (which cannot start an attempt before the section ends).
    thread_slot& enter_serial(thread_slot* preferred, thread_record& me) noexcept {
        thread_slot* p =
            preferred && preferred->holder.load(std::memory_order_relaxed) == me.token()
                ? preferred
                : take_free_slot(me);
        while (!p) { // a holder may be in enter_held for a moment: it backs off
            p = take_idle_slot(me);
            if (!p) {
                sched(sched_point::spin, &exclusive_flag);
                cpu_relax();
            }
        }
        thread_slot& s = *p;
        me.entering.store(1, std::memory_order_seq_cst);
        // Its snapshot (begin) covers every commit so far, so no pending free waits for it.
        s.active_since.store(advance_clock(newest_commit()) + 1, std::memory_order_seq_cst);
        return s;
    }

    /// The slot a thread that has none in this pool should try first: a free one, spread
    /// round-robin.
    thread_slot* suggest_slot() noexcept {
        const std::size_t n = slots.size();
        const std::size_t first = next_suggestion.fetch_add(1, std::memory_order_relaxed);
        for (std::size_t k = 0; k < n; ++k) {
            thread_slot* s = slots[(first + k) % n].get();
            if (s->holder.load(std::memory_order_relaxed) == 0)
                return s;
        }
        return slots[first % n].get();
    }

    // ---- solo: a slot that runs alone takes the pool -------------------------------------
    //
    // A thread whose transactions run while no other thread runs any takes the pool for its
    // slot: exclusive_flag names the slot, other attempts cannot start (enter_held sees the flag),
    // and the slot's attempts read and commit without orecs (no orec check per read, no lock,
    // no validation: nothing can conflict). The slot looks whether it may every
    // pool_options::solo_after attempts, and only if the other slots ran no transaction since it
    // last looked; taking the pool costs it a compare-and-swap and a heavy fence. A thread that
    // wants to run while a slot holds the pool asks for it back (revoke_solo): it waits for the
    // slot's running attempt to end, then frees the pool. Both the taking and the giving back
    // raise the clock past every commit made so far: solo commits take no orec versions into
    // their timestamps (commit), and orecs keep the versions they had before, so the clock is
    // what orders a word's writers across the switch (recovery replays them in ts order).

    static constexpr std::uint32_t solo_flag_base = 2;
    std::uint32_t solo_flag(const thread_slot& s) const noexcept {
        return solo_flag_base + s.index;
    }
    static bool is_solo_flag(std::uint32_t f) noexcept { return f >= solo_flag_base; }

    /// Transactions run so far by the slots other than `s` (committed, read-only, aborted).
    std::uint64_t others_transactions(const thread_slot& s) const noexcept {
        std::uint64_t n = 0;
        for (const auto& o : slots)
            if (o.get() != &s) {
                const thread_counters& c = o->pctx.counters;
                n += c.tx_committed.load(std::memory_order_relaxed) +
                     c.tx_read_only.load(std::memory_order_relaxed) +
                     c.tx_aborted.load(std::memory_order_relaxed);
            }
        return n;
    }

    /// Called by enter_held for `s`'s attempt (mark published, no exclusive section) every
    /// solo_after attempts: if no other slot ran a transaction since the last look and none runs
    /// one now, takes the pool for `s` (this attempt already runs solo).
    [[gnu::noinline]] void try_solo(thread_slot& s, const thread_record& me) noexcept {
        // A look that finds the pool busy costs a few loads: the next comes solo_after attempts
        // later. The window (solo_lost) only delays the first look after the pool was lost,
        // so that it bounds how often a slot switches, not how soon it notices that the other
        // threads went quiet: with looks a window apart, a thread interrupted more often than
        // that never found the pool quiet again.
        s.solo_countdown = solo_after;
        const std::uint64_t others = others_transactions(s);
        const bool quiet = others == s.solo_seen_others;
        s.solo_seen_others = others;
        if (!quiet || solo_waiters.load(std::memory_order_relaxed) != 0)
            return;
        for (const auto& o : slots) // a cheap look first: the heavy fence is for a quiet pool
            if (o.get() != &s && o->active_since.load(std::memory_order_relaxed) != 0)
                return;
        std::uint32_t expected = 0;
        if (!exclusive_flag.compare_exchange_strong(expected, solo_flag(s),
                                                    std::memory_order_seq_cst))
            return;
        // Written only by the thread whose flag is in place (a look that lost the race must not
        // overwrite the winner's); the heavy fence below publishes it before any other thread
        // can take the slot.
        solo_thread.store(me.token(), std::memory_order_relaxed);
        sched(sched_point::slot, &exclusive_flag);
        heavy_fence(); // every mark and waiter published before is visible; later ones see the flag
        bool busy = solo_waiters.load(std::memory_order_seq_cst) != 0;
        for (const auto& o : slots)
            busy = busy || (o.get() != &s && o->active_since.load(std::memory_order_seq_cst) != 0);
        if (busy) { // someone runs or waits: give the pool back at once
            // A heavy fence for nothing: not again before the window has passed.
            s.solo_countdown = s.solo_window;
            expected = solo_flag(s);
            exclusive_flag.compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
            return;
        }
        // Every earlier commit has ended (none runs): solo timestamps come after theirs.
        if (!mutated(mutation::solo_clock_not_raised))
            advance_clock(newest_commit());
        s.solo = s.held_solo = true;
        s.solo_taken_at = s.pctx.counters.tx_solo.load(std::memory_order_relaxed);
    }

    /// The largest window: attempts a slot waits, after losing the pool, before it looks again.
    static constexpr std::uint32_t solo_window_max = std::uint32_t{1} << 16;

    /// Solo transactions a slot must have run since it took the pool for the pool's loss to
    /// count as an interruption rather than a turn (solo_lost). A switch costs two heavy fences
    /// and a wait, tens of microseconds when the other CPUs run threads of the process (a
    /// 2-vCPU guest: 7-10 µs a fence), and a solo transaction saves tens of nanoseconds: fewer
    /// than about a thousand do not pay for it (design.md, "Solo").
    static constexpr std::uint64_t solo_worth_a_switch = 1024;

    /// `s` held the pool solo and another thread took it back. If the slot ran fewer solo
    /// transactions than solo_worth_a_switch, the threads run by turns: the slot waits twice as
    /// long before it looks again, so that they do not pay a switch every few transactions. If
    /// it ran more, the thread mostly runs alone and was interrupted (a background thread's
    /// occasional transaction): half as long, down to solo_after, so that a window grown in a
    /// phase of turns does not keep a thread that now runs alone out of solo for tens of
    /// thousands of transactions after each interruption.
    [[gnu::noinline]] void solo_lost(thread_slot& s) noexcept {
        s.held_solo = false;
        const std::uint64_t held =
            s.pctx.counters.tx_solo.load(std::memory_order_relaxed) - s.solo_taken_at;
        if (held >= solo_worth_a_switch)
            s.solo_window = std::max(s.solo_window / 2, solo_after);
        else
            s.solo_window = std::min(s.solo_window * 2, solo_window_max);
        s.solo_countdown = s.solo_window;
    }

    /// Frees the pool from solo slot `flag` (exclusive_flag's value), as a thread that wants to
    /// run: asks for it back, waits until the slot runs no attempt, raises the clock past its
    /// commits and clears the flag (unless someone else did). Returns once the flag no longer
    /// names that slot.
    void revoke_solo(std::uint32_t flag) noexcept {
        thread_slot& owner = *slots[flag - solo_flag_base];
        sched(sched_point::slot, &solo_revoke);
        solo_revoke.store(1, std::memory_order_seq_cst);
        // Once: from here on the owner's attempts see solo_revoke and back off (enter_held), and
        // the mark of an attempt it began before is visible. Waiting needs no more fences (one
        // per turn sent the owner an interrupt per turn).
        heavy_fence();
        for (unsigned spins = 0; exclusive_flag.load(std::memory_order_seq_cst) == flag; ++spins) {
            if (owner.active_since.load(std::memory_order_seq_cst) == 0) {
                // No solo attempt runs, and none can start (solo_revoke): its last commit is
                // visible, and so is its timestamp.
                if (!mutated(mutation::solo_clock_not_raised))
                    advance_clock(newest_commit());
                std::uint32_t expected = flag;
                exclusive_flag.compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
                break;
            }
            sched(sched_point::spin, &owner);
            if (spins < 64)
                cpu_relax();
            else
                std::this_thread::yield();
        }
        solo_revoke.store(0, std::memory_order_release);
    }

    /// The attempt of the thread that holds the pool solo in slot `s` (s.solo) gives it back,
    /// as its last act in the pool (an exiting thread): the clock goes past its commits, then
    /// the flag is cleared, unless a thread that revokes it cleared it first. No heavy fence:
    /// this thread runs no more solo attempts, and the others wait on the flag.
    void give_back_solo(thread_slot& s) noexcept {
        sched(sched_point::slot, &exclusive_flag);
        if (!mutated(mutation::solo_clock_not_raised))
            advance_clock(newest_commit());
        std::uint32_t expected = solo_flag(s);
        exclusive_flag.compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
        s.held_solo = false; // given back, not lost: the next holder's window stays as it is
    }

    /// A thread that found the pool held solo and waits to run: counted in solo_waiters from
    /// then until the object dies (once the thread runs, or gave up).
    class solo_waiter {
    public:
        explicit solo_waiter(pool_state& st) noexcept : st_(st) {}
        ~solo_waiter() {
            if (on_)
                st_.solo_waiters.fetch_sub(1, std::memory_order_seq_cst);
        }
        solo_waiter(const solo_waiter&) = delete;
        solo_waiter& operator=(const solo_waiter&) = delete;
        void mark() noexcept {
            if (!on_) {
                st_.solo_waiters.fetch_add(1, std::memory_order_seq_cst);
                on_ = true;
            }
        }

    private:
        pool_state& st_;
        bool on_ = false;
    };

    /// Waits until no exclusive section runs, freeing the pool from a solo slot if one holds
    /// it (the caller runs no attempt; it counts as a waiter in `w` from then on).
    void wait_for_no_exclusive(solo_waiter& w) noexcept {
        for (std::uint32_t f; (f = exclusive_flag.load(std::memory_order_acquire)) != 0;) {
            if (is_solo_flag(f)) {
                w.mark();
                // Another thread takes the pool back already (revoke_solo): it clears the flag
                // once the solo slot runs no attempt. Waiting for that spares this thread a
                // second heavy fence, which costs microseconds when the other CPUs run threads
                // of the process (the solo thread's own attempt, backing off, is such a thread).
                if (solo_revoke.load(std::memory_order_seq_cst) == 0)
                    revoke_solo(f);
                sched(sched_point::spin, &exclusive_flag);
                cpu_relax();
                continue;
            }
            sched(sched_point::spin, &exclusive_flag);
            cpu_relax();
        }
    }

    // ---- exclusive sections: serial transactions, close, recover ------------------------

    /// Waits until no transaction runs and keeps new ones from starting. The caller must not
    /// be inside a transaction attempt.
    void lock_exclusive() noexcept {
        solo_waiter waiting(*this);
        std::uint32_t expected = 0;
        while (!exclusive_flag.compare_exchange_weak(expected, 1, std::memory_order_seq_cst)) {
            if (is_solo_flag(expected)) { // a solo slot gives the pool back first
                waiting.mark();
                revoke_solo(expected);
            }
            expected = 0;
            sched(sched_point::spin, &exclusive_flag);
            cpu_relax();
        }
        heavy_fence(); // every published mark is visible now; later attempts see the flag
        for (const auto& s : slots)
            while (s->active_since.load(std::memory_order_seq_cst) != 0) {
                sched(sched_point::spin, s.get());
                cpu_relax();
            }
    }
    void unlock_exclusive() noexcept { exclusive_flag.store(0, std::memory_order_release); }

    /// Sets up the volatile view of the mapped, validated pool.
    void init_after_map(const pool_options& opt) {
        enable_asymmetric_fences(); // before the pool's first transaction
        header = reinterpret_cast<pool_header*>(base);
        mode = opt.mode;
        write_back_mode = resolve_write_back(opt.write_back, log_choice);
        write_back_lines = opt.write_back_lines == 0 ? 1 : opt.write_back_lines;
        solo_after = opt.solo_after;
        populate_on_use = opt.populate && !opt.prefault && persist.mode() == persistence::kind::cpu;
#if defined(TLPTM_TSAN)
        populate_ahead = false;
#else
        populate_ahead = populate_on_use && opt.populate_ahead;
#endif
        if (populate_ahead && !ahead_done) {
            ahead_words = header->heap_size / superblock_bytes / 64 + 1;
            ahead_done = std::make_unique<std::atomic<std::uint64_t>[]>(ahead_words);
        }
        heap_begin = header->heap_offset;
        orecs.set_heap_begin(heap_begin);
        heap_end = header->heap_offset + header->heap_size;
        meta_begin = header->meta_offset;
        meta_end = header->meta_offset + header->meta_size;
        slots.clear();
        for (std::uint32_t i = 0; i < header->max_threads; ++i) {
            auto s = std::make_unique<thread_slot>();
            s->pool = this;
            s->index = i;
            s->ring.base = base + header->log_offset + std::uint64_t{i} * header->ring_size;
            s->ring.size = header->ring_size;
            s->surely_fit_words = words_that_surely_fit(mode, s->ring.capacity());
            s->solo_countdown = s->solo_window = solo_after;
            slots.push_back(std::move(s));
        }
    }

    /// Settles the slot a thread leaves behind when it exits, so that its write-back does not
    /// hold CT back until the next checkpoint, gives back the pool if the thread holds it solo
    /// (else the next thread to run would revoke it, a heavy fence), and gives the slot up.
    /// The slot is entered for that (its context is touched only by the attempt that runs in
    /// it), without looking at taking the pool solo; if that is not possible (an exclusive
    /// section, a thief), a later checkpoint settles it instead.
    void settle_on_exit(thread_slot& s, thread_record& me) noexcept {
        sched(sched_point::slot, &s);
        // While the thread holds the slot, nobody else settles it on its behalf but a
        // checkpoint: wait out an exclusive section (or a thief) rather than leave it behind.
        solo_waiter waiting(*this);
        for (;;) {
            const bool own_solo = exclusive_flag.load(std::memory_order_acquire) == solo_flag(s) &&
                                  solo_thread.load(std::memory_order_relaxed) == me.token() &&
                                  !mutated(mutation::exit_ignores_solo);
            if ((!own_solo && s.unapplied_ts.load(std::memory_order_acquire) == 0) ||
                s.holder.load(std::memory_order_relaxed) != me.token())
                break;
            if (own_solo && solo_revoke.load(std::memory_order_seq_cst) != 0) {
                // Another thread takes the pool back (revoke_solo): it clears the flag as soon
                // as no attempt runs in the slot, so wait for that without entering the slot.
                sched(sched_point::spin, &exclusive_flag);
                std::this_thread::yield();
                continue;
            }
            // Its mark, published and withdrawn again and again, would hold a section back:
            // wait for the section to end (a solo slot of another thread gives the pool back;
            // this thread's own is entered as it is).
            if (!own_solo)
                wait_for_no_exclusive(waiting);
            if (mutated(mutation::exit_ignores_solo) ? enter_held<true>(s, me)
                                                     : enter_held<false>(s, me)) {
                if (s.unapplied_ts.load(std::memory_order_relaxed) != 0) {
                    try {
                        settle(s, s.pctx);
                    } catch (...) {
                        // settle poisoned the pool; a poisoned pool never advances CT again.
                    }
                }
                if (s.solo && !mutated(mutation::exit_ignores_solo))
                    give_back_solo(s);
                leave(s, me);
                break;
            }
            sched(sched_point::spin, &s);
            std::this_thread::yield();
        }
        release_slot(s, me);
    }

    /// Starts a new generation of the slot's ring at offset 0. Every entry of the old
    /// generation must already be covered by the persisted CT: the new generation makes them
    /// fail validation. base_ts is stored before the generation in the same line, so a durable
    /// generation implies a durable base_ts.
    ///
    /// The header line is made durable with its own fence before any entry of the generation
    /// is written. Leaving it to the entry's F1 would let the entry's non-temporal stores
    /// persist without the header: recovery would drop that transaction, the next opening would
    /// reuse the same generation number, and the dropped entry would come back to life as soon
    /// as the header line reached persistent memory (tests/crash_test.cpp, "ring generation
    /// reuse"). One fence per ring pass and per thread and opening.
    void new_generation(thread_slot& s) {
        s.gen = s.ring.generation() + 1;
        // Below every ts taken later (a commit's ts exceeds its slot's last_ts).
        s.last_ts = std::max(s.last_ts, clock.load(std::memory_order_acquire));
        __atomic_store_n(s.ring.base_ts_word(), s.last_ts, __ATOMIC_RELEASE);
        __atomic_store_n(s.ring.generation_word(), s.gen, __ATOMIC_RELEASE);
        guarded([&] {
            persist.stored(s.ring.base, 16);
            persist.flush(s.pctx, s.ring.base, 16);
            persist.fence(s.pctx);
        });
        s.head = 0;
        s.tail_line.fill(0);
    }

    /// pool::prepare_thread's work, with the slot held between attempts: attaches it as its
    /// first commit would (populate, new generation), then writes the first word of every page
    /// of the ring back with the value it holds. A page fault on first touch is not only the
    /// kernel's: under a hypervisor that shadows the guest's page tables (the reference
    /// machine), a page that MADV_POPULATE_WRITE mapped still cost 4.7 us at its first write
    /// from user space (12 us without populating, 0.01 us on the second write), and 7 to 40 us
    /// while another thread committed: one stall per 4 KiB of log in a thread's first pass over
    /// its ring. The ring belongs to the slot's holder and no other thread writes it, so
    /// storing a word's own value changes nothing that a crash or a reader could see. Not in
    /// msync mode: a written file page is dirty, and writeback would write it out for nothing.
    void prepare_ring(thread_slot& s) {
        if (!s.attached)
            reserve_ring(s, 0);
        if (persist.mode() != persistence::kind::cpu)
            return;
        for (std::size_t at = 0; at < s.ring.size; at += 4096) {
            auto* w = reinterpret_cast<std::uint64_t*>(s.ring.base + at);
            __atomic_store_n(w, __atomic_load_n(w, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        }
    }

    /// Makes room for an entry of up to `n` bytes in the slot's ring, wrapping to the start
    /// when the rest of the ring is too short. Called by the slot's thread before it takes
    /// its commit timestamp (so that its own in_flight never holds CT back).
    void reserve_ring(thread_slot& s, std::size_t n) {
        if (!s.attached) {
            // First use in this opening: recovery left every entry of the ring <= CT.
            populate(s.ring.base, std::min<std::size_t>(s.ring.size, std::size_t{4} << 20));
            new_generation(s);
            s.attached = true;
            return;
        }
        if (s.head + n <= s.ring.capacity())
            return;
        // I2: the ring space of an entry may be reused only once the persisted CT covers it.
        // This thread's entries are applied; others' older transactions may still be in
        // flight, so wait for them. The checkpoint's fence orders CT before the generation
        // switch that hides the old entries from recovery.
        for (unsigned spins = 0;; ++spins) {
            checkpoint(s.pctx);
            if (poisoned())
                throw_poisoned();
            if (durable_checkpoint() >= s.last_ts) // I2: a durable CT, never the header word
                break;
            sched(sched_point::spin, &s);
            if (spins > 64)
                std::this_thread::yield();
            cpu_relax();
        }
        new_generation(s);
    }
};

/// The slot this thread holds in each pool (tried first by its next transaction); at thread
/// exit each one's pending write-back is settled and the slot given up.
struct thread_registry {
    struct binding {
        std::uint64_t pool_id;
        std::weak_ptr<pool_state> pool;
        thread_slot* slot;
    };
    std::vector<binding> bindings;

    thread_registry() = default;
    thread_registry(const thread_registry&) = delete;
    thread_registry& operator=(const thread_registry&) = delete;

    ~thread_registry() {
        if (!record_)
            return;
        for (auto& b : bindings)
            if (auto p = b.pool.lock())
                p->settle_on_exit(*b.slot, *record_);
        thread_record::release(*record_);
    }

    /// The thread's record (the holder of its slots), made on first use.
    thread_record& record() {
        if (!record_) [[unlikely]]
            record_ = &thread_record::acquire();
        return *record_;
    }

    /// The slot the calling thread's next transaction on `pool` tries first (the one it holds,
    /// or one to try: transactions take slots, see pool_state::enter).
    [[gnu::always_inline]] thread_slot& slot_for(const std::shared_ptr<pool_state>& pool) {
        if (pool->id == last_pool_id_) [[likely]] // the pool of the thread's last transaction
            return *last_slot_;
        return bind(pool);
    }

    /// slot_for() of a pool other than the last one.
    [[gnu::noinline]] thread_slot& bind(const std::shared_ptr<pool_state>& pool) {
        for (auto& b : bindings)
            if (b.pool_id == pool->id) {
                last_pool_id_ = b.pool_id;
                last_slot_ = b.slot;
                return *b.slot;
            }
        std::erase_if(bindings, [](const binding& b) { return b.pool.expired(); });
        thread_slot* s = pool->suggest_slot();
        bindings.push_back(binding{pool->id, pool, s});
        last_pool_id_ = pool->id;
        last_slot_ = s;
        return *s;
    }

    /// Records the slot the thread's transaction on `pool` took (the thread holds it now).
    void remember(const pool_state& pool, thread_slot& s) noexcept {
        for (auto& b : bindings)
            if (b.pool_id == pool.id)
                b.slot = &s;
        if (last_pool_id_ == pool.id)
            last_slot_ = &s;
    }

    /// Forgets the binding to `pool` (the pool is closing).
    void forget(std::uint64_t pool_id) {
        std::erase_if(bindings, [&](const binding& b) { return b.pool_id == pool_id; });
        if (last_pool_id_ == pool_id)
            last_pool_id_ = 0;
    }

private:
    thread_record* record_ = nullptr;
    /// The binding used last (pool ids are never reused, and never 0).
    std::uint64_t last_pool_id_ = 0;
    thread_slot* last_slot_ = nullptr;
};

inline thread_local thread_registry this_thread_registry;

/// The transaction the calling thread is running, or nullptr.
inline thread_local thread_slot* current_tx = nullptr;

// ---- creating and opening pool files -------------------------------------------------------

inline std::uint32_t env_u32(const char* name, std::uint32_t fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v)
        return fallback;
    char* end = nullptr;
    unsigned long x = std::strtoul(v, &end, 10);
    if (*end != '\0' || x > 0xFFFFFFFFul)
        throw error(std::string("tlptm: environment variable ") + name +
                    " must be a non-negative integer, got '" + v + "'");
    return static_cast<std::uint32_t>(x);
}

inline void lock_file(int fd, const std::string& path) {
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EWOULDBLOCK)
            throw pool_error(path, "the pool is already open (by another process or another "
                                   "pool object in this one); a pool is opened by one owner at "
                                   "a time");
        throw pool_error(path, "cannot lock the pool file", err);
    }
}

inline std::string to_hex(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
    return buf;
}

// Where pools are mapped when the caller does not choose: far from the heap, the libraries
// and the stack. ThreadSanitizer only supports application memory below 512 GiB (or at the
// very top), so a TSan build uses [64 GiB, 480 GiB) instead; a pool created there opens in
// any build but AddressSanitizer ones.
#if defined(TLPTM_TSAN)
inline constexpr std::uint64_t default_base_lo = std::uint64_t{64} << 30;
inline constexpr std::uint64_t default_base_hi = std::uint64_t{480} << 30;
inline constexpr std::uint64_t default_base_step = std::uint64_t{1} << 30;
#else
inline constexpr std::uint64_t default_base_lo = std::uint64_t{16} << 40;
inline constexpr std::uint64_t default_base_hi = std::uint64_t{96} << 40;
inline constexpr std::uint64_t default_base_step = std::uint64_t{64} << 30;
#endif

/// Maps the file at exactly `addr`, with MAP_SYNC if the file is on persistent memory.
inline void map_fixed(pool_state& st, std::uintptr_t addr, std::size_t size) {
    void* want = reinterpret_cast<void*>(addr);
    void* got = ::mmap(want, size, PROT_READ | PROT_WRITE,
                       MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED_NOREPLACE, st.fd, 0);
    st.map_sync = got != MAP_FAILED;
    // Not persistent memory (EOPNOTSUPP, EINVAL), or a tool that refuses MAP_SYNC in its own
    // way (valgrind: EEXIST): map it plainly; a range truly in use fails again below.
    if (got == MAP_FAILED)
        got =
            ::mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, st.fd, 0);
    if (got == MAP_FAILED) {
        int err = errno;
        if (err == EEXIST)
            throw pool_error(st.path, "cannot map the pool at its base address 0x" + to_hex(addr) +
                                          ": the range is already in use in this process "
                                          "(another pool or mapping occupies it)");
        throw pool_error(st.path, "mmap failed", err);
    }
    if (got != want) { // a kernel older than 4.17 ignores MAP_FIXED_NOREPLACE
        ::munmap(got, size);
        throw pool_error(st.path, "cannot map the pool at its base address 0x" + to_hex(addr) +
                                      " (the kernel placed it elsewhere)");
    }
    st.base = static_cast<std::uint8_t*>(got);
    st.size = size;
}

/// pool_options::prefault: maps every page for writing now rather than on first touch. Best
/// effort: a kernel without MADV_POPULATE_WRITE (before 5.14) leaves the faults to first use.
inline void prefault_pages(pool_state& st, const pool_options& opt) {
    if (opt.prefault)
        (void)::madvise(st.base, st.size, MADV_POPULATE_WRITE);
}

/// log_write::automatic: the measured method for the device the pool file is on, measured
/// once per device and process on `area` (part of the pool's log rings, which no one writes
/// while the pool opens), so that a program or test opening many pools measures once.
inline log_write_choice automatic_log_write(int fd, std::uint8_t* area, std::size_t bytes) {
    static std::mutex m;
    static std::vector<std::pair<dev_t, log_write_choice>> measured;
    struct stat sb {};
    const bool known = ::fstat(fd, &sb) == 0;
    std::lock_guard<std::mutex> g(m);
    // A choice measured on rings too small for the new blocks' rounds is measured again on
    // rings that have room for them.
    const bool blocks_fit = bytes >= new_block_area_offset + 2 * new_block_round_bytes;
    auto it = std::find_if(measured.begin(), measured.end(),
                           [&](const auto& m) { return known && m.first == sb.st_dev; });
    if (it != measured.end() && (it->second.new_block_non_temporal_ns > 0 || !blocks_fit))
        return it->second;
    log_write_choice c = measure_log_write(area, bytes);
    if (it != measured.end())
        it->second = c;
    else if (known)
        measured.emplace_back(sb.st_dev, c);
    return c;
}

/// Chooses how stores become durable for this mapping, and how log entries are written
/// (`rings`: the log rings' bytes, where log_write::automatic measures).
inline void choose_persistence(pool_state& st, const pool_options& opt, std::uint8_t* rings,
                               std::size_t ring_bytes) {
    std::uint32_t write_ns =
        opt.emulate_write_ns ? *opt.emulate_write_ns : env_u32("TLPTM_EMULATE_WRITE_NS", 0);
    bool emulate_env = env_u32("TLPTM_EMULATE_PMEM", 0) != 0;
    persistence::kind k = persistence::kind::msync;
    switch (opt.durability) {
    case durability::automatic:
        if (st.map_sync || emulate_env || pmem_is_pmem(st.base, st.size))
            k = persistence::kind::cpu;
        break;
    case durability::msync:
        k = persistence::kind::msync;
        break;
    case durability::emulate_pmem:
        k = persistence::kind::cpu;
        break;
    case durability::pmem:
        if (!st.map_sync)
            throw pool_error(st.path, "durability::pmem requested but the file is not on "
                                      "persistent memory (MAP_SYNC is not supported there)");
        k = persistence::kind::cpu;
        break;
    }
    st.log_choice = log_write_choice{};
    if (opt.log_write != log_write::automatic)
        st.log_choice.method = st.log_choice.large_method = opt.log_write;
    else if (k == persistence::kind::cpu && opt.policy == nullptr)
        st.log_choice = automatic_log_write(st.fd, rings, ring_bytes);
    if (opt.large_log_write && *opt.large_log_write != log_write::automatic)
        st.log_choice.large_method = *opt.large_log_write;
    if (opt.new_block_write && *opt.new_block_write != log_write::automatic)
        st.log_choice.new_blocks = *opt.new_block_write;
    else if (st.log_choice.new_block_non_temporal_ns == 0) // not measured
        st.log_choice.new_blocks = new_blocks_like(st.log_choice.method);
    st.persist = persistence(k, opt.policy, write_ns, st.log_choice.method,
                             st.log_choice.large_method, st.log_choice.new_blocks);
}

/// Creates a new pool file. Throws pool_error (exists, no space, cannot map, options that
/// cannot make a pool).
inline std::shared_ptr<pool_state> create_state(const std::string& path, const pool_options& opt) {
    if (opt.max_threads == 0 || opt.max_threads > 4096)
        throw pool_error(path, "pool_options::max_threads must be in 1..4096");
    if (opt.log_capacity != 0 &&
        (opt.log_capacity < 4096 || opt.log_capacity > (std::size_t{1} << 31)))
        throw pool_error(path, "pool_options::log_capacity must be 0 (automatic) or in "
                               "4 KiB..2 GiB");
    std::uint64_t size = round_up(opt.size, 4096);
    std::uint64_t log_capacity =
        opt.log_capacity != 0 ? opt.log_capacity : auto_log_capacity(size, opt.max_threads);
    geometry g;
    if (!compute_geometry(size, opt.max_threads, log_capacity, opt.root_capacity, g))
        throw pool_error(
            path, "pool_options::size " + std::to_string(opt.size) +
                      " is too small for max_threads = " + std::to_string(opt.max_threads) +
                      ", log_capacity = " +
                      (opt.log_capacity != 0 ? std::to_string(opt.log_capacity)
                                             : "automatic (" + std::to_string(log_capacity) + ")") +
                      " and root_capacity = " + std::to_string(opt.root_capacity) +
                      ": the smallest pool with these options is " +
                      std::to_string(
                          minimum_pool_size(opt.max_threads, opt.log_capacity, opt.root_capacity)) +
                      " bytes");
    if (opt.base_address % 4096 != 0 || opt.base_address >= max_user_address ||
        (opt.base_address != 0 && size > max_user_address - opt.base_address))
        throw pool_error(path, "pool_options::base_address must be page aligned and leave "
                               "room for the pool below 0x7fff00000000");

    auto st = std::make_shared<pool_state>();
    st->path = path;
    st->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (st->fd < 0) {
        int err = errno;
        throw pool_error(path,
                         err == EEXIST ? "cannot create: the file already exists"
                                       : "cannot create the pool file",
                         err == EEXIST ? 0 : err);
    }
    try {
        lock_file(st->fd, path);
        // Every area but the header is valid zero-filled (empty rings, free superblocks,
        // empty arenas), so the file is only sized: sparse unless asked to reserve it.
        if (opt.preallocate) {
            if (int err = ::posix_fallocate(st->fd, 0, static_cast<off_t>(size)); err != 0)
                throw pool_error(path, "cannot allocate " + std::to_string(size) + " bytes", err);
        } else if (::ftruncate(st->fd, static_cast<off_t>(size)) != 0) {
            throw pool_error(path, "cannot size the file to " + std::to_string(size) + " bytes",
                             errno);
        }
        std::uint8_t uuid[16];
        if (::getrandom(uuid, sizeof uuid, 0) != sizeof uuid)
            throw pool_error(path, "cannot read random bytes for the pool uuid", errno);
        if (opt.base_address != 0) {
            map_fixed(*st, opt.base_address, size);
        } else {
            // A randomised slot of the default range, stepping by a power of two >= the size.
            std::uint64_t step = default_base_step;
            while (step < size)
                step <<= 1;
            std::uint64_t lo = default_base_lo, hi = default_base_hi;
            std::uint64_t nslots = (hi - lo) / step;
            std::uint64_t r;
            std::memcpy(&r, uuid, sizeof r);
            for (std::uint64_t i = 0; i < 64 && !st->base; ++i) {
                std::uint64_t addr = lo + ((r + i * 7919) % nslots) * step;
                try {
                    map_fixed(*st, addr, size);
                } catch (const pool_error&) {
                    if (i == 63)
                        throw;
                }
            }
        }
        choose_persistence(*st, opt, st->base + g.log_offset, g.ring_size);
        auto* h = reinterpret_cast<pool_header*>(st->base);
        h->version = layout_version;
        h->header_size = header_bytes;
        std::memcpy(h->uuid, uuid, sizeof uuid);
        h->pool_size = size;
        h->base_address = reinterpret_cast<std::uintptr_t>(st->base);
        h->log_offset = g.log_offset;
        h->ring_size = g.ring_size;
        h->max_threads = g.max_threads;
        h->flags = 0;
        h->meta_offset = g.meta_offset;
        h->meta_size = g.meta_size;
        h->heap_offset = g.heap_offset;
        h->heap_size = g.heap_size;
        h->root_offset = g.root_offset;
        h->root_capacity = g.root_capacity;
        h->superblock_size = superblock_bytes;
        h->checkpoint_ts = 0;
        h->root_info = 0;
        // The magic goes last: a crash during creation leaves a file that open() rejects.
        std::memcpy(h->magic, pool_magic, sizeof pool_magic);
        h->checksum = header_checksum(*h);
        std::memset(h->magic, 0, sizeof h->magic);
        st->persist.stored(h, header_bytes);
        st->persist.flush(st->admin_ctx, h, header_bytes);
        st->persist.fence(st->admin_ctx);
        std::memcpy(h->magic, pool_magic, sizeof pool_magic);
        st->persist.stored(h->magic, sizeof h->magic);
        st->persist.flush(st->admin_ctx, h->magic, sizeof h->magic);
        st->persist.fence(st->admin_ctx);
        prefault_pages(*st, opt);
        st->init_after_map(opt);
    } catch (...) {
        ::unlink(path.c_str());
        throw;
    }
    return st;
}

/// Opens and maps an existing pool file after validating its header. Recovery is the caller's
/// next step. Throws pool_error or layout_error.
inline std::shared_ptr<pool_state> open_state(const std::string& path, const pool_options& opt) {
    auto st = std::make_shared<pool_state>();
    st->path = path;
    st->fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (st->fd < 0)
        throw pool_error(path, "cannot open the pool file", errno);
    lock_file(st->fd, path);
    struct stat sb {};
    if (::fstat(st->fd, &sb) != 0)
        throw pool_error(path, "cannot stat the pool file", errno);
    auto file_size = static_cast<std::uint64_t>(sb.st_size);
    auto h = std::make_unique<pool_header>();
    std::memset(h.get(), 0, sizeof *h);
    if (file_size >= header_bytes) {
        ssize_t got = ::pread(st->fd, h.get(), header_bytes, 0);
        if (got != static_cast<ssize_t>(header_bytes))
            throw pool_error(path, "cannot read the pool header", got < 0 ? errno : 0);
    }
    validate_header(*h, file_size, path);
    map_fixed(*st, h->base_address, h->pool_size);
    // The mapping shows the same bytes we validated (we hold the file lock).
    if (std::memcmp(st->base, h.get(), header_bytes) != 0)
        throw layout_error("tlptm: pool '" + path + "': header changed while opening");
    choose_persistence(*st, opt, st->base + h->log_offset, h->ring_size);
    prefault_pages(*st, opt);
    st->init_after_map(opt);
    return st;
}

} // namespace tlptm::detail
