// Crash consistency under controlled thread interleavings (issue 11): the scenarios of
// tests/harness/scheduled_scenarios.hpp run under the seeded scheduler of
// tests/harness/scheduler.hpp (one thread at a time, the seed chooses who continues at every
// scheduling point of the library and of the persistence policy), and the trace of each
// interleaving is swept for crash images like any other (docs/crash-testing.md).
//
// Environment:
//   TLPTM_SCHED=long            many more interleavings per scenario, larger image budgets
//   TLPTM_SCHED_SEED=<n>        replay one seed (of every scenario, or of TLPTM_SCHED_SCENARIO)
//   TLPTM_SCHED_SEEDS=<n>       seeds 1..n per scenario
//   TLPTM_SCHED_SCENARIO=<s>    only the scenarios whose name contains s
//
// Built with TLPTM_SCHED_HOOKS (tests/CMakeLists.txt): the library's scheduling points and its
// test-only mutations exist only in this executable and persistency_test.

#include "harness/scheduled_scenarios.hpp"
#include "harness/scheduler.hpp"
#include "harness/sweep.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TLPTM_SCHED_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TLPTM_SCHED_SANITIZED 1
#endif
#endif

#if !defined(TLPTM_SCHED_HOOKS)
#error "schedule_crash_test needs TLPTM_SCHED_HOOKS (tests/CMakeLists.txt defines it)"
#endif

namespace {

using namespace tlptm_harness;
namespace ss = tlptm_harness::scheduled;
using lib_mutation = tlptm::detail::mutation;

constexpr tlptm::log_mode all_modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                         tlptm::log_mode::cblo, tlptm::log_mode::tlptm};

/// The log mode of a seed: every mode gets a share of the interleavings.
tlptm::log_mode mode_of(std::uint64_t seed) {
    return all_modes[seed % 4];
}

/// The fence that fails in a fault run of a seed (0-based among all fences of the run).
std::int64_t fault_fence_of(std::uint64_t seed) {
    // Below the fences the fault scenario makes (3 threads x 5 transactions, one fence each,
    // and the rings' first generations): the fault fires inside the run.
    return static_cast<std::int64_t>(seed * 7 % 17);
}

struct settings {
    bool long_run = false;
    std::uint64_t seeds = 0; ///< seeds 1..seeds per scenario
    std::uint64_t only_seed = 0;
    std::string only_scenario;
    sweep_config cfg;
};

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

settings get_settings() {
    settings s;
    const char* mode = std::getenv("TLPTM_SCHED");
    s.long_run = mode && std::string(mode) == "long";
    if (const char* sc = std::getenv("TLPTM_SCHED_SCENARIO"))
        s.only_scenario = sc;
    s.only_seed = env_u64("TLPTM_SCHED_SEED", 0);
    s.cfg.max_messages = 4;
    if (s.long_run) {
        s.seeds = 150;
        s.cfg.images = {1024, 48, 48, 12, 1};
        s.cfg.max_recoveries = 2000;
        s.cfg.max_new_per_point = 24;
        s.cfg.recovery_crashes = 3;
        s.cfg.max_per_recovery_crash = 48;
        s.cfg.recovery_images = {256, 16, 16, 4, 1};
    } else {
#if defined(TLPTM_SCHED_SANITIZED)
        s.seeds = 4;
#else
        s.seeds = 10;
#endif
        s.cfg.images = {256, 16, 16, 4, 1};
        s.cfg.max_recoveries = 150;
        s.cfg.max_new_per_point = 6;
        s.cfg.recovery_crashes = 1;
        s.cfg.max_per_recovery_crash = 12;
        s.cfg.recovery_images = {64, 8, 8, 2, 1};
    }
    s.seeds = env_u64("TLPTM_SCHED_SEEDS", s.seeds);
#if defined(TLPTM_SCHED_SANITIZED)
    s.cfg.schedule.stall = std::chrono::milliseconds(40);
#endif
    return s;
}

std::vector<std::uint64_t> seeds_of(const settings& s) {
    if (s.only_seed != 0)
        return {s.only_seed};
    std::vector<std::uint64_t> v;
    for (std::uint64_t k = 1; k <= s.seeds; ++k)
        v.push_back(k);
    return v;
}

