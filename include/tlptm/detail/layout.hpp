// tlptm — the persistent layout of a pool file (DESIGN.md §3).
//
//   | header (4 KiB) | log rings (one per thread slot) | allocator metadata | heap (superblocks) |
//
// The allocator metadata is one 1 KiB record per superblock followed by the heap summary: one
// 8-byte word per arena of arena_superblocks superblocks, non-zero once anything may have
// been allocated in the arena (detail/heap.hpp). A zero-filled area is valid everywhere but in
// the header: an empty ring, free superblocks, empty arenas. So a pool is created by sizing a
// (sparse) file and writing its header.
//
// The header's immutable part is checksummed; the checkpoint timestamp CT and the root
// descriptor are mutable and each sit alone in a cache line, updated by one aligned 8-byte store.
// The layout name (the pool's identity, chosen by the program) is written once and carries its
// own check word; the root descriptor carries a check of the root size in its upper half.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <tlptm/detail/crc32c.hpp>
#include <tlptm/errors.hpp>

namespace tlptm::detail {

inline constexpr char pool_magic[16] = {'T', 'L', 'P', 'T', 'M', '-', 'P', 'O',
                                        'O', 'L', 0,   0,   0,   0,   0,   0};
/// Version of the layout this library writes. Version 2 added the heap summary after the
/// superblock records; version 3 added log entries that cover the blocks their transaction
/// allocated (format bit 0x80), which a library of layout 2 would take for torn entries. A
/// pool of layout 2 is still opened (the layouts are otherwise the same), and its transactions
/// write no such entries, so that it stays readable by the library that made it; other
/// versions are refused.
inline constexpr std::uint32_t layout_version = 3;
inline constexpr std::uint32_t oldest_readable_layout_version = 2;
inline constexpr std::size_t header_bytes = 4096;
inline constexpr std::size_t superblock_bytes = std::size_t{64} << 10;
/// Per-superblock metadata: a 64-byte descriptor and a bitmap of up to 4096 blocks (512 bytes),
/// rounded to 1 KiB.
inline constexpr std::size_t meta_bytes_per_superblock = 1024;
/// Superblocks per arena: the unit of the heap summary and of the lazy heap rebuild (16 MiB).
inline constexpr std::size_t arena_superblocks = 256;
/// Bytes of the heap summary per arena (one word, updated by one aligned 8-byte store).
inline constexpr std::size_t summary_bytes_per_arena = 8;
/// Each ring starts with one cache line holding its generation; entries follow.
inline constexpr std::size_t ring_header_bytes = 64;
/// Timestamps use 56 bits; the top byte of an entry's first word is its format.
inline constexpr std::uint64_t max_timestamp = (std::uint64_t{1} << 56) - 1;
/// Timestamps a pool must still have room for when it is opened: a checkpoint above
/// max_timestamp - timestamp_headroom cannot come from a pool in use (2^32 transactions short of
/// the limit) and is refused as damaged, so that no opening can run out of timestamps
/// unnoticed. A commit never takes a timestamp above max_timestamp (it poisons the pool).
inline constexpr std::uint64_t timestamp_headroom = std::uint64_t{1} << 32;
/// The largest commit timestamp the library issues (and the largest CT it accepts).
inline constexpr std::uint64_t max_commit_ts = max_timestamp - timestamp_headroom;
/// Highest address a pool may be mapped at (user space of x86-64 with 4-level paging).
inline constexpr std::uint64_t max_user_address = std::uint64_t{0x7fff} << 32;

inline constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t a) noexcept {
    return (v + a - 1) / a * a;
}

