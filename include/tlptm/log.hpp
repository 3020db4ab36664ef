// tlptm — redo-log entries and the per-thread log ring (DESIGN.md §3, docs/log-format.md).
//
// A ring holds one entry per committed update transaction, byte-packed one after another from
// the start of the ring's data area. Two entry formats exist (the first byte says which):
//
//   baseline (1)    Mnemosyne-style: a 16-byte header {format, ts (7 bytes), length (4),
//                   CRC (4)} and 24 bytes per logged word (offset, value, byte mask).
//   compressed (2)  CBLO: a 7..23-byte header {format, varint payload length, varint ts delta,
//                   CRC (4)} and records that delta-code offsets, merge runs of adjacent words,
//                   drop full masks and varint-code values (codec.hpp).
//
// The CRC32C of an entry covers the ring generation, the entry's timestamp and every byte of
// the entry but the CRC itself, so a torn entry (a crash while its non-temporal stores were in
// flight) or a stale entry of an earlier generation never validates: the commit needs no
// separate commit flag and no second fence before the data write-back.
//
// An entry of a transaction that allocated may also cover the blocks it allocated (bit 0x80 of
// the format byte): its payload then starts with the blocks' ranges and a CRC32C of their
// contents at commit, so that the blocks need no fence of their own before the entry (F0):
// recovery treats a ring's last entry whose blocks do not match as not committed.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <tlptm/codec.hpp>
#include <tlptm/detail/crc32c.hpp>
#include <tlptm/detail/layout.hpp>

