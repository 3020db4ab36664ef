// tlptm — failure-atomic transactions: tlptm::atomic, tlptm::tx and the commit protocol.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <tlptm/detail/pool_state.hpp>
#include <tlptm/detail/sched.hpp>
#include <tlptm/detail/stm.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/log.hpp>
#include <tlptm/pool.hpp>

namespace tlptm {
namespace detail {

/// Byte mask of bytes [skip, skip + n) of a word (0xFF per byte).
inline std::uint64_t byte_mask(std::size_t skip, std::size_t n) noexcept {
    std::uint64_t m = n >= 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * n)) - 1;
    return m << (8 * skip);
}

/// Calls f(word, skip, take, done) for each aligned 8-byte word covering [at, at + n): the
/// word's address (or offset), the first byte of the range in it, how many bytes of the range
/// it holds, and how many bytes of the range came before it.
template <class F> inline void for_each_word(std::uint64_t at, std::size_t n, F&& f) {
    std::uint64_t w = at & ~std::uint64_t{7};
    std::size_t skip = at - w;
    for (std::size_t done = 0; done < n; w += 8, skip = 0) {
        std::size_t take = std::min<std::size_t>(8 - skip, n - done);
        f(w, skip, take, done);
        done += take;
    }
}

/// Aborts the running attempt: it will be retried by tlptm::atomic.
[[noreturn]] inline void conflict(thread_slot& s) {
    s.doomed = true;
    throw tx_retry{};
}

/// Checks that every orec read is unchanged (or locked by this transaction and unchanged
/// before it locked it). Orecs are read seq_cst (plain loads on x86): see extend_snapshot.
[[gnu::always_inline]] inline bool validate_reads(const thread_slot& s) noexcept {
    const orec_table& orecs = s.pool->orecs;
    const std::uint64_t mine = orec_table::make_lock(s.index);
    for (auto [idx, seen] : s.reads) {
        std::uint64_t now = orecs[idx].load(std::memory_order_seq_cst);
        if (now == seen)
            continue;
        if (now != mine)
            return false;
        auto it = std::find_if(s.locks.begin(), s.locks.end(),
                               [idx = idx](const orec_ref& l) { return l.index == idx; });
        if (it == s.locks.end() || it->version != seen)
            return false;
    }
    return true;
}

/// Snapshot extension, when a read found version `seen` above the snapshot: raises the clock
/// to `seen` if it is below (commits do not advance it), and to the slot's last commit
/// (finished, so raising the clock to it is as safe as to any value), then moves the snapshot
/// to the clock if every read is still valid. Raising it to `seen` only left the thread's own
/// earlier commits above the clock, and the next read of a word one of them wrote (or of a
/// word whose orec it shares) extended again: 18 600 extensions in 100 000 inserts of
/// workload a at one thread, 11 after this (two threads: 25 900 -> 20 600).
///
/// Why a snapshot s taken from the clock is safe although commits do not write it: a commit
/// locks its write-set, then reads the clock (seq_cst), and takes a ts above what it read. If
/// that ts <= s, the clock reached ts before this attempt read it, so the commit's clock read
/// came first — after its locks — and every orec this attempt reads after taking s (seq_cst
/// loads) shows the lock or the new version: the attempt never mixes the commit's old and new
/// values. Values read before s are validated here after the clock is read.
inline bool extend_snapshot(thread_slot& s, std::uint64_t seen) noexcept {
    std::uint64_t now = s.pool->advance_clock(std::max(seen, s.last_ts));
    if (!validate_reads(s))
        return false;
    s.snapshot = now;
    return true;
}

/// True if orec `idx`, read unlocked at version `seen` above the snapshot, is one that the
/// slot's last commit released at that version and nothing has written since: the words it
/// covers hold what they held when that commit unlocked, which came before this attempt read
/// the clock for its snapshot. Such a read needs no snapshot extension (which raises the
/// shared clock with a locked instruction: one per insert of the workloads, for the size
/// counter each insert bumps, and the clock's line bounced between two inserting threads).
///
/// Why it is safe. Any later writer of the orec locks it and takes a ts above the version it
/// saw, so the version still being last_ts means no commit wrote the orec's granules since the
/// slot's last commit (possibly none of them: two granules may share an orec, and the other's
/// value is older still). That commit finished (unlock, then leave) before this attempt took
/// the slot and read the clock: the reads it allows were current at the snapshot's moment, as
/// every other read the snapshot allows (a commit with ts <= snapshot took its locks before
/// the snapshot was read), and every commit that overwrites one of them locks after the read,
/// so after the snapshot's moment. The version alone would not do: a commit of another thread
/// may share the ts (disjoint commits do) and be releasing its orecs one by one as this
/// attempt reads them. Validation at commit compares versions exactly, so these reads are
/// validated like any other.
[[gnu::always_inline]] inline bool released_by_last_commit(const thread_slot& s, std::uint32_t idx,
                                                           std::uint64_t seen) noexcept {
    if (orec_table::version(seen) != s.last_ts || s.own_count == 0)
        return false;
    if (mutated(mutation::own_version_only)) // the bug the released set prevents
        return true;
    for (std::uint32_t k = 0; k < s.own_count; ++k)
        if (s.own_orecs[k] == idx)
            return true;
    return false;
}

/// Adds an orec read at version `seen` to the read-set: once for consecutive reads of the same
/// orec at the same version (the words of one object).
[[gnu::always_inline]] inline void note_read(thread_slot& s, std::uint32_t idx,
                                             std::uint64_t seen) {
    if (!s.reads.empty() && s.reads.back().index == idx && s.reads.back().version == seen)
        return;
    s.reads.emplace_back(idx, seen);
}

/// Reads `words` consecutive pool words starting at `offset`, all covered by one orec (one
/// granule), consistently with the transaction's snapshot (I6: never a value newer than the
/// snapshot, nor one being written back): one orec check and one read-set entry for them all.
inline void read_granule(thread_slot& s, std::uint64_t offset, std::size_t words,
                         std::uint8_t* out) {
    pool_state& st = *s.pool;
    const std::uint64_t* word = st.word_at(offset);
    if (s.serial || s.solo) { // nobody else runs, nobody writes: one copy
        std::memcpy(out, word, 8 * words);
        return;
    }
    auto load_words = [&] { // `out` need not be aligned
        for (std::size_t k = 0; k < words; ++k) {
            std::uint64_t v = __atomic_load_n(word + k, __ATOMIC_ACQUIRE);
            std::memcpy(out + 8 * k, &v, 8);
        }
    };
    std::uint32_t idx = st.orecs.index(offset);
    std::atomic<std::uint64_t>& orec = st.orecs[idx];
    for (unsigned spins = 0;;) {
        std::uint64_t o1 = orec.load(std::memory_order_seq_cst); // see extend_snapshot
        if (orec_table::locked(o1)) { // a commit is writing it back: wait briefly
            if (++spins > 512)
                conflict(s);
            cpu_relax();
            continue;
        }
        load_words();
        if (orec.load(std::memory_order_acquire) != o1)
            continue;
        if (orec_table::version(o1) > s.snapshot && !released_by_last_commit(s, idx, o1)) {
            if (!extend_snapshot(s, orec_table::version(o1)))
                conflict(s);
            continue;
        }
        note_read(s, idx, o1);
        return;
    }
}

