// Crash-consistency harness: the sweep. Runs a scenario on a traced pool, generates the crash
// images of every crash point (crash_images.hpp), recovers each with the ordinary persistence
// path (tlptm::pool::open, durability emulate_pmem) and checks it against a reference model:
//
// - I1: the recovered state is the state after a set of transactions that holds, per thread, a
//   prefix of its transactions in program order (for one thread: a prefix in commit order),
//   including every transaction whose tlptm::atomic call had returned at the crash point, and
//   none that had not begun. The sets are applied in commit-timestamp order by the model.
// - I2: the set also holds every transaction with ts <= the image's CT; recovery reports CT as
//   found, replays exactly the valid log entries with ts > CT (counted with the library's own
//   entry parser), advances CT to the last of them, and writes nothing but their records.
// - I4: AALO data of committed transactions is part of the observed state.
// - I5: a second recovery replays nothing and changes nothing; on sampled images, recovery is
//   itself traced and crashed at every flush and fence, and recovering each of those images
//   gives exactly the bytes of the uninterrupted recovery.
// - The allocator: bytes in use after recovery equal the root plus the reachable objects, each
//   of which must be allocated in the persistent bitmap (no leak, no double allocation).
// - Stores that bypassed the persistence policy (tracer.hpp).
//
// Images are recovered once per distinct *predicted outcome*: the heap and metadata after
// replaying the valid entries with ts > CT, the CT before and after, and the replayed
// timestamps. Many images differ only in bytes recovery never reads (a torn entry, a line
// recovery overwrites); one real recovery per outcome checks them all, and every real recovery
// is compared with its prediction byte for byte, so the prediction cannot hide a difference.
// sweep_config::exact_keys recovers every distinct image instead.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "crash_images.hpp"
#include "pool_file.hpp"
#include "scheduler.hpp"
#include "tracer.hpp"

namespace tlptm_harness {

/// The observable state of a pool, as a scenario defines it (a canonical list of words).
using digest = std::vector<std::uint64_t>;
/// The effect of one transaction on the reference model's digest.
using model_op = std::function<void(digest&)>;

inline std::uint64_t hash_digest(const digest& d) noexcept {
    std::uint64_t h = mix64(d.size() + 0x51);
    for (std::uint64_t w : d)
        h = mix64(h ^ w);
    return h;
}

inline std::string show_digest(const digest& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size() && i < 12; ++i) {
        if (i > 0)
            s += ' ';
        s += std::to_string(d[i]);
    }
    if (d.size() > 12)
        s += " ...";
    return s + "]";
}

/// What a scenario sees in a pool.
struct observation {
    digest state;
    /// What pool.stats().heap.bytes_in_use must be: the root's superblocks plus the blocks of
    /// every reachable object (see allocated_block()).
    std::uint64_t reachable_bytes = 0;
    /// Non-empty if the structure is malformed (a pointer outside the heap, a free block).
    std::string problem;
};

/// One transaction of a scenario run.
struct tx_record {
    std::uint32_t id = 0;
    std::uint64_t ts = 0;
    model_op op;
};

/// Runs a scenario's transactions and records, for each, its commit timestamp and its effect
/// on the model. Thread-safe. Each transaction start is a scheduling point (scheduler.hpp).
///
/// With faults expected (an injected persistence failure), a transaction that throws the
/// injected fault is recorded (as begun, never returned) if it streamed its log entry, since
/// recovery may then replay it; one that throws pool_error is not. Every transaction that
/// begins after a thread has seen the fault must throw pool_error (the pool is poisoned):
/// one that returns is a problem.
class recorder {
public:
    explicit recorder(tracer& t) : tracer_(t) {}

    void expect_faults(bool on) { faults_ = on; }
    /// How the scenario closes and reopens the traced pool (set by the sweep).
    void set_reopen(std::function<void(tlptm::pool&)> f) { reopen_ = std::move(f); }
    /// Closes `p` and opens it again with the tracing policy (recovery runs, traced).
    void reopen(tlptm::pool& p) { reopen_(p); }

    /// Runs `body` as one update transaction (it must store something) and records `op` as its
    /// effect on the model. Returns false if it threw the injected fault or pool_error (only
    /// when faults are expected; otherwise those propagate).
    template <class F> bool atomic(tlptm::pool& p, F&& body, model_op op) {
        scheduler::yield(point::tx_begin, nullptr);
        std::uint32_t id = next_.fetch_add(1);
        // The slot the transaction's last attempt ran in (the thread's slot, remembered after
        // each attempt): its newest entry is the transaction's.
        auto slot = [&]() -> tlptm::detail::thread_slot& {
            return tlptm::detail::this_thread_registry.slot_for(p.state_ptr());
        };
        const bool after_fault = fault_seen_.load();
        const std::uint64_t streams = faults_ ? tracer_.streams_of_this_thread() : 0;
        tracer_.begin_tx(id);
        try {
            tlptm::atomic(p, std::forward<F>(body));
        } catch (const tlptm::pool_error&) {
            if (!faults_)
                throw;
            pool_errors_.fetch_add(1);
            return false;
        } catch (const tlptm::error& e) {
            if (!faults_ || std::string(e.what()).find(injected_fault) == std::string::npos)
                throw;
            fault_seen_.store(true);
            faulted_.fetch_add(1);
            if (after_fault)
                problem("transaction " + std::to_string(id) +
                        " began after the persistence failure and threw it again instead of "
                        "pool_error");
            if (tracer_.streams_of_this_thread() != streams) { // its entry may be durable
                std::lock_guard lk(mutex_);
                txs_.push_back({id, slot().last_ts, std::move(op)});
            }
            return false;
        }
        // The slot's newest entry is this transaction's (it wrote, so it has one).
        std::uint64_t ts = slot().last_ts;
        tracer_.end_tx(id);
        if (after_fault)
            problem("transaction " + std::to_string(id) +
                    " began after a persistence failure and returned: every later transaction "
                    "must throw pool_error");
        std::lock_guard lk(mutex_);
        txs_.push_back({id, ts, std::move(op)});
        return true;
    }

