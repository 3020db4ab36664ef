// tlptm — the memory manager's volatile state (DESIGN.md §7): a Hoard-style heap of
// superblocks with per-thread local heaps and a global pool, rebuilt lazily by arena.
//
// Persistent state lives only in the pool's allocator metadata area: per superblock a 64-byte
// descriptor record and a bitmap of its blocks, and per arena of arena_superblocks superblocks
// a summary word (non-zero: the arena may hold something). It changes only through
// transactions (the logged descriptor, bitmap and summary stores of alloc.hpp), so recovery's
// replay leaves it consistent and the heap derives everything here from it:
//
// - heap::rebuild() (after recovery) reads only the summary words. An arena is scanned —
//   its descriptors and bitmaps read — when the allocator first needs it, when a block in it
//   is freed, or when the figures are asked for. No transaction changes an arena's metadata
//   before it is scanned (every allocation and free in it scans it first), so a scan reads
//   exactly the state recovery left, and I3 holds there: recovery's CT covers every free.
// - A summary word is set (never cleared) by the transaction that first takes a superblock
//   of the arena, so an arena whose word is 0 holds only free superblocks and needs no reads.
// - A small superblock whose blocks are all free is free: persistently "small, empty bitmap"
//   means the same as "free". It is given a class or a span again by writing its descriptor
//   in the transaction that takes it, as a free one is.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <tlptm/detail/layout.hpp>
#include <tlptm/detail/stm.hpp>
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

/// Volatile state of one superblock, on cache lines of its own: slots that claim from
/// neighbouring superblocks (they are taken in order) do not share a line.
struct alignas(64) superblock_state {
    /// One bit per block: 1 = not available (allocated, claimed by a running transaction, or
    /// freed but not yet reusable under I3). Bits past the last block are set. Allocated when
    /// the superblock first holds small blocks.
    std::unique_ptr<std::atomic<std::uint64_t>[]> taken;
    /// Blocks whose bits are set in `taken` (allocated, claimed, pending, or in the owner's
    /// stash). A claim adds its blocks just after taking their bits, so it may be low for a
    /// moment, only while the owner's local lock is held.
    std::atomic<std::uint32_t> used{0};
    /// Of `used`, the blocks in its owner's stash: taken from the bitmap in advance, not handed
    /// to any transaction. Written under the owner's local lock; read without it by figures()
    /// and by after_release's first look.
    std::atomic<std::uint32_t> stashed{0};
    /// Slot whose local heap holds it, -1 = none (global pool, free or a span). Changed with
    /// both heap::mutex_ and that slot's local lock held.
    std::atomic<std::int32_t> owner{-1};
    // Guarded by heap::mutex_:
    sb_kind kind = sb_kind::free;
    bool reserved = false;  ///< the root's superblocks
    std::uint32_t cls = 0;  ///< size class (small)
    std::uint32_t span = 0; ///< superblocks in the span (span_head), head index (span_tail)
    /// Blocks of its class (small); read without a lock by whoever releases a block.
    std::atomic<std::uint32_t> nblocks{0};
    // Guarded by the owner's local lock:
    std::uint32_t hint = 0; ///< first bitmap word that may have a free bit

    std::uint32_t blocks() const noexcept { return nblocks.load(std::memory_order_relaxed); }
    /// Blocks held by transactions or pending frees: `used` without the stash.
    std::uint32_t in_use() const noexcept {
        std::uint32_t u = used.load(std::memory_order_acquire);
        std::uint32_t k = stashed.load(std::memory_order_relaxed);
        return u > k ? u - k : 0;
    }
    void set_class(std::size_t c) noexcept {
        cls = static_cast<std::uint32_t>(c);
        nblocks.store(static_cast<std::uint32_t>(superblock_bytes / size_classes[c]),
                      std::memory_order_relaxed);
    }
};

