// tlptm::hash_map against std::unordered_map: long random operation sequences (through several
// incremental rehashes) compared after every transaction, with integer and string keys and
// values; bounded transactions while the table grows; errors; make and destroy.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

#include "test_util.hpp"

namespace {

using tlptm_test::small_options;
using tlptm_test::temp_path;

using int_map = tlptm::hash_map<std::uint64_t, std::uint64_t>;
using str_map = tlptm::hash_map<tlptm::string, tlptm::string>;
using str_int_map = tlptm::hash_map<tlptm::string, std::uint64_t>;
using int_str_map = tlptm::hash_map<std::uint32_t, tlptm::string>;

struct map_root {
    int_map ints;
    str_map strs;
    str_int_map str_ints;
    int_str_map int_strs;
    tlptm::p<str_map*> made;
};

static_assert(std::forward_iterator<int_map::iterator>);
static_assert(std::forward_iterator<str_map::const_iterator>);

constexpr tlptm::log_mode all_modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                         tlptm::log_mode::cblo, tlptm::log_mode::tlptm};

/// What a key or value of the map reads as, in the model's type.
std::uint64_t plain(const tlptm::cell<std::uint64_t>& c) {
    return c.get();
}
std::uint32_t plain(const tlptm::cell<std::uint32_t>& c) {
    return c.get();
}
std::string plain(const tlptm::string& s) {
    return s.str();
}

/// Walks the whole map: every element once, and exactly the model's.
template <class Map, class Model>
void expect_equal(const Map& m, const Model& model, const std::string& where) {
    REQUIRE_MESSAGE(m.size() == model.size(), where);
    Model seen;
    std::size_t walked = 0;
    for (const auto& [k, v] : m) {
        ++walked;
        auto key = plain(k);
        REQUIRE_MESSAGE(seen.emplace(key, plain(v)).second, where << ": key seen twice");
    }
    REQUIRE_MESSAGE(walked == model.size(), where);
    REQUIRE_MESSAGE(seen == model, where);
    REQUIRE_MESSAGE(std::distance(m.begin(), m.end()) == static_cast<std::ptrdiff_t>(m.size()),
                    where);
}

/// Runs random operations on `m` and `model` (keys from `key(i)`, values from `value(i)`),
/// checking each result and comparing everything after each transaction.
template <class Map, class Model, class KeyOf, class ValueOf>
std::size_t random_run(tlptm::pool& pool, Map& m, Model& model, KeyOf key, ValueOf value,
                       std::uint64_t key_range, int steps, std::mt19937_64& rng,
                       std::size_t& rehash_seen) {
    using model_value = typename Model::mapped_type;
    std::size_t ops = 0;
    for (int step = 0; step < steps; ++step) {
        // Mostly inserts early (the table grows through several rehashes), then a mix.
        int batch = 1 + static_cast<int>(rng() % 8);
        tlptm::atomic(pool, [&] {
            for (int b = 0; b < batch; ++b, ++ops) {
                auto k = key(rng() % key_range);
                auto v = value(rng() % 100000);
                auto found = model.find(k);
                bool present = found != model.end();
                unsigned op = static_cast<unsigned>(rng() % 16);
                if (step < steps / 3 && op >= 8)
                    op = 0;
                switch (op) {
                case 0:
                case 1:
                case 2: {
                    auto [it, inserted] = m.insert(k, v);
                    CHECK(inserted == !present);
                    CHECK(plain(it->first) == k);
                    model.emplace(k, v);
                    CHECK(plain(it->second) == model.at(k));
                    break;
                }
                case 3: {
                    auto [it, inserted] = m.insert_or_assign(k, v);
                    CHECK(inserted == !present);
                    CHECK(plain(it->second) == model_value(v));
                    model.insert_or_assign(k, v);
                    break;
                }
                case 4: {
                    auto [it, inserted] = m.try_emplace(k, v);
                    CHECK(inserted == !present);
                    model.try_emplace(k, v);
                    break;
                }
                case 5:
                case 6: {
                    CHECK(m.erase(k) == (present ? 1u : 0u));
                    model.erase(k);
                    break;
                }
                case 7: {
                    auto it = m.find(k);
                    CHECK((it != m.end()) == present);
                    if (present) {
                        auto next = m.erase(it);
                        model.erase(k);
                        if (next != m.end())
                            CHECK(model.count(plain(next->first)) == 1);
                    }
                    break;
                }
                case 8:
                case 9: {
                    CHECK(m.contains(k) == present);
                    CHECK(m.count(k) == (present ? 1u : 0u));
                    if (present)
                        CHECK(plain(m.at(k)) == found->second);
                    else
                        CHECK_THROWS_AS(m.at(k), std::out_of_range);
                    break;
                }
                case 10: { // operator[]: inserts a value-initialised (empty) value if absent
                    m[k] = v;
                    model[k] = v;
                    break;
                }
                case 11: { // erase while iterating
                    std::uint64_t which = rng() % 5;
                    for (auto it = m.begin(); it != m.end();) {
                        if (std::hash<model_value>{}(plain(it->second)) % 23 == which) {
                            model.erase(plain(it->first));
                            it = m.erase(it);
                        } else {
                            ++it;
                        }
                    }
                    break;
                }
                case 12:
                    if (rng() % 8 == 0)
                        m.max_load_factor(0.5f + static_cast<float>(rng() % 4) * 0.5f);
                    break;
                default: {
                    auto [it, inserted] = m.emplace(k, v);
                    CHECK(inserted == !present);
                    model.emplace(k, v);
                    break;
                }
                }
                if (m.rehashing())
                    ++rehash_seen;
            }
            if (step % 4 == 0) // the whole map, as the transaction sees it
                expect_equal(m, model, "inside the transaction");
        });
        expect_equal(m, model, "after commit");
        CHECK(m.load_factor() <= m.max_load_factor() + 1.0f);
    }
    return ops;
}

