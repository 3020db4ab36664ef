// tlptm — a persistent memory pool: a file mapped at a fixed address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <tlptm/detail/pool_state.hpp>
#include <tlptm/detail/type_tag.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/options.hpp>
#include <tlptm/recovery.hpp>
#include <tlptm/stats.hpp>

namespace tlptm {

template <class T, std::size_t Align> class p; // p.hpp

namespace detail {

/// Records `name` as the pool's layout name: the name first, durable, then its check word by one
/// 8-byte store (a crash in between leaves a pool without a name, which takes the next one).
inline void record_layout(pool_state& st, const std::string& name) {
    std::lock_guard lk(st.root_mutex);
    pool_header& h = *st.header;
    char field[sizeof h.layout_name] = {};
    std::memcpy(field, name.data(), name.size());
    std::memcpy(h.layout_name, field, sizeof field);
    st.persist.stored(h.layout_name, sizeof field);
    st.persist.flush(st.admin_ctx, h.layout_name, sizeof field);
    st.persist.fence(st.admin_ctx);
    st.persist.persist_word(st.admin_ctx, &h.layout_check, layout_name_check(field));
}

/// pool_options::layout must be a name the header can hold.
inline void check_layout_option(const std::string& path, const std::string& name) {
    if (name.size() > max_layout_name)
        throw pool_error(path, "pool_options::layout is " + std::to_string(name.size()) +
                                   " bytes long; a layout name has at most " +
                                   std::to_string(max_layout_name));
    if (name.find('\0') != std::string::npos)
        throw pool_error(path, "pool_options::layout contains a NUL byte");
}

/// At open: a pool with a layout name opens only under that name (or none); a pool without one
/// takes the opener's.
inline void match_layout(pool_state& st, const std::string& want) {
    check_layout_option(st.path, want);
    if (want.empty())
        return;
    std::string have = stored_layout(*st.header);
    if (have.empty())
        record_layout(st, want);
    else if (have != want)
        throw layout_error("tlptm: pool '" + st.path + "': the pool's layout is '" + have +
                           "' but the program opens it as layout '" + want +
                           "' (pool_options::layout); a pool opens only under the layout name it "
                           "was created with, or with an empty one");
}

} // namespace detail

/// An open pool. Move-only; closing (explicitly or by the destructor) waits for running
/// transactions, persists the checkpoint and unmaps the file. Pointers into the pool stay
/// meaningful across runs because the pool is always mapped at the base address recorded in
/// its header. Thread-safe: any number of threads (up to max_threads at once) may run
/// transactions on one pool object.
class pool {
public:
    /// Creates a new pool file at `path` (it must not exist) and opens it.
    /// @throw pool_error the file exists, cannot be created, sized, locked or mapped, or the
    ///        options cannot make a pool (too small for the log rings, bad base address)
    static pool create(const std::string& path, const pool_options& opt = {}) {
        detail::check_layout_option(path, opt.layout);
        pool p;
        p.state_ = detail::create_state(path, opt);
        if (!opt.layout.empty())
            detail::record_layout(*p.state_, opt.layout);
        p.last_recovery_ = detail::run_recovery(*p.state_);
        return p;
    }

    /// Opens an existing pool and runs recovery before returning.
    /// @throw pool_error cannot open, lock (already open elsewhere) or map at its base address
    /// @throw layout_error not a tlptm pool, damaged header (the message names the field),
    ///        newer layout version, or a layout name (pool_options::layout) other than the
    ///        pool's (the message names both)
    /// @throw corruption_error a committed log entry holds an address outside the pool's heap;
    ///        nothing was written
    static pool open(const std::string& path, const pool_options& opt = {}) {
        pool p;
        p.state_ = detail::open_state(path, opt);
        detail::match_layout(*p.state_, opt.layout);
        p.last_recovery_ = detail::run_recovery(*p.state_);
        return p;
    }

    /// Opens `path` if it exists, otherwise creates it with `opt`. Same exceptions as both.
    static pool open_or_create(const std::string& path, const pool_options& opt = {}) {
        for (int attempt = 0;; ++attempt) {
            if (::access(path.c_str(), F_OK) == 0)
                return open(path, opt);
            try {
                return create(path, opt);
            } catch (const pool_error&) {
                // Another process may have created it between the check and our create.
                if (attempt > 0 || ::access(path.c_str(), F_OK) != 0)
                    throw;
            }
        }
    }

    pool() noexcept = default;
    pool(pool&& o) noexcept : state_(std::move(o.state_)), last_recovery_(o.last_recovery_) {}
    pool& operator=(pool&& o) noexcept {
        if (this != &o) {
            close_noexcept();
            state_ = std::move(o.state_);
            last_recovery_ = o.last_recovery_;
        }
        return *this;
    }
    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;
    ~pool() { close_noexcept(); }

