// Bad input: damaged or foreign pool files, forged log entries, locking, oversized
// transactions and misuse of the transactional API (DESIGN.md §2, §3, §5 I5; STYLE.md "Errors":
// everything read from a pool file is input, validated before use).
//
// Pool files are damaged with pwrite while they are closed. Whenever a test expects open() to
// refuse a file, it also checks that the refusal wrote nothing: the whole file is compared
// before and after. Opens that could make a wild write if the library accepted a bad record run
// in a forked child, so that the test reports a failure instead of dying with the library.

#include "test_util.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

namespace {

using tlptm::detail::log_record;
using tlptm::detail::pool_header;
using tlptm_test::small_options;
using tlptm_test::temp_path;

// ---- files -----------------------------------------------------------------------------------

using tlptm_test::read_file;
using tlptm_test::write_at;

template <class T> void write_value(const std::string& path, std::uint64_t offset, const T& v) {
    write_at(path, offset, &v, sizeof v);
}

template <class T> T read_value(const std::string& path, std::uint64_t offset) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    T v{};
    REQUIRE(::pread(fd, &v, sizeof v, static_cast<off_t>(offset)) ==
            static_cast<ssize_t>(sizeof v));
    ::close(fd);
    return v;
}

pool_header read_header(const std::string& path) {
    return read_value<pool_header>(path, 0);
}

void write_file(const std::string& path, const std::string& content) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
    ::close(fd);
}

// ---- exceptions ------------------------------------------------------------------------------

/// Runs f, which must throw E; returns E's message (empty, and a failed check, otherwise).
template <class E, class F> std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL_CHECK("expected " << typeid(E).name() << ", got another exception: " << e.what());
        return {};
    }
    FAIL_CHECK("expected " << typeid(E).name() << ", nothing was thrown");
    return {};
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

// ---- pools used below ------------------------------------------------------------------------

struct small_root {
    tlptm::p<std::uint64_t> a;
    tlptm::p<std::uint64_t> b;
    tlptm::p<std::uint64_t> counter;
};

/// Creates a pool with a root, one committed transaction (a = 1, b = 2, counter = 1) and
/// closes it: the header then has a root type and a non-zero checkpoint.
void make_pool(const std::string& path) {
    auto pl = tlptm::pool::create(path, small_options());
    auto* r = pl.root<small_root>();
    tlptm::atomic(pl, [&] {
        r->a = 1;
        r->b = 2;
        r->counter = 1;
    });
    pl.close();
}

// ---- forged log entries ----------------------------------------------------------------------
//
// Entries are built with the library's own encoder (tlptm::detail::entry_builder) and written
// into a ring of a closed pool file. A ring starts with a header line {generation, base
// timestamp}; its first entry must have a timestamp above the base timestamp and be sealed
// for the ring's generation.

using tlptm::detail::entry_format;

/// A sealed entry in `fmt` for `recs` with timestamp `ts`, following an entry (or ring base)
/// of timestamp `prev_ts`, sealed for generation `gen`.
std::vector<std::uint8_t> make_entry(const std::vector<log_record>& recs, std::uint64_t ts,
                                     std::uint64_t prev_ts, std::uint64_t gen,
                                     entry_format fmt = entry_format::baseline) {
    tlptm::detail::entry_builder builder;
    builder.encode(fmt, recs, tlptm::detail::pointer_range{});
    auto e = builder.seal(ts, prev_ts, gen);
    return {e.begin(), e.end()};
}

std::uint64_t ring_base(const pool_header& h, std::uint32_t ring) {
    return h.log_offset + std::uint64_t{ring} * h.ring_size;
}

/// The header line of a ring in the file.
struct ring_header {
    std::uint64_t gen;
    std::uint64_t base_ts;
};

ring_header ring_of(const std::string& path, std::uint32_t ring) {
    return read_value<ring_header>(path, ring_base(read_header(path), ring));
}

/// Writes `entry` at offset `at` of the data area of ring `ring` of the closed pool at `path`.
void write_entry(const std::string& path, std::uint32_t ring, std::uint64_t at,
                 const std::vector<std::uint8_t>& entry) {
    pool_header h = read_header(path);
    write_at(path, ring_base(h, ring) + tlptm::detail::ring_header_bytes + at, entry.data(),
             entry.size());
}

/// Forges a valid entry (for the ring's generation and base timestamp) at the start of the
/// ring's data area.
void forge(const std::string& path, std::uint32_t ring, std::uint64_t ts,
           const std::vector<log_record>& recs, entry_format fmt = entry_format::baseline) {
    ring_header rh = ring_of(path, ring);
    REQUIRE(ts > rh.base_ts);
    write_entry(path, ring, 0, make_entry(recs, ts, rh.base_ts, rh.gen, fmt));
}

/// True if `e` validates for the ring and decodes to exactly `want`.
bool decodes_to(const std::vector<std::uint8_t>& e, const ring_header& rh,
                const std::vector<log_record>& want) {
    tlptm::detail::entry_view view;
    if (!tlptm::detail::parse_entry(e.data(), e.size(), rh.gen, rh.base_ts, view))
        return false;
    std::vector<log_record> got;
    if (!tlptm::detail::decode_records(view, 0, [&](const log_record& r) { got.push_back(r); }))
        return false;
    return std::equal(got.begin(), got.end(), want.begin(), want.end(),
                      [](const log_record& x, const log_record& y) {
                          return x.offset == y.offset && x.value == y.value && x.mask == y.mask;
                      });
}

