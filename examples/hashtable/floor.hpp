// tlptm-workloads — the persistence floor: what one persist costs on this machine, measured in
// the same run as the workloads so that their latencies can be read as multiples of it; what
// one dependent cache miss costs there, the other floor of a chained-table walk; and what a
// fresh page of the pool's kind costs on its first use, which inserts pay as they fill new
// memory.
#pragma once

#include <libpmem.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "scratch.hpp"

namespace workloads {

/// Mean ns of the two cheapest ways to make something durable.
struct persistence_floor {
    double store_clwb_sfence_ns = 0; ///< one 8-byte store + CLWB + SFENCE (pmem_flush + drain)
    double nt64_sfence_ns = 0;       ///< one 64-byte non-temporal store + SFENCE
    /// One load that misses every cache and depends on the one before: a random walk over the
    /// lines of a 64 MiB mapping of the same kind as the pool (its page size, so its TLB
    /// misses too). A table walk pays about one per link.
    double dependent_miss_ns = 0;
    /// A 4 KiB page that no one has used: mapped for writing in 64 KiB batches (madvise
    /// MADV_POPULATE_WRITE, as tlptm's allocator maps a superblock it takes; the volatile table
    /// does the same), then written once. Every system pays it for the new memory it fills: a
    /// 32-byte node per insert meets one every 128 inserts. 0: not measured.
    double fresh_page_ns = 0;
    bool measured() const noexcept { return nt64_sfence_ns > 0; }
};

/// Links `n` slots `stride` words apart into one cycle in a random order (Sattolo's shuffle):
/// the first word of slot k holds the index of the slot after it.
inline void write_random_cycle(std::uint64_t* words, std::size_t n, std::size_t stride) {
    std::vector<std::uint32_t> order(n);
    for (std::size_t i = 0; i < n; ++i)
        order[i] = static_cast<std::uint32_t>(i);
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::size_t i = n - 1; i > 0; --i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        std::swap(order[i], order[x % i]);
    }
    for (std::size_t i = 0; i < n; ++i)
        words[std::size_t{order[i]} * stride] = order[(i + 1) % n];
}

/// Mean ns of op(i) over `n` calls, the fastest of `reps` repetitions (the least disturbed by
/// other load).
template <class Op> double fastest_ns_per_op(int reps, std::size_t n, Op&& op) {
    using clock = std::chrono::steady_clock;
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        auto t0 = clock::now();
        for (std::size_t i = 0; i < n; ++i)
            op(i);
        double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() /
                    static_cast<double>(n);
        best = r == 0 ? ns : std::min(best, ns);
    }
    return best;
}

/// dependent_miss_ns on a scratch file `path`: the fastest of `reps` walks of `n` loads each
/// along a random cycle through the lines of 64 MiB; 0 if the file cannot be made.
inline double measure_dependent_miss(const std::string& path, int reps = 3,
                                     std::size_t n = 200000) {
    const std::size_t size = std::size_t{64} << 20;
    void* m = map_scratch(path, size);
    if (!m)
        return 0;
    auto* words = static_cast<std::uint64_t*>(m);
    write_random_cycle(words, size / 64, 8);
    std::uint64_t at = 0;
    const double ns = fastest_ns_per_op(
        reps, n, [&](std::size_t) { at = *static_cast<volatile std::uint64_t*>(&words[at * 8]); });
    ::munmap(m, size);
    return ns;
}

/// fresh_page_ns on scratch files `path`: the fastest of `reps` passes over 16 MiB of new
/// pages (a new file each time); 0 if a file cannot be made.
inline double measure_fresh_page(const std::string& path, int reps = 3) {
    const std::size_t size = std::size_t{16} << 20, batch = std::size_t{64} << 10, page = 4096;
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        void* m = map_scratch(path, size);
        if (!m)
            return 0;
        auto* base = static_cast<std::uint8_t*>(m);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::size_t at = 0; at < size; at += batch) {
            populate_for_writing(base + at, batch);
            for (std::size_t p = at; p < at + batch; p += page)
                *reinterpret_cast<volatile std::uint64_t*>(base + p) = p;
        }
        const double ns =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                .count() /
            static_cast<double>(size / page);
        ::munmap(m, size);
        best = r == 0 ? ns : std::min(best, ns);
    }
    return best;
}

/// Measures the floor on scratch files next to `pool_path` (the same kind of memory the pool
/// is on), with the CPU flush path the library uses (libpmem), `reps` repetitions of `n`
/// persists each; reports the fastest repetition. Returns an unmeasured floor if the file
/// cannot be made.
inline persistence_floor measure_floor(const std::string& pool_path, int reps = 5,
                                       std::size_t n = 20000) {
    persistence_floor f;
    const std::size_t size = std::size_t{1} << 20;
    void* m = map_scratch(pool_path + ".floor", size);
    if (!m)
        return f;
    auto* base = static_cast<std::uint8_t*>(m);
    std::memset(base, 0, size); // fault every page in first
    const std::size_t lines = size / 64;
    auto at = [&](std::size_t i) { return base + (i * 7 % lines) * 64; };
    alignas(64) std::uint8_t line[64];
    std::memset(line, 0x5a, sizeof line);
    f.store_clwb_sfence_ns = fastest_ns_per_op(reps, n, [&](std::size_t i) {
        std::uint8_t* p = at(i);
        std::uint64_t v = i;
        std::memcpy(p, &v, sizeof v);
        pmem_flush(p, sizeof v);
        pmem_drain();
    });
    f.nt64_sfence_ns = fastest_ns_per_op(reps, n, [&](std::size_t i) {
        line[0] = static_cast<std::uint8_t>(i);
        pmem_memcpy(at(i), line, 64, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
        pmem_drain();
    });
    ::munmap(m, size);
    f.dependent_miss_ns = measure_dependent_miss(pool_path + ".miss");
    f.fresh_page_ns = measure_fresh_page(pool_path + ".page");
    return f;
}

} // namespace workloads
