// tlptm — the persistence policy: how bytes reach the persistence domain.
//
// Every write to the pool that matters for durability goes through detail::persistence:
// non-temporal copies (log entries), flushes of ranges (written-back data, AALO memory,
// metadata), and fences. The production path uses libpmem; a file that is not persistent
// memory is made durable with msync unless the pool is asked to emulate persistent memory.
#pragma once

#include <libpmem.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include <tlptm/errors.hpp>
#include <tlptm/stats.hpp>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tlptm {

/// How the pool makes stores durable.
enum class durability {
    /// Persistent memory (a DAX mapping with MAP_SYNC, or PMEM_IS_PMEM_FORCE=1, or
    /// TLPTM_EMULATE_PMEM=1) gets CPU flushes; any other file gets msync.
    automatic,
    /// Always msync the pages written (correct on any file system, slow).
    msync,
    /// CPU flushes and fences only, as on real persistent memory. On a file that is not
    /// persistent memory this is durable against process crashes but not power loss: use it to
    /// measure, or with /dev/shm as the paper's NVM emulation does.
    emulate_pmem,
    /// Require real persistent memory (MAP_SYNC); opening anything else fails.
    pmem,
};

/// How committed data, written back in place after the commit point, becomes durable.
enum class write_back {
    /// Each commit flushes the lines it wrote back; the thread's next commit fence (or a thread
    /// that needs the checkpoint to advance) completes them.
    eager,
    /// Commits write back without flushing. A thread's dirty lines are flushed in one batch with
    /// one fence when they reach pool_options::write_back_lines, or when the checkpoint must
    /// advance (a log ring wraps, freed memory is wanted, the pool closes). One persistence
    /// round trip per update transaction; the log holds the rest until then.
    lazy,
    /// As eager, but a commit flushes its lines right after writing them back, so that the
    /// write-back is under way while the thread runs its next transaction, instead of being
    /// issued just before the next commit's fence (which then waits for it). Lines that the
    /// thread's commits keep writing again are left to the next commit, as in eager mode: when
    /// a commit writes a line of the one before it, it does not flush its own lines early.
    /// Durable at the same point as eager (the thread's next fence, or a helper's). The next
    /// commit's first locked instruction then counts as a round trip (stats::round_trips):
    /// the flushes may still be pending, although after a transaction's work they rarely are.
    /// Faster than eager by 0-95 ns a transaction on an AMD EPYC guest, slower by 80-165 ns on
    /// b and c on an Intel Xeon guest, whose locked instructions waited for the flushes
    /// (docs/design.md, "Writing back"); hence not the default.
    prompt,
    /// Eager for a commit whose fence waits for flushes of its own anyway (the new blocks its
    /// log entry covers: an insert) or that writes back more than half of
    /// pool_options::write_back_lines, lazy for one whose fence would otherwise wait only for
    /// its log entry (an update of existing data). A pure update leaves its lines unflushed; the
    /// thread's next commit that flushes anyway flushes them under the same fence, and a thread
    /// that only updates flushes them in batches of pool_options::write_back_lines, as lazy
    /// write-back does. A flush (CLWB) that is written back to memory takes longer to persist
    /// than a log entry's non-temporal stores (a small entry + SFENCE: 118-126 ns non-temporal,
    /// 181-197 ns with stores + CLWB, measured as pools opened on an AMD EPYC guest), so an
    /// update that flushes adds that difference to its round trip, while an insert pays it for
    /// its new node anyway.
    adaptive,
    /// The default: adaptive if the pool measured, when it opened, that a flushed line takes
    /// clearly longer to persist than a small log entry written with non-temporal stores
    /// (detail::adaptive_flush_ratio), eager otherwise (nothing measured: msync, a test policy,
    /// an explicit log_write; or entries written with stores and CLWB, whose fence waits for a
    /// flush anyway). pool::chosen_write_back() tells which.
    automatic,
};

/// The name of a write-back policy, as pool_options spells it.
inline const char* to_string(write_back w) noexcept {
    switch (w) {
    case write_back::eager:
        return "eager";
    case write_back::lazy:
        return "lazy";
    case write_back::prompt:
        return "prompt";
    case write_back::adaptive:
        return "adaptive";
    case write_back::automatic:
        return "automatic";
    }
    return "?";
}

/// How a commit's log entry reaches persistent memory (CPU flushes only: msync writes pages).
/// Either way the entry is durable after the commit's fence (F1); only the instructions and
/// the bytes written back differ (docs/design.md, "Writing the log entry").
enum class log_write {
    /// The fastest of the three below on this machine, for small entries and for large ones
    /// apart, measured when the pool is opened (the default); whole lines must win by 5 % over
    /// whole words, stores and CLWB by 10 % over the non-temporal way (log_write_choice).
    /// Which one wins depends on the CPU: on an AMD EPYC guest whole-word non-temporal stores
    /// persisted a small entry in 120-150 ns against 157-195 ns for stores and CLWB, and whole
    /// lines in 98-100 ns; on Intel Xeon guests a steady stream of small non-temporal entries
    /// took 305-420 ns each and stores with CLWB 130-245 ns (docs/design.md). The choice is in
    /// pool::chosen_log_write(). With a test's persist_policy it is non_temporal.
    automatic,
    /// Non-temporal stores of the whole aligned 8-byte words around the entry: the entry's
    /// bytes go to memory without passing through the cache and the next entry never reads
    /// the ring's line back.
    non_temporal,
    /// Non-temporal stores of every whole cache line the entry touches: the bytes of the
    /// entries before it in its first line are written again with the values they hold (the
    /// slot keeps a copy of the ring's tail line), the bytes after it up to the line's end as
    /// zeros. More bytes streamed than non_temporal (counted in stats::streamed_bytes; the
    /// medium writes whole lines either way), but no partial line: on the AMD EPYC (Zen 4)
    /// guest of 2026-12-07 a small entry + SFENCE took 98-100 ns this way against 116-120 ns
    /// as whole words (docs/design.md, "Writing the log entry"). Automatic chooses it only
    /// where it measures faster (log_write_choice::lines_margin).
    non_temporal_lines,
    /// Ordinary stores, then a flush (CLWB) of every line the entry touches. Whole lines are
    /// written back, including the part of a line that earlier entries already made durable
    /// (counted in stats::log_lines_flushed). On a CPU whose CLWB evicts the line, the next
    /// entry's store also reads the line back from the medium (the measurement sees that).
    store_and_flush,
};