sweep_config config_for(const settings& s, std::uint64_t seed) {
    sweep_config cfg = s.cfg;
    schedule_options o = schedule_options::for_seed(seed);
    o.stall = s.cfg.schedule.stall;
    cfg.schedule = o;
    cfg.images.seed = seed;
    cfg.recovery_images.seed = seed;
    return cfg;
}

struct family_total {
    sweep_result sum;
    std::set<std::uint64_t> fingerprints;
    std::size_t runs = 0;
};

void report(const std::string& what, const family_total& t) {
    MESSAGE(what << ": " << t.runs << " interleavings (" << t.fingerprints.size() << " distinct), "
                 << t.sum.transactions << " transactions, " << t.sum.sched_points
                 << " scheduling points, " << t.sum.stalls << " stalls, " << t.sum.crash_points
                 << " crash points, " << t.sum.image_checks << " images checked ("
                 << t.sum.recoveries << " recovered, " << t.sum.skipped << " skipped over budget), "
                 << t.sum.violations << " violations, " << t.sum.seconds << " s");
}

/// Sweeps one interleaving per seed of the scenario `make(mode, seed)`; expects no violation.
/// `tweak` adjusts the configuration of a seed (fault injection).
family_total sweep_family(const std::string& what,
                          const std::function<scenario(tlptm::log_mode, std::uint64_t)>& make,
                          const std::function<void(sweep_config&, std::uint64_t)>& tweak = {}) {
    settings s = get_settings();
    family_total t;
    if (!s.only_scenario.empty() && what.find(s.only_scenario) == std::string::npos)
        return t;
    for (std::uint64_t seed : seeds_of(s)) {
        sweep_config cfg = config_for(s, seed);
        if (tweak)
            tweak(cfg, seed);
        scenario sc = make(mode_of(seed), seed);
        sweep_result r = run_sweep(sc, cfg);
        CHECK(r.interleavings == 1);
        CHECK(r.crash_points > 0);
        if (r.violations != 0) {
            std::string msgs;
            for (const auto& m : r.messages)
                msgs += "\n  " + m;
            FAIL_CHECK(what << ": " << r.violations << " violations with "
                            << cfg.schedule.describe() << " (replay: TLPTM_SCHED_SEED=" << seed
                            << " TLPTM_SCHED_SCENARIO=" << what << ")" << msgs);
        }
        t.sum += r;
        t.fingerprints.insert(r.fingerprint);
        ++t.runs;
    }
    if (t.runs > 0)
        report(what, t);
    return t;
}

} // namespace

// ---- the scheduler itself ---------------------------------------------------------------------

TEST_CASE("scheduler: one thread at a time; a seed replays its interleaving") {
    std::set<std::uint64_t> distinct;
    bool lost_update = false;
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        std::uint64_t fp[2] = {0, 0};
        std::uint64_t stalls = 0;
        for (int rep = 0; rep < 2; ++rep) {
            scheduler sch(schedule_options::for_seed(seed));
            // A plain counter incremented with a scheduling point between its read and its
            // write: no update is lost only if the threads never run at the same time.
            std::uint64_t counter = 0;
            std::atomic<int> inside{0};
            std::atomic<bool> overlap{false};
            auto body = [&](int) {
                for (int k = 0; k < 50; ++k) {
                    if (inside.fetch_add(1) != 0)
                        overlap = true;
                    std::uint64_t c = counter;
                    inside.fetch_sub(1);
                    scheduler::yield();
                    if (inside.fetch_add(1) != 0)
                        overlap = true;
                    counter = c + 1;
                    inside.fetch_sub(1);
                }
            };
            sch.run({body, body, body});
            CHECK_FALSE(overlap.load());
            lost_update = lost_update || counter < 150; // the scheduler did interleave
            CHECK(sch.stats().failure.empty());
            fp[rep] = sch.stats().fingerprint;
            stalls += sch.stats().stalls;
        }
        if (stalls == 0) // no timing-dependent hand-over: the replay is exact
            CHECK_MESSAGE(fp[0] == fp[1], "seed " << seed << " did not replay");
        distinct.insert(fp[0]);
    }
    MESSAGE(distinct.size() << " distinct interleavings of 12 seeds");
    CHECK(distinct.size() >= 6);
    CHECK(lost_update);
}