/// Volatile state of one arena, made when the arena is scanned.
struct arena_state {
    std::unique_ptr<superblock_state[]> sbs;
    std::uint32_t free_count = 0; ///< superblocks of kind free (guarded by heap::mutex_)
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
        std::uint64_t bytes; ///< the block's or span's size
    };
    std::vector<claim> claims; ///< blocks this transaction allocated
    /// Byte ranges of the blocks this transaction allocated (any log mode): every line of them
    /// is made durable before the commit point, whether written through p<T> and tx stores or
    /// by raw stores (std::memcpy into a tx.alloc block), as PMDK does for new objects.
    std::vector<range> allocated;
    /// The same in modes aalo and tlptm: stores there go in place. A prefix is sorted by offset
    /// (in_aalo), the rest in allocation order.
    std::vector<range> aalo;
    std::vector<freed> frees;             ///< blocks freed: pending after commit
    std::vector<std::uint32_t> sb_claims; ///< fresh superblocks taken from the free ones
    /// Scratch of the commit: the blocks' line-aligned spans [begin, end), to flush.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;

    void clear() noexcept {
        // Most transactions allocate nothing: no stores then (after a commit's fence every
        // store waits in the store buffer until the fence completes).
        if (!claims.empty())
            claims.clear();
        if (!allocated.empty())
            allocated.clear();
        if (!aalo.empty()) {
            aalo.clear();
            if (aalo_sorted_ != 0)
                aalo_sorted_ = 0;
        }
        if (!frees.empty())
            frees.clear();
        if (!sb_claims.empty())
            sb_claims.clear();
    }
    /// Removes the block starting at `offset` from `allocated` and `aalo` (freed by the
    /// transaction that allocated it).
    void drop_block(std::uint64_t offset) {
        auto at = [&](const range& x) { return x.offset == offset; };
        auto it = std::find_if(aalo.begin(), aalo.end(), at);
        if (it != aalo.end()) {
            if (static_cast<std::size_t>(it - aalo.begin()) < aalo_sorted_)
                --aalo_sorted_; // erasing keeps the rest of the sorted prefix sorted
            aalo.erase(it);
        }
        allocated.erase(std::remove_if(allocated.begin(), allocated.end(), at), allocated.end());
    }
    /// True if [offset, offset + n) lies in memory allocated by this transaction. The blocks
    /// allocated last are looked at first and one by one (stores mostly go to the block just
    /// allocated); the older ones form a prefix of `aalo` kept sorted by offset for a binary
    /// search, so that a transaction that allocates thousands of blocks (a bulk load) does not
    /// scan them all at every access.
    bool in_aalo(std::uint64_t offset, std::uint64_t n) {
        if (aalo.size() == 1) // one block (an insert's node): no search
            return holds(aalo.front(), offset, n);
        return in_aalo_search(offset, n);
    }

    /// in_aalo for two blocks or more.
    bool in_aalo_search(std::uint64_t offset, std::uint64_t n) {
        auto holds = [&](const range& r) { return alloc_tx_state::holds(r, offset, n); };
        auto by_offset = [](const range& a, const range& b) { return a.offset < b.offset; };
        if (aalo.size() - aalo_sorted_ > aalo_tail_max) { // merge the tail into the prefix
            const auto mid = aalo.begin() + static_cast<std::ptrdiff_t>(aalo_sorted_);
            std::sort(mid, aalo.end(), by_offset);
            std::inplace_merge(aalo.begin(), mid, aalo.end(), by_offset);
            aalo_sorted_ = aalo.size();
        }
        for (std::size_t k = aalo.size(); k > aalo_sorted_; --k)
            if (holds(aalo[k - 1]))
                return true;
        // The last sorted block starting at or before offset (blocks do not overlap).
        const auto end = aalo.begin() + static_cast<std::ptrdiff_t>(aalo_sorted_);
        auto it = std::upper_bound(aalo.begin(), end, offset,
                                   [](std::uint64_t o, const range& r) { return o < r.offset; });
        return it != aalo.begin() && holds(*(it - 1));
    }

private:
    /// Block r holds [offset, offset + n).
    static bool holds(const range& r, std::uint64_t offset, std::uint64_t n) noexcept {
        return offset >= r.offset && offset - r.offset <= r.size &&
               n <= r.size - (offset - r.offset);
    }

    /// Blocks allocated since the sorted prefix was last extended that in_aalo scans one by
    /// one before it merges them in.
    static constexpr std::size_t aalo_tail_max = 16;
    std::size_t aalo_sorted_ = 0; ///< aalo[0, aalo_sorted_) is sorted by offset
};

/// A free that must wait for I3 before its memory is handed out again.
struct pending_free {
    std::uint64_t ts;
    std::uint32_t sb, block;
    bool large;
    std::uint64_t bytes;
};

/// A block claimed for a transaction: superblock and block index, or sb = -1 if none.
struct block_claim {
    std::int64_t sb = -1;
    std::uint32_t block = 0;
    bool fresh = false; ///< the superblock was free: its descriptor must be written
};

/// The heap: superblock states by arena, the global pool and the per-slot local heaps.
///
/// Locks, always taken in this order: pending_mutex_, then one slot's local lock, then
/// mutex_. A slot's local lock guards its lists and the `hint` of the superblocks in them; the
/// owner takes it on every small allocation (uncontended but for a thief or a reclaimer
/// returning one of its superblocks).
class heap {
public:
    heap() = default;
    heap(const heap&) = delete;
    heap& operator=(const heap&) = delete;

    std::size_t count() const noexcept { return count_; }
    std::uint64_t sb_offset(std::uint32_t i) const noexcept {
        return heap_offset_ + std::uint64_t{i} * superblock_bytes;
    }
    std::uint64_t meta_offset(std::uint32_t i) const noexcept {
        return meta_offset_ + std::uint64_t{i} * meta_bytes_per_superblock;
    }
    /// Offset of arena a's summary word.
    std::uint64_t summary_offset(std::uint64_t a) const noexcept {
        return summary_offset_ + a * summary_bytes_per_arena;
    }