/// The name of a log write method, as pool_options spells it.
inline const char* to_string(log_write w) noexcept {
    switch (w) {
    case log_write::automatic:
        return "automatic";
    case log_write::non_temporal:
        return "non_temporal";
    case log_write::non_temporal_lines:
        return "non_temporal_lines";
    case log_write::store_and_flush:
        return "store_and_flush";
    }
    return "?";
}

/// The methods an opening writes log entries with, one for entries shorter than
/// large_entry_bytes and one for the others, and, when pool_options::log_write was automatic
/// on persistent memory (or its emulation), the measurement that chose them: the mean time to
/// write one entry at a packed position of a log ring and fence it, in a steady stream of
/// entries, best of several rounds, for small entries (12-36 bytes, what a small update logs)
/// and larger ones (72-520 bytes). A given log_write sets both methods, and the new blocks'.
///
/// The blocks an AALO transaction allocated and its entry covers (an insert's new node) are
/// made durable by the same fence, one of two ways (`new_blocks`): non_temporal writes their
/// words again in place with non-temporal stores, store_and_flush flushes their lines. The two
/// differ by CPU far more than the entries do: on the AMD EPYC (Zen 5) guest of 2026-12-06 a
/// 32-byte block and a small entry took 123-128 ns rewritten, 193 ns flushed; on the AMD EPYC
/// (Zen 4) guest of 2026-12-07, 225-304 ns rewritten, 166-177 ns flushed (a non-temporal store
/// to a line in the cache must first take the line out, and the next block in that line brings
/// it back). log_write::automatic measures them too, where the rings leave room for it
/// (new_block_*_ns, else 0 and new_blocks follows the small entries' method).
struct log_write_choice {
    static constexpr std::size_t large_entry_bytes = 64;
    /// Whole lines are chosen over whole words where they take less than this fraction of
    /// their time: only a margin for the measurement's noise, since the same lines reach the
    /// medium either way (ECC memory and Optane write a partial line as a whole one, or more).
    static constexpr double lines_margin = 0.95;
    /// Stores and flushes (or, for new blocks, flushes) are chosen over non-temporal stores
    /// where they take less than this fraction of their time: they write whole lines back,
    /// and leave them in the cache.
    static constexpr double flush_margin = 0.9;
    /// The size of block measure_log_write writes: a node of a linked structure (the
    /// workloads' hash-table node takes 32 bytes), two to a cache line.
    static constexpr std::size_t measured_block_bytes = 32;
    log_write method = log_write::non_temporal;       ///< entries below large_entry_bytes
    log_write large_method = log_write::non_temporal; ///< entries of large_entry_bytes or more
    log_write new_blocks = log_write::non_temporal;   ///< the blocks an entry covers
    /// False: given by pool_options::log_write, or msync mode, or a test policy.
    bool measured = false;
    double non_temporal_small_ns = 0, store_and_flush_small_ns = 0;
    double non_temporal_large_ns = 0, store_and_flush_large_ns = 0;
    /// The same with non-temporal stores of whole lines (log_write::non_temporal_lines).
    double non_temporal_lines_small_ns = 0, non_temporal_lines_large_ns = 0;
    /// The small entries' time written non-temporally the way `method` does: as whole lines
    /// if it chose them, else as whole words.
    double non_temporal_chosen_small_ns() const noexcept {
        return method == log_write::non_temporal_lines ? non_temporal_lines_small_ns
                                                       : non_temporal_small_ns;
    }
    /// Per new block (measured_block_bytes, packed as the allocator hands them out, stored
    /// with ordinary stores) with a small non-temporal entry and a fence: the block rewritten
    /// non-temporally, or flushed. 0: not measured.
    double new_block_non_temporal_ns = 0, new_block_store_and_flush_ns = 0;
};

/// Replaces the production persistence path, for tests that trace or crash the commit path.
/// Every call the library would make to persist bytes arrives here instead; ordinary stores are
/// announced through stored() after they happened. Not thread-safe unless the implementation is.
class persist_policy {
public:
    virtual ~persist_policy() = default;
    /// Copy n bytes to dst (in the pool) with non-temporal stores; durable after the next fence.
    virtual void stream(void* dst, const void* src, std::size_t n) = 0;
    /// Ordinary stores to [dst, dst + n) have just been made (they sit in the CPU cache).
    virtual void stored(const void* dst, std::size_t n) { (void)dst, (void)n; }
    /// Write back the cache lines of [addr, addr + n); durable after the next fence.
    virtual void flush(const void* addr, std::size_t n) = 0;
    /// Order and complete every earlier stream and flush.
    virtual void fence() = 0;
};