std::uint64_t int_key(std::uint64_t i) {
    return i * 7919;
}
std::string str_key(std::uint64_t i) {
    return "key-" + std::to_string(i) + (i % 3 == 0 ? std::string(30, 'x') : "");
}
std::string str_value(std::uint64_t i) {
    return std::string(i % 40, static_cast<char>('a' + i % 26));
}

} // namespace

TEST_CASE("hash_map: random operations against std::unordered_map, every log mode") {
    for (tlptm::log_mode mode : all_modes) {
        std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("hash-map-random");
        auto pool = tlptm::pool::create(path, small_options(mode));
        auto* r = pool.root<map_root>();
        const std::uint64_t empty_heap = pool.stats().heap.bytes_in_use; // the root only
        std::mt19937_64 rng(static_cast<unsigned>(mode) + 3);
        std::size_t rehash_seen = 0;

        std::unordered_map<std::uint64_t, std::uint64_t> ints;
        std::size_t ops = random_run(
            pool, r->ints, ints, int_key, [](std::uint64_t v) { return v; }, 1000, 300, rng,
            rehash_seen);
        std::size_t buckets = r->ints.bucket_count();

        std::unordered_map<std::string, std::string> strs;
        ops += random_run(pool, r->strs, strs, str_key, str_value, 250, 100, rng, rehash_seen);
        std::unordered_map<std::string, std::uint64_t> str_ints;
        ops += random_run(
            pool, r->str_ints, str_ints, str_key, [](std::uint64_t v) { return v; }, 200, 60, rng,
            rehash_seen);
        std::unordered_map<std::uint32_t, std::string> int_strs;
        ops += random_run(
            pool, r->int_strs, int_strs,
            [](std::uint64_t i) { return static_cast<std::uint32_t>(i); }, str_value, 200, 60, rng,
            rehash_seen);
        MESSAGE(mode_name << ": " << ops << " random operations checked, " << rehash_seen
                          << " of them while a rehash was under way; the integer map reached "
                          << buckets << " buckets");
        CHECK(rehash_seen > 0);
        CHECK(buckets >= 256);

        // Everything survives closing and reopening (possibly in the middle of a rehash).
        pool.close();
        pool = tlptm::pool::open(path, small_options(mode));
        r = pool.root<map_root>();
        expect_equal(r->ints, ints, "reopened ints");
        expect_equal(r->strs, strs, "reopened strings");
        expect_equal(r->str_ints, str_ints, "reopened string -> int");
        expect_equal(r->int_strs, int_strs, "reopened int -> string");
        CHECK(pool.stats().heap.bytes_in_use > empty_heap);
        tlptm::atomic(pool, [&] {
            r->ints.clear();
            r->strs.destroy();
            r->str_ints.destroy();
            r->int_strs.destroy();
            CHECK(r->ints.empty());
            CHECK(r->ints.begin() == r->ints.end());
        });
        pool.close();
        pool = tlptm::pool::open(path, small_options(mode));
        CHECK(pool.stats().heap.bytes_in_use == empty_heap); // no leak
    }
}

TEST_CASE("hash_map: growth is incremental, so no transaction grows with the table") {
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("hash-map-bounded");
        auto pool = tlptm::pool::create(path, small_options(mode));
        auto* r = pool.root<map_root>();
        std::uint64_t max_log = 0, total_log = 0;
        std::size_t rehash_inserts = 0;
        constexpr std::uint64_t n = 10000;
        for (std::uint64_t k = 0; k < n; ++k) {
            std::uint64_t before = pool.stats().log_bytes;
            tlptm::atomic(pool, [&] { r->ints.insert(k, k + 1); });
            std::uint64_t used = pool.stats().log_bytes - before;
            max_log = std::max(max_log, used);
            total_log += used;
            rehash_inserts += r->ints.rehashing() ? 1 : 0;
        }
        MESSAGE(mode_name << ": " << n << " inserts, table of " << r->ints.bucket_count()
                          << " buckets, log bytes per insert: mean " << total_log / n << ", max "
                          << max_log << "; " << rehash_inserts
                          << " inserts while a rehash was under way");
        CHECK(r->ints.bucket_count() >= 8192);
        CHECK(r->ints.load_factor() <= 1.0f + 1e-3f);
        // A rehash of 8192 buckets in one transaction would log at least 64 KiB of bucket
        // heads (baseline); each insert moves two buckets.
        CHECK(max_log < 1024);
        CHECK(rehash_inserts > n / 4);
        tlptm::atomic(pool, [&] {
            for (std::uint64_t k = 0; k < n; k += 97)
                CHECK(r->ints.at(k) == k + 1);
        });
        CHECK(r->ints.size() == n);
    }
}