    /// Resets the volatile heap after recovery's replay: only the heap summary is read; the
    /// arenas are scanned later, when first needed. `base` (the pool's mapping, or an image of
    /// it) must stay valid while the heap is used.
    void rebuild(const std::uint8_t* base, const pool_header& h, const std::string& path) {
        {
            std::lock_guard plk(pending_mutex_);
            pending_.clear(); // recovery: CT covers every free and no transaction runs
            pending_count_.store(0, std::memory_order_relaxed);
            pending_bytes_.store(0, std::memory_order_relaxed);
        }
        std::lock_guard lk(mutex_);
        base_ = base;
        path_ = path;
        heap_offset_ = h.heap_offset;
        meta_offset_ = h.meta_offset;
        count_ = h.heap_size / superblock_bytes;
        summary_offset_ = meta_offset_ + count_ * meta_bytes_per_superblock;
        arenas_count_ = arena_count(count_);
        root_sbs_ = static_cast<std::uint32_t>(h.root_capacity / superblock_bytes);
        arenas_ = std::make_unique<std::atomic<arena_state*>[]>(arenas_count_);
        arena_store_.clear();
        arena_store_.resize(arenas_count_);
        flagged_.assign(arenas_count_, false);
        for (std::size_t a = 0; a < arenas_count_; ++a) {
            arenas_[a].store(nullptr, std::memory_order_relaxed);
            flagged_[a] = __atomic_load_n(summary_word(a), __ATOMIC_RELAXED) != 0;
        }
        locals_ = std::make_unique<local_heap[]>(h.max_threads);
        slot_count_ = h.max_threads;
        for (auto& c : partial_)
            c.clear();
        cursor_ = 0;
        scan_cursor_ = 0;
    }

    /// Scans every arena now (the tool's check): also those the summary calls empty, which
    /// must then hold nothing. Throws corruption_error as a lazy scan does.
    void scan_all() {
        std::lock_guard lk(mutex_);
        for (std::size_t a = 0; a < arenas_count_; ++a) {
            if (arena(a))
                continue;
            bool was_flagged = flagged_[a];
            flagged_[a] = true; // read the metadata whatever the summary says
            scan_locked(a);
            if (!was_flagged && arena(a)->free_count + reserved_in(a) != sbs_in(a))
                throw corruption_error("tlptm: pool '" + path_ + "': allocator metadata: arena " +
                                       std::to_string(a) +
                                       " holds allocated superblocks but its heap summary word "
                                       "is 0");
        }
    }

    /// Scans the arenas of superblocks [first, first + n) if not done yet (before a free in
    /// them: a scan must read the metadata as recovery left it). Thread-safe.
    void ensure_scanned(std::uint32_t first, std::uint32_t n) {
        std::size_t a0 = first / arena_superblocks, a1 = (first + n - 1) / arena_superblocks;
        for (std::size_t a = a0; a <= a1 && a < arenas_count_; ++a) {
            if (arena(a))
                continue;
            std::lock_guard lk(mutex_);
            scan_locked(a);
        }
    }

    /// Claims a free block of class cls in one of slot's superblocks (the fast path): from
    /// the slot's stash for the class, else a bitmap word of its superblocks is taken whole
    /// into the stash. One locked instruction (the local lock) per claim, two more per refill.
    block_claim claim_local(std::uint32_t slot, std::size_t cls) noexcept {
        local_heap& l = locals_[slot];
        std::lock_guard lk(l.lock);
        stash& st = l.stashes[cls];
        if (st.bits != 0)
            return hand_out(st);
        auto& list = l.lists[cls];
        for (std::size_t k = list.size(); k-- > 0;)
            if (refill(st, list[k]))
                return hand_out(st);
        return {};
    }

