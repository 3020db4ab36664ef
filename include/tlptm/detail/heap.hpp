// tlptm — the memory manager's volatile state (DESIGN.md §7): a Hoard-style heap of
// superblocks with per-thread local heaps and a global pool.
//
// Persistent state lives only in the pool's allocator metadata area: per superblock a 64-byte
// descriptor record and a bitmap of its blocks. It changes only through transactions (the
// logged descriptor and bitmap stores of alloc.hpp), so recovery's replay leaves it consistent
// and heap::rebuild() derives everything here from it.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <tlptm/detail/layout.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/stats.hpp>

namespace tlptm::detail {

// ---- size classes --------------------------------------------------------------------------

/// Block sizes: 16-byte steps to 128, then four classes per power of two up to half a
/// superblock. Every size is a multiple of 16, so every block is 16-byte aligned.
inline constexpr auto size_classes = [] {
    std::array<std::uint32_t, 40> c{};
    std::size_t n = 0;
    for (std::uint32_t s = 16; s <= 128; s += 16)
        c[n++] = s;
    for (std::uint32_t base = 128; base < superblock_bytes / 2; base *= 2)
        for (std::uint32_t k = 1; k <= 4; ++k)
            c[n++] = base + base / 4 * k;
    return c;
}();
inline constexpr std::size_t class_count = size_classes.size();
static_assert(class_count <= heap_stats::max_classes);
static_assert(size_classes[class_count - 1] == superblock_bytes / 2);
inline constexpr std::size_t max_small_size = superblock_bytes / 2;
inline constexpr std::size_t bitmap_words = superblock_bytes / 16 / 64; // 4096 blocks max
inline constexpr std::size_t bitmap_offset_in_meta = 64;

/// The class of the smallest block that holds n bytes (n <= max_small_size).
inline std::size_t class_of(std::size_t n) noexcept {
    if (n <= 128)
        return n == 0 ? 0 : (n - 1) / 16;
    return static_cast<std::size_t>(std::lower_bound(size_classes.begin(), size_classes.end(), n) -
                                    size_classes.begin());
}

// ---- persistent descriptors ------------------------------------------------------------------

/// What a superblock holds, in the top byte of its descriptor word.
enum class sb_kind : std::uint8_t {
    free = 0,      ///< nothing allocated
    small = 1,     ///< blocks of one size class; payload = block size
    span_head = 2, ///< first superblock of a large allocation; payload = superblocks in the span
    span_tail = 3, ///< later superblock of a span; payload = index of its head
};

inline constexpr std::uint64_t make_descriptor(sb_kind k, std::uint64_t payload) noexcept {
    return std::uint64_t{static_cast<std::uint8_t>(k)} << 56 | payload;
}
inline constexpr sb_kind descriptor_kind(std::uint64_t d) noexcept {
    return static_cast<sb_kind>(d >> 56);
}
inline constexpr std::uint64_t descriptor_payload(std::uint64_t d) noexcept {
    return d & ((std::uint64_t{1} << 56) - 1);
}

// ---- volatile state ------------------------------------------------------------------------

/// Volatile state of one superblock.
struct superblock_state {
    /// One bit per block: 1 = not available (allocated, claimed by a running transaction, or
    /// freed but not yet reusable under I3). Bits past the last block are set.
    std::array<std::atomic<std::uint64_t>, bitmap_words> taken{};
    std::atomic<std::uint32_t> used{0}; ///< blocks taken
    // Guarded by heap::mutex_:
    sb_kind kind = sb_kind::free;
    std::uint32_t cls = 0;   ///< size class (small)
    std::uint32_t span = 0;  ///< superblocks in the span (span_head)
    std::int32_t owner = -1; ///< slot whose local heap holds it, -1 = global pool
    bool reserved = false;   ///< the root's superblocks
    std::uint32_t hint = 0;  ///< first bitmap word that may have a free bit (owner only)