std::uint64_t checkpoint_of(const std::string& path) {
    return read_value<std::uint64_t>(path, offsetof(pool_header, checkpoint_ts));
}

constexpr std::uint64_t all_bytes = ~std::uint64_t{0};

/// How an open() in a child process ended.
enum class outcome { opened, corruption, other_error, crashed };

const char* to_string(outcome o) {
    switch (o) {
    case outcome::opened:
        return "opened";
    case outcome::corruption:
        return "corruption_error";
    case outcome::other_error:
        return "another exception";
    case outcome::crashed:
        return "the process died (wild write?)";
    }
    return "?";
}

/// Opens the pool in a forked child (a wild write by recovery kills the child, not the test).
outcome open_in_child(const std::string& path) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // Die of the signal itself, not through doctest's crash report.
        for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
            std::signal(sig, SIG_DFL);
        int code = 3;
        try {
            auto pl = tlptm::pool::open(path, small_options());
            pl.close();
            code = 0;
        } catch (const tlptm::corruption_error&) {
            code = 1;
        } catch (...) {
            code = 2;
        }
        ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status))
        return outcome::crashed;
    switch (WEXITSTATUS(status)) {
    case 0:
        return outcome::opened;
    case 1:
        return outcome::corruption;
    case 2:
        return outcome::other_error;
    default:
        return outcome::crashed;
    }
}

} // namespace

// ---- the header ------------------------------------------------------------------------------

TEST_CASE("a damaged header field is refused with a layout_error naming the field") {
    temp_path path("header-field");
    make_pool(path);
    const std::vector<std::uint8_t> pristine = read_file(path);
    const pool_header good = read_header(path);
    REQUIRE(good.checkpoint_ts > 0);
    REQUIRE(good.root_info != 0);

    struct damage {
        const char* field;   // what the error must name
        std::size_t offset;  // where the damage goes
        std::uint64_t value; // what is written there
        std::size_t width;   // 4 or 8 bytes
    };
    const std::uint64_t cap = good.root_capacity;
    const std::vector<damage> cases = {
        {"magic", 0, 0x4d54504c5458ull /* "XTLPTM" */, 8},
        {"version", 16, 0, 4},
        {"header_size", 20, 2048, 4},
        {"pool_size", 40, good.pool_size + 4096, 8},
        {"base_address", 48, good.base_address + 8, 8},
        {"base_address", 48, 0, 8},
        {"log_offset", 56, good.log_offset + 64, 8},
        {"ring_size", 64, good.ring_size + 1, 8},
        {"max_threads", 72, 0, 4},
        {"max_threads", 72, 100000, 4},
        {"flags", 76, 1, 4},
        {"meta_offset", 80, good.meta_offset + 4096, 8},
        {"meta_size", 88, good.meta_size + 1024, 8},
        {"heap_offset", 96, good.heap_offset + 65536, 8},
        {"heap_size", 104, good.heap_size - 65536, 8},
        {"root_offset", 112, good.root_offset + 65536, 8},
        {"root_capacity", 120, 1, 8},
        {"superblock_size", 128, 4096, 8},
        {"checksum", 136, good.checksum ^ 1, 8},
        {"checksum", 24, std::uint64_t{good.uuid[0] ^ 0x80u}, 1}, // uuid: only the checksum knows
        {"checkpoint_ts", 256, std::uint64_t{1} << 60, 8},
        {"root_info", 320, (good.root_info & ~std::uint64_t{0xFFFFFFFF}) | (cap + 8), 8},
    };
    for (const damage& d : cases) {
        const std::string field = d.field;
        CAPTURE(field);
        CAPTURE(d.value);
        write_at(path, 0, pristine.data(), pristine.size());
        write_at(path, d.offset, &d.value, d.width);
        std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
        CAPTURE(what);
        CHECK(contains(what, d.field));
        CHECK(contains(what, path.str()));
    }
    // The undamaged file still opens and keeps its data.
    write_at(path, 0, pristine.data(), pristine.size());
    auto pl = tlptm::pool::open(path, small_options());
    CHECK(pl.root<small_root>()->counter.get() == 1);
}

TEST_CASE("single-bit flips anywhere in the checksummed header are refused") {
    temp_path path("header-bits");
    make_pool(path);
    const std::vector<std::uint8_t> pristine = read_file(path);
    // Bytes [0, 144): every field up to and including the checksum. CRC32C detects any
    // single-bit error, so no flip may get through, whatever field it lands in. One bit per
    // byte, a different one in each byte of a field: each failed open costs the library a few
    // milliseconds (it allocates its orec table before it reads the header).
    std::size_t refused = 0;
    for (std::size_t byte = 0; byte < offsetof(pool_header, checksum) + 8; ++byte) {
        for (int bit : {static_cast<int>(byte % 8)}) {
            std::uint8_t v = static_cast<std::uint8_t>(pristine[byte] ^ (1u << bit));
            write_at(path, byte, &v, 1);
            try {
                auto pl = tlptm::pool::open(path, small_options());
                FAIL_CHECK("a header with byte " << byte << " bit " << bit
                                                 << " flipped was accepted");
            } catch (const tlptm::layout_error&) {
                ++refused;
            } catch (const std::exception& e) {
                FAIL_CHECK("byte " << byte << " bit " << bit
                                   << ": not a layout_error: " << e.what());
            }
            write_at(path, byte, &pristine[byte], 1);
        }
    }
    CHECK(refused == offsetof(pool_header, checksum) + 8);
    // The top byte of CT cannot hold a 56-bit timestamp.
    for (int bit = 56; bit < 64; ++bit) {
        std::uint64_t ct = read_header(path).checkpoint_ts ^ (std::uint64_t{1} << bit);
        write_value(path, offsetof(pool_header, checkpoint_ts), ct);
        std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
        CHECK(contains(what, "checkpoint_ts"));
        write_at(path, 0, pristine.data(), pristine.size());
    }
    CHECK(read_file(path) == pristine);
}