TEST_CASE("hash_map: string keys are found with std::string_view; entries bind as [k, v]") {
    temp_path path("hash-map-strings");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<map_root>();
    tlptm::atomic(pool, [&] {
        r->strs.insert("alpha", "1");
        r->strs.insert({"beta", "2"});
        r->strs["gamma"] = "3";
        r->strs["gamma"] += "3";
        auto [it, inserted] = r->strs.insert_or_assign(std::string("alpha"), "one");
        CHECK_FALSE(inserted);
        CHECK(it->second == "one");
        r->str_ints["x"] += 5;
        r->str_ints["x"] += 5;
    });
    // Reads outside a transaction.
    CHECK(r->strs.size() == 3);
    CHECK(r->strs.at(std::string_view("gamma")) == "33");
    CHECK(r->strs.find("delta") == r->strs.end());
    CHECK(r->str_ints.at("x") == 10u);
    std::string keys;
    for (auto& [k, v] : r->strs)
        keys += k.str() + "=" + v.str() + ";";
    CHECK(keys.size() == std::string("alpha=one;beta=2;gamma=33;").size());
    // The default hash is stable: the same for a tlptm::string and its characters.
    tlptm::atomic(pool, [&] {
        for (auto& e : r->strs)
            CHECK(tlptm::hash<tlptm::string>{}(e.first) ==
                  tlptm::hash<std::string_view>{}(e.first.str()));
    });
    CHECK(tlptm::hash<std::string_view>{}("abc") == tlptm::hash<std::string_view>{}("abc"));
    CHECK(tlptm::hash<std::uint64_t>{}(1) != tlptm::hash<std::uint64_t>{}(2));
}

TEST_CASE("hash_map: errors — outside a transaction, other pool, out of memory; abort") {
    temp_path path("hash-map-errors"), path2("hash-map-errors-2");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<map_root>();
    CHECK(r->ints.empty());
    CHECK(r->ints.find(1) == r->ints.end());
    CHECK_THROWS_AS(r->ints.insert(1, 2), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->ints[1], tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->ints.erase(1), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->ints.destroy(), tlptm::tx_scope_error);
    tlptm::atomic(pool, [&] { r->ints.insert(1, 2); });
    CHECK_THROWS_AS(r->ints.at(1) = 3, tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->ints.at(2), std::out_of_range);

    auto other = tlptm::pool::create(path2, small_options());
    CHECK_THROWS_AS(tlptm::atomic(other, [&] { r->ints.insert(5, 6); }), tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::atomic(other, [&] { r->strs.insert("a", "b"); }), tlptm::tx_scope_error);
    CHECK(r->ints.size() == 1);
    CHECK(r->strs.empty());

    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&] {
                                      for (std::uint64_t k = 10; k < 2000; ++k)
                                          r->ints.insert(k, k);
                                      r->ints.erase(1);
                                      throw std::runtime_error("abort");
                                  }),
                    std::runtime_error);
    CHECK(r->ints.size() == 1);
    CHECK(r->ints.at(1) == 2u);
    CHECK(r->ints.bucket_count() == int_map::initial_buckets);

    // A value too large for the pool: the insert fails before it stores anything.
    tlptm::atomic(pool, [&] {
        std::string huge(std::size_t{16} << 20, 'h');
        CHECK_THROWS_AS(r->strs.insert("k", huge), tlptm::out_of_memory);
        CHECK(r->strs.empty());
    });
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { r->ints.max_load_factor(0.0f); }),
                    std::invalid_argument);
}

TEST_CASE("hash_map: made with tlptm::make and destroyed with tlptm::destroy, nothing leaks") {
    temp_path path("hash-map-make");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<map_root>();
    const std::uint64_t empty_heap = pool.stats().heap.bytes_in_use;
    tlptm::atomic(pool, [&] {
        str_map* m = tlptm::make<str_map>();
        for (int i = 0; i < 300; ++i)
            m->insert(str_key(static_cast<std::uint64_t>(i)),
                      str_value(static_cast<std::uint64_t>(i)));
        r->made = m;
    });
    CHECK(r->made.get()->size() == 300);
    tlptm::atomic(pool, [&] {
        tlptm::destroy(r->made.get());
        r->made = nullptr;
    });
    pool.close();
    pool = tlptm::pool::open(path, small_options());
    CHECK(pool.stats().heap.bytes_in_use == empty_heap);
}
