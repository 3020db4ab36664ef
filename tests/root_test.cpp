// The pool's identity and its root: a layout name chosen at creation, the root's size (not its
// C++ type), a root that grows zero-filled in a new version of a program, and the program's
// layout version, changed in the same transaction as the migration it records.
//
// The same source built with two compilers spells a type's name differently (GCC and Clang
// disagree on anonymous namespaces), so identity must not depend on the name: here two structs
// of the same size with different names (one in an anonymous namespace) open the same pool.

#include "test_util.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

using tlptm::detail::pool_header;
using tlptm_test::temp_path;

namespace {

struct settings_v1 {
    tlptm::p<std::uint64_t> count;
    tlptm::p<std::uint64_t> total;
};

// Version 2 of the program: two more fields at the end.
struct settings_v2 {
    tlptm::p<std::uint64_t> count;
    tlptm::p<std::uint64_t> total;
    tlptm::p<std::uint64_t> limit;
    tlptm::p<std::uint64_t> flags;
};

tlptm::pool_options options(const std::string& layout) {
    tlptm::pool_options o = tlptm_test::small_options();
    o.layout = layout;
    return o;
}

pool_header read_header(const std::string& path) {
    auto bytes = tlptm_test::read_file(path);
    pool_header h;
    std::memcpy(&h, bytes.data(), sizeof h);
    return h;
}

/// Runs f, which must throw E; returns its message.
template <class E, class F> std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    FAIL("expected an exception");
    return {};
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

} // namespace

// A struct in a named namespace and one in an anonymous namespace, same size, other names.
namespace program_a {
struct counters {
    tlptm::p<std::uint64_t> count;
    tlptm::p<std::uint64_t> total;
};
} // namespace program_a
namespace {
struct renamed_counters {
    tlptm::p<std::uint64_t> hits;
    tlptm::p<std::uint64_t> sum;
};
} // namespace

TEST_CASE("identity is the layout name and the root size, not the type's name") {
    static_assert(sizeof(program_a::counters) == sizeof(renamed_counters));
    temp_path path("root-identity");
    {
        auto pool = tlptm::pool::create(path, options("counters"));
        CHECK(pool.layout() == "counters");
        auto* r = pool.root<program_a::counters>();
        tlptm::atomic(pool, [&] {
            r->count = 3;
            r->total = 42;
        });
    }
    auto pool = tlptm::pool::open(path, options("counters"));
    auto* r = pool.root<renamed_counters>(); // another name, the same layout
    CHECK(r->hits.get() == 3);
    CHECK(r->sum.get() == 42);
    CHECK(pool.root_size() == sizeof(renamed_counters));
    CHECK(read_header(path).root_info != 0);
}

TEST_CASE("another layout name is refused with both names in the message") {
    temp_path path("root-layout-name");
    {
        auto pool = tlptm::pool::create(path, options("kv-store"));
        pool.root<settings_v1>();
    }
    const auto before = tlptm_test::read_file(path);
    std::string what =
        message_of<tlptm::layout_error>([&] { tlptm::pool::open(path, options("work-queue")); });
    CAPTURE(what);
    CHECK(contains(what, "'kv-store'"));
    CHECK(contains(what, "'work-queue'"));
    CHECK(contains(what, path.str()));
    CHECK(tlptm_test::read_file(path) == before); // refused before recovery wrote anything

    // An empty name skips the check; the right one opens.
    {
        auto pool = tlptm::pool::open(path, options(""));
        CHECK(pool.layout() == "kv-store");
    }
    auto pool = tlptm::pool::open(path, options("kv-store"));
    CHECK(pool.layout() == "kv-store");
}

TEST_CASE("a pool created without a name takes the first one it is opened with") {
    temp_path path("root-adopt");
    { auto pool = tlptm::pool::create(path, options("")); }
    CHECK(read_header(path).layout_check == 0);
    {
        auto pool = tlptm::pool::open(path, options(""));
        CHECK(pool.layout().empty());
    }
    { auto pool = tlptm::pool::open(path, options("adopted")); }
    CHECK(tlptm::detail::stored_layout(read_header(path)) == "adopted");
    CHECK_THROWS_AS(tlptm::pool::open(path, options("other")), tlptm::layout_error);

    SUBCASE("a name whose check word never became durable is no name") {
        // A crash between the name and its check word: the name bytes are there, the check
        // is 0. The pool opens as unnamed and takes the next name.
        const std::uint64_t zero = 0;
        tlptm_test::write_at(path, offsetof(pool_header, layout_check), &zero, sizeof zero);
        {
            auto pool = tlptm::pool::open(path, options(""));
            CHECK(pool.layout().empty());
        }
        auto pool = tlptm::pool::open(path, options("second"));
        CHECK(pool.layout() == "second");
    }
}

TEST_CASE("bad layout names are refused") {
    temp_path path("root-bad-name");
    const std::string longest(tlptm::detail::max_layout_name, 'x');
    std::string what =
        message_of<tlptm::pool_error>([&] { tlptm::pool::create(path, options(longest + "x")); });
    CHECK(contains(what, "pool_options::layout"));
    CHECK(!std::filesystem::exists(path.str()));
    std::string with_nul("a\0b", 3);
    CHECK_THROWS_AS(tlptm::pool::create(path, options(with_nul)), tlptm::pool_error);
    {
        auto pool = tlptm::pool::create(path, options(longest));
        CHECK(pool.layout() == longest);
    }
    auto pool = tlptm::pool::open(path, options(longest));
    CHECK(pool.layout() == longest);
}

