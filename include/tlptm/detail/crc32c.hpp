// tlptm — CRC32C (Castagnoli), the checksum of log entries and of the pool header.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time), otherwise a
// table-driven software loop. Both give identical results.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tlptm::detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u; // reflected Castagnoli polynomial

inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1u) ? (c >> 1) ^ crc32c_poly : c >> 1;
        t[i] = c;
    }
    return t;
}();

/// Software CRC32C update (no pre/post inversion: callers pass and receive the running state).
inline std::uint32_t crc32c_update_sw(std::uint32_t crc, const void* data, std::size_t n) noexcept {
    auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i)
        crc = crc32c_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) inline std::uint32_t
crc32c_update_hw(std::uint32_t crc, const void* data, std::size_t n) noexcept {
    auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t c = crc;
    while (n >= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    auto c32 = static_cast<std::uint32_t>(c);
    // The tail in 4-, 2- and 1-byte steps (the instruction takes its operand's bytes in
    // little-endian order, as the byte-wise definition does).
    if (n & 4) {
        std::uint32_t w;
        std::memcpy(&w, p, 4);
        c32 = _mm_crc32_u32(c32, w);
        p += 4;
    }
    if (n & 2) {
        std::uint16_t w;
        std::memcpy(&w, p, 2);
        c32 = _mm_crc32_u16(c32, w);
        p += 2;
    }
    if (n & 1)
        c32 = _mm_crc32_u8(c32, *p);
    return c32;
}

inline const bool crc32c_has_hw = __builtin_cpu_supports("sse4.2");
#endif

/// Running CRC32C update; start with `crc32c_init`, finish with `crc32c_final`.
inline std::uint32_t crc32c_update(std::uint32_t crc, const void* data, std::size_t n) noexcept {
#if defined(__x86_64__)
    if (crc32c_has_hw)
        return crc32c_update_hw(crc, data, n);
#endif
    return crc32c_update_sw(crc, data, n);
}

inline constexpr std::uint32_t crc32c_init = 0xFFFFFFFFu;
inline constexpr std::uint32_t crc32c_final(std::uint32_t crc) noexcept {
    return ~crc;
}

/// CRC32C of one buffer.
inline std::uint32_t crc32c(const void* data, std::size_t n) noexcept {
    return crc32c_final(crc32c_update(crc32c_init, data, n));
}

} // namespace tlptm::detail
