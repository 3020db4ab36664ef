// tlptm — the volatile redo write-set of a transaction.
//
// The set holds runs: `words` consecutive aligned 8-byte words of the pool from `offset`, their
// new values stored contiguously in one array. A multi-word value stored whole (a struct, an
// array, a 256-byte payload) is one run, so the commit locks, encodes and writes back its words
// without looking each one up; a store that continues the last run extends it. A partial-word
// store (a byte mask other than all ones, 0xFF per byte written) is a one-word run with its
// mask. A store to a word already in the set merges into it.
//
// Lookups (a transaction reading its own writes) go through a 64-bit filter first. A set whose
// runs were all added in ascending address order (the common case) stays sorted and is searched
// linearly while small and by binary search beyond; any other larger set gets an
// open-addressing index of its words.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <tlptm/detail/append_vector.hpp>
#include <tlptm/log.hpp>

namespace tlptm::detail {

class write_set {
public:
    /// `words` consecutive words from `offset` (8-aligned); their values are values()[first],
    /// values()[first + 1], ... A multi-word run writes whole words (mask all ones); a one-word
    /// run carries the mask of the bytes written, and its value has only those bytes.
    struct run {
        std::uint64_t offset;
        std::uint32_t words;
        std::uint32_t first;
        std::uint64_t mask;
        std::uint64_t end() const noexcept { return offset + 8 * std::uint64_t{words}; }
    };

    /// A word of the set as find() reports it.
    struct word {
        std::uint64_t value, mask;
    };

    static constexpr std::uint64_t full = ~std::uint64_t{0};

    bool empty() const noexcept { return values_.empty(); }
    /// Words in the set: one value each.
    std::size_t size() const noexcept { return values_.size(); }
    const append_vector<run>& runs() const noexcept { return runs_; }
    const std::uint64_t* values() const noexcept { return values_.data(); }

    /// The words of `runs` (runs of this set), run by run, for the encoders.
    struct cursor {
        const run* r;
        const run* end;
        const std::uint64_t* values;
        std::uint32_t k = 0;
        bool done() const noexcept { return r == end; }
        std::uint64_t offset() const noexcept { return r->offset + 8 * std::uint64_t{k}; }
        std::uint64_t value() const noexcept { return values[r->first + k]; }
        std::uint64_t mask() const noexcept { return r->mask; }
        void next() noexcept {
            if (++k == r->words) {
                ++r;
                k = 0;
            }
        }
        /// The values of the current run from the current word on (log.hpp's run_cursor:
        /// consecutive offsets; full masks when the current word's mask is full).
        std::span<const std::uint64_t> run_values() const noexcept {
            return {values + r->first + k, r->words - k};
        }
        /// Moves past n words of the current run (n <= run_values().size()).
        void skip(std::size_t n) noexcept {
            k += static_cast<std::uint32_t>(n);
            if (k == r->words) {
                ++r;
                k = 0;
            }
        }
    };
    cursor words(const append_vector<run>& runs) const noexcept {
        return cursor{runs.begin(), runs.end(), values_.data()};
    }
    cursor words() const noexcept { return words(runs_); }

    /// Calls f(offset, value, mask) for every word, run by run (in ascending order after
    /// sort_for_commit).
    template <class F> void for_each_word(F&& f) const {
        for (const run& r : runs_)
            for (std::uint32_t k = 0; k < r.words; ++k)
                f(r.offset + 8 * std::uint64_t{k}, values_[r.first + k], r.mask);
    }

    /// The word at `offset` (8-aligned): true and `out` set if the set holds it.
    bool find(std::uint64_t offset, word& out) const noexcept {
        if (!(filter_ & filter_bit(offset)))
            return false;
        const run* r = lookup(offset);
        if (!r)
            return false;
        out = word{values_[r->first + (offset - r->offset) / 8], r->mask};
        return true;
    }

    /// True if the set may hold the word at `offset` (false: it surely does not).
    bool may_hold(std::uint64_t offset) const noexcept {
        return filter_ != 0 && (filter_ & filter_bit(offset)) != 0;
    }