namespace detail {

inline constexpr std::size_t cache_line = 64;

/// Number of cache lines that [addr, addr + n) touches.
inline std::size_t lines_of(const void* addr, std::size_t n) noexcept {
    if (n == 0)
        return 0;
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    return (a + n - 1) / cache_line - a / cache_line + 1;
}

/// Busy-wait for about ns nanoseconds: the emulated extra write latency of persistent memory.
inline void spin_ns(std::uint64_t ns) noexcept {
    if (ns == 0)
        return;
    auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
    while (std::chrono::steady_clock::now() < end) {
#if defined(__x86_64__)
        _mm_pause();
#endif
    }
}

/// Copies n bytes to dst with non-temporal stores when dst and n are multiples of 8 (a log
/// entry widened to whole words): 8-byte stores up to a 16-byte boundary and at the end, 16-byte
/// stores between. libpmem's non-temporal copy writes a range's unaligned edges with ordinary
/// stores and CLWB, and an SFENCE then waits for the write-back as well: a 12-to-600-byte entry
/// persisted in 190-240 ns that way against 120-150 ns with whole-word non-temporal stores
/// (AMD EPYC guest, docs/design.md "Writing the log entry"). Other ranges go to libpmem.
/// Durable after a store fence.
inline void stream_copy(void* dst, const void* src, std::size_t n) noexcept {
#if defined(__x86_64__)
    auto d = reinterpret_cast<std::uintptr_t>(dst);
    if (d % 8 == 0 && n % 8 == 0) {
        const auto* s = static_cast<const std::uint8_t*>(src);
        const std::uintptr_t end = d + n;
        auto word = [&] {
            long long v;
            std::memcpy(&v, s, 8);
            _mm_stream_si64(reinterpret_cast<long long*>(d), v);
            d += 8;
            s += 8;
        };
        if (d % 16 != 0 && d < end)
            word();
        for (; d + 16 <= end; d += 16, s += 16)
            _mm_stream_si128(reinterpret_cast<__m128i*>(d),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
        if (d < end)
            word();
        return;
    }
#endif
    pmem_memcpy(dst, src, n, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
}

#if defined(__x86_64__)
/// Which instruction writes a cache line back (as libpmem chooses it: CLWB, else CLFLUSHOPT,
/// else CLFLUSH), read from CPUID once.
enum class line_flush : std::uint8_t { clflush, clflushopt, clwb };
inline const line_flush cpu_line_flush = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        if (b & (1u << 24))
            return line_flush::clwb;
        if (b & (1u << 23))
            return line_flush::clflushopt;
    }
    return line_flush::clflush;
}();

__attribute__((target("clwb"))) inline void clwb_lines(std::uintptr_t a,
                                                       std::uintptr_t end) noexcept {
    for (; a < end; a += 64)
        _mm_clwb(reinterpret_cast<void*>(a));
}
__attribute__((target("clflushopt"))) inline void clflushopt_lines(std::uintptr_t a,
                                                                   std::uintptr_t end) noexcept {
    for (; a < end; a += 64)
        _mm_clflushopt(reinterpret_cast<void*>(a));
}
/// The lines base + 64 * lines[k] for k < n, one call for the list (a function built for
/// CLWB cannot be inlined into code that is not).
__attribute__((target("clwb"))) inline void
clwb_line_list(const std::uint8_t* base, const std::uint64_t* lines, std::size_t n) noexcept {
    for (std::size_t k = 0; k < n; ++k)
        _mm_clwb(const_cast<std::uint8_t*>(base) + lines[k] * 64);
}
#endif

/// Writes back the cache lines of [addr, addr + n) with the CPU's flush instruction (what
/// pmem_flush does, without its indirect call). Durable after a store fence.
inline void flush_cpu_lines(const void* addr, std::size_t n) noexcept {
#if defined(__x86_64__)
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(addr) & ~std::uintptr_t{63};
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(addr) + n;
    switch (cpu_line_flush) {
    case line_flush::clwb:
        clwb_lines(a, end);
        return;
    case line_flush::clflushopt:
        clflushopt_lines(a, end);
        return;
    case line_flush::clflush:
        for (std::uintptr_t l = a; l < end; l += 64)
            _mm_clflush(reinterpret_cast<void*>(l));
        return;
    }
#else
    pmem_flush(addr, n);
#endif
}

/// Pages [first, second) of the pool, page-aligned, waiting for msync.
using page_range = std::pair<std::uintptr_t, std::uintptr_t>;

/// Group commit for msync mode: threads that fence at the same time share one msync.
///
/// A fence hands its thread's page ranges to the batch that is forming. If no sync is running,
/// the thread leads: it takes the whole batch and makes it durable with one call while later
/// fences form the next batch; otherwise it waits. A fence returns once a call that held its
/// ranges has returned (every such call began after the ranges were handed in). On a file
/// system each msync costs a write to the device and a cache flush, so N threads committing
/// together pay about one msync instead of N.
///
/// Gathering: threads that commit in a loop would otherwise alternate, each leading a batch of
/// its own (a waiter leads the moment the call before it returns, while that call's leader is
/// still running its next transaction). So a leader first waits for the threads that joined one
/// of the last two batches to join this one, at most as long as the last call took: a fence
/// waits at most one more call, and a thread that stopped committing is waited for at most
/// twice.
///
/// Grouping costs each waiter a sleep and a wake-up (a futex round trip, some microseconds).
/// Where msync is cheaper than that (a file in RAM, tmpfs: about a microsecond), every fence
/// makes its own call, as if there were no group; the group forms once the calls' average
/// duration reaches `group_above` (50 us by default) and dissolves when it falls below.
///
/// Whether grouping pays on slow calls depends on the file system: where the kernel overlaps
/// concurrent calls and batches their journal commits itself (ext4 with a journal), separate
/// calls were faster than one shared call; where each call flushes the device on its own (ext4
/// without a journal), one shared call was faster (docs/design.md). So, adaptively, the group
/// measures fences per second in windows of 64 fences, grouped and separate in turn at first,
/// then keeps the faster way and tries the other one window in eight.
///
/// A failed call fails every fence of its batch and every fence after it: durability is lost
/// and the pool is poisoned (pool_state::guarded), so no later batch is synced as if it were.
class sync_group {
public:
    /// Makes the ranges durable: 0, or an errno. Called unlocked, on several threads at once
    /// when fences make separate calls.
    using sync_fn = int (*)(std::span<const page_range> ranges, void* arg) noexcept;

    /// How fences share calls.
    enum class grouping : std::uint8_t {
        adaptive, ///< separate while calls are short; else whichever way measures faster
        always,   ///< every fence joins a batch (tests)
    };

    static constexpr std::chrono::microseconds default_group_above{50};
    static constexpr std::uint64_t window = 64;     ///< fences per measuring window
    static constexpr std::uint64_t probe_every = 8; ///< windows: one of them tries the other way

    explicit sync_group(sync_fn fn = &msync_hull, void* arg = nullptr,
                        grouping g = grouping::adaptive,
                        std::chrono::steady_clock::duration group_above = default_group_above)
        : fn_(fn), arg_(arg), grouping_(g), group_above_(group_above) {}
    sync_group(const sync_group&) = delete;
    sync_group& operator=(const sync_group&) = delete;

