// Fault paths of the commit (DESIGN §6): a persistence failure poisons the pool and leaks no
// lock; timestamps never pass their limit; an exception leaving a nested atomic aborts the
// whole transaction.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace {

using tlptm_test::temp_path;

struct root {
    tlptm::p<std::uint64_t> a, b, c;
};

/// Plain stores (the pool file is in RAM), with a fault switch: the n-th fence from now throws,
/// as a failed msync does.
class faulty_policy final : public tlptm_test::ram_policy {
public:
    void fence() override {
        if (countdown_.load() > 0 && countdown_.fetch_sub(1) == 1)
            throw tlptm::error("injected fault: msync failed (EIO)");
    }
    void fail_fence_after(int n) { countdown_.store(n); }

private:
    std::atomic<int> countdown_{0};
};

bool orec_locked(tlptm::pool& p, const void* addr) {
    auto& st = p.state();
    auto idx = st.orecs.index(st.offset_of(addr));
    return tlptm::detail::orec_table::locked(st.orecs[idx].load());
}

bool any_in_flight(tlptm::pool& p) {
    for (const auto& s : p.state().slots)
        if (s->in_flight.load() != 0)
            return true;
    return false;
}

} // namespace

TEST_CASE("a fence that fails in the commit poisons the pool and leaks no lock nor in_flight") {
    // "F1": the failing transaction's F1 throws. "F0": it allocates, so its first fence is the
    // AALO fence F0, which throws before the entry is streamed.
    for (const char* which : {"F1", "F0"}) {
        CAPTURE(which);
        const bool aalo = std::string(which) == "F0";
        temp_path path("fault");
        faulty_policy policy;
        auto pool = tlptm::pool::create(path, tlptm_test::options_with(policy));
        root* rt = pool.root<root>();
        tlptm::atomic(pool, [&] { rt->a = 1; });
        tlptm::atomic(pool, [&] { rt->b = 2; });

        policy.fail_fence_after(1);
        bool threw = false;
        try {
            tlptm::atomic(pool, [&] {
                rt->a = 10;
                rt->b = 20;
                if (aalo)
                    tlptm::make<root>()->c = 7;
            });
        } catch (const tlptm::error& e) {
            threw = true;
            CHECK(std::string(e.what()).find("injected fault") != std::string::npos);
        }
        CHECK(threw);
        CHECK_FALSE(orec_locked(pool, &rt->a));
        CHECK_FALSE(orec_locked(pool, &rt->b));
        CHECK_FALSE(any_in_flight(pool));
        CHECK(pool.state().poisoned());

        // Every later transaction, from any thread, throws pool_error at once: none hangs on a
        // lock left behind, none becomes durable on top of the failed one.
        CHECK_THROWS_AS(tlptm::atomic(pool, [&] { rt->a = 99; }), tlptm::pool_error);
        CHECK_THROWS_AS(tlptm::atomic(pool, [&] { return rt->a.get(); }), tlptm::pool_error);
        std::thread t(
            [&] { CHECK_THROWS_AS(tlptm::atomic(pool, [&] { rt->b = 99; }), tlptm::pool_error); });
        t.join();
        CHECK_THROWS_AS(pool.recover(), tlptm::pool_error);
        // Nothing half-applied is visible: the failed transaction's values were not written
        // back (its F1 did not complete, so whether its entry persisted is unknown).
        CHECK(rt->a.get() == 1);
        CHECK(rt->b.get() == 2);
        pool.close(); // does not hang, persists nothing

        // Reopening recovers from the log: every transaction whose atomic returned is there;
        // the failed one may or may not be (its entry was streamed before the fence failed).
        auto again = tlptm::pool::open(path, tlptm_test::small_options());
        root* r2 = again.root<root>();
        std::uint64_t a = r2->a.get(), b = r2->b.get();
        CHECK(((a == 1 && b == 2) || (a == 10 && b == 20)));
        tlptm::atomic(again, [&] { r2->c = 4; }); // a healthy pool again
        CHECK(r2->c.get() == 4);
    }
}

TEST_CASE("a fence that fails in a checkpoint poisons the pool; the slot's next owner inherits "
          "no lock") {
    temp_path path("fault-ct");
    faulty_policy policy;
    auto pool = tlptm::pool::create(path, tlptm_test::options_with(policy));
    root* rt = pool.root<root>();
    tlptm::atomic(pool, [&] { rt->a = 1; });
    policy.fail_fence_after(1); // the settle inside the checkpoint
    auto& st = pool.state();
    CHECK_THROWS_AS(st.checkpoint(st.admin_ctx), tlptm::error);
    CHECK(st.poisoned());
    std::thread t(
        [&] { CHECK_THROWS_AS(tlptm::atomic(pool, [&] { rt->a = 2; }), tlptm::pool_error); });
    t.join();
    CHECK_FALSE(orec_locked(pool, &rt->a));
}