    std::vector<tx_record> take() {
        std::lock_guard lk(mutex_);
        return std::move(txs_);
    }
    std::vector<std::string> problems() {
        std::lock_guard lk(mutex_);
        return problems_;
    }
    bool fault_seen() const { return fault_seen_.load(); }
    std::uint64_t pool_errors() const { return pool_errors_.load(); }
    std::uint64_t faulted() const { return faulted_.load(); }

private:
    void problem(const std::string& m) {
        std::lock_guard lk(mutex_);
        problems_.push_back(m);
    }

    tracer& tracer_;
    bool faults_ = false;
    std::function<void(tlptm::pool&)> reopen_;
    std::atomic<std::uint32_t> next_{0};
    std::atomic<bool> fault_seen_{false};
    std::atomic<std::uint64_t> pool_errors_{0}, faulted_{0};
    std::mutex mutex_;
    std::vector<tx_record> txs_;
    std::vector<std::string> problems_;
};

/// A workload whose crashes are swept.
struct scenario {
    std::string name;
    /// Creation options (size, log mode, threads, log capacity). The harness sets durability
    /// and the policy.
    tlptm::pool_options options;
    /// Threads that run transactions at once (tracing is strict only with one).
    unsigned threads = 1;
    /// Untraced preparation of the new pool (root type, pre-filled data).
    std::function<void(tlptm::pool&)> setup;
    /// The traced transactions, each through recorder::atomic.
    std::function<void(tlptm::pool&, recorder&)> run;
    /// The observable state of an open pool; must not write and must not trust the pool.
    std::function<observation(tlptm::pool&)> observe;
    /// A scheduled scenario: runs its workers with scheduler::run (instead of `run`); the
    /// sweep builds the scheduler from sweep_config::schedule.
    std::function<void(tlptm::pool&, recorder&, scheduler&)> scheduled;
};

struct sweep_config {
    /// Images per crash point of the scenario's trace.
    image_budget images;
    /// A deliberate defect (tests of the harness); none by default.
    mutation mut;
    tracer_options tracing;
    /// Distinct images recovered per run at most; images beyond it are counted as skipped.
    std::size_t max_recoveries = 400;
    /// Distinct images recovered per crash point at most.
    std::size_t max_new_per_point = 12;
    /// Images (with something to replay) whose recovery is itself traced and crashed (I5).
    std::size_t recovery_crashes = 3;
    /// Distinct images recovered per crashed recovery at most (shared out over its points).
    std::size_t max_per_recovery_crash = 24;
    image_budget recovery_images{16, 8, 8, 2, 7};
    /// A defect in the traces of recovery (I5 tests of the harness).
    mutation recovery_mut;
    /// Recover every distinct image rather than every distinct predicted outcome.
    bool exact_keys = false;
    std::size_t max_messages = 6;
    /// Where to write the images of violations (empty: nowhere).
    std::string dump_dir;
    /// Scheduled scenarios: seed and strategy of the scheduler.
    schedule_options schedule;
    /// A deliberate bug of the library, switched on during the scenario's run only (needs
    /// TLPTM_SCHED_HOOKS; tests of the harness).
    tlptm::detail::mutation lib_mut = tlptm::detail::mutation::none;
};

struct sweep_result {
    std::string name;
    std::size_t transactions = 0, events = 0, crash_points = 0, sampled_points = 0,
                image_checks = 0, recoveries = 0, skipped = 0, recovery_crash_runs = 0,
                recovery_crash_images = 0, recovery_crash_skipped = 0, out_of_order = 0,
                thread_switches = 0, violations = 0;
    /// Scheduled runs: interleavings (1 per run), scheduling points, stalls (a thread presumed
    /// blocked in the library), the fingerprint of the interleaving.
    std::size_t interleavings = 0, sched_points = 0, stalls = 0, faults = 0;
    std::uint64_t fingerprint = 0;
    bool mutation_matched = true;
    std::vector<std::string> messages;
    /// Every crash point (its description) at which some image failed a check, with the first
    /// message there; "tracer" and "scenario" for violations outside crash points. Two runs of
    /// one deterministic scenario have the same points, so a defect shows as new entries.
    std::map<std::string, std::string> failing_points;
    /// The first recovery of a set of transactions that is not a prefix in commit order.
    std::string out_of_order_example;
    double seconds = 0;

    void violation(const std::string& msg, std::size_t max_messages, const std::string& where) {
        ++violations;
        if (messages.size() < max_messages)
            messages.push_back(msg);
        failing_points.emplace(where, msg);
    }

    sweep_result& operator+=(const sweep_result& o) {
        transactions += o.transactions;
        events += o.events;
        crash_points += o.crash_points;
        sampled_points += o.sampled_points;
        image_checks += o.image_checks;
        recoveries += o.recoveries;
        skipped += o.skipped;
        recovery_crash_runs += o.recovery_crash_runs;
        recovery_crash_images += o.recovery_crash_images;
        recovery_crash_skipped += o.recovery_crash_skipped;
        if (out_of_order == 0)
            out_of_order_example = o.out_of_order_example;
        out_of_order += o.out_of_order;
        thread_switches += o.thread_switches;
        violations += o.violations;
        interleavings += o.interleavings;
        sched_points += o.sched_points;
        stalls += o.stalls;
        faults += o.faults;
        for (const auto& m : o.messages)
            if (messages.size() < 20)
                messages.push_back(m);
        for (const auto& [where, m] : o.failing_points)
            failing_points.emplace(o.name + ": " + where, m);
        seconds += o.seconds;
        return *this;
    }

