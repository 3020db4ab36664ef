// Crash consistency under x86 persistency, checked at every flush and fence
// (DESIGN.md §4, §5 I1-I5, §8): the harness of tests/harness/ traces every store, flush and
// fence of a scenario, builds every pool image a power failure may leave at each crash point,
// recovers each and compares it with a reference model. docs/crash-testing.md describes it.
//
// CI runs a bounded sweep. TLPTM_SWEEP=long runs the long one (more transactions, every image
// of small crash points, every crashed recovery); TLPTM_SWEEP_SEED varies the samples;
// TLPTM_SWEEP_DUMP=<dir> writes the images of violations there; TLPTM_SWEEP_EXACT=1 recovers
// every distinct image rather than every distinct predicted outcome.

#include "harness/scenarios.hpp"
#include "harness/sweep.hpp"
#include "test_util.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TLPTM_SWEEP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TLPTM_SWEEP_SANITIZED 1
#endif
#endif

namespace {

using namespace tlptm_harness;
namespace sc = tlptm_harness::scenarios;

constexpr tlptm::log_mode all_modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                         tlptm::log_mode::cblo, tlptm::log_mode::tlptm};

/// How big a sweep this run makes: bounded (CI; smaller under AddressSanitizer) or long.
struct sweep_size {
    bool long_run = false;
    int scale = 1; ///< transactions per scenario grow with it
    sweep_config cfg;
};

sweep_size sweep_settings() {
    sweep_size s;
    const char* mode = std::getenv("TLPTM_SWEEP");
    s.long_run = mode && std::string(mode) == "long";
    std::uint64_t seed = 1;
    if (const char* v = std::getenv("TLPTM_SWEEP_SEED"))
        seed = std::strtoull(v, nullptr, 10);
    if (const char* dir = std::getenv("TLPTM_SWEEP_DUMP"))
        s.cfg.dump_dir = dir;
    if (const char* exact = std::getenv("TLPTM_SWEEP_EXACT"))
        s.cfg.exact_keys = std::string(exact) == "1";
    if (s.long_run) {
        s.scale = 8;
        s.cfg.images = {16384, 512, 512, 128, seed};
        s.cfg.max_recoveries = 1000000;
        s.cfg.max_new_per_point = 1000000;
        s.cfg.recovery_crashes = 1000000;
        s.cfg.max_per_recovery_crash = 1000000;
        s.cfg.recovery_images = {1024, 64, 64, 16, seed};
        return s;
    }
#if defined(TLPTM_SWEEP_SANITIZED)
    // About three times slower under AddressSanitizer: a smaller sweep.
    s.scale = 2;
    s.cfg.images = {1024, 64, 64, 16, seed};
    s.cfg.max_recoveries = 1000;
    s.cfg.max_new_per_point = 32;
    s.cfg.recovery_crashes = 6;
    s.cfg.max_per_recovery_crash = 128;
    s.cfg.recovery_images = {256, 32, 32, 8, seed};
#else
    s.scale = 4;
    s.cfg.images = {2048, 96, 96, 24, seed};
    s.cfg.max_recoveries = 4000;
    s.cfg.max_new_per_point = 64;
    s.cfg.recovery_crashes = 12;
    s.cfg.max_per_recovery_crash = 256;
    s.cfg.recovery_images = {512, 48, 48, 12, seed};
#endif
    return s;
}

/// Runs one sweep, reports it and returns it.
sweep_result sweep(const scenario& s, const sweep_config& cfg) {
    sweep_result r = run_sweep(s, cfg);
    const std::string line = r.summary();
    MESSAGE(line);
    for (const auto& m : r.messages)
        MESSAGE("  violation: " << m);
    if (!r.out_of_order_example.empty())
        MESSAGE("  allowed, out of timestamp order: " << r.out_of_order_example);
    return r;
}

void report_total(const char* what, const sweep_result& total) {
    MESSAGE(std::string(what) << " total: " << total.transactions << " transactions, "
                              << total.crash_points << " crash points, " << total.image_checks
                              << " images checked (" << total.recoveries << " recovered, "
                              << total.skipped << " skipped over budget), "
                              << total.recovery_crash_images << " images of crashed recoveries, "
                              << total.violations << " violations, " << total.seconds << " s");
}

/// Sweeps `make(mode, n)` in every log mode; expects no violation.
template <class Make> void sweep_all_modes(const char* what, Make make) {
    sweep_size size = sweep_settings();
    sweep_result total;
    for (tlptm::log_mode mode : all_modes) {
        sweep_result r = sweep(make(mode, size.scale), size.cfg);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.crash_points > 0);
        CHECK(r.recoveries > 0);
        total += r;
    }
    report_total(what, total);
}

} // namespace

