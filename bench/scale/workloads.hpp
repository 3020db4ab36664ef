// The workloads of the scaling driver, written once and run over each backend:
//
//   lookup    read-only lookups of random keys of a preloaded hash table (shared, never written)
//   disjoint  updates (counter + 1) of random keys of the calling thread's own key range
//   b         the example's workload b on shared data: 50 % inserts of new keys (each thread
//             its own id range), 50 % updates of random existing keys (the preloaded ones and
//             the thread's own inserts), as examples/hashtable/driver.hpp draws them
//   c         the example's workload c on shared data: updates of random preloaded keys
//   bank      transfers between two accounts: with probability `conflict` both from a small
//             shared hot set, otherwise both from the thread's own range of accounts
//
// A run is timed, not counted: one fresh pool, preloaded (not measured); `threads` workers run
// operations (one transaction each) until the driver stops them after `seconds`; then a check
// of the data. Table runs check that every update is found exactly once (values are counters
// that start at 1: their sum is keys + updates); bank runs check that the money is conserved
// and no balance went negative.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <libpmem.h>
#include <sys/mman.h>

#include <tlptm/tlptm.hpp>

#include "../../examples/hashtable/affinity.hpp"
#include "../../examples/hashtable/value.hpp"
#include "backends.hpp"

namespace tlptm_scale {

enum class workload_kind { lookup, disjoint, b, c, bank, spin, chase, persist };

/// The calibrations: no backend, no transaction; each is one series, run once.
constexpr bool is_calibration(workload_kind k) noexcept {
    return k == workload_kind::spin || k == workload_kind::chase || k == workload_kind::persist;
}

/// One workload of a scaling series.
struct workload_spec {
    workload_kind kind = workload_kind::lookup;
    double conflict = 0; ///< bank only: probability of a transfer within the hot set

    /// Its name in tables, files and plots: lookup, disjoint, b, c, bank-0, bank-0.25...
    std::string name() const {
        switch (kind) {
        case workload_kind::lookup:
            return "lookup";
        case workload_kind::disjoint:
            return "disjoint";
        case workload_kind::b:
            return "b";
        case workload_kind::c:
            return "c";
        case workload_kind::bank: {
            char buf[32];
            std::snprintf(buf, sizeof buf, "bank-%g", conflict);
            return buf;
        }
        case workload_kind::spin:
            return "spin";
        case workload_kind::chase:
            return "chase";
        case workload_kind::persist:
            return "persist";
        }
        return "?";
    }

    std::string describe() const {
        switch (kind) {
        case workload_kind::lookup:
            return "read-only lookups of random keys, shared table";
        case workload_kind::disjoint:
            return "updates of random keys of the thread's own key range";
        case workload_kind::b:
            return "workload b on shared data: 50% inserts, 50% updates";
        case workload_kind::c:
            return "workload c on shared data: 100% updates of random keys";
        case workload_kind::bank: {
            char buf[96];
            std::snprintf(buf, sizeof buf,
                          "bank transfers, %g%% within the shared hot set, else own accounts",
                          conflict * 100);
            return buf;
        }
        case workload_kind::spin:
            return "calibration: arithmetic only, no memory shared, no transaction";
        case workload_kind::chase:
            return "calibration: two dependent reads and a write of a shared array of c's size, "
                   "no transaction";
        case workload_kind::persist:
            return "calibration: an update's persistence alone (a word of a line of the thread's "
                   "own, the previous line's flush, a 16-byte non-temporal entry, a fence), no "
                   "transaction";
        }
        return "?";
    }
};

/// The sizes and the time of every run.
struct scale_config {
    double seconds = 0.2;          ///< measured time of one run
    std::uint64_t keys = 16384;    ///< preloaded keys of lookup, b, c (disjoint: at least)
    std::uint64_t range = 2048;    ///< disjoint: keys per thread
    std::uint64_t accounts = 1024; ///< bank: accounts per thread
    std::uint64_t hot = 8;         ///< bank: accounts of the shared hot set
    unsigned max_threads = 1;      ///< the largest thread count of the series (sizes the data)
    std::uint64_t seed = 1;
    std::string pool_path;
    /// The CPUs to pin to (workloads::allowed_cpus()): worker t runs on cpus[t mod their
    /// number], and the main thread, which makes and preloads the data, on cpus[0] beside
    /// worker 0. Empty: not pinned, the scheduler places the threads (--no-pin).
    std::vector<int> cpus;
    /// tlptm's durability: emulated persistent memory (the default) or msync (a file that is
    /// not persistent memory: every fence is an msync of the pages written since the last one).
    tlptm::durability durability = tlptm::durability::emulate_pmem;