    std::string summary() const {
        char buf[640];
        std::snprintf(buf, sizeof buf,
                      "%s: %zu tx, %zu events (%zu thread switches), %zu crash points (%zu "
                      "sampled), %zu image checks, %zu recoveries (%zu images skipped over "
                      "budget), %zu crashed recoveries with %zu images (%zu skipped), %zu "
                      "out-of-ts-order recoveries, %zu violations, %.1f s",
                      name.c_str(), transactions, events, thread_switches, crash_points,
                      sampled_points, image_checks, recoveries, skipped, recovery_crash_runs,
                      recovery_crash_images, recovery_crash_skipped, out_of_order, violations,
                      seconds);
        return buf;
    }
};

/// The states of every allowed set of transactions: per thread a prefix of its transactions,
/// applied in commit-timestamp order.
class reference_model {
public:
    reference_model(const digest& s0, std::vector<tx_record> txs, const trace& t) {
        std::map<std::uint32_t, std::uint16_t> thread_of;
        for (const event& e : t.events)
            if (e.kind == event_kind::tx_begin)
                thread_of[e.tx] = e.thread;
        std::map<std::uint16_t, std::vector<tx_record>> per;
        for (auto& x : txs)
            per[thread_of.at(x.id)].push_back(std::move(x));
        for (auto& [th, list] : per) {
            std::sort(list.begin(), list.end(),
                      [](const tx_record& a, const tx_record& b) { return a.id < b.id; });
            threads_.push_back(th);
            txs_.push_back(std::move(list));
        }
        std::uint64_t combos = 1;
        for (const auto& l : txs_)
            combos *= l.size() + 1;
        if (combos > 50000) { // too many: only prefixes in commit order
            std::vector<std::pair<std::uint64_t, std::pair<std::size_t, std::size_t>>> order;
            for (std::size_t d = 0; d < txs_.size(); ++d)
                for (std::size_t k = 0; k < txs_[d].size(); ++k)
                    order.push_back({txs_[d][k].ts, {d, k}});
            std::sort(order.begin(), order.end());
            std::vector<std::uint32_t> prefix(txs_.size(), 0);
            add(s0, prefix);
            for (const auto& o : order) {
                prefix[o.second.first] = static_cast<std::uint32_t>(o.second.second + 1);
                add(s0, prefix);
            }
            return;
        }
        std::vector<std::uint32_t> prefix(txs_.size(), 0);
        for (;;) {
            add(s0, prefix);
            std::size_t d = 0;
            while (d < txs_.size() && ++prefix[d] > txs_[d].size())
                prefix[d++] = 0;
            if (d == txs_.size())
                break;
        }
    }

    /// The state after every transaction.
    const digest& final_state() const { return states_[full_]; }
    std::size_t transactions() const {
        std::size_t n = 0;
        for (const auto& l : txs_)
            n += l.size();
        return n;
    }
    const std::vector<std::vector<tx_record>>& per_thread() const { return txs_; }

    /// The combinations whose state is `d`.
    std::vector<std::size_t> find(const digest& d) const {
        std::vector<std::size_t> out;
        auto [a, b] = by_hash_.equal_range(hash_digest(d));
        for (auto it = a; it != b; ++it)
            if (states_[it->second] == d)
                out.push_back(it->second);
        return out;
    }

    /// Lower bound per thread: transactions returned, or covered by CT.
    std::vector<std::uint32_t> lower(const crash_point& p, std::uint64_t ct) const {
        std::vector<std::uint32_t> lo(txs_.size());
        for (std::size_t d = 0; d < txs_.size(); ++d) {
            std::uint32_t by_ct = 0;
            while (by_ct < txs_[d].size() && txs_[d][by_ct].ts <= ct)
                ++by_ct;
            lo[d] = std::max(p.returned_count(threads_[d]), by_ct);
        }
        return lo;
    }
    std::vector<std::uint32_t> upper(const crash_point& p) const {
        std::vector<std::uint32_t> hi(txs_.size());
        for (std::size_t d = 0; d < txs_.size(); ++d)
            hi[d] = std::min<std::uint32_t>(p.begun_count(threads_[d]),
                                            static_cast<std::uint32_t>(txs_[d].size()));
        return hi;
    }
    bool fits(std::size_t combo, const std::vector<std::uint32_t>& lo,
              const std::vector<std::uint32_t>& hi) const {
        for (std::size_t d = 0; d < lo.size(); ++d)
            if (prefixes_[combo][d] < lo[d] || prefixes_[combo][d] > hi[d])
                return false;
        return true;
    }
    /// True if the combination is a prefix of all transactions in commit order.
    bool ts_prefix(std::size_t combo) const { return ts_prefix_[combo]; }

    std::string show(const std::vector<std::uint32_t>& v) const {
        std::string s;
        for (std::size_t d = 0; d < v.size(); ++d)
            s += (d ? ", " : "") + std::string("t") + std::to_string(threads_[d]) + ":" +
                 std::to_string(v[d]);
        return "{" + s + "}";
    }
    std::string show_combo(std::size_t combo) const { return show(prefixes_[combo]); }

private:
    void add(const digest& s0, const std::vector<std::uint32_t>& prefix) {
        std::vector<const tx_record*> set;
        std::uint64_t max_in = 0, min_out = ~std::uint64_t{0};
        bool full = true;
        for (std::size_t d = 0; d < txs_.size(); ++d) {
            for (std::size_t k = 0; k < txs_[d].size(); ++k) {
                if (k < prefix[d]) {
                    set.push_back(&txs_[d][k]);
                    max_in = std::max(max_in, txs_[d][k].ts);
                } else {
                    min_out = std::min(min_out, txs_[d][k].ts);
                    full = false;
                }
            }
        }
        std::sort(set.begin(), set.end(),
                  [](const tx_record* a, const tx_record* b) { return a->ts < b->ts; });
        digest s = s0;
        for (const tx_record* x : set)
            x->op(s);
        if (full)
            full_ = states_.size();
        by_hash_.emplace(hash_digest(s), states_.size());
        states_.push_back(std::move(s));
        prefixes_.push_back(prefix);
        ts_prefix_.push_back(max_in < min_out);
    }