    /// Returns once `ranges` are durable, having emptied it, with the number of sync calls this
    /// thread made: 1 if it called alone or led its batch, 0 if another thread's call synced it
    /// (a thread only ever leads the batch that holds its own ranges: the batch forms until a
    /// leader takes it).
    /// @throw tlptm::error a sync call of this batch or an earlier one failed
    std::uint64_t sync(std::vector<page_range>& ranges) {
        if (ranges.empty())
            return 0;
        // A call of its own (short calls, or the adaptive choice): decided without the lock,
        // which short calls never take.
        if (separate() && failed_.load(std::memory_order_acquire) == 0) {
            const auto [took, err] = timed_call(ranges);
            ranges.clear();
            if (err == 0 && short_calls())
                return 1;
            std::lock_guard lk(m_);
            last_call_ = took;
            if (err != 0) {
                fail(err, forming_); // grouped fences still waiting fail too
                throw_failed();
            }
            count_fence();
            return 1;
        }
        std::unique_lock lk(m_);
        if (failed_ != 0) {
            ranges.clear();
            throw_failed();
        }
        forming_ranges_.insert(forming_ranges_.end(), ranges.begin(), ranges.end());
        ranges.clear();
        join(&ranges); // each thread has its own list: it names the thread
        const std::uint64_t mine = forming_;
        std::uint64_t calls = 0;
        while (done_ < mine) {
            if (leading_) {
                cv_.wait(lk);
                continue;
            }
            if (failed_ != 0)
                break; // no batch is synced after a failure
            // Lead the forming batch (it holds this thread's ranges: only a leader takes one).
            leading_ = true;
            gather(lk);
            const std::uint64_t batch = forming_++;
            members_ = 0;
            batch_.swap(forming_ranges_);
            lk.unlock();
            const auto [took, err] = timed_call(batch_);
            ++calls;
            batch_.clear();
            lk.lock();
            last_call_ = took;
            leading_ = false;
            done_ = batch;
            if (err != 0)
                fail(err, batch);
            cv_.notify_all();
        }
        // Its batch was not synced, or its call (or an earlier one) failed.
        if (failed_ != 0 && (done_ < mine || mine >= failed_batch_))
            throw_failed();
        count_fence();
        return calls;
    }

    /// The production call: one msync over the span from the lowest to the highest page, so a
    /// fence costs one call however many ranges it has (msync writes back only the dirty pages
    /// in the span; pages of the pool between the ranges are written no more often than their
    /// own fences would write them).
    static int msync_hull(std::span<const page_range> ranges, void*) noexcept {
        std::uintptr_t lo = ranges.front().first, hi = ranges.front().second;
        for (auto [l, h] : ranges) {
            lo = std::min(lo, l);
            hi = std::max(hi, h);
        }
        return ::msync(reinterpret_cast<void*>(lo), hi - lo, MS_SYNC) == 0 ? 0 : errno;
    }

    /// The fences are grouped now (for tests and measurements).
    bool grouped() {
        std::lock_guard lk(m_);
        return !separate();
    }

    /// Leaders that stopped waiting for a thread that did not join in time (for tests).
    std::uint64_t gather_timeouts() {
        std::lock_guard lk(m_);
        return gather_timeouts_;
    }

private:
    struct member {
        const void* who;     ///< the thread's pending list
        std::uint64_t batch; ///< the last batch it joined
    };

    enum way : std::uint8_t { separate_calls, grouped_calls };

    /// The next fence makes a call of its own (read unlocked: a stale answer only picks the
    /// other correct way for one fence).
    bool separate() const {
        return grouping_ == grouping::adaptive &&
               (short_calls() || way_.load(std::memory_order_relaxed) == separate_calls);
    }

    /// A fence returned: every `window` fences, the window's rate is the way's figure, and the
    /// next window takes the faster way, or the other one to measure it. Under m_.
    void count_fence() {
        if (grouping_ != grouping::adaptive || short_calls()) {
            window_fences_ = 0; // short calls: no choice to make
            return;
        }
        const auto now = std::chrono::steady_clock::now();
        if (window_fences_++ == 0) {
            window_start_ = now;
            return;
        }
        if (window_fences_ <= window)
            return;
        const double seconds = std::chrono::duration<double>(now - window_start_).count();
        const double r = static_cast<double>(window) / std::max(seconds, 1e-9);
        const way now_way = way_.load(std::memory_order_relaxed);
        rate_[now_way] = r; // the latest window: one bad window misleads for at most eight
        const way best =
            rate_[grouped_calls] >= rate_[separate_calls] ? grouped_calls : separate_calls;
        const way other = best == grouped_calls ? separate_calls : grouped_calls;
        way_.store(rate_[other] == 0 || ++windows_ % probe_every == 0 ? other : best,
                   std::memory_order_relaxed);
        window_fences_ = 0;
    }

    bool short_calls() const {
        return average_ns_.load(std::memory_order_relaxed) <
               std::chrono::duration_cast<std::chrono::nanoseconds>(group_above_).count();
    }

    /// Calls fn_ on the ranges (unlocked) and feeds its duration to the moving average that
    /// decides grouping. Returns the duration and fn_'s result.
    std::pair<std::chrono::steady_clock::duration, int>
    timed_call(std::span<const page_range> ranges) noexcept {
        const auto start = std::chrono::steady_clock::now();
        const int err = fn_(ranges, arg_);
        const auto took = std::chrono::steady_clock::now() - start;
        const std::int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
        const std::int64_t a = average_ns_.load(std::memory_order_relaxed);
        average_ns_.store(a == 0 ? std::max<std::int64_t>(ns, 1) : (7 * a + ns) / 8,
                          std::memory_order_relaxed);
        return {took, err};
    }

    /// Counts the caller in the forming batch. Under m_.
    void join(const void* who) {
        ++members_;
        auto it = std::find_if(recent_.begin(), recent_.end(),
                               [&](const member& m) { return m.who == who; });
        if (it == recent_.end())
            recent_.push_back({who, forming_});
        else
            it->batch = forming_;
        if (gathering_)
            joined_.notify_one();
    }