    /// Closes the pool: waits for running transactions, persists the checkpoint (so the next
    /// open replays nothing) and unmaps. No-op on a closed pool.
    /// @throw tx_scope_error called inside a transaction on this pool
    /// @throw whatever the persistence path throws while persisting the checkpoint (an msync
    ///        failure); the pool is closed all the same and the next open recovers
    void close() {
        if (!state_)
            return;
        if (detail::current_tx && detail::current_tx->pool == state_.get())
            throw tx_scope_error("tlptm: pool::close() called inside a transaction on the pool");
        state_->lock_exclusive(); // waits for running transactions
        auto release = [&] {
            state_->unlock_exclusive();
            detail::this_thread_registry.forget(state_->id);
            state_.reset();
        };
        try {
            state_->checkpoint(state_->admin_ctx);
        } catch (...) {
            // The checkpoint's persistence failed (the pool is poisoned): the pool is closed
            // all the same, and the next open recovers from the log.
            release();
            throw;
        }
        release();
    }

    bool is_open() const noexcept { return state_ != nullptr; }

    /// The root object, of type T, zero-filled at creation, at the start of the root capacity.
    ///
    /// The pool records the root's size, not its type: any type of the recorded size opens it
    /// (the layout name, pool_options::layout, is what tells pools apart). The first call
    /// records sizeof(T). A later call (in any run) with a larger T grows the root: the new
    /// bytes are zero, and the larger size is recorded. A smaller T is refused: an older
    /// program must not run on data it does not know. Use layout_version() to tell, after a
    /// growth, whether the new fields were set up. Thread-safe.
    /// @throw layout_error T is smaller than the recorded root, or larger than the root
    ///        capacity less 64 bytes (the last line holds the layout version)
    template <class T> T* root() {
        static_assert(!std::is_polymorphic_v<T>,
                      "a pool root cannot have virtual functions: vtable pointers do not survive "
                      "a restart");
        static_assert(sizeof(T) < (std::uint64_t{1} << 32), "root types are limited to 4 GiB");
        detail::pool_state& st = state();
        grow_root(st, sizeof(T), detail::type_name<T>());
        return reinterpret_cast<T*>(st.base + st.header->root_offset);
    }

    /// Bytes of the root recorded in the pool (0 while no root was requested).
    std::size_t root_size() const {
        return __atomic_load_n(&state().header->root_info, __ATOMIC_ACQUIRE) & 0xFFFFFFFFu;
    }

    /// Bytes the root may grow to: the root capacity less the line of the layout version.
    std::size_t root_capacity() const {
        return detail::max_root_size(state().header->root_capacity);
    }

    /// The pool's layout name (pool_options::layout at creation), or "" if it has none.
    std::string layout() const {
        detail::pool_state& st = state();
        std::lock_guard lk(st.root_mutex);
        return detail::stored_layout(*st.header);
    }

    /// The program's version of its layout: a persistent field, 0 at creation, that the library
    /// never changes. Read it like any tlptm::p (outside or inside a transaction) and store it
    /// inside one, in the same transaction as the migration it records, so that both commit
    /// or neither does:
    ///
    ///     auto* r = pool.root<root_v2>();            // grown: the new fields are zero
    ///     if (pool.layout_version() < 2)
    ///         tlptm::atomic(pool, [&] { r->limit = 100; pool.layout_version() = 2; });
    ///
    /// It lives in the last 64 bytes of the root capacity (in the heap, so it is logged).
    p<std::uint64_t, alignof(std::uint64_t)>& layout_version() const {
        const detail::pool_state& st = state();
        return *reinterpret_cast<p<std::uint64_t, alignof(std::uint64_t)>*>(
            st.base + detail::layout_version_offset(*st.header));
    }

    /// Runs recovery again (idempotent). Waits for running transactions; first persists the
    /// checkpoint of everything applied, so on a healthy open pool nothing is replayed.
    /// @throw tx_scope_error called inside a transaction
    recovery_report recover() {
        detail::pool_state& st = state();
        if (detail::current_tx)
            throw tx_scope_error("tlptm: pool::recover() called inside a transaction");
        if (st.poisoned()) // recovery would write through the path that failed
            st.throw_poisoned();
        st.lock_exclusive();
        try {
            st.checkpoint(st.admin_ctx);
            last_recovery_ = detail::run_recovery(st);
        } catch (...) {
            st.unlock_exclusive();
            throw;
        }
        st.unlock_exclusive();
        return last_recovery_;
    }