// ---- the harness itself -------------------------------------------------------------------------

TEST_CASE("tracer: a store that bypasses the persistence policy is reported with its offset") {
    tlptm_test::temp_path path("bypass");
    tlptm::pool_options opt = tlptm_test::small_options();
    opt.size = std::size_t{320} << 10;
    opt.log_capacity = 4096;
    {
        tlptm::pool p = tlptm::pool::create(path, opt);
        p.root<sc::words_root>();
    }
    tracer tr(read_whole_file(path));
    opt.policy = &tr;
    std::uint64_t offset = 0;
    {
        tlptm::pool p = tlptm::pool::open(path, opt);
        auto* rt = p.root<sc::words_root>();
        tlptm::atomic(p, [&] { rt->w[0] = 1; });
        CHECK(tr.take().violations.empty());
        // A raw store into the pool, as a library path that forgot the policy would make it.
        auto* word = reinterpret_cast<std::uint64_t*>(&rt->w[5]);
        offset = static_cast<std::uint64_t>(reinterpret_cast<std::uint8_t*>(word) -
                                            static_cast<std::uint8_t*>(p.base()));
        __atomic_store_n(word, 42, __ATOMIC_RELAXED);
        tlptm::atomic(p, [&] { rt->w[1] = 2; }); // its fences see the difference
        p.close();
    }
    trace t = tr.take();
    REQUIRE(t.violations.size() == 1);
    CHECK(t.violations[0].find("bypassed") != std::string::npos);
    CHECK(t.violations[0].find(hex(offset)) != std::string::npos);
    MESSAGE(t.violations[0]);
}

TEST_CASE("crash images: prefixes of each line's stores, flush + fence per thread, NT units") {
    pool_layout l;
    l.size = 4096;
    l.heap_offset = 1024;
    l.heap_size = 3072;
    std::vector<std::uint8_t> initial(l.size, 0);
    trace t;
    auto add = [&](event_kind k, std::uint16_t thread, std::uint64_t off, std::size_t n,
                   std::uint8_t fill) {
        event e;
        e.kind = k;
        e.thread = thread;
        e.offset = off;
        e.size = n;
        e.data = t.bytes.size();
        if (k == event_kind::store || k == event_kind::stream)
            t.bytes.insert(t.bytes.end(), n, fill);
        t.events.push_back(e);
    };
    const std::uint64_t a = 2048; // line 32
    add(event_kind::store, 0, a, 8, 1);
    add(event_kind::store, 0, a + 8, 8, 2);
    add(event_kind::flush, 0, a, 64, 0);       // captures stores 1 and 2
    add(event_kind::store, 0, a + 16, 8, 3);   // after the flush: not covered by it
    add(event_kind::fence, 1, 0, 0, 0);        // another thread's fence completes nothing
    add(event_kind::fence, 0, 0, 0, 0);        // stores 1 and 2 durable, store 3 uncertain
    add(event_kind::stream, 0, a + 64, 16, 9); // two NT units
    add(event_kind::fence, 0, 0, 0, 0);

    crash_images g(t, initial, l, mutation{}, false, image_budget{});
    std::vector<std::pair<std::string, std::size_t>> points;
    std::vector<std::vector<std::uint8_t>> first_point;
    g.run([&](const crash_point& p, const image_patch& patch, const std::vector<std::uint32_t>&) {
        if (points.empty() || points.back().first != p.where)
            points.push_back({p.where, 0});
        ++points.back().second;
        if (points.size() == 1) {
            std::vector<std::uint8_t> img = g.durable();
            for (const auto& [line, c] : patch.lines)
                std::memcpy(img.data() + line * 64, c.data(), 64);
            first_point.emplace_back(img.begin() + a, img.begin() + a + 24);
        }
        return true;
    });
    for (const auto& [w, n] : points)
        MESSAGE(w << ": " << n << " images");
    REQUIRE(points.size() == 5);
    // Before the flush: the line holds nothing, store 1, or stores 1 and 2 (prefixes only).
    CHECK(points[0].second == 3);
    REQUIRE(first_point.size() == 3);
    for (const auto& img : first_point)
        CHECK_FALSE((img[0] == 0 && img[8] == 2));
    CHECK(points[1].first.find("before fence") == 0); // thread 1's: four prefixes
    CHECK(points[1].second == 4);
    CHECK(points[2].first.find("after fence") == 0); // thread 0's: store 3 still uncertain
    CHECK(points[2].second == 2);
    CHECK(points[3].second == 8); // store 3 and two NT units, independently
    CHECK(points[4].second == 2); // NT durable, store 3 never flushed
    CHECK(g.durable()[a] == 1);
    CHECK(g.durable()[a + 8] == 2);
    CHECK(g.durable()[a + 16] == 0);
    CHECK(g.durable()[a + 64] == 9);
    CHECK(g.durable()[a + 79] == 9);
}

