// tlptm — counters of what transactions did to persistent memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tlptm {

/// The allocator's state at one moment (levels, not counters).
struct heap_stats {
    static constexpr std::size_t max_classes = 40;
    /// Bytes of live blocks and spans (root included). Blocks that committed transactions freed
    /// are not counted, even while they wait for I3 (see bytes_pending_free).
    std::uint64_t bytes_in_use = 0;
    /// Bytes freed by committed transactions that the allocator cannot hand out yet (I3: the
    /// durable checkpoint or a transaction that was running at the free holds them back).
    std::uint64_t bytes_pending_free = 0;
    std::uint64_t bytes_in_superblocks = 0; ///< bytes of the superblocks that hold blocks
    std::uint64_t superblocks = 0;          ///< superblocks in the heap
    /// Superblocks the allocator can hand out for any class or a span: free ones, and those
    /// whose blocks are all free (they become free at once, or when memory is short).
    std::uint64_t superblocks_free = 0;
    std::uint64_t superblocks_large = 0;         ///< in spans of large allocations
    std::uint64_t arenas = 0;                    ///< arenas of the heap (16 MiB each)
    std::uint64_t arenas_scanned = 0;            ///< of those, rebuilt in this opening so far
    std::uint32_t block_sizes[max_classes] = {}; ///< size of each class
    std::uint32_t superblocks_per_class[max_classes] = {}; ///< superblocks holding that class
    /// Share of the bytes in superblocks not in use (internal fragmentation), 0..1.
    double fragmentation() const noexcept {
        return bytes_in_superblocks == 0 ? 0.0
                                         : 1.0 - static_cast<double>(bytes_in_use) /
                                                     static_cast<double>(bytes_in_superblocks);
    }
};

/// What the transactions of a pool have done since the pool was opened, summed over all
/// threads (live and exited). Returned by pool::stats(); subtract two snapshots to measure an
/// interval.
struct stats {
    std::uint64_t tx_committed = 0;   ///< update transactions committed
    std::uint64_t tx_read_only = 0;   ///< read-only transactions committed (no log, no fence)
    std::uint64_t tx_aborted = 0;     ///< transactions aborted (exception, conflict, overflow)
    std::uint64_t log_bytes = 0;      ///< bytes of log entries written (headers included)
    std::uint64_t streamed_bytes = 0; ///< bytes written with non-temporal stores
    std::uint64_t flushed_lines = 0;  ///< cache lines flushed (CLWB / CLFLUSHOPT / CLFLUSH)
    /// Lines of log entries written with ordinary stores and flushed (log_write), whole lines
    /// written back (not in flushed_lines, which counts the data's lines)
    std::uint64_t log_lines_flushed = 0;
    /// Store fences (SFENCE), or in msync mode the fences that waited for an msync of their pages
    std::uint64_t fences = 0;
    /// msync calls made (msync mode). Fences that run together share one call (group commit), and
    /// one call covers all of a fence's pages, so this is at most `fences`.
    std::uint64_t msync_calls = 0;
    std::uint64_t data_bytes_written = 0; ///< bytes written back in place at commit
    std::uint64_t aalo_bytes = 0; ///< bytes stored in place into memory the transaction allocated
    /// Persistence round trips: fences, plus locked instructions (a lock-prefixed RMW, xchg, a
    /// seq_cst store) that the library issued while flushes or non-temporal stores were pending
    /// (on x86 such an instruction waits for them as a fence does).
    std::uint64_t round_trips = 0;
    std::uint64_t write_back_batches = 0; ///< batches that made pending write-back durable
    /// Transactions (update and read-only) that ran solo: their thread had the pool to itself
    /// and ran them without concurrency control (pool_options::solo_after)
    std::uint64_t tx_solo = 0;
    heap_stats heap; ///< the allocator now (operators + and - keep the left operand's)

    /// Transactions that ran to the end: committed updates and read-only ones.
    std::uint64_t transactions() const noexcept { return tx_committed + tx_read_only; }

