// Several threads on one tlptm::hash_map, checked against per-thread histories: disjoint keys
// (while the table grows through incremental rehashes) and overlapping keys (every increment
// must see a distinct value: the increments of all threads are serialisable). Small enough
// for ThreadSanitizer.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

using tlptm_test::small_options;
using tlptm_test::temp_path;

struct conc_root {
    tlptm::hash_map<std::uint64_t, std::uint64_t> ints;
    tlptm::hash_map<tlptm::string, std::uint64_t> counters;
};

constexpr unsigned threads = 3;

/// Runs body(t) on `threads` threads at once and rethrows the first failure.
template <class F> void run_threads(F body) {
    std::vector<std::thread> ts;
    std::vector<std::exception_ptr> failed(threads);
    std::atomic<unsigned> ready{0};
    for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            ready.fetch_add(1);
            while (ready.load() < threads)
                std::this_thread::yield();
            try {
                body(t);
            } catch (...) {
                failed[t] = std::current_exception();
            }
        });
    for (auto& th : ts)
        th.join();
    for (auto& f : failed)
        if (f)
            std::rethrow_exception(f);
}

} // namespace

TEST_CASE("hash_map: threads on disjoint keys, the table growing under them") {
    temp_path path("hash-map-disjoint");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<conc_root>();
    std::vector<std::map<std::uint64_t, std::uint64_t>> models(threads);
    std::atomic<std::size_t> mismatches{0}, rehash_seen{0};
    run_threads([&](unsigned t) {
        std::mt19937_64 rng(t + 1);
        auto& model = models[t];
        for (int i = 0; i < 700; ++i) {
            std::uint64_t key = (std::uint64_t{t} << 32) | (rng() % 400);
            std::uint64_t v = rng();
            bool erase = rng() % 4 == 0;
            // The lambda may run several times (conflicts): it only touches the pool.
            auto [before, rehashing] = tlptm::atomic(pool, [&] {
                auto it = r->ints.find(key);
                std::uint64_t old = it == r->ints.end() ? 0 : it->second.get() + 1;
                if (erase)
                    r->ints.erase(key);
                else
                    r->ints.insert_or_assign(key, v);
                return std::pair{old, r->ints.rehashing()};
            });
            // Only this thread writes its keys: what it saw is exactly its own history.
            auto m = model.find(key);
            std::uint64_t expected = m == model.end() ? 0 : m->second + 1;
            if (before != expected)
                mismatches.fetch_add(1);
            if (rehashing)
                rehash_seen.fetch_add(1);
            if (erase)
                model.erase(key);
            else
                model[key] = v;
        }
    });
    CHECK(mismatches.load() == 0);
    CHECK(rehash_seen.load() > 0);
    std::map<std::uint64_t, std::uint64_t> all, seen;
    for (const auto& m : models)
        all.insert(m.begin(), m.end());
    tlptm::atomic(pool, [&] {
        for (const auto& [k, v] : r->ints)
            seen.emplace(k.get(), v.get());
    });
    CHECK(seen == all);
    CHECK(r->ints.size() == all.size());
    MESSAGE(threads << " threads: " << all.size() << " keys, " << r->ints.bucket_count()
                    << " buckets, " << rehash_seen.load()
                    << " transactions saw a rehash under way, " << pool.stats().tx_aborted
                    << " aborts");
}

TEST_CASE("hash_map: threads on overlapping keys: every increment sees a distinct value") {
    temp_path path("hash-map-overlap");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<conc_root>();
    constexpr int per_thread = 500;
    // history[t] = (key, value after this thread's increment), in program order.
    std::vector<std::vector<std::pair<std::string, std::uint64_t>>> history(threads);
    run_threads([&](unsigned t) {
        std::mt19937_64 rng(t + 100);
        for (int i = 0; i < per_thread; ++i) {
            std::string key = "counter-" + std::to_string(rng() % 24);
            std::uint64_t filler = (std::uint64_t{t + 1} << 40) | static_cast<std::uint64_t>(i);
            std::uint64_t after = tlptm::atomic(pool, [&] {
                std::uint64_t v = r->counters[key] += 1;
                r->ints.insert(filler, v); // disjoint inserts: the table grows meanwhile
                return v;
            });
            history[t].emplace_back(key, after);
        }
    });
    // Per key, the values the threads saw are 1..n, each once; per thread, increasing.
    std::map<std::string, std::vector<std::uint64_t>> values;
    for (const auto& h : history) {
        std::map<std::string, std::uint64_t> last;
        for (const auto& [key, v] : h) {
            CHECK(v > last[key]);
            last[key] = v;
            values[key].push_back(v);
        }
    }
    std::size_t total = 0;
    for (auto& [key, vs] : values) {
        std::sort(vs.begin(), vs.end());
        for (std::size_t i = 0; i < vs.size(); ++i)
            REQUIRE_MESSAGE(vs[i] == i + 1, key << ": increments lost or seen twice");
        CHECK(r->counters.at(key) == vs.size());
        total += vs.size();
    }
    CHECK(total == threads * per_thread);
    CHECK(r->counters.size() == values.size());
    CHECK(r->ints.size() == threads * per_thread);
    MESSAGE(threads << " threads, " << total << " increments of " << values.size()
                    << " shared string keys, " << pool.stats().tx_aborted << " aborts");
}

TEST_CASE("hash_map: threads that start one after another count in different orec spans") {
    // The count's stripes are 64 bytes, four to a span of orecs (tlptm::false_sharing_span):
    // consecutive threads must not share a span, and eight threads use every stripe once.
    namespace d = tlptm::detail;
    constexpr std::size_t per_span = tlptm::false_sharing_span / sizeof(d::map_size_stripe);
    std::vector<std::size_t> got;
    for (std::size_t k = 0; k < d::map_stripes; ++k)
        std::thread([&] { got.push_back(d::this_thread_map_stripe()); }).join();
    std::vector<std::size_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t k = 0; k < d::map_stripes; ++k)
        CHECK(sorted[k] == k);
    for (std::size_t k = 1; k < got.size(); ++k)
        CHECK(got[k] / per_span != got[k - 1] / per_span);
}
