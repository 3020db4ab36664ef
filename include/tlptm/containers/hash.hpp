// tlptm — hash<K>: the default hash function of tlptm::hash_map.
//
// A persistent hash table keeps the hash of every key in the pool (it decides the bucket of a
// node and lets a rehash move nodes without reading their keys), so the function must give
// the same value in every run, every build and every process: std::hash promises none of
// that. tlptm::hash is fixed here and never depends on the platform's standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

namespace tlptm {

namespace detail {

/// The 64-bit finaliser of MurmurHash3 (a bijection that spreads every input bit).
constexpr std::uint64_t hash_mix(std::uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/// A hash of n bytes, eight at a time; the same on every little-endian machine and run.
inline std::uint64_t hash_bytes(const void* data, std::size_t n) noexcept {
    const auto* b = static_cast<const unsigned char*>(data);
    std::uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0x100000001b3ull);
    for (; n >= 8; b += 8, n -= 8) {
        std::uint64_t w;
        std::memcpy(&w, b, 8);
        h = (h ^ hash_mix(w)) * 0x9fb21c651e98df25ull;
    }
    if (n != 0) {
        std::uint64_t w = 0;
        std::memcpy(&w, b, n);
        h = (h ^ hash_mix(w ^ 0xff)) * 0x9fb21c651e98df25ull;
    }
    return hash_mix(h);
}

} // namespace detail

/// The stable hash of a key: integers, enumerations and pointers are mixed with the MurmurHash3
/// finaliser; std::string_view (and tlptm::string, see string.hpp) hash their bytes. Other key
/// types need a hash function of their own (hash_map's third template argument), which must
/// also give the same value in every run.
template <class K> struct hash;

template <class K>
requires std::is_integral_v<K> || std::is_enum_v<K> || std::is_pointer_v<K>
struct hash<K> {
    std::uint64_t operator()(const K& k) const noexcept {
        std::uint64_t w = 0;
        std::memcpy(&w, &k, sizeof(K) < 8 ? sizeof(K) : 8);
        return detail::hash_mix(w ^ 0x5851f42d4c957f2dull);
    }
};

template <> struct hash<std::string_view> {
    std::uint64_t operator()(std::string_view s) const noexcept {
        return detail::hash_bytes(s.data(), s.size());
    }
};

} // namespace tlptm