    /// Adds a whole-word store to the word at `offset` (8-aligned) if the set is sorted and the
    /// word lies above every word of it (no lookup, no index to update); false otherwise (use
    /// put).
    [[gnu::always_inline]] bool append_word(std::uint64_t offset, std::uint64_t value) {
        if (!empty() && (offset <= top_ || !sorted_))
            return false;
        add_above(offset, value, full);
        return true;
    }

    /// Merges a store of `value` under `mask` into the word at `offset` (8-aligned).
    void put(std::uint64_t offset, std::uint64_t value, std::uint64_t mask) {
        // Above every word of the set (stores in address order, as a value is written):
        // surely new, whatever the filter says.
        if (empty() || offset > top_) {
            add_above(offset, value & mask, mask);
            return;
        }
        if (filter_ & filter_bit(offset)) {
            if (run* r = const_cast<run*>(lookup(offset))) {
                std::uint64_t& v = values_[r->first + (offset - r->offset) / 8];
                v = (v & ~mask) | (value & mask);
                r->mask |= mask; // a multi-word run's mask is all ones already
                return;
            }
        }
        // A new word below the top: a run of its own, and the set is no longer sorted.
        const auto first = static_cast<std::uint32_t>(values_.size());
        values_.push_back(value & mask);
        runs_.push_back(run{offset, 1, first, mask});
        filter_ |= filter_bit(offset);
        sorted_ = false;
        if (runs_.size() > linear_limit)
            index_words(offset, 1, static_cast<std::uint32_t>(runs_.size() - 1));
    }

    /// Stores `n` whole words from `src` (unaligned bytes) at `offset`, `offset + 8`, ...: the
    /// same as n calls of put with a full mask, in one step when they all lie above every word
    /// of the set (a value stored whole, the common case): one run, or the last run extended.
    void put_words(std::uint64_t offset, const std::uint8_t* src, std::size_t n) {
        if (n == 0)
            return;
        if (!empty() && offset <= top_) {
            for (std::size_t k = 0; k < n; ++k) {
                std::uint64_t v;
                std::memcpy(&v, src + 8 * k, 8);
                put(offset + 8 * k, v, full);
            }
            return;
        }
        if (!extends_last(offset))
            runs_.push_back(run{offset, 0, static_cast<std::uint32_t>(values_.size()), full});
        std::memcpy(static_cast<void*>(values_.append(n)), src, 8 * n);
        runs_.back().words += static_cast<std::uint32_t>(n);
        top_ = offset + 8 * (n - 1);
        // A value of 8 words or more saturates the filter (reads then look the set up) rather
        // than hashing every word.
        if (n < 8) {
            std::uint64_t bits = 0;
            for (std::size_t k = 0; k < n; ++k)
                bits |= filter_bit(offset + 8 * k);
            filter_ |= bits;
        } else {
            filter_ = full;
        }
        if (!sorted_ && runs_.size() > linear_limit)
            index_words(offset, n, static_cast<std::uint32_t>(runs_.size() - 1));
    }

    /// Sorts the runs by offset (commit time: the log and the write-back walk them in order).
    /// The index is dropped; the set must be cleared before it is used again.
    void sort_for_commit() {
        if (!sorted_) {
            std::sort(runs_.begin(), runs_.end(),
                      [](const run& a, const run& b) { return a.offset < b.offset; });
            sorted_ = true;
        }
        if (!index_.empty())
            index_.clear();
        filter_ = full; // keep find() correct (it searches) if someone still looks
    }

    /// The runs, sorted by offset, into `out` (the set itself is left as it is).
    void sorted_runs(append_vector<run>& out) const {
        out = runs_;
        if (!sorted_)
            std::sort(out.begin(), out.end(),
                      [](const run& a, const run& b) { return a.offset < b.offset; });
    }

    /// Empties the set. It runs after a commit's fence, where a store waits in the store
    /// buffer until the fence completes (and a full buffer stops the core, so that the next
    /// transaction's first loads wait too): only what holds something is reset.
    void clear() noexcept {
        if (empty() && filter_ == 0)
            return; // already clear (a read-only attempt): no stores
        runs_.clear();
        values_.clear();
        if (!index_.empty())
            index_.clear();
        filter_ = 0;
        if (!sorted_)
            sorted_ = true;
    }

private:
    static constexpr std::size_t linear_limit = 16; ///< runs searched one by one

