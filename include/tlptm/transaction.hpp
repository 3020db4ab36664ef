// tlptm — failure-atomic transactions: tlptm::atomic, tlptm::tx and the commit protocol.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <vector>

#include <tlptm/detail/pool_state.hpp>
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

/// Reads n bytes at src into dst as the transaction sees them: the pool's words merged with the
/// transaction's own writes. Memory outside the pool is read directly.
inline void tx_read(const thread_slot& s, void* dst, const void* src, std::size_t n) {
    const pool_state& st = *s.pool;
    if (!st.contains(src, n)) {
        std::memcpy(dst, src, n);
        return;
    }
    auto* out = static_cast<std::uint8_t*>(dst);
    std::uint64_t off = st.offset_of(src);
    std::uint64_t w = off & ~std::uint64_t{7};
    std::size_t skip = off - w;
    while (n > 0) {
        std::uint64_t v = __atomic_load_n(st.word_at(w), __ATOMIC_RELAXED);
        if (const auto* e = s.writes.find(w))
            v = (v & ~e->mask) | (e->value & e->mask);
        std::size_t take = std::min<std::size_t>(8 - skip, n);
        std::memcpy(out, reinterpret_cast<const std::uint8_t*>(&v) + skip, take);
        out += take;
        n -= take;
        skip = 0;
        w += 8;
    }
}

/// Buffers a store of n bytes from src to dst (in the pool's heap) in the write-set.
/// @throw tx_scope_error dst is not in the pool's heap
inline void tx_write(thread_slot& s, void* dst, const void* src, std::size_t n) {
    pool_state& st = *s.pool;
    if (n == 0)
        return;
    if (!st.contains(dst, n) || !st.in_heap(st.offset_of(dst), n))
        throw tx_scope_error("tlptm: transactional store to an address outside the heap of "
                             "the transaction's pool");
    auto* in = static_cast<const std::uint8_t*>(src);
    std::uint64_t off = st.offset_of(dst);
    std::uint64_t w = off & ~std::uint64_t{7};
    std::size_t skip = off - w;
    while (n > 0) {
        std::size_t take = std::min<std::size_t>(8 - skip, n);
        std::uint64_t v = 0;
        std::memcpy(reinterpret_cast<std::uint8_t*>(&v) + skip, in, take);
        s.writes.put(w, v, byte_mask(skip, take));
        in += take;
        n -= take;
        skip = 0;
        w += 8;
    }
}

/// Commits the slot's transaction (DESIGN §4). Called with the pool's tx_mutex held.
/// @throw log_overflow the entry does not fit in the ring; nothing was written
inline void commit(thread_slot& s) {
    pool_state& st = *s.pool;
    thread_counters& c = s.pctx.counters;
    if (s.writes.empty()) { // read-only: no log, no flush, no fence
        thread_counters::add(c.tx_read_only, 1);
        return;
    }
    s.writes.sort_for_commit();
    const auto& recs = s.writes.entries();
    bool compress = st.mode == log_mode::cblo || st.mode == log_mode::tlptm;
    std::size_t bound = s.entry.encode(compress ? entry_format::compressed : entry_format::baseline,
                                       recs, st.pointers());
    if (bound > s.ring.capacity())
        throw log_overflow(bound, s.ring.capacity());
    st.reserve_ring(s, bound);
    std::uint64_t ts = ++st.clock;
    std::span<const std::uint8_t> entry = s.entry.seal(ts, s.last_ts, s.gen);

    // Step 3: the entry goes out with non-temporal stores.
    st.persist.stream(s.pctx, s.ring.data() + s.head, entry.data(), entry.size());
    s.head += entry.size();
    s.last_ts = ts;
    thread_counters::add(c.log_bytes, entry.size());
    // Step 4, F1: the entry is durable; the transaction is committed.
    st.persist.fence(s.pctx);

    // Step 5: write back in place, then flush each line once (after its last store).
    std::uint64_t data_bytes = 0;
    for (const log_record& r : recs) {
        std::uint64_t* w = st.word_at(r.offset);
        std::uint64_t v = r.mask == ~std::uint64_t{0}
                              ? r.value
                              : (__atomic_load_n(w, __ATOMIC_RELAXED) & ~r.mask) | r.value;
        __atomic_store_n(w, v, __ATOMIC_RELAXED);
        data_bytes += static_cast<std::uint64_t>(std::popcount(r.mask)) / 8;
    }
    std::uint64_t line = ~std::uint64_t{0};
    for (const log_record& r : recs) { // sorted by offset: equal lines are adjacent
        if (r.offset / cache_line == line)
            continue;
        line = r.offset / cache_line;
        std::uint8_t* p = st.base + line * cache_line;
        st.persist.stored(p, cache_line);
        st.persist.flush(s.pctx, p, cache_line);
    }
    thread_counters::add(c.data_bytes_written, data_bytes);
    // Step 6, F2: the entry is applied.
    st.persist.fence(s.pctx);
    st.applied_ts = ts;
    thread_counters::add(c.tx_committed, 1);
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
        buf_.resize(n);
        detail::tx_read(*s_, buf_.data(), src, n);
        detail::tx_write(*s_, dst, buf_.data(), n);
    }

    /// Reads n bytes at src into dst (volatile memory) as this transaction sees them.
    void read(void* dst, const void* src, std::size_t n) const {
        detail::tx_read(*s_, dst, src, n);
    }

    /// Stores n bytes from src (volatile memory) at dst (in the pool's heap).
    void write(void* dst, const void* src, std::size_t n) { detail::tx_write(*s_, dst, src, n); }

    /// The slot (thread) this transaction runs in. Internal.
    detail::thread_slot& slot() const noexcept { return *s_; }

private:
    detail::thread_slot* s_;
    std::vector<std::uint8_t> buf_;
};

namespace detail {

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

} // namespace detail

/// Runs `f` as one failure-atomic, isolated transaction on `p` and returns what `f` returns.
///
/// `f` is `[&] { ... }` or `[&](tlptm::tx& tx) { ... }`. After a crash at any instant, either
/// all of the transaction's stores are in the pool or none is; once `atomic` returns, they are
/// durable. An exception thrown by `f` aborts the transaction (none of its stores reach the
/// pool) and propagates. A call inside a running transaction on the same pool joins it
/// (nesting flattens). Thread-safe; transactions of one pool are serialised in this version.
/// @throw log_overflow the transaction's log entry does not fit in the thread's log ring
/// @throw tx_scope_error nested call on a different pool, or the pool is closed
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
        return detail::invoke_tx(f, t);
    }
    detail::pool_state& st = *stp;
    detail::thread_slot& s = detail::this_thread_registry.slot_for(stp);
    std::lock_guard lk(st.tx_mutex);
    detail::current_tx = &s;
    struct leave {
        detail::thread_slot& s;
        ~leave() {
            detail::current_tx = nullptr;
            s.writes.clear();
        }
    } guard{s};
    tx t(s);
    try {
        if constexpr (std::is_void_v<R>) {
            detail::invoke_tx(f, t);
            detail::commit(s);
        } else {
            R r = detail::invoke_tx(f, t);
            detail::commit(s);
            return r;
        }
    } catch (...) {
        detail::thread_counters::add(s.pctx.counters.tx_aborted, 1);
        throw;
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
