// tlptm::vector against std::vector: long random operation sequences compared after every
// step, in every log mode; errors, aborts, reopening, algorithms.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <ranges>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using tlptm_test::small_options;
using tlptm_test::temp_path;

struct point {
    std::int32_t x, y;
    bool operator==(const point&) const = default;
};

struct vec_root {
    tlptm::vector<std::uint64_t> a, b;
    tlptm::vector<point> pts;
    tlptm::p<tlptm::vector<std::uint32_t>*> made;
};

static_assert(std::contiguous_iterator<tlptm::vector<int>::iterator>);
static_assert(std::contiguous_iterator<tlptm::vector<int>::const_iterator>);
static_assert(std::ranges::contiguous_range<tlptm::vector<int>>);
static_assert(std::sortable<tlptm::vector<int>::iterator>);
static_assert(std::is_same_v<tlptm::vector<int>::value_type, int>);
static_assert(sizeof(tlptm::vector<int>) == 24);

constexpr tlptm::log_mode all_modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                         tlptm::log_mode::cblo, tlptm::log_mode::tlptm};

/// Checks v against the model, element by element (reads through the running transaction if
/// there is one, else directly).
void expect_equal(const tlptm::vector<std::uint64_t>& v, const std::vector<std::uint64_t>& model,
                  const std::string& where) {
    REQUIRE_MESSAGE(v.size() == model.size(), where);
    REQUIRE_MESSAGE(v.capacity() >= v.size(), where);
    REQUIRE_MESSAGE(v.to_std() == model, where);
    for (std::size_t i = 0; i < model.size(); i += 1 + model.size() / 8)
        REQUIRE_MESSAGE(v[i] == model[i], where << " at " << i);
}

/// One random operation, applied to both the vector and the model. Returns its name.
std::string random_op(std::mt19937_64& rng, tlptm::vector<std::uint64_t>& v,
                      tlptm::vector<std::uint64_t>& other, std::vector<std::uint64_t>& model,
                      std::vector<std::uint64_t>& other_model) {
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n + 1)); };
    std::uint64_t x = rng() % 1000;
    switch (rng() % 20) {
    case 0:
    case 1:
    case 2:
        v.push_back(x);
        model.push_back(x);
        return "push_back";
    case 3:
        CHECK(v.emplace_back(x) == x);
        model.emplace_back(x);
        return "emplace_back";
    case 4:
        if (model.empty()) {
            CHECK_THROWS_AS(v.pop_back(), std::out_of_range);
        } else {
            v.pop_back();
            model.pop_back();
        }
        return "pop_back";
    case 5: {
        std::size_t at = pick(model.size());
        auto it = v.insert(v.begin() + at, x);
        CHECK(*it == x);
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), x);
        return "insert one";
    }
    case 6: {
        std::size_t at = pick(model.size()), n = rng() % 40;
        v.insert(v.cbegin() + at, n, x);
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), n, x);
        return "insert n";
    }
    case 7: {
        std::size_t at = pick(model.size());
        std::vector<std::uint64_t> src(rng() % 50);
        std::iota(src.begin(), src.end(), x);
        v.insert(v.begin() + at, src.begin(), src.end());
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), src.begin(), src.end());
        return "insert range";
    }
    case 8: { // a range of the vector itself (aliasing)
        if (model.empty())
            return "noop";
        std::size_t f = pick(model.size() - 1), l = f + pick(model.size() - f);
        std::size_t at = pick(model.size());
        std::vector<std::uint64_t> copy(model.begin() + static_cast<std::ptrdiff_t>(f),
                                        model.begin() + static_cast<std::ptrdiff_t>(l));
        v.insert(v.begin() + at, v.begin() + f, v.begin() + l);
        model.insert(model.begin() + static_cast<std::ptrdiff_t>(at), copy.begin(), copy.end());
        return "insert self range";
    }
    case 9: {
        if (model.empty())
            return "noop";
        std::size_t at = pick(model.size() - 1);
        auto it = v.erase(v.begin() + at);
        CHECK(it == v.begin() + at);
        model.erase(model.begin() + static_cast<std::ptrdiff_t>(at));
        return "erase one";
    }
    case 10: {
        std::size_t f = pick(model.size()), l = f + pick(model.size() - f);
        v.erase(v.begin() + f, v.begin() + l);
        model.erase(model.begin() + static_cast<std::ptrdiff_t>(f),
                    model.begin() + static_cast<std::ptrdiff_t>(l));
        return "erase range";
    }
    case 11: {
        std::size_t n = rng() % 150;
        if (rng() % 2) {
            v.resize(n);
            model.resize(n);
        } else {
            v.resize(n, x);
            model.resize(n, x);
        }
        return "resize";
    }
    case 12: {
        std::size_t n = rng() % 300;
        std::size_t before = v.capacity();
        v.reserve(n);
        CHECK(v.capacity() >= std::max(n, before));
        return "reserve";
    }
    case 13:
        if (rng() % 4 == 0) {
            std::size_t cap = v.capacity();
            v.clear();
            model.clear();
            CHECK(v.capacity() == cap);
        } else {
            v.shrink_to_fit();
            CHECK(v.capacity() == model.size());
        }
        return "clear / shrink_to_fit";
    case 14:
        if (rng() % 2) {
            std::size_t n = rng() % 60;
            v.assign(n, x);
            model.assign(n, x);
        } else {
            auto r = std::views::iota(x, x + rng() % 60);
            v.assign_range(r);
            model.assign(r.begin(), r.end());
        }
        return "assign";
    case 15:
    case 16:
        if (!model.empty()) {
            std::size_t at = pick(model.size() - 1);
            v[at] = x;
            v.at(at) += 3;
            model[at] = x + 3;
        }
        CHECK_THROWS_AS(v.at(model.size()), std::out_of_range);
        return "store element";
    case 17:
        v.swap(other);
        std::swap(model, other_model);
        return "swap";
    case 18:
        std::sort(v.begin(), v.end());
        std::sort(model.begin(), model.end());
        return "std::sort";
    default:
        std::ranges::reverse(v);
        std::ranges::reverse(model);
        return "ranges::reverse";
    }
}

} // namespace