    /// Before the leader takes the forming batch: waits until every thread that joined one of
    /// the last two batches has joined it too, at most as long as the last call took. Under m_.
    void gather(std::unique_lock<std::mutex>& lk) {
        std::size_t active = 0;
        std::erase_if(recent_, [&](const member& m) { return m.batch + 64 < forming_; });
        for (const member& m : recent_)
            active += m.batch + 2 >= forming_;
        if (members_ >= active || last_call_.count() == 0)
            return;
        gathering_ = true;
        const auto until = std::chrono::steady_clock::now() + last_call_;
        while (members_ < active)
            if (joined_.wait_until(lk, until) == std::cv_status::timeout) {
                gather_timeouts_ += members_ < active;
                break;
            }
        gathering_ = false;
    }

    /// A call failed: batch `batch` and every later one fail. Under m_.
    void fail(int err, std::uint64_t batch) {
        if (failed_ == 0)
            failed_.store(err, std::memory_order_release);
        failed_batch_ = std::min(failed_batch_, batch);
        cv_.notify_all();
    }

    [[noreturn]] void throw_failed() const {
        throw error(std::string("tlptm: msync failed, the pool's durability is lost: ") +
                    std::strerror(failed_.load(std::memory_order_relaxed)));
    }

    sync_fn fn_;
    void* arg_;
    const grouping grouping_;
    const std::chrono::steady_clock::duration group_above_;
    std::mutex m_;
    std::condition_variable cv_;             ///< a call returned
    std::condition_variable joined_;         ///< a thread joined the batch a leader gathers
    std::vector<page_range> forming_ranges_; ///< the forming batch (under m_)
    std::vector<member> recent_;             ///< threads that joined lately
    std::size_t members_ = 0;                ///< threads in the forming batch
    std::chrono::steady_clock::duration last_call_{0}; ///< the last call's duration
    /// Moving average of the calls' durations, ns. Atomic: short calls update it unlocked (a
    /// lost update of the estimate does no harm).
    std::atomic<std::int64_t> average_ns_{0};
    std::uint64_t gather_timeouts_ = 0;
    std::atomic<way> way_{grouped_calls}; ///< on slow calls (adaptive); written under m_
    double rate_[2] = {0, 0};             ///< fences per second measured each way (0: not yet)
    std::uint64_t window_fences_ = 0, windows_ = 0;
    std::chrono::steady_clock::time_point window_start_;
    bool gathering_ = false;                         ///< a leader waits in gather()
    std::vector<page_range> batch_;                  ///< the batch being synced (its leader's only)
    std::uint64_t forming_ = 1;                      ///< number of the forming batch
    std::uint64_t done_ = 0;                         ///< the last batch whose call returned
    std::uint64_t failed_batch_ = ~std::uint64_t{0}; ///< the first batch that failed
    /// errno of the first failed call, 0 while none failed (written under m_, read unlocked by
    /// fences that call on their own)
    std::atomic<int> failed_{0};
    bool leading_ = false; ///< a call is running
};

/// The way the blocks an entry covers are made durable when they follow the small entries'
/// method `w`: flushed after stores and CLWB, else rewritten with non-temporal stores (whole
/// lines or words make no difference to a block, which is written whole).
constexpr log_write new_blocks_like(log_write w) noexcept {
    return w == log_write::store_and_flush ? log_write::store_and_flush : log_write::non_temporal;
}

/// Entries (or blocks) measure_log_write writes before it times a round, and times.
inline constexpr int measure_lead_in = 192, measure_per_round = 384;
/// The new blocks' rounds of measure_log_write (log_write_choice::new_blocks) take the bytes
/// after the entries' 64 KiB, one span of packed blocks per method, where the area has them:
/// an area of at least new_block_area_offset + 2 * new_block_round_bytes (100 KiB).
inline constexpr std::size_t new_block_area_offset = std::size_t{64} << 10;
inline constexpr std::size_t new_block_round_bytes =
    (measure_lead_in + measure_per_round) * log_write_choice::measured_block_bytes;

/// log_write::automatic's measurement: times the three ways of writing a log entry on `area`
/// (`bytes` >= 4096 of the pool's mapping, which no one else writes meanwhile) and returns the
/// fastest for small entries and the fastest for large ones. Every word is rewritten with the
/// value it holds, so nothing that a crash or a reader could see changes. The entries are laid
/// end to end as a ring lays them, each one fenced; rounds rotate between the methods, the
/// best round of each counts (the machines are shared and noisy); whole lines must win by 5 %
/// over whole words (log_write_choice::lines_margin), then stores with flushes (whole lines
/// written back, and left in the cache) by 10 % over the non-temporal way chosen. About 2 ms (AMD
/// EPYC guest). Where the area has new_block_area_offset + 2 * new_block_round_bytes, it then times
/// the two ways of making new blocks durable (log_write_choice::new_blocks) on the bytes after the
/// entries', in about 1 ms more, and flushing must win by 10 % there too.
///
/// Each round first writes entries it does not time: on the 2-vCPU Intel Xeon guest of
/// 2026-12-04 small non-temporal entries took 83 ns each on average in a burst of 48 after a
/// pause, 305 ns in a run of 1000 (stores and CLWB: 200-245 ns either way). A commit writes its
/// entries in such a steady stream; the earlier rounds of 48 timed entries measured the burst,
/// chose non-temporal stores there, and the workloads then ran 43-77 ns a transaction slower than
/// with stores and CLWB (docs/design.md, "Writing the log entry").
///
/// As in a commit, the bytes come from a volatile copy (an entry is built in DRAM), and each
/// method has its own third of the span: a non-temporal store to a line that is in the cache
/// must first take it out, and a commit's non-temporal entries never bring their lines in,
/// while stores and CLWB leave them there. Copying from the ring onto itself, and sharing the
/// lines between the methods, measured small non-temporal entries at 376 ns on the AMD EPYC
/// guest of 2026-12-04, against 118-140 ns written from a copy into lines of their own
/// (docs/design.md, "Writing the log entry").
inline log_write_choice measure_log_write(std::uint8_t* area, std::size_t bytes) {
    log_write_choice c;
#if defined(__x86_64__)
    if (bytes < 4096) // not a ring of any pool that opens: leave the default
        return c;
    static constexpr std::size_t small[] = {12, 24, 36, 20};
    static constexpr std::size_t large[] = {72, 136, 264, 520};
    constexpr int lead_in = measure_lead_in, per_round = measure_per_round, rounds = 3;
    // The methods, each in its own third of the span, written from the copy of its bytes.
    enum method : std::size_t { words, flushed, lines, methods };
    const std::size_t part =
        std::min<std::size_t>(bytes, std::size_t{64} << 10) / methods / 64 * 64;
    const std::vector<std::uint8_t> copy(area, area + methods * part);
    for (std::size_t l = 0; l < methods * part; l += cache_line) // copying read them in
        if (l < part || l >= 2 * part) // the non-temporal methods' lines: out of the cache
            _mm_clflush(area + l);
    std::size_t at[methods] = {0, 0, 0};
    auto write_entry = [&](std::size_t n, method m) {
        if (at[m] + n + cache_line > part)
            at[m] = 0;
        const std::size_t unit = m == lines ? cache_line : 8; // what the entry is widened to
        const std::size_t lo = m * part + at[m] / unit * unit;
        const std::size_t hi = m * part + (at[m] + n + unit - 1) / unit * unit;
        if (m != flushed) {
            stream_copy(area + lo, copy.data() + lo, hi - lo);
        } else {
            std::memcpy(area + lo, copy.data() + lo, hi - lo);
            flush_cpu_lines(area + lo, hi - lo);
        }
        _mm_sfence();
        at[m] += n;
    };
    auto round = [&](const auto& sizes, method m) {
        for (int k = 0; k < lead_in; ++k) // not timed: a burst after a pause goes faster
            write_entry(sizes[static_cast<std::size_t>(k) % std::size(sizes)], m);
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < per_round; ++k)
            write_entry(sizes[static_cast<std::size_t>(k) % std::size(sizes)], m);
        const std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
        return d.count() / per_round;
    };
    for (method m : {words, flushed, lines}) { // first touch of the pages, not timed
        round(small, m);
        round(large, m);
    }
    // best[size][method], size 0 small, 1 large
    double best[2][methods] = {{1e18, 1e18, 1e18}, {1e18, 1e18, 1e18}};
    for (int r = 0; r < rounds; ++r)
        for (std::size_t k = 0; k < 2 * methods; ++k) {
            const std::size_t i = (k + static_cast<std::size_t>(r)) % (2 * methods); // rotate
            const std::size_t size = i / methods;
            const auto m = static_cast<method>(i % methods);
            const double t = size == 0 ? round(small, m) : round(large, m);
            best[size][m] = std::min(best[size][m], t);
        }
    auto choose = [&](const double* b) {
        const bool by_lines = b[lines] < log_write_choice::lines_margin * b[words];
        const double non_temporal = by_lines ? b[lines] : b[words];
        if (b[flushed] < log_write_choice::flush_margin * non_temporal)
            return log_write::store_and_flush;
        return by_lines ? log_write::non_temporal_lines : log_write::non_temporal;
    };
    c.measured = true;
    c.non_temporal_small_ns = best[0][words];
    c.store_and_flush_small_ns = best[0][flushed];
    c.non_temporal_lines_small_ns = best[0][lines];
    c.non_temporal_large_ns = best[1][words];
    c.store_and_flush_large_ns = best[1][flushed];
    c.non_temporal_lines_large_ns = best[1][lines];
    c.method = choose(best[0]);
    c.large_method = choose(best[1]);
    c.new_blocks = new_blocks_like(c.method);
    if (bytes >= new_block_area_offset + 2 * new_block_round_bytes) {
        std::uint8_t* blocks = area + new_block_area_offset;
        const std::vector<std::uint8_t> block_copy(blocks, blocks + 2 * new_block_round_bytes);
        const std::uint8_t* entries = copy.data(); // the whole-word third's bytes
        auto block_round = [&](bool nt) {
            // Each method its own lines, none of them in the cache at first, as fresh memory
            // from the allocator; entries of 24 bytes end to end in the whole-word third,
            // written as the small entries' method writes them if that is non-temporal.
            const std::size_t m = nt ? 0 : 1;
            std::uint8_t* first = blocks + m * new_block_round_bytes;
            const std::uint8_t* from = block_copy.data() + m * new_block_round_bytes;
            for (std::size_t l = 0; l < new_block_round_bytes; l += cache_line)
                _mm_clflush(first + l);
            _mm_mfence();
            constexpr std::size_t b = log_write_choice::measured_block_bytes, e = 24;
            const std::size_t unit = c.method == log_write::non_temporal_lines ? cache_line : 8;
            auto one = [&](int k) {
                const std::size_t at = static_cast<std::size_t>(k) * b;
                std::memcpy(first + at, from + at, b); // the transaction's ordinary stores
                // The entry as small entries go: whole lines or whole words (non-temporal).
                const std::size_t ea = static_cast<std::size_t>(k) * e % (part - e - cache_line);
                const std::size_t lo = ea / unit * unit, hi = (ea + e + unit - 1) / unit * unit;
                stream_copy(area + lo, entries + lo, hi - lo);
                if (nt)
                    stream_copy(first + at, first + at, b);
                else
                    flush_cpu_lines(first + at, b);
                _mm_sfence();
            };
            for (int k = 0; k < lead_in; ++k)
                one(k);
            const auto t0 = std::chrono::steady_clock::now();
            for (int k = lead_in; k < lead_in + per_round; ++k)
                one(k);
            const std::chrono::duration<double, std::nano> d =
                std::chrono::steady_clock::now() - t0;
            return d.count() / per_round;
        };
        double block_best[2] = {1e18, 1e18}; // non-temporal, flushed
        for (int r = 0; r <= rounds; ++r)    // round 0 touches the pages, not counted
            for (int k = 0; k < 2; ++k) {
                const int m = (k + r) % 2;
                const double t = block_round(m == 0);
                if (r > 0)
                    block_best[m] = std::min(block_best[m], t);
            }
        c.new_block_non_temporal_ns = block_best[0];
        c.new_block_store_and_flush_ns = block_best[1];
        c.new_blocks = block_best[1] < log_write_choice::flush_margin * block_best[0]
                           ? log_write::store_and_flush
                           : log_write::non_temporal;
    }
#else
    (void)area, (void)bytes;
#endif
    return c;
}