TEST_CASE("a flipped bit of the root descriptor is refused at open or at root<T>()") {
    temp_path path("root-info-bits");
    make_pool(path);
    const std::vector<std::uint8_t> pristine = read_file(path);
    const std::uint64_t info = read_header(path).root_info;
    for (int bit = 0; bit < 64; ++bit) {
        CAPTURE(bit);
        write_value(path, offsetof(pool_header, root_info), info ^ (std::uint64_t{1} << bit));
        bool refused = false;
        try {
            auto pl = tlptm::pool::open(path, small_options());
            pl.root<small_root>();
        } catch (const tlptm::layout_error&) {
            refused = true;
        }
        CHECK(refused);
        write_at(path, 0, pristine.data(), pristine.size());
    }
}

TEST_CASE("a newer layout version is refused as newer") {
    temp_path path("newer");
    make_pool(path);
    pool_header h = read_header(path);
    h.version = tlptm::detail::layout_version + 1;
    h.checksum = tlptm::detail::header_checksum(h); // a well-formed header of a newer library
    write_value(path, 0, h);
    const auto before = read_file(path);
    std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
    CAPTURE(what);
    CHECK(contains(what, "newer"));
    CHECK(contains(what, "version"));
    CHECK(read_file(path) == before);
}

TEST_CASE("files that are not whole tlptm pools are refused") {
    SUBCASE("truncated to half") {
        temp_path path("truncated");
        make_pool(path);
        const pool_header h = read_header(path);
        REQUIRE(::truncate(path.str().c_str(), static_cast<off_t>(h.pool_size / 2)) == 0);
        std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
        CAPTURE(what);
        CHECK(contains(what, "pool_size"));
    }
    SUBCASE("grown to twice its size") {
        temp_path path("grown");
        make_pool(path);
        const pool_header h = read_header(path);
        REQUIRE(::truncate(path.str().c_str(), static_cast<off_t>(h.pool_size * 2)) == 0);
        std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
        CAPTURE(what);
        CHECK(contains(what, "pool_size"));
    }
    SUBCASE("random bytes") {
        temp_path path("random");
        std::mt19937_64 rng(42);
        std::string junk(std::size_t{1} << 20, '\0');
        for (char& c : junk)
            c = static_cast<char>(rng());
        write_file(path, junk);
        message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
    }
    SUBCASE("random bytes behind the right magic") {
        temp_path path("random-magic");
        std::mt19937_64 rng(7);
        std::string junk(std::size_t{8} << 20, '\0');
        for (char& c : junk)
            c = static_cast<char>(rng());
        std::memcpy(junk.data(), tlptm::detail::pool_magic, sizeof tlptm::detail::pool_magic);
        write_file(path, junk);
        message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
    }
    SUBCASE("an empty file") {
        temp_path path("empty");
        write_file(path, "");
        message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
    }
    SUBCASE("a file smaller than a header") {
        temp_path path("tiny");
        std::string content(100, '\0');
        std::memcpy(content.data(), tlptm::detail::pool_magic, sizeof tlptm::detail::pool_magic);
        write_file(path, content);
        message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
    }
    SUBCASE("a text file") {
        temp_path path("text");
        std::string text;
        while (text.size() < 10000)
            text += "TLPTM-POOL is not what this file holds.\n";
        write_file(path, text);
        std::string what = message_of<tlptm::layout_error>([&] { tlptm::pool::open(path); });
        CHECK(contains(what, "magic"));
    }
    SUBCASE("a missing file") {
        temp_path path("missing");
        std::string what = message_of<tlptm::pool_error>([&] { tlptm::pool::open(path); });
        CHECK(contains(what, path.str()));
        CHECK(!std::filesystem::exists(path.str())); // open never creates
    }
    SUBCASE("a directory") {
        temp_path path("directory");
        REQUIRE(std::filesystem::create_directory(path.str()));
        message_of<tlptm::pool_error>([&] { tlptm::pool::open(path); });
        std::filesystem::remove(path.str());
    }
}

TEST_CASE("create refuses an existing file and leaves it alone") {
    temp_path path("exists");
    make_pool(path);
    const auto before = read_file(path);
    std::string what =
        message_of<tlptm::pool_error>([&] { tlptm::pool::create(path, small_options()); });
    CHECK(contains(what, path.str()));
    CHECK(read_file(path) == before);
    auto pl = tlptm::pool::open(path, small_options());
    CHECK(pl.root<small_root>()->counter.get() == 1);

    temp_path other("exists-foreign");
    write_file(other, "precious data\n");
    message_of<tlptm::pool_error>([&] { tlptm::pool::create(other, small_options()); });
    REQUIRE(std::filesystem::exists(other.str()));
    CHECK(std::filesystem::file_size(other.str()) == 14);
}