TEST_CASE("scheduler: a thread blocked on a mutex held by a parked thread does not deadlock") {
    std::uint64_t stalls = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        schedule_options o = schedule_options::for_seed(seed);
        o.stall = std::chrono::milliseconds(5);
        scheduler sch(o);
        std::mutex m;
        int shared = 0;
        auto body = [&](int) {
            for (int k = 0; k < 5; ++k) {
                std::lock_guard lk(m); // blocks without a scheduling point
                int v = shared;
                scheduler::yield(); // parked while holding the mutex
                shared = v + 1;
            }
        };
        sch.run({body, body});
        CHECK(shared == 10);
        CHECK_MESSAGE(sch.stats().failure.empty(), sch.stats().failure);
        stalls += sch.stats().stalls;
    }
    MESSAGE(stalls << " stalls handed over");
    CHECK(stalls > 0);
}

TEST_CASE("scheduler: a true deadlock fails the run with its seed") {
    schedule_options o = schedule_options::for_seed(4);
    o.stall = std::chrono::milliseconds(5);
    o.deadlock = std::chrono::milliseconds(300);
    scheduler sch(o);
    std::timed_mutex a, b;
    std::atomic<int> gave_up{0}, holding{0};
    auto body = [&](int me) {
        std::timed_mutex& first = me == 0 ? a : b;
        std::timed_mutex& second = me == 0 ? b : a;
        std::lock_guard lk(first);
        holding.fetch_add(1);
        while (holding.load() < 2) // both hold their first mutex before either tries its second
            scheduler::wait();
        if (second.try_lock_for(std::chrono::seconds(2)))
            second.unlock();
        else
            gave_up.fetch_add(1);
    };
    sch.run({body, body});
    MESSAGE(sch.stats().failure);
    CHECK(sch.stats().failure.find("deadlock") != std::string::npos);
    CHECK(sch.stats().failure.find("seed 4") != std::string::npos);
    CHECK(gave_up.load() >= 1);
}

// ---- finer write-back announcements -----------------------------------------------------------

TEST_CASE("crash images: per-word stores of a line persist as prefixes, word by word") {
    pool_layout l;
    l.size = 4096;
    l.heap_offset = 1024;
    l.heap_size = 3072;
    std::vector<std::uint8_t> initial(l.size, 0);
    trace t;
    const std::uint64_t a = 2048;
    for (std::uint64_t w = 0; w < 8; ++w) { // the write-back of one line, announced per word
        event e;
        e.kind = event_kind::store;
        e.offset = a + 8 * w;
        e.size = 8;
        e.data = t.bytes.size();
        t.bytes.insert(t.bytes.end(), 8, static_cast<std::uint8_t>(w + 1));
        t.events.push_back(e);
    }
    event f;
    f.kind = event_kind::flush;
    f.offset = a;
    f.size = 64;
    t.events.push_back(f);
    f.kind = event_kind::fence;
    t.events.push_back(f);
    crash_images g(t, initial, l, tlptm_harness::mutation{}, false, image_budget{});
    std::set<std::size_t> persisted_words;
    std::size_t at_first = 0;
    g.run([&](const crash_point& p, const image_patch& patch, const std::vector<std::uint32_t>&) {
        if (p.index != 8)
            return true;
        ++at_first;
        std::vector<std::uint8_t> img = g.durable();
        for (const auto& [line, c] : patch.lines)
            std::memcpy(img.data() + line * 64, c.data(), 64);
        std::size_t k = 0;
        while (k < 8 && img[a + 8 * k] == k + 1)
            ++k;
        for (std::size_t j = k; j < 8; ++j)
            CHECK(img[a + 8 * j] == 0); // a prefix of the words, nothing after a gap
        persisted_words.insert(k);
        return true;
    });
    CHECK(at_first == 9); // 0..8 words persisted
    CHECK(persisted_words.size() == 9);
}

