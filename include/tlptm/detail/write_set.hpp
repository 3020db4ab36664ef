// tlptm — the volatile redo write-set of a transaction.
//
// Keyed by the pool offset of an aligned 8-byte word; each entry holds the word's new value and
// a byte mask (0xFF per byte written). Small write-sets (the common case) are searched linearly
// behind a 64-bit filter. A larger set whose words were all stored in ascending address order
// (a multi-word value, a struct, an array: the common bulk case) is still sorted and is
// binary-searched; any other larger set gets an open-addressing index.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <tlptm/detail/append_vector.hpp>
#include <tlptm/log.hpp>

namespace tlptm::detail {

class write_set {
public:
    using entry = log_record;

    bool empty() const noexcept { return entries_.empty(); }
    std::size_t size() const noexcept { return entries_.size(); }
    append_vector<entry>& entries() noexcept { return entries_; }
    const append_vector<entry>& entries() const noexcept { return entries_; }

    /// The entry for the word at `offset` (8-aligned), or nullptr.
    const entry* find(std::uint64_t offset) const noexcept {
        if (!(filter_ & filter_bit(offset)))
            return nullptr;
        return lookup(offset);
    }

    /// True if the set may hold the word at `offset` (false: it surely does not).
    bool may_hold(std::uint64_t offset) const noexcept {
        return filter_ != 0 && (filter_ & filter_bit(offset)) != 0;
    }

    /// Appends a whole-word store to the word at `offset` (8-aligned) if the set is sorted and
    /// the word lies above every word of it (the set stays sorted, no index to update); false
    /// otherwise (use put).
    bool append_word(std::uint64_t offset, std::uint64_t value) {
        if (!entries_.empty() && (offset <= top_ || !sorted_))
            return false;
        top_ = offset;
        filter_ |= filter_bit(offset);
        entries_.push_back(entry{offset, value, ~std::uint64_t{0}});
        return true;
    }

    /// Merges a store of `value` under `mask` into the word at `offset` (8-aligned).
    void put(std::uint64_t offset, std::uint64_t value, std::uint64_t mask) {
        // Above every word of the set (stores in address order, as a multi-word value is
        // written): surely new, whatever the filter says, and the set stays sorted.
        const bool above = entries_.empty() || offset > top_;
        if (above)
            top_ = offset;
        else if (filter_ & filter_bit(offset)) {
            if (entry* e = lookup(offset)) {
                e->value = (e->value & ~mask) | (value & mask);
                e->mask |= mask;
                return;
            }
        }
        filter_ |= filter_bit(offset);
        entries_.push_back(entry{offset, value & mask, mask});
        if (!above)
            sorted_ = false;
        if (!sorted_ && entries_.size() > linear_limit)
            index_from(entries_.size() - 1);
    }

    /// Stores `n` whole words from `src` (unaligned bytes) at `offset`, `offset + 8`, ...: the
    /// same as n calls of put with a full mask, in one step when they all lie above every word
    /// of the set (a value stored whole, the common case).
    void put_words(std::uint64_t offset, const std::uint8_t* src, std::size_t n) {
        if (n == 0)
            return;
        if (!entries_.empty() && offset <= top_) {
            for (std::size_t k = 0; k < n; ++k) {
                std::uint64_t v;
                std::memcpy(&v, src + 8 * k, 8);
                put(offset + 8 * k, v, ~std::uint64_t{0});
            }
            return;
        }
        const std::size_t first = entries_.size();
        entry* out = entries_.append(n);
        std::uint64_t bits = 0;
        for (std::size_t k = 0; k < n; ++k) {
            std::uint64_t v;
            std::memcpy(&v, src + 8 * k, 8);
            out[k] = entry{offset + 8 * k, v, ~std::uint64_t{0}};
        }
        // A value of 8 words or more saturates the filter (reads then look the set up) rather
        // than hashing every word.
        if (n < 8) {
            for (std::size_t k = 0; k < n; ++k)
                bits |= filter_bit(offset + 8 * k);
            filter_ |= bits;
        } else {
            filter_ = ~std::uint64_t{0};
        }
        top_ = offset + 8 * (n - 1);
        if (!sorted_ && entries_.size() > linear_limit)
            index_from(first);
    }