// ---- locking ---------------------------------------------------------------------------------

TEST_CASE("a pool is opened by one owner at a time") {
    temp_path path("lock");
    make_pool(path);
    auto first = tlptm::pool::open(path, small_options());
    auto* r = first.root<small_root>();

    SUBCASE("a second open in the same process") {
        std::string what =
            message_of<tlptm::pool_error>([&] { tlptm::pool::open(path, small_options()); });
        CHECK(contains(what, "already open"));
        message_of<tlptm::pool_error>([&] { tlptm::pool::open_or_create(path, small_options()); });
        // The failed opens disturbed neither the first one nor its lock.
        tlptm::atomic(first, [&] { r->counter += 1; });
        CHECK(r->counter.get() == 2);
        message_of<tlptm::pool_error>([&] { tlptm::pool::open(path, small_options()); });
    }
    SUBCASE("an open from another process") {
        std::fflush(nullptr);
        pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            int code = 3;
            try {
                auto p2 = tlptm::pool::open(path, small_options());
                code = 1;
            } catch (const tlptm::pool_error& e) {
                code = std::string(e.what()).find("already open") != std::string::npos ? 0 : 2;
            } catch (...) {
                code = 4;
            }
            ::_exit(code);
        }
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        REQUIRE(WIFEXITED(status));
        CHECK_MESSAGE(WEXITSTATUS(status) == 0,
                      "child exit " << WEXITSTATUS(status)
                                    << " (1: opened, 2: pool_error without 'already open', "
                                       "4: other exception)");
        tlptm::atomic(first, [&] { r->counter += 1; });
    }

    first.close();
    // After close the pool opens again, in this process and in another one.
    {
        auto again = tlptm::pool::open(path, small_options());
        CHECK(again.root<small_root>()->counter.get() >= 1);
    }
    std::fflush(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int code = 1;
        try {
            auto p2 = tlptm::pool::open(path, small_options());
            code = p2.root<small_root>()->counter.get() >= 1 ? 0 : 2;
        } catch (...) {
            code = 3;
        }
        ::_exit(code);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}

// ---- forged log entries ----------------------------------------------------------------------

TEST_CASE("a forged valid log entry is replayed: the forging is right") {
    for (entry_format fmt : {entry_format::baseline, entry_format::compressed}) {
        CAPTURE(static_cast<int>(fmt));
        temp_path path("forge-valid");
        make_pool(path);
        const pool_header h = read_header(path);
        const std::uint64_t ct = checkpoint_of(path);
        REQUIRE(ct >= 1);
        const std::uint64_t a_off = h.root_offset + offsetof(small_root, a);
        const std::uint64_t b_off = h.root_offset + offsetof(small_root, b);
        // a: the whole word; b: only its lowest byte (the mask keeps the other bytes of b).
        forge(path, 0, ct + 1, {{a_off, 0xDEADBEEFCAFEF00Dull, all_bytes}, {b_off, 0xAA, 0xFF}},
              fmt);
        auto pl = tlptm::pool::open(path, small_options());
        const tlptm::recovery_report rep = pl.last_recovery();
        CHECK(rep.checkpoint_before == ct);
        CHECK(rep.entries_replayed == 1);
        CHECK(rep.records_replayed == 2);
        CHECK(rep.checkpoint_after == ct + 1);
        auto* r = pl.root<small_root>();
        CHECK(r->a.get() == 0xDEADBEEFCAFEF00Dull);
        CHECK(r->b.get() == 0xAA); // was 2: the low byte replaced
        CHECK(r->counter.get() == 1);
        // The clock continues above the replayed entry: a new transaction commits and survives.
        tlptm::atomic(pl, [&] { r->counter = 5; });
        pl.close();
        CHECK(checkpoint_of(path) > ct + 1);
        auto again = tlptm::pool::open(path, small_options());
        CHECK(again.last_recovery().entries_replayed == 0);
        CHECK(again.root<small_root>()->counter.get() == 5);
        CHECK(again.root<small_root>()->a.get() == 0xDEADBEEFCAFEF00Dull);
    }
}

TEST_CASE("a partial mask replaces exactly its bytes") {
    temp_path path("forge-mask");
    make_pool(path);
    const pool_header h = read_header(path);
    const std::uint64_t ct = checkpoint_of(path);
    const std::uint64_t b_off = h.root_offset + offsetof(small_root, b);
    // b is 2; replace bytes 1 and 6, keep the others.
    forge(path, 0, ct + 1, {{b_off, 0x0011223344556677ull, 0x00FF00000000FF00ull}});
    auto pl = tlptm::pool::open(path, small_options());
    CHECK(pl.root<small_root>()->b.get() == 0x0011000000006602ull);
}