TEST_CASE("crash images of a real commit: a line's write-back is announced word by word") {
    // The library announces its write-back per 8-byte word (stored(w, 8) after each store), so
    // some crash point has a heap line with one pending snapshot per word: the images where
    // only some words of the line's write-back persisted exist.
    tlptm_test::temp_path path("per-word");
    tlptm::pool_options opt = tlptm_test::small_options();
    opt.size = std::size_t{320} << 10;
    opt.log_capacity = 4096;
    struct root {
        tlptm::p<std::uint64_t> w[8]; // one line
    };
    {
        tlptm::pool p = tlptm::pool::create(path, opt);
        p.root<root>();
    }
    std::vector<std::uint8_t> initial = read_whole_file(path);
    tracer tr(initial);
    opt.policy = &tr;
    {
        tlptm::pool p = tlptm::pool::open(path, opt);
        root* rt = p.root<root>();
        for (std::uint64_t k = 1; k <= 2; ++k)
            tlptm::atomic(p, [&] {
                for (std::uint64_t i = 0; i < 8; ++i)
                    rt->w[i] = k * 100 + i;
            });
        p.close();
    }
    trace t = tr.take();
    CHECK(t.violations.empty());
    pool_layout l = pool_layout::of(initial.data());
    crash_images g(t, initial, l, tlptm_harness::mutation{}, false, image_budget{});
    std::uint32_t most = 0;
    g.run([&](const crash_point&, const image_patch&, const std::vector<std::uint32_t>&) {
        for (const auto& it : g.items())
            if (!it.nt && l.in_heap(it.where * line_size))
                most = std::max(most, it.levels() - 1);
        return false; // one image per point is enough to look at the items
    });
    MESSAGE("most pending snapshots of one heap line at a crash point: " << most);
    CHECK(most >= 8);
}

// ---- the scheduled sweep ----------------------------------------------------------------------

TEST_CASE("scheduled sweep: a checkpoint in progress while another thread reuses a freed span") {
    sweep_family("checkpoint-reclaim",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::checkpoint_reclaim(m, 10); });
}

TEST_CASE("scheduled sweep: cross-thread frees and reuse while a reader runs") {
    sweep_family("cross-free",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::cross_free(m, 5); });
}

TEST_CASE("scheduled sweep: another thread's checkpoint settles a deferred write-back") {
    sweep_family("settle-helper",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::settle_helper(m, 8); });
}

TEST_CASE("scheduled sweep: checkpoints while another thread commits (in_flight before ts)") {
    sweep_family("in-flight-race",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::in_flight_race(m, 8); });
}

TEST_CASE("scheduled sweep: conflicts, and serial mode after repeated aborts") {
    auto serial = std::make_shared<std::atomic<int>>(0);
    family_total t = sweep_family("serial-mode", [serial](tlptm::log_mode m, std::uint64_t) {
        return ss::serial_mode(m, 6, serial);
    });
    if (t.runs > 0)
        MESSAGE("serial-mode: " << serial->load() << " transactions ran alone after "
                                << tlptm::serial_after_aborts << " aborts");
}

TEST_CASE("scheduled sweep: a thread exits and its slot is reused") {
    sweep_family("slot-reuse",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::slot_reuse(m, 4); });
}

TEST_CASE("scheduled sweep: more threads than slots, idle slots taken from their holders") {
    sweep_family("slot-steal",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::slot_steal(m, 4); });
}

TEST_CASE("scheduled sweep: recover() and close() while other threads are bound") {
    sweep_family("recover-close",
                 [](tlptm::log_mode m, std::uint64_t) { return ss::recover_close(m, 4); });
}