    std::uint32_t blocks() const noexcept {
        return static_cast<std::uint32_t>(superblock_bytes / size_classes[cls]);
    }
};

/// One transaction's allocator bookkeeping, kept in its thread slot.
struct alloc_tx_state {
    struct claim {
        std::uint32_t sb;
        std::uint32_t block; ///< block index (small) or span length (large)
        bool large;
        bool freed_in_tx; ///< allocated and freed by the same transaction
    };
    struct range {
        std::uint64_t offset, size;
    };
    struct freed {
        std::uint32_t sb, block;
        bool large;
    };
    std::vector<claim> claims;            ///< blocks this transaction allocated
    std::vector<range> aalo;              ///< their byte ranges (AALO: stores go in place)
    std::vector<range> aalo_dirty;        ///< AALO bytes written: flushed before F1 (I4)
    std::vector<freed> frees;             ///< blocks freed: pending after commit
    std::vector<std::uint32_t> sb_claims; ///< fresh superblocks taken from the global pool
    std::vector<std::uint64_t> lines;     ///< scratch: AALO lines to flush

    void clear() noexcept {
        claims.clear();
        aalo.clear();
        aalo_dirty.clear();
        frees.clear();
        sb_claims.clear();
    }
    /// True if [offset, offset + n) lies in memory allocated by this transaction.
    bool in_aalo(std::uint64_t offset, std::uint64_t n) const noexcept {
        for (const range& r : aalo)
            if (offset >= r.offset && offset - r.offset <= r.size &&
                n <= r.size - (offset - r.offset))
                return true;
        return false;
    }
};

/// A free that must wait for I3 before its memory is handed out again.
struct pending_free {
    std::uint64_t ts;
    std::uint32_t sb, block;
    bool large;
};

/// The heap: superblock states, the global pool and the per-slot local heaps.
class heap {
public:
    heap() = default;
    heap(const heap&) = delete;
    heap& operator=(const heap&) = delete;

    std::size_t count() const noexcept { return count_; }
    superblock_state& sb(std::uint32_t i) noexcept { return sbs_[i]; }
    std::uint64_t sb_offset(std::uint32_t i) const noexcept {
        return heap_offset_ + std::uint64_t{i} * superblock_bytes;
    }
    std::uint64_t meta_offset(std::uint32_t i) const noexcept {
        return meta_offset_ + std::uint64_t{i} * meta_bytes_per_superblock;
    }
    std::vector<std::uint32_t>& local(std::uint32_t slot, std::size_t cls) {
        return local_[slot][cls];
    }