TEST_CASE("vector: random operations against std::vector, every log mode") {
    for (tlptm::log_mode mode : all_modes) {
        std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("vector-random");
        auto pool = tlptm::pool::create(path, small_options(mode));
        auto* r = pool.root<vec_root>();
        std::mt19937_64 rng(static_cast<unsigned>(mode) + 7);
        std::vector<std::uint64_t> model, other;
        std::size_t ops = 0;
        for (int step = 0; step < 700; ++step) {
            // One to six operations per transaction, each checked inside it (the transaction's
            // own stores), then the committed state checked outside.
            int batch = 1 + static_cast<int>(rng() % 6);
            tlptm::atomic(pool, [&] {
                for (int k = 0; k < batch; ++k) {
                    std::string what = random_op(rng, r->a, r->b, model, other);
                    expect_equal(r->a, model, "inside, after " + what);
                    ++ops;
                }
            });
            expect_equal(r->a, model, "after commit");
            expect_equal(r->b, other, "other after commit");
        }
        MESSAGE(mode_name << ": " << ops << " random operations checked");
        // Everything survives closing and reopening.
        pool.close();
        auto again = tlptm::pool::open(path, small_options(mode));
        expect_equal(again.root<vec_root>()->a, model, "reopened");
        expect_equal(again.root<vec_root>()->b, other, "reopened other");
    }
}

TEST_CASE("vector: an aborted transaction leaves the vector as it was") {
    temp_path path("vector-abort");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<vec_root>();
    tlptm::atomic(pool, [&] { r->a.assign({1, 2, 3}); });
    std::uint64_t* before_data = reinterpret_cast<std::uint64_t*>(r->a.data());
    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&] {
                                      for (std::uint64_t i = 0; i < 100; ++i)
                                          r->a.push_back(i); // grows: new buffer, old freed
                                      r->a[0] = 42;
                                      throw std::runtime_error("abort");
                                  }),
                    std::runtime_error);
    CHECK(r->a.to_std() == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(reinterpret_cast<std::uint64_t*>(r->a.data()) == before_data);
}