/// Per-thread persistence state: the thread's counters and, in msync mode, the page ranges
/// flushed since the last fence.
struct persist_ctx {
    thread_counters counters;
    std::vector<page_range> msync_pending;
    /// Flushes or non-temporal stores issued since the last fence (for round-trip counting).
    bool pending = false;
};

/// The library is about to issue a locked instruction: if flushes or non-temporal stores are
/// pending, it waits for them like a fence, so it counts as a persistence round trip.
inline void note_locked_op(persist_ctx& ctx) noexcept {
    if (ctx.pending) {
        thread_counters::add(ctx.counters.round_trips, 1);
        ctx.pending = false;
    }
}

/// The pool's persistence path. Immutable after the pool is opened; thread-safe (per-thread
/// state lives in persist_ctx).
class persistence {
public:
    enum class kind { cpu, msync };

    persistence() = default;
    persistence(kind k, persist_policy* override_policy, std::uint32_t write_ns,
                log_write small = log_write::non_temporal,
                log_write large = log_write::non_temporal,
                log_write new_blocks = log_write::non_temporal)
        : kind_(k), override_(override_policy), write_ns_(write_ns),
          store_small_(small == log_write::store_and_flush),
          store_large_(large == log_write::store_and_flush),
          lines_small_(small == log_write::non_temporal_lines &&
                       (k == kind::cpu || override_policy != nullptr)),
          lines_large_(large == log_write::non_temporal_lines &&
                       (k == kind::cpu || override_policy != nullptr)),
          flush_blocks_(new_blocks == log_write::store_and_flush) {
        if (k == kind::msync && override_policy == nullptr)
            group_ = std::make_shared<sync_group>();
    }

