// tlptm — concurrency control: a word-based STM of the TinySTM / TL2 family (DESIGN.md §6).
//
// A global version clock that commits read but do not advance (GV5-style: a commit takes a
// timestamp above the clock, its snapshot, its slot's last commit and the versions it
// overwrites; a read that finds a newer version raises the clock); a table of versioned
// ownership records (orecs) hashed by word address; lazy versioning (the redo write-set);
// reads validated against the snapshot with snapshot extension; commit-time locking of the
// written words' orecs with read-set validation; randomised exponential back-off; after
// repeated aborts a transaction runs alone (serial, irrevocable) so that it cannot starve.
//
// An orec word is either a version (ts << 1: the timestamp of the last commit that wrote a word
// mapped to it) or a lock ((slot + 1) << 1 | 1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>

#include <tlptm/detail/sched.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tlptm::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/// A test-and-test-and-set lock for short, rarely contended sections (a commit's write-back
/// against a helper that settles it). Yields after spinning a while.
class spin_lock {
public:
    void lock() noexcept {
        for (unsigned spins = 0; flag_.exchange(true, std::memory_order_acquire);) {
            while (flag_.load(std::memory_order_relaxed)) {
                sched(sched_point::spin, &flag_);
                if (++spins > 256)
                    std::this_thread::yield();
                cpu_relax();
            }
        }
    }
    void unlock() noexcept { flag_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> flag_{false};
};

/// Thrown inside a transaction to abort and retry it. Not a std::exception, so that
/// `catch (const std::exception&)` in user code does not swallow it; it never escapes
/// tlptm::atomic.
struct tx_retry {};

class orec_table {
public:
    // 64 Ki orecs for the heap, one per 64-byte granule (a cache line of data): a small object
    // (a hash-table node) is covered by one orec, so reading it costs one orec miss at most, and
    // a bulk value takes one lock and one check per line it covers. Each orec has 16 bytes of
    // the table (8 unused), so that a line of orecs covers 256 bytes of the pool, as with the
    // 32-byte granules and 8-byte orecs before (tlptm::false_sharing_span): the 64 bytes of a
    // per-thread stripe are not thrown into one orec line with seven neighbours. The table
    // takes 1.25 MiB, mostly cache-resident. The allocator's metadata (below the heap) has
    // 16 Ki orecs of its own, so that an allocation's bitmap and descriptor stores never
    // invalidate a reader of application data that happens to lie a multiple of 4 MiB away
    // (they used to share orecs: a map task of tlptm-shuffle reran whenever another task's
    // commit took a superblock whose descriptor aliased one of its list heads).
    static constexpr std::size_t size_log2 = 16;
    static constexpr std::size_t size = std::size_t{1} << size_log2;
    static constexpr std::size_t meta_size = std::size_t{1} << 14;
    static constexpr std::size_t count = size + meta_size; ///< orecs in all
    static constexpr unsigned granule_log2 = 6;
    static constexpr std::size_t line_bytes = 64; ///< the table's alignment: a cache line
    /// Bytes of the table per orec (the orec word and padding).
    static constexpr std::size_t orec_bytes = 16;
    static constexpr std::size_t orecs_per_line = line_bytes / orec_bytes;
    // Zeroed (C++20 value-initialises atomics), and aligned to a cache line, so that the four
    // orecs of a 256-byte span of the pool are one line (tlptm::false_sharing_span); plain
    // new[] of 1 MiB returns an address 16 bytes past a page, and every span's orecs straddled
    // two lines.
    orec_table()
        : orecs_(new (std::align_val_t{line_bytes}) std::atomic<std::uint64_t>[count * stride]()) {}

    /// Offsets below `heap_begin` are the allocator's metadata (pool_state::init_after_map).
    void set_heap_begin(std::uint64_t heap_begin) noexcept { heap_begin_ = heap_begin; }

    /// The orec of the word at pool offset `offset` (8-aligned). The eight words of a 64-byte
    /// granule share one; heap granules 4 MiB apart share one, metadata granules 1 MiB apart
    /// share one; a heap granule and a metadata granule never do.
    std::uint32_t index(std::uint64_t offset) const noexcept {
        const std::uint64_t g = offset >> granule_log2;
        if (offset < heap_begin_)
            return static_cast<std::uint32_t>(size + (g & (meta_size - 1)));
        return static_cast<std::uint32_t>(g & (size - 1));
    }

    std::atomic<std::uint64_t>& operator[](std::uint32_t i) const noexcept {
        return orecs_[std::size_t{i} * stride];
    }

    static bool locked(std::uint64_t o) noexcept { return o & 1; }
    static std::uint64_t version(std::uint64_t o) noexcept { return o >> 1; }
    static std::uint64_t make_version(std::uint64_t ts) noexcept { return ts << 1; }
    static std::uint64_t make_lock(std::uint32_t slot) noexcept {
        return (std::uint64_t{slot} + 1) << 1 | 1;
    }

private:
    struct aligned_free {
        void operator()(std::atomic<std::uint64_t>* p) const noexcept {
            ::operator delete[](p, std::align_val_t{line_bytes});
        }
    };
    static constexpr std::size_t stride = orec_bytes / sizeof(std::atomic<std::uint64_t>);
    std::unique_ptr<std::atomic<std::uint64_t>[], aligned_free> orecs_;
    std::uint64_t heap_begin_ = 0;
};

} // namespace tlptm::detail

namespace tlptm {

/// The span of pool bytes whose orecs share one cache line (four orecs of 64-byte granules):
/// 256 bytes, aligned. Data that threads update independently of each other (per-thread
/// counters, stripes) should lie at least this far apart, not only a cache line apart: two
/// cores committing to the same span take locks on the same line of orecs, which then moves
/// between them like a shared variable. The workload table's per-thread size stripes, 64 bytes
/// apart, held two-thread workload b at 1.47x one thread; 256 bytes apart, 1.67-1.90x
/// (docs/design.md, "Concurrency control").
inline constexpr std::size_t false_sharing_span =
    (std::size_t{1} << detail::orec_table::granule_log2) * detail::orec_table::orecs_per_line;
} // namespace tlptm

namespace tlptm::detail {

/// A seed that differs between threads (the address of a thread-local object).
inline std::uint64_t thread_seed() noexcept {
    static thread_local char anchor;
    return (reinterpret_cast<std::uintptr_t>(&anchor) * 0x9E3779B97F4A7C15ull) | 1;
}

/// The calling thread's state of the back-off's random generator.
inline thread_local std::uint64_t backoff_rng = thread_seed();

/// Randomised exponential back-off after the n-th consecutive abort.
inline void backoff(std::uint64_t& rng, unsigned aborts) noexcept {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    unsigned shift = aborts < 12 ? aborts : 12;
    std::uint64_t spins = rng & ((std::uint64_t{1} << shift) - 1);
    for (std::uint64_t i = 0; i < spins; ++i)
        cpu_relax();
    if (aborts > 6)
        std::this_thread::yield();
}

} // namespace tlptm::detail