TEST_CASE("vector: errors — outside a transaction, out of range, out of memory, other pool") {
    temp_path path("vector-errors"), path2("vector-errors-2");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<vec_root>();
    tlptm::atomic(pool, [&] { r->a.assign({5, 6}); });

    // Reads outside a transaction are allowed; stores are not.
    CHECK(r->a.size() == 2);
    CHECK(r->a[1] == 6);
    CHECK(std::ranges::equal(r->a, std::vector<std::uint64_t>{5, 6}));
    CHECK_THROWS_AS(r->a.push_back(1), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->a.clear(), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->a.reserve(10), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->a[0] = 1, tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->a.destroy(), tlptm::tx_scope_error);

    tlptm::atomic(pool, [&] {
        CHECK_THROWS_AS(r->a.at(2), std::out_of_range);
        CHECK_THROWS_AS(r->b.pop_back(), std::out_of_range);
        CHECK_THROWS_AS(r->a.reserve(r->a.max_size() + 1), std::length_error);
    });
    // The pool is 8 MiB: a 64 MiB buffer cannot be had. The transaction aborts.
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { r->a.reserve(std::size_t{8} << 20); }),
                    tlptm::out_of_memory);
    CHECK(r->a.to_std() == std::vector<std::uint64_t>{5, 6});
    // Caught inside the transaction: the vector is unchanged (the allocation came first).
    tlptm::atomic(pool, [&] {
        CHECK_THROWS_AS(r->a.resize(std::size_t{8} << 20), tlptm::out_of_memory);
        CHECK(r->a.to_std() == std::vector<std::uint64_t>{5, 6});
        r->a.push_back(7);
    });
    CHECK(r->a.to_std() == std::vector<std::uint64_t>{5, 6, 7});

    // A vector of one pool used in a transaction of another.
    auto other = tlptm::pool::create(path2, small_options());
    CHECK_THROWS_AS(tlptm::atomic(other, [&] { r->a.push_back(8); }), tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::atomic(other, [&] { r->b.push_back(8); }), tlptm::tx_scope_error);
    CHECK(r->a.to_std() == std::vector<std::uint64_t>{5, 6, 7});
    CHECK(r->b.empty());
}

TEST_CASE("vector: made with tlptm::make, destroyed with tlptm::destroy, frees everything") {
    temp_path path("vector-make");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<vec_root>();
    std::uint64_t base = pool.stats().heap.bytes_in_use;
    tlptm::atomic(pool, [&] {
        auto* v = tlptm::make<tlptm::vector<std::uint32_t>>();
        CHECK(v->empty());
        for (std::uint32_t i = 0; i < 5000; ++i)
            v->push_back(i);
        r->made = v;
        r->pts.emplace_back(1, 2);
        r->pts.push_back({3, 4});
    });
    CHECK(pool.stats().heap.bytes_in_use > base + 5000 * 4);
    auto* v = r->made.get();
    CHECK(v->size() == 5000);
    CHECK(std::accumulate(v->begin(), v->end(), std::uint64_t{0}) == 4999ull * 5000 / 2);
    CHECK(*std::ranges::find(*v, 1234u) == 1234u);
    CHECK(std::ranges::lower_bound(*v, 777u) - v->begin() == 777);
    CHECK(r->pts.at(1).get() == point{3, 4});
    tlptm::atomic(pool, [&] {
        tlptm::destroy(r->made.get());
        r->made = nullptr;
        r->pts.destroy();
        CHECK(r->pts.capacity() == 0);
    });
    // Freed blocks wait for I3; a reopen rebuilds the heap from the persistent bitmaps.
    pool.close();
    pool = tlptm::pool::open(path, small_options());
    CHECK(pool.stats().heap.bytes_in_use == base);
}

TEST_CASE("vector: growth writes the new buffer in place (AALO) and logs only the header") {
    temp_path path("vector-aalo");
    auto pool = tlptm::pool::create(path, small_options(tlptm::log_mode::tlptm));
    auto* r = pool.root<vec_root>();
    tlptm::atomic(pool, [&] {
        for (std::uint64_t i = 0; i < 1000; ++i)
            r->a.push_back(i * 0x0101010101010101ull);
    });
    tlptm::stats before = pool.stats();
    tlptm::atomic(pool, [&] { r->a.reserve(4000); }); // 8000 bytes copied to a new buffer
    tlptm::stats after = pool.stats();
    CHECK(after.aalo_bytes - before.aalo_bytes >= 8000);
    CHECK(after.log_bytes - before.log_bytes < 200); // header words and allocator bits only
    CHECK(r->a.capacity() == 4000);
    CHECK(r->a[999] == 999 * 0x0101010101010101ull);
}