TEST_CASE("log entries the checkpoint covers, of another generation or torn are not replayed") {
    temp_path path("forge-ignored");
    make_pool(path);
    const pool_header h = read_header(path);
    const std::uint64_t ct = checkpoint_of(path);
    const ring_header rh = ring_of(path, 0);
    REQUIRE(rh.gen >= 1);
    REQUIRE(ct > rh.base_ts);
    const std::uint64_t a_off = h.root_offset + offsetof(small_root, a);
    const std::vector<log_record> recs = {{a_off, 777, all_bytes}};

    auto expect_nothing_replayed = [&](std::size_t valid) {
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed == 0);
        CHECK(pl.last_recovery().entries_valid == valid);
        CHECK(pl.last_recovery().checkpoint_after == ct);
        CHECK(pl.root<small_root>()->a.get() == 1);
    };
    SUBCASE("the control: the same entry, intact, is replayed") {
        write_entry(path, 0, 0, make_entry(recs, ct + 1, rh.base_ts, rh.gen));
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed == 1);
        CHECK(pl.root<small_root>()->a.get() == 777);
    }
    SUBCASE("ts == CT") {
        write_entry(path, 0, 0, make_entry(recs, ct, rh.base_ts, rh.gen));
        expect_nothing_replayed(1);
    }
    SUBCASE("sealed for the previous generation") {
        write_entry(path, 0, 0, make_entry(recs, ct + 1, rh.base_ts, rh.gen - 1));
        expect_nothing_replayed(0);
    }
    SUBCASE("sealed for the next generation") {
        write_entry(path, 0, 0, make_entry(recs, ct + 1, rh.base_ts, rh.gen + 1));
        expect_nothing_replayed(0);
    }
    SUBCASE("one payload byte flipped") {
        auto e = make_entry(recs, ct + 1, rh.base_ts, rh.gen);
        e[e.size() - 12] ^= 0x04; // inside the record's value
        write_entry(path, 0, 0, e);
        expect_nothing_replayed(0);
    }
    SUBCASE("one timestamp bit flipped") {
        auto e = make_entry(recs, ct + 1, rh.base_ts, rh.gen);
        e[1] ^= 0x02; // baseline: byte 0 is the format, bytes 1..7 the timestamp
        write_entry(path, 0, 0, e);
        expect_nothing_replayed(0);
    }
    SUBCASE("the length cut by one record") {
        auto e = make_entry({{a_off, 777, all_bytes}, {a_off + 8, 778, all_bytes}}, ct + 1,
                            rh.base_ts, rh.gen);
        e[8] = static_cast<std::uint8_t>(e[8] - 24);
        write_entry(path, 0, 0, e);
        expect_nothing_replayed(0);
    }
    SUBCASE("a compressed entry with one payload byte flipped") {
        auto e = make_entry(recs, ct + 1, rh.base_ts, rh.gen, entry_format::compressed);
        e.back() ^= 0x01;
        write_entry(path, 0, 0, e);
        expect_nothing_replayed(0);
    }
    SUBCASE("a damaged entry with only entries the checkpoint covers behind it") {
        // Nothing behind the damage is lost: CT (raised here) covers it all.
        const std::uint64_t raised = ct + 2;
        write_at(path, offsetof(pool_header, checkpoint_ts), &raised, 8);
        auto damaged = make_entry(recs, ct + 1, rh.base_ts, rh.gen);
        damaged[damaged.size() - 1] ^= 0x01;
        write_entry(path, 0, 0, damaged);
        write_entry(path, 0, damaged.size(),
                    make_entry({{a_off, 888, all_bytes}}, ct + 2, ct + 1, rh.gen));
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed == 0);
        CHECK(pl.last_recovery().checkpoint_after == raised);
        CHECK(pl.root<small_root>()->a.get() == 1);
    }
}

TEST_CASE("a damaged log entry with committed entries behind it is corruption, not a torn tail") {
    // After a crash no valid entry follows an invalid one: each entry is fenced before the next
    // is written, and a new opening starts a new generation. So a valid entry behind one that
    // fails its checksum means the log was damaged after it was written; stopping at the damage
    // (as for a torn tail) would silently lose the committed transactions behind it.
    for (entry_format fmt : {entry_format::baseline, entry_format::compressed}) {
        CAPTURE(static_cast<int>(fmt));
        temp_path path("forge-damaged");
        make_pool(path);
        const pool_header h = read_header(path);
        const std::uint64_t ct = checkpoint_of(path);
        const ring_header rh = ring_of(path, 0);
        const std::uint64_t a_off = h.root_offset + offsetof(small_root, a);
        auto first = make_entry({{a_off, 777, all_bytes}}, ct + 1, rh.base_ts, rh.gen, fmt);
        first[first.size() - 1] ^= 0x01; // a payload byte: the header still gives the length
        write_entry(path, 0, 0, first);
        write_entry(path, 0, first.size(),
                    make_entry({{a_off, 888, all_bytes}}, ct + 2, ct + 1, rh.gen, fmt));
        const std::vector<std::uint8_t> before = read_file(path);
        try {
            auto pl = tlptm::pool::open(path, small_options());
            FAIL("the damaged log was recovered");
        } catch (const tlptm::corruption_error& e) {
            const std::string what = e.what();
            CHECK(what.find("ring 0") != std::string::npos);
            CHECK(what.find("fails its checksum, yet a valid entry follows it") !=
                  std::string::npos);
            CHECK(what.find("ts " + std::to_string(ct + 2)) != std::string::npos);
        }
        CHECK(read_file(path) == before); // nothing written
        // The control: the same two entries, intact, are both replayed.
        first[first.size() - 1] ^= 0x01;
        write_entry(path, 0, 0, first);
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed == 2);
        CHECK(pl.root<small_root>()->a.get() == 888);
    }
}

