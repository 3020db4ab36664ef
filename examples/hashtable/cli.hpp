// Command-line pieces shared by the benchmark programs (tlptm-workloads, tlptm-scale,
// paired_bench): the usage error they exit 2 with, comma lists and integer arguments.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace workloads::cli {

/// A bad command line: the program prints it with its usage and exits with status 2.
class usage_error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The comma-separated parts of s ("a,,b" gives "a", "", "b"; "" gives one empty part).
inline std::vector<std::string> split(std::string_view s) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const std::size_t comma = s.find(',', start);
        parts.emplace_back(s.substr(start, comma - start));
        if (comma == std::string_view::npos)
            return parts;
        start = comma + 1;
    }
}

/// The numbers of v comma-separated, as split() takes them apart: {1, 2} gives "1,2".
template <class T> std::string join(const std::vector<T>& v) {
    std::string s;
    for (const T& x : v)
        s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

/// v as a non-negative integer, for option `opt`: decimal digits only, at most 19 of them (so
/// it always fits in 64 bits). @throw usage_error anything else
inline std::uint64_t parse_u64(const std::string& opt, const std::string& v) {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19)
        throw usage_error(opt + " needs a non-negative integer, got '" + v + "'");
    return std::stoull(v);
}

} // namespace workloads::cli