/// The fast path of a transactional read of one aligned 8-byte word (a p<T> of 8 bytes): the
/// word is in the pool, outside memory the transaction allocated, not in its write-set, and
/// reads consistently at the first try (orec unlocked, version within the snapshot, unchanged
/// across the load). False: nothing happened, and tx_read handles the read (conflicts,
/// snapshot extension, own writes, AALO memory, memory outside the pool).
[[gnu::always_inline]] inline bool tx_read_word(thread_slot& s, const void* src,
                                                std::uint64_t& out) {
    const pool_state& st = *s.pool;
    const std::uint64_t off =
        static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(src) - st.base);
    if (s.doomed || off >= st.size || s.writes.may_hold(off) ||
        (!s.alloc.aalo.empty() && s.alloc.in_aalo(off, 8)))
        return false;
    if (s.solo) { // no other attempt runs (pool_state::try_solo): the word as it is
        out = __atomic_load_n(st.word_at(off), __ATOMIC_ACQUIRE);
        return true;
    }
    const std::uint32_t idx = st.orecs.index(off);
    std::atomic<std::uint64_t>& orec = st.orecs[idx];
    const std::uint64_t o1 = orec.load(std::memory_order_seq_cst); // see extend_snapshot
    const std::uint64_t v = __atomic_load_n(st.word_at(off), __ATOMIC_ACQUIRE);
    if (orec.load(std::memory_order_acquire) != o1 || orec_table::locked(o1) ||
        (orec_table::version(o1) > s.snapshot && !released_by_last_commit(s, idx, o1)))
        return false;
    note_read(s, idx, o1);
    out = v;
    return true;
}

/// Bytes covered by one orec.
inline constexpr std::uint64_t granule_bytes = std::uint64_t{1} << orec_table::granule_log2;

/// Reads n bytes at src into dst as the transaction sees them: the pool's words (validated
/// against the snapshot, one orec check per granule) merged with the transaction's own writes.
/// Memory outside the pool is read directly.
inline void tx_read(thread_slot& s, void* dst, const void* src, std::size_t n) {
    const pool_state& st = *s.pool;
    if (s.doomed)
        conflict(s); // a swallowed retry: keep unwinding
    if (!st.contains(src, n)) {
        std::memcpy(dst, src, n);
        return;
    }
    auto* out = static_cast<std::uint8_t*>(dst);
    std::uint64_t off = st.offset_of(src);
    if (!s.alloc.aalo.empty() && s.alloc.in_aalo(off, n)) { // AALO memory is private
        std::memcpy(dst, src, n);
        return;
    }
    if ((s.solo || s.serial) && s.writes.empty()) {
        // Nobody else runs an attempt, so nobody writes the pool's words (pool_state::try_solo,
        // the exclusive section): the bytes as they are, in one copy instead of word by word.
        std::memcpy(dst, src, n);
        return;
    }
    const std::uint64_t end = off + n;
    if (s.writes.empty() && off % 8 == 0 && n % 8 == 0) {
        // Whole words and no own writes (a value read before it is updated): each granule's
        // words go straight to the destination.
        for (std::uint64_t pos = off; pos < end;) {
            const std::uint64_t stop = std::min(end, (pos | (granule_bytes - 1)) + 1);
            read_granule(s, pos, static_cast<std::size_t>((stop - pos) / 8), out);
            out += stop - pos;
            pos = stop;
        }
        return;
    }
    for (std::uint64_t pos = off; pos < end;) {
        // The words of [pos, end) that lie in pos's granule.
        const std::uint64_t first = pos & ~std::uint64_t{7};
        const std::uint64_t stop = std::min(end, (pos | (granule_bytes - 1)) + 1);
        const std::size_t words = static_cast<std::size_t>((stop - first + 7) / 8);
        std::uint64_t buf[granule_bytes / 8];
        write_set::word own[granule_bytes / 8];
        bool has[granule_bytes / 8] = {};
        bool need_pool = true;
        if (!s.writes.empty()) { // own writes: whole words need no look at the pool
            need_pool = false;
            for (std::size_t k = 0; k < words; ++k) {
                has[k] = s.writes.find(first + 8 * k, own[k]);
                if (!has[k] || own[k].mask != ~std::uint64_t{0})
                    need_pool = true;
            }
        }
        if (need_pool)
            read_granule(s, first, words, reinterpret_cast<std::uint8_t*>(buf));
        for (std::size_t k = 0; k < words; ++k)
            if (has[k])
                buf[k] = (need_pool ? buf[k] & ~own[k].mask : 0) | (own[k].value & own[k].mask);
        const std::size_t take = static_cast<std::size_t>(stop - pos);
        std::memcpy(out, reinterpret_cast<const std::uint8_t*>(buf) + (pos - first), take);
        out += take;
        pos = stop;
    }
}

/// Reads n bytes of the pool outside any transaction: word by word with atomic loads (no
/// data race with concurrent commits, but no snapshot across words either).
inline void plain_read(void* dst, const void* src, std::size_t n) noexcept {
    auto a = reinterpret_cast<std::uintptr_t>(src);
    if (n == 8 && a % 8 == 0) {
        std::uint64_t v = __atomic_load_n(static_cast<const std::uint64_t*>(src), __ATOMIC_ACQUIRE);
        std::memcpy(dst, &v, 8);
        return;
    }
    auto* out = static_cast<std::uint8_t*>(dst);
    for_each_word(a, n, [&](std::uint64_t w, std::size_t skip, std::size_t take, std::size_t done) {
        std::uint64_t v =
            __atomic_load_n(reinterpret_cast<const std::uint64_t*>(w), __ATOMIC_ACQUIRE);
        std::memcpy(out + done, reinterpret_cast<const std::uint8_t*>(&v) + skip, take);
    });
}

/// Raises log_overflow at the store that makes the transaction's entry too large for its ring,
/// instead of at commit after the whole write-set was built. Called when the write-set reaches
/// s.overflow_check_at words: encodes a sorted copy (the exact size), then checks again only
/// once the words added since could have filled the rest of the ring.
/// @throw log_overflow the entry no longer fits
inline void check_entry_size(thread_slot& s) {
    auto& scratch = s.size_check_runs;
    s.writes.sorted_runs(scratch);
    std::size_t bound = s.entry.encode_words(
        compresses(s.pool->mode) ? entry_format::compressed : entry_format::baseline,
        s.writes.words(scratch), s.writes.size(), s.pool->pointers());
    if (bound > s.ring.capacity())
        throw log_overflow(bound, s.ring.capacity());
    // No word adds more than a record's largest encoding: until the room left is used up at
    // that rate, no store can make the entry too large. The checks get closer as the entry
    // fills the ring, about log(capacity) of them in all.
    std::size_t per_word = compresses(s.pool->mode) ? compressed_bound_per_record : 24;
    s.overflow_check_at =
        s.writes.size() + std::max<std::size_t>(1, (s.ring.capacity() - bound) / per_word);
}

/// Buffers a store of n bytes from src to dst in the write-set, wherever dst is in the pool
/// (the allocator's metadata included). Internal.
/// @throw log_overflow the transaction's entry no longer fits in its log ring
inline void tx_write_unchecked(thread_slot& s, void* dst, const void* src, std::size_t n) {
    pool_state& st = *s.pool;
    auto* in = static_cast<const std::uint8_t*>(src);
    std::uint64_t at = st.offset_of(dst);
    if (at % 8 == 0 && n % 8 == 0) { // whole words (the common case): no masks to build
        if (s.writes.size() + n / 8 < s.overflow_check_at) { // no size check due: all at once
            s.writes.put_words(at, in, n / 8);
            return;
        }
        for (std::size_t done = 0; done < n; done += 8) {
            std::uint64_t v;
            std::memcpy(&v, in + done, 8);
            s.writes.put(at + done, v, ~std::uint64_t{0});
            if (s.writes.size() >= s.overflow_check_at)
                check_entry_size(s);
        }
        return;
    }
    for_each_word(at, n,
                  [&](std::uint64_t w, std::size_t skip, std::size_t take, std::size_t done) {
                      std::uint64_t v = 0;
                      std::memcpy(reinterpret_cast<std::uint8_t*>(&v) + skip, in + done, take);
                      s.writes.put(w, v, byte_mask(skip, take));
                      if (s.writes.size() >= s.overflow_check_at)
                          check_entry_size(s);
                  });
}

/// The fast path of a transactional store of one aligned 8-byte word (a p<T> of 8 bytes): the
/// word is in the heap, outside memory the transaction allocated, above every word of the
/// write-set (stores in address order, or the first), and no size check is due. False:
/// nothing happened, and tx_write handles the store.
[[gnu::always_inline]] inline bool tx_write_word(thread_slot& s, void* dst, std::uint64_t v) {
    const pool_state& st = *s.pool;
    const std::uint64_t off = static_cast<std::uint64_t>(static_cast<std::uint8_t*>(dst) - st.base);
    if (s.doomed || off < st.heap_begin || off >= st.heap_end ||
        s.writes.size() + 1 >= s.overflow_check_at ||
        (!s.alloc.aalo.empty() && s.alloc.in_aalo(off, 8)))
        return false;
    return s.writes.append_word(off, v);
}

