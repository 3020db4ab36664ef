// Reads of what the slot's last commit wrote (transaction.hpp, released_by_last_commit): they
// take no snapshot extension, and only the orecs that commit released count as its own.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

namespace d = tlptm::detail;

/// Words 4 KiB apart: each has an orec of its own.
struct spaced {
    tlptm::p<std::uint64_t> v;
    std::uint8_t pad[4096 - 8];
};

struct own_root {
    spaced x, y, z;
};

tlptm::pool_options options(std::uint32_t threads) {
    auto o = tlptm_test::small_options();
    o.max_threads = threads + 2;
    return o;
}

std::uint64_t version_of(tlptm::pool& pool, const void* word) {
    d::pool_state& st = pool.state();
    return d::orec_table::version(st.orecs[st.orecs.index(st.offset_of(word))].load());
}

/// A pool whose clock stands at k with this thread's slot attached, and x = 7 committed at
/// ts k + 1 (commits take a ts above the clock and leave the clock where it is: GV5). Raising
/// the clock is always allowed; from k on, a slot attached later also takes k + 1 next.
struct clock_at_k {
    tlptm_test::temp_path path;
    tlptm::pool pool;
    own_root* r;
    d::pool_state& st;
    std::uint64_t k;

    clock_at_k()
        : path("own-read"), pool(tlptm::pool::create(path, options(2))), r(pool.root<own_root>()),
          st(pool.state()) {
        tlptm::atomic(pool, [&] { r->y.v = 1; }); // attaches this thread's slot
        k = st.advance_clock(st.clock.load() + 100);
        tlptm::atomic(pool, [&] { r->x.v = 7; });
        REQUIRE(version_of(pool, &r->x.v) == k + 1);
        REQUIRE(st.clock.load() == k);
    }
};

} // namespace

TEST_CASE_FIXTURE(clock_at_k, "a transaction reads its thread's last commit without raising the "
                              "clock; another slot's commit at the same ts is not its own") {
    const std::uint64_t mine = k + 1; // the slot's last commit

    // The next transactions read x, which the last commit released: no extension (which would
    // raise the clock to the version it found), read-write and read-only alike.
    const std::uint64_t seen = tlptm::atomic(pool, [&] { return r->x.v.get(); });
    CHECK(seen == 7);
    CHECK(st.clock.load() == k);

    // Another thread's slot, attached now (its last ts is the clock), commits z at ts K + 1:
    // the version this slot's last commit released, on an orec it did not release.
    std::thread([&] { tlptm::atomic(pool, [&] { r->z.v = 5; }); }).join();
    REQUIRE(version_of(pool, &r->z.v) == mine);
    REQUIRE(st.clock.load() == k);
#if defined(TLPTM_SCHED_HOOKS)
    // The version alone taken as proof: the read of z would count as this slot's own.
    d::active_mutation.store(d::mutation::own_version_only);
    const std::uint64_t z_mutated = tlptm::atomic(pool, [&] { return r->z.v.get(); });
    d::active_mutation.store(d::mutation::none);
    CHECK(z_mutated == 5);
    CHECK(st.clock.load() == k); // what the check below catches
#endif
    const std::uint64_t z = tlptm::atomic(pool, [&] { return r->z.v.get(); });
    CHECK(z == 5);
    CHECK(st.clock.load() == mine); // not this slot's: the read extended the snapshot

    // A commit that reads its own last write and writes again: the released set moves on.
    tlptm::atomic(pool, [&] { r->x.v = r->x.v + 1; });
    const std::uint64_t clock1 = st.clock.load();
    tlptm::atomic(pool, [&] { r->y.v = r->x.v + 1; });
    CHECK(st.clock.load() == clock1);
    CHECK(r->y.v.get() == 9);
}

TEST_CASE_FIXTURE(clock_at_k, "an extension raises the clock to the slot's last commit, not only "
                              "to the version it found") {
    tlptm::atomic(pool, [&] { r->y.v = 2; }); // ts k + 2: the slot's last commit
    REQUIRE(version_of(pool, &r->y.v) == k + 2);
    REQUIRE(st.clock.load() == k);
    // Another slot commits z at ts k + 1; reading it extends this attempt's snapshot.
    std::thread([&] { tlptm::atomic(pool, [&] { r->z.v = 5; }); }).join();
    REQUIRE(version_of(pool, &r->z.v) == k + 1);
    CHECK(tlptm::atomic(pool, [&] { return r->z.v.get(); }) == 5);
    // Raised to k + 2 (the slot's last commit), not just to z's k + 1: x, written two commits
    // back, is now within every new snapshot, and reading it extends nothing.
    CHECK(st.clock.load() == k + 2);
    CHECK(tlptm::atomic(pool, [&] { return r->x.v.get() + r->z.v.get(); }) == 12);
    CHECK(st.clock.load() == k + 2);
}

TEST_CASE("own reads keep opacity: threads read their last commit and each other's pairs") {
    // Each thread t keeps a pair (a[t], b[t]) equal and a counter c[t] that only it writes:
    // every transaction reads its own counter (its last commit's orec: an own read), checks
    // the other threads' pairs (an inconsistent snapshot sees a != b) and rewrites its pair.
    // Disjoint commits often share a ts, which is what the released set guards against.
    constexpr unsigned threads = 3;
    struct pair_line {
        tlptm::p<std::uint64_t> a, c;
        std::uint8_t pad[256 - 16];
        tlptm::p<std::uint64_t> b;
        std::uint8_t pad2[256 - 8];
    };
    struct root {
        pair_line t[threads];
    };
    tlptm_test::temp_path path("own-opacity");
    auto pool = tlptm::pool::create(path, options(threads));
    auto* r = pool.root<root>();
    std::atomic<long> inconsistent{0}, lost{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
            std::mt19937_64 rng(t + 11);
            for (std::uint64_t n = 1; n <= 4000; ++n) {
                const std::uint64_t v = rng();
                tlptm::atomic(pool, [&] {
                    if (r->t[t].c.get() != n - 1)
                        ++lost; // this thread's own last commit, read back
                    for (unsigned u = 0; u < threads; ++u)
                        if (u != t && r->t[u].a.get() != r->t[u].b.get())
                            ++inconsistent;
                    r->t[t].a = v;
                    r->t[t].c = n;
                    r->t[t].b = v;
                });
                // A read-only transaction: no commit-time validation to fall back on.
                tlptm::atomic(pool, [&] {
                    for (unsigned u = 0; u < threads; ++u)
                        if (r->t[u].a.get() != r->t[u].b.get())
                            ++inconsistent;
                });
            }
        });
    for (auto& w : workers)
        w.join();
    CHECK(inconsistent.load() == 0);
    CHECK(lost.load() == 0);
    for (unsigned t = 0; t < threads; ++t)
        CHECK(r->t[t].c.get() == 4000);
}
