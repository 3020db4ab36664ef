// tlptm — transactional allocation: tx.alloc / tx.free, tlptm::make / tlptm::destroy, and AALO.
//
// Blocks come from the Hoard-style heap of detail/heap.hpp. A transaction's allocation claims a
// block in the volatile heap at once and sets its bit in the persistent bitmap through the
// transaction's write-set (so the bitmap change is logged and replayed with the transaction);
// an abort gives the block back. A free clears the bit the same way; the block is handed out
// again only when I3 allows it (persisted CT >= the free's timestamp, and no transaction that
// was running at the free still runs).
//
// AALO (log modes aalo and tlptm): stores into memory allocated by the same transaction go
// straight to the pool (no write-set, no log); their lines are flushed before F1 (I4).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <tlptm/detail/heap.hpp>
#include <tlptm/detail/pool_state.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/transaction.hpp>

namespace tlptm {
namespace detail {

/// Reads a T from the pool's allocator metadata through the transaction.
template <class T> T meta_load(thread_slot& s, std::uint64_t offset) {
    T v;
    tx_read(s, &v, s.pool->base + offset, sizeof v);
    return v;
}

/// Writes allocator metadata through the transaction's write-set: logged in every mode, so it
/// reaches persistent memory only with the transaction's log entry (DESIGN §7).
template <class T> void meta_store(thread_slot& s, std::uint64_t offset, const T& v) {
    tx_write_unchecked(s, s.pool->base + offset, &v, sizeof v);
}

/// Sets or clears block b's bit in the persistent bitmap of superblock i (one byte written:
/// a compact partial record in the compressed log).
inline void set_bitmap_bit(thread_slot& s, std::uint32_t i, std::uint32_t b, bool on) {
    heap& h = s.pool->allocator;
    std::uint64_t at = h.meta_offset(i) + bitmap_offset_in_meta + b / 8;
    // The byte is read through its aligned word (the one-word fast path when it applies).
    std::uint64_t word;
    if (!tx_read_word(s, s.pool->base + at / 8 * 8, word))
        word = meta_load<std::uint64_t>(s, at / 8 * 8);
    auto byte = static_cast<std::uint8_t>(word >> (8 * (at % 8)));
    auto bit = static_cast<std::uint8_t>(1u << (b % 8));
    if (static_cast<bool>(byte & bit) == on)
        throw corruption_error("tlptm: pool '" + s.pool->path +
                               "': allocator bitmap of superblock " + std::to_string(i) +
                               " already has block " + std::to_string(b) +
                               (on ? " allocated" : " free"));
    meta_store(s, at, static_cast<std::uint8_t>(on ? byte | bit : byte & ~bit));
}

/// Gives back to the heap the frees (of any thread) that I3 allows now. `force` first
/// advances the persisted checkpoint (one fence) if that is what holds them back.
inline void reclaim(thread_slot& s, bool force) {
    pool_state& st = *s.pool;
    heap& h = st.allocator;
    std::size_t count = h.pending_count();
    if (count == 0)
        return;
    if (force || count >= 64) {
        std::uint64_t newest = h.pending_range().second;
        if (newest != 0 && st.durable_checkpoint() < newest)
            st.checkpoint(s.pctx);
    }
    // I3 with a CT known durable: a free is reused only once no crash can bring back a log
    // entry older than it (a CT stored by another thread but not yet fenced does not count),
    // and once no attempt that was running at the free still runs.
    sched(sched_point::ct_read, nullptr);
    std::uint64_t ct = st.durable_checkpoint();
    std::uint64_t oldest = st.oldest_active();
    auto ripe = h.take_ripe([&](std::uint64_t ts) { return ts <= ct && ts <= oldest; }); // I3
    for (const pending_free& p : ripe) {
        if (p.large) {
            h.release_span(p.sb);
        } else {
            h.release_block(p.sb, p.block);
            h.after_release(p.sb);
        }
    }
}

/// Marks the arenas of superblocks [first, first + n) as used in the heap summary, in the
/// transaction that takes them. A word that already reads non-zero needs no store: a
/// committed transaction with a smaller timestamp wrote it (or it was so when the pool was
/// opened), so no crash can keep this transaction and lose that word.
inline void mark_arenas_used(thread_slot& s, std::uint32_t first, std::uint32_t n) {
    pool_state& st = *s.pool;
    heap& h = st.allocator;
    for (std::uint64_t a = first / arena_superblocks; a <= (first + n - 1) / arena_superblocks;
         ++a) {
        std::uint64_t off = h.summary_offset(a);
        if (__atomic_load_n(st.word_at(off), __ATOMIC_ACQUIRE) == 0)
            meta_store(s, off, std::uint64_t{1});
    }
}

/// Memory is short and every way to find room failed once. Frees that I3 still holds back
/// may become reusable: returns true if the caller should try again. If this very attempt is
/// what holds them back (it began before they committed), it is restarted (tx_retry): a new
/// attempt does not hold them. Otherwise waits a little for the attempts that do.
inline bool wait_for_pending(thread_slot& s, unsigned& waits) {
    heap& h = s.pool->allocator;
    auto [oldest_free, newest_free] = h.pending_range();
    if (newest_free == 0)
        return false;
    std::uint64_t since = s.active_since.load(std::memory_order_relaxed);
    if (since != 0 && newest_free > since - 1 && !s.serial) {
        // Retried from the start (after a few, alone: serial mode), with a snapshot above the
        // frees: commits do not advance the clock, so raise it past them first.
        s.pool->advance_clock(newest_free);
        conflict(s);
    }
    (void)oldest_free;
    if (waits >= 200)
        return false;
    ++waits;
    std::this_thread::yield();
    reclaim(s, true);
    return true;
}

/// Allocates n bytes (16-byte aligned) in the running transaction.
/// @throw out_of_memory the heap has no room (the transaction is aborted by the caller)
inline void* tx_alloc(thread_slot& s, std::size_t n) {
    pool_state& st = *s.pool;
    heap& h = st.allocator;
    if (s.doomed)
        conflict(s);
    if (n == 0)
        n = 1;
    std::uint64_t offset, size;
    if (n <= max_small_size) {
        std::size_t cls = class_of(n);
        // Own superblocks first (the fast path).
        block_claim c = h.claim_local(s.index, cls);
        unsigned waits = 0;
        for (int round = 0; c.sb < 0 && round < 1000; ++round) {
            // Then frees I3 already allows; a superblock from the global pool or a free one;
            // then, memory being short, advance CT for the frees that wait for it; take the
            // superblocks other threads keep empty or with room for this class; wait for the
            // frees I3 holds back.
            if (round == 0 || h.pending_count() != 0) {
                reclaim(s, round != 0);
                c = h.claim_local(s.index, cls);
                if (c.sb >= 0)
                    break;
            }
            c = h.take_superblock(s.index, cls);
            if (c.sb >= 0 || round == 0)
                continue;
            if (h.steal(s.index, cls) == 0 && !wait_for_pending(s, waits))
                break;
        }
        if (c.sb < 0)
            throw out_of_memory("tlptm: pool '" + st.path + "' is full: no room for a block of " +
                                std::to_string(size_classes[cls]) + " bytes");
        auto i = static_cast<std::uint32_t>(c.sb);
        if (c.fresh) {
            st.populate_superblock(i);
            s.alloc.sb_claims.push_back(i);
            meta_store(s, h.meta_offset(i), make_descriptor(sb_kind::small, size_classes[cls]));
            mark_arenas_used(s, i, 1);
        }
        s.alloc.claims.push_back({i, c.block, false, false});
        set_bitmap_bit(s, i, c.block, true);
        size = size_classes[cls];
        offset = h.sb_offset(i) + std::uint64_t{c.block} * size;
    } else {
        auto count = static_cast<std::uint32_t>((n + superblock_bytes - 1) / superblock_bytes);
        if (std::uint64_t{count} * superblock_bytes < n || count > h.count())
            throw out_of_memory("tlptm: allocation of " + std::to_string(n) +
                                " bytes is larger than the pool's heap");
        if (h.pending_count() != 0)
            reclaim(s, false); // freed spans come back before the heap looks full
        std::int64_t sb = h.take_span(count);
        unsigned waits = 0;
        for (int round = 0; sb < 0 && round < 1000; ++round) {
            if (round == 0)
                reclaim(s, true);
            else if (h.steal(s.index, class_count) == 0 && !wait_for_pending(s, waits))
                break;
            sb = h.take_span(count);
        }
        if (sb < 0)
            throw out_of_memory("tlptm: pool '" + st.path + "' is full: no run of " +
                                std::to_string(count) + " free superblocks for " +
                                std::to_string(n) + " bytes");
        auto i = static_cast<std::uint32_t>(sb);
        s.alloc.claims.push_back({i, count, true, false});
        meta_store(s, h.meta_offset(i), make_descriptor(sb_kind::span_head, count));
        for (std::uint32_t k = 1; k < count; ++k)
            meta_store(s, h.meta_offset(i + k), make_descriptor(sb_kind::span_tail, i));
        mark_arenas_used(s, i, count);
        size = std::uint64_t{count} * superblock_bytes;
        offset = h.sb_offset(i);
    }
    s.alloc.allocated.push_back({offset, size});
    if (st.aalo())
        s.alloc.aalo.push_back({offset, size});
    return st.base + offset;
}

/// Frees the block at p in the running transaction (takes effect at commit).
/// @throw tx_scope_error p is not a block allocated from this pool's heap
inline void tx_free(thread_slot& s, void* p) {
    pool_state& st = *s.pool;
    heap& h = st.allocator;
    if (p == nullptr)
        return;
    auto bad = [&](const char* why) {
        return tx_scope_error(std::string("tlptm: free of a pointer that is not an allocated "
                                          "block of the transaction's pool: ") +
                              why);
    };
    if (!st.contains(p, 1) || !st.in_heap(st.offset_of(p), 1))
        throw bad("outside the heap");
    std::uint64_t off = st.offset_of(p);
    auto i = static_cast<std::uint32_t>((off - st.heap_begin) / superblock_bytes);
    std::uint64_t within = off - h.sb_offset(i);
    auto d = meta_load<std::uint64_t>(s, h.meta_offset(i));
    std::uint32_t block;
    std::uint64_t bytes;
    bool large;
    if (descriptor_kind(d) == sb_kind::small) {
        std::uint64_t size = descriptor_payload(d);
        if (size == 0 || within % size != 0)
            throw bad("not the start of a block");
        block = static_cast<std::uint32_t>(within / size);
        large = false;
        bytes = size;
        std::uint64_t at = h.meta_offset(i) + bitmap_offset_in_meta + block / 8;
        if (!(meta_load<std::uint8_t>(s, at) & (1u << (block % 8))))
            throw bad("the block is not allocated (double free?)");
        // The volatile state of the block's arena must exist before the free commits (a scan
        // after the commit would see the block free before I3 allows it).
        h.ensure_scanned(i, 1);
        set_bitmap_bit(s, i, block, false);
    } else if (descriptor_kind(d) == sb_kind::span_head && within == 0) {
        block = static_cast<std::uint32_t>(descriptor_payload(d));
        if (block == 0 || block > h.count() - i)
            throw corruption_error("tlptm: pool '" + st.path +
                                   "': allocator descriptor of "
                                   "superblock " +
                                   std::to_string(i) + ": span of " + std::to_string(block) +
                                   " superblocks");
        large = true;
        bytes = std::uint64_t{block} * superblock_bytes;
        h.ensure_scanned(i, block);
        for (std::uint32_t k = 0; k < block; ++k)
            meta_store(s, h.meta_offset(i + k), std::uint64_t{0});
    } else {
        throw bad("not the start of an allocated block or span");
    }
    // Allocated by this very transaction: its memory goes back when the attempt ends.
    for (auto& c : s.alloc.claims) {
        if (c.sb == i && c.large == large && (large || c.block == block) && !c.freed_in_tx) {
            c.freed_in_tx = true;
            std::uint64_t start =
                h.sb_offset(i) + (large ? 0 : std::uint64_t{block} * descriptor_payload(d));
            s.alloc.drop_block(start);
            return;
        }
    }
    s.alloc.frees.push_back({i, block, large, bytes});
}

} // namespace detail

inline void* tx::alloc(std::size_t n) {
    return detail::tx_alloc(*s_, n);
}
inline void tx::free(void* p) {
    detail::tx_free(*s_, p);
}

/// Allocates and constructs a T in the pool inside the running transaction: `T(args...)` (or
/// `T{args...}` for aggregates). In modes aalo and tlptm the block is the transaction's own
/// (AALO): T is built in place and never logged. In modes baseline and cblo it is built in
/// volatile memory and its bytes are logged. The object is freed if the transaction aborts.
/// @throw tx_scope_error outside a transaction
/// @throw out_of_memory the pool is full (the transaction aborts)
template <class T, class... Args> T* make(Args&&... args) {
    static_assert(std::is_trivially_destructible_v<T>,
                  "tlptm::make<T>: T must be trivially destructible (pool objects outlive the "
                  "process; tlptm::destroy runs no destructor)");
    static_assert(alignof(T) <= 16, "tlptm::make<T>: blocks are 16-byte aligned");
    detail::thread_slot* s = detail::current_tx;
    if (!s)
        throw tx_scope_error("tlptm::make called outside a transaction");
    void* mem = detail::tx_alloc(*s, sizeof(T));
    auto build = [&](void* at) {
        if constexpr (std::is_constructible_v<T, Args...>)
            ::new (at) T(std::forward<Args>(args)...);
        else
            ::new (at) T{std::forward<Args>(args)...};
    };
    if (s->pool->aalo()) {
        // tx_alloc listed the block as the transaction's own (alloc_tx_state::aalo): stores
        // into it go in place (tx_write), so T is built there. Its bytes are covered by the
        // commit like those of any store into the block (I4).
        build(mem);
        s->pool->persist.stored(mem, sizeof(T));
        detail::thread_counters::add(s->pctx.counters.aalo_bytes, sizeof(T));
        return static_cast<T*>(mem);
    }
    // Built in volatile memory first (on the stack when small), then stored as bytes.
    auto build_and_store = [&](void* at) {
        build(at);
        detail::tx_write(*s, mem, at, sizeof(T));
    };
    if constexpr (sizeof(T) <= 4096) {
        alignas(T) std::byte buf[sizeof(T)];
        build_and_store(buf);
    } else {
        auto buf = std::make_unique<std::byte[]>(sizeof(T) + alignof(T));
        void* aligned = buf.get();
        std::size_t space = sizeof(T) + alignof(T);
        std::align(alignof(T), sizeof(T), aligned, space);
        build_and_store(aligned);
    }
    return static_cast<T*>(mem);
}

/// Frees an object made by tlptm::make (or a block of tx.alloc) in the running transaction.
/// No destructor runs. The memory is reused only after I3 allows it.
/// @throw tx_scope_error outside a transaction, or p is not an allocated block
template <class T> void destroy(T* p) {
    static_assert(std::is_trivially_destructible_v<T>,
                  "tlptm::destroy<T>: T must be trivially destructible");
    detail::thread_slot* s = detail::current_tx;
    if (!s)
        throw tx_scope_error("tlptm::destroy called outside a transaction");
    detail::tx_free(*s, const_cast<std::remove_cv_t<T>*>(p));
}

} // namespace tlptm