/// The pool header, at offset 0 of the file. Plain old data; every field is validated before use.
struct pool_header {
    char magic[16];
    std::uint32_t version;
    std::uint32_t header_size;
    std::uint8_t uuid[16];
    std::uint64_t pool_size;
    std::uint64_t base_address;
    std::uint64_t log_offset;
    std::uint64_t ring_size; ///< bytes per ring, ring header included
    std::uint32_t max_threads;
    std::uint32_t flags; ///< reserved, 0
    std::uint64_t meta_offset;
    std::uint64_t meta_size;
    std::uint64_t heap_offset;
    std::uint64_t heap_size;
    std::uint64_t root_offset;
    std::uint64_t root_capacity;
    std::uint64_t superblock_size;
    std::uint64_t checksum; ///< CRC32C of every byte before this field
    std::uint8_t reserved0[256 - 144];
    /// CT: every transaction with ts <= CT is applied and durable (I2). Own cache line.
    alignas(64) std::uint64_t checkpoint_ts;
    std::uint8_t reserved1[56];
    /// Root descriptor: (root_check(size) << 32) | size of the root in bytes; 0 while no root
    /// was requested. The size only grows (pool::root<T>() with a larger T).
    alignas(64) std::uint64_t root_info;
    std::uint8_t reserved2[56];
    /// The layout name given at creation (pool_options::layout), NUL-padded; meaningful only
    /// when layout_check is non-zero.
    alignas(64) char layout_name[120];
    /// layout_name_check(layout_name) once a name is recorded, else 0. Written after the name
    /// is durable, by one aligned 8-byte store.
    std::uint64_t layout_check;
    std::uint8_t reserved3[header_bytes - 512];
};
static_assert(sizeof(pool_header) == header_bytes, "pool_header must fill exactly 4 KiB");
static_assert(offsetof(pool_header, checksum) == 136);
static_assert(offsetof(pool_header, checkpoint_ts) == 256);
static_assert(offsetof(pool_header, root_info) == 320);
static_assert(offsetof(pool_header, layout_name) == 384);
static_assert(offsetof(pool_header, layout_check) == 504);

inline std::uint64_t header_checksum(const pool_header& h) noexcept {
    return crc32c(&h, offsetof(pool_header, checksum));
}

/// Where the areas of a pool lie, derived from its size and options.
struct geometry {
    std::uint64_t pool_size, log_offset, ring_size, meta_offset, meta_size, heap_offset, heap_size,
        root_offset, root_capacity;
    std::uint32_t max_threads;
    std::uint64_t summary_offset; ///< the heap summary: the end of the superblock records
};

/// Arenas of a heap of n superblocks.
inline constexpr std::uint64_t arena_count(std::uint64_t superblocks) noexcept {
    return (superblocks + arena_superblocks - 1) / arena_superblocks;
}

/// Bytes of allocator metadata for n superblocks: the records, then the summary (whole pages).
inline constexpr std::uint64_t meta_bytes(std::uint64_t superblocks) noexcept {
    return superblocks * meta_bytes_per_superblock +
           round_up(arena_count(superblocks) * summary_bytes_per_arena, 4096);
}

/// Computes the areas for a pool of `size` bytes; returns false if the pool is too small.
inline bool compute_geometry(std::uint64_t size, std::uint32_t max_threads,
                             std::uint64_t log_capacity, std::uint64_t root_capacity,
                             geometry& g) noexcept {
    g = {};
    g.pool_size = size;
    g.max_threads = max_threads;
    g.log_offset = header_bytes;
    g.ring_size = round_up(ring_header_bytes + log_capacity, 4096);
    g.root_capacity = round_up(root_capacity == 0 ? 1 : root_capacity, superblock_bytes);
    std::uint64_t rings_end = g.log_offset + std::uint64_t{max_threads} * g.ring_size;
    g.meta_offset = round_up(rings_end, 4096);
    if (g.meta_offset >= size)
        return false;
    // Superblocks that fit with their metadata; the heap starts superblock-aligned.
    std::uint64_t n = (size - g.meta_offset) / (superblock_bytes + meta_bytes_per_superblock);
    while (n > 0) {
        std::uint64_t heap_off = round_up(g.meta_offset + meta_bytes(n), superblock_bytes);
        if (heap_off + n * superblock_bytes <= size) {
            g.meta_size = meta_bytes(n);
            g.heap_offset = heap_off;
            g.heap_size = n * superblock_bytes;
            break;
        }
        --n;
    }
    if (n == 0 || g.heap_size <= g.root_capacity) // at least one superblock beyond the root
        return false;
    g.root_offset = g.heap_offset;
    g.summary_offset = g.meta_offset + n * meta_bytes_per_superblock;
    return true;
}