/// A store of n bytes from src to dst (in the pool's heap) by the transaction: in place if dst
/// lies in memory the transaction allocated (AALO), else buffered in the write-set.
/// @throw tx_scope_error dst is not in the pool's heap
inline void tx_write(thread_slot& s, void* dst, const void* src, std::size_t n) {
    pool_state& st = *s.pool;
    if (n == 0)
        return;
    if (s.doomed)
        conflict(s);
    if (!st.contains(dst, n) || !st.in_heap(st.offset_of(dst), n))
        throw tx_scope_error("tlptm: transactional store to an address outside the heap of "
                             "the transaction's pool");
    std::uint64_t off = st.offset_of(dst);
    if (!s.alloc.aalo.empty() && s.alloc.in_aalo(off, n)) {
        // AALO: the memory is new to this transaction, so no crash can need its old bytes
        // and no other transaction can see it before commit; it is flushed before F1 (I4).
        std::memcpy(dst, src, n);
        st.persist.stored(dst, n);
        thread_counters::add(s.pctx.counters.aalo_bytes, n);
        return;
    }
    tx_write_unchecked(s, dst, src, n);
}

/// Starts an attempt with empty sets. The snapshot is the clock as enter() read it before it
/// marked the slot (commits do not write the clock's cache line, so reading it is usually a
/// cache hit). A word written since the clock last moved has a version above the snapshot;
/// its read raises the clock and extends the snapshot (validating every earlier read), so the
/// attempt still sees only the newest committed values.
[[gnu::always_inline]] inline void begin(thread_slot& s) {
    // The sets are empty: the slot's last attempt emptied them (finish_attempt).
    // Stores only where the last attempt left something (see write_set::clear).
    if (s.doomed)
        s.doomed = false;
    if (s.committed)
        s.committed = false;
    if (s.nested_error)
        s.nested_error = nullptr;
    s.overflow_check_at = s.surely_fit_words;
    // I3: the mark (snapshot + 1, published before any read of this attempt) is a lower bound
    // of the snapshot. A reclaimer whose heavy fence came before the mark was published
    // handed out only blocks whose free had committed and was written back before the fence:
    // every read of this attempt comes after it and shows the state after the free (a word the
    // free changed has a version above a stale snapshot and is re-validated), so no pointer it
    // follows leads into the reused block. A snapshot below a free's ts only delays its reuse;
    // reclaim raises the clock past the frees it waits for (checkpoint), so new attempts start
    // above them.
    s.snapshot = s.active_since.load(std::memory_order_relaxed) - 1;
    if (s.attached) // the entry's lines, if it writes one (persistence::prefetch_log)
        s.pool->persist.prefetch_log(s.ring.data(), s.head, s.ring.capacity());
}

/// finish_attempt's part for an attempt that allocated.
inline void release_claims(thread_slot& s, heap& h) noexcept {
    for (const auto& c : s.alloc.claims) {
        if (s.committed && !c.freed_in_tx)
            continue;
        if (c.large)
            h.release_span(c.sb);
        else
            h.release_block(c.sb, c.block);
    }
    if (!s.committed)
        for (const auto& sc : s.alloc.sb_claims)
            h.untake_superblock(s.index, sc);
}

/// Ends an attempt: an aborted attempt gives its allocations back; blocks allocated and freed
/// by the same attempt go back either way. After a commit this runs behind its fence, where
/// every store waits in the store buffer (write_set::clear): a committed insert calls nothing
/// (release_claims' prologue alone was six stores) and empty sets are not reset.
[[gnu::always_inline]] inline void finish_attempt(thread_slot& s) noexcept {
    const auto& claims = s.alloc.claims;
    if ((!claims.empty() || !s.alloc.sb_claims.empty()) &&
        (!s.committed ||
         std::any_of(claims.begin(), claims.end(), [](const auto& c) { return c.freed_in_tx; })))
        release_claims(s, s.pool->allocator);
    s.alloc.clear();
    s.writes.clear();
    if (!s.reads.empty())
        s.reads.clear();
    if (!s.locks.empty())
        s.locks.clear();
}

/// The owner's side of the lock between a commit and a helper's settle(): from commit step 1
/// to the end of the write-back the slot's write-back state (dirty_lines, unapplied_ts,
/// in_flight) is the commit's. Published with a plain store (asymmetric fences); a helper that
/// set settle_wanted first is waited for.
class commit_section {
public:
    explicit commit_section(thread_slot& s) noexcept : s_(s) {
        for (;;) {
            publish(s_.committing, std::uint32_t{1});
            if (s_.settle_wanted.load(std::memory_order_seq_cst) == 0)
                return;
            s_.committing.store(0, std::memory_order_release);
            while (s_.settle_wanted.load(std::memory_order_acquire) != 0) {
                sched(sched_point::spin, &s_.settle_wanted);
                cpu_relax();
            }
        }
    }
    ~commit_section() { s_.committing.store(0, std::memory_order_release); }
    commit_section(const commit_section&) = delete;
    commit_section& operator=(const commit_section&) = delete;

private:
    thread_slot& s_;
};

#if defined(__x86_64__) && !defined(TLPTM_TSAN)
/// Whether the CPU (and the OS, which must save the YMM registers) supports AVX: read once.
inline const bool cpu_has_avx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
}();

/// Stores words [v, v + n), n >= 4, at w (8-aligned) with 32-byte stores; the last store ends
/// at w + n and may overlap the one before it (writing the same words twice).
[[gnu::target("avx")]] inline void store_words_avx(std::uint64_t* w, const std::uint64_t* v,
                                                   std::uint32_t n) noexcept {
    for (std::uint32_t k = 0;; k += 4) {
        if (k + 4 > n)
            k = n - 4; // the tail: overlaps the store before it
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + k),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + k)));
        if (k + 4 == n)
            return;
    }
}
#endif

/// Runs of at least this many words are written back with 32-byte stores when the CPU has AVX.
inline constexpr std::uint32_t wide_write_back_words = 4;

/// Writes n whole words of a run back in place: stores that a reader may see, while the
/// commit holds the orecs of the words locked.
///
/// Word by word, release stores (a reader that sees a new value also sees its orec locked,
/// I6); with AVX, a run of 4 words or more goes out in 32-byte stores instead. Those stores
/// wait after F1 like any other (a store cannot leave the store buffer before an earlier
/// SFENCE completes), and once the buffer is full the core stops until F1 is done: a 256-byte
/// value written word by word was 32 of them. Paired slices of workload c at 256 B (docs/
/// design.md, "Writing back"): about 90-115 ns a transaction faster with 32-byte stores, none
/// at 8 B (one store either way).
///
/// Why the wide stores are safe although readers load the same words with atomic loads: no
/// transactional reader uses a word read while its orec is locked or changed (it reads the orec,
/// the words, then the orec again), x86 makes stores visible in program order (so after the
/// lock and before the unlock; the compiler keeps them between the seq_cst lock and the release
/// unlock), and an aligned word does not cross a cache line, so a reader outside a transaction
/// (plain_read) sees each word old or new. To the C++ memory model it is still a race with
/// those loads, so a ThreadSanitizer build keeps the word-by-word atomic stores: TSan checks
/// the protocol with them.
inline void store_run_words(std::uint64_t* w, const std::uint64_t* v, std::uint32_t n) noexcept {
#if defined(__x86_64__) && !defined(TLPTM_TSAN)
    if (n >= wide_write_back_words && cpu_has_avx) {
        store_words_avx(w, v, n);
        return;
    }
#endif
    for (std::uint32_t k = 0; k < n; ++k)
        __atomic_store_n(w + k, v[k], __ATOMIC_RELEASE);
}