    /// Rebuilds every volatile structure from the persistent descriptors and bitmaps (after
    /// recovery's replay). Throws corruption_error on a descriptor or bitmap that cannot be.
    void rebuild(const std::uint8_t* base, const pool_header& h, const std::string& path) {
        {
            std::lock_guard plk(pending_mutex_);
            pending_.clear(); // recovery: CT covers every free and no transaction runs
        }
        std::lock_guard lk(mutex_);
        heap_offset_ = h.heap_offset;
        meta_offset_ = h.meta_offset;
        count_ = h.heap_size / superblock_bytes;
        sbs_ = std::make_unique<superblock_state[]>(count_);
        local_.assign(h.max_threads, {});
        for (auto& c : partial_)
            c.clear();
        std::uint64_t root_sbs = h.root_capacity / superblock_bytes;
        auto fail = [&](std::uint32_t i, const std::string& why) {
            throw corruption_error("tlptm: pool '" + path + "': allocator metadata of superblock " +
                                   std::to_string(i) + ": " + why);
        };
        for (std::uint32_t i = 0; i < count_; ++i) {
            superblock_state& s = sbs_[i];
            const std::uint8_t* meta = base + meta_offset(i);
            std::uint64_t d =
                __atomic_load_n(reinterpret_cast<const std::uint64_t*>(meta), __ATOMIC_RELAXED);
            const auto* bits = reinterpret_cast<const std::uint64_t*>(meta + bitmap_offset_in_meta);
            if (i < root_sbs) {
                if (d != 0)
                    fail(i, "the root's superblock has a descriptor");
                s.reserved = true;
                continue;
            }
            switch (descriptor_kind(d)) {
            case sb_kind::free:
                if (descriptor_payload(d) != 0)
                    fail(i, "free descriptor with a payload");
                for (std::size_t w = 0; w < bitmap_words; ++w)
                    if (bits[w] != 0)
                        fail(i, "free superblock with allocated blocks");
                break;
            case sb_kind::small: {
                std::uint64_t size = descriptor_payload(d);
                auto it = std::find(size_classes.begin(), size_classes.end(), size);
                if (it == size_classes.end())
                    fail(i, "unknown block size " + std::to_string(size));
                s.kind = sb_kind::small;
                s.cls = static_cast<std::uint32_t>(it - size_classes.begin());
                std::uint32_t n = s.blocks(), used = 0;
                for (std::size_t w = 0; w < bitmap_words; ++w) {
                    std::uint64_t b = bits[w];
                    std::uint64_t beyond = beyond_mask(n, w);
                    if (b & beyond)
                        fail(i, "bitmap bits set past the last block");
                    used += static_cast<std::uint32_t>(__builtin_popcountll(b));
                    s.taken[w].store(b | beyond, std::memory_order_relaxed);
                }
                s.used.store(used, std::memory_order_relaxed);
                partial_[s.cls].push_back(i);
                break;
            }
            case sb_kind::span_head: {
                std::uint64_t n = descriptor_payload(d);
                if (n == 0 || n > count_ - i)
                    fail(i, "span of " + std::to_string(n) + " superblocks");
                s.kind = sb_kind::span_head;
                s.span = static_cast<std::uint32_t>(n);
                for (std::uint32_t k = 1; k < n; ++k) {
                    std::uint64_t t = __atomic_load_n(
                        reinterpret_cast<const std::uint64_t*>(base + meta_offset(i + k)),
                        __ATOMIC_RELAXED);
                    if (t != make_descriptor(sb_kind::span_tail, i))
                        fail(i + k, "span tail does not point to its head " + std::to_string(i));
                    sbs_[i + k].kind = sb_kind::span_tail;
                    sbs_[i + k].span = i;
                }
                i += static_cast<std::uint32_t>(n - 1);
                break;
            }
            default:
                fail(i, "descriptor of unknown kind " + std::to_string(d >> 56));
            }
        }
    }

    /// Bits of bitmap word w that lie past the last of n blocks.
    static std::uint64_t beyond_mask(std::uint32_t n, std::size_t w) noexcept {
        std::uint64_t first = std::uint64_t{w} * 64;
        if (first >= n)
            return ~std::uint64_t{0};
        if (first + 64 <= n)
            return 0;
        return ~std::uint64_t{0} << (n - first);
    }

    /// Claims a free block of superblock i (owned by the caller); returns its index or -1.
    std::int64_t claim_block(std::uint32_t i) noexcept {
        superblock_state& s = sbs_[i];
        for (std::size_t k = 0; k < bitmap_words; ++k) {
            std::size_t w = (s.hint + k) % bitmap_words;
            std::uint64_t cur = s.taken[w].load(std::memory_order_relaxed);
            while (cur != ~std::uint64_t{0}) {
                std::uint64_t bit = ~cur & (cur + 1); // lowest zero bit
                if (s.taken[w].compare_exchange_weak(cur, cur | bit, std::memory_order_acq_rel)) {
                    s.used.fetch_add(1, std::memory_order_relaxed);
                    s.hint = static_cast<std::uint32_t>(w);
                    return static_cast<std::int64_t>(
                        w * 64 + static_cast<std::size_t>(__builtin_ctzll(bit)));
                }
            }
        }
        return -1;
    }

    /// Makes block b of superblock i available again.
    void release_block(std::uint32_t i, std::uint32_t b) noexcept {
        superblock_state& s = sbs_[i];
        s.taken[b / 64].fetch_and(~(std::uint64_t{1} << (b % 64)), std::memory_order_acq_rel);
        s.used.fetch_sub(1, std::memory_order_relaxed);
    }