    /// Sorts the entries by offset (commit time: the log and write-back walk them in order).
    /// The index is dropped; the set must be cleared before it is used again.
    void sort_for_commit() {
        auto by_offset = [](const entry& a, const entry& b) { return a.offset < b.offset; };
        // Stores of a value or a struct come in address order: often nothing to sort.
        if (!sorted_ && !std::is_sorted(entries_.begin(), entries_.end(), by_offset))
            std::sort(entries_.begin(), entries_.end(), by_offset);
        sorted_ = true;
        index_.clear();
        filter_ = ~std::uint64_t{0}; // keep find() correct (linear) if someone still looks
    }

    void clear() noexcept {
        if (entries_.empty() && filter_ == 0)
            return; // already clear (a read-only attempt): no stores
        entries_.clear();
        if (!index_.empty())
            index_.clear();
        filter_ = 0;
        sorted_ = true;
    }

private:
    static constexpr std::size_t linear_limit = 16;

    static std::uint64_t hash(std::uint64_t offset) noexcept {
        return (offset >> 3) * 0x9E3779B97F4A7C15ull;
    }
    static std::uint64_t filter_bit(std::uint64_t offset) noexcept {
        return std::uint64_t{1} << (hash(offset) >> 58);
    }

    entry* lookup(std::uint64_t offset) const noexcept {
        auto* self = const_cast<write_set*>(this);
        if (sorted_ && entries_.size() > linear_limit) {
            auto it =
                std::lower_bound(self->entries_.begin(), self->entries_.end(), offset,
                                 [](const entry& e, std::uint64_t off) { return e.offset < off; });
            return it != self->entries_.end() && it->offset == offset ? &*it : nullptr;
        }
        if (index_.empty()) {
            for (entry& e : self->entries_)
                if (e.offset == offset)
                    return &e;
            return nullptr;
        }
        std::size_t m = index_.size() - 1;
        for (std::size_t i = hash(offset) >> 32 & m;; i = (i + 1) & m) {
            std::uint32_t slot = index_[i];
            if (slot == 0)
                return nullptr;
            if (self->entries_[slot - 1].offset == offset)
                return &self->entries_[slot - 1];
        }
    }

    void index_insert(std::uint32_t idx) {
        std::size_t m = index_.size() - 1;
        std::size_t i = hash(entries_[idx].offset) >> 32 & m;
        while (index_[i] != 0)
            i = (i + 1) & m;
        index_[i] = idx + 1;
    }

    /// Adds entries [first, size()) to the index (an unsorted set past the linear limit is
    /// indexed in full); rebuilds it, at most half full, when it would pass half full, or when it
    /// does not exist yet (the set was sorted, or linear, until now).
    void index_from(std::size_t first) {
        if (index_.empty() || entries_.size() * 2 > index_.size()) {
            rebuild_index(std::max<std::size_t>(64, std::bit_ceil(entries_.size() * 2)));
            return;
        }
        for (std::size_t k = first; k < entries_.size(); ++k)
            index_insert(static_cast<std::uint32_t>(k));
    }

    void rebuild_index(std::size_t cap) {
        index_.assign(cap, 0);
        for (std::size_t i = 0; i < entries_.size(); ++i)
            index_insert(static_cast<std::uint32_t>(i));
    }

    append_vector<entry> entries_;
    std::vector<std::uint32_t> index_; ///< 0 = empty, else entry index + 1; size a power of 2
    std::uint64_t filter_ = 0;         ///< one bit per hash bucket of the words written
    std::uint64_t top_ = 0;            ///< the largest offset in the set (if not empty)
    /// Every entry was added above all earlier ones: the entries are in ascending order and a
    /// large set is binary-searched instead of indexed.
    bool sorted_ = true;
};

} // namespace tlptm::detail
