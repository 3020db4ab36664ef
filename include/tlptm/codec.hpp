// tlptm/codec.hpp — the integer codec of CBLO (compression-based log optimisation).
//
// CBLO shrinks the 64-bit words of a redo-log record (pool offset, value, mask) before they
// reach persistent memory: a signed word is first mapped by zigzag to an unsigned one with
// many leading zero bits, and an unsigned word is then stored as a *prefix varint* of 1 to 9
// bytes. This header is the whole codec; it has no state and needs only standard headers.
//
// Byte format of a prefix varint (the "PrefixVarint" layout)
// ----------------------------------------------------------
// The length n (1..9) is written in unary in the low bits of the first byte: n - 1 one bits
// followed by a zero bit (for n = 9 the first byte is all ones and has no zero bit). For
// n = 1..8 the remaining 8n - n = 7n bits of the n bytes hold the value, least significant
// bit first, starting at bit n of the first byte; read as one little-endian integer W of
// n bytes, value = W >> n. For n = 9 the first byte is 0xFF and the eight following bytes
// are the value, little-endian, all 64 bits.
//
//     n  first byte (bit 7..0)  bytes  value bits  values encoded with this length
//     1  vvvvvvv0               1       7          [0,     2^7)
//     2  vvvvvv01               2      14          [2^7,   2^14)
//     3  vvvvv011               3      21          [2^14,  2^21)
//     4  vvvv0111               4      28          [2^21,  2^28)
//     5  vvv01111               5      35          [2^28,  2^35)
//     6  vv011111               6      42          [2^35,  2^42)
//     7  v0111111               7      49          [2^42,  2^49)
//     8  01111111               8      56          [2^49,  2^56)
//     9  11111111               9      64          [2^56,  2^64)
//
// Every value has exactly one encoding: it always uses the shortest length that holds it,
// and the decoder rejects longer (non-minimal) encodings. So the log bytes are a function
// of the logged values, and re-encoding a decoded value gives back the same bytes.
//
// Worked example: 300 = 0b1'0010'1100 has 9 significant bits, so n = 2 (7 < 9 <= 14).
// W = (300 << 2) | 0b01 = 1201 = 0x04B1, stored little-endian: bytes B1 04.
// (LEB128, the byte-by-byte reference below, stores 300 as AC 02.)
// More: 0 -> 00, 127 -> FE, 128 -> 01 02, 2^56 -> FF 00 00 00 00 00 00 00 01.
//
// Why not LEB128: LEB128 spreads the length over a continuation bit in every byte, so both
// directions are a loop with one data-dependent branch per byte (the loop the TLPTM paper
// blames for CBLO's cost). Here the length comes from one count-leading-zeros on encode and
// one count-trailing-ones on decode, and the bytes move with one unaligned 8-byte store or
// load.
//
// Host requirement: little-endian (x86-64, AArch64 in its usual mode); the format itself is
// little-endian on every host.

#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tlptm::codec {

static_assert(std::endian::native == std::endian::little,
              "tlptm::codec moves varint bytes with native 8-byte loads and stores and so "
              "needs a little-endian host; a big-endian port must byte-swap in put_varint "
              "and get_varint");

/// The longest encoding of put_varint: 9 bytes (values of 2^56 and above).
inline constexpr std::size_t max_varint_bytes = 9;

/// Writable bytes put_varint needs at dst, whatever the value.
///
/// put_varint stores 1 byte for length 1, 8 bytes for lengths 2..8 and 9 bytes for length 9,
/// so it may write past the end of the encoding (with unspecified bytes) but never more than
/// 9 bytes from dst. Consequence for a buffer that receives k varints back to back: k *
/// max_varint_bytes bytes are always enough, because every encoding is at most max_varint_bytes
/// long.
inline constexpr std::size_t put_varint_writable_bytes = 9;

