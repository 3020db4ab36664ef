// Values of the workloads: 8 bytes by default, or an inline array of N bytes, derived from a
// 64-bit seed so that a run can check every value it reads back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace workloads {

/// How values are chosen: `small` is a per-key counter incremented by every update (small
/// numbers, which CBLO's varints compress well), `random` a random 64-bit number per update.
enum class value_kind { small, random };

inline const char* to_string(value_kind k) noexcept {
    return k == value_kind::small ? "small" : "random";
}

/// A value of N bytes: one 64-bit word for N = 8, otherwise an inline array of N / 8 words.
template <std::size_t N>
using value_t = std::conditional_t<N == 8, std::uint64_t, std::array<std::uint64_t, N / 8>>;

/// The value sizes the driver is built for (each is a separate instantiation of the tables).
inline constexpr std::size_t value_sizes[] = {8, 16, 32, 64, 128, 256, 512, 1024};

/// The splitmix64 finaliser: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

/// A small, fast pseudo-random generator (splitmix64); one per thread.
struct rng {
    std::uint64_t state;
    std::uint64_t next() noexcept { return mix64(state += 0x9E3779B97F4A7C15ull); }
    /// Uniform in [0, n), n > 0.
    std::uint64_t below(std::uint64_t n) noexcept {
        __extension__ using u128 = unsigned __int128; // the high half of a 64x64 product
        return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
    }
};

/// The value that `seed` stands for. Small: every word holds the seed. Random: word 0 holds the
/// seed, word i holds mix64(seed + i).
template <std::size_t N> value_t<N> make_value(value_kind k, std::uint64_t seed) noexcept {
    if constexpr (N == 8) {
        (void)k;
        return seed;
    } else {
        value_t<N> v;
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = (k == value_kind::small || i == 0) ? seed : mix64(seed + i);
        return v;
    }
}

/// The seed a value was made from (its first word).
template <std::size_t N> std::uint64_t seed_of(const value_t<N>& v) noexcept {
    if constexpr (N == 8)
        return v;
    else
        return v[0];
}

/// True if `v` is exactly make_value<N>(k, seed_of(v)): no word torn or lost.
template <std::size_t N> bool well_formed(value_kind k, const value_t<N>& v) noexcept {
    if constexpr (N == 8) {
        (void)k;
        (void)v;
        return true;
    } else {
        return v == make_value<N>(k, v[0]);
    }
}

} // namespace workloads