    /// Makes the calling thread ready to commit without set-up on the way: takes the slot its
    /// transactions will use, starts its log ring's new generation (what its first commit in
    /// this opening would do, one fence) and writes every page of the ring once from user
    /// space, keeping the bytes, so that the thread's first pass over its ring takes no page
    /// fault per 4 KiB of log. Optional; idempotent. Call it in a thread about to be measured
    /// or to serve latency-bound requests (the workload driver and tlptm-scale call it in
    /// each worker before the clock starts). The slot stays the thread's between transactions
    /// as usual (a thread beyond the pool's thread count may lose it to another).
    /// @throw tx_scope_error called inside a transaction
    /// @throw pool_error the pool is poisoned, or the ring's header could not be persisted
    ///        (an msync failure; the pool is then poisoned)
    void prepare_thread() {
        const std::shared_ptr<detail::pool_state>& stp = state_ptr();
        detail::pool_state& st = state();
        if (detail::current_tx)
            throw tx_scope_error("tlptm: pool::prepare_thread() called inside a transaction");
        if (st.poisoned())
            st.throw_poisoned();
        detail::thread_slot* preferred = &detail::this_thread_registry.slot_for(stp);
        detail::thread_record& me = detail::this_thread_registry.record();
        detail::thread_slot& s = st.enter(preferred, me);
        if (&s != preferred)
            detail::this_thread_registry.remember(st, s);
        struct leave_guard { // as an attempt ends: the slot's last access
            detail::pool_state& st;
            detail::thread_slot& s;
            detail::thread_record& me;
            ~leave_guard() { st.leave(s, me); }
        } guard{st, s, me};
        st.prepare_ring(s);
    }

    /// The report of the recovery that open() (or the last recover()) ran.
    const recovery_report& last_recovery() const noexcept { return last_recovery_; }

    /// Counters summed over every thread that ran transactions on this pool since it was
    /// opened. Thread-safe; the figures of running threads may be a moment old.
    tlptm::stats stats() const {
        const detail::pool_state& st = state();
        tlptm::stats sum;
        for (const auto& s : st.slots)
            sum = sum + s->pctx.counters.snapshot();
        sum.heap = st.allocator.figures();
        return sum;
    }

    const std::string& path() const { return state().path; }
    void* base() const { return state().base; }
    std::size_t size() const { return state().size; }
    log_mode mode() const { return state().mode; }
    /// True if stores are made durable with CPU flushes (persistent memory or its emulation),
    /// false if with msync.
    bool uses_cpu_flush() const { return state().persist.mode() == detail::persistence::kind::cpu; }
    /// True if the file is mapped with MAP_SYNC (real persistent memory, DAX).
    bool is_pmem() const { return state().map_sync; }
    /// How this opening writes log entries (pool_options::log_write), and when that was
    /// automatic, the measurement that chose the method.
    const log_write_choice& chosen_log_write() const { return state().log_choice; }
    /// The write-back policy in force (pool_options::write_back, with automatic resolved).
    tlptm::write_back chosen_write_back() const { return state().write_back_mode; }

    /// Internal: the shared state (for tlptm::atomic and tools).
    detail::pool_state& state() const {
        if (!state_)
            throw tx_scope_error("tlptm: the pool is not open");
        return *state_;
    }
    const std::shared_ptr<detail::pool_state>& state_ptr() const noexcept { return state_; }

private:
    /// Records the root size `want` or grows the recorded one to it (see root()).
    static void grow_root(detail::pool_state& st, std::uint64_t want, std::string_view type) {
        std::lock_guard lk(st.root_mutex);
        std::uint64_t have = __atomic_load_n(&st.header->root_info, __ATOMIC_ACQUIRE) & 0xFFFFFFFFu;
        if (want == have)
            return;
        auto describe = [&] {
            std::string layout = detail::stored_layout(*st.header);
            return "tlptm: pool '" + st.path + "'" +
                   (layout.empty() ? std::string() : " (layout '" + layout + "')") +
                   ": root type " + std::string(type) + " of " + std::to_string(want) + " bytes";
        };
        std::uint64_t cap = detail::max_root_size(st.header->root_capacity);
        if (want > cap)
            throw layout_error(describe() + " exceeds the root capacity: " + std::to_string(cap) +
                               " bytes (pool_options::root_capacity " +
                               std::to_string(st.header->root_capacity) +
                               " less 64 for the layout version; raise it at creation)");
        if (want < have)
            throw layout_error(describe() + " is smaller than the pool's root of " +
                               std::to_string(have) +
                               " bytes; a root grows with new versions of a program but never "
                               "shrinks (keep the old fields, or migrate to a new pool)");
        // Growth (or the first root): the new bytes are zero before the size says they exist.
        // They are zero already unless something wrote past the root; a crash before the size
        // is recorded leaves the old size, and growing again is harmless.
        if (have != 0) {
            std::uint8_t* tail = st.base + st.header->root_offset + have;
            std::memset(tail, 0, want - have);
            st.persist.stored(tail, want - have);
            st.persist.flush(st.admin_ctx, tail, want - have);
            st.persist.fence(st.admin_ctx);
        }
        st.persist.persist_word(st.admin_ctx, &st.header->root_info, detail::make_root_info(want));
    }

    void close_noexcept() noexcept {
        try {
            close();
        } catch (...) {
            // Destructors do not throw; the log keeps everything committed, recovery finishes.
            state_.reset();
        }
    }

    std::shared_ptr<detail::pool_state> state_;
    recovery_report last_recovery_;
};

} // namespace tlptm