    /// Takes a superblock for class `cls` into slot's local heap: a partial one of that class
    /// from the global pool, else a free one (the caller must then write its descriptor in the
    /// transaction). Returns the index and whether it needs a new descriptor; -1 if none.
    std::int64_t take_superblock(std::uint32_t slot, std::size_t cls, bool& fresh) {
        std::lock_guard lk(mutex_);
        auto& pl = partial_[cls];
        for (std::size_t k = 0; k < pl.size(); ++k) {
            std::uint32_t i = pl[k];
            superblock_state& s = sbs_[i];
            if (s.used.load(std::memory_order_relaxed) < s.blocks()) {
                pl.erase(pl.begin() + static_cast<std::ptrdiff_t>(k));
                s.owner = static_cast<std::int32_t>(slot);
                s.hint = 0;
                local_[slot][cls].push_back(i);
                fresh = false;
                return i;
            }
        }
        std::int64_t i = find_free_run(1);
        if (i < 0)
            i = take_empty_small(); // an empty superblock of another class
        if (i < 0)
            return -1;
        superblock_state& s = sbs_[i];
        s.kind = sb_kind::small;
        s.cls = static_cast<std::uint32_t>(cls);
        s.owner = static_cast<std::int32_t>(slot);
        s.hint = 0;
        std::uint32_t n = s.blocks();
        for (std::size_t w = 0; w < bitmap_words; ++w)
            s.taken[w].store(beyond_mask(n, w), std::memory_order_relaxed);
        s.used.store(0, std::memory_order_relaxed);
        local_[slot][cls].push_back(static_cast<std::uint32_t>(i));
        fresh = true;
        return i;
    }

    /// Undoes take_superblock of a fresh superblock (its transaction aborted).
    void untake_superblock(std::uint32_t slot, std::uint32_t i) {
        std::lock_guard lk(mutex_);
        superblock_state& s = sbs_[i];
        auto& l = local_[slot][s.cls];
        l.erase(std::remove(l.begin(), l.end(), i), l.end());
        s.kind = sb_kind::free;
        s.owner = -1;
        s.used.store(0, std::memory_order_relaxed);
    }

    /// Reserves a run of n free superblocks for a large allocation; -1 if none.
    std::int64_t take_span(std::uint32_t n) {
        std::lock_guard lk(mutex_);
        std::int64_t i = find_free_run(n);
        if (i < 0)
            return -1;
        sbs_[i].kind = sb_kind::span_head;
        sbs_[i].span = n;
        for (std::uint32_t k = 1; k < n; ++k) {
            sbs_[i + k].kind = sb_kind::span_tail;
            sbs_[i + k].span = static_cast<std::uint32_t>(i);
        }
        return i;
    }

    /// Returns a span's superblocks to the free pool (its allocation aborted, or its free
    /// became safe under I3).
    void release_span(std::uint32_t i) {
        std::lock_guard lk(mutex_);
        std::uint32_t n = sbs_[i].span;
        for (std::uint32_t k = 0; k < n; ++k) {
            sbs_[i + k].kind = sb_kind::free;
            sbs_[i + k].span = 0;
        }
    }

    /// Hoard's emptiness rule: a thread keeps at most a few mostly-empty superblocks of a
    /// class; the rest go back to the global pool for other threads.
    void maybe_return(std::uint32_t slot, std::uint32_t i) {
        superblock_state& s = sbs_[i];
        if (s.owner != static_cast<std::int32_t>(slot) || s.kind != sb_kind::small)
            return;
        if (s.used.load(std::memory_order_relaxed) * 4 > s.blocks())
            return;
        auto& l = local_[slot][s.cls];
        if (l.size() <= 2)
            return;
        std::lock_guard lk(mutex_);
        l.erase(std::remove(l.begin(), l.end(), i), l.end());
        s.owner = -1;
        partial_[s.cls].push_back(i);
    }

    /// Queues the frees of a transaction committed at ts until I3 allows their reuse.
    void add_pending(const std::vector<alloc_tx_state::freed>& frees, std::uint64_t ts) {
        std::lock_guard lk(pending_mutex_);
        for (const auto& f : frees)
            pending_.push_back({ts, f.sb, f.block, f.large});
    }