TEST_CASE("a forged entry whose record lies outside the heap and metadata is corruption") {
    temp_path path("forge-bad");
    make_pool(path);
    const pool_header h = read_header(path);
    const std::uint64_t ct = checkpoint_of(path);
    const std::uint64_t a_off = h.root_offset + offsetof(small_root, a);
    const std::uint64_t meta_end = h.meta_offset + h.meta_size;
    const std::uint64_t heap_end = h.heap_offset + h.heap_size;
    REQUIRE(meta_end < h.heap_offset); // the geometry of small_options leaves a gap
    const auto pristine = read_file(path);

    SUBCASE("each bad offset, behind a sound record of the same entry") {
        struct bad {
            const char* what;
            std::uint64_t offset;
        };
        const std::vector<bad> cases = {
            {"offset 0 (the header's magic)", 0},
            {"the checkpoint word", offsetof(pool_header, checkpoint_ts)},
            {"the root descriptor", offsetof(pool_header, root_info)},
            {"ring 0's generation word", h.log_offset},
            {"inside ring 0's entries", h.log_offset + 64},
            {"inside ring 1", h.log_offset + h.ring_size + 128},
            {"the gap between metadata and heap", meta_end},
            {"the word just below the heap", h.heap_offset - 8},
            {"an unaligned heap word", a_off + 4},
            {"the last word straddling the pool end", heap_end - 4},
            {"the pool end", heap_end},
            {"past the pool end", heap_end + 4096},
            {"2^32", std::uint64_t{1} << 32},
            {"2^63", std::uint64_t{1} << 63},
            {"2^64 - 64", ~std::uint64_t{0} - 63},
            {"2^64 - 8 (offset + 8 wraps to 0)", ~std::uint64_t{0} - 7},
        };
        for (entry_format fmt : {entry_format::baseline, entry_format::compressed}) {
            for (const bad& c : cases) {
                CAPTURE(static_cast<int>(fmt));
                const std::string where = c.what;
                CAPTURE(where);
                CAPTURE(c.offset);
                write_at(path, 0, pristine.data(), pristine.size());
                // A sound record too: nothing of the entry may be written either.
                std::vector<log_record> recs = {{a_off, 4242, all_bytes},
                                                {c.offset, 0x5A5A5A5A5A5A5A5Aull, all_bytes}};
                std::sort(recs.begin(), recs.end(), [](const log_record& x, const log_record& y) {
                    return x.offset < y.offset;
                });
                const ring_header rh = ring_of(path, 0);
                const auto e = make_entry(recs, ct + 1, rh.base_ts, rh.gen, fmt);
                if (!decodes_to(e, rh, recs)) {
                    // The compressed format codes word gaps: it cannot carry every offset (an
                    // unaligned one, one below the previous record). Baseline carries any.
                    CHECK(fmt == entry_format::compressed);
                    continue;
                }
                write_entry(path, 0, 0, e);
                const auto before = read_file(path);
                outcome o = open_in_child(path);
                CHECK_MESSAGE(o == outcome::corruption, "open: " << std::string(to_string(o)));
                CHECK(read_file(path) == before);
            }
        }
    }
    SUBCASE("the bad record is in a later entry than a sound one") {
        // Recovery validates every entry it will replay before it writes anything.
        forge(path, 0, ct + 1, {{a_off, 4242, all_bytes}});
        forge(path, 1, ct + 2, {{0, 0, all_bytes}});
        const auto before = read_file(path);
        CHECK(open_in_child(path) == outcome::corruption);
        CHECK(read_file(path) == before);
    }
    SUBCASE("two entries with the same timestamp that write the same word") {
        // Two commits that write a word never share a ts (the second locks the word's orec
        // and takes a ts above its version): which value is the last cannot be known.
        forge(path, 0, ct + 1, {{a_off + 8, 5, all_bytes}, {a_off, 1111, all_bytes}});
        forge(path, 1, ct + 1, {{a_off, 2222, 0xFF}});
        const auto before = read_file(path);
        std::string what =
            message_of<tlptm::corruption_error>([&] { tlptm::pool::open(path, small_options()); });
        CHECK(contains(what, "two log entries carry timestamp " + std::to_string(ct + 1) +
                                 " and both write offset " + std::to_string(a_off)));
        CHECK(read_file(path) == before);
    }
    SUBCASE("two entries with the same timestamp that write different words are replayed") {
        // Commits of disjoint data may share a ts: the clock is read, not advanced, at commit.
        const std::uint64_t b_off = h.root_offset + offsetof(small_root, b);
        forge(path, 0, ct + 1, {{a_off, 1111, all_bytes}});
        forge(path, 1, ct + 1, {{b_off, 2222, all_bytes}});
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed == 2);
        CHECK(pl.last_recovery().checkpoint_after == ct + 1);
        CHECK(pl.root<small_root>()->a.get() == 1111);
        CHECK(pl.root<small_root>()->b.get() == 2222);
    }
    SUBCASE("a compressed payload the decoder rejects, under a valid CRC") {
        // One partial-word record: varint H (gap << 3 | partial), the byte-enable byte, the
        // value. A byte-enable of 0 is malformed; the CRC is recomputed over the damage.
        const ring_header rh = ring_of(path, 0);
        auto e =
            make_entry({{a_off, 0x77, 0xFF}}, ct + 1, rh.base_ts, rh.gen, entry_format::compressed);
        tlptm::detail::entry_view view;
        REQUIRE(tlptm::detail::parse_entry(e.data(), e.size(), rh.gen, rh.base_ts, view));
        const std::size_t payload_at = static_cast<std::size_t>(view.payload - e.data());
        const std::size_t be_at = payload_at + tlptm::codec::varint_size((a_off / 8) << 3 | 2);
        REQUIRE(be_at < e.size());
        REQUIRE(e[be_at] == 0x01);
        e[be_at] = 0;
        const std::size_t crc_at = payload_at - 4;
        std::uint32_t crc = tlptm::detail::entry_crc(e.data(), e.size(), crc_at, rh.gen, ct + 1);
        std::memcpy(e.data() + crc_at, &crc, 4);
        REQUIRE(tlptm::detail::parse_entry(e.data(), e.size(), rh.gen, rh.base_ts, view));
        write_entry(path, 0, 0, e);
        const auto before = read_file(path);
        CHECK(open_in_child(path) == outcome::corruption);
        CHECK(read_file(path) == before);
    }
    SUBCASE("in-process: the exception type and message") {
        forge(path, 0, ct + 1, {{0, 0, all_bytes}});
        const auto before = read_file(path);
        std::string what =
            message_of<tlptm::corruption_error>([&] { tlptm::pool::open(path, small_options()); });
        CHECK(contains(what, path.str()));
        CHECK(read_file(path) == before);
        // The damage stays: the next open refuses the pool again.
        CHECK_THROWS_AS(tlptm::pool::open(path, small_options()), tlptm::corruption_error);
        CHECK(read_file(path) == before);
    }
}

