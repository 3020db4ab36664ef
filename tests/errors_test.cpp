// Every exception the library throws can be caught as std::exception and as tlptm::error.
//
// Each one is provoked for real, through the public API (a missing file, a file that is not a
// pool, a store outside a transaction, an allocation larger than the pool, a transaction larger
// than its log ring, a forged log entry that points outside the heap), and caught three ways:
// as its own type, as tlptm::error and as std::exception. A class with two std::exception
// bases (tlptm::error and std::bad_alloc both derive from it) fails the last one: the handler
// does not match and the exception escapes.

#include "test_util.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

namespace {

using tlptm_test::small_options;
using tlptm_test::temp_path;

struct root_type {
    tlptm::p<std::uint64_t> a;
    tlptm::p<std::uint64_t*> blob;
};

/// Runs `provoke` three times; each run must throw E, caught once as E, once as tlptm::error
/// and once as std::exception (each handler must also see the dynamic type E).
template <class E, class F> void check_catchable(F&& provoke) {
    const std::string name = typeid(E).name();
    CAPTURE(name);
    bool as_e = false, as_error = false, as_std = false;
    try {
        provoke();
    } catch (const E& e) {
        as_e = std::string(e.what()).find("tlptm") != std::string::npos;
    } catch (...) {
        FAIL_CHECK("not caught as its own type");
    }
    try {
        provoke();
    } catch (const tlptm::error& e) {
        as_error = dynamic_cast<const E*>(&e) != nullptr;
    } catch (...) {
        FAIL_CHECK("not caught as tlptm::error");
    }
    try {
        try {
            provoke();
        } catch (const std::exception& e) {
            as_std = dynamic_cast<const E*>(&e) != nullptr && e.what()[0] != '\0';
        }
    } catch (...) {
        FAIL_CHECK("escaped a handler for std::exception");
    }
    CHECK_MESSAGE(as_e, "caught as itself with a message naming tlptm");
    CHECK_MESSAGE(as_error, "caught as tlptm::error");
    CHECK_MESSAGE(as_std, "caught as std::exception");
}

} // namespace

TEST_CASE("every library exception is unambiguously a std::exception and a tlptm::error") {
    // Compile-time half: an ambiguous base is not convertible.
    static_assert(std::is_convertible_v<tlptm::pool_error*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::layout_error*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::tx_scope_error*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::out_of_memory*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::log_overflow*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::corruption_error*, std::exception*>);
    static_assert(std::is_convertible_v<tlptm::out_of_memory*, tlptm::error*>);
}

TEST_CASE("pool_error: opening a file that does not exist") {
    temp_path path("errors-missing");
    check_catchable<tlptm::pool_error>([&] { tlptm::pool::open(path, small_options()); });
}

TEST_CASE("layout_error: opening a file that is not a pool") {
    temp_path path("errors-foreign");
    const std::vector<std::uint8_t> zeros(8192, 0);
    int fd = ::open(path.str().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    REQUIRE(fd >= 0);
    ::close(fd);
    tlptm_test::write_at(path, 0, zeros.data(), zeros.size());
    check_catchable<tlptm::layout_error>([&] { tlptm::pool::open(path, small_options()); });
}

TEST_CASE("tx_scope_error, out_of_memory and log_overflow on an open pool") {
    temp_path path("errors-open");
    auto pool = tlptm::pool::create(path, small_options(tlptm::log_mode::baseline));
    auto* r = pool.root<root_type>();

    SUBCASE("tx_scope_error: a store outside a transaction") {
        check_catchable<tlptm::tx_scope_error>([&] { r->a = 1; });
    }
    SUBCASE("out_of_memory: an allocation larger than the pool") {
        check_catchable<tlptm::out_of_memory>(
            [&] { tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.alloc(pool.size()); }); });
        // The pool is still usable.
        tlptm::atomic(pool, [&] { r->a = 7; });
        CHECK(r->a.get() == 7);
    }
    SUBCASE("log_overflow: a transaction whose log entry exceeds the ring") {
        // 256 KiB written in a transaction that did not allocate it: every word is logged,
        // and the ring holds 64 KiB.
        constexpr std::size_t words = std::size_t{32} << 10;
        tlptm::atomic(pool, [&](tlptm::tx& tx) {
            r->blob = static_cast<std::uint64_t*>(tx.alloc(words * sizeof(std::uint64_t)));
        });
        std::uint64_t* blob = r->blob.get();
        check_catchable<tlptm::log_overflow>([&] {
            tlptm::atomic(pool, [&](tlptm::tx& tx) {
                for (std::size_t i = 0; i < words; ++i)
                    tx.store(blob + i, std::uint64_t{i + 1});
            });
        });
        CHECK(blob[words - 1] == 0); // nothing of the aborted transaction reached the pool
    }
}

TEST_CASE("corruption_error: a committed log entry that points outside the heap") {
    temp_path path("errors-corrupt");
    {
        auto pool = tlptm::pool::create(path, small_options());
        auto* r = pool.root<root_type>();
        tlptm::atomic(pool, [&] { r->a = 1; });
    }
    // Forge an entry of ring 0 that is newer than the checkpoint, sealed for the ring's
    // generation, with one record at offset 0 (the header's magic): recovery must refuse it.
    using tlptm::detail::pool_header;
    const auto image = tlptm_test::read_file(path);
    pool_header h;
    std::memcpy(&h, image.data(), sizeof h);
    const std::uint64_t ring = h.log_offset;
    std::uint64_t gen = 0, base_ts = 0;
    std::memcpy(&gen, image.data() + ring, 8);
    std::memcpy(&base_ts, image.data() + ring + 8, 8);
    const std::uint64_t ts = std::max(h.checkpoint_ts, base_ts) + 1;
    tlptm::detail::entry_builder builder;
    builder.encode(tlptm::detail::entry_format::baseline,
                   std::vector<tlptm::detail::log_record>{{0, 0, ~std::uint64_t{0}}},
                   tlptm::detail::pointer_range{});
    auto entry = builder.seal(ts, base_ts, gen);
    tlptm_test::write_at(path, ring + tlptm::detail::ring_header_bytes, entry.data(), entry.size());
    check_catchable<tlptm::corruption_error>([&] { tlptm::pool::open(path, small_options()); });
    CHECK(tlptm_test::read_file(path) == [&] {
        auto forged = image;
        std::memcpy(forged.data() + ring + tlptm::detail::ring_header_bytes, entry.data(),
                    entry.size());
        return forged;
    }());
}
