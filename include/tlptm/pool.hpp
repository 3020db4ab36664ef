// tlptm — a persistent memory pool: a file mapped at a fixed address.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include <tlptm/detail/pool_state.hpp>
#include <tlptm/detail/type_tag.hpp>
#include <tlptm/errors.hpp>
#include <tlptm/options.hpp>
#include <tlptm/recovery.hpp>
#include <tlptm/stats.hpp>

namespace tlptm {

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
        pool p;
        p.state_ = detail::create_state(path, opt);
        p.last_recovery_ = detail::run_recovery(*p.state_);
        return p;
    }

    /// Opens an existing pool and runs recovery before returning.
    /// @throw pool_error cannot open, lock (already open elsewhere) or map at its base address
    /// @throw layout_error not a tlptm pool, damaged header (the message names the field),
    ///        newer layout version
    /// @throw corruption_error a committed log entry holds an address outside the pool's heap;
    ///        nothing was written
    static pool open(const std::string& path, const pool_options& opt = {}) {
        pool p;
        p.state_ = detail::open_state(path, opt);
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
    void close() {
        if (!state_)
            return;
        if (detail::current_tx && detail::current_tx->pool == state_.get())
            throw tx_scope_error("tlptm: pool::close() called inside a transaction on the pool");
        state_->lock_exclusive(); // waits for running transactions
        state_->checkpoint(state_->admin_ctx);
        state_->unlock_exclusive();
        detail::this_thread_registry.forget(state_->id);
        state_.reset();
    }

    bool is_open() const noexcept { return state_ != nullptr; }

    /// The root object, of type T, zero-filled at creation. The first call records T's tag and
    /// size in the pool; later calls (in any run) must ask for the same type.
    /// @throw layout_error T differs from the recorded root type, or exceeds root_capacity
    template <class T> T* root() {
        static_assert(!std::is_polymorphic_v<T>,
                      "a pool root cannot have virtual functions: vtable pointers do not survive "
                      "a restart");
        static_assert(sizeof(T) < (std::uint64_t{1} << 32), "root types are limited to 4 GiB");
        detail::pool_state& st = state();
        std::lock_guard lk(st.root_mutex);
        std::uint64_t want = (std::uint64_t{detail::type_tag<T>()} << 32) | sizeof(T);
        std::uint64_t have = __atomic_load_n(&st.header->root_info, __ATOMIC_ACQUIRE);
        if (have == 0) {
            if (sizeof(T) > st.header->root_capacity)
                throw layout_error("tlptm: pool '" + st.path + "': root type of " +
                                   std::to_string(sizeof(T)) + " bytes exceeds the root capacity " +
                                   std::to_string(st.header->root_capacity) +
                                   " (raise pool_options::root_capacity at creation)");
            st.persist.persist_word(st.admin_ctx, &st.header->root_info, want);
        } else if (have != want) {
            throw layout_error("tlptm: pool '" + st.path +
                               "': root type mismatch: the pool's "
                               "root is " +
                               std::to_string(have & 0xFFFFFFFFu) + " bytes with tag " +
                               std::to_string(have >> 32) + ", requested " +
                               std::string(detail::type_name<T>()) + " (" +
                               std::to_string(sizeof(T)) + " bytes, tag " +
                               std::to_string(want >> 32) + ")");
        }
        return reinterpret_cast<T*>(st.base + st.header->root_offset);
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

    /// Internal: the shared state (for tlptm::atomic and tools).
    detail::pool_state& state() const {
        if (!state_)
            throw tx_scope_error("tlptm: the pool is not open");
        return *state_;
    }
    const std::shared_ptr<detail::pool_state>& state_ptr() const noexcept { return state_; }

private:
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
