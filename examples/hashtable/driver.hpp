// The workload driver: workloads a / b / c of the paper (DESIGN.md §9), written once and run
// over every backend (tlptm in each log mode, PMDK, the volatile table), as the OneFile / Romulus
// benchmarks template a data structure on the TM.
//
// One run = one fresh pool: preload (b, c; not measured), then `ops` operations split over
// the threads, one transaction each, timed one by one; then a check that the table holds
// exactly what the run put in it.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "affinity.hpp"
#include "backends.hpp"
#include "progress.hpp"
#include "results.hpp"
#include "value.hpp"

namespace workloads {

/// Everything one run needs.
struct run_config {
    workload wl = workload::a;
    tlptm::log_mode mode = tlptm::log_mode::tlptm; ///< tlptm backend only
    std::uint32_t write_ns = 0;
    std::uint64_t ops = 0;
    std::uint64_t preload = 0; ///< keys inserted before the measured phase (b and c only)
    std::size_t value_size = 8;
    value_kind values = value_kind::small;
    unsigned threads = 1;
    std::uint64_t seed = 1;
    unsigned rep = 0;  ///< which repetition of this configuration, from 0 (same seed every time)
    unsigned reps = 1; ///< how many it has: the progress label names the repetition if > 1
    std::string pool_path;
    bool progress = false; ///< show a progress indicator on stderr on long runs
    /// Worker t runs on cpus[t % cpus.size()] (affinity.hpp); empty: where the scheduler puts
    /// it. The caller pins itself (preload and checks) to cpus[0], beside worker 0.
    std::vector<int> cpus;
};

namespace detail {

/// The key of key number `id`: keys are 1, 2, 3... (0 is never a key).
constexpr std::uint64_t key_of(std::uint64_t id) noexcept {
    return id + 1;
}

/// What one worker thread did, in its own order.
struct alignas(64) thread_log { // written per op by its thread only: no line shared
    std::vector<std::uint64_t> latency_ns;
    /// (key id, seed of the value it now holds) after each insert and update, in order.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> writes;
    std::uint64_t first_id = 0; ///< ids [first_id, first_id + inserted) are this thread's inserts
    std::uint64_t limit = 0;    ///< end of the ids this thread may insert
    std::uint64_t inserted = 0;
    std::uint64_t updated = 0;
    std::uint64_t missing = 0;   ///< updates that did not find an existing key (a failure)
    std::uint64_t duplicate = 0; ///< inserts that found their new key present (a failure)
    std::chrono::steady_clock::time_point end;
    std::uint64_t cpu_ns = 0; ///< CPU time of the measured loop (this thread only)
    std::exception_ptr error;
};

/// CPU time of the calling thread: unlike wall time it does not grow while other processes
/// run (a shared machine), yet it includes the thread's stalls on fences and cache misses.
inline std::uint64_t thread_cpu_ns() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Checks the table after a run: its size is preload + inserts, every key is found with a
/// value it may hold (its latest value; with several threads, the latest of some thread that
/// wrote it), keys never inserted are absent, erase works, and all of it is found again after
/// the pool is closed and reopened. Returns "" or what is wrong.
template <class Backend>
std::string verify(Backend& be, const run_config& cfg, std::uint64_t preload,
                   const std::vector<std::uint64_t>& preload_seeds,
                   const std::vector<thread_log>& logs) {
    constexpr std::size_t N = sizeof(typename Backend::value_type);
    std::uint64_t expected = preload;
    for (const thread_log& l : logs)
        expected += l.inserted;
    for (const thread_log& l : logs) {
        if (l.missing != 0)
            return std::to_string(l.missing) + " updates did not find an existing key";
        if (l.duplicate != 0)
            return std::to_string(l.duplicate) + " inserts found their new key already present";
    }
    if (std::uint64_t s = be.size(); s != expected)
        return "size() is " + std::to_string(s) + ", expected " + std::to_string(preload) +
               " preloaded + " + std::to_string(expected - preload) + " inserted";
    if (std::uint64_t c = be.count_nodes(); c != expected)
        return "the chains hold " + std::to_string(c) + " nodes, expected " +
               std::to_string(expected);

    // The latest value each thread wrote to each key it wrote.
    std::vector<std::unordered_map<std::uint64_t, std::uint64_t>> last(logs.size());
    for (std::size_t t = 0; t < logs.size(); ++t) {
        last[t].reserve(logs[t].writes.size());
        for (auto [id, seed] : logs[t].writes)
            last[t][id] = seed;
    }
    auto check = [&](std::uint64_t id) -> std::string {
        std::optional<typename Backend::value_type> v = be.lookup(key_of(id));
        if (!v)
            return "key " + std::to_string(key_of(id)) + " is missing";
        if (!well_formed<N>(cfg.values, *v))
            return "the value of key " + std::to_string(key_of(id)) + " is torn";
        std::uint64_t got = seed_of<N>(*v);
        bool written = false;
        for (const auto& m : last) {
            if (auto it = m.find(id); it != m.end()) {
                written = true;
                if (it->second == got)
                    return "";
            }
        }
        if (!written && id < preload && preload_seeds[id] == got)
            return "";
        return "key " + std::to_string(key_of(id)) + " holds " + std::to_string(got) +
               ", not its latest value";
    };
    std::unordered_set<std::uint64_t> erased_ids;
    // Every key put in and not erased since: found with a value it may hold.
    auto check_all = [&]() -> std::string {
        for (std::uint64_t id = 0; id < preload; ++id)
            if (!erased_ids.contains(id))
                if (std::string e = check(id); !e.empty())
                    return e;
        for (const thread_log& l : logs)
            for (std::uint64_t id = l.first_id; id < l.first_id + l.inserted; ++id)
                if (!erased_ids.contains(id))
                    if (std::string e = check(id); !e.empty())
                        return e;
        return "";
    };
    if (std::string e = check_all(); !e.empty())
        return e;
    for (const thread_log& l : logs) {
        // Ranges of ids are disjoint: the thread's next id was never inserted by anyone.
        if (l.first_id + l.inserted < l.limit && be.lookup(key_of(l.first_id + l.inserted)))
            return "key " + std::to_string(key_of(l.first_id + l.inserted)) +
                   " was never inserted but is found";
    }
    if (be.lookup(0))
        return "key 0 was never inserted but is found";

    // Erase up to 64 keys spread over the table; each must vanish, and only once.
    std::uint64_t erased = 0;
    const std::uint64_t step = std::max<std::uint64_t>(1, expected / 64);
    for (std::uint64_t i = 0; i < expected && erased < 64; i += step) {
        std::uint64_t id = i < preload ? i : 0;
        if (i >= preload) { // the i-th inserted key, in thread order
            std::uint64_t rest = i - preload;
            for (const thread_log& l : logs) {
                if (rest < l.inserted) {
                    id = l.first_id + rest;
                    break;
                }
                rest -= l.inserted;
            }
        }
        if (!be.erase(key_of(id)))
            return "erase of key " + std::to_string(key_of(id)) + " found nothing";
        if (be.lookup(key_of(id)))
            return "key " + std::to_string(key_of(id)) + " is found after its erase";
        if (be.erase(key_of(id)))
            return "key " + std::to_string(key_of(id)) + " was erased twice";
        erased_ids.insert(id);
        ++erased;
    }
    if (std::uint64_t s = be.size(); s != expected - erased)
        return "size() is " + std::to_string(s) + " after " + std::to_string(erased) +
               " erases, expected " + std::to_string(expected - erased);
    if (std::uint64_t c = be.count_nodes(); c != expected - erased)
        return "the chains hold " + std::to_string(c) + " nodes after the erases, expected " +
               std::to_string(expected - erased);

    // Close and reopen the pool: the table must be found as it was.
    be.reopen();
    if (std::uint64_t s = be.size(); s != expected - erased)
        return "size() is " + std::to_string(s) + " after reopening the pool, expected " +
               std::to_string(expected - erased);
    if (std::uint64_t c = be.count_nodes(); c != expected - erased)
        return "the chains hold " + std::to_string(c) + " nodes after reopening the pool, " +
               "expected " + std::to_string(expected - erased);
    if (std::string e = check_all(); !e.empty())
        return "after reopening the pool: " + e;
    for (std::uint64_t id : erased_ids)
        if (be.lookup(key_of(id)))
            return "after reopening the pool: erased key " + std::to_string(key_of(id)) +
                   " is found";
    return "";
}

} // namespace detail

/// Runs one workload on a fresh pool of `Backend` and returns its figures. Never throws for a
/// failure of the run itself (an exception of the TM, a failed check): that goes to
/// run_result::error.
template <class Backend> run_result run(const run_config& cfg) {
    using clock = std::chrono::steady_clock;
    using value_type = typename Backend::value_type;
    constexpr std::size_t N = sizeof(value_type);

    run_result res;
    res.backend = Backend::name;
    res.wl = cfg.wl;
    res.mode = Backend::has_stats ? tlptm::to_string(cfg.mode) : Backend::name;
    res.write_ns = cfg.write_ns;
    res.threads = cfg.threads;
    res.ops = cfg.ops;
    res.value_size = N;
    res.values = cfg.values;
    res.rep = cfg.rep;
    res.pinned = !cfg.cpus.empty();
    res.has_stats = Backend::has_stats;
    const std::uint64_t preload = cfg.wl == workload::a ? 0 : cfg.preload;
    res.preload = preload;

    const unsigned threads = std::max(1u, cfg.threads);
    std::vector<detail::thread_log> logs(threads);
    std::uint64_t next_id = preload;
    for (unsigned t = 0; t < threads; ++t) {
        std::uint64_t n = cfg.ops / threads + (t < cfg.ops % threads ? 1 : 0);
        logs[t].first_id = next_id;
        logs[t].limit = next_id + n;
        // Sized (so written, and their pages faulted in) before the measured loop, which only
        // overwrites them: first-touch page faults cost ~11 us each on a 2-vCPU KVM guest, ~70 ns
        // per operation if taken in the loop, for the driver's bookkeeping and not the TM.
        logs[t].latency_ns.resize(n);
        logs[t].writes.resize(n);
        next_id += n;
    }

    try {
        backend_config bc;
        bc.path = cfg.pool_path;
        bc.mode = cfg.mode;
        bc.write_ns = cfg.write_ns;
        bc.bucket_count = std::bit_ceil(std::max<std::uint64_t>(preload + cfg.ops, 16));
        bc.max_nodes = preload + cfg.ops;
        bc.threads = threads;
        Backend be(bc);

        // Preload (not measured): several inserts per transaction.
        std::vector<std::uint64_t> preload_seeds(preload);
        rng prng{cfg.seed ^ 0x5EED0000ull};
        const std::uint64_t per_tx = std::clamp<std::uint64_t>(16384 / sizeof(value_type), 1, 256);
        std::uint64_t duplicates = 0;
        for (std::uint64_t first = 0; first < preload; first += per_tx) {
            std::uint64_t last = std::min(preload, first + per_tx);
            for (std::uint64_t id = first; id < last; ++id)
                preload_seeds[id] = cfg.values == value_kind::small ? 1 : prng.next();
            be.batch([&] {
                duplicates = 0;
                for (std::uint64_t id = first; id < last; ++id)
                    if (!be.insert(detail::key_of(id),
                                   make_value<N>(cfg.values, preload_seeds[id])))
                        ++duplicates;
            });
            if (duplicates != 0) {
                res.error = "preload: a new key was found present";
                return res;
            }
        }

        const tlptm::stats before = be.stats();
        std::atomic<unsigned> ready{0}, finished{0};
        std::atomic<bool> go{false};
        std::atomic<std::uint64_t> done{0};
        auto worker = [&](unsigned t) {
            detail::thread_log& log = logs[t];
            const std::uint64_t n = log.limit - log.first_id;
            rng r{mix64(cfg.seed * 0x9E3779B97F4A7C15ull + t + 1) ^
                  (static_cast<std::uint64_t>(cfg.wl) << 56)};
            // Held in a local, and tested below as `!= small`, so that the compiler sees that
            // `v` is made for every operation that reads it (the volatile backend's update,
            // inlined, is otherwise a -Wmaybe-uninitialized false positive).
            const value_kind values = cfg.values;
            // On its CPU before anything else: worker 0 beside the thread that loaded the table.
            log.error = pin_worker(cfg.cpus, t);
            // The thread's one-time set-up (tlptm: its slot and the first touch of every page
            // of its log ring) before the clock starts, as a long-running program pays it once.
            bool prepared = !log.error;
            try {
                if (prepared)
                    be.prepare_thread();
            } catch (...) {
                log.error = std::current_exception();
                prepared = false;
            }
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire))
                std::this_thread::yield();
            std::uint64_t i = 0, written = 0;
            const std::uint64_t cpu0 = detail::thread_cpu_ns();
            try {
                for (; prepared && i < n; ++i) {
                    const bool insert =
                        cfg.wl == workload::a || (cfg.wl == workload::b && (r.next() & 1) != 0);
                    std::uint64_t id;
                    if (insert) {
                        id = log.first_id + log.inserted;
                    } else { // a random existing key: preloaded, or inserted by this thread
                        std::uint64_t pick = r.below(preload + log.inserted);
                        id = pick < preload ? pick : log.first_id + (pick - preload);
                    }
                    const std::uint64_t key = detail::key_of(id);
                    std::uint64_t seed = 0;
                    // Made only where it is used (inserts, random values): zeroing a large
                    // value that a counter update never reads was a `rep stos` right after the
                    // previous commit's fence, which waited for it (256 B values: ~8 % of the
                    // loop's samples, outside the timed call but in the throughput).
                    value_type v;
                    if (values != value_kind::small || insert) {
                        seed = values == value_kind::small ? 1 : r.next();
                        v = make_value<N>(values, seed);
                    }
                    bool ok;
                    const auto t0 = clock::now();
                    if (insert) {
                        ok = be.insert(key, v);
                    } else if (values == value_kind::small) { // the counter goes up by one
                        std::optional<value_type> nv =
                            be.update_with(key, [&](const value_type& old) {
                                return make_value<N>(value_kind::small, seed_of<N>(old) + 1);
                            });
                        ok = nv.has_value();
                        if (ok)
                            seed = seed_of<N>(*nv);
                    } else {
                        ok = be.update(key, v);
                    }
                    const auto t1 = clock::now();
                    log.latency_ns[i] = static_cast<std::uint64_t>(
                        std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
                    if (insert) {
                        if (ok)
                            ++log.inserted;
                        else
                            ++log.duplicate;
                    } else {
                        if (ok)
                            ++log.updated;
                        else
                            ++log.missing;
                    }
                    if (ok)
                        log.writes[written++] = {id, seed};
                    if ((i & 63) == 63)
                        done.fetch_add(64, std::memory_order_relaxed);
                }
            } catch (...) {
                log.error = std::current_exception();
            }
            log.end = clock::now();
            log.cpu_ns = detail::thread_cpu_ns() - cpu0;
            log.latency_ns.resize(i); // the operations that ran (an exception ends the loop)
            log.writes.resize(written);
            finished.fetch_add(1, std::memory_order_release);
        };

        std::vector<std::thread> pool_threads;
        clock::time_point start;
        {
            progress_meter meter(progress_label(res, cfg.reps), cfg.progress);
            for (unsigned t = 0; t < threads; ++t)
                pool_threads.emplace_back(worker, t);
            while (ready.load() < threads)
                std::this_thread::yield();
            start = clock::now();
            go.store(true, std::memory_order_release);
            while (finished.load(std::memory_order_acquire) < threads) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                meter.update(done.load(std::memory_order_relaxed), cfg.ops);
            }
            for (std::thread& th : pool_threads)
                th.join();
        }
        clock::time_point end = start;
        for (const detail::thread_log& l : logs) {
            end = std::max(end, l.end);
            if (l.error)
                std::rethrow_exception(l.error);
        }
        res.pm = be.stats() - before;

        res.seconds = std::chrono::duration<double>(end - start).count();
        std::vector<std::uint64_t> lat;
        lat.reserve(cfg.ops);
        for (const detail::thread_log& l : logs) {
            lat.insert(lat.end(), l.latency_ns.begin(), l.latency_ns.end());
            res.inserts += l.inserted;
            res.cpu_seconds += static_cast<double>(l.cpu_ns) * 1e-9;
            res.updates += l.updated;
        }
        res.measure_latency(lat);

        res.error = detail::verify(be, cfg, preload, preload_seeds, logs);
        res.verified = res.error.empty();
    } catch (const std::exception& e) {
        res.error = e.what();
    }
    return res;
}

} // namespace workloads