// ---- the bounded sweep
// ----------------------------------------------------------------------------

TEST_CASE("crash sweep: single-word transactions") {
    sweep_all_modes("single-word",
                    [](tlptm::log_mode m, int scale) { return sc::single_word(m, 4 * scale); });
}

TEST_CASE("crash sweep: multi-word transactions over several lines, partial words") {
    sweep_all_modes("multi-word",
                    [](tlptm::log_mode m, int scale) { return sc::multi_word(m, 3 * scale); });
}

TEST_CASE("crash sweep: allocate and publish (AALO), update, unlink and free") {
    sweep_all_modes("list", [](tlptm::log_mode m, int scale) { return sc::list(m, 6 * scale); });
}

TEST_CASE("crash sweep: a freed block is not overwritten by replay once reused (I3)") {
    sweep_all_modes("free-reuse", [](tlptm::log_mode m, int) { return sc::free_reuse(m); });
}

TEST_CASE("crash sweep: log rings wrap (checkpoint, new generation)") {
    sweep_all_modes("ring-wrap",
                    [](tlptm::log_mode m, int scale) { return sc::ring_wrap(m, 7 * scale); });
}

TEST_CASE("crash sweep: log entries written with stores and flushes (log_write)") {
    // The entry reaches the ring as stores and a flush of their lines instead of a stream; a
    // crash image may hold any prefix of each line's stores until F1. Also with the two
    // methods mixed by entry size (large_log_write), as log_write::automatic may choose: one
    // ring then holds entries written both ways, side by side in shared lines.
    sweep_size size = sweep_settings();
    sweep_result total;
    using lw = tlptm::log_write;
    for (auto [small, large] : {std::pair{lw::store_and_flush, lw::store_and_flush},
                                std::pair{lw::store_and_flush, lw::non_temporal},
                                std::pair{lw::non_temporal, lw::store_and_flush}}) {
        for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
            for (scenario s : {sc::multi_word(mode, 3 * size.scale), sc::list(mode, 6 * size.scale),
                               sc::ring_wrap(mode, 7 * size.scale)}) {
                s.options.log_write = small;
                s.options.large_log_write = large;
                sweep_result r = sweep(s, size.cfg);
                CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
                total += r;
            }
        }
    }
    report_total("log-write-store-and-flush", total);
}

TEST_CASE("crash sweep: log entries written as whole lines (log_write::non_temporal_lines)") {
    // Each entry streams every line it touches: the entries before it in its first line are
    // written again with their own bytes, the rest of its last line with zeros. A crash image
    // may hold any subset of the streamed units until F1, so the earlier entries must come
    // out the same whichever units land. Under eager and adaptive write-back (adaptive leaves
    // the updates' lines unflushed, so recovery needs every entry of the ring), and mixed by
    // entry size with whole words (either way round) or stores and flushes, as
    // log_write::automatic may choose:
    // one ring then holds entries written both ways, side by side in shared lines.
    sweep_size size = sweep_settings();
    sweep_result total;
    using lw = tlptm::log_write;
    using wb = tlptm::write_back;
    using tlptm::log_mode;
    auto lines = [](scenario s, lw large, wb w, const char* name) {
        s.options.log_write = lw::non_temporal_lines;
        s.options.large_log_write = large;
        s.options.write_back = w;
        s.name += std::string("/whole-lines") + name;
        return s;
    };
    const int n = size.scale;
    std::vector<scenario> all;
    for (wb w : {wb::eager, wb::adaptive}) {
        const char* name = w == wb::eager ? "/eager" : "/adaptive";
        for (scenario s :
             {sc::single_word(log_mode::tlptm, 4 * n), sc::multi_word(log_mode::tlptm, 3 * n),
              sc::list(log_mode::tlptm, 6 * n), sc::ring_wrap(log_mode::tlptm, 7 * n),
              sc::multi_word(log_mode::baseline, 3 * n), sc::ring_wrap(log_mode::baseline, 7 * n)})
            all.push_back(lines(s, lw::non_temporal_lines, w, name));
    }
    for (scenario s :
         {sc::multi_word(log_mode::tlptm, 3 * n), sc::list(log_mode::baseline, 6 * n)}) {
        all.push_back(lines(s, lw::non_temporal, wb::adaptive, "/large-as-words"));
        all.push_back(lines(s, lw::store_and_flush, wb::eager, "/large-stored-and-flushed"));
        // The other way round: small entries as whole words, large ones as whole lines.
        scenario small_words = lines(s, lw::non_temporal_lines, wb::adaptive, "/small-as-words");
        small_words.options.log_write = lw::non_temporal;
        all.push_back(small_words);
    }
    for (const scenario& s : all) {
        sweep_result r = sweep(s, size.cfg);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.crash_points > 0);
        total += r;
    }
    report_total("log-write-whole-lines", total);
}