TEST_CASE("scheduled sweep: prompt write-back while slots change threads (lines flushed by the "
          "previous holder)") {
    // Seed 69 of slot-steal runs prompt write-back (seed / 2 mod 3 == 1) and gives a slot to
    // another thread between two commits: the first commit's thread flushed its lines and
    // never fenced again, so the second commit (another core) must flush them again. Found by
    // 150 seeds of slot-steal on 2026-12-07: the close's checkpoint passed a commit whose line
    // was never made durable. The mutation restores the old rule (any thread's flush counts).
    settings s = get_settings();
    for (std::uint64_t seed : {std::uint64_t{69}, std::uint64_t{51}}) {
        sweep_config cfg = config_for(s, seed);
        scenario sc = ss::slot_steal(mode_of(seed), 4);
        if (seed == 51)
            sc.options.solo_after = 1; // the same hole, reached through solo switches
        sweep_result r = run_sweep(sc, cfg);
        CHECK_MESSAGE(r.violations == 0,
                      "slot-steal seed " << seed << ": " << r.violations << " violations");
        cfg.lib_mut = lib_mutation::prompt_flushed_by_any;
        sweep_result bad = run_sweep(sc, cfg);
        MESSAGE("slot-steal seed " << seed << " with mutation prompt_flushed_by_any: "
                                   << bad.violations << " violations");
        CHECK(bad.violations > 0);
    }
}

namespace {

/// The scenario with solo_after = 1: a thread takes the pool at its first attempt that no
/// peer preceded.
scenario solo(scenario sc) {
    sc.options.solo_after = 1;
    return sc;
}

/// One scheduled run: the family's name, the seed, the scenario.
struct seed_run {
    const char* name;
    std::uint64_t seed;
    scenario sc;
};

/// Each run passes as the library is, and fails with library mutation `m` (named `what`).
void check_mutation_caught(std::initializer_list<seed_run> runs, lib_mutation m, const char* what) {
    settings s = get_settings();
    for (const seed_run& r : runs) {
        sweep_config cfg = config_for(s, r.seed);
        sweep_result good = run_sweep(r.sc, cfg);
        CHECK_MESSAGE(good.violations == 0, std::string(r.name)
                                                << " seed " << r.seed << ": " << good.violations
                                                << " violations");
        cfg.lib_mut = m;
        sweep_result bad = run_sweep(r.sc, cfg);
        MESSAGE(std::string(r.name) << " seed " << r.seed << " with mutation " << std::string(what)
                                    << ": " << bad.violations << " violations");
        CHECK(bad.violations > 0);
    }
}

} // namespace

TEST_CASE("scheduled sweep: a thread whose new slot is blocked by a solo slot keeps that slot") {
    // A thread whose slot was taken over takes a free or idle one; if it cannot enter it at
    // once (a solo slot holds the pool), its next turn must enter that slot, not take a second
    // one: the first stayed held by the thread, and nobody settled its pending write-back (its
    // in_flight held CT back) or gave it up. Found by 400 seeds of solo slot-steal on
    // 2026-12-07; the harness now also checks that no slot is held once the workers have
    // exited. The mutation restores the old loop. Seeds that catch it (searched again on
    // 2026-12-08, when the solo protocol's changes moved the interleavings: 11 of seeds
    // 1-1 500 of slot-steal, 9 of 1-600 of cross-free, 5 of recover-close).
    check_mutation_caught({{"solo-slot-steal", 303, solo(ss::slot_steal(mode_of(303), 4))},
                           {"solo-slot-steal", 738, solo(ss::slot_steal(mode_of(738), 4))},
                           {"solo-cross-free", 57, solo(ss::cross_free(mode_of(57), 5))},
                           {"solo-recover-close", 234, solo(ss::recover_close(mode_of(234), 4))}},
                          lib_mutation::taken_slot_forgotten, "taken_slot_forgotten");
}

TEST_CASE("scheduled sweep: an exiting thread neither takes the pool solo nor leaves it held") {
    // A thread that exits settles its slot (settle_on_exit): it must not take the pool solo
    // as it enters for that, and if its slot holds the pool it gives it back (its clock raised
    // past the thread's commits, no heavy fence). Before 2026-12-07 an exit could take the
    // pool, and one with no write-back to settle left it held: the next thread to run paid a
    // revoke, and solo_thread named a thread that had exited. The leak check after each run
    // finds a pool held solo once the workers have exited; the mutation restores the old exit.
    // Seeds where the old exit left the pool held (31 of 60 seeds x 4 families do, 2026-12-08).
    check_mutation_caught({{"solo-recover-close", 6, solo(ss::recover_close(mode_of(6), 4))},
                           {"solo-slot-steal", 6, solo(ss::slot_steal(mode_of(6), 4))},
                           {"solo-cross-free", 3, solo(ss::cross_free(mode_of(3), 5))},
                           {"solo-in-flight-race", 27, solo(ss::in_flight_race(mode_of(27), 8))}},
                          lib_mutation::exit_ignores_solo, "exit_ignores_solo");
}

