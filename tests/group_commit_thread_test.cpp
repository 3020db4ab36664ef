// Group commit in msync mode (detail::sync_group, persist.hpp): threads whose fences run
// together share one msync. Driven with a recording sync function in place of msync, so that
// the tests can see which call held which range and whether it had returned: a fence must not
// return before a call that held its pages has returned. Then a pool in msync mode, whose
// fences must each cost at most one msync call.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "test_util.hpp"

namespace {

using tlptm::detail::page_range;
using tlptm::detail::sync_group;

/// Stands in for msync: records every call's ranges and when it returned, sleeps a while (so
/// that other threads' fences arrive during the call) and fails the calls it is told to. The
/// sleep is `duration` plus `per_range` for each range; with `serial`, calls wait for each
/// other as on a device that takes one at a time.
struct recorder {
    struct call {
        std::vector<page_range> ranges;
        bool returned = false;
        bool failed = false;
    };
    std::chrono::microseconds duration{300};
    std::chrono::microseconds per_range{0};
    bool serial = false;
    std::mutex device;
    std::uint64_t fail_call = ~std::uint64_t{0}; ///< index of the call that fails with EIO
    std::atomic<int> running{0};                 ///< calls running at once (must stay <= 1)
    std::atomic<int> overlapped{0};

    std::mutex m;
    std::vector<call> calls;
    std::map<std::uintptr_t, std::size_t> call_of; ///< range start -> the call that held it

    static int sync(std::span<const page_range> ranges, void* arg) noexcept {
        auto& r = *static_cast<recorder*>(arg);
        if (r.running.fetch_add(1) != 0)
            r.overlapped.fetch_add(1);
        std::size_t id;
        {
            std::lock_guard lk(r.m);
            id = r.calls.size();
            r.calls.push_back({{ranges.begin(), ranges.end()}, false, id == r.fail_call});
            for (auto [lo, hi] : ranges)
                r.call_of[lo] = id;
        }
        {
            std::unique_lock dev(r.device, std::defer_lock);
            if (r.serial)
                dev.lock();
            std::this_thread::sleep_for(r.duration +
                                        r.per_range * static_cast<long>(ranges.size()));
        }
        r.running.fetch_sub(1);
        std::lock_guard lk(r.m);
        r.calls[id].returned = true;
        return r.calls[id].failed ? EIO : 0;
    }

    /// The call that held the range starting at lo, or nullptr. The caller holds `m` while it
    /// reads the call: another thread's call may grow `calls` and move it.
    const call* holder(std::uintptr_t lo) const {
        auto it = call_of.find(lo);
        return it == call_of.end() ? nullptr : &calls[it->second];
    }
};

/// Groups whatever a call costs (the recorder's calls are fast or slow as a test needs).
constexpr auto always = sync_group::grouping::always;

/// A range no other fence of the test uses: thread t's k-th fence.
page_range unique_range(unsigned t, unsigned k) {
    const std::uintptr_t lo = ((std::uintptr_t{t} + 1) << 32) + std::uintptr_t{k} * 8192;
    return {lo, lo + 4096};
}

} // namespace

TEST_CASE("a fence returns only after a sync call that held its pages returned, and fences "
          "that run together share calls") {
    recorder rec;
    sync_group group(&recorder::sync, &rec, always);
    constexpr unsigned threads = 4, fences = 150;
    std::atomic<unsigned> not_synced{0}, own_calls{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            std::vector<page_range> pending;
            for (unsigned k = 0; k < fences; ++k) {
                const page_range mine = unique_range(t, k);
                pending.push_back(mine);
                if (k % 3 == 0) // a second range of the same fence (a log page and data pages)
                    pending.push_back({mine.first + 4096, mine.second + 4096});
                own_calls += static_cast<unsigned>(group.sync(pending));
                std::lock_guard lk(rec.m);
                const recorder::call* c = rec.holder(mine.first);
                if (c == nullptr || !c->returned || !pending.empty())
                    ++not_synced;
            }
        });
    for (auto& w : workers)
        w.join();
    CHECK(not_synced == 0);
    CHECK(rec.overlapped == 0); // one call at a time
    CHECK(own_calls == rec.calls.size());
    // Every range was synced exactly once, in one call with its fence's other range.
    std::size_t ranges = 0;
    for (const auto& c : rec.calls)
        ranges += c.ranges.size();
    CHECK(ranges == threads * (fences + (fences + 2) / 3));
    for (unsigned t = 0; t < threads; ++t)
        for (unsigned k = 0; k < fences; k += 3) {
            const page_range mine = unique_range(t, k);
            REQUIRE(rec.call_of.count(mine.first + 4096) == 1);
            CHECK(rec.call_of[mine.first] == rec.call_of[mine.first + 4096]);
        }
    // While one call runs (300 us) the other three threads' fences arrive and wait for the
    // next: far fewer calls than fences.
    MESSAGE((threads * fences) << " fences, " << rec.calls.size() << " sync calls");
    CHECK(rec.calls.size() * 4 <= threads * fences * 3);
}