TEST_CASE("crash sweep: prompt write-back (lines flushed right after their write-back)") {
    // single-word alternates between two lines, so every commit flushes early; multi-word and
    // ring-wrap rewrite lines of the commit before, so they take the eager path as well.
    sweep_size size = sweep_settings();
    sweep_result total;
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        for (scenario s :
             {sc::single_word(mode, 4 * size.scale), sc::multi_word(mode, 3 * size.scale),
              sc::list(mode, 6 * size.scale), sc::ring_wrap(mode, 7 * size.scale)}) {
            s.options.write_back = tlptm::write_back::prompt;
            sweep_result r = sweep(s, size.cfg);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            CHECK(r.crash_points > 0);
            total += r;
        }
    }
    report_total("prompt-write-back", total);
}

TEST_CASE("crash sweep: adaptive write-back (updates leave their lines; inserts stream their "
          "nodes and leave their lines, or flush them all)") {
    // single-word, multi-word and ring-wrap commit updates that cover nothing and write at
    // most half a batch of lines, so they all defer until the close's batch or a ring wrap;
    // multi-word once more with 4-line batches, where its 5 lines a commit flush as eager. In
    // list and free-reuse the inserts cover their new nodes: with the entries non-temporal
    // they write the nodes again non-temporally and defer their lines too; with the entries
    // stored and flushed (log_write), they flush the nodes and, under the same fence, the
    // lines that the update and the pop before them left (CT held back by those lines).
    // The two ways of making new blocks durable also with the other way of writing entries
    // (pool_options::new_block_write): entries non-temporal and nodes flushed (the pending
    // lines then join the nodes' flushes), entries flushed and nodes streamed.
    sweep_size size = sweep_settings();
    sweep_result total;
    using lw = tlptm::log_write;
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        scenario wide = sc::multi_word(mode, 3 * size.scale);
        wide.options.write_back_lines = 4;
        wide.name += "/4-line-batches";
        auto written = [](scenario s, lw entries, lw blocks, const char* name) {
            s.options.log_write = entries;
            s.options.new_block_write = blocks;
            s.name += name;
            return s;
        };
        const scenario list = sc::list(mode, 8 * size.scale), reuse = sc::free_reuse(mode);
        for (scenario s :
             {sc::single_word(mode, 4 * size.scale), sc::multi_word(mode, 3 * size.scale), wide,
              list, written(list, lw::store_and_flush, lw::automatic, "/store-and-flush"),
              written(list, lw::non_temporal, lw::store_and_flush, "/nt-entries-flushed-nodes"),
              written(list, lw::store_and_flush, lw::non_temporal, "/flushed-entries-nt-nodes"),
              sc::ring_wrap(mode, 7 * size.scale), reuse,
              written(reuse, lw::store_and_flush, lw::automatic, "/store-and-flush"),
              written(reuse, lw::non_temporal, lw::store_and_flush, "/nt-entries-flushed-nodes")}) {
            s.options.write_back = tlptm::write_back::adaptive;
            sweep_result r = sweep(s, size.cfg);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            CHECK(r.crash_points > 0);
            total += r;
        }
    }
    report_total("adaptive-write-back", total);
}

TEST_CASE("crash sweep: deferred write-back in batches of two lines (lines written again after a "
          "batch, duplicates not recorded twice)") {
    // single-word writes lines 0, 1, 0, 1, ...: each batch clears the slot's pending lines, and
    // the next commit records a line that the slot's hash table still places in the cleared
    // list; list's updates and pops defer, some of them onto lines pending already.
    sweep_size size = sweep_settings();
    sweep_result total;
    for (tlptm::write_back wb : {tlptm::write_back::adaptive, tlptm::write_back::lazy}) {
        for (scenario s : {sc::single_word(tlptm::log_mode::tlptm, 6 * size.scale),
                           sc::list(tlptm::log_mode::tlptm, 8 * size.scale)}) {
            s.options.write_back = wb;
            s.options.write_back_lines = 2;
            s.name += std::string("/") + tlptm::to_string(wb);
            sweep_result r = sweep(s, size.cfg);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            CHECK(r.crash_points > 0);
            total += r;
        }
    }
    report_total("two-line-batches", total);
}