namespace tlptm {

/// Which log optimisations a pool's transactions use (the paper's configurations).
enum class log_mode : std::uint8_t {
    baseline, ///< Mnemosyne-style: every store logged as address/value/mask, 64 bits each
    aalo,     ///< stores into memory allocated by the same transaction are not logged
    cblo,     ///< log records are compressed
    tlptm,    ///< aalo + cblo (the default)
};

/// Name of a log mode ("baseline", "aalo", "cblo", "tlptm").
inline const char* to_string(log_mode m) noexcept {
    switch (m) {
    case log_mode::baseline:
        return "baseline";
    case log_mode::aalo:
        return "aalo";
    case log_mode::cblo:
        return "cblo";
    case log_mode::tlptm:
        return "tlptm";
    }
    return "?";
}

namespace detail {

/// The format byte of an entry: how its header and payload are encoded.
enum class entry_format : std::uint8_t {
    baseline = 1,   ///< fixed 16-byte header; records of three 64-bit words
    compressed = 2, ///< varint header; CBLO records
};

/// Bit of the format byte: the payload starts with a covered-blocks section (ranges of the
/// blocks the transaction allocated and the CRC32C of their contents).
inline constexpr std::uint8_t entry_covers_blocks = 0x80;

/// A range of pool bytes (offset from the pool base, size).
struct pool_range {
    std::uint64_t offset;
    std::uint64_t size;
};

inline constexpr std::size_t baseline_header_bytes = 16;
/// Largest compressed header: format + two 9-byte varints + CRC.
inline constexpr std::size_t max_compressed_header_bytes = 1 + 9 + 9 + 4;

/// One logged store: an aligned 8-byte word of the pool (by offset from the pool base), its new
/// value and which of its bytes the store covers (0xFF per byte written).
struct log_record {
    std::uint64_t offset;
    std::uint64_t value;
    std::uint64_t mask;
};

inline std::uint64_t load_u64(const std::uint8_t* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
inline void store_u64(std::uint8_t* p, std::uint64_t v) noexcept {
    std::memcpy(p, &v, 8);
}

/// CRC of an entry: generation, timestamp, then the entry's bytes without its CRC field
/// (`crc_at` is where the 4 CRC bytes sit).
#if defined(__x86_64__)
/// entry_crc with the crc32 instruction: one call, the four pieces inlined.
__attribute__((target("sse4.2"))) inline std::uint32_t
entry_crc_hw(const std::uint8_t* e, std::size_t length, std::size_t crc_at, std::uint64_t gen,
             std::uint64_t ts) noexcept {
    std::uint32_t c = static_cast<std::uint32_t>(_mm_crc32_u64(crc32c_init, gen));
    c = static_cast<std::uint32_t>(_mm_crc32_u64(c, ts));
    c = crc32c_update_hw(c, e, crc_at);
    c = crc32c_update_hw(c, e + crc_at + 4, length - crc_at - 4);
    return crc32c_final(c);
}
#endif

inline std::uint32_t entry_crc(const std::uint8_t* e, std::size_t length, std::size_t crc_at,
                               std::uint64_t gen, std::uint64_t ts) noexcept {
#if defined(__x86_64__)
    if (crc32c_has_hw)
        return entry_crc_hw(e, length, crc_at, gen, ts);
#endif
    std::uint32_t c = crc32c_update(crc32c_init, &gen, sizeof gen);
    c = crc32c_update(c, &ts, sizeof ts);
    c = crc32c_update(c, e, crc_at);
    c = crc32c_update(c, e + crc_at + 4, length - crc_at - 4);
    return crc32c_final(c);
}

// ---- compressed records (CBLO) --------------------------------------------------------------
//
// Records are sorted by offset. Each starts with a varint H:
//   H = gap << 3 | pointer << 2 | partial << 1 | run
//   gap      words between the end of the previous record (initially offset 0) and this one
//   run      a varint count - 2 follows: count >= 2 adjacent full words
//   partial  one byte-enable byte follows (the word's mask, neither 0x00 nor 0xFF)
//   pointer  the values are pool pointers, coded as varint(value - pool base)
// then one varint per word: zigzag(value) for plain full words, the masked bytes gathered low
// for a partial word, value - base for pointers.

/// The 8-bit byte-enable form of a byte mask (bit i set if byte i is written).
inline std::uint8_t byte_enables(std::uint64_t mask) noexcept {
    // Bit 0 of each byte becomes the OR of the byte's bits (no bit crosses into another
    // byte's bit 0), then one multiplication gathers the eight bit-0s into the top byte.
    std::uint64_t t = ((mask & 0xF0F0F0F0F0F0F0F0ull) >> 4) | (mask & 0x0F0F0F0F0F0F0F0Full);
    t |= t >> 2;
    t |= t >> 1;
    return static_cast<std::uint8_t>(((t & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
}
inline std::uint64_t mask_of(std::uint8_t be) noexcept {
    // Bit i of be to bit 0 of byte i (one step per set bit), then each such byte filled.
    std::uint64_t lows = 0;
    for (unsigned b = be; b != 0; b &= b - 1)
        lows |= std::uint64_t{1} << (8 * std::countr_zero(b));
    return lows * 0xFF;
}
/// The bytes of v selected by be, packed from the low end (a byte-wise PEXT): one step per
/// selected byte.
inline std::uint64_t gather_bytes(std::uint64_t v, std::uint8_t be) noexcept {
    std::uint64_t r = 0;
    int k = 0;
    for (unsigned b = be; b != 0; b &= b - 1, ++k)
        r |= ((v >> (8 * std::countr_zero(b))) & 0xFF) << (8 * k);
    return r;
}
inline std::uint64_t scatter_bytes(std::uint64_t packed, std::uint8_t be) noexcept {
    std::uint64_t r = 0;
    int k = 0;
    for (unsigned b = be; b != 0; b &= b - 1, ++k)
        r |= ((packed >> (8 * k)) & 0xFF) << (8 * std::countr_zero(b));
    return r;
}

/// Where in-pool pointers lie, so that they can be logged as pool offsets.
struct pointer_range {
    std::uint64_t base = 0; ///< pool base address (0: no pointer coding)
    std::uint64_t size = 0;
    bool contains(std::uint64_t v) const noexcept { return base != 0 && v - base < size; }
};

/// The logged words of a record array, in order, for the encoders (a cursor: the write-set
/// has one over its runs).
struct record_cursor {
    const log_record* p;
    const log_record* end;
    bool done() const noexcept { return p == end; }
    std::uint64_t offset() const noexcept { return p->offset; }
    std::uint64_t value() const noexcept { return p->value; }
    std::uint64_t mask() const noexcept { return p->mask; }
    void next() noexcept { ++p; }
};

/// A cursor that can hand out the rest of its current run as an array: run_values() is the
/// values of the words from the current one to the end of its run, at consecutive offsets with
/// full masks (valid when the current word's mask is full), and skip(n) moves past n of them
/// (n at most run_values().size()). The write-set's cursor is one; the encoder then scans and
/// encodes a multi-word value as an array instead of stepping the cursor word by word.
template <class Cursor>
concept run_cursor = requires(Cursor c, std::size_t n) {
    { c.run_values() } -> std::same_as<std::span<const std::uint64_t>>;
    c.skip(n);
};

/// Encodes the words of cursor `c` (ascending offsets) as compressed records at `out`, which
/// must have room for compressed_bound(words) bytes. Returns the bytes written.
template <class Cursor>
[[gnu::always_inline]] inline std::size_t encode_compressed(std::uint8_t* out, Cursor c,
                                                            pointer_range ptrs) noexcept {
    constexpr std::uint64_t full = ~std::uint64_t{0};
    // The pointer range in locals: the byte stores below may alias anything in memory.
    const std::uint64_t base = ptrs.base, span = base == 0 ? 0 : ptrs.size;
    std::uint8_t* p = out;
    std::uint64_t expect = 0; // offset just past the previous record
    while (!c.done()) {
        const std::uint64_t off = c.offset(), v = c.value(), m = c.mask();
        const std::uint64_t gap = (off - expect) / 8;
        if (m != full) {
            std::uint8_t be = byte_enables(m);
            p += codec::put_varint(p, gap << 3 | 2);
            *p++ = be;
            p += codec::put_varint(p, gather_bytes(v, be));
            expect = off + 8;
            c.next();
            continue;
        }
        // Extend the record over adjacent full words of the same kind.
        const bool ptr = v - base < span;
        Cursor e = c;
        std::size_t count = 1;
        if constexpr (run_cursor<Cursor>) {
            // The rest of the current run first, as an array (a 256-byte value is 32 words).
            if (const std::span<const std::uint64_t> rest = c.run_values(); rest.size() > 1) {
                // Four words a step while all four are of the kind (no branch per word).
                const std::uint64_t* r = rest.data();
                auto other = [&](std::uint64_t x) { return (x - base < span) != ptr; };
                while (count + 4 <= rest.size() && !(other(r[count]) | other(r[count + 1]) |
                                                     other(r[count + 2]) | other(r[count + 3])))
                    count += 4;
                while (count < rest.size() && !other(r[count]))
                    ++count;
                e.skip(count);
            } else {
                e.next();
            }
        } else {
            e.next();
        }
        std::uint64_t next = off + 8 * count;
        // Then word by word across run boundaries (adjacent runs, single-word stores).
        for (; !e.done() && e.offset() == next && e.mask() == full &&
               (e.value() - base < span) == ptr;
             e.next(), next += 8)
            ++count;
        const std::uint64_t flags = (ptr ? 4u : 0u) | (count > 1 ? 1u : 0u);
        p += codec::put_varint(p, gap << 3 | flags);
        if (count > 1)
            p += codec::put_varint(p, count - 2);
        if (count == 1) { // a single word (the common record of small transactions)
            p += codec::put_varint(p, ptr ? v - base
                                          : codec::zigzag_encode(static_cast<std::int64_t>(v)));
            c.next();
        } else if constexpr (run_cursor<Cursor>) {
            // Every word counted has a full mask, so each run met is handed out as an array.
            for (std::size_t left = count; left != 0;) {
                const std::span<const std::uint64_t> vals = c.run_values();
                const std::uint64_t* x = vals.data();
                const std::size_t n = std::min(left, vals.size());
                if (ptr) {
                    for (std::size_t k = 0; k < n; ++k)
                        p += codec::put_varint(p, x[k] - base);
                } else {
                    for (std::size_t k = 0; k < n; ++k)
                        p += codec::put_varint(
                            p, codec::zigzag_encode(static_cast<std::int64_t>(x[k])));
                }
                c.skip(n);
                left -= n;
            }
        } else if (ptr) {
            for (std::size_t k = 0; k < count; ++k, c.next())
                p += codec::put_varint(p, c.value() - base);
        } else {
            for (std::size_t k = 0; k < count; ++k, c.next())
                p += codec::put_varint(p,
                                       codec::zigzag_encode(static_cast<std::int64_t>(c.value())));
        }
        expect = next;
    }
    return static_cast<std::size_t>(p - out);
}

/// Encodes sorted `records` as compressed records at `out`, which must have room for
/// compressed_bound(records.size()) bytes. Returns the bytes written.
inline std::size_t encode_compressed_records(std::uint8_t* out, std::span<const log_record> records,
                                             pointer_range ptrs) noexcept {
    return encode_compressed(out, record_cursor{records.data(), records.data() + records.size()},
                             ptrs);
}

/// Most bytes one record can take in encode_compressed_records' output.
inline constexpr std::size_t compressed_bound_per_record = 9 + 1 + 9;

/// Upper bound of encode_compressed_records' output for n records (spill of the last varint
/// store included).
inline constexpr std::size_t compressed_bound(std::size_t n) noexcept {
    return n * compressed_bound_per_record + codec::put_varint_writable_bytes;
}

/// Decodes compressed records from [p, end), calling f(log_record) for each word. Returns
/// false on malformed input (truncated varint, bad flags, a count or gap that overflows, bytes
/// left over); f may then have seen a prefix. Reads nothing outside [p, end).
template <class F>
bool decode_compressed_records(const std::uint8_t* p, const std::uint8_t* end,
                               std::uint64_t pool_base, F&& f) {
    std::uint64_t expect = 0;
    while (p < end) {
        std::uint64_t h;
        std::size_t k = codec::get_varint(p, end, h);
        if (k == 0)
            return false;
        p += k;
        std::uint64_t gap = h >> 3;
        bool run = h & 1, partial = h & 2, ptr = h & 4;
        if (partial && (run || ptr))
            return false;
        std::uint64_t offset;
        if (gap > (~std::uint64_t{0} >> 3) || __builtin_add_overflow(expect, gap * 8, &offset))
            return false;
        std::uint64_t count = 1;
        if (run) {
            std::uint64_t c;
            if ((k = codec::get_varint(p, end, c)) == 0)
                return false;
            p += k;
            // Each word takes at least one byte, which bounds the count by what is left.
            if (c > static_cast<std::uint64_t>(end - p))
                return false;
            count = c + 2;
        }
        std::uint64_t mask = ~std::uint64_t{0};
        std::uint8_t be = 0xFF;
        if (partial) {
            if (p >= end)
                return false;
            be = *p++;
            if (be == 0 || be == 0xFF)
                return false;
            mask = mask_of(be);
        }
        for (std::uint64_t w = 0; w < count; ++w) {
            std::uint64_t v;
            if ((k = codec::get_varint(p, end, v)) == 0)
                return false;
            p += k;
            std::uint64_t value;
            if (partial) {
                if (v > mask_of(static_cast<std::uint8_t>((1u << std::popcount(be)) - 1)))
                    return false;
                value = scatter_bytes(v, be);
            } else if (ptr) {
                if (pool_base == 0 || __builtin_add_overflow(pool_base, v, &value))
                    return false;
            } else {
                value = static_cast<std::uint64_t>(codec::zigzag_decode(v));
            }
            std::uint64_t off;
            if (__builtin_add_overflow(offset, w * 8, &off) || off > ~std::uint64_t{0} - 8)
                return false;
            f(log_record{off, value, mask});
        }
        expect = offset + count * 8;
    }
    return true;
}

// ---- whole entries ----------------------------------------------------------------------------

/// Builds entries in a reusable buffer: the payload first (its size decides where the ring
/// must make room), then the header once the timestamp is known.
class entry_builder {
public:
    /// Encodes the payload of `records` (sorted by offset) in `format`; returns an upper bound
    /// of the entry's size. `covered` (sorted by offset, disjoint, each non-empty): ranges of
    /// blocks whose contents must match `covered_crc` for the entry to count as committed when
    /// it is its ring's last (see covered_blocks_crc); empty: none.
    std::size_t encode(entry_format format, std::span<const log_record> records, pointer_range ptrs,
                       std::span<const pool_range> covered = {}, std::uint32_t covered_crc = 0) {
        return encode_words(format, record_cursor{records.data(), records.data() + records.size()},
                            records.size(), ptrs, covered, covered_crc);
    }

    /// encode() of one whole word at `offset` (mask all ones) in the compressed format, covering
    /// no blocks: the same bytes as the general encoder gives it, without its loop (a one-word
    /// update is the commonest transaction).
    std::size_t encode_one_word(std::uint64_t offset, std::uint64_t value, pointer_range ptrs) {
        format_ = entry_format::compressed;
        covers_ = false;
        payload_at_ = edge_slack + max_compressed_header_bytes;
        make_room(payload_at_ + compressed_bound(1) + edge_slack);
        std::uint8_t* const start = buf_.data() + payload_at_;
        const std::uint64_t span = ptrs.base == 0 ? 0 : ptrs.size;
        const bool ptr = value - ptrs.base < span;
        std::uint8_t* p = start + codec::put_varint(start, offset / 8 << 3 | (ptr ? 4u : 0u));
        p += codec::put_varint(p, ptr ? value - ptrs.base
                                      : codec::zigzag_encode(static_cast<std::int64_t>(value)));
        payload_ = static_cast<std::size_t>(p - start);
        return max_compressed_header_bytes + payload_;
    }

    /// encode() of the `words` words of cursor `c` (ascending offsets).
    template <class Cursor>
    [[gnu::always_inline]] std::size_t
    encode_words(entry_format format, Cursor c, std::size_t words, pointer_range ptrs,
                 std::span<const pool_range> covered = {}, std::uint32_t covered_crc = 0) {
        format_ = format;
        covers_ = !covered.empty();
        payload_at_ = edge_slack + (format == entry_format::baseline ? baseline_header_bytes
                                                                     : max_compressed_header_bytes);
        std::size_t section_bound =
            covers_ ? 9 + covered.size() * 18 + 4 + codec::put_varint_writable_bytes : 0;
        std::size_t records_bound =
            format == entry_format::baseline ? 24 * words : compressed_bound(words);
        make_room(payload_at_ + section_bound + records_bound + edge_slack);
        std::uint8_t* p = buf_.data() + payload_at_;
        if (covers_) {
            p += codec::put_varint(p, covered.size());
            std::uint64_t end = 0;
            for (const pool_range& r : covered) {
                p += codec::put_varint(p, r.offset - end);
                p += codec::put_varint(p, r.size);
                end = r.offset + r.size;
            }
            std::memcpy(p, &covered_crc, 4);
            p += 4;
        }
        if (format == entry_format::baseline) {
            for (; !c.done(); c.next(), p += 24) {
                store_u64(p, c.offset());
                store_u64(p + 8, c.value());
                store_u64(p + 16, c.mask());
            }
        } else {
            p += encode_compressed(p, c, ptrs);
        }
        payload_ = static_cast<std::size_t>(p - (buf_.data() + payload_at_));
        return payload_at_ - edge_slack + payload_;
    }

    /// Writes the header for timestamp `ts` (the previous entry of the ring, or the ring's base
    /// timestamp, is `prev_ts` < ts) and seals the entry with its CRC for generation `gen`.
    /// Returns the entry's bytes.
    [[gnu::always_inline]] std::span<const std::uint8_t>
    seal(std::uint64_t ts, std::uint64_t prev_ts, std::uint64_t gen) {
        std::uint8_t* e;
        std::size_t length, crc_at;
        const std::uint8_t format_byte = static_cast<std::uint8_t>(
            static_cast<std::uint8_t>(format_) | (covers_ ? entry_covers_blocks : 0));
        if (format_ == entry_format::baseline) {
            e = buf_.data() + edge_slack;
            length = baseline_header_bytes + payload_;
            store_u64(e, format_byte | ts << 8);
            auto len32 = static_cast<std::uint32_t>(length);
            std::memcpy(e + 8, &len32, 4);
            crc_at = 12;
        } else if ((payload_ | (ts - prev_ts)) < 128) [[likely]] {
            // Both header varints take one byte (a small transaction, consecutive commits of
            // the ring): the three header bytes as put_varint writes them, no spill to undo.
            crc_at = 3;
            e = buf_.data() + payload_at_ - 7;
            e[0] = format_byte;
            e[1] = static_cast<std::uint8_t>(payload_ << 1);
            e[2] = static_cast<std::uint8_t>((ts - prev_ts) << 1);
            length = 7 + payload_;
        } else {
            // The header goes right before the payload: its size first, then its bytes. A
            // varint store may spill a few bytes past its encoding, into the CRC (written
            // later) and the payload's first bytes, which are put back.
            const std::size_t n1 = codec::varint_size(payload_);
            const std::size_t n2 = codec::varint_size(ts - prev_ts);
            crc_at = 1 + n1 + n2;
            std::uint8_t* payload = buf_.data() + payload_at_;
            const std::uint64_t first_payload_word = load_u64(payload);
            e = payload - (crc_at + 4);
            e[0] = format_byte;
            codec::put_varint(e + 1, payload_);
            codec::put_varint(e + 1 + n1, ts - prev_ts);
            store_u64(payload, first_payload_word);
            length = crc_at + 4 + payload_;
        }
        std::uint32_t crc = entry_crc(e, length, crc_at, gen, ts);
        std::memcpy(e + crc_at, &crc, 4);
        sealed_ = {e, length};
        return {e, length};
    }

    /// The entry seal made last, widened to whole 8-byte words of the ring for an entry that
    /// starts at ring offset `pos`: the first `pos % 8` bytes are the ring's bytes before the
    /// entry, taken from `before` (the word at `pos & ~7` as the ring holds it), and the bytes
    /// after the entry up to the next word boundary are zero. Written at `pos & ~7`, it puts
    /// the entry in place with aligned 8-byte stores and rewrites the bytes before the entry
    /// with the values they already hold.
    std::span<const std::uint8_t> widen_to_words(std::size_t pos, std::uint64_t before) noexcept {
        const std::size_t lead = pos % 8;
        std::uint8_t* e = sealed_.data(); // in buf_, with edge_slack bytes free on either side
        std::uint8_t* w = e - lead;
        const std::size_t n = (lead + sealed_.size() + 7) / 8 * 8;
        // Whole-word merges instead of byte copies: the first word takes its first `lead`
        // bytes from `before`, the last word keeps only the entry's bytes (zeros after them).
        const std::uint64_t keep_low = lead == 0 ? 0 : ~std::uint64_t{0} >> (64 - 8 * lead);
        store_u64(w, (before & keep_low) | (load_u64(w) & ~keep_low));
        const std::size_t tail = (lead + sealed_.size()) % 8; // entry bytes in the last word
        if (tail != 0) {
            std::uint8_t* last = w + n - 8;
            store_u64(last, load_u64(last) & (~std::uint64_t{0} >> (64 - 8 * tail)));
        }
        return {w, n};
    }

    /// The entry seal made last, widened to the whole cache lines of the ring it touches, for
    /// an entry that starts at ring offset `pos`: the first `pos % 64` bytes are the ring's
    /// bytes before the entry, taken from `line` (the line at `pos & ~63` as the ring holds
    /// it), and the bytes after the entry up to the next line boundary are zero. Written at
    /// `pos & ~63`, it puts the entry in place with whole-line stores and rewrites the bytes
    /// before the entry with the values they already hold.
    std::span<const std::uint8_t> widen_to_lines(std::size_t pos,
                                                 const std::uint8_t* line) noexcept {
        constexpr std::size_t l = 64;
        const std::size_t lead = pos % l;
        std::uint8_t* w = sealed_.data() - lead; // in buf_, with edge_slack = l bytes around
        std::memcpy(w, line, lead);
        const std::size_t end = lead + sealed_.size();
        std::memset(w + end, 0, l); // up to the line's end, and beyond it into the slack
        return {w, (end + l - 1) / l * l};
    }

private:
    /// Makes buf_ at least `need` bytes long. It only grows: its bytes need no initialisation
    /// (every byte of an entry is written before it is used).
    [[gnu::always_inline]] void make_room(std::size_t need) {
        if (buf_.size() < need) [[unlikely]]
            buf_.resize(std::max(need, 2 * buf_.size()));
    }

    /// Free bytes before and after the entry in buf_, for widen_to_words and widen_to_lines.
    static constexpr std::size_t edge_slack = 64;

    entry_format format_ = entry_format::baseline;
    bool covers_ = false;
    std::size_t payload_at_ = 0, payload_ = 0;
    std::span<std::uint8_t> sealed_;
    std::vector<std::uint8_t> buf_;
};

/// Keeps a copy of a ring's tail line true (`line`: the ring's 64 bytes at head & ~63, zeros
/// from head on; thread_slot::tail_line) once `entry` has been written at ring offset `head`:
/// the line where the entry ends holds the entry's bytes there, after the bytes before it when
/// the entry starts in the same line, and zeros from the entry's end on.
inline void advance_tail_line(std::uint8_t* line, std::size_t head,
                              std::span<const std::uint8_t> entry) noexcept {
    const std::size_t end = head + entry.size();
    const std::size_t from = std::max(head, end / 64 * 64); // the entry's first byte in that line
    if (from != head)                                       // a line of its own: nothing before
        std::memset(line, 0, 64);
    std::memcpy(line + from % 64, entry.data() + (from - head), end - from);
}

/// A validated entry inside a ring.
struct entry_view {
    std::uint64_t ts = 0;
    entry_format format{};
    std::size_t length = 0;                ///< bytes of the whole entry
    const std::uint8_t* payload = nullptr; ///< the records
    std::size_t payload_size = 0;
    /// The covered-blocks section (nullptr: none): the range count, the ranges, the CRC.
    const std::uint8_t* covered = nullptr;
    std::size_t covered_size = 0;
};

/// Parses a covered-blocks section at [p, end) (see entry_builder::encode): calls f(pool_range)
/// for each range and returns the section's size with the CRC in `crc`, or 0 if the section is
/// malformed (no range, an empty range, a varint that does not decode, offsets that overflow,
/// ranges out of order, a missing CRC). Reads nothing outside [p, end).
template <class F>
std::size_t parse_covered(const std::uint8_t* p, const std::uint8_t* end, std::uint32_t& crc,
                          F&& f) {
    const std::uint8_t* start = p;
    std::uint64_t n;
    std::size_t k = codec::get_varint(p, end, n);
    // Each range takes at least two bytes, which bounds the count by what is left.
    if (k == 0 || n == 0 || n > static_cast<std::uint64_t>(end - p - k) / 2)
        return 0;
    p += k;
    std::uint64_t at = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        std::uint64_t gap, size, off;
        if ((k = codec::get_varint(p, end, gap)) == 0)
            return 0;
        p += k;
        if ((k = codec::get_varint(p, end, size)) == 0)
            return 0;
        p += k;
        if (size == 0 || __builtin_add_overflow(at, gap, &off) ||
            __builtin_add_overflow(off, size, &at))
            return 0;
        f(pool_range{off, size});
    }
    if (end - p < 4)
        return 0;
    std::memcpy(&crc, p, 4);
    return static_cast<std::size_t>(p + 4 - start);
}

/// Calls f(pool_range) for every covered block of a validated entry; returns their CRC.
template <class F> std::uint32_t for_each_covered(const entry_view& e, F&& f) {
    std::uint32_t crc = 0;
    if (e.covered)
        parse_covered(e.covered, e.covered + e.covered_size, crc, f);
    return crc;
}

/// CRC32C of the contents of `ranges` (in order) in the pool mapped at `base`: what an entry
/// that covers them records at commit, and what recovery recomputes.
inline std::uint32_t covered_blocks_crc(const std::uint8_t* base,
                                        std::span<const pool_range> ranges) noexcept {
    std::uint32_t c = crc32c_init;
    for (const pool_range& r : ranges)
        c = crc32c_update(c, base + r.offset, r.size);
    return crc32c_final(c);
}

/// An entry's header as read, before its CRC is checked.
struct entry_header {
    bool covers = false;
    std::uint8_t format = 0;
    std::uint64_t ts = 0;
    std::size_t length = 0, crc_at = 0, payload_at = 0;
};

/// Reads the header of the entry at `e` (at most `avail` readable bytes) whose ring
/// predecessor has timestamp `prev_ts`: known format, lengths in bounds, timestamp increasing.
/// Checks no CRC. Reads nothing past `e + avail`.
inline bool read_entry_header(const std::uint8_t* e, std::size_t avail, std::uint64_t prev_ts,
                              entry_header& h) noexcept {
    if (avail < 1)
        return false;
    h.covers = (e[0] & entry_covers_blocks) != 0;
    h.format = static_cast<std::uint8_t>(e[0] & ~entry_covers_blocks);
    if (h.format == static_cast<std::uint8_t>(entry_format::baseline)) {
        if (avail < baseline_header_bytes)
            return false;
        h.ts = load_u64(e) >> 8;
        std::uint32_t len32;
        std::memcpy(&len32, e + 8, 4);
        h.length = len32;
        h.crc_at = 12;
        h.payload_at = baseline_header_bytes;
        if (h.length < baseline_header_bytes || h.length > avail)
            return false;
    } else if (h.format == static_cast<std::uint8_t>(entry_format::compressed)) {
        const std::uint8_t* end = e + avail;
        const std::uint8_t* p = e + 1;
        std::uint64_t payload, delta;
        std::size_t k = codec::get_varint(p, end, payload);
        if (k == 0)
            return false;
        p += k;
        if ((k = codec::get_varint(p, end, delta)) == 0)
            return false;
        p += k;
        h.crc_at = static_cast<std::size_t>(p - e);
        h.payload_at = h.crc_at + 4;
        if (delta == 0 || delta > max_timestamp - prev_ts)
            return false;
        h.ts = prev_ts + delta;
        if (h.payload_at > avail || payload > avail - h.payload_at)
            return false;
        h.length = h.payload_at + payload;
    } else {
        return false;
    }
    return h.ts > prev_ts && h.ts <= max_timestamp;
}

/// Validates the entry at `e` with at most `avail` readable bytes for generation `gen`, where
/// the ring's previous entry (or base) has timestamp `prev_ts`: known format, lengths in
/// bounds, timestamp increasing, CRC. Reads nothing past `e + avail`.
inline bool parse_entry(const std::uint8_t* e, std::size_t avail, std::uint64_t gen,
                        std::uint64_t prev_ts, entry_view& out) noexcept {
    entry_header h;
    if (!read_entry_header(e, avail, prev_ts, h))
        return false;
    const auto [covers, format, ts, length, crc_at, payload_at] = h;
    std::uint32_t crc;
    std::memcpy(&crc, e + crc_at, 4);
    if (entry_crc(e, length, crc_at, gen, ts) != crc)
        return false;
    std::size_t section = 0;
    if (covers) {
        std::uint32_t blocks_crc;
        section = parse_covered(e + payload_at, e + length, blocks_crc, [](pool_range) {});
        if (section == 0)
            return false;
    }
    if (format == static_cast<std::uint8_t>(entry_format::baseline) &&
        (length - payload_at - section) % 24 != 0)
        return false;
    out.ts = ts;
    out.format = static_cast<entry_format>(format);
    out.length = length;
    out.covered = covers ? e + payload_at : nullptr;
    out.covered_size = section;
    out.payload = e + payload_at + section;
    out.payload_size = length - payload_at - section;
    return true;
}

/// Calls f(log_record) for every record of a validated entry; `pool_base` decodes pool
/// pointers. Returns false if the payload is malformed (f may then have seen a prefix).
template <class F> bool decode_records(const entry_view& e, std::uint64_t pool_base, F&& f) {
    switch (e.format) {
    case entry_format::baseline:
        if (e.payload_size % 24 != 0)
            return false;
        for (std::size_t i = 0; i < e.payload_size; i += 24) {
            const std::uint8_t* p = e.payload + i;
            f(log_record{load_u64(p), load_u64(p + 8), load_u64(p + 16)});
        }
        return true;
    case entry_format::compressed:
        return decode_compressed_records(e.payload, e.payload + e.payload_size, pool_base, f);
    }
    return false;
}

/// A thread slot's log ring inside the mapped pool: a header line {generation, base timestamp},
/// then the entry area.
struct log_ring {
    std::uint8_t* base = nullptr; ///< start of the ring (its header line)
    std::size_t size = 0;         ///< ring bytes, header included

    std::uint64_t* generation_word() const noexcept {
        return reinterpret_cast<std::uint64_t*>(base);
    }
    /// Timestamp below the first entry of the generation (the compressed format codes deltas).
    std::uint64_t* base_ts_word() const noexcept {
        return reinterpret_cast<std::uint64_t*>(base) + 1;
    }
    std::uint64_t generation() const noexcept {
        return __atomic_load_n(generation_word(), __ATOMIC_ACQUIRE);
    }
    std::uint64_t base_ts() const noexcept {
        return __atomic_load_n(base_ts_word(), __ATOMIC_ACQUIRE);
    }
    std::uint8_t* data() const noexcept { return base + ring_header_bytes; }
    std::size_t capacity() const noexcept { return size - ring_header_bytes; }

    /// Walks the valid entries of the current generation from the start of the data area, in
    /// the order they were written; calls f(entry_view, offset). Stops at the first entry that
    /// does not validate. Returns the offset where the walk stopped.
    template <class F> std::size_t for_each_entry(F&& f) const {
        std::uint64_t gen = generation();
        std::uint64_t prev = base_ts();
        if (prev > max_timestamp)
            return 0;
        std::size_t off = 0;
        entry_view e;
        while (off < capacity() && parse_entry(data() + off, capacity() - off, gen, prev, e)) {
            f(e, off);
            off += e.length;
            prev = e.ts;
        }
        return off;
    }

    /// Looks past an entry that fails validation at offset `stop` (the offset for_each_entry
    /// returned; `prev_ts`: the timestamp of the last valid entry before it, or the base):
    /// if its header still reads as an entry of known length and timestamp, and valid entries
    /// of this generation follow it, calls f(entry_view, offset) for each of them and returns
    /// how many there were. After a crash this finds nothing — each entry is fenced before the
    /// next one is written, and the bytes past the last one belong to no entry of this
    /// generation — so what it finds shows the entry at `stop` was damaged after it was
    /// written (a media error, a stray write), with committed entries behind it. A damaged
    /// header hides what follows: then nothing is found.
    template <class F>
    std::size_t for_each_entry_after_damage(std::size_t stop, std::uint64_t prev_ts, F&& f) const {
        entry_header h;
        if (stop >= capacity() || !read_entry_header(data() + stop, capacity() - stop, prev_ts, h))
            return 0;
        std::uint64_t gen = generation();
        std::uint64_t prev = h.ts;
        std::size_t off = stop + h.length, found = 0;
        entry_view e;
        while (off < capacity() && parse_entry(data() + off, capacity() - off, gen, prev, e)) {
            f(e, off);
            ++found;
            off += e.length;
            prev = e.ts;
        }
        return found;
    }
};

} // namespace detail
} // namespace tlptm
