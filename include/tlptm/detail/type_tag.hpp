// tlptm — the compiler's spelling of a type's name, for error messages only.
//
// A pool does not record its root's type: compilers spell names differently (GCC and Clang
// disagree on anonymous namespaces, for one), and a renamed struct is still the same data. A
// pool's identity is its layout name and its root size (pool_options::layout, pool::root).
#pragma once

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

} // namespace tlptm::detail