    /// Takes a superblock for class `cls` into slot's local heap and claims a block of it: a
    /// partial one of that class from the global pool, else a free one (then `fresh`: the
    /// caller must write its descriptor in the transaction). sb = -1 if none.
    block_claim take_superblock(std::uint32_t slot, std::size_t cls) {
        local_heap& l = locals_[slot];
        std::lock_guard llk(l.lock);
        std::lock_guard lk(mutex_);
        block_claim c;
        auto& pl = partial_[cls];
        // Partial superblocks of the class first, from the arenas scanned so far and then from
        // the used ones not scanned yet (before fresh ones: less fragmentation).
        do {
            for (std::size_t k = pl.size(); k-- > 0;) {
                std::uint32_t i = pl[k];
                superblock_state& s = sb(i);
                if (s.used.load(std::memory_order_relaxed) >= s.blocks())
                    continue;
                pl.erase(pl.begin() + static_cast<std::ptrdiff_t>(k));
                s.owner.store(static_cast<std::int32_t>(slot), std::memory_order_relaxed);
                s.hint = 0;
                l.lists[cls].push_back(i);
                if (refill(l.stashes[cls], i))
                    return hand_out(l.stashes[cls]);
            }
        } while (scan_next_used());
        std::int64_t i = find_free_run(1);
        if (i < 0)
            return c;
        auto idx = static_cast<std::uint32_t>(i);
        superblock_state& s = sb(idx);
        s.kind = sb_kind::small;
        s.set_class(cls);
        s.hint = 0;
        if (!s.taken)
            s.taken = std::make_unique<std::atomic<std::uint64_t>[]>(bitmap_words);
        std::uint32_t n = s.blocks();
        for (std::size_t w = 0; w < bitmap_words; ++w)
            s.taken[w].store(beyond_mask(n, w), std::memory_order_relaxed);
        s.used.store(0, std::memory_order_relaxed);
        s.owner.store(static_cast<std::int32_t>(slot), std::memory_order_relaxed);
        --arena_of(idx).free_count;
        l.lists[cls].push_back(idx);
        (void)refill(l.stashes[cls], idx); // a fresh superblock has room
        c = hand_out(l.stashes[cls]);
        c.fresh = true;
        return c;
    }

    /// Up to `n` free superblocks that find_free_run will hand out next, in that order, into
    /// `out` (those of arenas scanned already: an arena is not scanned for this); returns how
    /// many. For the page-ahead thread: only a hint, they may be taken before it is used.
    std::size_t next_free(std::uint32_t* out, std::size_t n) {
        std::lock_guard lk(mutex_);
        std::size_t k = 0;
        for (auto i = cursor_; k < n && i < count_; ++i) {
            const std::size_t a = i / arena_superblocks;
            if (!arena(a))
                break;
            const superblock_state& s = sb(i);
            if (s.kind == sb_kind::free && !s.reserved)
                out[k++] = i;
        }
        return k;
    }

    /// Undoes the take of a fresh superblock (its transaction aborted). Nothing to do if a
    /// thief already returned it to the free superblocks.
    void untake_superblock(std::uint32_t slot, std::uint32_t i) {
        local_heap& l = locals_[slot];
        std::lock_guard llk(l.lock);
        std::lock_guard lk(mutex_);
        superblock_state& s = sb(i);
        if (s.owner.load(std::memory_order_relaxed) != static_cast<std::int32_t>(slot))
            return;
        drop_stash(l.stashes[s.cls], i);
        auto& list = l.lists[s.cls];
        list.erase(std::remove(list.begin(), list.end(), i), list.end());
        make_free(i);
    }

    /// Makes block b of superblock i available again (an aborted claim; the caller hands
    /// back empty superblocks with after_release if it wants them to go).
    void release_block(std::uint32_t i, std::uint32_t b) noexcept {
        superblock_state& s = sb(i);
        s.taken[b / 64].fetch_and(~(std::uint64_t{1} << (b % 64)), std::memory_order_acq_rel);
        s.used.fetch_sub(1, std::memory_order_acq_rel);
    }

    /// Reserves a run of n free superblocks for a large allocation; -1 if none.
    std::int64_t take_span(std::uint32_t n) {
        std::lock_guard lk(mutex_);
        std::int64_t i = find_free_run(n);
        if (i < 0)
            return -1;
        auto head = static_cast<std::uint32_t>(i);
        for (std::uint32_t k = 0; k < n; ++k) {
            superblock_state& s = sb(head + k);
            s.kind = k == 0 ? sb_kind::span_head : sb_kind::span_tail;
            s.span = k == 0 ? n : head;
            --arena_of(head + k).free_count;
        }
        return i;
    }

    /// Returns a span's superblocks to the free ones (its allocation aborted, or its free
    /// became safe under I3).
    void release_span(std::uint32_t i) {
        std::lock_guard lk(mutex_);
        std::uint32_t n = sb(i).span;
        for (std::uint32_t k = 0; k < n; ++k)
            make_free(i + k);
    }

