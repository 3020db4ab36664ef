// tlptm — options of a pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <tlptm/log.hpp>
#include <tlptm/persist.hpp>

namespace tlptm {

/// Options for pool::create / open / open_or_create. Fields marked "create" are recorded in the
/// pool header at creation and ignored by open; the others apply to this opening only.
struct pool_options {
    /// create: size of the pool file in bytes.
    std::size_t size = std::size_t{256} << 20;
    /// The pool's identity, like PMDK's layout string: a name of up to 119 bytes recorded at
    /// creation. open() refuses a pool whose name differs (layout_error naming both); an empty
    /// name (the default) skips the check, and a pool created without a name takes the first
    /// one it is opened with. The root is identified by this name and its size, not by its C++
    /// type (see pool::root).
    std::string layout = {};
    /// Log optimisations of this opening's transactions.
    log_mode mode = log_mode::tlptm;
    /// create: how many threads may run transactions on the pool at once (one log ring each).
    std::uint32_t max_threads = 16;
    /// create: bytes of log per thread ring; the largest transaction's log entry must fit.
    /// 0 (the default) chooses it from the pool size: the rings take an eighth of the pool,
    /// each ring between 16 KiB and 1 MiB (1 MiB from 128 MiB pools up with 16 threads). The
    /// smallest pool with the defaults (16 threads, a 64 KiB root) is then 512 KiB; the message
    /// of a size that is refused states the smallest one.
    std::size_t log_capacity = 0;
    /// create: bytes reserved for the root object (rounded up to 64 KiB).
    std::size_t root_capacity = std::size_t{64} << 10;
    /// create: reserve the file's blocks at creation (posix_fallocate). Off (the default), the
    /// file is sized with ftruncate: sparse where the file system allows, so creation takes
    /// the same time for any size and memory is taken when first written; but a full file
    /// system then fails a later first write to a page (SIGBUS) instead of the creation. On
    /// means creation time grows with the size (about 120 ms per GiB on tmpfs).
    bool preallocate = false;
    /// Map every page of the pool for writing when it is opened (madvise MADV_POPULATE_WRITE,
    /// Linux 5.14 or newer; ignored where the kernel lacks it), so that no transaction takes a
    /// page fault on first touch. This opening only; off by default: it takes time and memory
    /// in proportion to the pool's size (a sparse pool becomes fully allocated). Worth it for a
    /// fresh pool that a bulk workload will fill (tlptm-shuffle measured page faults at about
    /// 45 % of its map stage without it).
    bool prefault = false;
    /// Map pages for writing in batches as they come into use (madvise MADV_POPULATE_WRITE),
    /// instead of one page fault per page on first touch: a thread's log ring (up to 4 MiB of it)
    /// when the thread first commits in this opening, and a superblock's 64 KiB when the allocator
    /// takes it from the free ones. On by default: those pages are about to be written anyway,
    /// and a first-touch fault cost 3.4 to 11 us per page on tmpfs where measured, populating
    /// 1.3 to 3.2 us (docs/design.md, "Allocator"). Recovery likewise maps the rings' pages for
    /// reading ahead of its scan, as far as their entries reach (docs/design.md, "Recovery in
    /// the code").
    /// Ignored with prefault (everything is mapped already), with msync durability (populating
    /// a file page for writing dirties it, so the next msync would write it out) and where the
    /// kernel lacks MADV_POPULATE_WRITE (before Linux 5.14). This opening only.
    bool populate = true;
    /// With populate: a background thread of the pool (started when the allocator first takes
    /// a free superblock, asleep in between) maps the next few free superblocks ahead of the
    /// allocator and reads one byte of each of their pages, so that a transaction's first
    /// stores into a new superblock find its pages present. Where the first access of a mapped
    /// page is itself slow (7 us a page on a guest whose hypervisor maps pages for user space
    /// on first use), this takes that cost off the inserting thread: on such a guest inserts of
    /// 32-byte nodes paid about 56 ns each on average without it (docs/design.md,
    /// "Allocator"). It only reads, and only superblocks the allocator holds free. Off: each
    /// allocating thread maps its superblocks itself, as before. Never in ThreadSanitizer
    /// builds (its reads would race, harmlessly, with the first writes) or in a child process
    /// forked from the one that started it. The thread is not pinned to the CPUs of the thread
    /// that started it: it runs on the CPUs the process had when it started (taskset, numactl
    /// or a cgroup's cpuset, before main() pinned any thread). It is not woken while the pool's
    /// running transactions are as many as those CPUs (it would take a core from them). This
    /// opening only.
    bool populate_ahead = true;
    /// create: virtual address to map the pool at, forever (pointers in the pool are plain
    /// pointers). 0 lets the library choose a free, randomised address in [16 TiB, 96 TiB)
    /// ([64 GiB, 480 GiB) in ThreadSanitizer builds).
    std::uintptr_t base_address = 0;
    /// How stores are made durable (see tlptm::durability).
    tlptm::durability durability = tlptm::durability::automatic;
    /// Extra busy-wait per flushed or streamed cache line, emulating slow persistent-memory
    /// writes (the paper uses 500 ns). Unset: the environment variable TLPTM_EMULATE_WRITE_NS,
    /// else 0.
    std::optional<std::uint32_t> emulate_write_ns = std::nullopt;
    /// How write-back becomes durable (see tlptm::write_back); this opening only. Automatic
    /// chooses adaptive or eager from what the pool measures when it opens (see
    /// tlptm::write_back::automatic); pool::chosen_write_back() tells which.
    tlptm::write_back write_back = tlptm::write_back::automatic;
    /// How log entries are written (see tlptm::log_write); this opening only. Automatic
    /// measures the three ways on the pool's log rings when the pool opens (once per device
    /// and process) and takes the fastest, for small entries and for large ones
    /// (log_write_choice::large_entry_bytes and more) apart; pool::chosen_log_write() tells
    /// which.
    tlptm::log_write log_write = tlptm::log_write::automatic;
    /// Large log entries (log_write_choice::large_entry_bytes and more) are written this way
    /// instead. Unset or automatic: as log_write says.
    std::optional<tlptm::log_write> large_log_write = std::nullopt;
    /// How the blocks a transaction allocated and its log entry covers (AALO: an insert's new
    /// node) become durable under the commit's one fence: non_temporal (or
    /// non_temporal_lines, the same here) writes their words again in place with non-temporal
    /// stores, store_and_flush flushes their lines. Unset or
    /// automatic: measured with the entries when log_write is automatic (where the rings
    /// have room for it; pool::chosen_log_write() tells), else as log_write says for small
    /// entries.
    std::optional<tlptm::log_write> new_block_write = std::nullopt;
    /// A thread that runs this many transactions in a row while no other thread of the process
    /// runs any on the pool takes the pool for itself ("solo"): its transactions then read and
    /// commit without concurrency control (no ownership record is checked, locked or validated),
    /// until another thread starts a transaction, which first waits for the solo thread's
    /// running transaction to end (it takes a heavy fence: microseconds, once per switch). A
    /// thread that loses the pool soon after taking it waits longer before it looks again (up
    /// to 65 536 transactions), one that held it for long waits less (down to this). 0: never
    /// solo. This opening only. Durability and recovery are the same either way.
    std::uint32_t solo_after = 64;
    /// Lazy and adaptive write-back: a thread's batch is written back once it has this many
    /// distinct dirty lines (the high watermark). Larger batches mean fewer fences and more log to
    /// replay after a crash (bounded by the ring anyway).
    std::size_t write_back_lines = 256;
    /// Tests only: a policy that receives every persistence operation instead of the CPU /
    /// msync path. Must outlive the pool.
    persist_policy* policy = nullptr;
};

} // namespace tlptm