    std::vector<std::uint16_t> threads_;
    std::vector<std::vector<tx_record>> txs_;
    std::vector<digest> states_;
    std::vector<std::vector<std::uint32_t>> prefixes_;
    std::vector<bool> ts_prefix_;
    std::unordered_multimap<std::uint64_t, std::size_t> by_hash_;
    std::size_t full_ = 0;
};

namespace detail {

/// What recovery must do with an image, computed with the library's entry parser and an
/// independent replay.
struct prediction {
    std::uint64_t ct = 0, ct_after = 0;
    std::size_t replays = 0;
    bool refuses = false;       ///< recovery must throw corruption_error and write nothing
    std::uint64_t data_key = 0; ///< hash of every line but the rings and CT, after the replay
    std::uint64_t key = 0;
};

/// Everything recovering one outcome found.
struct recovery_outcome {
    std::string failure; ///< image-level violation (empty: none)
    bool opened = false;
    digest state;
    std::vector<std::size_t> matches;
};

class sweep_run {
public:
    sweep_run(const scenario& sc, const sweep_config& cfg) : sc_(sc), cfg_(cfg) {
        res_.name = sc.name;
        if (sc.scheduled)
            tag_ = sc.name + ", " + cfg.schedule.describe();
        else
            tag_ = sc.name;
    }

    sweep_result go() {
        auto t0 = std::chrono::steady_clock::now();
        try {
            body();
        } catch (const std::exception& e) {
            res_.violation("[" + tag_ + "] harness error: " + e.what(), cfg_.max_messages,
                           "scenario");
        }
        res_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return res_;
    }

private:
    tlptm::pool_options open_options() const {
        tlptm::pool_options o = sc_.options;
        // Every write-back policy: scheduled runs choose by seed (even seeds eager; odd seeds
        // in turn lazy, prompt and adaptive: seed / 2 mod 3); the other sweeps run the
        // scenario's (eager unless it says otherwise: automatic measures nothing under a test
        // policy; crash_test covers all four). Eager keeps half the seeds, as before adaptive
        // existed, so that the mutation tests that need it (carried_as_flushed) reach it as often.
        if (sc_.scheduled && cfg_.schedule.seed % 2 == 0)
            o.write_back = tlptm::write_back::eager;
        else if (sc_.scheduled)
            o.write_back = cfg_.schedule.seed / 2 % 3 == 0   ? tlptm::write_back::lazy
                           : cfg_.schedule.seed / 2 % 3 == 1 ? tlptm::write_back::prompt
                                                             : tlptm::write_back::adaptive;
        o.durability = tlptm::durability::emulate_pmem;
        o.policy = nullptr;
        return o;
    }

    void violation(const std::string& msg, const std::string& where = "scenario") {
        res_.violation("[" + tag_ + "] " + msg, cfg_.max_messages, where);
    }

    void body() {
        file_ = std::make_unique<scratch_file>(sc_.name);
        tlptm::pool_options opt = open_options();
        {
            tlptm::pool p = tlptm::pool::create(file_->str(), opt);
            if (sc_.setup)
                sc_.setup(p);
            p.close();
        }
        initial_ = read_whole_file(file_->str());
        layout_ = pool_layout::of(initial_.data());

        tracer_options topt = cfg_.tracing;
        topt.strict = topt.strict && sc_.threads <= 1;
        tracer tr(initial_, topt);
        opt.policy = &tr;
        recorder rec(tr);
        const bool faults = topt.fail_fence >= 0 || topt.fail_flush >= 0;
        rec.expect_faults(faults);
        rec.set_reopen([&](tlptm::pool& p) {
            p.close();
            p = tlptm::pool::open(file_->str(), opt);
        });
        digest s0;
        observation live;
        {
            tlptm::pool p = tlptm::pool::open(file_->str(), opt);
            s0 = sc_.observe(p).state;
            try {
                if (sc_.scheduled)
                    run_scheduled(p, rec);
                else
                    sc_.run(p, rec);
            } catch (const std::exception& e) {
                violation(std::string("the scenario failed: ") + e.what());
            }
            for (const auto& m : rec.problems())
                violation(m);
            if (sc_.scheduled)
                check_leaks(p);
            res_.faults = rec.faulted();
            const bool fired_in_run = tr.fault_fired();
            live = sc_.observe(p);
            if (!rec.fault_seen())
                tr.check_now("the end of the run");
            try {
                p.close();
            } catch (const std::exception&) {
                // A fault may fire in close()'s checkpoint; it closes the pool all the same.
                if (!faults || fired_in_run)
                    throw;
            }
            if (faults && !fired_in_run)
                violation("the injected fault never fired in the run (the scenario makes too "
                          "few fences)");
        }
        trace_ = tr.take();
        res_.events = trace_.events.size();
        for (std::size_t i = 1; i < trace_.events.size(); ++i)
            if (trace_.events[i].thread != trace_.events[i - 1].thread)
                ++res_.thread_switches;
        for (const auto& v : trace_.violations)
            violation("tracer: " + v, "tracer");

        std::vector<tx_record> txs = rec.take();
        // Transactions of disjoint data may share a timestamp (even two of one thread, in two
        // slots); every transaction has one.
        for (const auto& x : txs)
            if (x.ts == 0)
                violation("transaction " + std::to_string(x.id) +
                          " has no commit timestamp (did it store anything?)");
        model_ = std::make_unique<reference_model>(s0, std::move(txs), trace_);
        res_.transactions = model_->transactions();
        if (!live.problem.empty())
            violation("live pool after the run: " + live.problem);
        // After a failed commit the live pool may lack the failed transaction's write-back.
        if (!rec.fault_seen() && live.state != model_->final_state())
            violation("live state after the run " + show_digest(live.state) +
                      " differs from the reference model " + show_digest(model_->final_state()));

        view_ = std::make_unique<file_view>(file_->str());
        crash_images gen(trace_, initial_, layout_, cfg_.mut, false, cfg_.images);
        if (cfg_.mut.what != mutation::kind::none && gen.mutated().empty()) {
            res_.mutation_matched = false;
            violation("mutation '" + cfg_.mut.describe() + "' matched no event of the trace");
        }
        std::size_t new_at_point = 0, last_point = ~std::size_t{0};
        gen.run([&](const crash_point& p, const image_patch& patch,
                    const std::vector<std::uint32_t>& level) {
            if (p.index != last_point) {
                last_point = p.index;
                new_at_point = 0;
            }
            ++res_.image_checks;
            prediction pred = predict(gen, patch);
            auto it = outcomes_.find(pred.key);
            if (it == outcomes_.end()) {
                if (res_.recoveries >= cfg_.max_recoveries ||
                    new_at_point >= cfg_.max_new_per_point) {
                    ++res_.skipped;
                    return true;
                }
                ++new_at_point;
                it = outcomes_.emplace(pred.key, recover(gen, patch, pred, p, level)).first;
            }
            check_point(gen, p, patch, level, pred, it->second);
            return true;
        });
        res_.crash_points = gen.points();
        res_.sampled_points = gen.sampled_points();
    }