TEST_CASE("crash sweep: two threads, interleaved commits") {
    sweep_size size = sweep_settings();
    sweep_result total;
    int rounds = size.long_run ? 16 : 2;
    for (int round = 0; round < rounds; ++round) {
        for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
            sweep_result r = sweep(sc::two_threads(mode, 3 * size.scale), size.cfg);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            total += r;
        }
    }
    report_total("two-threads", total);
}

TEST_CASE("crash sweep: solo transactions (solo_after = 1), alone and switching between two "
          "threads") {
    // With solo_after = 1 a thread takes the pool at its first attempt that no peer preceded:
    // the single-thread scenarios commit solo (no orec locked, timestamps from the clock), and
    // two threads hand the pool back and forth.
    auto solo = [](scenario sc) {
        sc.options.solo_after = 1;
        return sc;
    };
    sweep_size size = sweep_settings();
    sweep_result total;
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        for (const scenario& sc :
             {solo(sc::single_word(mode, 4 * size.scale)),
              solo(sc::multi_word(mode, 3 * size.scale)), solo(sc::list(mode, 6 * size.scale)),
              solo(sc::ring_wrap(mode, 7 * size.scale)),
              solo(sc::two_threads(mode, 3 * size.scale))}) {
            sweep_result r = sweep(sc, size.cfg);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            total += r;
        }
    }
    report_total("solo", total);
}

// ---- mutations: the sweep must fail
// -----------------------------------------------------------------

namespace {

/// Runs `s` without and with a defect: the defect must make some crash point fail that
/// passes without it (a differential check, so that it holds whatever else fails).
void expect_caught(const scenario& s, sweep_config cfg, const std::string& what) {
    sweep_config clean = cfg;
    clean.mut = {};
    clean.recovery_mut = {};
    clean.tracing = {};
    sweep_result base = run_sweep(s, clean);
    sweep_result r = run_sweep(s, cfg);
    const std::string line = what + ": " + r.summary();
    MESSAGE(line);
    CHECK_MESSAGE(r.mutation_matched, what << ": the mutation matched no event");
    std::size_t fresh = 0;
    for (const auto& [where, msg] : r.failing_points) {
        if (base.failing_points.count(where))
            continue;
        if (fresh++ < 2)
            MESSAGE("  caught: " << msg);
    }
    MESSAGE("  " << fresh << " crash points fail only with the defect ("
                 << base.failing_points.size() << " fail without it)");
    CHECK_MESSAGE(fresh > 0, what << ": the sweep did not notice the defect");
}

sweep_config mutation_config() {
    sweep_config cfg = sweep_settings().cfg;
    cfg.max_messages = 2;
    // No budget limits: both runs must check the same images for the comparison to hold.
    cfg.max_recoveries = 100000;
    cfg.max_new_per_point = 100000;
    cfg.max_per_recovery_crash = 100000;
    return cfg;
}

/// Runs `s` without and with the library's own mutation `m` (tlptm::detail::mutation, test
/// builds only): the mutation must make some crash point fail that passes without it (a
/// differential check, as expect_caught). `what` names the run in the messages, `missed` says
/// what the sweep would have failed to notice. Returns the run without the mutation.
sweep_result expect_library_mutation_caught(const scenario& s, tlptm::detail::mutation m,
                                            const std::string& what, const std::string& missed) {
    namespace d = tlptm::detail;
    const sweep_config cfg = mutation_config();
    sweep_result base = run_sweep(s, cfg);
    d::active_mutation.store(m);
    sweep_result r = run_sweep(s, cfg);
    d::active_mutation.store(d::mutation::none);
    MESSAGE(what << ": " << r.summary());
    std::size_t fresh = 0;
    for (const auto& [where, msg] : r.failing_points)
        if (!base.failing_points.count(where) && fresh++ < 1)
            MESSAGE("  caught: " << msg);
    CHECK_MESSAGE(fresh > 0, what << ": the sweep did not notice " << missed);
    return base;
}

/// single-word with prompt write-back: its commits alternate between two lines, so each one
/// flushes its line right after its write-back.
scenario prompt_single_word() {
    scenario s = sc::single_word(tlptm::log_mode::tlptm, 3);
    s.options.write_back = tlptm::write_back::prompt;
    return s;
}

} // namespace

