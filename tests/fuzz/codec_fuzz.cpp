// libFuzzer target for tlptm/codec.hpp.
//
// The input is copied to a heap buffer of exactly its size, so AddressSanitizer reports any
// read at or past `end` by the decoders. Checked, with abort() on the first violation:
//   - get_varint agrees with a byte-by-byte decoder written here from the format description
//     (same length, same value, same rejection of truncated and non-minimal input);
//   - every decoded value re-encodes with put_varint to the identical bytes (canonical form);
//   - the input read as 64-bit words round-trips through put_varint / get_varint, encoding
//     into a buffer of exactly put_varint_writable_bytes and decoding from one of exactly the
//     encoded length;
//   - zigzag is a bijection, get_svarint agrees with get_varint + zigzag_decode;
//   - the LEB128 reference decoder stays in bounds and its results re-encode identically.

#include <tlptm/codec.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

using namespace tlptm::codec;

void check(bool ok) {
    if (!ok) {
        std::abort();
    }
}

// A heap copy of [data, data + size) with nothing readable after it.
std::unique_ptr<std::uint8_t[]> exact_copy(const std::uint8_t* data, std::size_t size) {
    auto copy = std::make_unique<std::uint8_t[]>(size);
    if (size != 0) {
        std::memcpy(copy.get(), data, size);
    }
    return copy;
}

// The format of codec.hpp decoded one byte at a time, as an independent oracle.
std::size_t slow_get_varint(const std::uint8_t* src, std::size_t avail, std::uint64_t& out) {
    if (avail == 0) {
        return 0;
    }
    std::size_t n = 1;
    while (n < 9 && ((src[0] >> (n - 1)) & 1) != 0) {
        ++n;
    }
    if (avail < n) {
        return 0;
    }
    std::uint64_t v = 0;
    if (n == 9) {
        for (std::size_t i = 0; i < 8; ++i) {
            v |= std::uint64_t{src[1 + i]} << (8 * i);
        }
    } else {
        std::uint64_t word = 0;
        for (std::size_t i = 0; i < n; ++i) {
            word |= std::uint64_t{src[i]} << (8 * i);
        }
        v = word >> n;
    }
    // Minimal: does not fit in n - 1 bytes (7(n-1) bits for n <= 8, 56 bits for n = 9).
    if (n > 1 && (v >> (7 * (n - 1))) == 0) {
        return 0;
    }
    out = v;
    return n;
}

void check_round_trip(std::uint64_t v) {
    // Encode into exactly the documented writable size: ASan checks the write contract.
    auto room = std::make_unique<std::uint8_t[]>(put_varint_writable_bytes);
    const std::size_t n = put_varint(room.get(), v);
    check(n >= 1 && n <= max_varint_bytes && n == varint_size(v));

    auto enc = exact_copy(room.get(), n);
    std::uint64_t out = 0;
    check(get_varint(enc.get(), enc.get() + n, out) == n && out == v);
    // Every proper prefix is truncated.
    for (std::size_t len = 0; len < n; ++len) {
        check(get_varint(enc.get(), enc.get() + len, out) == 0);
    }

    const auto s = static_cast<std::int64_t>(v);
    check(zigzag_decode(zigzag_encode(s)) == s);
    check(zigzag_encode(zigzag_decode(v)) == v);

    std::uint8_t leb[reference::max_leb128_bytes];
    const std::size_t m = reference::put_leb128(leb, v);
    // Same length as LEB128 up to 56 bits; 9 bytes against 9 or 10 above.
    check(n < max_varint_bytes ? m == n : m >= max_varint_bytes);
    auto leb_exact = exact_copy(leb, m);
    check(reference::get_leb128(leb_exact.get(), leb_exact.get() + m, out) == m && out == v);
}

// Walks the buffer as a stream of varints; skips one byte after a rejected position.
void check_varint_stream(const std::uint8_t* buf, std::size_t size) {
    const std::uint8_t* const end = buf + size;
    std::uint8_t reencoded[put_varint_writable_bytes];
    for (const std::uint8_t* p = buf; p < end;) {
        std::uint64_t fast = 0;
        std::uint64_t slow = 0;
        const std::size_t n = get_varint(p, end, fast);
        check(n == slow_get_varint(p, static_cast<std::size_t>(end - p), slow));
        if (n == 0) {
            ++p;
            continue;
        }
        check(fast == slow);
        check(put_varint(reencoded, fast) == n && std::memcmp(reencoded, p, n) == 0);

        std::int64_t sv = 0;
        check(get_svarint(p, end, sv) == n && sv == zigzag_decode(fast));
        check(put_svarint(reencoded, sv) == n && std::memcmp(reencoded, p, n) == 0);
        p += n;
    }
}

void check_leb128_stream(const std::uint8_t* buf, std::size_t size) {
    const std::uint8_t* const end = buf + size;
    std::uint8_t reencoded[reference::max_leb128_bytes];
    for (const std::uint8_t* p = buf; p < end;) {
        std::uint64_t v = 0;
        const std::size_t n = reference::get_leb128(p, end, v);
        if (n == 0) {
            ++p;
            continue;
        }
        check(n <= reference::max_leb128_bytes && n <= static_cast<std::size_t>(end - p));
        check(reference::put_leb128(reencoded, v) == n && std::memcmp(reencoded, p, n) == 0);
        p += n;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto buf = exact_copy(data, size);
    check_varint_stream(buf.get(), size);
    check_leb128_stream(buf.get(), size);
    for (std::size_t i = 0; i + 8 <= size; i += 8) {
        std::uint64_t v = 0;
        std::memcpy(&v, buf.get() + i, sizeof v);
        check_round_trip(v);
        // The same word with its high bits cleared reaches every length, not mostly 9.
        check_round_trip(v >> (v & 63));
    }
    return 0;
}
