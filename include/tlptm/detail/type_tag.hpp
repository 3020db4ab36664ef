// tlptm — a stable tag for the root type, checked when a pool's root is requested again.
#pragma once

#include <cstdint>
#include <string_view>

namespace tlptm::detail {

template <class T> constexpr std::string_view type_name() noexcept {
    // "... [with T = name]" (GCC) or "... [T = name]" (Clang).
    std::string_view s = __PRETTY_FUNCTION__;
    auto b = s.find("T = ");
    if (b == std::string_view::npos)
        return s;
    b += 4;
    auto e = s.find_first_of(";]", b);
    return s.substr(b, e - b);
}

/// FNV-1a over the type's name and size, folded to 32 bits.
template <class T> constexpr std::uint32_t type_tag() noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : type_name<T>()) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ull;
    }
    h ^= sizeof(T);
    h *= 0x100000001b3ull;
    auto tag = static_cast<std::uint32_t>(h ^ (h >> 32));
    return tag == 0 ? 1 : tag;
}

} // namespace tlptm::detail