TEST_CASE("mutations of the persistence path are caught by the sweep") {
    using tlptm::log_mode;
    SUBCASE("drop F1: a torn write-back without a durable entry (I1)") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_fence(role::f1, 1);
        expect_caught(sc::multi_word(log_mode::tlptm, 3), cfg, "drop F1 of tx 1");
    }
    SUBCASE("zero the CRC of every log entry: no entry is replayed (I1)") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::zero_crc_of_every_entry();
        expect_caught(sc::multi_word(log_mode::baseline, 3), cfg, "zero CRC (baseline)");
        expect_caught(sc::multi_word(log_mode::cblo, 3), cfg, "zero CRC (compressed)");
    }
    SUBCASE("drop an AALO stream: a published node loses its contents (I4)") {
        // Small entries are non-temporal (the tests' policy is a CPU one): the entry covers
        // each new node and the commit writes the node's words again, non-temporally, before
        // F1 (write_covered_blocks).
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_stream(role::aalo_stream, 0);
        expect_caught(sc::list(log_mode::tlptm, 3), cfg, "drop the first AALO stream");
    }
    SUBCASE("drop an AALO flush (log_write = store_and_flush): a published node loses its "
            "contents (I4)") {
        // Entries written with stores and flushed: the covered nodes are flushed too.
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_flush(role::aalo_flush, 0);
        scenario s = sc::list(log_mode::tlptm, 3);
        s.options.log_write = tlptm::log_write::store_and_flush;
        expect_caught(s, cfg, "drop the first AALO flush");
    }
    SUBCASE("drop F0 (mode cblo, no covered blocks): an entry persists before its node (I4)") {
        // Without AALO the new node is fenced on its own (F0) before the write-set is locked;
        // it follows the previous transaction's F1 with no stream between, hence its role f2
        // (#0 is the second insert's; the first insert's follows a ring-header fence).
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_fence(role::f2, 1);
        expect_caught(sc::list(log_mode::cblo, 3), cfg, "drop the F0 of the third insert");
    }
    SUBCASE("drop the write-back flushes: CT then passes data that is not durable (I2)") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_flush(role::write_back_flush, 0);
        cfg.mut.every = true;
        expect_caught(sc::single_word(log_mode::tlptm, 3), cfg, "drop every write-back flush");
        expect_caught(prompt_single_word(), cfg, "drop every write-back flush (prompt)");
    }
    SUBCASE("drop a log entry's flush (log_write = store_and_flush): a returned transaction "
            "is lost (I1)") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_flush(role::entry_flush, 1);
        scenario s = sc::multi_word(log_mode::tlptm, 3);
        s.options.log_write = tlptm::log_write::store_and_flush;
        expect_caught(s, cfg, "drop the second entry flush");
    }
    SUBCASE("drop the flush of a new ring generation: the first entry does not validate") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_flush(role::ring_header_flush, 0);
        expect_caught(sc::multi_word(log_mode::baseline, 3), cfg, "drop the ring header flush");
    }
    SUBCASE("drop the CT flush before a freed span is reused: stale replay over it (I3)") {
        sweep_config cfg = mutation_config();
        cfg.mut = mutation::drop_flush(role::ct_flush, 0);
        expect_caught(sc::free_reuse(log_mode::tlptm), cfg, "drop the CT flush of reclaim");
    }
    SUBCASE("drop recovery's fence before it persists CT: a crashed recovery loses data (I5)") {
        sweep_config cfg = mutation_config();
        cfg.recovery_mut = mutation::drop_fence(role::fence, 0);
        cfg.recovery_crashes = 2;
        expect_caught(sc::multi_word(log_mode::tlptm, 3), cfg, "drop recovery's data fence");
    }
    SUBCASE("drop a flush of a line recovery replayed: a crashed recovery loses data (I5)") {
        // Recovery flushes each distinct line it wrote once (detail::line_set), after all its
        // stores; a line left out would let CT pass a replayed word that is not durable.
        sweep_config cfg = mutation_config();
        cfg.recovery_mut = mutation::drop_flush(role::replay_flush, 0);
        cfg.recovery_crashes = 2;
        expect_caught(sc::multi_word(log_mode::tlptm, 3), cfg, "drop recovery's first line flush");
    }
    SUBCASE("a store the policy is not told about is reported") {
        sweep_config cfg = mutation_config();
        cfg.tracing.ignore_stored = 1;
        expect_caught(sc::single_word(log_mode::tlptm, 3), cfg, "ignore the 2nd stored() call");
    }
}

// ---- creation
// ---------------------------------------------------------------------------------------