    /// Preloaded keys of a table workload. disjoint: `range` keys for each of max_threads
    /// threads, so that the table is the same at every thread count.
    std::uint64_t preload(workload_kind k) const {
        return k == workload_kind::disjoint ? std::max(keys, range * max_threads) : keys;
    }
    /// Accounts of a bank run: the hot set, then `accounts` per thread for max_threads threads.
    std::uint64_t bank_accounts() const { return hot + accounts * max_threads; }
    /// b: inserts one thread may do in one run (its id range): above what one thread does in
    /// `seconds` at a million inserts per second. A thread that uses its range up updates
    /// instead (table_run::step).
    std::uint64_t insert_cap() const { return static_cast<std::uint64_t>(seconds * 1e6) + 1024; }
};

/// What one run measured.
struct run_outcome {
    std::uint64_t ops = 0;    ///< operations (transactions) completed
    double seconds = 0;       ///< from the start signal to the last worker's stop
    std::uint64_t aborts = 0; ///< tlptm: transactions aborted (conflicts); PMDK: 0
    std::uint64_t fences = 0; ///< tlptm: fences (each one persistence round trip); PMDK: 0
    /// tlptm, durability msync: msync calls (fences running together share one); else 0
    std::uint64_t msync_calls = 0;
    std::string error; ///< an exception or a failed check; "" if verified

    double throughput() const noexcept {
        return seconds > 0 ? static_cast<double>(ops) / seconds : 0;
    }
};

namespace detail {

/// The key of key number `id`: keys are 1, 2, 3... (as in the example's driver).
constexpr key_type key_of(std::uint64_t id) noexcept {
    return id + 1;
}

/// Runs `threads` workers on `w` for `seconds`: each calls w.step(its state) until told to
/// stop. Returns the operations done and the elapsed time; an exception of a worker is
/// rethrown. W provides `state`, make_state(t), step(state&) -> bool (false: cannot go on) and
/// prepare_thread() (each worker's one-time set-up, before the start signal: not timed).
template <class W>
run_outcome run_timed(W& w, std::vector<typename W::state>& states, unsigned threads,
                      double seconds, const std::vector<int>& cpus) {
    using clock = std::chrono::steady_clock;
    struct alignas(64) worker_result {
        std::uint64_t ops = 0;
        clock::time_point end;
        std::exception_ptr error;
        bool stopped_early = false;
    };
    std::vector<worker_result> results(threads);
    states.clear();
    for (unsigned t = 0; t < threads; ++t)
        states.push_back(w.make_state(t));
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false}, stop{false};
    std::vector<std::thread> workers;
    workers.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            worker_result& r = results[t];
            typename W::state& s = states[t];
            // On its CPU before anything else: worker 0 beside the thread that made the data.
            r.error = workloads::pin_worker(cpus, t);
            bool prepared = !r.error;
            try {
                if (prepared)
                    w.prepare_thread();
            } catch (...) {
                r.error = std::current_exception();
                prepared = false;
            }
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire))
                std::this_thread::yield();
            try {
                while (prepared && !stop.load(std::memory_order_relaxed)) {
                    if (!w.step(s)) {
                        r.stopped_early = true;
                        break;
                    }
                    ++r.ops;
                }
            } catch (...) {
                r.error = std::current_exception();
            }
            r.end = clock::now();
        });
    }
    while (ready.load() < threads)
        std::this_thread::yield();
    const clock::time_point start = clock::now();
    go.store(true, std::memory_order_release);
    std::this_thread::sleep_until(start + std::chrono::duration<double>(seconds));
    stop.store(true, std::memory_order_relaxed);
    for (std::thread& th : workers)
        th.join();

    run_outcome out;
    clock::time_point end = start;
    for (const worker_result& r : results) {
        if (r.error)
            std::rethrow_exception(r.error);
        out.ops += r.ops;
        end = std::max(end, r.end);
    }
    out.seconds = std::chrono::duration<double>(end - start).count();
    for (const worker_result& r : results)
        if (r.stopped_early)
            out.error = "a worker stopped before the end of the run (its workload could not go on)";
    return out;
}