TEST_CASE("scheduled sweep: threads take the pool solo and give it back (solo_after = 1)") {
    // Every attempt of a thread whose peers ran nothing since its last one takes the pool; the
    // next attempt of a peer takes it back (pool_options::solo_after). The scenarios' checks
    // and the crash images then cover solo commits, the switches both ways, checkpoints and
    // frees across them, exclusive sections that take the pool back, and slots taken over.
    sweep_family("solo-in-flight-race",
                 [&](tlptm::log_mode m, std::uint64_t) { return solo(ss::in_flight_race(m, 8)); });
    sweep_family("solo-cross-free",
                 [&](tlptm::log_mode m, std::uint64_t) { return solo(ss::cross_free(m, 5)); });
    sweep_family("solo-recover-close",
                 [&](tlptm::log_mode m, std::uint64_t) { return solo(ss::recover_close(m, 4)); });
    sweep_family("solo-slot-steal",
                 [&](tlptm::log_mode m, std::uint64_t) { return solo(ss::slot_steal(m, 4)); });
}

TEST_CASE("scheduled sweep: log entries as whole lines while slots change threads") {
    // log_write::non_temporal_lines: each entry rewrites the ring's earlier entries in its
    // first line from the slot's copy of that line (thread_slot::tail_line). The copy belongs
    // to the slot, not the thread: a slot taken over (more threads than slots), or whose
    // holder exits, goes on from where its last entry ended, and recover() and close() start
    // new generations under threads that are still bound.
    auto lines = [](scenario sc) {
        sc.options.log_write = tlptm::log_write::non_temporal_lines;
        sc.name += "/whole-lines";
        return sc;
    };
    sweep_family("whole-lines-slot-steal",
                 [&](tlptm::log_mode m, std::uint64_t) { return lines(ss::slot_steal(m, 4)); });
    sweep_family("whole-lines-slot-reuse",
                 [&](tlptm::log_mode m, std::uint64_t) { return lines(ss::slot_reuse(m, 4)); });
    sweep_family("whole-lines-recover-close",
                 [&](tlptm::log_mode m, std::uint64_t) { return lines(ss::recover_close(m, 4)); });
}

TEST_CASE("scheduled sweep: a fence fails (msync error): poisoned pool, no leak, no hang") {
    family_total t = sweep_family(
        "fault", [](tlptm::log_mode m, std::uint64_t) { return ss::fault(m, 5); },
        [](sweep_config& cfg, std::uint64_t seed) {
            cfg.tracing.fail_fence = fault_fence_of(seed);
        });
    if (t.runs > 0) {
        MESSAGE("fault: " << t.sum.faults << " transactions threw the injected fault");
        CHECK(t.sum.faults > 0);
    }
}

// ---- mutations of the library: the scheduled sweep must catch them ----------------------------

namespace {

struct caught {
    std::size_t runs = 0, caught_runs = 0, failing_points = 0;
    std::string first;
};

caught run_mutation(const std::function<scenario(std::uint64_t)>& make,
                    const std::function<void(sweep_config&, std::uint64_t)>& tweak,
                    std::uint64_t seeds) {
    settings s = get_settings();
    caught c;
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
        sweep_config cfg = config_for(s, seed);
        cfg.max_messages = 2;
        tweak(cfg, seed);
        sweep_result r = run_sweep(make(seed), cfg);
        ++c.runs;
        if (r.violations > 0) {
            ++c.caught_runs;
            c.failing_points += r.failing_points.size();
            if (c.first.empty() && !r.messages.empty())
                c.first = r.messages.front();
        }
    }
    return c;
}

} // namespace