/// Maps a signed integer to an unsigned one so that small magnitudes get small codes.
///
/// 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ..., INT64_MAX -> 2^64 - 2, INT64_MIN -> 2^64 - 1.
/// A bijection; computed in unsigned arithmetic, so every input (INT64_MIN too) is defined.
constexpr std::uint64_t zigzag_encode(std::int64_t v) noexcept {
    const auto u = static_cast<std::uint64_t>(v);
    // 0 - (u >> 63) is all ones for negative v and 0 otherwise: the sign, spread.
    return (u << 1) ^ (std::uint64_t{0} - (u >> 63));
}

/// Inverse of zigzag_encode: zigzag_decode(zigzag_encode(v)) == v for every v.
///
/// Defined for every input; the conversion back to signed is the C++20 modular one.
constexpr std::int64_t zigzag_decode(std::uint64_t u) noexcept {
    return static_cast<std::int64_t>((u >> 1) ^ (std::uint64_t{0} - (u & 1)));
}

/// Length in bytes (1..9) of the prefix-varint encoding of v.
///
/// Equal to what put_varint(dst, v) returns; no loop, one count-leading-zeros.
constexpr std::size_t varint_size(std::uint64_t v) noexcept {
    // Significant bits, counting 0 as one bit so that it takes one byte: 1..64.
    const unsigned bits = 64u - static_cast<unsigned>(std::countl_zero(v | 1));
    // Lengths 1..8 carry 7 bits per byte: n = ceil(bits / 7) = (bits + 6) / 7, computed as
    // ((bits + 6) * 37) >> 8, which equals it for every bits + 6 up to 70 (a multiply and a
    // shift, no division). 57..64 bits take the 9-byte form.
    return bits > 56 ? max_varint_bytes : ((bits + 6) * 37) >> 8;
}

/// Encodes v as a prefix varint at dst and returns its length (1..9) — the fast encoder.
///
/// dst must have put_varint_writable_bytes (9) writable bytes: lengths 2..8 go out with one
/// unaligned 8-byte store, length 9 with a byte and an 8-byte store, length 1 with a byte,
/// so bytes after the returned length may be overwritten with unspecified values. No
/// alignment is needed. Thread-safe (no shared state).
inline std::size_t put_varint(std::uint8_t* dst, std::uint64_t v) noexcept {
    if (v < 128) [[likely]] {
        // Length 1, the most common field of a CBLO record (a full-word mask of -1 is
        // zigzag 1): one byte store, and a branch that predicts well in a record stream.
        dst[0] = static_cast<std::uint8_t>(v << 1);
        return 1;
    }
    const std::size_t n = varint_size(v);
    if (n < max_varint_bytes) [[likely]] {
        // v < 2^(7n) <= 2^56, so v << n loses nothing; the low n bits are n - 1 ones and a
        // zero, the unary length. Bytes n..7 of the store are spill within the writable 9.
        const std::uint64_t word = (v << n) | ((std::uint64_t{1} << (n - 1)) - 1);
        std::memcpy(dst, &word, sizeof word);
    } else {
        dst[0] = 0xFF;
        std::memcpy(dst + 1, &v, sizeof v);
    }
    return n;
}