TEST_CASE("two threads that commit in a loop share calls instead of taking turns") {
    // Without gathering, each waiter would lead the moment the call before it returned, while
    // the other thread still runs its next transaction: one call per fence.
    recorder rec;
    sync_group group(&recorder::sync, &rec, always);
    constexpr unsigned fences = 200;
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < 2; ++t)
        workers.emplace_back([&, t] {
            std::vector<page_range> pending;
            for (unsigned k = 0; k < fences; ++k) {
                // the transaction before the fence: far shorter than a call
                std::this_thread::sleep_for(std::chrono::microseconds(20));
                pending = {unique_range(t, k)};
                group.sync(pending);
            }
        });
    for (auto& w : workers)
        w.join();
    MESSAGE((2 * fences) << " fences, " << rec.calls.size() << " sync calls, "
                         << group.gather_timeouts() << " gathers timed out");
    CHECK(rec.calls.size() * 10 <= 2 * fences * 6); // about 0.5 calls per fence
}

TEST_CASE("a thread that stopped committing is waited for at most twice") {
    recorder rec;
    rec.duration = std::chrono::microseconds(2000);
    sync_group group(&recorder::sync, &rec, always);
    std::thread([&] {
        std::vector<page_range> pending;
        for (unsigned k = 0; k < 3; ++k) {
            pending = {unique_range(1, k)};
            group.sync(pending);
        }
    }).join();
    std::vector<page_range> pending;
    const auto start = std::chrono::steady_clock::now();
    for (unsigned k = 0; k < 10; ++k) {
        pending = {unique_range(0, k)};
        group.sync(pending);
    }
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(group.gather_timeouts() <= 2);
    CHECK(rec.calls.size() == 13);
    MESSAGE("10 calls of 2 ms alone took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
}

/// Two threads, each `fences` fences with a short transaction before each; returns the calls
/// the threads made themselves.
unsigned two_committers(sync_group& group, unsigned fences, unsigned first) {
    std::atomic<unsigned> own{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < 2; ++t)
        workers.emplace_back([&, t] {
            std::vector<page_range> pending;
            for (unsigned k = 0; k < fences; ++k) {
                std::this_thread::sleep_for(std::chrono::microseconds(20));
                pending = {unique_range(t, first + k)};
                own += static_cast<unsigned>(group.sync(pending));
            }
        });
    for (auto& w : workers)
        w.join();
    return own.load();
}

TEST_CASE("adaptive: fences make their own calls while calls are short") {
    recorder rec;
    rec.duration = std::chrono::microseconds(0);
    // Groups only above 10 ms here (50 us by default): a sanitizer's slow calls stay short.
    sync_group group(&recorder::sync, &rec, sync_group::grouping::adaptive,
                     std::chrono::milliseconds(10));
    CHECK(two_committers(group, 300, 0) == 600);
    CHECK(rec.calls.size() == 600);
    CHECK_FALSE(group.grouped());
}

TEST_CASE("adaptive: slow calls group on a device that takes one call at a time") {
    constexpr unsigned fences = 1200; // 37 windows: a bad window is outvoted
    // Sharing needs the two threads to run at once. On a loaded 2-core machine (the sanitizer
    // stage runs two tests at a time) one of them is sometimes descheduled for long stretches
    // and the calls come out at 0.72-0.75 per fence, so up to three runs are made and the best
    // counts. Without grouping every fence makes its own call (1.0 per fence) in every run.
    const std::size_t most = 2 * fences * 7 / 10; // about 0.56 calls per fence
    std::size_t best = 2 * fences;
    for (int attempt = 0; attempt < 3 && best > most; ++attempt) {
        recorder rec;
        rec.serial = true; // separate calls queue: sharing one halves the time
        sync_group group(&recorder::sync, &rec);
        const unsigned own = two_committers(group, fences, 0);
        MESSAGE((2 * fences) << " fences, " << rec.calls.size() << " calls");
        CHECK(own == rec.calls.size());
        best = std::min(best, rec.calls.size());
    }
    CHECK(best <= most);
}

TEST_CASE("adaptive: slow calls stay separate where calls overlap and cost grows with pages") {
    constexpr unsigned fences = 1200; // 37 windows: a bad window is outvoted
    // As above, a loaded machine misleads some windows: under ThreadSanitizer with another test
    // beside it one run came out at 0.78 calls per fence. Up to three runs are made and the
    // best counts. Grouping every fence would make about 0.5 calls per fence in every run.
    const std::size_t least = 2 * fences * 8 / 10; // about 0.94 calls per fence when undisturbed
    std::size_t best = 0;
    for (int attempt = 0; attempt < 3 && best < least; ++attempt) {
        recorder rec;
        rec.duration = std::chrono::microseconds(100);
        rec.per_range = std::chrono::microseconds(250); // a shared call costs nearly two
        sync_group group(&recorder::sync, &rec);
        const unsigned own = two_committers(group, fences, 0);
        MESSAGE((2 * fences) << " fences, " << rec.calls.size() << " calls");
        CHECK(own == rec.calls.size());
        best = std::max(best, rec.calls.size());
    }
    CHECK(best >= least);
}

TEST_CASE("one thread: every fence with pages is one sync call, a fence without pages none") {
    recorder rec;
    rec.duration = std::chrono::microseconds(0);
    sync_group group(&recorder::sync, &rec, always);
    std::vector<page_range> pending;
    CHECK(group.sync(pending) == 0);
    CHECK(rec.calls.empty());
    for (unsigned k = 0; k < 10; ++k) {
        pending = {unique_range(0, 2 * k), unique_range(0, 2 * k + 1)};
        CHECK(group.sync(pending) == 1);
        CHECK(pending.empty());
        REQUIRE(rec.calls.size() == k + 1);
        CHECK(rec.calls.back().ranges.size() == 2);
    }
}

struct failure_counts {
    unsigned wrong = 0; ///< returned though its call failed or never returned, or threw though
                        ///< its call succeeded
    unsigned threw = 0;
};

/// `threads` threads make 100 fences each while a call of the recorder fails.
failure_counts fence_through_failure(sync_group& group, recorder& rec, unsigned threads) {
    std::atomic<unsigned> wrong{0}, threw{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            std::vector<page_range> pending;
            for (unsigned k = 0; k < 100; ++k) {
                const page_range mine = unique_range(t, k);
                pending = {mine};
                bool ok = true;
                try {
                    group.sync(pending);
                } catch (const tlptm::error&) {
                    ++threw;
                    ok = false;
                }
                std::lock_guard lk(rec.m);
                const recorder::call* c = rec.holder(mine.first);
                if (ok ? c == nullptr || c->failed || !c->returned : c != nullptr && !c->failed)
                    ++wrong;
            }
        });
    for (auto& w : workers)
        w.join();
    return {wrong.load(), threw.load()};
}