/// Step 5's stores: writes the write-set's words back in place, run by run (store_run_words;
/// word by word, each word announced, for a tracing policy: a crash image may hold any subset
/// of them).
[[gnu::always_inline]] inline void write_back_words(thread_slot& s) {
    const pool_state& st = *s.pool;
    const bool traced = st.persist.traced();
    const std::uint64_t* values = s.writes.values();
    for (const write_set::run& r : s.writes.runs()) {
        std::uint64_t* w = st.word_at(r.offset);
        const std::uint64_t* v = values + r.first;
        if (r.mask == write_set::full) {
            if (traced) {
                // Word by word, each announced once stored: the crash images of a tracing
                // policy then include every prefix of words of a line, a superset of what
                // 32-byte stores can leave.
                for (std::uint32_t k = 0; k < r.words; ++k) {
                    __atomic_store_n(w + k, v[k], __ATOMIC_RELEASE);
                    st.persist.stored(w + k, 8);
                }
            } else {
                store_run_words(w, v, r.words);
            }
        } else { // one partial word: its other bytes keep their values
            __atomic_store_n(w, (__atomic_load_n(w, __ATOMIC_RELAXED) & ~r.mask) | v[0],
                             __ATOMIC_RELEASE);
            if (traced)
                st.persist.stored(w, 8);
        }
    }
}

/// The lines that write_back_words will write, appended to `lines` (the runs are sorted, so
/// equal lines are adjacent), and the bytes it will write. Called before F1, with the rest of
/// the commit's bookkeeping (see commit: stores issued after F1 wait behind it).
///
/// `deferred`: the lines stay pending after this commit (lazy write-back, adaptive's
/// deferring commits), and a line that is pending already, found at the position
/// s.pending_line_at recorded for it, is not appended again: the batch that flushes it comes
/// after this commit's stores, so it writes them back too.
inline std::uint64_t record_write_back(thread_slot& s, append_vector<std::uint64_t>& lines,
                                       bool deferred) {
    std::uint64_t bytes = 0, last_line = ~std::uint64_t{0};
    for (const write_set::run& r : s.writes.runs()) {
        // A partial word's bytes: its mask's bytes are 0x00 or 0xFF, so the multiplication
        // sums their low bits into the top byte (std::popcount is a library call unless the
        // program is built for a CPU with POPCNT).
        if (r.mask == write_set::full) [[likely]]
            bytes += 8 * std::uint64_t{r.words};
        else
            bytes += ((r.mask & 0x0101010101010101ull) * 0x0101010101010101ull) >> 56;
        for (std::uint64_t l = r.offset / cache_line; l <= (r.end() - 1) / cache_line; ++l) {
            if (l == last_line)
                continue;
            last_line = l;
            if (deferred) {
                std::uint32_t& at = s.pending_line_at[(l * 0x9E3779B97F4A7C15u) >>
                                                      (64 - thread_slot::pending_line_hash_bits)];
                // The bug of the mutation: trusting a position that a batch has cleared since
                // (the buffer still holds the old lines past the end).
                const std::size_t valid =
                    mutated(mutation::pending_line_stale) ? lines.capacity() : lines.size();
                if (at < valid && lines[at] == l)
                    continue;
                at = static_cast<std::uint32_t>(lines.size());
            }
            lines.push_back(l);
        }
    }
    return bytes;
}

/// Releases the orecs locked by a failed commit, restoring their versions.
inline void release_locks(thread_slot& s) noexcept {
    for (auto [idx, old] : s.locks)
        s.pool->orecs[idx].store(old, std::memory_order_release);
    s.locks.clear();
}

/// Locks the orecs of every word in the write-set (sorted by offset). Throws tx_retry (after
/// releasing what it took) if another transaction holds one for too long.
[[gnu::always_inline]] inline void lock_write_set(thread_slot& s) {
    s.own_count = 0; // the versions change from here: the last commit's orecs are not its own
    orec_table& orecs = s.pool->orecs;
    const std::uint64_t mine = orec_table::make_lock(s.index);
    std::uint64_t previous = ~std::uint64_t{0};
    for (const write_set::run& r : s.writes.runs())
        for (std::uint64_t g = r.offset >> orec_table::granule_log2,
                           last = (r.end() - 1) >> orec_table::granule_log2;
             g <= last; ++g) {
            if (g == previous)
                continue; // the runs are sorted: a granule shared with the run before
            previous = g;
            const std::uint32_t idx = orecs.index(g << orec_table::granule_log2);
            std::atomic<std::uint64_t>& orec = orecs[idx];
            sched(sched_point::orec_lock, &orec);
            for (unsigned spins = 0;;) {
                std::uint64_t o = orec.load(std::memory_order_acquire);
                if (o == mine)
                    break; // two words of the set share an orec
                if (orec_table::locked(o)) {
                    if (++spins > 512) {
                        release_locks(s);
                        conflict(s);
                    }
                    cpu_relax();
                    continue;
                }
                // seq_cst: the commit's read of the clock comes after its locks (extend_snapshot).
                if (orec.compare_exchange_weak(o, mine, std::memory_order_seq_cst)) {
                    s.locks.emplace_back(idx, o);
                    break;
                }
            }
        }
}

/// Flushes every line of every block the transaction allocated, once each (I4; raw stores into
/// a new block become durable too); false if it allocated nothing. The whole blocks are
/// announced to the persistence policy first: what was stored there by any means is theirs.
/// Blocks are sorted and their line spans merged, so that a run of blocks is one flush call
/// and a line shared by two small blocks is flushed once.
inline bool flush_allocated(thread_slot& s) {
    auto& blocks = s.alloc.allocated;
    if (blocks.empty())
        return false;
    pool_state& st = *s.pool;
    auto& spans = s.alloc.spans;
    spans.clear();
    for (const auto& r : blocks) {
        st.persist.stored(st.base + r.offset, r.size);
        spans.push_back({r.offset / cache_line * cache_line,
                         (r.offset + r.size + cache_line - 1) / cache_line * cache_line});
    }
    std::sort(spans.begin(), spans.end());
    std::uint64_t lo = spans.front().first, hi = spans.front().second;
    for (const auto& [a, b] : spans) {
        if (a > hi) {
            st.persist.flush(s.pctx, st.base + lo, hi - lo);
            lo = a;
        }
        hi = std::max(hi, b);
    }
    st.persist.flush(s.pctx, st.base + lo, hi - lo);
    return true;
}

/// Whether the slot's commits write the blocks their entries cover with non-temporal stores
/// (write_covered_blocks) rather than flush them.
inline bool streams_covered_blocks(const thread_slot& s) noexcept {
    return s.pool->persist.streams_new_blocks() && !mutated(mutation::flush_new_blocks);
}

/// Makes the blocks the entry covers (s.covered, not empty) durable by the commit's F1: their
/// words are written again with non-temporal stores where the persistence path streams new
/// blocks (streams_covered_blocks: F1 then waits for no flush of this commit, and
/// adaptive write-back can defer the commit's lines), else their lines are flushed. Their bytes
/// are final: the transaction's function has returned, no logged word lies in them
/// (choose_covered_blocks), and no other thread can reach them before the commit publishes
/// them. The entry's CRC of them was taken from the cache before.
inline void write_covered_blocks(thread_slot& s) {
    pool_state& st = *s.pool;
    if (!streams_covered_blocks(s)) {
        flush_allocated(s);
        return;
    }
    for (const pool_range& r : s.covered) {
        st.persist.stored(st.base + r.offset, r.size);
        st.persist.stream_in_place(s.pctx, st.base + r.offset, r.size);
    }
}

/// Walks the lines the slot's earlier commits wrote back (s.dirty_lines, ascending) against
/// this commit's write-set (sorted by offset): calls other(l) for each line l that this commit
/// does not write again, and returns whether it writes any of them again.
template <class Other> bool split_previous_lines(const thread_slot& s, Other&& other) {
    const auto& lines = s.dirty_lines;
    const auto& runs = s.writes.runs();
    bool rewritten = false;
    std::size_t i = 0;
    for (std::size_t k = 0; k < lines.size(); ++k) {
        const std::uint64_t l = lines[k];
        while (i < runs.size() && (runs[i].end() - 1) / cache_line < l)
            ++i;
        if (i < runs.size() && runs[i].offset / cache_line <= l)
            rewritten = true;
        else
            other(l);
    }
    return rewritten;
}