/// The log capacity per thread ring that pool_options::log_capacity = 0 (automatic) gives a
/// pool of `size` bytes: an eighth of the pool shared by the rings, within [16 KiB, 1 MiB].
inline constexpr std::uint64_t auto_log_capacity(std::uint64_t size,
                                                 std::uint32_t max_threads) noexcept {
    constexpr std::uint64_t lo = std::uint64_t{16} << 10, hi = std::uint64_t{1} << 20;
    std::uint64_t ring = size / 8 / (max_threads == 0 ? 1 : max_threads) / 4096 * 4096;
    if (ring < lo + 4096)
        return lo; // rings of 20 KiB
    // Whole pages with the ring header: a ring of `ring` bytes holds ring - 64 of log.
    return ring - ring_header_bytes > hi ? hi : ring - ring_header_bytes;
}

/// The smallest pool size (a multiple of 4 KiB) that compute_geometry accepts for these
/// options; log_capacity 0 stands for auto_log_capacity of each size tried.
inline std::uint64_t minimum_pool_size(std::uint32_t max_threads, std::uint64_t log_capacity,
                                       std::uint64_t root_capacity) noexcept {
    auto fits = [&](std::uint64_t size) {
        geometry g;
        std::uint64_t cap = log_capacity != 0 ? log_capacity : auto_log_capacity(size, max_threads);
        return compute_geometry(size, max_threads, cap, root_capacity, g);
    };
    std::uint64_t lo = 0, hi = std::uint64_t{1} << 20; // pages: lo does not fit, hi does
    while (!fits(hi * 4096) && hi < (std::uint64_t{1} << 40))
        hi *= 2;
    while (hi - lo > 1) {
        std::uint64_t mid = lo + (hi - lo) / 2;
        (fits(mid * 4096) ? hi : lo) = mid;
    }
    return hi * 4096;
}

// ---- the pool's identity: layout name, root size, layout version --------------------------

/// The longest layout name (the field keeps a terminating NUL).
inline constexpr std::size_t max_layout_name = sizeof(pool_header::layout_name) - 1;

/// The program's layout version is a word in the last line of the root capacity (in the heap,
/// so that a transaction can change it together with the data it describes). The root itself
/// may use the rest.
inline constexpr std::uint64_t layout_version_bytes = 64;
inline constexpr std::uint64_t max_root_size(std::uint64_t root_capacity) noexcept {
    return root_capacity < layout_version_bytes ? 0 : root_capacity - layout_version_bytes;
}
/// Offset of the layout version word in the pool.
inline constexpr std::uint64_t layout_version_offset(const pool_header& h) noexcept {
    return h.root_offset + h.root_capacity - layout_version_bytes;
}

/// The upper half of root_info: a check of the size (CRC32C, never 0).
inline std::uint32_t root_check(std::uint64_t size) noexcept {
    std::uint32_t v = static_cast<std::uint32_t>(size);
    std::uint32_t c = crc32c(&v, sizeof v) ^ 0x524F4F54u; // "ROOT"
    return c == 0 ? 1 : c;
}
inline std::uint64_t make_root_info(std::uint64_t size) noexcept {
    return (std::uint64_t{root_check(size)} << 32) | size;
}

/// The check word of a layout name field: CRC32C of the field and its complement, never 0.
inline std::uint64_t layout_name_check(const char (&name)[120]) noexcept {
    std::uint32_t c = crc32c(name, sizeof name);
    return (std::uint64_t{~c} << 32) | c;
}

/// Length of the recorded layout name (0: none recorded).
inline std::size_t stored_layout_length(const pool_header& h) noexcept {
    if (h.layout_check == 0)
        return 0;
    std::size_t n = 0;
    while (n < sizeof h.layout_name && h.layout_name[n] != 0)
        ++n;
    return n;
}
/// The recorded layout name, "" if none.
inline std::string stored_layout(const pool_header& h) {
    return std::string(h.layout_name, stored_layout_length(h));
}