    static std::uint64_t hash(std::uint64_t offset) noexcept {
        return (offset >> 3) * 0x9E3779B97F4A7C15ull;
    }
    static std::uint64_t filter_bit(std::uint64_t offset) noexcept {
        return std::uint64_t{1} << (hash(offset) >> 58);
    }

    /// The last run is a whole-word run ending where `offset` begins.
    bool extends_last(std::uint64_t offset) const noexcept {
        return !runs_.empty() && runs_.back().mask == full && runs_.back().end() == offset;
    }

    /// Adds a word above every word of the set: continues the last run if it can.
    [[gnu::always_inline]] void add_above(std::uint64_t offset, std::uint64_t value,
                                          std::uint64_t mask) {
        if (mask == full && extends_last(offset)) {
            values_.push_back(value);
            ++runs_.back().words;
        } else {
            runs_.push_back(run{offset, 1, static_cast<std::uint32_t>(values_.size()), mask});
            values_.push_back(value);
        }
        top_ = offset;
        filter_ |= filter_bit(offset);
        if (!sorted_ && runs_.size() > linear_limit)
            index_words(offset, 1, static_cast<std::uint32_t>(runs_.size() - 1));
    }

    const run* lookup(std::uint64_t offset) const noexcept {
        auto holds = [offset](const run& r) {
            return offset - r.offset < 8 * std::uint64_t{r.words};
        };
        if (sorted_) {
            if (runs_.size() <= linear_limit) {
                for (const run& r : runs_)
                    if (holds(r))
                        return &r;
                return nullptr;
            }
            // The last run that starts at or before `offset` (runs do not overlap).
            const run* it =
                std::upper_bound(runs_.begin(), runs_.end(), offset,
                                 [](std::uint64_t off, const run& r) { return off < r.offset; });
            return it != runs_.begin() && holds(it[-1]) ? &it[-1] : nullptr;
        }
        if (index_.empty()) {
            for (const run& r : runs_)
                if (holds(r))
                    return &r;
            return nullptr;
        }
        const std::size_t m = index_.size() - 1;
        for (std::size_t i = hash(offset) >> 32 & m;; i = (i + 1) & m) {
            const std::uint32_t slot = index_[i];
            if (slot == 0)
                return nullptr;
            if (holds(runs_[slot - 1]))
                return &runs_[slot - 1];
        }
    }

    /// Adds the n words just added from `offset` (in run `ri`) to the index (an unsorted set
    /// past the linear limit is indexed in full); rebuilds the index, at most half full, when it
    /// would pass half full or does not exist yet (the set was sorted, or small, until now).
    void index_words(std::uint64_t offset, std::size_t n, std::uint32_t ri) {
        if (index_.empty() || size() * 2 > index_.size()) {
            rebuild_index();
            return;
        }
        for (std::size_t k = 0; k < n; ++k)
            insert_word(offset + 8 * k, ri);
    }
    void insert_word(std::uint64_t offset, std::uint32_t ri) {
        const std::size_t m = index_.size() - 1;
        std::size_t i = hash(offset) >> 32 & m;
        while (index_[i] != 0)
            i = (i + 1) & m;
        index_[i] = ri + 1;
    }
    void rebuild_index() {
        index_.assign(std::max<std::size_t>(64, std::bit_ceil(size() * 2)), 0);
        for (std::size_t ri = 0; ri < runs_.size(); ++ri)
            for (std::uint32_t k = 0; k < runs_[ri].words; ++k)
                insert_word(runs_[ri].offset + 8 * std::uint64_t{k},
                            static_cast<std::uint32_t>(ri));
    }

    append_vector<run> runs_;
    append_vector<std::uint64_t> values_; ///< one per word of the set
    std::vector<std::uint32_t> index_;    ///< 0 = empty, else run index + 1; size a power of 2
    std::uint64_t filter_ = 0;            ///< one bit per hash bucket of the words written
    std::uint64_t top_ = 0;               ///< the largest word offset in the set (if not empty)
    /// Every run was added above all earlier ones: the runs are in ascending order and a large
    /// set is binary-searched instead of indexed.
    bool sorted_ = true;
};

} // namespace tlptm::detail