    /// Hoard's emptiness rule, applied by whichever thread released blocks of superblock i:
    /// an empty superblock becomes free (for any class or a span), but a slot keeps its last
    /// one of a class; a mostly empty one goes from a local heap that has others of its class
    /// to the global pool, for other threads.
    void after_release(std::uint32_t i) {
        superblock_state& s = sb(i);
        std::int32_t o = s.owner.load(std::memory_order_acquire);
        if (o < 0) {
            std::lock_guard lk(mutex_);
            if (s.owner.load(std::memory_order_relaxed) >= 0 || s.kind != sb_kind::small ||
                s.used.load(std::memory_order_acquire) != 0)
                return; // taken meanwhile, or not empty
            auto& pl = partial_[s.cls];
            pl.erase(std::remove(pl.begin(), pl.end(), i), pl.end());
            make_free(i);
            return;
        }
        if (s.in_use() * 4 > s.blocks())
            return; // the common case: no lock
        local_heap& l = locals_[static_cast<std::size_t>(o)];
        std::lock_guard llk(l.lock);
        std::lock_guard lk(mutex_);
        if (s.owner.load(std::memory_order_relaxed) != o || s.kind != sb_kind::small)
            return;
        auto& list = l.lists[s.cls];
        const std::uint32_t used = s.in_use(); // stable: the owner cannot claim now
        if (used == 0 && list.size() > 1) {
            drop_stash(l.stashes[s.cls], i);
            list.erase(std::remove(list.begin(), list.end(), i), list.end());
            make_free(i);
        } else if (used != 0 && used * 4 <= s.blocks() && list.size() > 2) {
            drop_stash(l.stashes[s.cls], i);
            list.erase(std::remove(list.begin(), list.end(), i), list.end());
            s.owner.store(-1, std::memory_order_relaxed);
            partial_[s.cls].push_back(i);
        }
    }

    /// Memory is short: every empty superblock of every local heap becomes free, and the
    /// superblocks of class `cls` with room that other slots keep go to the global pool (cls =
    /// class_count: none). Returns how many superblocks moved. An empty one may be the fresh
    /// superblock of a transaction that aborted and has not untaken it yet: free is right for
    /// it too (untake_superblock then does nothing).
    std::size_t steal(std::uint32_t slot, std::size_t cls) {
        std::size_t n = 0;
        for (std::uint32_t o = 0; o < slot_count_; ++o) {
            local_heap& l = locals_[o];
            std::lock_guard llk(l.lock);
            std::lock_guard lk(mutex_);
            for (std::size_t c = 0; c < class_count; ++c) {
                drop_stash(l.stashes[c]); // its blocks may be all the room there is
                auto& list = l.lists[c];
                for (std::size_t k = list.size(); k-- > 0;) {
                    std::uint32_t i = list[k];
                    superblock_state& s = sb(i);
                    std::uint32_t used = s.used.load(std::memory_order_acquire);
                    if (used == 0) {
                        list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
                        make_free(i);
                        ++n;
                    } else if (c == cls && o != slot && used < s.blocks() &&
                               descriptor(i) == make_descriptor(sb_kind::small, size_classes[c])) {
                        // Only with its descriptor in the pool: a superblock that a running
                        // transaction took fresh must not be used by others before it commits.
                        list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
                        s.owner.store(-1, std::memory_order_relaxed);
                        partial_[c].push_back(i);
                        ++n;
                    }
                }
            }
        }
        return n;
    }

    /// Queues the frees of a transaction committed at ts until I3 allows their reuse.
    void add_pending(const std::vector<alloc_tx_state::freed>& frees, std::uint64_t ts) {
        std::lock_guard lk(pending_mutex_);
        std::uint64_t bytes = 0;
        for (const auto& f : frees) {
            pending_.push_back({ts, f.sb, f.block, f.large, f.bytes});
            bytes += f.bytes;
        }
        pending_count_.store(pending_.size(), std::memory_order_relaxed);
        pending_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    }

    /// Removes from the queue and returns every pending free that `ripe(ts)` allows. Any
    /// thread may call it; the caller releases what it got.
    template <class Ripe> std::vector<pending_free> take_ripe(Ripe&& ripe) {
        std::vector<pending_free> out;
        std::lock_guard lk(pending_mutex_);
        std::size_t kept = 0;
        std::uint64_t bytes = 0;
        for (const pending_free& p : pending_) {
            if (!ripe(p.ts)) {
                pending_[kept++] = p;
                continue;
            }
            out.push_back(p);
            bytes += p.bytes;
        }
        pending_.resize(kept);
        pending_count_.store(kept, std::memory_order_relaxed);
        pending_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
        return out;
    }

    /// How many frees are pending (a moment old; no lock).
    std::size_t pending_count() const noexcept {
        return pending_count_.load(std::memory_order_relaxed);
    }

    /// The oldest and newest timestamps among pending frees ({0, 0} if none).
    std::pair<std::uint64_t, std::uint64_t> pending_range() {
        std::lock_guard lk(pending_mutex_);
        if (pending_.empty())
            return {0, 0};
        std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
        for (const pending_free& p : pending_) {
            lo = std::min(lo, p.ts);
            hi = std::max(hi, p.ts);
        }
        return {lo, hi};
    }