/// A table workload (lookup, disjoint, b, c) on one fresh table of `Table`.
template <class Table> class table_run {
public:
    struct alignas(64) state {
        unsigned t = 0;
        workloads::rng r{0};
        std::uint64_t first_id = 0; ///< b: this thread inserts ids first_id, first_id + 1, ...
        std::uint64_t inserted = 0, updated = 0, looked_up = 0;
        std::uint64_t missing = 0;   ///< lookups / updates that did not find their key
        std::uint64_t duplicate = 0; ///< inserts that found their new key present
    };

    table_run(workload_kind kind, const scale_config& cfg, unsigned threads)
        : kind_(kind), cfg_(cfg), preload_(cfg.preload(kind)),
          insert_cap_(kind == workload_kind::b ? cfg.insert_cap() : 0),
          table_(config_for(kind, cfg, threads, preload_, insert_cap_)) {
        // Preload (not measured): 256 inserts per transaction, every value 1.
        for (std::uint64_t first = 0; first < preload_; first += 256) {
            const std::uint64_t last = std::min(preload_, first + 256);
            std::uint64_t fresh = 0;
            table_.batch([&] {
                fresh = 0;
                for (std::uint64_t id = first; id < last; ++id)
                    fresh += table_.insert(key_of(id), value_type{1}) ? 1 : 0;
            });
            if (fresh != last - first)
                throw std::runtime_error("preload: a new key was found present");
        }
    }

    state make_state(unsigned t) const {
        state s;
        s.t = t;
        s.r.state = workloads::mix64(cfg_.seed * 0x9E3779B97F4A7C15ull + t + 1) ^
                    (static_cast<std::uint64_t>(kind_) << 56);
        s.first_id = preload_ + t * insert_cap_;
        return s;
    }

    bool step(state& s) {
        const auto plus_one = [](const value_type& v) { return v + 1; };
        switch (kind_) {
        case workload_kind::lookup:
            ++s.looked_up;
            if (!table_.lookup(key_of(s.r.below(preload_))))
                ++s.missing;
            return true;
        case workload_kind::disjoint:
            count_update(
                s, table_.update_with(key_of(s.t * cfg_.range + s.r.below(cfg_.range)), plus_one));
            return true;
        case workload_kind::c:
            count_update(s, table_.update_with(key_of(s.r.below(preload_)), plus_one));
            return true;
        case workload_kind::b:
            // Insert the thread's next new key; once its id range is used up (a run that went on
            // far longer than asked, on a loaded machine), an update instead: the run goes on
            // and its checks still hold, with the mix shifted towards updates.
            if ((s.r.next() & 1) != 0 && s.inserted < insert_cap_) {
                if (table_.insert(key_of(s.first_id + s.inserted), value_type{1}))
                    ++s.inserted;
                else
                    ++s.duplicate;
            } else { // update a random existing key: preloaded, or inserted by this thread
                const std::uint64_t pick = s.r.below(preload_ + s.inserted);
                const std::uint64_t id = pick < preload_ ? pick : s.first_id + (pick - preload_);
                count_update(s, table_.update_with(key_of(id), plus_one));
            }
            return true;
        case workload_kind::bank:
        case workload_kind::spin:
        case workload_kind::chase:
        case workload_kind::persist:
            break;
        }
        throw std::logic_error("table_run: not a table workload");
    }

    /// "" or what is wrong: a key not found, a wrong count of keys, or values whose sum is not
    /// keys + updates (an update lost or applied twice).
    std::string verify(const std::vector<state>& states) const {
        std::uint64_t inserted = 0, updated = 0;
        for (const state& s : states) {
            if (s.missing != 0)
                return std::to_string(s.missing) + " operations did not find an existing key";
            if (s.duplicate != 0)
                return std::to_string(s.duplicate) + " inserts found their new key present";
            inserted += s.inserted;
            updated += s.updated;
        }
        const std::uint64_t keys = preload_ + inserted;
        if (const std::uint64_t n = table_.size(); n != keys)
            return "size() is " + std::to_string(n) + ", expected " + std::to_string(keys);
        if (const std::uint64_t n = table_.count_nodes(); n != keys)
            return "the chains hold " + std::to_string(n) + " nodes, expected " +
                   std::to_string(keys);
        std::uint64_t sum = 0;
        auto add = [&](std::uint64_t id) -> bool {
            std::optional<value_type> v = table_.lookup(key_of(id));
            if (!v)
                return false;
            sum += *v;
            return true;
        };
        for (std::uint64_t id = 0; id < preload_; ++id)
            if (!add(id))
                return "key " + std::to_string(key_of(id)) + " is missing";
        for (const state& s : states)
            for (std::uint64_t id = s.first_id; id < s.first_id + s.inserted; ++id)
                if (!add(id))
                    return "inserted key " + std::to_string(key_of(id)) + " is missing";
        if (sum != keys + updated)
            return "the values sum to " + std::to_string(sum) + ", expected " +
                   std::to_string(keys) + " keys + " + std::to_string(updated) + " updates";
        return "";
    }

    tlptm::stats stats() const { return table_.stats(); }
    void prepare_thread() { table_.prepare_thread(); }

private:
    static workloads::backend_config config_for(workload_kind kind, const scale_config& cfg,
                                                unsigned threads, std::uint64_t preload,
                                                std::uint64_t insert_cap) {
        workloads::backend_config c;
        c.path = cfg.pool_path;
        c.mode = tlptm::log_mode::tlptm;
        c.write_ns = 0;
        // Four buckets per preloaded key, and for b at least one per key the run may hold at
        // its end (the preload and every thread's insert cap). With the preload's buckets
        // only, b's inserts (about 300 000 per thread in a 0.2 s run) lengthened the chains to
        // several nodes, more so the more threads inserted. (This alone did not make two
        // threads' b scale: 0.96-1.02x before, 1.00-1.06x after; see docs/scaling.md.)
        c.max_nodes = preload + (kind == workload_kind::b ? insert_cap * threads : 0);
        c.bucket_count = std::bit_ceil(std::max<std::uint64_t>({4 * preload, c.max_nodes, 16}));
        c.threads = threads;
        c.durability = cfg.durability;
        return c;
    }

    static void count_update(state& s, const std::optional<value_type>& v) {
        if (v)
            ++s.updated;
        else
            ++s.missing;
    }

    workload_kind kind_;
    scale_config cfg_;
    std::uint64_t preload_;
    std::uint64_t insert_cap_;
    Table table_;
};