TEST_CASE("a failed sync call fails every fence it held and every later fence") {
    SUBCASE("one thread") {
        recorder rec;
        rec.duration = std::chrono::microseconds(0);
        rec.fail_call = 2;
        sync_group group(&recorder::sync, &rec, always);
        std::vector<page_range> pending;
        for (unsigned k = 0; k < 2; ++k) {
            pending = {unique_range(0, k)};
            CHECK_NOTHROW(group.sync(pending));
        }
        pending = {unique_range(0, 2)};
        CHECK_THROWS_WITH_AS(group.sync(pending), doctest::Contains("msync failed"), tlptm::error);
        pending = {unique_range(0, 3)};
        CHECK_THROWS_AS(group.sync(pending), tlptm::error);
        CHECK(pending.empty());
        CHECK(rec.calls.size() == 3); // nothing is synced after the failure
    }
    SUBCASE("two threads making separate calls") {
        recorder rec;
        rec.duration = std::chrono::microseconds(0); // short calls: no group
        rec.fail_call = 40;
        sync_group group(&recorder::sync, &rec, sync_group::grouping::adaptive,
                         std::chrono::milliseconds(10));
        const failure_counts n = fence_through_failure(group, rec, 2);
        CHECK(n.wrong == 0);
        CHECK_FALSE(group.grouped());
        // Only calls that succeeded returned fences (one each): every other fence threw.
        CHECK(n.threw + rec.calls.size() - 1 >= 200);
        CHECK(n.threw >= 1);
    }
    SUBCASE("four threads") {
        recorder rec;
        rec.fail_call = 5;
        sync_group group(&recorder::sync, &rec, always);
        const failure_counts n = fence_through_failure(group, rec, 4);
        CHECK(n.wrong == 0);
        CHECK(rec.calls.size() == 6); // calls 0..5, none after the failed one
        CHECK(n.threw >= 1);
        CHECK(n.threw <= 4 * 100 - 5); // the five good calls held at least five fences
    }
}

TEST_CASE("a pool in msync mode: committing threads make at most one msync call per fence") {
    tlptm_test::temp_path path("group-commit");
    tlptm::pool_options opt = tlptm_test::small_options();
    opt.durability = tlptm::durability::msync;
    constexpr unsigned threads = 3, per_thread = 200;
    struct counters_root {
        tlptm::p<std::uint64_t> n[threads];
    };
    {
        auto pl = tlptm::pool::create(path, opt);
        auto* r = pl.root<counters_root>();
        const tlptm::stats before = pl.stats();
        std::vector<std::thread> workers;
        for (unsigned t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                for (unsigned k = 0; k < per_thread; ++k)
                    tlptm::atomic(pl, [&] { r->n[t] = k + 1; });
            });
        for (auto& w : workers)
            w.join();
        const tlptm::stats d = pl.stats() - before;
        MESSAGE(d.tx_committed << " commits, " << d.fences << " fences, " << d.msync_calls
                               << " msync calls");
        CHECK(d.tx_committed == threads * per_thread);
        CHECK(d.msync_calls >= 1);
        CHECK(d.msync_calls <= d.fences); // one call covers all of a fence's pages
        pl.close();
    }
    auto pl = tlptm::pool::open(path, opt);
    auto* r = pl.root<counters_root>();
    for (unsigned t = 0; t < threads; ++t)
        CHECK(r->n[t].get() == per_thread);
}