    /// Runs a scheduled scenario with the configured scheduler and library mutation.
    void run_scheduled(tlptm::pool& p, recorder& rec) {
        scheduler sch(cfg_.schedule);
        sch.on_abort([&p] {
            if (p.is_open())
                p.state().poison("the harness aborted a scheduled run");
        });
        struct mutation_scope {
            explicit mutation_scope([[maybe_unused]] tlptm::detail::mutation m) {
#if defined(TLPTM_SCHED_HOOKS)
                tlptm::detail::active_mutation.store(m);
#endif
            }
            ~mutation_scope() {
#if defined(TLPTM_SCHED_HOOKS)
                tlptm::detail::active_mutation.store(tlptm::detail::mutation::none);
#endif
            }
        };
        {
            mutation_scope mut(cfg_.lib_mut);
            try {
                sc_.scheduled(p, rec, sch);
            } catch (...) {
                note_schedule(sch);
                throw;
            }
        }
        note_schedule(sch);
    }

    void note_schedule(const scheduler& sch) {
        const schedule_stats& st = sch.stats();
        res_.interleavings = 1;
        res_.sched_points = st.points;
        res_.stalls = st.stalls;
        res_.fingerprint = st.fingerprint;
        if (!st.failure.empty())
            violation("scheduler: " + st.failure, "scheduler");
    }

    /// After a scheduled run (every worker thread has exited): no orec stays locked, even after
    /// a persistence failure, and on a healthy pool no slot keeps in_flight (DESIGN §6).
    void check_leaks(tlptm::pool& p) {
        if (!p.is_open())
            return;
        tlptm::detail::pool_state& st = p.state();
        std::size_t locked = 0;
        for (std::uint32_t i = 0; i < tlptm::detail::orec_table::count; ++i)
            if (tlptm::detail::orec_table::locked(st.orecs[i].load()))
                ++locked;
        if (locked > 0)
            violation(std::to_string(locked) +
                          " orec(s) still locked after every thread finished (a leaked commit "
                          "lock)",
                      "leak");
        // On a poisoned pool CT never advances again: a slot whose settling failed may keep
        // in_flight (pool_state::release_slot). On a healthy one nothing may hold CT back.
        if (!st.poisoned())
            for (const auto& s : st.slots)
                if (s->in_flight.load() != 0)
                    violation("slot " + std::to_string(s->index) + " keeps in_flight " +
                                  std::to_string(s->in_flight.load()) +
                                  " after its thread exited, on a healthy pool (CT can never "
                                  "pass it)",
                              "leak");
        // Every thread gives up its slot when it exits (settle_on_exit); a thread holds one
        // slot at a time. A slot still held now belongs to no live thread but this one: a
        // thread that took a second slot left its first behind (enter_slow, found by 400
        // seeds of solo slot-steal on 2026-12-07).
        const std::uintptr_t me = tlptm::detail::this_thread_registry.record().token();
        for (const auto& s : st.slots)
            if (const std::uintptr_t h = s->holder.load(); h != 0 && h != me)
                violation("slot " + std::to_string(s->index) +
                              " is still held after every worker thread exited (nobody will "
                              "settle it or give it up)",
                          "leak");
        // An exiting thread that holds the pool solo gives it back (settle_on_exit); the pool
        // must not stay held by a thread that no longer runs (every later attempt would pay a
        // revoke, and an exited thread's token stays in solo_thread).
        const std::uint32_t f = st.exclusive_flag.load();
        constexpr std::uint32_t solo_base = tlptm::detail::pool_state::solo_flag_base;
        if (f >= solo_base && st.solo_thread.load() != me)
            violation("the pool is still held solo (slot " + std::to_string(f - solo_base) +
                          ") after every worker thread exited",
                      "leak");
    }

    // ---- prediction -----------------------------------------------------------------------

    static const std::uint8_t* line_of(const crash_images& g, const image_patch& patch,
                                       std::uint64_t line) {
        const line_bytes* c = patch.find(line);
        return c ? c->data() : g.durable().data() + line * line_size;
    }

    bool keyed_line(std::uint64_t line) const {
        std::uint64_t off = line * line_size;
        return !layout_.in_rings(off) && line != pool_layout::ct_offset / line_size;
    }

    /// Hash of the keyed lines of the bytes at `p` (a whole image).
    std::uint64_t keyed_hash(const std::uint8_t* p) const {
        std::uint64_t h = 0;
        for (std::uint64_t l = 0; l * line_size < layout_.size; ++l)
            if (keyed_line(l))
                h += hash_line(l, p + l * line_size);
        return h;
    }