/// The bank workload on one fresh pool of `Bank`. Accounts: [0, hot) the shared hot set, then
/// `accounts` per thread. Every account starts with `initial`; a transfer moves 1..100.
template <class Bank> class bank_run {
public:
    static constexpr std::int64_t initial = 1000000;

    struct alignas(64) state {
        unsigned t = 0;
        workloads::rng r{0};
        std::uint64_t transfers = 0, refused = 0;
    };

    bank_run(double conflict, const scale_config& cfg, unsigned threads)
        : cfg_(cfg), conflict_threshold_(threshold_of(conflict)), accounts_(cfg.bank_accounts()),
          bank_(bank_config{cfg.pool_path, accounts_, initial, threads, cfg.durability}) {
        if (cfg.hot < 2 || cfg.accounts < 2)
            throw std::invalid_argument("bank: the hot set and each thread's range need at "
                                        "least 2 accounts");
    }

    state make_state(unsigned t) const {
        state s;
        s.t = t;
        s.r.state = workloads::mix64(cfg_.seed * 0x9E3779B97F4A7C15ull + t + 1) ^ 0xBA4CULL;
        return s;
    }

    bool step(state& s) {
        std::uint64_t first, n;
        if ((s.r.next() >> 11) < conflict_threshold_) {
            first = 0;
            n = cfg_.hot;
        } else {
            first = cfg_.hot + s.t * cfg_.accounts;
            n = cfg_.accounts;
        }
        const std::uint64_t from = s.r.below(n);
        const std::uint64_t to = (from + 1 + s.r.below(n - 1)) % n; // any other of the n
        const auto amount = static_cast<std::int64_t>(1 + s.r.below(100));
        if (bank_.transfer(first + from, first + to, amount))
            ++s.transfers;
        else
            ++s.refused;
        return true;
    }

    /// "" or what is wrong: money created or lost, or a negative balance.
    std::string verify(const std::vector<state>&) {
        const bank_totals t = bank_.totals();
        const std::int64_t expected = initial * static_cast<std::int64_t>(accounts_);
        if (t.sum != expected)
            return "the balances sum to " + std::to_string(t.sum) + ", expected " +
                   std::to_string(expected) + ": money was created or lost";
        if (t.min < 0)
            return "a balance is negative (" + std::to_string(t.min) + ")";
        return "";
    }

    tlptm::stats stats() const { return bank_.stats(); }
    void prepare_thread() { bank_.prepare_thread(); }

private:
    /// The conflict probability as a threshold on 53 random bits.
    static std::uint64_t threshold_of(double conflict) {
        if (!(conflict >= 0 && conflict <= 1))
            throw std::invalid_argument("bank: the conflict rate must be in [0, 1]");
        return static_cast<std::uint64_t>(conflict * static_cast<double>(std::uint64_t{1} << 53));
    }

    scale_config cfg_;
    std::uint64_t conflict_threshold_;
    std::uint64_t accounts_;
    Bank bank_;
};