// ---- oversized transactions ------------------------------------------------------------------

namespace {
struct wide_root {
    tlptm::p<std::uint64_t> w[8000];
};

/// Incompressible word values: no varint or run coding makes them shorter than 9 bytes.
std::uint64_t noise(std::uint64_t i, std::uint64_t salt) {
    std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    return x | (std::uint64_t{1} << 62);
}
} // namespace

TEST_CASE("a transaction larger than its log ring throws log_overflow and changes nothing") {
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        const std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        temp_path path("overflow");
        auto pl = tlptm::pool::create(path, small_options(mode));
        auto* r = pl.root<wide_root>();
        tlptm::atomic(pl, [&] {
            for (std::size_t i = 0; i < 8000; i += 7)
                r->w[i] = i + 1;
        });
        const auto committed_before = pl.stats().tx_committed;
        const auto aborted_before = pl.stats().tx_aborted;

        // Every word, incompressible: >= 8000 * 9 bytes compressed, 8000 * 24 in baseline,
        // against a ring of 64 KiB (plus rounding).
        bool thrown = false;
        std::size_t stored = 0; // words stored when the exception came
        try {
            tlptm::atomic(pl, [&] {
                for (stored = 0; stored < 8000; ++stored)
                    r->w[stored] = noise(stored, 1);
            });
        } catch (const tlptm::log_overflow& e) {
            thrown = true;
            CHECK(e.needed() > e.capacity());
            CHECK(e.capacity() >= (std::size_t{64} << 10)); // at least the log_capacity asked
            // Raised at the store that made the entry too large, not at commit after all
            // 8000 words: the entry without that store's word still fitted.
            CHECK(stored < 8000);
            const std::size_t per_word = mode == tlptm::log_mode::baseline ? 24 : 19;
            CHECK(e.needed() - per_word <= e.capacity());
            CHECK(contains(e.what(), std::to_string(e.needed())));
            CHECK(contains(e.what(), std::to_string(e.capacity())));
        }
        REQUIRE(thrown);
        CHECK(pl.stats().tx_committed == committed_before);
        CHECK(pl.stats().tx_aborted == aborted_before + 1);
        auto expect_first = [&](const char* when) {
            const std::string stage = when;
            CAPTURE(stage);
            for (std::size_t i = 0; i < 8000; ++i) {
                std::uint64_t want = i % 7 == 0 ? i + 1 : 0;
                if (r->w[i].get() != want) {
                    FAIL_CHECK("word " << i << " is " << r->w[i].get() << ", expected " << want);
                    return;
                }
            }
        };
        expect_first("after the overflow");

        // The pool is usable: large transactions that fit commit, several in a row (the ring
        // wraps), and a crash-free reopen sees exactly them.
        const std::size_t fits = 2700; // 16 + 2700 * 24 = 64816 bytes < 64 KiB
        for (std::uint64_t round = 0; round < 3; ++round) {
            tlptm::atomic(pl, [&] {
                for (std::size_t i = 0; i < fits; ++i)
                    r->w[4000 + i] = noise(i, 10 + round);
            });
        }
        tlptm::atomic(pl, [&] { r->w[1] = 11; });
        pl.close();
        auto again = tlptm::pool::open(path, small_options(mode));
        r = again.root<wide_root>();
        CHECK(r->w[0].get() == 1);
        CHECK(r->w[1].get() == 11);
        CHECK(r->w[2].get() == 0);
        CHECK(r->w[3999].get() == 0);
        CHECK(r->w[7].get() == 8);
        for (std::size_t i = 0; i < fits; ++i) {
            if (r->w[4000 + i].get() != noise(i, 12)) {
                FAIL_CHECK("word " << 4000 + i << " lost the last large transaction");
                break;
            }
        }
    }
}

// ---- misuse of the API -----------------------------------------------------------------------