TEST_CASE(
    "mutation aalo_not_covered: new blocks with neither F0 nor a CRC in the entry are caught") {
    // The library's own mutation (I4): an allocating commit streams its entry while the lines of
    // its new blocks may still be in flight, and the entry does not cover them.
    namespace d = tlptm::detail;
    for (tlptm::log_mode mode : {tlptm::log_mode::tlptm, tlptm::log_mode::aalo}) {
        const std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        expect_library_mutation_caught(sc::list(mode, 3), d::mutation::aalo_not_covered,
                                       "aalo_not_covered/" + mode_name,
                                       "new blocks left uncovered");
    }
}

TEST_CASE("attribution switches: a commit without F1, one that leaves the previous write-back "
          "unflushed, and one that persists nothing, are caught; so is a prompt write-back that "
          "does not flush") {
    // paired_bench_hooks switches these on to measure what a step costs; each gives up
    // durability, so the sweep must notice either.
    namespace d = tlptm::detail;
    struct candidate {
        d::mutation mut;
        std::string name;
        scenario s;
    };
    const candidate cases[] = {
        {d::mutation::no_commit_fence, "no_commit_fence",
         sc::multi_word(tlptm::log_mode::tlptm, 3)},
        {d::mutation::no_write_back_flush, "no_write_back_flush",
         sc::single_word(tlptm::log_mode::tlptm, 3)},
        {d::mutation::no_persistence, "no_persistence", sc::single_word(tlptm::log_mode::tlptm, 3)},
        {d::mutation::prompt_lines_unflushed, "prompt_lines_unflushed", prompt_single_word()},
    };
    for (const candidate& c : cases) {
        CAPTURE(c.name);
        expect_library_mutation_caught(c.s, c.mut, c.name, "it");
    }
}

TEST_CASE("mutation tail_line_not_kept: whole-line entries that erase the entries before them "
          "in their first line are caught") {
    // The library's own mutation: with log_write::non_temporal_lines, an entry's first line
    // goes out with zeros where the ring's earlier entries are. Single-word commits log small
    // entries, several to a line; under adaptive write-back their lines stay unflushed until
    // the close, so a crash image after an erasing entry loses committed transactions.
    namespace d = tlptm::detail;
    for (tlptm::write_back w : {tlptm::write_back::adaptive, tlptm::write_back::eager}) {
        const std::string name = std::string("tail_line_not_kept/") + tlptm::to_string(w);
        CAPTURE(name);
        scenario s = sc::single_word(tlptm::log_mode::tlptm, 6);
        s.options.log_write = tlptm::log_write::non_temporal_lines;
        s.options.write_back = w;
        const sweep_result base = expect_library_mutation_caught(s, d::mutation::tail_line_not_kept,
                                                                 name, "erased entries");
        CHECK(base.violations == 0);
    }
}

TEST_CASE("comparison switch flush_new_blocks: covered blocks flushed instead of streamed is "
          "durable too") {
    // paired_bench_hooks measures streamed covered blocks against the flushes they replaced;
    // that side must stay crash consistent, under eager and adaptive write-back (which then
    // flushes the pending lines at every insert). The switch must also take effect: the
    // default's trace has AALO streams (a mutation dropping one matches an event), the
    // switch's has none.
    namespace d = tlptm::detail;
    for (tlptm::write_back wb : {tlptm::write_back::eager, tlptm::write_back::adaptive}) {
        for (scenario s :
             {sc::list(tlptm::log_mode::aalo, 8), sc::list(tlptm::log_mode::tlptm, 8)}) {
            s.options.write_back = wb;
            s.name += std::string("/") + tlptm::to_string(wb);
            CAPTURE(s.name);
            sweep_config probe = mutation_config();
            probe.max_messages = 0;
            probe.mut = mutation::drop_stream(role::aalo_stream, 0);
            const bool streams = run_sweep(s, probe).mutation_matched;
            d::active_mutation.store(d::mutation::flush_new_blocks);
            const bool switch_streams = run_sweep(s, probe).mutation_matched;
            sweep_result r = run_sweep(s, mutation_config());
            d::active_mutation.store(d::mutation::none);
            MESSAGE("flush_new_blocks/" << s.name << ": " << r.summary());
            CHECK(streams);
            CHECK_FALSE(switch_streams);
            CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
            CHECK(r.crash_points > 0);
        }
    }
}

