// tlptm — the persistent layout of a pool file (DESIGN.md §3).
//
//   | header (4 KiB) | log rings (one per thread slot) | allocator metadata | heap (superblocks) |
//
// The header's immutable part is checksummed; the checkpoint timestamp CT and the root
// descriptor are mutable and each sit alone in a cache line, updated by one aligned 8-byte store.
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
/// Version of the layout this library writes. Pools with a newer version are refused.
inline constexpr std::uint32_t layout_version = 1;
inline constexpr std::size_t header_bytes = 4096;
inline constexpr std::size_t superblock_bytes = std::size_t{64} << 10;
/// Per-superblock metadata: a 64-byte descriptor and a bitmap of up to 4096 blocks (512 bytes),
/// rounded to 1 KiB.
inline constexpr std::size_t meta_bytes_per_superblock = 1024;
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
    /// Root descriptor: (type tag << 32) | size in bytes; 0 while no root was requested.
    alignas(64) std::uint64_t root_info;
    std::uint8_t reserved2[header_bytes - 328];
};
static_assert(sizeof(pool_header) == header_bytes, "pool_header must fill exactly 4 KiB");
static_assert(offsetof(pool_header, checksum) == 136);
static_assert(offsetof(pool_header, checkpoint_ts) == 256);
static_assert(offsetof(pool_header, root_info) == 320);

inline std::uint64_t header_checksum(const pool_header& h) noexcept {
    return crc32c(&h, offsetof(pool_header, checksum));
}

/// Where the areas of a pool lie, derived from its size and options.
struct geometry {
    std::uint64_t pool_size, log_offset, ring_size, meta_offset, meta_size, heap_offset, heap_size,
        root_offset, root_capacity;
    std::uint32_t max_threads;
};

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
        std::uint64_t heap_off =
            round_up(g.meta_offset + n * meta_bytes_per_superblock, superblock_bytes);
        if (heap_off + n * superblock_bytes <= size) {
            g.meta_size = n * meta_bytes_per_superblock;
            g.heap_offset = heap_off;
            g.heap_size = n * superblock_bytes;
            break;
        }
        --n;
    }
    if (n == 0 || g.heap_size < g.root_capacity)
        return false;
    g.root_offset = g.heap_offset;
    return true;
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
    if (h.version != layout_version)
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
        if (root_size == 0 || root_size > h.root_capacity)
            fail("root_info", "root size " + std::to_string(root_size) +
                                  " exceeds the root capacity " + std::to_string(h.root_capacity));
    }
}

} // namespace tlptm::detail
