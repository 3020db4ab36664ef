// tlptm — redo-log entries and the per-thread log ring (DESIGN.md §3, docs/log-format.md).
//
// A ring holds one entry per committed update transaction:
//
//   word 0   ts (bits 0..55) | format (bits 56..63)
//   word 1   length in bytes (bits 0..31, header included, padding excluded) | CRC32C (32..63)
//   payload  records, in the entry's format
//
// Entries start 8-byte aligned, one after another from the start of the ring's data area. The
// CRC32C covers the ring generation, word 0, the length and the payload, so a torn entry (a
// crash while its non-temporal stores were in flight) or a stale entry of an earlier generation
// never validates: the commit needs no separate commit flag and no second fence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

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

/// The format byte of an entry: how its payload is encoded.
enum class entry_format : std::uint8_t {
    baseline = 1, ///< records of three little-endian 64-bit words: offset, value, byte mask
};

inline constexpr std::size_t entry_header_bytes = 16;

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

/// CRC of an entry of `length` bytes at `e` for ring generation `gen` (the CRC field excluded).
inline std::uint32_t entry_crc(const std::uint8_t* e, std::uint32_t length,
                               std::uint64_t gen) noexcept {
    std::uint32_t c = crc32c_update(crc32c_init, &gen, sizeof gen);
    c = crc32c_update(c, e, 12);
    c = crc32c_update(c, e + entry_header_bytes, length - entry_header_bytes);
    return crc32c_final(c);
}

/// Writes the header of an entry whose payload is already at buf[16, length) and seals it with
/// its CRC for generation `gen`. `buf` must have room for the padding to 8 bytes, which is zeroed.
inline void seal_entry(std::uint8_t* buf, std::uint32_t length, std::uint64_t ts, entry_format fmt,
                       std::uint64_t gen) noexcept {
    store_u64(buf, ts | (std::uint64_t{static_cast<std::uint8_t>(fmt)} << 56));
    std::memcpy(buf + 8, &length, 4);
    for (std::uint32_t i = length; i % 8 != 0; ++i)
        buf[i] = 0;
    std::uint32_t crc = entry_crc(buf, length, gen);
    std::memcpy(buf + 12, &crc, 4);
}

/// Encodes `records` as the payload of a baseline entry into `out` (resized to the padded
/// entry size; the header is left for seal_entry). Returns the entry length.
inline std::uint32_t encode_baseline(std::vector<std::uint8_t>& out,
                                     std::span<const log_record> records) {
    std::size_t length = entry_header_bytes + 24 * records.size();
    out.resize(round_up(length, 8));
    std::uint8_t* p = out.data() + entry_header_bytes;
    for (const log_record& r : records) {
        store_u64(p, r.offset);
        store_u64(p + 8, r.value);
        store_u64(p + 16, r.mask);
        p += 24;
    }
    return static_cast<std::uint32_t>(length);
}

/// A validated entry inside a ring.
struct entry_view {
    std::uint64_t ts = 0;
    entry_format format{};
    std::uint32_t length = 0;
    const std::uint8_t* payload = nullptr;
    std::size_t payload_size = 0;
};

/// Validates the entry at `e` with at most `avail` readable bytes for generation `gen`: length
/// in bounds, known format, CRC. Reads nothing past `e + avail`.
inline bool parse_entry(const std::uint8_t* e, std::size_t avail, std::uint64_t gen,
                        entry_view& out) noexcept {
    if (avail < entry_header_bytes)
        return false;
    std::uint64_t w0 = load_u64(e);
    std::uint32_t length, crc;
    std::memcpy(&length, e + 8, 4);
    std::memcpy(&crc, e + 12, 4);
    if (length < entry_header_bytes || length > avail)
        return false;
    auto fmt = static_cast<std::uint8_t>(w0 >> 56);
    if (fmt != static_cast<std::uint8_t>(entry_format::baseline))
        return false;
    if (entry_crc(e, length, gen) != crc)
        return false;
    out.ts = w0 & max_timestamp;
    out.format = static_cast<entry_format>(fmt);
    out.length = length;
    out.payload = e + entry_header_bytes;
    out.payload_size = length - entry_header_bytes;
    return true;
}

/// Calls f(log_record) for every record of a validated entry. Returns false if the payload is
/// malformed (then f may have seen a prefix of the records).
template <class F> bool decode_records(const entry_view& e, F&& f) {
    switch (e.format) {
    case entry_format::baseline: {
        if (e.payload_size % 24 != 0)
            return false;
        for (std::size_t i = 0; i < e.payload_size; i += 24) {
            const std::uint8_t* p = e.payload + i;
            f(log_record{load_u64(p), load_u64(p + 8), load_u64(p + 16)});
        }
        return true;
    }
    }
    return false;
}

/// A thread slot's log ring inside the mapped pool: a generation word, then the entry area.
struct log_ring {
    std::uint8_t* base = nullptr; ///< start of the ring (its header line)
    std::size_t size = 0;         ///< ring bytes, header included

    std::uint64_t* generation_word() const noexcept {
        return reinterpret_cast<std::uint64_t*>(base);
    }
    std::uint64_t generation() const noexcept {
        return __atomic_load_n(generation_word(), __ATOMIC_ACQUIRE);
    }
    std::uint8_t* data() const noexcept { return base + ring_header_bytes; }
    std::size_t capacity() const noexcept { return size - ring_header_bytes; }

    /// Walks the valid entries of the current generation from the start of the data area, in
    /// the order they were written; calls f(entry_view, offset). Stops at the first entry that
    /// does not validate. Returns the offset where the walk stopped.
    template <class F> std::size_t for_each_entry(F&& f) const {
        std::uint64_t gen = generation();
        std::size_t off = 0;
        entry_view e;
        while (off < capacity() && parse_entry(data() + off, capacity() - off, gen, e)) {
            f(e, off);
            off += round_up(e.length, 8);
        }
        return off;
    }
};

} // namespace detail
} // namespace tlptm