TEST_CASE("mutation deferred_lines_dropped: a commit that defers its write-back and forgets "
          "the lines left before it is caught") {
    // Adaptive and lazy write-back keep the lines of every commit since the slot's last flush
    // in one list; a deferring commit that cleared it (as an eager commit does once it has
    // flushed them) would leave earlier commits' lines unflushed while the batch at the close
    // lets CT pass them.
    namespace d = tlptm::detail;
    struct candidate {
        std::string name;
        scenario s;
    };
    // list in adaptive mode defers its inserts too (their new nodes are streamed, not
    // flushed: the tests' policy makes entries non-temporal). With entries stored and flushed
    // it would not catch the defect: its only deferring commits (an update of the first node,
    // then the pop that frees that node) drop lines that the next commit writes again or frees.
    auto with = [](scenario s, tlptm::write_back wb, const char* name) {
        s.options.write_back = wb;
        return candidate{s.name + "/" + name, s};
    };
    const candidate cases[] = {
        with(sc::single_word(tlptm::log_mode::tlptm, 4), tlptm::write_back::adaptive, "adaptive"),
        with(sc::single_word(tlptm::log_mode::tlptm, 4), tlptm::write_back::lazy, "lazy"),
        with(sc::list(tlptm::log_mode::tlptm, 8), tlptm::write_back::lazy, "lazy"),
        with(sc::list(tlptm::log_mode::tlptm, 8), tlptm::write_back::adaptive, "adaptive"),
    };
    for (const candidate& c : cases) {
        CAPTURE(c.name);
        const sweep_result base =
            expect_library_mutation_caught(c.s, d::mutation::deferred_lines_dropped,
                                           "deferred_lines_dropped/" + c.name, "the dropped lines");
        CHECK(base.violations == 0);
    }
}

TEST_CASE("mutation pending_line_stale: a line taken as pending from a batch that was cleared "
          "is caught") {
    // Deferred write-back records a line once while it is pending, by the position the slot
    // remembers for it; a batch clears the list but leaves the old lines in its buffer. Trusting
    // the position without checking it against the list's end would leave a line that is
    // written again after a batch unflushed while CT passes its commit.
    namespace d = tlptm::detail;
    for (tlptm::write_back wb : {tlptm::write_back::adaptive, tlptm::write_back::lazy}) {
        scenario s = sc::single_word(tlptm::log_mode::tlptm, 6);
        s.options.write_back = wb;
        s.options.write_back_lines = 2;
        const std::string name = tlptm::to_string(wb);
        CAPTURE(name);
        const sweep_result base =
            expect_library_mutation_caught(s, d::mutation::pending_line_stale,
                                           "pending_line_stale/" + name, "the line left unflushed");
        CHECK(base.violations == 0);
    }
}

TEST_CASE("crash during pool creation: every image is refused as not a pool or opens empty") {
    tlptm_test::temp_path path("create");
    tlptm::pool_options opt = tlptm_test::small_options();
    opt.size = std::size_t{320} << 10;
    opt.log_capacity = 4096;
    opt.base_address = std::uintptr_t{0x3a5c} << 32; // fixed: the tracer needs it up front
    std::vector<std::uint8_t> zeros(opt.size, 0);
    tracer tr(zeros, opt.base_address, {});
    opt.policy = &tr;
    {
        tlptm::pool p = tlptm::pool::create(path, opt);
        p.close();
    }
    trace t = tr.take();
    CHECK(t.violations.empty());
    std::vector<std::uint8_t> created = read_whole_file(path);
    pool_layout l = pool_layout::of(created.data());
    crash_images g(t, zeros, l, mutation{}, false, sweep_settings().cfg.images);
    opt.policy = nullptr;
    std::size_t refused = 0, opened = 0;
    std::unordered_set<std::uint64_t> seen;
    g.run([&](const crash_point& p, const image_patch& patch, const std::vector<std::uint32_t>&) {
        if (!seen.insert(patch.hash).second)
            return true;
        std::vector<std::uint8_t> img = g.durable();
        for (const auto& [line, c] : patch.lines)
            std::memcpy(img.data() + line * 64, c.data(), 64);
        write_whole_file(path, img.data(), img.size());
        try {
            tlptm::pool q = tlptm::pool::open(path, opt);
            ++opened;
            CHECK(q.last_recovery().entries_replayed == 0);
            CHECK(q.stats().heap.bytes_in_use == opt.root_capacity);
        } catch (const tlptm::layout_error&) {
            ++refused;
        } catch (const std::exception& e) {
            FAIL_CHECK(p.where << ": opening threw " << e.what());
        }
        return true;
    });
    MESSAGE("creation: " << g.points() << " crash points, " << refused << " images refused, "
                         << opened << " opened");
    CHECK(refused > 0);
    CHECK(opened > 0);
}
