// Crash-consistency harness: the tracing persistence policy (DESIGN.md §8).
//
// A tlptm::persist_policy that records, in call order, every persistence operation the library
// makes on a pool: ordinary stores announced with stored(), non-temporal stores (stream()),
// flushes and fences, and the scenario's transaction boundaries. The trace is later replayed by
// crash_images.hpp to produce every pool image that x86 persistency allows at a crash.
//
// The tracer also keeps the "volatile view": the pool as the announced stores say it must look.
// At every fence (strict mode) or when asked (check_now), it compares the view with the real
// mapped memory: a byte that differs was written without going through the policy, so no crash
// image can contain it and the library's persistence path is incomplete. Such bytes are
// reported with their pool offset and area, then taken into the view so that each is reported
// once.
//
// Thread-safe: one mutex serialises every call, so the trace is one interleaving of the threads'
// calls. Each event carries the index of the calling thread (fences order that thread's own
// flushes and streams only). Every call is a scheduling point of scheduler.hpp (a no-op
// outside a scheduled run): the scheduler may let another thread run before it is recorded.
//
// Fault injection for the scheduled sweep: the n-th fence or flush throws, as a failed msync
// does; it is recorded as a `fault` event, not as a fence, since nothing was made durable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "pool_file.hpp"
#include "scheduler.hpp"

namespace tlptm_harness {

/// What the library told the persistence policy, in the order the calls arrived.
enum class event_kind : std::uint8_t {
    store,    ///< stored(): ordinary stores to [offset, offset + size) were made
    stream,   ///< stream(): non-temporal stores of `size` bytes at `offset`
    flush,    ///< flush() of the lines of [offset, offset + size)
    fence,    ///< fence()
    tx_begin, ///< the scenario calls tlptm::atomic for transaction `tx`
    tx_end,   ///< tlptm::atomic of transaction `tx` returned
    fault,    ///< an injected fault: the fence or flush threw and did nothing
};

struct event {
    event_kind kind{};
    std::uint16_t thread = 0; ///< index of the calling thread, in order of first call
    std::uint32_t tx = 0;     ///< tx_begin / tx_end: the recorder's transaction id
    std::uint64_t offset = 0; ///< store / stream / flush: pool offset
    std::uint64_t size = 0;   ///< bytes
    std::uint64_t data = 0;   ///< store / stream: where the bytes are in trace::bytes
};

/// A recorded run: events, the bytes of stores and streams, and what the tracer found wrong.
struct trace {
    std::vector<event> events;
    std::vector<std::uint8_t> bytes;
    std::vector<std::string> violations; ///< unannounced stores, calls outside the pool
    std::uint16_t threads = 0;

    const std::uint8_t* data_of(const event& e) const { return bytes.data() + e.data; }
};

struct tracer_options {
    /// Compare the real pool with the announced stores at every fence. Off for runs of several
    /// threads (another thread may be between its stores and its stored() call); check_now()
    /// then checks at a quiescent moment.
    bool strict = true;
    /// Mutation: the n-th stored() call (0-based) is not recorded, as if the library had made
    /// that store without telling the policy. -1: none.
    std::int64_t ignore_stored = -1;
    /// Fault injection: the n-th fence (0-based, all threads) throws tlptm::error as a failed
    /// msync does, and makes nothing durable. -1: none.
    std::int64_t fail_fence = -1;
    /// The same for the n-th flush.
    std::int64_t fail_flush = -1;
};

/// What an injected fault throws.
inline constexpr const char* injected_fault = "injected fault: msync failed (EIO)";

/// The tracing persistence policy. Construct it from the pool file's bytes before opening the
/// pool with pool_options::policy = &tracer; it must outlive the pool.
class tracer final : public tlptm::persist_policy {
public:
    /// `initial`: the file's bytes when the pool is opened (the pool's base address and size
    /// are read from its header).
    explicit tracer(std::vector<std::uint8_t> initial, tracer_options opt = {})
        : view_(std::move(initial)), opt_(opt) {
        if (view_.size() < tlptm::detail::header_bytes)
            throw std::invalid_argument("tracer: image smaller than a pool header");
        layout_ = pool_layout::of(view_.data());
        if (layout_.size != view_.size())
            throw std::invalid_argument("tracer: image size differs from the header's pool size");
        base_ = reinterpret_cast<std::uint8_t*>(layout_.base_address);
    }