    kind mode() const noexcept { return kind_; }
    std::uint32_t write_ns() const noexcept { return write_ns_; }
    bool traced() const noexcept { return override_ != nullptr; }
    /// True when flush() and flush_lines() are CPU cache-line write-backs (CLWB, CLFLUSHOPT or
    /// CLFLUSH), which take lines in any order and a line twice at no more than a flush's cost.
    bool flushes_cpu_lines() const noexcept { return kind_ == kind::cpu && !override_; }

    /// True when a log entry of n bytes goes out as the whole cache lines it touches
    /// (log_write::non_temporal_lines, chosen per size; not in msync mode, which writes pages,
    /// unless a test policy takes the stores), false when as whole 8-byte words. Either way
    /// stream() then writes it.
    [[gnu::always_inline]] bool whole_lines(std::size_t n) const noexcept {
        return n < log_write_choice::large_entry_bytes ? lines_small_ : lines_large_;
    }

    /// Copies n bytes into the pool (a log entry) with non-temporal stores, or with stores and
    /// flushes of their lines (log_write, chosen per size); durable after fence().
    [[gnu::always_inline]] void stream(persist_ctx& ctx, void* dst, const void* src,
                                       std::size_t n) const {
        ctx.pending = true;
        const bool store = n < log_write_choice::large_entry_bytes ? store_small_ : store_large_;
        if (store && kind_ == kind::cpu) {
            // Stores and CLWB (log_write): the lines are written back whole. A test's policy
            // sees them as what they are, stores and a flush, so its crash images treat the
            // entry like any stored data.
            std::memcpy(dst, src, n);
            if (override_) {
                override_->stored(dst, n);
                override_->flush(dst, n);
            } else {
                flush_cpu_lines(dst, n);
            }
            thread_counters::add(ctx.counters.log_lines_flushed, lines_of(dst, n));
            emulate_write(dst, n);
            return;
        }
        thread_counters::add(ctx.counters.streamed_bytes, n);
        if (override_) {
            override_->stream(dst, src, n);
        } else if (kind_ == kind::cpu) {
            stream_copy(dst, src, n);
        } else {
            std::memcpy(dst, src, n);
            note_msync(ctx, dst, n);
        }
        emulate_write(dst, n);
    }