    prediction predict(const crash_images& g, const image_patch& patch) {
        prediction pr;
        const std::uint64_t ring_lo = layout_.log_offset, ring_hi = layout_.log_end();
        rings_.resize((ring_hi - ring_lo) / 8);
        auto* rings = reinterpret_cast<std::uint8_t*>(rings_.data());
        std::memcpy(rings, g.durable().data() + ring_lo, ring_hi - ring_lo);
        for (const auto& [line, c] : patch.lines)
            if (line * line_size >= ring_lo && line * line_size < ring_hi)
                std::memcpy(rings + line * line_size - ring_lo, c.data(), line_size);
        std::memcpy(&pr.ct,
                    line_of(g, patch, pool_layout::ct_offset / line_size) +
                        pool_layout::ct_offset % line_size,
                    8);

        struct found {
            std::uint64_t ts;
            tlptm::detail::entry_view e;
            bool last = false;  ///< its ring's last valid entry
            bool replay = true; ///< false: its covered blocks do not match (not committed)
        };
        std::vector<found> todo;
        for (std::uint64_t r = 0; r < layout_.max_threads; ++r) {
            tlptm::detail::log_ring ring{rings + r * layout_.ring_size, layout_.ring_size};
            std::uint64_t last_ts = 0;
            ring.for_each_entry([&](const tlptm::detail::entry_view& e, std::size_t) {
                last_ts = e.ts;
                if (e.ts > pr.ct)
                    todo.push_back({e.ts, e});
            });
            if (!todo.empty() && todo.back().ts == last_ts && last_ts > pr.ct)
                todo.back().last = true;
        }
        std::sort(todo.begin(), todo.end(),
                  [](const found& a, const found& b) { return a.ts < b.ts; });
        // I4 with covered blocks: a ring's last entry whose blocks, in this image, do not hold
        // the CRC it recorded did not commit, unless a later entry writes into those blocks.
        for (std::size_t i = 0; i < todo.size(); ++i) {
            if (!todo[i].last || !todo[i].e.covered)
                continue;
            std::vector<tlptm::detail::pool_range> blocks;
            std::uint32_t want = tlptm::detail::for_each_covered(
                todo[i].e, [&](const tlptm::detail::pool_range& b) { blocks.push_back(b); });
            std::uint32_t c = tlptm::detail::crc32c_init;
            bool in_pool = true;
            for (const auto& b : blocks) {
                if (b.offset + b.size > layout_.size) {
                    in_pool = false;
                    break;
                }
                for (std::uint64_t at = b.offset; at < b.offset + b.size;) {
                    std::uint64_t line = at / line_size;
                    std::uint64_t upto = std::min(b.offset + b.size, (line + 1) * line_size);
                    c = tlptm::detail::crc32c_update(c, line_of(g, patch, line) + at % line_size,
                                                     upto - at);
                    at = upto;
                }
            }
            if (!in_pool || tlptm::detail::crc32c_final(c) == want)
                continue;
            bool explained = false;
            for (std::size_t j = i + 1; j < todo.size(); ++j)
                if (todo[j].ts > todo[i].ts) // a later entry: a larger timestamp
                    tlptm::detail::decode_records(
                        todo[j].e, layout_.base_address, [&](const tlptm::detail::log_record& r) {
                            for (const auto& b : blocks)
                                explained = explained || (r.offset + 8 > b.offset &&
                                                          r.offset < b.offset + b.size);
                        });
            todo[i].replay = explained;
        }
        // Entries may share a timestamp (commits of disjoint data), not a word.
        std::uint64_t stamps = 0;
        for (std::size_t i = 0; i < todo.size(); ++i) {
            stamps = mix64(stamps ^ todo[i].ts);
            for (std::size_t j = i + 1; j < todo.size() && todo[j].ts == todo[i].ts; ++j) {
                std::set<std::uint64_t> words;
                tlptm::detail::decode_records(
                    todo[i].e, layout_.base_address,
                    [&](const tlptm::detail::log_record& r) { words.insert(r.offset); });
                tlptm::detail::decode_records(todo[j].e, layout_.base_address,
                                              [&](const tlptm::detail::log_record& r) {
                                                  pr.refuses = pr.refuses || words.count(r.offset);
                                              });
            }
        }
        std::map<std::uint64_t, line_bytes> replayed;
        auto replayable = [&](std::uint64_t off) {
            return off % 8 == 0 && ((off >= layout_.heap_offset &&
                                     off + 8 <= layout_.heap_offset + layout_.heap_size) ||
                                    (off >= layout_.meta_offset &&
                                     off + 8 <= layout_.meta_offset + layout_.meta_size));
        };
        std::size_t replays = 0;
        for (const found& f : todo) {
            if (pr.refuses)
                break;
            if (!f.replay)
                continue;
            ++replays;
            bool ok = tlptm::detail::decode_records(
                f.e, layout_.base_address, [&](const tlptm::detail::log_record& r) {
                    if (!replayable(r.offset) || r.mask == 0) {
                        pr.refuses = true;
                        return;
                    }
                    std::uint64_t line = r.offset / line_size;
                    auto [it, fresh] = replayed.try_emplace(line);
                    if (fresh)
                        std::memcpy(it->second.data(), line_of(g, patch, line), line_size);
                    std::uint64_t w;
                    std::memcpy(&w, it->second.data() + r.offset % line_size, 8);
                    w = (w & ~r.mask) | (r.value & r.mask);
                    std::memcpy(it->second.data() + r.offset % line_size, &w, 8);
                });
            if (!ok)
                pr.refuses = true;
        }
        if (pr.refuses)
            replayed.clear();
        pr.replays = pr.refuses ? 0 : replays;
        // CT passes every entry found, also those not committed (never considered again).
        pr.ct_after = !pr.refuses && !todo.empty() ? todo.back().ts : pr.ct;

        // The keyed lines: durable ones, patched, replayed.
        std::uint64_t h = g.durable_hash();
        for (std::uint64_t l = ring_lo / line_size; l < ring_hi / line_size; ++l)
            h -= g.durable_line_hash(l);
        h -= g.durable_line_hash(pool_layout::ct_offset / line_size);
        for (const auto& [line, c] : patch.lines)
            if (keyed_line(line))
                h += hash_line(line, c.data()) - g.durable_line_hash(line);
        for (const auto& [line, c] : replayed)
            h += hash_line(line, c.data()) - hash_line(line, line_of(g, patch, line));
        pr.data_key = h;
        pr.key = mix64(h ^ mix64(pr.ct) ^ mix64(pr.ct_after + 0x1234) ^ mix64(stamps + 7) ^
                       (pr.refuses ? 0xdeadull : 0));
        if (cfg_.exact_keys)
            pr.key = mix64(patch.hash ^ pr.key);
        return pr;
    }

