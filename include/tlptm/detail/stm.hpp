// tlptm — concurrency control: a word-based STM of the TinySTM / TL2 family (DESIGN.md §6).
//
// A global version clock; a table of versioned ownership records (orecs) hashed by word
// address; lazy versioning (the redo write-set); reads validated against the snapshot with
// snapshot extension; commit-time locking of the written words' orecs with read-set
// validation; randomised exponential back-off; after repeated aborts a transaction runs alone
// (serial, irrevocable) so that it cannot starve.
//
// An orec word is either a version (ts << 1: the timestamp of the last commit that wrote a word
// mapped to it) or a lock ((slot + 1) << 1 | 1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tlptm::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/// Thrown inside a transaction to abort and retry it. Not a std::exception, so that
/// `catch (const std::exception&)` in user code does not swallow it; it never escapes
/// tlptm::atomic.
struct tx_retry {};

class orec_table {
public:
    static constexpr std::size_t size_log2 = 20; // 1 Mi orecs, 8 MiB
    static constexpr std::size_t size = std::size_t{1} << size_log2;

    orec_table() : orecs_(new std::atomic<std::uint64_t>[size]) {
        for (std::size_t i = 0; i < size; ++i)
            orecs_[i].store(0, std::memory_order_relaxed);
    }

    /// The orec of the word at pool offset `offset` (8-aligned). Adjacent words map to
    /// adjacent orecs; words 8 MiB apart share one.
    static std::uint32_t index(std::uint64_t offset) noexcept {
        return static_cast<std::uint32_t>((offset >> 3) & (size - 1));
    }
    std::atomic<std::uint64_t>& operator[](std::uint32_t i) const noexcept { return orecs_[i]; }

    static bool locked(std::uint64_t o) noexcept { return o & 1; }
    static std::uint64_t version(std::uint64_t o) noexcept { return o >> 1; }
    static std::uint64_t make_version(std::uint64_t ts) noexcept { return ts << 1; }
    static std::uint64_t make_lock(std::uint32_t slot) noexcept {
        return (std::uint64_t{slot} + 1) << 1 | 1;
    }

private:
    std::unique_ptr<std::atomic<std::uint64_t>[]> orecs_;
};

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
