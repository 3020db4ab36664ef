// The no-shuffle baseline (`in-memory`): map tasks generate their records exactly as the other
// backends do, straight into volatile memory, and the reducers read them there. Nothing is
// persisted, copied or written to a file: it is the job with an ideal hand-off between the map
// and the reduce stage that costs nothing, and what a backend's stages cost above it is what
// its shuffle adds.
//
// The memory is one anonymous mapping, sized for the job when the store is created and, when
// the job prefaults (as tlptm's pools are), populated then, so that neither the map stage nor
// the reducers take a page fault (the run's setup, as the prefault is tlptm's); without
// prefault each new block's pages are populated as tlptm's chunks are (--no-populate: first
// touch). Each map task owns a slice of the mapping and carves it into blocks of the job's
// chunk size (at least 4 KiB), one list of blocks per partition, each block holding whole
// records: the reducers get the blocks as pieces, as tlptm's reducers get its chunks (read in
// place). Transparent huge pages are refused for the mapping, as the pool's shared-memory file
// has none here (4 KiB pages on both sides: only the store's work differs).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "workload.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace shuffle {

class memory_store {
public:
    /// block_bytes: the blocks' size (rounded up to 4 KiB and to two of the largest records).
    /// prefault: populate the whole mapping now; else populate each block when it is taken
    /// (populate) or leave its pages to first touch.
    memory_store(const workload& w, std::size_t block_bytes, bool prefault, bool populate)
        : w_(w), populate_(!prefault && populate) {
        const std::size_t rec = max_record_bytes(w_);
        block_ = std::max<std::size_t>({block_bytes, 4096, 2 * rec});
        block_ = (block_ + 4095) & ~std::size_t{4095};
        // Every block of a list but its last holds more than block - rec bytes (terasort: a
        // whole number of records, as many as fit), so a task emitting at most `bound` bytes
        // needs at most ceil(bound / (block - rec)) + R blocks.
        slice_.resize(w_.maps + std::size_t{1}, 0);
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            std::uint64_t bound = output_bound(m);
            std::uint64_t useful = w_.kind == workload_kind::terasort
                                       ? block_ / w_.record_size * w_.record_size
                                       : block_ - rec;
            std::uint64_t blocks = (bound + useful - 1) / useful + w_.partitions;
            slice_[m + 1] = slice_[m] + blocks * block_;
        }
        bytes_ = std::max<std::size_t>(slice_[w_.maps], 4096);
        void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw std::system_error(errno, std::generic_category(),
                                    "in-memory shuffle: cannot map " + std::to_string(bytes_) +
                                        " bytes");
        base_ = static_cast<std::uint8_t*>(p);
        (void)::madvise(base_, bytes_, MADV_NOHUGEPAGE);
        if (prefault)
            populate_pages(base_, bytes_);
        lists_.resize(std::size_t{w_.maps} * w_.partitions);
        summaries_.resize(w_.maps);
        complete_.assign(w_.maps, 0);
        blocks_used_.assign(w_.maps, 0);
    }
    memory_store(const memory_store&) = delete;
    memory_store& operator=(const memory_store&) = delete;
    ~memory_store() { ::munmap(base_, bytes_); }

    std::size_t block_bytes() const noexcept { return block_; }
    std::size_t mapped_bytes() const noexcept { return bytes_; }

    /// Runs map task m (once; tasks run concurrently, each on its own slice and lists);
    /// returns the blocks it took.
    std::uint64_t run_map_task(std::uint32_t m) {
        std::uint8_t* next = base_ + slice_[m];
        std::uint8_t* const end = base_ + slice_[m + 1];
        std::vector<block>* lists = &lists_[std::size_t{m} * w_.partitions];
        std::uint64_t taken = 0;
        map_summary s = run_map_into(w_, m, [&](std::uint32_t p, std::size_t n) {
            std::vector<block>& l = lists[p];
            if (l.empty() || l.back().used + n > block_) {
                if (next == end)
                    throw std::logic_error("in-memory shuffle: map task " + std::to_string(m) +
                                           " outgrew its memory");
                if (populate_)
                    populate_pages(next, block_);
                l.push_back({next, 0});
                next += block_;
                ++taken;
            }
            block& b = l.back();
            std::uint8_t* at = b.data + b.used;
            b.used += n;
            return at;
        });
        summaries_[m] = s;
        blocks_used_[m] = taken;
        complete_[m] = 1;
        return taken;
    }

    bool complete(std::uint32_t m) const { return complete_[m] != 0; }
    map_summary summary(std::uint32_t m) const { return summaries_[m]; }

    /// Partition p of every complete map task: one piece per block, read where it lies.
    void read_partition(std::uint32_t p, partition_data& out) const {
        for (std::uint32_t m = 0; m < w_.maps; ++m) {
            if (!complete(m))
                continue;
            for (const block& b : lists_[std::size_t{m} * w_.partitions + p])
                if (b.used > 0)
                    out.pieces.emplace_back(b.data, b.used);
        }
    }

    /// Bytes of the blocks the map tasks took.
    std::uint64_t space_used() const {
        std::uint64_t n = 0;
        for (std::uint64_t b : blocks_used_)
            n += b;
        return n * block_;
    }

private:
    struct block {
        std::uint8_t* data;
        std::size_t used;
    };

    /// The most bytes map task m can emit.
    std::uint64_t output_bound(std::uint32_t m) const {
        if (w_.kind == workload_kind::terasort)
            return w_.records_of(m) * w_.record_size;
        std::uint64_t records = w_.words_of(m);
        if (w_.combine)
            records = std::min<std::uint64_t>(records, w_.vocabulary);
        return records * max_word_record;
    }

    static void populate_pages(void* at, std::size_t n) {
        // Best effort: a kernel without MADV_POPULATE_WRITE (before 5.14) leaves the faults to
        // first use.
        (void)::madvise(at, n, MADV_POPULATE_WRITE);
    }

    workload w_;
    bool populate_;
    std::size_t block_ = 0;
    std::vector<std::uint64_t> slice_; ///< map task m's blocks: [slice_[m], slice_[m + 1])
    std::size_t bytes_ = 0;
    std::uint8_t* base_ = nullptr;
    std::vector<std::vector<block>> lists_; ///< (map, partition) -> its blocks, in order
    std::vector<map_summary> summaries_;
    std::vector<std::uint8_t> complete_;
    std::vector<std::uint64_t> blocks_used_;
};

} // namespace shuffle