    // ---- recovering an image ---------------------------------------------------------------

    void install(const crash_images& g, const image_patch& patch) {
        std::memcpy(view_->data(), g.durable().data(), layout_.size);
        for (const auto& [line, c] : patch.lines)
            std::memcpy(view_->data() + line * line_size, c.data(), line_size);
    }

    std::uint64_t view_ct() const {
        std::uint64_t ct;
        std::memcpy(&ct, view_->data() + pool_layout::ct_offset, 8);
        return ct;
    }

    void dump(const crash_images& g, const image_patch& patch) {
        if (cfg_.dump_dir.empty() || dumped_ >= 8)
            return;
        std::vector<std::uint8_t> img = g.durable();
        for (const auto& [line, c] : patch.lines)
            std::memcpy(img.data() + line * line_size, c.data(), line_size);
        std::string name = sc_.name;
        for (char& ch : name)
            if (ch == '/' || ch == ' ')
                ch = '-';
        write_whole_file(cfg_.dump_dir + "/" + name + "-" + std::to_string(dumped_++) + ".pool",
                         img.data(), img.size());
    }

    /// Opens the installed image, checks what recovery did against the prediction, observes.
    recovery_outcome recover_installed(const prediction& pr) {
        recovery_outcome out;
        std::vector<std::string> bad;
        try {
            tlptm::pool p = tlptm::pool::open(file_->str(), open_options());
            out.opened = true;
            const tlptm::recovery_report& rep = p.last_recovery();
            if (pr.refuses)
                bad.push_back("recovery accepted an image with a log entry it must refuse");
            if (rep.checkpoint_before != pr.ct)
                bad.push_back("recovery reports CT " + std::to_string(rep.checkpoint_before) +
                              ", the image holds " + std::to_string(pr.ct) + " (I2)");
            if (rep.entries_replayed != pr.replays)
                bad.push_back("recovery replayed " + std::to_string(rep.entries_replayed) +
                              " entries; the image has " + std::to_string(pr.replays) +
                              " valid entries with ts > CT " + std::to_string(pr.ct) + " (I2)");
            if (rep.checkpoint_after != pr.ct_after || view_ct() != pr.ct_after)
                bad.push_back("CT after recovery is " + std::to_string(view_ct()) + " (reported " +
                              std::to_string(rep.checkpoint_after) + "), expected " +
                              std::to_string(pr.ct_after) + " (I2)");
            if (keyed_hash(view_->data()) != pr.data_key)
                bad.push_back("recovery wrote something other than the records of the valid "
                              "entries with ts > CT (I2, I5)");
            observation obs = sc_.observe(p);
            out.state = obs.state;
            if (!obs.problem.empty())
                bad.push_back("recovered structure: " + obs.problem);
            std::uint64_t in_use = p.stats().heap.bytes_in_use;
            if (obs.problem.empty() && in_use != obs.reachable_bytes)
                bad.push_back("the allocator has " + std::to_string(in_use) +
                              " bytes in use after recovery, the root and the reachable "
                              "objects take " +
                              std::to_string(obs.reachable_bytes) +
                              (in_use > obs.reachable_bytes ? " (leak)" : " (double allocation)"));
            std::uint64_t before = keyed_hash(view_->data());
            tlptm::recovery_report again = p.recover();
            if (again.entries_replayed != 0 || keyed_hash(view_->data()) != before)
                bad.push_back("a second recovery replayed " +
                              std::to_string(again.entries_replayed) +
                              " entries and changed the pool (I5)");
            if (sc_.observe(p).state != out.state)
                bad.push_back("a second recovery changed the observed state (I5)");
            p.close();
        } catch (const tlptm::corruption_error& e) {
            if (!pr.refuses)
                bad.push_back(std::string("recovery threw corruption_error: ") + e.what());
        } catch (const std::exception& e) {
            bad.push_back(std::string("opening the image threw: ") + e.what());
        }
        for (const auto& b : bad)
            out.failure += (out.failure.empty() ? "" : "; ") + b;
        return out;
    }

    recovery_outcome recover(const crash_images& g, const image_patch& patch, const prediction& pr,
                             const crash_point& p, const std::vector<std::uint32_t>& level) {
        ++res_.recoveries;
        install(g, patch);
        std::vector<std::uint8_t> image;
        bool crash_recovery = pr.replays > 0 && !pr.refuses &&
                              res_.recovery_crash_runs < cfg_.recovery_crashes &&
                              (replaying_seen_++ % 3 == 0);
        if (crash_recovery)
            image.assign(view_->data(), view_->data() + layout_.size);
        recovery_outcome out = recover_installed(pr);
        if (out.opened)
            out.matches = model_->find(out.state);
        if (!out.failure.empty()) {
            violation(p.where + ", image " + g.describe(level) + ": " + out.failure, p.where);
            dump(g, patch);
        } else if (crash_recovery) {
            crash_recovery_of(image, pr, out.state, p.where);
        }
        return out;
    }