/// write_back::prompt: whether this commit writes a line of the slot's previous commit
/// (dirty_lines, already flushed): such lines are hot, and this commit's own lines are then left
/// to the next commit instead of being flushed early.
inline bool rewrites_previous_lines(const thread_slot& s) {
    return split_previous_lines(s, [](std::uint64_t) {});
}

/// Eager write-back: flushes the lines the slot's earlier commits wrote back, but for those
/// that this commit writes again (flushed with its own write-back). Returns true if it left
/// such a line unflushed.
inline bool flush_previous_lines(thread_slot& s) {
    const pool_state& st = *s.pool;
    auto& lines = s.dirty_lines;
    std::size_t kept = 0; // lines to flush now, compacted in place (never past the one read)
    const bool rewritten = split_previous_lines(s, [&](std::uint64_t l) { lines[kept++] = l; });
    st.persist.flush_lines(s.pctx, st.base, lines.data(), kept);
    return rewritten;
}

/// Largest total size of the blocks a transaction allocated that its entry covers with a CRC
/// instead of a fence of their own (F0): computing the CRC of more bytes costs more than the
/// fence it saves.
inline constexpr std::uint64_t cover_blocks_max_bytes = 1024;

/// Chooses how the blocks the transaction allocated become durable before its entry can count
/// (I4): fills s.covered with the blocks its entry will cover (their contents' CRC goes into
/// the entry; recovery refuses a ring's last entry whose blocks do not match), or leaves it
/// empty, and then the commit flushes and fences the blocks (F0) before it locks anything.
/// Covering needs a pool of layout 3 or later, an AALO mode (a block's bytes are final once the
/// transaction's function has returned: no record of the entry writes into them), at most
/// cover_blocks_max_bytes, and no block that the transaction also freed (it goes back to the heap
/// at commit and another transaction may overwrite it at once). Returns the CRC of the covered
/// blocks.
inline std::uint32_t choose_covered_blocks(thread_slot& s) {
    s.covered.clear();
    const pool_state& st = *s.pool;
    const auto& blocks = s.alloc.allocated;
    if (blocks.empty() || !st.aalo() || st.header->version < 3 ||
        mutated(mutation::aalo_not_covered))
        return 0;
    std::uint64_t bytes = 0;
    for (std::size_t k = 0; k < blocks.size(); ++k) {
        bytes += blocks[k].size;
        if (s.alloc.claims[k].freed_in_tx || bytes > cover_blocks_max_bytes) {
            s.covered.clear(); // F0 for all of them: an empty set means no section
            return 0;
        }
        s.covered.push_back(pool_range{blocks[k].offset, blocks[k].size});
    }
    std::sort(s.covered.begin(), s.covered.end(),
              [](const pool_range& a, const pool_range& b) { return a.offset < b.offset; });
    // No logged word may lie in a covered block (runs and blocks are both sorted).
    const auto& runs = s.writes.runs();
    std::size_t i = 0;
    for (const pool_range& r : s.covered) {
        while (i < runs.size() && runs[i].end() <= r.offset)
            ++i;
        if (i < runs.size() && runs[i].offset < r.offset + r.size) {
            s.covered.clear();
            return 0;
        }
    }
    return covered_blocks_crc(st.base, s.covered);
}

/// write_back::adaptive: whether this commit leaves the lines it writes back, and the slot's
/// pending ones, unflushed (as lazy write-back does). It does unless its F1 waits for flushes
/// of its own anyway (the blocks its entry covers, where they are flushed rather than streamed
/// (streams_covered_blocks): the pending lines' flushes then join them under the same
/// fence), or it writes back more than half a batch
/// (`batch_lines`, pool_options::write_back_lines), which would make it pay a batch's fence of
/// its own at once. Deferred lines cost a share of a batch (a CLWB each, one fence for all),
/// far less than the wait a flushed line adds to F1 on the AMD guest: workload c was 32 ns a
/// transaction faster deferred at one line (8 B values), and 47 ns at five (256 B, table in
/// the cache) once batches no longer sorted their lines (docs/design.md, "Adaptive
/// write-back").
inline bool defers_write_back(const thread_slot& s, std::size_t batch_lines) noexcept {
    if (!s.covered.empty() && !streams_covered_blocks(s))
        return false;
    std::size_t lines = 0; // an upper bound: two runs may share a line
    for (const write_set::run& r : s.writes.runs()) {
        lines += (r.end() - 1) / cache_line - r.offset / cache_line + 1;
        if (2 * lines > batch_lines)
            return false;
    }
    return true;
}

/// Leaves a commit that failed after step 1 (an exception from the persistence path, or an
/// allocation failure): no orec stays locked and no in_flight mark leaks (DESIGN §6).
/// `committed`: F1 completed, so the entry is durable and the transaction's values are written
/// back in memory and released at version ts; otherwise nothing is written back and the orecs
/// get their old versions. Either way a failure after the first persistence operation poisons
/// the pool: whether the entry reached persistent memory is unknown, and no later transaction
/// may build on what this one did or did not write.
inline void abandon_commit(thread_slot& s, std::uint64_t ts, bool committed,
                           bool persistence_touched, bool previous_unfenced) noexcept {
    pool_state& st = *s.pool;
    if (persistence_touched && !st.poisoned())
        st.poison("a commit's persistence operation failed");
    if (committed) {
        write_back_words(s);
        for (auto [idx, old] : s.locks)
            st.orecs[idx].store(orec_table::make_version(ts), std::memory_order_release);
        s.locks.clear();
    } else {
        release_locks(s);
        s.own_count = 0; // recorded before F1: these orecs keep their old versions
    }
    // A poisoned pool never advances CT again, so clearing in_flight cannot let CT pass ts;
    // on a healthy pool (failure before any persistence) ts was never used by an entry.
    if (!previous_unfenced || st.poisoned()) {
        s.dirty_lines.clear();
        s.unapplied_ts.store(0, std::memory_order_relaxed);
        s.in_flight.store(0, std::memory_order_seq_cst);
    }
}

