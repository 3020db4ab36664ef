// tlptm::string against std::string: long random operation sequences compared after every
// step, in every log mode; searches, comparisons, hashes, c_str inside transactions, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <ranges>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "test_util.hpp"

namespace {

using tlptm_test::small_options;
using tlptm_test::temp_path;

struct str_root {
    tlptm::string s, t;
    tlptm::p<tlptm::string*> made;
};

static_assert(std::contiguous_iterator<tlptm::string::iterator>);
static_assert(sizeof(tlptm::string) == 24);

constexpr tlptm::log_mode all_modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                         tlptm::log_mode::cblo, tlptm::log_mode::tlptm};

std::string random_text(std::mt19937_64& rng, std::size_t max_len) {
    std::string out(rng() % (max_len + 1), ' ');
    for (char& c : out)
        c = static_cast<char>('a' + rng() % 4); // a small alphabet: searches find things
    return out;
}

/// Compares every read operation of s with the model.
void expect_equal(const tlptm::string& s, const std::string& model, std::mt19937_64& rng,
                  const std::string& where) {
    REQUIRE_MESSAGE(s.size() == model.size(), where);
    REQUIRE_MESSAGE(s.capacity() >= s.size(), where);
    REQUIRE_MESSAGE(s.str() == model, where);
    REQUIRE_MESSAGE(s == model, where);
    REQUIRE_MESSAGE(s.empty() == model.empty(), where);
    std::string needle = random_text(rng, 3);
    std::size_t pos = rng() % (model.size() + 2);
    CHECK_MESSAGE(s.find(needle, pos) == model.find(needle, pos), where);
    CHECK_MESSAGE(s.rfind(needle, pos) == model.rfind(needle, pos), where);
    CHECK_MESSAGE(s.find('b', pos) == model.find('b', pos), where);
    CHECK_MESSAGE(s.find_first_of(needle, pos) == model.find_first_of(needle, pos), where);
    CHECK_MESSAGE(s.find_last_not_of(needle, pos) == model.find_last_not_of(needle, pos), where);
    CHECK_MESSAGE(s.starts_with(needle) == model.starts_with(needle), where);
    CHECK_MESSAGE(s.ends_with(needle) == model.ends_with(needle), where);
    CHECK_MESSAGE((s.compare(needle) < 0) == (model.compare(needle) < 0), where);
    CHECK_MESSAGE((s <=> std::string_view(needle)) == (model <=> needle), where);
    if (pos <= model.size())
        CHECK_MESSAGE(s.substr(pos, 5) == model.substr(pos, 5), where);
    else
        CHECK_THROWS_AS(s.substr(pos), std::out_of_range);
    CHECK_MESSAGE(std::hash<tlptm::string>{}(s) == std::hash<std::string>{}(model), where);
    CHECK_MESSAGE(tlptm::hash<tlptm::string>{}(s) == tlptm::hash<std::string_view>{}(model), where);
    if (!model.empty())
        CHECK_MESSAGE(s[model.size() - 1] == model.back(), where);
}

std::string random_op(std::mt19937_64& rng, tlptm::string& s, tlptm::string& t, std::string& m,
                      std::string& mt) {
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n + 1)); };
    std::string text = random_text(rng, 24);
    switch (rng() % 18) {
    case 0:
    case 1:
        s.append(text);
        m.append(text);
        return "append";
    case 2:
        s += text[0]; // '\0' when text is empty: embedded NULs
        m += text[0];
        return "+= char";
    case 3:
        s.push_back('z');
        m.push_back('z');
        return "push_back";
    case 4:
        if (m.empty()) {
            CHECK_THROWS_AS(s.pop_back(), std::out_of_range);
        } else {
            s.pop_back();
            m.pop_back();
        }
        return "pop_back";
    case 5: {
        std::size_t at = pick(m.size());
        s.insert(at, text);
        m.insert(at, text);
        CHECK_THROWS_AS(s.insert(m.size() + 1, text), std::out_of_range);
        return "insert";
    }
    case 6: {
        std::size_t at = pick(m.size()), n = rng() % 30;
        s.erase(at, n);
        m.erase(at, n);
        return "erase";
    }
    case 7: {
        std::size_t at = pick(m.size()), n = rng() % 10;
        s.replace(at, n, text);
        m.replace(at, n, text);
        return "replace";
    }
    case 8:
        s = text;
        m = text;
        return "assign";
    case 9: {
        std::size_t n = rng() % 80;
        s.resize(n, 'q');
        m.resize(n, 'q');
        return "resize";
    }
    case 10:
        if (rng() % 3 == 0) {
            s.clear();
            m.clear();
        } else {
            s.shrink_to_fit();
            CHECK(s.capacity() == m.size());
        }
        return "clear / shrink_to_fit";
    case 11:
        s.reserve(rng() % 200);
        return "reserve";
    case 12:
        if (!m.empty()) {
            std::size_t at = pick(m.size() - 1);
            s[at] = 'X';
            m[at] = 'X';
        }
        CHECK_THROWS_AS(s.at(m.size()), std::out_of_range);
        return "store char";
    case 13:
        s.swap(t);
        std::swap(m, mt);
        return "swap";
    case 14:
        s.append(s); // aliasing
        m.append(std::string(m));
        return "append self";
    case 15:
        t = s;
        mt = m;
        return "copy assign";
    case 16: {
        std::size_t at = pick(m.size());
        s.insert(at, t);
        m.insert(at, mt);
        return "insert other";
    }
    default:
        std::ranges::sort(s);
        std::ranges::sort(m);
        return "ranges::sort";
    }
}

} // namespace