TEST_CASE("a checkpoint too close to the timestamp limit is refused when the pool opens") {
    temp_path path("ts-limit");
    {
        auto pool = tlptm::pool::create(path, tlptm_test::small_options());
        root* rt = pool.root<root>();
        tlptm::atomic(pool, [&] { rt->a = 1; });
    }
    const std::uint64_t ct_offset = offsetof(tlptm::detail::pool_header, checkpoint_ts);
    for (std::uint64_t bad : {(std::uint64_t{1} << 56) - 2, tlptm::detail::max_commit_ts + 1}) {
        CAPTURE(bad);
        tlptm_test::write_at(path, ct_offset, &bad, sizeof bad);
        try {
            auto pool = tlptm::pool::open(path, tlptm_test::small_options());
            FAIL("a pool with CT " << bad << " opened");
        } catch (const tlptm::layout_error& e) {
            CHECK(std::string(e.what()).find("checkpoint_ts") != std::string::npos);
        }
    }
    std::uint64_t ok = tlptm::detail::max_commit_ts;
    tlptm_test::write_at(path, ct_offset, &ok, sizeof ok);
    auto pool = tlptm::pool::open(path, tlptm_test::small_options());
    CHECK(pool.last_recovery().checkpoint_before == ok);
}

TEST_CASE("no commit timestamp above the limit is issued; the pool stays openable") {
    temp_path path("ts-exhausted");
    {
        auto pool = tlptm::pool::create(path, tlptm_test::small_options());
        root* rt = pool.root<root>();
        tlptm::atomic(pool, [&] { rt->a = 1; });
        pool.state().clock.store(tlptm::detail::max_commit_ts - 1);
        tlptm::atomic(pool, [&] { rt->a = 2; }); // takes the last timestamp
        CHECK_THROWS_AS(tlptm::atomic(pool, [&] { rt->a = 3; }), tlptm::pool_error);
        CHECK(pool.state().poisoned());
        CHECK_FALSE(any_in_flight(pool));
    }
    auto pool = tlptm::pool::open(path, tlptm_test::small_options());
    CHECK(pool.root<root>()->a.get() == 2);
    CHECK(pool.last_recovery().checkpoint_after <= tlptm::detail::max_commit_ts);
}

TEST_CASE("an exception leaving a nested atomic aborts the whole transaction even if caught") {
    temp_path path("nested");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    root* rt = pool.root<root>();
    struct inner_failure : std::runtime_error {
        inner_failure() : std::runtime_error("inner") {}
    };
    bool caught_inside = false;
    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&] {
                                      rt->a = 1;
                                      try {
                                          tlptm::atomic(pool, [&] {
                                              rt->b = 2;
                                              throw inner_failure{};
                                          });
                                      } catch (const inner_failure&) {
                                          caught_inside = true;
                                      }
                                      rt->c = 3;
                                  }),
                    inner_failure);
    CHECK(caught_inside);
    CHECK(rt->a.get() == 0);
    CHECK(rt->b.get() == 0);
    CHECK(rt->c.get() == 0);
    // The next transaction is not affected.
    tlptm::atomic(pool, [&] {
        rt->a = 5;
        tlptm::atomic(pool, [&] { rt->b = 6; });
    });
    CHECK(rt->a.get() == 5);
    CHECK(rt->b.get() == 6);
}

TEST_CASE("a fence that fails in close() closes the pool all the same; reopening recovers") {
    temp_path path("fault-close");
    faulty_policy policy;
    {
        auto pool = tlptm::pool::create(path, tlptm_test::options_with(policy));
        root* rt = pool.root<root>();
        tlptm::atomic(pool, [&] { rt->a = 1; });
        tlptm::atomic(pool, [&] { rt->b = 2; }); // its write-back is settled by close()
        policy.fail_fence_after(1);
        CHECK_THROWS_AS(pool.close(), tlptm::error);
        CHECK_FALSE(pool.is_open());
        pool.close(); // a second close (and the destructor) neither hangs nor throws
    }
    auto again = tlptm::pool::open(path, tlptm_test::small_options());
    root* rt = again.root<root>();
    CHECK(rt->a.get() == 1);
    CHECK(rt->b.get() == 2);
}