/// Commits the slot's transaction (DESIGN §4).
/// @throw log_overflow the entry does not fit in the ring; nothing was written
/// @throw tx_retry a conflict: the attempt is rolled back and retried
/// @throw pool_error the pool is poisoned, or timestamps are exhausted (it poisons the pool)
/// @throw whatever the persistence path throws (an msync failure): the pool is then poisoned
inline void commit(thread_slot& s) {
    pool_state& st = *s.pool;
    thread_counters& c = s.pctx.counters;
    if (s.doomed)
        conflict(s);
    if (s.nested_error) // an exception left a nested atomic: the whole transaction aborts
        std::rethrow_exception(s.nested_error);
    if (s.solo)
        thread_counters::add(c.tx_solo, 1);
    if (s.writes.empty()) { // read-only: every read was validated against the snapshot
        thread_counters::add(c.tx_read_only, 1);
        return;
    }
    s.writes.sort_for_commit();
    const std::uint32_t covered_crc =
        s.alloc.allocated.empty() ? (s.covered.clear(), 0u) : choose_covered_blocks(s);
    const bool compressed = compresses(st.mode);
    const write_set::run& first = *s.writes.runs().begin();
    std::size_t bound =
        compressed && s.writes.size() == 1 && first.mask == write_set::full && s.covered.empty()
            ? s.entry.encode_one_word(first.offset, s.writes.values()[0], st.pointers())
            : s.entry.encode_words(compressed ? entry_format::compressed : entry_format::baseline,
                                   s.writes.words(), s.writes.size(), st.pointers(), s.covered,
                                   covered_crc);
    if (bound > s.ring.capacity())
        throw log_overflow(bound, s.ring.capacity());
    // Ring space first: a wrap may wait for other transactions, so do it holding no lock and
    // no timestamp. A persistence failure there poisons the pool (pool_state::guarded).
    if (!s.attached || s.head + bound > s.ring.capacity())
        st.reserve_ring(s, bound);

    // Blocks the entry does not cover are made durable now, fenced (F0), before any orec is
    // locked: they are private to the transaction, so a large allocation's flushes do not
    // lengthen the time its orecs are held, and the locked instructions below find nothing
    // pending. A failure poisons the pool.
    if (s.covered.empty() && !s.alloc.allocated.empty() && !mutated(mutation::aalo_not_covered))
        st.guarded([&] {
            if (!mutated(mutation::no_persistence))
                flush_allocated(s);
            st.persist.fence(s.pctx); // F0
        });

    // Step 1: lock the write-set, take ts, validate the read-set. A solo attempt (no other
    // attempt runs until it ends: pool_state::try_solo) locks nothing and has nothing to
    // validate; its ts comes from the clock, which the switch to solo raised past every
    // earlier commit, and the slot's last commit.
    const bool solo = s.solo;
    if (solo)
        s.own_count = 0;
    else
        lock_write_set(s);
    note_locked_op(s.pctx);
    commit_section section(s); // a helper's settle() waits until the write-back is done
    // I2: in_flight holds CT below ts until the write-back is durable. While earlier commits'
    // write-back is still pending it already holds CT below the oldest of them.
    bool previous_unfenced = s.unapplied_ts.load(std::memory_order_relaxed) != 0;
    sched(sched_point::in_flight, &s);
    // The timestamp (GV5-style, the clock is read, not advanced): above the clock as read
    // after the locks (so above every snapshot that could have seen the old values, see
    // extend_snapshot, and above CT), above the snapshot (so above every version read), above
    // the slot's last commit (timestamps grow along a ring) and above the versions of the
    // orecs it locked (so above every earlier writer of the same words: recovery orders
    // writers of a word by ts). Two commits of disjoint data may share a ts.
    // in_flight first holds the lower bound max(snapshot, last_ts) + 1 <= ts; seq_cst orders
    // it before the clock read (a checkpoint reads the clock, then in_flight). While earlier
    // commits' write-back is pending it already holds an older bound.
    const bool late = mutated(mutation::late_in_flight); // the bug this order prevents
    std::uint64_t ts = std::max(s.snapshot, s.last_ts);
    if (!previous_unfenced && !late)
        publish(s.in_flight, ts + 1); // before the clock read (safe_checkpoint's heavy fence)
    sched(sched_point::clock, &st.clock);
    ts = std::max(ts, st.clock.load(std::memory_order_seq_cst));
    for (auto [idx, old] : s.locks)
        ts = std::max(ts, orec_table::version(old));
    ++ts;
    if (!previous_unfenced && !late)
        s.in_flight.store(ts, std::memory_order_release);
    const bool prompt = st.write_back_mode == write_back::prompt;
    const bool lazy =
        st.write_back_mode == write_back::lazy ||
        (st.write_back_mode == write_back::adaptive && defers_write_back(s, st.write_back_lines));
    bool touched = false, committed = false, counted = false;
    try {
        if (ts > max_commit_ts) {
            st.poison("commit timestamps are exhausted");
            throw pool_error(st.path, "commit timestamps are exhausted (the largest is 2^56 - "
                                      "2^32 - 1); the pool cannot take more transactions");
        }
        // Always: commits do not advance the clock, so an unchanged clock does not mean that
        // nothing committed since the snapshot.
        if (!solo && !validate_reads(s)) {
            release_locks(s);
            if (!previous_unfenced)
                s.in_flight.store(0, std::memory_order_release);
            conflict(s);
        }
        // A transaction that could have read what a failed commit left (or did not leave)
        // must not become durable: check after validation, before anything persists.
        if (st.poisoned())
            st.throw_poisoned();

        touched = true;
        // Step 3: the entry goes out with non-temporal stores, as whole aligned words (a
        // non-temporal copy's unaligned edges would be stores and flushes, which take longer to
        // persist: docs/design.md, "Writing the log entry") or as whole lines (no partial
        // line at all, log_write::non_temporal_lines), or with stores and CLWB. The bytes
        // before the entry in its first word or line are the ring's own, from tail_line.
        std::span<const std::uint8_t> entry = s.entry.seal(ts, s.last_ts, s.gen);
        const bool lines = st.persist.whole_lines(entry.size());
        std::span<const std::uint8_t> out;
        if (lines) {
            static constexpr std::array<std::uint8_t, 64> zeros{};
            out = s.entry.widen_to_lines(
                s.head, mutated(mutation::tail_line_not_kept) ? zeros.data() : s.tail_line.data());
        } else {
            out =
                s.entry.widen_to_words(s.head, load_u64(s.tail_line.data() + s.head % 64 / 8 * 8));
        }
        // out starts with the bytes before the entry in its first word or line.
        const auto lead = static_cast<std::size_t>(entry.data() - out.data());
        if (!mutated(mutation::no_persistence))
            st.persist.stream(s.pctx, s.ring.data() + s.head - lead, out.data(), out.size());
        advance_tail_line(s.tail_line.data(), s.head, entry);
        s.head += entry.size();
        s.last_ts = ts;
        thread_counters::add(c.log_bytes, entry.size());

        // The data flushes that F1 completes with the entry. They are issued after the entry's
        // stores, not before: both only have to be done by F1, and the commit's bookkeeping
        // below then follows them (docs/design.md, "Commit path in the code").
        //
        // Step 2 (I4): the lines of the blocks the transaction allocated (AALO stores, raw
        // stores) are durable before the entry counts. The entry's non-temporal stores may
        // reach persistent memory before F1, and a complete entry validates whether or not F1
        // ran, so without more a crash could replay a transaction whose new objects never
        // reached persistent memory (found by the crash-image sweep, persistency_test). Either
        // the entry covers the blocks (their CRC is in it: recovery refuses the entry if they
        // do not match, and F1 completes their write-back with the entry: streamed or flushed
        // here, write_covered_blocks), or the flushes got a fence of their own (F0) before
        // locking (choose_covered_blocks).
        //
        // Eager: the previous commit's write-back lines are flushed here, after this commit's
        // locked instructions, so that this commit's fence completes them together with the
        // entry (one persistence round trip per transaction; a locked instruction between a
        // flush and its fence would wait for it like a fence).
        // A line that this commit writes back again is not flushed now but with this commit's
        // write-back (it stays dirty, and reading or writing a line right after its CLWB waits
        // for the write-back to finish: ~160 ns on the reference machine, for the hot lines of
        // an insert). The earlier commits that wrote it stay pending with it: in_flight keeps
        // their bound below.
        //
        // Prompt: if the previous commit flushed its lines already, on this thread, they are
        // only looked at (this commit's F1 completes those flushes; one of another thread,
        // the slot taken over since, it does not: then as eager); this commit flushes its own
        // right after writing them back, unless it writes one of the previous commit's lines
        // (hot lines: then as eager).
        bool carried = false, rewritten = false, pending_cleared = false;
        if (!lazy && previous_unfenced && !mutated(mutation::no_write_back_flush) &&
            !mutated(mutation::no_persistence)) {
            if (prompt && s.lines_flushed_by != 0 &&
                (s.lines_flushed_by == s.holder.load(std::memory_order_relaxed) ||
                 mutated(mutation::prompt_flushed_by_any))) {
                rewritten = rewrites_previous_lines(s);
            } else {
                // Adaptive: lines left by several commits are in commit order, not ascending,
                // and a line can appear twice (record_write_back drops a repeat only where it
                // finds the line at the position it recorded), which does no harm.
                auto& d = s.dirty_lines;
                if (st.write_back_mode == write_back::adaptive &&
                    !std::is_sorted(d.begin(), d.end()))
                    std::sort(d.begin(), d.end());
                rewritten = carried = flush_previous_lines(s);
            }
        }
        const bool flush_after_write_back = prompt && !rewritten;
        if (!s.covered.empty() && !mutated(mutation::no_persistence))
            write_covered_blocks(s);
        else if (mutated(mutation::aalo_not_covered)) // flushed, but neither F0 nor a CRC
            flush_allocated(s);

        // Bookkeeping before F1 too. A store issued after the SFENCE cannot leave the store
        // buffer until the fence completes; once the buffer is full the core stops, and the
        // next transaction's first loads wait behind the persist instead of overlapping it.
        // So what needs nothing from F1 is stored now: the lines the write-back will dirty
        // (eager: every earlier line was flushed just above, for F1 to complete, or is written
        // again by this commit, carried), the byte counter, and the orecs the next attempt may
        // read as its own (released_by_last_commit: only this slot reads them, in its next
        // attempt). With the flushes issued last, paired slices on the Intel guest measured
        // inserts (a) 44 ns and b 27 ns a transaction faster, c at 256 B 35 ns, c at 8 B the same.
        if ((!lazy || mutated(mutation::deferred_lines_dropped)) && previous_unfenced)
            s.dirty_lines.clear();
        thread_counters::add(c.data_bytes_written, record_write_back(s, s.dirty_lines, lazy));
        if (s.locks.size() <= s.own_orecs.size()) {
            std::uint32_t n = 0;
            for (auto [idx, old] : s.locks)
                s.own_orecs[n++] = idx;
            s.own_count = n;
        }
        // The slot's newest commit, for checkpoints (newest_commit: they raise the clock past
        // it, which is safe before F1 too: in_flight holds CT below ts), and the count, taken
        // back if F1 fails (abandon below).
        s.committed_ts.store(ts, std::memory_order_relaxed);
        thread_counters::add(c.tx_committed, 1);
        counted = true;
        // Step 4, F1: the entry is durable; the transaction is committed. In eager mode the
        // fence also completes the previous commit's write-back flushes (its deferred F2).
        if (!mutated(mutation::no_commit_fence))
            st.persist.fence(s.pctx);
        committed = true;
        if (late && !previous_unfenced) {
            sched(sched_point::in_flight, &s);
            s.in_flight.store(ts, std::memory_order_release);
        }
        if (!lazy && previous_unfenced) {
            // Every earlier line is durable now or rewritten below (carried): the lines
            // recorded before F1 are this commit's.
            if (!carried || mutated(mutation::carried_as_flushed)) {
                // unapplied_ts stays set: this commit's own lines are pending (below), and a
                // checkpoint that comes now settles the slot. The bug of the mutation is to
                // count a carried line durable: nothing pending for a moment, and in_flight
                // raised past the commit that wrote it.
                if (carried) {
                    s.unapplied_ts.store(0, std::memory_order_relaxed);
                    pending_cleared = true;
                }
                sched(sched_point::in_flight, &s);
                s.in_flight.store(ts, std::memory_order_release); // only raises the bound
            }
        }

        // Step 5: write back in place, each word announced to the persistence policy (a crash
        // image may hold any subset of them), then unlock.
        write_back_words(s);
        // Prompt: the lines just written go out now; the next fence completes them.
        if (flush_after_write_back && !mutated(mutation::prompt_lines_unflushed) &&
            !mutated(mutation::no_persistence))
            st.persist.flush_lines(s.pctx, st.base, s.dirty_lines.data(), s.dirty_lines.size());
        if (prompt) // eager and lazy never read it: no store after F1 for them
            s.lines_flushed_by =
                flush_after_write_back ? s.holder.load(std::memory_order_relaxed) : 0;
        // Step 6: no fence yet. Eager: the slot's next commit flushes the lines before its F1
        // (above); prompt: they were flushed just above; a thread that needs CT to pass this
        // commit sooner settles the slot. Lazy: the batch below flushes them.
        sched(sched_point::orec_unlock, &s);
        // The next attempt reads these orecs as its own (released_by_last_commit; recorded
        // before F1), if they fit.
        for (auto [idx, old] : s.locks)
            st.orecs[idx].store(orec_table::make_version(ts), std::memory_order_release);
        s.locks.clear();
        // Write-back pending (from here until the slot's next F1 or a settle). Only whether it
        // is 0 matters, and nobody but this commit changes it while the commit section is held:
        // if an earlier commit's write-back is still pending it is set already.
        if (!previous_unfenced || pending_cleared)
            s.unapplied_ts.store(ts, std::memory_order_release);
        if (!s.alloc.claims.empty() || !s.alloc.sb_claims.empty())
            s.committed = true; // only finish_attempt's release_claims reads it

        // Lazy: the high watermark, in distinct lines (record_write_back appends a pending
        // line once, so a hot line counts once); the batch fences once for all of them and
        // lets CT pass this slot's commits.
        if (lazy && s.dirty_lines.size() >= st.write_back_lines)
            st.settle_locked(s, s.pctx);
        // Freed blocks wait for I3 before anyone gets them again: until CT passes ts and every
        // attempt with a snapshot below ts has ended. The clock is raised to ts, so that the
        // attempts that begin from now on do not hold them back.
        if (!s.alloc.frees.empty()) {
            st.allocator.add_pending(s.alloc.frees, ts);
            st.advance_clock(ts);
        }
    } catch (const tx_retry&) {
        throw; // validation failed: locks and in_flight were released above
    } catch (...) {
        if (counted && !committed)
            thread_counters::add(c.tx_committed, ~std::uint64_t{0}); // counted before F1: -1
        if (!mutated(mutation::no_commit_cleanup)) // the bug this prevents, for the harness
            abandon_commit(s, ts, committed, touched, previous_unfenced);
        throw;
    }
}

} // namespace detail