/// The calibration workload: each operation is arithmetic on the thread's own registers (64
/// rounds of the splitmix64 finaliser), no memory shared and no transaction. Its speedup is
/// what the machine gives at p threads: on p free cores S(p) = p; when other processes take
/// the cores, it shows how many were free.
class spin_run {
public:
    struct alignas(64) state {
        std::uint64_t x = 0;
    };

    spin_run(workload_kind, const scale_config&, unsigned) {}

    state make_state(unsigned t) const { return state{t + 1}; }

    bool step(state& s) const noexcept {
        std::uint64_t x = s.x;
        for (int i = 0; i < 64; ++i)
            x = workloads::mix64(x);
        s.x = x | 1; // never 0: the loop cannot be folded away
        return true;
    }

    std::string verify(const std::vector<state>& states) const {
        for (const state& s : states)
            if (s.x == 0)
                return "the calibration loop was not run";
        return "";
    }

    tlptm::stats stats() const { return {}; }
    void prepare_thread() const noexcept {}
};

/// The memory calibration: each operation reads two lines of one shared array, the second at
/// the index the first holds, and writes a counter in the second (as an update of c reads a
/// bucket, then the node it points to, and writes the node), with plain loads and stores: no
/// transaction, no lock, no persistence. The array has a 64-byte line per preloaded key and as
/// many bytes more as tlptm's orec table (1.25 MiB): about the footprint of c's data. Where
/// spin's speedup says how many cores the threads got, chase's says what the caches and the
/// memory give to threads that read and write the same lines: a line one core wrote must come
/// from the other core's cache, and on a guest whose two vCPUs the host places on different
/// core complexes (or whose neighbours thrash the shared cache) that costs more. c shares its
/// lines in the same way, so the growth of its time per operation from one thread to p (the
/// ns/op/thr column) is to be set beside chase's: chase's operation is little else, and its
/// speedup itself can be far below 1.
class chase_run {
public:
    struct alignas(64) state {
        std::uint64_t at = 0; ///< the line the next operation starts from
    };