/// Decodes one prefix varint from [src, end) into out and returns its length (1..9) — the
/// fast, safe decoder.
///
/// Returns 0, and leaves out unchanged, when the input is truncated (end - src is shorter
/// than the length announced by the first byte, or src == end) or when the encoding is not
/// minimal (a value written with more bytes than varint_size says). Never reads at or past
/// end: it uses one unaligned 8-byte load only when 8 bytes are readable. The input is
/// untrusted; any bytes are allowed. Thread-safe (no shared state).
inline std::size_t get_varint(const std::uint8_t* src, const std::uint8_t* end,
                              std::uint64_t& out) noexcept {
    if (src >= end) {
        return 0;
    }
    const std::uint8_t first = src[0];
    if ((first & 1) == 0) [[likely]] {
        // Length 1 (always minimal). Besides saving work, the branch lets the CPU predict
        // the length of the many 1-byte fields (masks of -1, small values) and run ahead
        // instead of waiting for the load and bit count that give it.
        out = first >> 1;
        return 1;
    }
    const auto avail = static_cast<std::size_t>(end - src);
    const auto n = static_cast<std::size_t>(std::countr_one(first)) + 1; // 2..9
    if (avail < n) {
        return 0;
    }
    std::uint64_t v = 0;
    if (n < max_varint_bytes) [[likely]] {
        std::uint64_t word = 0;
        if (avail >= sizeof word) [[likely]] {
            std::memcpy(&word, src, sizeof word);
        } else {
            std::memcpy(&word, src, n); // tail of the buffer: read only what exists
        }
        // Shift the bytes after the encoding out at the top, then drop the n length bits;
        // both shift counts are in 0..63 for n in 2..8.
        v = (word << (64 - 8 * n)) >> (64 - 7 * n);
    } else {
        std::memcpy(&v, src + 1, sizeof v);
    }
    // Minimal form: a length-n value is at least 2^(7(n - 1)), the first value that does
    // not fit n - 1 bytes (2^56 for n = 9). Checked as a bound rather than as
    // varint_size(v) == n so that the compiler keeps advancing by the n of the first byte,
    // not by a length recomputed from the decoded word (a much longer dependency chain when
    // varints are decoded back to back).
    const std::uint64_t min_value = std::uint64_t{1} << (7 * n - 7);
    if (v < min_value) {
        return 0; // non-minimal: the value has a shorter encoding
    }
    out = v;
    return n;
}

/// Encodes a signed v as zigzag_encode(v) with put_varint; returns the length (1..9).
///
/// Same buffer contract as put_varint: dst needs put_varint_writable_bytes writable bytes.
inline std::size_t put_svarint(std::uint8_t* dst, std::int64_t v) noexcept {
    return put_varint(dst, zigzag_encode(v));
}

/// Decodes a varint written by put_svarint from [src, end) into out; returns its length.
///
/// Same contract as get_varint: 0 (out unchanged) on truncated or non-minimal input, never
/// reads at or past end.
inline std::size_t get_svarint(const std::uint8_t* src, const std::uint8_t* end,
                               std::int64_t& out) noexcept {
    std::uint64_t u = 0;
    const std::size_t n = get_varint(src, end, u);
    if (n != 0) {
        out = zigzag_decode(u);
    }
    return n;
}

/// The byte-by-byte LEB128 codec: the baseline that the benchmark compares against.
///
/// This is the loop the TLPTM paper uses for CBLO (7 value bits per byte, least significant
/// group first, bit 7 set on every byte but the last). It is not the log format; the
/// library writes prefix varints.
namespace reference {

/// The longest LEB128 encoding of a 64-bit value: 10 bytes.
inline constexpr std::size_t max_leb128_bytes = 10;

/// Encodes v as LEB128 at dst and returns its length (1..10); writes exactly that many
/// bytes.
inline std::size_t put_leb128(std::uint8_t* dst, std::uint64_t v) noexcept {
    std::size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = static_cast<std::uint8_t>(v | 0x80);
        v >>= 7;
    }
    dst[n++] = static_cast<std::uint8_t>(v);
    return n;
}

/// Decodes one LEB128 value from [src, end) into out and returns its length (1..10).
///
/// Returns 0, leaving out unchanged, when the input is truncated (no final byte before end)
/// or overlong: more than 10 bytes, bits beyond 64 in the 10th byte, or a redundant final
/// zero group (non-minimal, e.g. 80 00 for 0). Never reads at or past end.
inline std::size_t get_leb128(const std::uint8_t* src, const std::uint8_t* end,
                              std::uint64_t& out) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < max_leb128_bytes && src + i < end; ++i) {
        const std::uint8_t byte = src[i];
        const std::uint64_t group = byte & 0x7F;
        if (i == max_leb128_bytes - 1 && byte > 1) {
            return 0; // the 10th byte may only carry bit 63
        }
        v |= group << (7 * i);
        if ((byte & 0x80) == 0) {
            if (byte == 0 && i != 0) {
                return 0; // a zero final group after a continuation byte: non-minimal
            }
            out = v;
            return i + 1;
        }
    }
    return 0; // truncated, or still continuing after 10 bytes
}

} // namespace reference

} // namespace tlptm::codec