/// The explicit handle of the running transaction (the lambda form `[&](tlptm::tx& tx)`).
/// Valid only inside the tlptm::atomic call that made it; not shareable between threads.
class tx {
public:
    explicit tx(detail::thread_slot& s) noexcept : s_(&s) {}

    /// Reads a T at `addr` as this transaction sees it (its own writes included).
    template <class T> T load(const T* addr) const {
        static_assert(std::is_trivially_copyable_v<T>, "tx::load needs a trivially copyable T");
        std::array<std::byte, sizeof(T)> buf;
        detail::tx_read(*s_, buf.data(), addr, sizeof(T));
        return std::bit_cast<T>(buf);
    }

    /// Stores `value` at `addr` (in the pool's heap); visible to others at commit.
    /// @throw tx_scope_error addr is not in the pool's heap
    template <class T> void store(T* addr, const T& value) {
        static_assert(std::is_trivially_copyable_v<T>, "tx::store needs a trivially copyable T");
        detail::tx_write(*s_, addr, &value, sizeof(T));
    }

    /// Copies n bytes from src (pool or volatile memory, read transactionally) to dst (in the
    /// pool's heap). Overlapping ranges behave like memmove.
    /// @throw tx_scope_error dst is not in the pool's heap
    void memcpy(void* dst, const void* src, std::size_t n) {
        std::vector<std::uint8_t>& buf = s_->copy_buffer;
        buf.resize(n);
        detail::tx_read(*s_, buf.data(), src, n);
        detail::tx_write(*s_, dst, buf.data(), n);
    }

    /// Reads n bytes at src into dst (volatile memory) as this transaction sees them.
    void read(void* dst, const void* src, std::size_t n) const {
        detail::tx_read(*s_, dst, src, n);
    }

    /// Stores n bytes from src (volatile memory) at dst (in the pool's heap).
    void write(void* dst, const void* src, std::size_t n) { detail::tx_write(*s_, dst, src, n); }

    /// Allocates n bytes (16-byte aligned) in the pool; freed again if the transaction aborts.
    /// The contents are unspecified. In modes aalo and tlptm, stores into the block are not
    /// logged. Defined in alloc.hpp.
    /// @throw out_of_memory the pool is full
    void* alloc(std::size_t n);

    /// Frees a block of alloc (or an object of tlptm::make) at commit. Defined in alloc.hpp.
    /// @throw tx_scope_error p is not an allocated block of this pool
    void free(void* p);