    chase_run(workload_kind, const scale_config& cfg, unsigned) : lines_(cfg.keys + orec_lines) {
        // One random cycle through every line (Sattolo's shuffle), so that no prefetcher can
        // guess the next line and every thread, wherever it starts, walks the whole array.
        const std::uint64_t n = lines_.size();
        std::vector<std::uint64_t> next(n);
        for (std::uint64_t i = 0; i < n; ++i)
            next[i] = i;
        workloads::rng r{cfg.seed};
        for (std::uint64_t i = n - 1; i > 0; --i)
            std::swap(next[i], next[r.below(i)]);
        for (std::uint64_t i = 0; i < n; ++i)
            lines_[i].next = next[i];
    }

    state make_state(unsigned t) const { return state{workloads::mix64(t + 1) % lines_.size()}; }

    bool step(state& s) noexcept {
        line& l = lines_[lines_[s.at].next];
        // Not an atomic increment: a plain load and store, as a commit's write-back is (two
        // threads may lose each other's counts; nothing checks them).
        l.count.store(l.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        s.at = l.next;
        return true;
    }

    std::string verify(const std::vector<state>& states) const {
        for (const state& s : states)
            if (s.at >= lines_.size())
                return "the chase left its array";
        return "";
    }

    tlptm::stats stats() const { return {}; }
    void prepare_thread() const noexcept {}

private:
    struct alignas(64) line {
        std::uint64_t next = 0;              ///< written once, before the threads start
        std::atomic<std::uint64_t> count{0}; ///< the operations' writes
    };
    /// As many lines as tlptm's orec table has bytes (1.25 MiB).
    static constexpr std::uint64_t orec_lines =
        tlptm::detail::orec_table::count * tlptm::detail::orec_table::orec_bytes / sizeof(line);
    std::vector<line> lines_;
};

/// The persistence calibration: each operation is what an 8-byte update of `disjoint` asks of
/// the persistence path under eager write-back, without the transaction: it adds 1 to a word of
/// a random line of the thread's own `--range` lines, flushes the line the thread's previous
/// operation wrote (eager write-back: the previous commit's line goes out under this commit's
/// fence), writes a 16-byte entry with non-temporal stores at the next position of the thread's
/// own 1 MiB ring (tlptm::detail::stream_copy, as a commit writes its entry), and fences once.
/// Nothing is shared between the threads: each has its own mapping (shared memory, as a pool
/// in /dev/shm), mapped and touched before the clock starts. Its speedup is what the machine's
/// persistence path gives p threads that share nothing; `disjoint` and `bank-0` are to be read
/// against it, as every curve is against `spin`'s.
class persist_run {
public:
    struct alignas(64) state {
        std::uint8_t* lines = nullptr; ///< the thread's `range` lines
        std::uint8_t* ring = nullptr;  ///< the thread's ring
        std::uint64_t pos = 0;         ///< the next entry's offset in the ring
        std::uint64_t previous = 0;    ///< the line the last operation wrote (+1; 0: none)
        std::uint64_t ops = 0;
        workloads::rng r{0};
    };

    persist_run(workload_kind, const scale_config& cfg, unsigned threads)
        : range_(std::max<std::uint64_t>(cfg.range, 1)), seed_(cfg.seed) {
        for (unsigned t = 0; t < threads; ++t) {
            const std::size_t bytes = range_ * line_bytes + ring_bytes;
            void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (m == MAP_FAILED)
                throw std::runtime_error("persist calibration: mmap of " + std::to_string(bytes) +
                                         " bytes failed");
            maps_.push_back({static_cast<std::uint8_t*>(m), bytes});
            std::memset(m, 0, bytes); // every page written once before the clock starts
        }
    }
    ~persist_run() {
        for (const mapping& m : maps_)
            ::munmap(m.base, m.bytes);
    }
    persist_run(const persist_run&) = delete;
    persist_run& operator=(const persist_run&) = delete;