TEST_CASE("stores outside a transaction or outside the pool's heap are tx_scope_errors") {
    temp_path path("scope");
    make_pool(path);
    auto pl = tlptm::pool::open(path, small_options());
    auto* r = pl.root<small_root>();

    SUBCASE("a p<T> store outside a transaction") {
        CHECK_THROWS_AS(r->a = 9, tlptm::tx_scope_error);
        CHECK_THROWS_AS(r->counter += 1, tlptm::tx_scope_error);
        CHECK_THROWS_AS(++r->counter, tlptm::tx_scope_error);
        CHECK_THROWS_AS(tlptm::current_tx(), tlptm::tx_scope_error);
        CHECK(r->a.get() == 1);
        CHECK(r->counter.get() == 1);
    }
    SUBCASE("stores to the header, a log ring, the metadata and volatile memory") {
        auto* base = static_cast<std::uint8_t*>(pl.base());
        const pool_header& h = *reinterpret_cast<const pool_header*>(base);
        std::uint64_t on_stack = 5;
        tlptm::p<std::uint64_t> volatile_field(3);
        const std::vector<std::pair<std::string, std::uint64_t*>> targets = {
            {"the header's magic", reinterpret_cast<std::uint64_t*>(base)},
            {"the checkpoint", reinterpret_cast<std::uint64_t*>(base + 256)},
            {"ring 0", reinterpret_cast<std::uint64_t*>(base + h.log_offset + 64)},
            {"the metadata", reinterpret_cast<std::uint64_t*>(base + h.meta_offset)},
            {"the stack", &on_stack},
        };
        const auto before = std::vector<std::uint8_t>(base, base + 8192);
        for (const auto& [what, where] : targets) {
            CAPTURE(what);
            CHECK_THROWS_AS(tlptm::atomic(pl,
                                          [&](tlptm::tx& tx) {
                                              r->a = 99; // logged before the bad store
                                              tx.store(where, std::uint64_t{0xBAD});
                                          }),
                            tlptm::tx_scope_error);
            CHECK(r->a.get() == 1);
        }
        CHECK_THROWS_AS(tlptm::atomic(pl, [&] { volatile_field = 4; }), tlptm::tx_scope_error);
        CHECK(volatile_field.get() == 3);
        CHECK_THROWS_AS(tlptm::atomic(pl,
                                      [&](tlptm::tx& tx) {
                                          std::uint64_t src[2] = {1, 2};
                                          tx.memcpy(base + h.heap_offset - 8, src, sizeof src);
                                      }),
                        tlptm::tx_scope_error);
        CHECK_THROWS_AS(tlptm::atomic(pl,
                                      [&](tlptm::tx& tx) {
                                          std::uint64_t v = 1;
                                          tx.write(base + pl.size() - 4, &v, sizeof v);
                                      }),
                        tlptm::tx_scope_error);
        CHECK(on_stack == 5);
        CHECK(std::vector<std::uint8_t>(base, base + 8192) == before);
        // The pool is still usable.
        tlptm::atomic(pl, [&] { r->a = 2; });
        CHECK(r->a.get() == 2);
    }
    SUBCASE("a transaction on a closed pool, a nested one on another pool") {
        temp_path other_path("scope-other");
        auto other = tlptm::pool::create(other_path, small_options());
        auto* o = other.root<small_root>();
        CHECK_THROWS_AS(tlptm::atomic(pl, [&] { tlptm::atomic(other, [&] { o->a = 1; }); }),
                        tlptm::tx_scope_error);
        CHECK(o->a.get() == 0);
        other.close();
        CHECK_THROWS_AS(tlptm::atomic(other, [&] {}), tlptm::tx_scope_error);
    }
}

namespace {
struct root_a {
    tlptm::p<std::uint64_t> x;
    tlptm::p<std::uint64_t> y;
};
struct root_b { // same size as root_a, another type
    tlptm::p<std::uint64_t> x;
    tlptm::p<std::uint64_t> y;
};
struct root_huge {
    std::uint8_t bytes[std::size_t{1} << 20];
};
} // namespace

TEST_CASE("root<T>(): identity is the size, not the type's name; a smaller root is a "
          "layout_error") {
    temp_path path("root-type");
    {
        auto pl = tlptm::pool::create(path, small_options());
        auto* a = pl.root<root_a>();
        tlptm::atomic(pl, [&] { a->x = 17; });
        // Another type of the same size is the same root (renaming a struct, or another
        // compiler's spelling of its name, does not change what the pool holds).
        CHECK(static_cast<void*>(pl.root<root_b>()) == static_cast<void*>(a));
        CHECK_THROWS_AS(pl.root<std::uint64_t>(), tlptm::layout_error);
        CHECK(pl.root<root_a>() == a);
    }
    {
        auto pl = tlptm::pool::open(path, small_options());
        std::string what = message_of<tlptm::layout_error>([&] { pl.root<std::uint64_t>(); });
        CHECK(contains(what, "root"));
        CHECK(pl.root<root_b>()->x.get() == 17);
    }
    temp_path huge("root-huge");
    auto pl = tlptm::pool::create(huge, small_options());
    CHECK_THROWS_AS(pl.root<root_huge>(), tlptm::layout_error);
    // The refused request recorded nothing: a fitting type can still become the root.
    CHECK(pl.root<root_a>()->x.get() == 0);
}