TEST_CASE("a damaged layout name or root descriptor is refused, naming the field") {
    temp_path path("root-damage");
    {
        auto pool = tlptm::pool::create(path, options("damage"));
        pool.root<settings_v1>();
    }
    const auto pristine = tlptm_test::read_file(path);
    struct flip {
        const char* field;
        std::size_t offset;
    };
    for (const flip& f : {flip{"layout_name", offsetof(pool_header, layout_name)},
                          flip{"layout_name", offsetof(pool_header, layout_name) + 100},
                          flip{"layout_name", offsetof(pool_header, layout_check)},
                          flip{"layout_name", offsetof(pool_header, layout_check) + 7},
                          flip{"root_info", offsetof(pool_header, root_info)},
                          flip{"root_info", offsetof(pool_header, root_info) + 5}}) {
        CAPTURE(f.offset);
        for (int bit = 0; bit < 8; ++bit) {
            std::uint8_t b = static_cast<std::uint8_t>(pristine[f.offset] ^ (1u << bit));
            tlptm_test::write_at(path, f.offset, &b, 1);
            std::string what =
                message_of<tlptm::layout_error>([&] { tlptm::pool::open(path, options("")); });
            CHECK(contains(what, f.field));
            tlptm_test::write_file(path, pristine);
        }
    }
    auto pool = tlptm::pool::open(path, options("damage"));
    CHECK(pool.root_size() == sizeof(settings_v1));
}

TEST_CASE("a larger root grows zero-filled; a smaller one is refused") {
    temp_path path("root-grow");
    std::uint64_t root_offset = 0;
    {
        auto pool = tlptm::pool::create(path, options("settings"));
        auto* r = pool.root<settings_v1>();
        tlptm::atomic(pool, [&] {
            r->count = 5;
            r->total = 500;
        });
        root_offset = pool.state().header->root_offset;
    }
    // Bytes past the recorded root that are not zero (nothing the library writes, but the
    // growth must not trust the area): they must read 0 after the growth.
    const std::uint64_t junk = 0xDEADBEEFDEADBEEFull;
    for (std::size_t off = sizeof(settings_v1); off < sizeof(settings_v2); off += 8)
        tlptm_test::write_at(path, root_offset + off, &junk, sizeof junk);
    {
        auto pool = tlptm::pool::open(path, options("settings"));
        CHECK(pool.root_size() == sizeof(settings_v1));
        auto* r = pool.root<settings_v2>(); // version 2 of the program
        CHECK(pool.root_size() == sizeof(settings_v2));
        CHECK(r->count.get() == 5);
        CHECK(r->total.get() == 500);
        CHECK(r->limit.get() == 0);
        CHECK(r->flags.get() == 0);
        tlptm::atomic(pool, [&] { r->limit = 9; });
    }
    const pool_header h = read_header(path);
    CHECK((h.root_info & 0xFFFFFFFFu) == sizeof(settings_v2));

    auto pool = tlptm::pool::open(path, options("settings"));
    CHECK(pool.root<settings_v2>()->limit.get() == 9);
    // Version 1 of the program cannot open the grown root.
    std::string what = message_of<tlptm::layout_error>([&] { pool.root<settings_v1>(); });
    CAPTURE(what);
    CHECK(contains(what, std::to_string(sizeof(settings_v1)) + " bytes"));
    CHECK(contains(what, std::to_string(sizeof(settings_v2)) + " bytes"));
    CHECK(contains(what, "'settings'"));
    CHECK(contains(what, "settings_v1"));
    CHECK(pool.root_size() == sizeof(settings_v2));
}

TEST_CASE("the root may use the root capacity less the line of the layout version") {
    temp_path path("root-capacity");
    auto pool = tlptm::pool::create(path, options("cap"));
    CHECK(pool.root_capacity() == (std::size_t{64} << 10) - 64);
    struct too_big {
        unsigned char bytes[(64 << 10) - 56];
    };
    struct just_fits {
        unsigned char bytes[(64 << 10) - 64];
    };
    std::string what = message_of<tlptm::layout_error>([&] { pool.root<too_big>(); });
    CHECK(contains(what, "root_capacity"));
    CHECK(pool.root_size() == 0);
    CHECK(pool.root<just_fits>() != nullptr);
    CHECK(pool.root_size() == sizeof(just_fits));
}

TEST_CASE("the layout version changes in the migration's transaction") {
    temp_path path("root-version");
    {
        auto pool = tlptm::pool::create(path, options("versions"));
        CHECK(pool.layout_version().get() == 0);
        auto* r = pool.root<settings_v1>();
        tlptm::atomic(pool, [&] {
            r->count = 1;
            pool.layout_version() = 1;
        });
        CHECK(pool.layout_version() == 1);
        // Outside a transaction it cannot be stored.
        CHECK_THROWS_AS(pool.layout_version() = 5, tlptm::tx_scope_error);
    }
    {
        auto pool = tlptm::pool::open(path, options("versions"));
        CHECK(pool.layout_version() == 1);
        auto* r = pool.root<settings_v2>();
        // A migration that fails leaves both the data and the version as they were.
        CHECK_THROWS_AS(tlptm::atomic(pool,
                                      [&] {
                                          r->limit = 100;
                                          pool.layout_version() = 2;
                                          throw std::runtime_error("migration failed");
                                      }),
                        std::runtime_error);
        CHECK(pool.layout_version() == 1);
        CHECK(r->limit.get() == 0);
        if (pool.layout_version() < 2)
            tlptm::atomic(pool, [&] {
                r->limit = 100;
                pool.layout_version() = 2;
            });
    }
    auto pool = tlptm::pool::open(path, options("versions"));
    CHECK(pool.layout_version() == 2);
    CHECK(pool.root<settings_v2>()->limit.get() == 100);
    CHECK(pool.root<settings_v2>()->count.get() == 1);
}