    state make_state(unsigned t) const {
        state s;
        s.lines = maps_[t].base;
        s.ring = maps_[t].base + range_ * line_bytes;
        s.r.state = workloads::mix64(seed_ * 0x9E3779B97F4A7C15ull + t + 1);
        return s;
    }

    bool step(state& s) noexcept {
        const std::uint64_t line = s.r.below(range_);
        auto* word = reinterpret_cast<std::uint64_t*>(s.lines + line * line_bytes);
        *word += 1;
        if (s.previous != 0)
            tlptm::detail::flush_cpu_lines(s.lines + (s.previous - 1) * line_bytes, line_bytes);
        s.previous = line + 1;
        const std::uint64_t entry[2] = {s.ops, line};
        tlptm::detail::stream_copy(s.ring + s.pos, entry, sizeof entry);
        s.pos = (s.pos + sizeof entry) % ring_bytes;
        pmem_drain(); // the fence: SFENCE on x86-64
        ++s.ops;
        return true;
    }

    /// The words the operations added to sum to the operations done.
    std::string verify(const std::vector<state>& states) const {
        for (std::size_t t = 0; t < states.size(); ++t) {
            std::uint64_t sum = 0;
            for (std::uint64_t l = 0; l < range_; ++l) {
                std::uint64_t v;
                std::memcpy(&v, maps_[t].base + l * line_bytes, sizeof v);
                sum += v;
            }
            if (sum != states[t].ops)
                return "thread " + std::to_string(t) + "'s lines hold " + std::to_string(sum) +
                       " increments for " + std::to_string(states[t].ops) + " operations";
        }
        return "";
    }

    tlptm::stats stats() const { return {}; }
    void prepare_thread() const noexcept {}

private:
    static constexpr std::uint64_t line_bytes = 64;
    static constexpr std::uint64_t ring_bytes = std::uint64_t{1} << 20;
    struct mapping {
        std::uint8_t* base;
        std::size_t bytes;
    };
    std::uint64_t range_, seed_;
    std::vector<mapping> maps_;
};

/// Makes the run's pool, runs it and checks it. Never throws for a failure of the run: that
/// goes to run_outcome::error.
template <class Run, class What>
run_outcome measure(const What& what, const scale_config& cfg, unsigned threads) {
    run_outcome out;
    try {
        Run run(what, cfg, threads);
        std::vector<typename Run::state> states;
        const tlptm::stats before = run.stats();
        out = run_timed(run, states, threads, cfg.seconds, cfg.cpus);
        const tlptm::stats d = run.stats() - before;
        out.aborts = d.tx_aborted;
        out.fences = d.fences;
        out.msync_calls = d.msync_calls;
        if (out.error.empty())
            out.error = run.verify(states);
    } catch (const std::exception& e) {
        out.error = e.what();
    }
    return out;
}

} // namespace detail

/// Runs one workload at `threads` threads on a fresh pool of the backend: tlptm (true) or PMDK
/// (spin: no backend, the flag is ignored).
inline run_outcome run_workload(const workload_spec& w, bool tlptm_backend, const scale_config& cfg,
                                unsigned threads) {
    using namespace detail;
    if (w.kind == workload_kind::spin)
        return measure<spin_run>(w.kind, cfg, threads);
    if (w.kind == workload_kind::chase)
        return measure<chase_run>(w.kind, cfg, threads);
    if (w.kind == workload_kind::persist)
        return measure<persist_run>(w.kind, cfg, threads);
    if (w.kind == workload_kind::bank)
        return tlptm_backend ? measure<bank_run<tlptm_bank>>(w.conflict, cfg, threads)
                             : measure<bank_run<pmdk_bank>>(w.conflict, cfg, threads);
    return tlptm_backend ? measure<table_run<tlptm_table>>(w.kind, cfg, threads)
                         : measure<table_run<pmdk_striped_table>>(w.kind, cfg, threads);
}

} // namespace tlptm_scale