    /// I5: traces recovery of `image`, crashes it at each of its points, recovers again.
    void crash_recovery_of(const std::vector<std::uint8_t>& image, const prediction& pr,
                           const digest& state, const std::string& where) {
        ++res_.recovery_crash_runs;
        std::memcpy(view_->data(), image.data(), layout_.size);
        tracer tr(image);
        tlptm::pool_options opt = open_options();
        opt.policy = &tr;
        try {
            tlptm::pool p = tlptm::pool::open(file_->str(), opt);
            p.close();
        } catch (const std::exception& e) {
            violation(where + ": traced recovery threw: " + e.what(), where);
            return;
        }
        trace t = tr.take();
        for (const auto& v : t.violations)
            violation(where + ": during recovery: " + v, where + " / recovery");
        if (keyed_hash(view_->data()) != pr.data_key || view_ct() != pr.ct_after)
            violation(where + ": traced recovery wrote other bytes than the untraced one", where);
        crash_images g(t, image, layout_, cfg_.recovery_mut, true, cfg_.recovery_images);
        if (cfg_.recovery_mut.what != mutation::kind::none && g.mutated().empty()) {
            res_.mutation_matched = false;
            violation("recovery mutation '" + cfg_.recovery_mut.describe() +
                      "' matched no event of recovery");
        }
        // The budget is shared out evenly over recovery's crash points (counted first).
        std::size_t points = 0;
        {
            crash_images counter(t, image, layout_, cfg_.recovery_mut, true, image_budget{1});
            counter.run([](const crash_point&, const image_patch&,
                           const std::vector<std::uint32_t>&) { return false; });
            points = std::max<std::size_t>(counter.points(), 1);
        }
        const std::size_t per_point =
            std::max<std::size_t>(cfg_.max_per_recovery_crash / points, 2);
        std::unordered_set<std::uint64_t> seen;
        std::size_t at_point = 0, last_point = ~std::size_t{0};
        g.run([&](const crash_point& p, const image_patch& patch,
                  const std::vector<std::uint32_t>& level) {
            if (p.index != last_point) {
                last_point = p.index;
                at_point = 0;
            }
            if (!seen.insert(patch.hash).second)
                return true;
            if (at_point >= per_point) {
                ++res_.recovery_crash_skipped;
                return true;
            }
            ++at_point;
            ++res_.recovery_crash_images;
            install(g, patch);
            std::string bad;
            try {
                tlptm::pool q = tlptm::pool::open(file_->str(), open_options());
                if (view_ct() != pr.ct_after)
                    bad = "CT is " + std::to_string(view_ct()) +
                          ", the uninterrupted recovery "
                          "left " +
                          std::to_string(pr.ct_after);
                else if (keyed_hash(view_->data()) != pr.data_key)
                    bad = "the heap differs from the uninterrupted recovery's";
                else if (sc_.observe(q).state != state)
                    bad = "the observed state differs from the uninterrupted recovery's";
                q.close();
            } catch (const std::exception& e) {
                bad = std::string("recovery threw: ") + e.what();
            }
            if (!bad.empty()) {
                violation(where + ": recovery crashed " + p.where + ", image " + g.describe(level) +
                              ", then recovered again: " + bad + " (I5)",
                          where + " / recovery " + p.where);
                dump(g, patch);
            }
            return true;
        });
    }

    // ---- the model check of one crash point ------------------------------------------------

    void check_point(const crash_images& g, const crash_point& p, const image_patch& patch,
                     const std::vector<std::uint32_t>& level, const prediction& pr,
                     const recovery_outcome& out) {
        if (!out.failure.empty() || !out.opened) {
            // Counted once, when the outcome was recovered; every point that reaches it fails.
            res_.failing_points.emplace(p.where, out.failure);
            return;
        }
        std::vector<std::uint32_t> lo = model_->lower(p, pr.ct), hi = model_->upper(p);
        bool fit = false, in_order = false;
        for (std::size_t c : out.matches) {
            if (model_->fits(c, lo, hi)) {
                fit = true;
                in_order = in_order || model_->ts_prefix(c);
            }
        }
        if (fit && !in_order && res_.out_of_order++ == 0)
            res_.out_of_order_example = p.where + ", image " + g.describe(level) + ": recovered " +
                                        model_->show_combo(out.matches.front()) +
                                        " transactions per thread, not a prefix in timestamp order";
        if (fit)
            return;
        std::string msg = p.where + ", image " + g.describe(level) + ": recovered state " +
                          show_digest(out.state);
        if (out.matches.empty()) {
            msg += " is not the state of any allowed set of transactions (I1)";
        } else {
            msg += " is the state after " + model_->show_combo(out.matches.front()) +
                   " transactions per thread";
        }
        msg += "; required at least " + model_->show(lo) + " (returned, or ts <= CT " +
               std::to_string(pr.ct) + ") and at most " + model_->show(hi) + " (begun)";
        violation(msg, p.where);
        dump(g, patch);
    }

    const scenario& sc_;
    const sweep_config& cfg_;
    sweep_result res_;
    std::unique_ptr<scratch_file> file_;
    std::unique_ptr<file_view> view_;
    std::vector<std::uint8_t> initial_;
    pool_layout layout_;
    trace trace_;
    std::unique_ptr<reference_model> model_;
    std::unordered_map<std::uint64_t, recovery_outcome> outcomes_;
    std::vector<std::uint64_t> rings_;
    std::size_t replaying_seen_ = 0, dumped_ = 0;
    std::string tag_;
};

} // namespace detail

/// Runs `sc` on a traced pool and checks every crash image (see the top of this file).
inline sweep_result run_sweep(const scenario& sc, const sweep_config& cfg) {
    return detail::sweep_run(sc, cfg).go();
}

} // namespace tlptm_harness