namespace {

/// Runs the sweep of `make`'s scenario with the library mutation that `tweak` switches on,
/// `ci_seeds` interleavings (`long_seeds` with TLPTM_SCHED=long, TLPTM_SCHED_SEEDS to choose),
/// and requires that some interleaving catches it.
void expect_caught(const char* name, const std::function<scenario(std::uint64_t)>& make,
                   const std::function<void(sweep_config&, std::uint64_t)>& tweak,
                   std::uint64_t ci_seeds, std::uint64_t long_seeds) {
    settings s = get_settings();
    std::uint64_t seeds = env_u64("TLPTM_SCHED_SEEDS", s.long_run ? long_seeds : ci_seeds);
    caught c = run_mutation(make, tweak, seeds);
    MESSAGE(std::string(name) << ": caught in " << c.caught_runs << " of " << c.runs
                              << " interleavings, " << c.failing_points
                              << " failing points; first: " << c.first);
    CHECK(c.caught_runs > 0);
}

/// A random walk that hands over at one scheduling point in two (PCT rarely parks a thread
/// inside a commit's short windows).
void random_walk(sweep_config& cfg) {
    cfg.schedule.pct = false;
    cfg.schedule.walk_switch = 2;
}

} // namespace

TEST_CASE("mutation volatile_ct: block reuse trusting a CT that is not durable is caught") {
    expect_caught(
        "volatile_ct", [](std::uint64_t seed) { return ss::checkpoint_reclaim(mode_of(seed), 10); },
        [](sweep_config& cfg, std::uint64_t) { cfg.lib_mut = lib_mutation::volatile_ct; }, 16, 120);
}

TEST_CASE("mutation late_in_flight: in_flight published after the timestamp is caught") {
    // A checkpoint that reads the clock between a commit's clock read and its in_flight store
    // persists a CT at or above that commit's timestamp; the commit returns with its write-back
    // not yet flushed (eager: the slot's next commit flushes it), and a crash then loses it
    // (recovery skips entries at or below CT).
    expect_caught(
        "late_in_flight", [](std::uint64_t seed) { return ss::in_flight_race(mode_of(seed), 8); },
        [](sweep_config& cfg, std::uint64_t) {
            cfg.lib_mut = lib_mutation::late_in_flight;
            random_walk(cfg);
        },
        16, 120);
}

TEST_CASE("mutation no_revoke_check: a thread that keeps using a slot taken from it is caught") {
    // With more threads than slots, a thread takes an idle slot from its holder. If the holder
    // did not check for that after marking its next attempt, two attempts would run in one
    // slot at once: one log ring, one write-set.
    expect_caught(
        "no_revoke_check", [](std::uint64_t seed) { return ss::slot_steal(mode_of(seed), 4); },
        [](sweep_config& cfg, std::uint64_t) { cfg.lib_mut = lib_mutation::no_revoke_check; }, 16,
        120);
}

TEST_CASE("mutation carried_as_flushed: a line left to the next write-back counted durable") {
    // Eager write-back leaves a line that the next commit writes again unflushed until that
    // commit's own write-back is flushed. Counting the earlier commit durable at once lets a
    // checkpoint pass it while its data is still in the cache: a crash then loses it. The
    // window (a checkpoint between that commit's F1 and the end of its write-back) is narrow:
    // about 3 % of random walks reach it, hence many seeds (a run takes about 10 ms).
    expect_caught(
        "carried_as_flushed",
        [](std::uint64_t seed) { return ss::in_flight_race(mode_of(seed), 8); },
        [](sweep_config& cfg, std::uint64_t) {
            cfg.lib_mut = lib_mutation::carried_as_flushed;
            random_walk(cfg);
        },
        300, 1000);
}

TEST_CASE("mutation no_commit_cleanup: a failed commit that leaks its locks is caught") {
    expect_caught(
        "no_commit_cleanup", [](std::uint64_t seed) { return ss::fault(mode_of(seed), 5); },
        [](sweep_config& cfg, std::uint64_t seed) {
            cfg.lib_mut = lib_mutation::no_commit_cleanup;
            cfg.tracing.fail_fence = fault_fence_of(seed);
            cfg.schedule.max_points = 20000;
            cfg.schedule.deadlock = std::chrono::milliseconds(1000);
        },
        8, 60);
}