    /// Calls release(p) for every pending free that `ripe(ts)` allows and drops it from the
    /// queue; returns the newest timestamp still pending (0 if none). Any thread may call it.
    template <class Ripe, class Release> std::uint64_t reclaim(Ripe&& ripe, Release&& release) {
        std::lock_guard lk(pending_mutex_);
        std::size_t kept = 0;
        std::uint64_t newest = 0;
        for (const pending_free& p : pending_) {
            if (!ripe(p.ts)) {
                pending_[kept++] = p;
                newest = std::max(newest, p.ts);
                continue;
            }
            release(p);
        }
        pending_.resize(kept);
        return newest;
    }

    /// The newest timestamp among pending frees (0 if none), and how many there are.
    std::pair<std::uint64_t, std::size_t> pending_summary() {
        std::lock_guard lk(pending_mutex_);
        std::uint64_t newest = 0;
        for (const pending_free& p : pending_)
            newest = std::max(newest, p.ts);
        return {newest, pending_.size()};
    }

    heap_stats figures() const {
        std::lock_guard lk(mutex_);
        heap_stats f;
        f.superblocks = count_;
        for (std::size_t c = 0; c < class_count; ++c)
            f.block_sizes[c] = size_classes[c];
        for (std::uint32_t i = 0; i < count_; ++i) {
            const superblock_state& s = sbs_[i];
            if (s.reserved) {
                f.bytes_in_use += superblock_bytes;
                f.bytes_in_superblocks += superblock_bytes;
                continue;
            }
            switch (s.kind) {
            case sb_kind::free:
                ++f.superblocks_free;
                break;
            case sb_kind::small: {
                std::uint32_t used = s.used.load(std::memory_order_relaxed);
                if (used == 0 && s.owner < 0) {
                    ++f.superblocks_free; // empty, in the global pool: reusable for any class
                    break;
                }
                ++f.superblocks_per_class[s.cls];
                f.bytes_in_use += std::uint64_t{used} * size_classes[s.cls];
                f.bytes_in_superblocks += superblock_bytes;
                break;
            }
            case sb_kind::span_head:
            case sb_kind::span_tail:
                ++f.superblocks_large;
                f.bytes_in_use += superblock_bytes;
                f.bytes_in_superblocks += superblock_bytes;
                break;
            }
        }
        return f;
    }

private:
    /// First run of n free superblocks (mutex held).
    std::int64_t find_free_run(std::uint32_t n) {
        std::uint32_t run = 0;
        for (std::uint32_t k = 0; k < count_; ++k) {
            std::uint32_t i = (cursor_ + k) % static_cast<std::uint32_t>(count_);
            if (i == 0)
                run = 0; // runs do not wrap around the end
            if (sbs_[i].kind == sb_kind::free && !sbs_[i].reserved) {
                if (++run == n) {
                    cursor_ = i + 1 < count_ ? i + 1 : 0;
                    return static_cast<std::int64_t>(i + 1 - n);
                }
            } else {
                run = 0;
            }
        }
        return -1;
    }

    /// An empty small superblock of the global pool, to be given a new class (mutex held).
    std::int64_t take_empty_small() {
        for (auto& pl : partial_) {
            for (std::size_t k = 0; k < pl.size(); ++k) {
                std::uint32_t i = pl[k];
                if (sbs_[i].used.load(std::memory_order_relaxed) == 0) {
                    pl.erase(pl.begin() + static_cast<std::ptrdiff_t>(k));
                    return i;
                }
            }
        }
        return -1;
    }

    mutable std::mutex mutex_;
    std::uint64_t heap_offset_ = 0, meta_offset_ = 0;
    std::size_t count_ = 0;
    std::unique_ptr<superblock_state[]> sbs_;
    std::array<std::vector<std::uint32_t>, class_count> partial_; ///< global pool, by class
    std::vector<std::array<std::vector<std::uint32_t>, class_count>> local_; ///< by slot
    std::uint32_t cursor_ = 0;
    std::mutex pending_mutex_;          ///< taken before mutex_ when both are needed
    std::vector<pending_free> pending_; ///< committed frees waiting for I3, all threads
};

} // namespace tlptm::detail