    /// For pool::create: the file is `initial` (zeros) and will be mapped at `base`.
    tracer(std::vector<std::uint8_t> initial, std::uintptr_t base, tracer_options opt)
        : view_(std::move(initial)), opt_(opt) {
        layout_.size = view_.size();
        layout_.base_address = base;
        base_ = reinterpret_cast<std::uint8_t*>(base);
    }

    tracer(const tracer&) = delete;
    tracer& operator=(const tracer&) = delete;

    void stream(void* dst, const void* src, std::size_t n) override {
        scheduler::yield(point::stream, dst);
        std::lock_guard lk(mutex_);
        std::memcpy(dst, src, n); // the policy makes the copy
        std::uint64_t off;
        if (!locate(dst, n, "stream", off))
            return;
        std::memcpy(view_.data() + off, src, n);
        push(event_kind::stream, off, n, src);
        ++streams_[trace_.events.back().thread];
    }

    void stored(const void* dst, std::size_t n) override {
        scheduler::yield(control(dst, true) ? point::stored_ctl : point::stored, dst);
        std::lock_guard lk(mutex_);
        if (opt_.ignore_stored >= 0 && stored_calls_++ == opt_.ignore_stored)
            return;
        std::uint64_t off;
        if (!locate(dst, n, "stored", off))
            return;
        std::memcpy(view_.data() + off, dst, n);
        push(event_kind::store, off, n, dst);
    }

    void flush(const void* addr, std::size_t n) override {
        scheduler::yield(control(addr, true) ? point::flush_ctl : point::flush, addr);
        std::lock_guard lk(mutex_);
        if (opt_.fail_flush >= 0 && flushes_++ == opt_.fail_flush) {
            push(event_kind::fault, 0, 0, nullptr);
            fault_fired_ = true;
            throw tlptm::error(injected_fault);
        }
        std::uint64_t off;
        if (!locate(addr, n, "flush", off))
            return;
        // One event per line: a mutation can drop the write-back of a single line even when
        // the library flushes a whole block (or a run of blocks) in one call.
        for (std::uint64_t l = off / 64; l <= (off + n - 1) / 64; ++l) {
            std::uint64_t lo = std::max(off, l * 64), hi = std::min(off + n, (l + 1) * 64);
            push(event_kind::flush, lo, hi - lo, nullptr);
        }
    }

    void fence() override {
        scheduler::yield(control(nullptr, false) ? point::fence_ctl : point::fence, nullptr);
        std::lock_guard lk(mutex_);
        if (opt_.fail_fence >= 0 && static_cast<std::int64_t>(fences_) == opt_.fail_fence &&
            !fault_fired_) {
            ++fences_;
            push(event_kind::fault, 0, 0, nullptr);
            fault_fired_ = true;
            throw tlptm::error(injected_fault);
        }
        push(event_kind::fence, 0, 0, nullptr);
        ++fences_;
        if (opt_.strict)
            check_locked("fence #" + std::to_string(fences_ - 1));
    }

    /// The scenario enters tlptm::atomic for transaction `id`.
    void begin_tx(std::uint32_t id) {
        std::lock_guard lk(mutex_);
        push(event_kind::tx_begin, 0, 0, nullptr).tx = id;
    }
    /// tlptm::atomic of transaction `id` returned.
    void end_tx(std::uint32_t id) {
        std::lock_guard lk(mutex_);
        push(event_kind::tx_end, 0, 0, nullptr).tx = id;
    }

    /// Compares the real pool with the announced stores now. Call it while the pool is mapped
    /// and no transaction runs.
    void check_now(const std::string& where) {
        std::lock_guard lk(mutex_);
        check_locked(where);
    }

    const pool_layout& layout() const noexcept { return layout_; }

    /// Streams (log entries) the calling thread has made so far.
    std::uint64_t streams_of_this_thread() {
        std::lock_guard lk(mutex_);
        return streams_[thread_index()];
    }

    /// True once an injected fault was thrown.
    bool fault_fired() {
        std::lock_guard lk(mutex_);
        return fault_fired_;
    }

