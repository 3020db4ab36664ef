// tlptm-workloads — the persistence floor: what one persist costs on this machine, measured in
// the same run as the workloads so that their latencies can be read as multiples of it.
#pragma once

#include <fcntl.h>
#include <libpmem.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace workloads {

/// Mean ns of the two cheapest ways to make something durable.
struct persistence_floor {
    double store_clwb_sfence_ns = 0; ///< one 8-byte store + CLWB + SFENCE (pmem_flush + drain)
    double nt64_sfence_ns = 0;       ///< one 64-byte non-temporal store + SFENCE
    bool measured() const noexcept { return nt64_sfence_ns > 0; }
};

/// Measures the floor on a scratch file next to `pool_path` (the same kind of memory the pool
/// is on), with the CPU flush path the library uses (libpmem), `reps` repetitions of `n`
/// persists each; reports the fastest repetition (the least disturbed by other load). Returns
/// an unmeasured floor if the file cannot be made.
inline persistence_floor measure_floor(const std::string& pool_path, int reps = 5,
                                       std::size_t n = 20000) {
    persistence_floor f;
    const std::string path = pool_path + ".floor";
    const std::size_t size = std::size_t{1} << 20;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return f;
    ::unlink(path.c_str());
    void* m = MAP_FAILED;
    if (::ftruncate(fd, static_cast<off_t>(size)) == 0)
        m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED)
        return f;
    auto* base = static_cast<std::uint8_t*>(m);
    std::memset(base, 0, size); // fault every page in first
    const std::size_t lines = size / 64;
    alignas(64) std::uint8_t line[64];
    std::memset(line, 0x5a, sizeof line);
    using clock = std::chrono::steady_clock;
    auto per_op = [&](auto&& op) {
        double best = 0;
        for (int r = 0; r < reps; ++r) {
            auto t0 = clock::now();
            for (std::size_t i = 0; i < n; ++i)
                op(base + (i * 7 % lines) * 64, i);
            double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() /
                        static_cast<double>(n);
            best = r == 0 ? ns : std::min(best, ns);
        }
        return best;
    };
    f.store_clwb_sfence_ns = per_op([](std::uint8_t* p, std::size_t i) {
        std::uint64_t v = i;
        std::memcpy(p, &v, sizeof v);
        pmem_flush(p, sizeof v);
        pmem_drain();
    });
    f.nt64_sfence_ns = per_op([&](std::uint8_t* p, std::size_t i) {
        line[0] = static_cast<std::uint8_t>(i);
        pmem_memcpy(p, line, 64, PMEM_F_MEM_NONTEMPORAL | PMEM_F_MEM_NODRAIN);
        pmem_drain();
    });
    ::munmap(m, size);
    return f;
}

} // namespace workloads