/// Validates a header read from a file of `file_size` bytes, field by field, before anything of
/// it is trusted. Throws layout_error naming the field.
inline void validate_header(const pool_header& h, std::uint64_t file_size,
                            const std::string& path) {
    auto fail = [&](const std::string& field, const std::string& why) {
        throw layout_error("tlptm: pool '" + path + "': header field '" + field + "': " + why);
    };
    if (file_size < header_bytes)
        fail("pool_size", "file is " + std::to_string(file_size) +
                              " bytes, smaller than a pool header: not a tlptm pool");
    if (std::memcmp(h.magic, pool_magic, sizeof pool_magic) != 0)
        fail("magic", "not a tlptm pool (magic bytes do not match)");
    if (h.version > layout_version)
        fail("version", "layout version " + std::to_string(h.version) +
                            " is newer than this library supports (" +
                            std::to_string(layout_version) + "); upgrade tlptm");
    if (h.version == 1)
        fail("version", "layout version 1 was written by an older tlptm (before the heap "
                        "summary of layout 2); this library opens only layout " +
                            std::to_string(layout_version) +
                            ": recreate the pool (tlptm has no on-disk migration before 1.0)");
    if (h.version != layout_version && h.version < oldest_readable_layout_version)
        fail("version", "unsupported layout version " + std::to_string(h.version));
    if (h.header_size != header_bytes)
        fail("header_size",
             "is " + std::to_string(h.header_size) + ", expected " + std::to_string(header_bytes));
    if (h.pool_size != file_size)
        fail("pool_size", "records " + std::to_string(h.pool_size) + " bytes but the file has " +
                              std::to_string(file_size) + " (truncated or damaged file)");
    if (h.base_address == 0 || h.base_address % 4096 != 0 || h.base_address >= max_user_address ||
        h.pool_size > max_user_address - h.base_address)
        fail("base_address", "invalid mapping address " + std::to_string(h.base_address));
    if (h.max_threads == 0 || h.max_threads > 4096)
        fail("max_threads", "out of range: " + std::to_string(h.max_threads));
    if (h.ring_size < 4096 || h.ring_size % 4096 != 0 || h.ring_size > h.pool_size)
        fail("ring_size", "invalid log ring size " + std::to_string(h.ring_size));
    if (h.superblock_size != superblock_bytes)
        fail("superblock_size", "is " + std::to_string(h.superblock_size) + ", expected " +
                                    std::to_string(superblock_bytes));
    if (h.root_capacity == 0 || h.root_capacity % superblock_bytes != 0 ||
        h.root_capacity > h.pool_size)
        fail("root_capacity", "invalid root capacity " + std::to_string(h.root_capacity));
    geometry g;
    if (!compute_geometry(h.pool_size, h.max_threads, h.ring_size - ring_header_bytes,
                          h.root_capacity, g))
        fail("pool_size", "too small for the recorded log rings and root");
    auto expect = [&](const char* field, std::uint64_t have, std::uint64_t want) {
        if (have != want)
            fail(field,
                 "is " + std::to_string(have) + ", the layout requires " + std::to_string(want));
    };
    expect("log_offset", h.log_offset, g.log_offset);
    expect("meta_offset", h.meta_offset, g.meta_offset);
    expect("meta_size", h.meta_size, g.meta_size);
    expect("heap_offset", h.heap_offset, g.heap_offset);
    expect("heap_size", h.heap_size, g.heap_size);
    expect("root_offset", h.root_offset, g.root_offset);
    if (h.flags != 0)
        fail("flags", "unknown flags " + std::to_string(h.flags));
    if (h.checksum != header_checksum(h))
        fail("checksum", "header checksum mismatch (uuid or another field is damaged)");
    if (h.checkpoint_ts > max_commit_ts)
        fail("checkpoint_ts", "value " + std::to_string(h.checkpoint_ts) +
                                  " out of range (timestamps stop at 2^56 - 1 and a pool "
                                  "must have 2^32 left)");
    if (h.root_info != 0) {
        std::uint64_t root_size = h.root_info & 0xFFFFFFFFu;
        if ((h.root_info >> 32) != root_check(root_size))
            fail("root_info", "damaged root descriptor (its check does not match the root size " +
                                  std::to_string(root_size) + ")");
        if (root_size == 0 || root_size > max_root_size(h.root_capacity))
            fail("root_info", "root size " + std::to_string(root_size) +
                                  " exceeds the root capacity " + std::to_string(h.root_capacity) +
                                  " less the " + std::to_string(layout_version_bytes) +
                                  " bytes of the layout version");
    }
    if (h.layout_check != 0) {
        std::size_t n = stored_layout_length(h);
        bool padded = n < sizeof h.layout_name;
        for (std::size_t i = n; padded && i < sizeof h.layout_name; ++i)
            padded = h.layout_name[i] == 0;
        if (n == 0 || !padded || h.layout_check != layout_name_check(h.layout_name))
            fail("layout_name", "damaged layout name (its check word does not match)");
    }
}

} // namespace tlptm::detail