    /// The slot (thread) this transaction runs in. Internal.
    detail::thread_slot& slot() const noexcept { return *s_; }

private:
    // Only the slot: a handle made for every attempt costs no more than a pointer (a buffer
    // member was three stores behind the previous commit's fence, see finish_attempt).
    detail::thread_slot* s_;
};

namespace detail {

/// Makes the compiler store `v` to memory here, before the commit. Otherwise it may build the
/// result after the commit with stores that a load of another size reads back at once (a
/// std::optional: a one-byte flag read as part of an 8-byte word). Such a load waits until the
/// store reaches the cache, and every store after the commit's fence waits for the fence:
/// the whole persistence round trip would show there instead of overlapping with the caller's
/// next work (measured: workload c took twice as long).
template <class T> inline void store_before_commit(T& v) noexcept {
#if defined(__GNUC__)
    asm volatile("" : : "m"(v));
#else
    (void)v;
#endif
}

template <class F> decltype(auto) invoke_tx(F& f, tx& t) {
    if constexpr (std::is_invocable_v<F&, tx&>)
        return std::invoke(f, t);
    else
        return std::invoke(f);
}

template <class F>
using atomic_result_t =
    typename std::conditional_t<std::is_invocable_v<F&, tx&>, std::invoke_result<F&, tx&>,
                                std::invoke_result<F&>>::type;

/// A result that the x86-64 ABI returns through memory (larger than two registers), and whose
/// destruction does nothing. Returned from a local after the commit, its bytes were copied
/// into the caller's object behind the commit's fence (a `rep movsq` there: a 256-byte value
/// in an optional), and the caller's first look at it waited for the whole persist, since a
/// load cannot take its bytes from such stores while they wait in the store buffer (workload
/// c with 256-byte values: most of the driver loop's samples on that load).
template <class R>
inline constexpr bool returned_in_memory =
    std::conjunction_v<std::bool_constant<(sizeof(R) > 16)>, std::is_trivially_copyable<R>,
                       std::is_trivially_destructible<R>>;

/// Runs the transaction's function and commits: the result is built directly in the caller's
/// object (a prvalue returned on), and the commit runs after it, from a destructor, so that
/// its stores come before the fence. When the function throws, nothing is committed; when the
/// commit throws (a conflict, an error), the result is dropped, which a trivially
/// destructible R allows (returned_in_memory), and the caller retries or propagates.
template <class F> atomic_result_t<F> invoke_and_commit(F& f, tx& t, thread_slot& s) {
    struct commit_after_result {
        thread_slot& s;
        const int unwinding = std::uncaught_exceptions();
        ~commit_after_result() noexcept(false) {
            if (std::uncaught_exceptions() == unwinding) // f returned: its result is in place
                commit(s);
        }
    } committer{s};
    return invoke_tx(f, t);
}

} // namespace detail

/// Consecutive aborts after which a transaction runs alone (serial mode): it cannot conflict,
/// so no transaction starves and the system cannot livelock.
inline constexpr unsigned serial_after_aborts = 16;

/// Runs `f` as one failure-atomic, isolated transaction on `p` and returns what `f` returns.
///
/// `f` is `[&] { ... }` or `[&](tlptm::tx& tx) { ... }`. After a crash at any instant, either
/// all of the transaction's stores are in the pool or none is; once `atomic` returns, they are
/// durable. Transactions of many threads run concurrently; on a conflict `f` is rolled back
/// and run again (so it must not have side effects outside the pool that cannot be repeated),
/// and after repeated conflicts it runs alone. `f` never sees an inconsistent snapshot.
/// An exception thrown by `f` aborts the transaction (none of its stores reach the pool) and
/// propagates. A call inside a running transaction on the same pool joins it (nesting
/// flattens). Do not swallow exceptions of unknown type (`catch (...)` without rethrow)
/// inside `f`: the STM's retry signal is one; it is detected and the attempt retried anyway.
/// @throw log_overflow the transaction's log entry does not fit in the thread's log ring
/// @throw tx_scope_error nested call on a different pool, or the pool is closed
/// @throw tlptm::error more threads than the pool's max_threads run transactions at once
/// @throw whatever `f` throws
template <class F> detail::atomic_result_t<F> atomic(pool& p, F&& f) {
    using R = detail::atomic_result_t<F>;
    const auto& stp = p.state_ptr();
    if (!stp)
        throw tx_scope_error("tlptm::atomic: the pool is not open");
    if (detail::thread_slot* cur = detail::current_tx) {
        if (cur->pool != stp.get())
            throw tx_scope_error("tlptm::atomic: nested transaction on a different pool");
        tx t(*cur);
        try {
            return detail::invoke_tx(f, t);
        } catch (const detail::tx_retry&) {
            throw; // a conflict: the outermost level retries the whole transaction
        } catch (...) {
            // As in PMDK: an exception that leaves a nested atomic aborts the whole
            // transaction, even if an outer level catches it. The outermost atomic rethrows it
            // instead of committing (the first one, if several nested calls failed).
            if (!cur->nested_error)
                cur->nested_error = std::current_exception();
            throw;
        }
    }
    detail::pool_state& st = *stp;
    if (st.poisoned())
        st.throw_poisoned();
    // The attempt takes a slot (its log ring and descriptor) for as long as it runs; the
    // thread's last slot is tried first. Between attempts the slot is free for other threads.
    detail::thread_slot* preferred = &detail::this_thread_registry.slot_for(stp);
    struct attempt_scope { // takes a slot and gives it back however the attempt ends
        detail::pool_state& st;
        detail::thread_slot& s;
        const bool serial;
        attempt_scope(detail::pool_state& st_, detail::thread_slot* preferred, bool serial_)
            : st(st_), s(take(st_, preferred, serial_)), serial(serial_) {
            if (serial) // s.serial is false between attempts
                s.serial = true;
            if (&s != preferred)
                detail::this_thread_registry.remember(st, s);
            detail::current_tx = &s;
            detail::begin(s);
        }
        static detail::thread_slot& take(detail::pool_state& st, detail::thread_slot* preferred,
                                         bool serial) {
            detail::thread_record& me = detail::this_thread_registry.record();
            if (!serial)
                return st.enter(preferred, me);
            st.lock_exclusive();
            return st.enter_serial(preferred, me);
        }
        ~attempt_scope() {
            detail::current_tx = nullptr;
            detail::finish_attempt(s);
            if (serial)
                s.serial = false;
            st.leave(s, detail::this_thread_registry.record()); // the last access to the slot
            if (serial)
                st.unlock_exclusive();
        }
    };
    for (unsigned aborts = 0;; ++aborts) {
        {
            attempt_scope scope(st, preferred, aborts >= serial_after_aborts);
            detail::thread_slot& s = scope.s;
            preferred = &s;
            tx t(s);
            try {
                if constexpr (std::is_void_v<R>) {
                    detail::invoke_tx(f, t);
                    detail::commit(s);
                    return;
                } else if constexpr (detail::returned_in_memory<R>) {
                    return detail::invoke_and_commit(f, t, s); // built in place, then committed
                } else {
                    R r = detail::invoke_tx(f, t);
                    detail::store_before_commit(r);
                    detail::commit(s);
                    return r;
                }
            } catch (const detail::tx_retry&) {
                // Conflict: roll back (the scope drops the write-set) and retry below.
            } catch (...) {
                if (!s.doomed) { // the user's exception: abort and propagate
                    detail::thread_counters::add(s.pctx.counters.tx_aborted, 1);
                    throw;
                }
                // An exception that followed a swallowed retry signal: retry.
            }
            detail::thread_counters::add(s.pctx.counters.tx_aborted, 1);
        }
        if (st.poisoned())
            st.throw_poisoned();
        detail::backoff(detail::backoff_rng, aborts + 1);
    }
}

/// The running transaction of the calling thread.
/// @throw tx_scope_error no transaction is running
inline tx current_tx() {
    if (!detail::current_tx)
        throw tx_scope_error("tlptm: no transaction is running");
    return tx(*detail::current_tx);
}

} // namespace tlptm

// tx::alloc and tx::free live with the allocator.
#include <tlptm/alloc.hpp>