    /// The share of transactions() that ran solo (tx_solo), in [0, 1]; 0 when none ran.
    double solo_share() const noexcept {
        const std::uint64_t n = transactions();
        return n ? static_cast<double>(tx_solo) / static_cast<double>(n) : 0.0;
    }

    /// Persistent-memory bytes written: streamed bytes plus whole flushed lines (data and log).
    std::uint64_t pm_bytes_written() const noexcept {
        return streamed_bytes + 64 * (flushed_lines + log_lines_flushed);
    }

    friend stats operator-(stats a, const stats& b) noexcept {
        a.tx_committed -= b.tx_committed;
        a.tx_read_only -= b.tx_read_only;
        a.tx_aborted -= b.tx_aborted;
        a.log_bytes -= b.log_bytes;
        a.streamed_bytes -= b.streamed_bytes;
        a.flushed_lines -= b.flushed_lines;
        a.log_lines_flushed -= b.log_lines_flushed;
        a.fences -= b.fences;
        a.data_bytes_written -= b.data_bytes_written;
        a.aalo_bytes -= b.aalo_bytes;
        a.round_trips -= b.round_trips;
        a.write_back_batches -= b.write_back_batches;
        a.msync_calls -= b.msync_calls;
        a.tx_solo -= b.tx_solo;
        return a;
    }
    friend stats operator+(stats a, const stats& b) noexcept {
        a.tx_committed += b.tx_committed;
        a.tx_read_only += b.tx_read_only;
        a.tx_aborted += b.tx_aborted;
        a.log_bytes += b.log_bytes;
        a.streamed_bytes += b.streamed_bytes;
        a.flushed_lines += b.flushed_lines;
        a.log_lines_flushed += b.log_lines_flushed;
        a.fences += b.fences;
        a.data_bytes_written += b.data_bytes_written;
        a.aalo_bytes += b.aalo_bytes;
        a.round_trips += b.round_trips;
        a.write_back_batches += b.write_back_batches;
        a.msync_calls += b.msync_calls;
        a.tx_solo += b.tx_solo;
        return a;
    }
};

namespace detail {

/// Per-thread counters. Only the owning thread writes (plain load + store, relaxed, so no
/// read-modify-write on the hot path); pool::stats() reads them from any thread.
struct thread_counters {
    std::atomic<std::uint64_t> tx_committed{0}, tx_read_only{0}, tx_aborted{0}, log_bytes{0},
        streamed_bytes{0}, flushed_lines{0}, log_lines_flushed{0}, fences{0}, data_bytes_written{0},
        aalo_bytes{0}, round_trips{0}, write_back_batches{0}, msync_calls{0}, tx_solo{0};

    [[gnu::always_inline]] static void add(std::atomic<std::uint64_t>& c,
                                           std::uint64_t v) noexcept {
        c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    }

    tlptm::stats snapshot() const noexcept {
        tlptm::stats s;
        s.tx_committed = tx_committed.load(std::memory_order_relaxed);
        s.tx_read_only = tx_read_only.load(std::memory_order_relaxed);
        s.tx_aborted = tx_aborted.load(std::memory_order_relaxed);
        s.log_bytes = log_bytes.load(std::memory_order_relaxed);
        s.streamed_bytes = streamed_bytes.load(std::memory_order_relaxed);
        s.flushed_lines = flushed_lines.load(std::memory_order_relaxed);
        s.log_lines_flushed = log_lines_flushed.load(std::memory_order_relaxed);
        s.fences = fences.load(std::memory_order_relaxed);
        s.data_bytes_written = data_bytes_written.load(std::memory_order_relaxed);
        s.aalo_bytes = aalo_bytes.load(std::memory_order_relaxed);
        s.round_trips = round_trips.load(std::memory_order_relaxed);
        s.write_back_batches = write_back_batches.load(std::memory_order_relaxed);
        s.msync_calls = msync_calls.load(std::memory_order_relaxed);
        s.tx_solo = tx_solo.load(std::memory_order_relaxed);
        return s;
    }
};

} // namespace detail
} // namespace tlptm