TEST_CASE("string: random operations against std::string, every log mode") {
    for (tlptm::log_mode mode : all_modes) {
        std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("string-random");
        auto pool = tlptm::pool::create(path, small_options(mode));
        auto* r = pool.root<str_root>();
        std::mt19937_64 rng(static_cast<unsigned>(mode) + 11);
        std::string m, mt;
        std::size_t ops = 0, c_str_checked = 0, c_str_refused = 0;
        for (int step = 0; step < 400; ++step) {
            int batch = 1 + static_cast<int>(rng() % 5);
            tlptm::atomic(pool, [&] {
                for (int k = 0; k < batch; ++k) {
                    std::string what = random_op(rng, r->s, r->t, m, mt);
                    expect_equal(r->s, m, rng, "inside, after " + what);
                    expect_equal(r->t, mt, rng, "other inside, after " + what);
                    // Inside a transaction c_str() is either right or refused, never stale.
                    try {
                        std::string seen(r->s.c_str(), r->s.size()); // outside CHECK: it may throw
                        CHECK(seen == m);
                        ++c_str_checked;
                    } catch (const tlptm::tx_scope_error&) {
                        ++c_str_refused;
                    }
                    ++ops;
                }
            });
            expect_equal(r->s, m, rng, "after commit");
            CHECK(std::string(r->s.c_str(), r->s.size()) == m); // outside: the bytes in place
            CHECK(r->s.c_str()[m.size()] == '\0');
            CHECK(r->s.view() == m);
            CHECK(r->t.view() == mt);
        }
        MESSAGE(mode_name << ": " << ops << " random operations checked; c_str inside the "
                          << "transaction: " << c_str_checked << " right, " << c_str_refused
                          << " refused");
        CHECK(c_str_checked > 0);
        pool.close();
        auto again = tlptm::pool::open(path, small_options(mode));
        CHECK(again.root<str_root>()->s.str() == m);
        CHECK(again.root<str_root>()->t.str() == mt);
    }
}

TEST_CASE("string: c_str of a string changed by logged stores is refused inside the transaction") {
    temp_path path("string-c_str");
    auto pool = tlptm::pool::create(path, small_options(tlptm::log_mode::tlptm));
    auto* r = pool.root<str_root>();
    tlptm::atomic(pool, [&] {
        r->s.reserve(100);
        r->s = "abc";
        CHECK(std::string_view(r->s) == "abc"); // a new buffer: written in place (AALO)
    });
    tlptm::atomic(pool, [&] {
        CHECK(std::string(r->s.c_str()) == "abc");
        r->s += "def"; // fits: logged stores into the old buffer
        CHECK_THROWS_AS(r->s.c_str(), tlptm::tx_scope_error);
        CHECK(r->s.str() == "abcdef");
    });
    CHECK(std::string(r->s.c_str()) == "abcdef");
    std::ostringstream os;
    os << r->s;
    CHECK(os.str() == "abcdef");
    CHECK(r->s + "!" == "abcdef!");
    CHECK("<" + r->s == "<abcdef");
}

TEST_CASE("string: errors, aborts, other pools, make and destroy") {
    temp_path path("string-errors"), path2("string-errors-2");
    auto pool = tlptm::pool::create(path, small_options());
    auto* r = pool.root<str_root>();
    CHECK(r->s.empty());
    CHECK(std::string(r->s.c_str()).empty());
    CHECK_THROWS_AS(r->s = "x", tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->s.append("x"), tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->s.clear(), tlptm::tx_scope_error);
    tlptm::atomic(pool, [&] { r->s = "hello"; });
    CHECK_THROWS_AS(r->s[0] = 'j', tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&] {
                                      r->s += std::string(1000, 'x');
                                      r->s[0] = 'j';
                                      throw std::runtime_error("abort");
                                  }),
                    std::runtime_error);
    CHECK(r->s == "hello");
    tlptm::atomic(pool, [&] {
        CHECK_THROWS_AS(r->s.erase(6), std::out_of_range);
        CHECK_THROWS_AS(r->s.replace(6, 1, "x"), std::out_of_range);
        CHECK_THROWS_AS(r->s.reserve(r->s.max_size() + 1), std::length_error);
        CHECK_THROWS_AS(r->s.append(std::string(std::size_t{16} << 20, 'y')), tlptm::out_of_memory);
        CHECK(r->s == "hello"); // the allocation failed before any store
    });
    auto other = tlptm::pool::create(path2, small_options());
    CHECK_THROWS_AS(tlptm::atomic(other, [&] { r->s += "!"; }), tlptm::tx_scope_error);
    CHECK(r->s == "hello");

    std::uint64_t base = pool.stats().heap.bytes_in_use;
    tlptm::atomic(pool, [&] {
        tlptm::string* s = tlptm::make<tlptm::string>();
        *s = std::string(3000, 'k');
        r->made = s;
    });
    CHECK(r->made.get()->size() == 3000);
    tlptm::atomic(pool, [&] {
        tlptm::destroy(r->made.get());
        r->made = nullptr;
    });
    pool.close();
    pool = tlptm::pool::open(path, small_options());
    CHECK(pool.stats().heap.bytes_in_use == base);
}