    /// The heap's figures. Scans the arenas not scanned yet that the summary marks used.
    /// Logically const: a scan only builds volatile state that the heap would build anyway.
    heap_stats figures() const {
        auto& self = const_cast<heap&>(*this);
        std::lock_guard lk(self.mutex_);
        heap_stats f;
        f.superblocks = count_;
        for (std::size_t c = 0; c < class_count; ++c)
            f.block_sizes[c] = size_classes[c];
        for (std::size_t a = 0; a < arenas_count_; ++a) {
            if (!arena(a) && flagged_[a])
                self.scan_locked(a);
            std::uint32_t first = static_cast<std::uint32_t>(a * arena_superblocks);
            std::uint32_t reserved = reserved_in(a);
            f.bytes_in_use += std::uint64_t{reserved} * superblock_bytes;
            f.bytes_in_superblocks += std::uint64_t{reserved} * superblock_bytes;
            if (!arena(a)) { // never used: every superblock but the root's is free
                f.superblocks_free += sbs_in(a) - reserved;
                continue;
            }
            for (std::uint32_t i = first + reserved; i < first + sbs_in(a); ++i) {
                const superblock_state& s = sb(i);
                switch (s.kind) {
                case sb_kind::free:
                    ++f.superblocks_free;
                    break;
                case sb_kind::small: {
                    std::uint32_t used = s.in_use();
                    if (used == 0) {
                        // Empty: the allocator frees it (after_release) or takes it when
                        // memory is short (steal_empty).
                        ++f.superblocks_free;
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
        }
        // Blocks freed by committed transactions count as free, and are reported apart.
        f.bytes_pending_free = pending_bytes_.load(std::memory_order_relaxed);
        f.bytes_in_use -= std::min(f.bytes_in_use, f.bytes_pending_free);
        for (std::size_t a = 0; a < arenas_count_; ++a)
            f.arenas_scanned += arena(a) != nullptr;
        f.arenas = arenas_count_;
        return f;
    }

private:
    /// Blocks of one class taken from the bitmap ahead of their claims: the free bits of
    /// bitmap word `word` of superblock `sb` when it was taken, less those handed out since.
    /// Their bits stay set in `taken` and they count in `used` and `stashed`, so nobody else
    /// claims them; whoever changes the superblock's owner or frees it gives them back first.
    struct stash {
        std::uint32_t sb = 0;
        std::uint32_t word = 0;
        std::uint64_t bits = 0;
    };
    struct alignas(64) local_heap {
        spin_lock lock;
        std::array<std::vector<std::uint32_t>, class_count> lists;
        std::array<stash, class_count> stashes; ///< guarded by `lock`
    };

    /// Bits of bitmap word w that lie past the last of n blocks.
    static std::uint64_t beyond_mask(std::uint32_t n, std::size_t w) noexcept {
        std::uint64_t first = std::uint64_t{w} * 64;
        if (first >= n)
            return ~std::uint64_t{0};
        if (first + 64 <= n)
            return 0;
        return ~std::uint64_t{0} << (n - first);
    }

    arena_state* arena(std::size_t a) const noexcept {
        return arenas_[a].load(std::memory_order_acquire);
    }
    arena_state& arena_of(std::uint32_t i) noexcept { return *arena(i / arena_superblocks); }
    /// Superblock i's state; its arena must have been scanned.
    superblock_state& sb(std::uint32_t i) const noexcept {
        return arena(i / arena_superblocks)->sbs[i % arena_superblocks];
    }
    std::uint32_t sbs_in(std::size_t a) const noexcept {
        std::size_t first = a * arena_superblocks;
        return static_cast<std::uint32_t>(std::min(arena_superblocks, count_ - first));
    }
    std::uint32_t reserved_in(std::size_t a) const noexcept {
        std::size_t first = a * arena_superblocks;
        return first >= root_sbs_ ? 0
                                  : static_cast<std::uint32_t>(
                                        std::min<std::size_t>(root_sbs_ - first, sbs_in(a)));
    }
    const std::uint64_t* summary_word(std::size_t a) const noexcept {
        return reinterpret_cast<const std::uint64_t*>(base_ + summary_offset(a));
    }
    std::uint64_t descriptor(std::uint32_t i) const noexcept {
        return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(base_ + meta_offset(i)),
                               __ATOMIC_RELAXED);
    }

    /// Makes superblock i free (mutex held). Its persistent descriptor may still say "small"
    /// with an empty bitmap, which means the same.
    void make_free(std::uint32_t i) {
        superblock_state& s = sb(i);
        s.kind = sb_kind::free;
        s.span = 0;
        s.owner.store(-1, std::memory_order_relaxed);
        ++arena_of(i).free_count;
    }

    /// Hands out the lowest block of a stash that is not empty (its owner's local lock held).
    block_claim hand_out(stash& st) noexcept {
        const std::uint64_t bit = st.bits & (~st.bits + 1);
        st.bits ^= bit;
        superblock_state& s = sb(st.sb);
        s.stashed.store(s.stashed.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
        block_claim c;
        c.sb = st.sb;
        c.block = st.word * 64 + static_cast<std::uint32_t>(std::countr_zero(bit));
        return c;
    }

    /// Fills the stash with the free blocks of the first bitmap word of superblock i that has
    /// any, from its hint on (the local lock of its owner held); false if it has none. Blocks
    /// the stash still held go back first. Only the owner sets bits, others only clear them:
    /// the exchange takes every bit that was free, and `used` counts them right after.
    bool refill(stash& st, std::uint32_t i) noexcept {
        drop_stash(st);
        superblock_state& s = sb(i);
        if (s.used.load(std::memory_order_relaxed) >= s.blocks())
            return false;
        for (std::size_t k = 0; k < bitmap_words; ++k) {
            const std::size_t w = (s.hint + k) % bitmap_words;
            if (s.taken[w].load(std::memory_order_relaxed) == ~std::uint64_t{0})
                continue;
            const std::uint64_t got =
                ~s.taken[w].exchange(~std::uint64_t{0}, std::memory_order_acq_rel);
            if (got == 0)
                continue;
            const auto n = static_cast<std::uint32_t>(std::popcount(got));
            s.used.fetch_add(n, std::memory_order_acq_rel);
            s.stashed.store(s.stashed.load(std::memory_order_relaxed) + n,
                            std::memory_order_relaxed);
            s.hint = static_cast<std::uint32_t>(w);
            st = {i, static_cast<std::uint32_t>(w), got};
            return true;
        }
        return false;
    }

    /// Gives a stash's blocks back to their superblock (its owner's local lock held): all of
    /// them, or only if they are superblock i's.
    void drop_stash(stash& st, std::int64_t i = -1) noexcept {
        if (st.bits == 0 || (i >= 0 && st.sb != static_cast<std::uint32_t>(i)))
            return;
        superblock_state& s = sb(st.sb);
        const auto n = static_cast<std::uint32_t>(std::popcount(st.bits));
        s.taken[st.word].fetch_and(~st.bits, std::memory_order_acq_rel);
        s.stashed.store(s.stashed.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
        s.used.fetch_sub(n, std::memory_order_acq_rel);
        st.bits = 0;
    }

    /// Scans the next arena that the summary marks used and that is not scanned yet (mutex
    /// held); false if there is none left.
    bool scan_next_used() {
        while (scan_cursor_ < arenas_count_) {
            std::size_t a = scan_cursor_++;
            if (!arena(a) && flagged_[a]) {
                scan_locked(a);
                return true;
            }
        }
        return false;
    }

    /// First run of n free superblocks from the cursor on, else from the start, scanning
    /// arenas on the way (mutex held); -1 if none.
    std::int64_t find_free_run(std::uint32_t n) {
        std::int64_t i = find_free_run(n, cursor_);
        if (i < 0 && cursor_ != 0)
            i = find_free_run(n, 0);
        if (i >= 0)
            cursor_ =
                static_cast<std::uint32_t>(i) + n < count_ ? static_cast<std::uint32_t>(i) + n : 0;
        return i;
    }

    /// First run of n free superblocks in [from, count_) (mutex held); -1 if none.
    std::int64_t find_free_run(std::uint32_t n, std::uint32_t from) {
        std::uint32_t run = 0;
        auto count = static_cast<std::uint32_t>(count_);
        for (std::uint32_t i = from; i < count;) {
            std::size_t a = i / arena_superblocks;
            if (!arena(a))
                scan_locked(a);
            if (i % arena_superblocks == 0 && arena(a)->free_count == 0) {
                run = 0; // a full arena: skip it
                i += sbs_in(a);
                continue;
            }
            const superblock_state& s = sb(i);
            if (s.kind == sb_kind::free && !s.reserved) {
                if (++run == n)
                    return static_cast<std::int64_t>(i + 1 - n);
            } else {
                run = 0;
            }
            ++i;
        }
        return -1;
    }

    /// Builds arena a's volatile state from its metadata (mutex held). An arena the summary
    /// calls empty is read not at all. Throws corruption_error on metadata that cannot be.
    void scan_locked(std::size_t a) {
        if (arena(a))
            return;
        auto ar = std::make_unique<arena_state>();
        std::uint32_t n = sbs_in(a);
        ar->sbs = std::make_unique<superblock_state[]>(n);
        auto first = static_cast<std::uint32_t>(a * arena_superblocks);
        std::uint32_t end = first + n;
        auto fail = [&](std::uint32_t i, const std::string& why) {
            throw corruption_error("tlptm: pool '" + path_ +
                                   "': allocator metadata of superblock " + std::to_string(i) +
                                   ": " + why);
        };
        for (std::uint32_t i = first; i < end; ++i) {
            superblock_state& s = ar->sbs[i - first];
            if (i < root_sbs_) {
                if (flagged_[a] && descriptor(i) != 0)
                    fail(i, "the root's superblock has a descriptor");
                s.reserved = true;
                continue;
            }
            if (!flagged_[a]) {
                ++ar->free_count;
                continue;
            }
            const std::uint8_t* meta = base_ + meta_offset(i);
            std::uint64_t d = descriptor(i);
            const auto* bits = reinterpret_cast<const std::uint64_t*>(meta + bitmap_offset_in_meta);
            switch (descriptor_kind(d)) {
            case sb_kind::free:
                if (descriptor_payload(d) != 0)
                    fail(i, "free descriptor with a payload");
                for (std::size_t w = 0; w < bitmap_words; ++w)
                    if (__atomic_load_n(&bits[w], __ATOMIC_RELAXED) != 0)
                        fail(i, "free superblock with allocated blocks");
                ++ar->free_count;
                break;
            case sb_kind::small: {
                std::uint64_t size = descriptor_payload(d);
                auto it = std::find(size_classes.begin(), size_classes.end(), size);
                if (it == size_classes.end())
                    fail(i, "unknown block size " + std::to_string(size));
                s.set_class(static_cast<std::size_t>(it - size_classes.begin()));
                std::uint32_t blocks = s.blocks(), used = 0;
                std::array<std::uint64_t, bitmap_words> words{};
                for (std::size_t w = 0; w < bitmap_words; ++w) {
                    words[w] = __atomic_load_n(&bits[w], __ATOMIC_RELAXED);
                    if (words[w] & beyond_mask(blocks, w))
                        fail(i, "bitmap bits set past the last block");
                    used += static_cast<std::uint32_t>(__builtin_popcountll(words[w]));
                }
                if (used == 0) { // emptied: as good as free
                    ++ar->free_count;
                    break;
                }
                s.kind = sb_kind::small;
                s.taken = std::make_unique<std::atomic<std::uint64_t>[]>(bitmap_words);
                for (std::size_t w = 0; w < bitmap_words; ++w)
                    s.taken[w].store(words[w] | beyond_mask(blocks, w), std::memory_order_relaxed);
                s.used.store(used, std::memory_order_relaxed);
                partial_[s.cls].push_back(i);
                break;
            }
            case sb_kind::span_head: {
                std::uint64_t len = descriptor_payload(d);
                if (len == 0 || len > count_ - i)
                    fail(i, "span of " + std::to_string(len) + " superblocks");
                for (std::uint32_t k = 1; k < len; ++k)
                    if (descriptor(i + k) != make_descriptor(sb_kind::span_tail, i))
                        fail(i + k, "span tail does not point to its head " + std::to_string(i));
                s.kind = sb_kind::span_head;
                s.span = static_cast<std::uint32_t>(len);
                for (std::uint32_t k = 1; k < len && i + k < end; ++k) {
                    ar->sbs[i + k - first].kind = sb_kind::span_tail;
                    ar->sbs[i + k - first].span = i;
                }
                i = static_cast<std::uint32_t>(std::min<std::uint64_t>(i + len, end) - 1);
                break;
            }
            case sb_kind::span_tail: {
                // Only the first superblocks of an arena may continue a span of an earlier one.
                std::uint64_t head = descriptor_payload(d);
                std::uint64_t hd = head < i ? descriptor(static_cast<std::uint32_t>(head)) : 0;
                if (head >= first || descriptor_kind(hd) != sb_kind::span_head ||
                    head + descriptor_payload(hd) <= i ||
                    (i > first && ar->sbs[i - 1 - first].kind != sb_kind::span_tail))
                    fail(i, "span tail without its head");
                s.kind = sb_kind::span_tail;
                s.span = static_cast<std::uint32_t>(head);
                break;
            }
            default:
                fail(i, "descriptor of unknown kind " + std::to_string(d >> 56));
            }
        }
        arena_store_[a] = std::move(ar);
        arenas_[a].store(arena_store_[a].get(), std::memory_order_release);
    }

    mutable std::mutex mutex_;
    const std::uint8_t* base_ = nullptr;
    std::string path_;
    std::uint64_t heap_offset_ = 0, meta_offset_ = 0, summary_offset_ = 0;
    std::size_t count_ = 0, arenas_count_ = 0;
    std::uint32_t root_sbs_ = 0, slot_count_ = 0;
    std::unique_ptr<std::atomic<arena_state*>[]> arenas_; ///< null until scanned
    std::vector<std::unique_ptr<arena_state>> arena_store_;
    std::vector<bool> flagged_; ///< summary word non-zero at rebuild (or scanned as if)
    std::array<std::vector<std::uint32_t>, class_count> partial_; ///< global pool, by class
    std::unique_ptr<local_heap[]> locals_;                        ///< by slot
    std::uint32_t cursor_ = 0;                                    ///< where find_free_run starts
    std::size_t scan_cursor_ = 0;       ///< arenas before it are scanned or unused
    std::mutex pending_mutex_;          ///< taken before the others when several are needed
    std::vector<pending_free> pending_; ///< committed frees waiting for I3, all threads
    std::atomic<std::size_t> pending_count_{0};
    std::atomic<std::uint64_t> pending_bytes_{0};
};

} // namespace tlptm::detail