    /// Asks for the lines of the next log entry, at `at` in a ring of `capacity` bytes whose
    /// data begins at `ring`, to be fetched for writing, when entries are written with stores
    /// and CLWB. A transaction does this when it begins, long before its entry is written.
    ///
    /// Why: the ring's tail line is shared by consecutive entries, and on CPUs whose CLWB
    /// evicts the line (the 2-vCPU Intel Xeon guest of 2026-12-03: a load right after CLWB and
    /// SFENCE took 350 cycles, as after CLFLUSH, against 58 for a cached line) the next entry's
    /// first store waits for the line to come back from memory before the entry's write-back
    /// can even start. Fetched early, the miss overlaps the transaction's own work: paired
    /// slices of updates and inserts, 8 to 256 B values, 32-83 ns a transaction faster
    /// (docs/design.md, "Writing the log entry"). Non-temporal entries do not read the line,
    /// and a test policy writes no real lines: nothing is fetched for them. The entry's size
    /// is not known yet, so the small entries' method (most transactions') decides: a
    /// non-temporal entry into a fetched line would first have to evict it.
    void prefetch_log(const std::uint8_t* ring, std::size_t at, std::size_t capacity) const {
        if (!store_small_ || kind_ != kind::cpu || override_)
            return;
        const auto line = reinterpret_cast<std::uintptr_t>(ring + at) & ~std::uintptr_t{63};
        __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 3);
        // Not past the ring's end (the next ring's first line: another thread writes it).
        if (line + 64 < reinterpret_cast<std::uintptr_t>(ring + capacity))
            __builtin_prefetch(reinterpret_cast<const void*>(line + 64), 1, 3);
    }

    /// Announce ordinary stores to [dst, dst + n) (only the tracing policy listens).
    void stored(const void* dst, std::size_t n) const {
        if (override_)
            override_->stored(dst, n);
    }

    /// Write back the cache lines of [addr, addr + n); durable after fence().
    void flush(persist_ctx& ctx, const void* addr, std::size_t n) const {
        std::size_t lines = lines_of(addr, n);
        thread_counters::add(ctx.counters.flushed_lines, lines);
        ctx.pending = true;
        if (override_) {
            override_->flush(addr, n);
        } else if (kind_ == kind::cpu) {
            flush_cpu_lines(addr, n);
        } else {
            note_msync(ctx, addr, n);
        }
        spin_ns(std::uint64_t{write_ns_} * lines);
    }

    /// True when the blocks an entry covers are written back with stream_in_place() rather than
    /// flushed: on the CPU path, where log_write_choice::new_blocks is non_temporal (measured
    /// when the pool opened, given by pool_options::new_block_write, or else the small
    /// entries' method). Which is faster depends on the CPU (log_write_choice; docs/design.md,
    /// "Writing new blocks").
    bool streams_new_blocks() const noexcept { return kind_ == kind::cpu && !flush_blocks_; }

    /// Writes [addr, addr + n) to memory again with non-temporal stores of its own contents: the
    /// blocks a transaction allocated, whose bytes it stored with ordinary stores and will not
    /// change (nobody else can reach them before the commit). Durable after fence(), like
    /// flush(), but the fence then waits for non-temporal stores alone, as for the log entry.
    /// Whole 8-byte words only (blocks are 16-byte aligned and sized); any other range is
    /// flushed. Announce the ordinary stores with stored() first.
    void stream_in_place(persist_ctx& ctx, void* addr, std::size_t n) const {
        if (reinterpret_cast<std::uintptr_t>(addr) % 8 != 0 || n % 8 != 0) {
            flush(ctx, addr, n);
            return;
        }
        thread_counters::add(ctx.counters.streamed_bytes, n);
        ctx.pending = true;
        auto* p = static_cast<std::uint8_t*>(addr);
        if (override_) {
            // The policy copies from a source of its own (its copy may be a memcpy, which
            // must not overlap the destination).
            std::array<std::uint8_t, 256> bounce;
            for (std::size_t k = 0; k < n; k += bounce.size()) {
                const std::size_t c = std::min(bounce.size(), n - k);
                std::memcpy(bounce.data(), p + k, c);
                override_->stream(p + k, bounce.data(), c);
            }
        } else {
            // Whole words: stream_copy loads each word or pair before storing it, so the
            // source may be the destination.
            stream_copy(p, p, n);
        }
        emulate_write(addr, n);
    }

    /// Writes back whole cache lines, given by their index from `base` (line l is [base + 64 l,
    /// base + 64 l + 64)): flush() of each, with one look at the path for all of them.
    void flush_lines(persist_ctx& ctx, const std::uint8_t* base, const std::uint64_t* lines,
                     std::size_t n) const {
        if (n == 0)
            return;
        thread_counters::add(ctx.counters.flushed_lines, n);
        ctx.pending = true;
        if (override_ || kind_ != kind::cpu) {
            for (std::size_t k = 0; k < n; ++k) {
                const std::uint8_t* a = base + lines[k] * cache_line;
                if (override_)
                    override_->flush(a, cache_line);
                else
                    note_msync(ctx, a, cache_line);
            }
        } else {
#if defined(__x86_64__)
            if (cpu_line_flush == line_flush::clwb) { // one call and one look at the CPU
                clwb_line_list(base, lines, n);
            } else
#endif
            {
                for (std::size_t k = 0; k < n; ++k)
                    flush_cpu_lines(base + lines[k] * cache_line, cache_line);
            }
        }
        spin_ns(std::uint64_t{write_ns_} * n);
    }

    /// Store fence: every earlier stream() and flush() of this thread is durable afterwards.
    [[gnu::always_inline]] void fence(persist_ctx& ctx) const {
        thread_counters::add(ctx.counters.fences, 1);
        thread_counters::add(ctx.counters.round_trips, 1);
        ctx.pending = false;
        if (override_) {
            override_->fence();
        } else if (kind_ == kind::cpu) {
#if defined(__x86_64__)
            _mm_sfence(); // what pmem_drain does on x86-64, without its indirect call
#else
            pmem_drain();
#endif
        } else {
            thread_counters::add(ctx.counters.msync_calls, group_->sync(ctx.msync_pending));
        }
    }

    /// One aligned 8-byte store made durable on its own (header words such as CT).
    void persist_word(persist_ctx& ctx, std::uint64_t* word, std::uint64_t value) const {
        __atomic_store_n(word, value, __ATOMIC_RELEASE);
        stored(word, sizeof value);
        flush(ctx, word, sizeof value);
        fence(ctx);
    }

private:
    /// The emulated write latency of the lines of [addr, addr + n) (none by default: the line
    /// count is not even computed).
    void emulate_write(const void* addr, std::size_t n) const noexcept {
        if (write_ns_ != 0) [[unlikely]]
            spin_ns(std::uint64_t{write_ns_} * lines_of(addr, n));
    }

    static void note_msync(persist_ctx& ctx, const void* addr, std::size_t n) {
        static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
        auto a = reinterpret_cast<std::uintptr_t>(addr);
        std::uintptr_t lo = a & ~(page - 1);
        std::uintptr_t hi = (a + n + page - 1) & ~(page - 1);
        if (!ctx.msync_pending.empty()) {
            auto& last = ctx.msync_pending.back();
            if (lo <= last.second && hi >= last.first) { // overlapping or adjacent: merge
                last.first = std::min(last.first, lo);
                last.second = std::max(last.second, hi);
                return;
            }
        }
        ctx.msync_pending.emplace_back(lo, hi);
    }

    kind kind_ = kind::cpu;
    persist_policy* override_ = nullptr;
    std::uint32_t write_ns_ = 0;
    bool store_small_ = false;  ///< log_write::store_and_flush below large_entry_bytes
    bool store_large_ = false;  ///< log_write::store_and_flush from large_entry_bytes
    bool lines_small_ = false;  ///< log_write::non_temporal_lines below large_entry_bytes
    bool lines_large_ = false;  ///< log_write::non_temporal_lines from large_entry_bytes
    bool flush_blocks_ = false; ///< log_write_choice::new_blocks is store_and_flush
    /// msync mode: the threads' fences, grouped (shared: persistence is copied on open)
    std::shared_ptr<sync_group> group_;
};

} // namespace detail
} // namespace tlptm