    /// The recorded trace (the tracer is empty afterwards).
    trace take() {
        std::lock_guard lk(mutex_);
        trace t = std::move(trace_);
        t.threads = static_cast<std::uint16_t>(thread_ids_.size());
        trace_ = {};
        return t;
    }

private:
    /// For the scheduler: is `p` on a control line (the pool header: CT, the root)? Notes it
    /// for the calling thread's next fence; with `p` null, takes the note (a fence).
    bool control(const void* p, bool note) {
        static thread_local const tracer* owner = nullptr;
        static thread_local bool pending = false;
        if (owner != this) {
            owner = this;
            pending = false;
        }
        if (!note) {
            bool was = pending;
            pending = false;
            return was;
        }
        auto a = reinterpret_cast<std::uintptr_t>(p);
        auto b = reinterpret_cast<std::uintptr_t>(base_);
        if (a < b || a - b >= layout_.size)
            return false;
        std::uint64_t off = a - b;
        bool ctl = off < tlptm::detail::header_bytes;
        pending = pending || ctl;
        return ctl;
    }

    std::uint16_t thread_index() {
        auto me = std::this_thread::get_id();
        for (std::size_t i = 0; i < thread_ids_.size(); ++i)
            if (thread_ids_[i] == me)
                return static_cast<std::uint16_t>(i);
        thread_ids_.push_back(me);
        return static_cast<std::uint16_t>(thread_ids_.size() - 1);
    }

    event& push(event_kind k, std::uint64_t off, std::uint64_t n, const void* bytes) {
        event e;
        e.kind = k;
        e.thread = thread_index();
        e.offset = off;
        e.size = n;
        if (bytes) {
            e.data = trace_.bytes.size();
            const auto* b = static_cast<const std::uint8_t*>(bytes);
            trace_.bytes.insert(trace_.bytes.end(), b, b + n);
        }
        trace_.events.push_back(e);
        return trace_.events.back();
    }

    bool locate(const void* p, std::size_t n, const char* call, std::uint64_t& off) {
        auto a = reinterpret_cast<std::uintptr_t>(p);
        auto b = reinterpret_cast<std::uintptr_t>(base_);
        if (a < b || a - b > layout_.size || n > layout_.size - (a - b)) {
            trace_.violations.push_back(std::string("persistence policy: ") + call + "(" + hex(a) +
                                        ", " + std::to_string(n) + ") lies outside the pool");
            return false;
        }
        off = a - b;
        return true;
    }

    /// Reports the bytes where the real pool differs from the announced stores, then takes
    /// them into the view.
    void check_locked(const std::string& where) {
        std::size_t reported = 0, differing_lines = 0;
        std::string first;
        for (std::uint64_t l = 0; l * line_size < layout_.size; ++l) {
            std::uint8_t* v = view_.data() + l * line_size;
            const std::uint8_t* r = base_ + l * line_size;
            std::size_t n = std::min<std::uint64_t>(line_size, layout_.size - l * line_size);
            if (std::memcmp(v, r, n) == 0)
                continue;
            ++differing_lines;
            std::size_t i = 0;
            while (v[i] == r[i])
                ++i;
            std::size_t j = n;
            while (v[j - 1] == r[j - 1])
                --j;
            if (reported++ < 4)
                first += (first.empty() ? "" : "; ") + std::string("offset ") +
                         hex(l * line_size + i) + " (" + std::to_string(j - i) + " bytes up to " +
                         hex(l * line_size + j) + ", " + layout_.area(l * line_size) + ")";
            std::memcpy(v, r, n);
        }
        if (differing_lines > 0)
            trace_.violations.push_back("store that bypassed the persistence policy, seen at " +
                                        where + ": " + std::to_string(differing_lines) +
                                        " line(s) differ from the announced stores: " + first);
    }

    std::mutex mutex_;
    std::vector<std::uint8_t> view_;
    tracer_options opt_;
    pool_layout layout_;
    std::uint8_t* base_ = nullptr;
    trace trace_;
    std::vector<std::thread::id> thread_ids_;
    std::map<std::uint16_t, std::uint64_t> streams_;
    std::int64_t stored_calls_ = 0, flushes_ = 0;
    std::uint64_t fences_ = 0;
    bool fault_fired_ = false;
};

} // namespace tlptm_harness
