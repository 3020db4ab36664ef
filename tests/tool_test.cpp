// The tlptm command-line tool (tools/tlptm.cpp, docs/tool.md): every subcommand on a fresh
// pool, on a pool after a crash with entries to replay, on corrupted pools (a bad header field,
// a torn entry, a damaged entry with valid ones behind it, forged entries with an out-of-range
// record, a malformed payload, one word written twice at one timestamp) and on a pool held open by
// this process, which the tool must not touch.
#include "test_util.hpp"

#include <doctest/doctest.h>

#ifdef TLPTM_TOOL_PATH

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using tlptm::detail::entry_builder;
using tlptm::detail::entry_format;
using tlptm::detail::entry_view;
using tlptm::detail::log_record;
using tlptm_test::small_options;
using tlptm_test::temp_path;

// ---- running the tool --------------------------------------------------------------------------

struct tool_result {
    int status = -1; ///< exit status, or 128 + signal number
    std::string out; ///< stdout and stderr, interleaved as written
};

/// Runs the tool with `args` and waits for it.
tool_result run_tool(const std::vector<std::string>& args) {
    int pipe_fds[2];
    REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
    std::vector<std::string> argv_strings;
    argv_strings.push_back(TLPTM_TOOL_PATH);
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings)
        argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(pipe_fds[1], 1);
        ::dup2(pipe_fds[1], 2);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(pipe_fds[1]);
    tool_result r;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
        if (n > 0)
            r.out.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || errno != EINTR)
            break;
    }
    ::close(pipe_fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

std::size_t count(const std::string& haystack, const std::string& needle) {
    std::size_t n = 0;
    for (auto at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + 1))
        ++n;
    return n;
}

/// The unsigned number after `"key": ` in the tool's JSON output.
std::uint64_t json_number(const std::string& json, const std::string& key) {
    std::string k = "\"" + key + "\": ";
    auto at = json.find(k);
    REQUIRE_MESSAGE(at != std::string::npos, key << " not in " << json);
    return std::strtoull(json.c_str() + at + k.size(), nullptr, 10);
}

/// The number at the end of the text report line that starts with `key` (after indentation).
std::uint64_t report_number(const std::string& text, const std::string& key) {
    auto at = text.find("  " + key + " ");
    REQUIRE_MESSAGE(at != std::string::npos, key << " not in " << text);
    auto eol = text.find('\n', at);
    auto sp = text.rfind(' ', eol);
    return std::strtoull(text.c_str() + sp + 1, nullptr, 10);
}

// ---- pool files ------------------------------------------------------------------------------

std::vector<std::uint8_t> read_bytes(const std::string& path) {
    return tlptm_test::read_file(path);
}
using tlptm_test::write_at;

/// Header fields of a pool file (offsets of tlptm::detail::pool_header).
struct pool_geometry {
    std::uint64_t log_offset, ring_size, meta_offset, heap_offset, checkpoint;
    std::uint32_t max_threads;
    std::uint64_t summary_offset; ///< the heap summary word of arena 0
};

pool_geometry geometry_of(const std::vector<std::uint8_t>& bytes) {
    const auto* h = reinterpret_cast<const tlptm::detail::pool_header*>(bytes.data());
    return {h->log_offset,
            h->ring_size,
            h->meta_offset,
            h->heap_offset,
            h->checkpoint_ts,
            h->max_threads,
            h->meta_offset + h->heap_size / tlptm::detail::superblock_bytes *
                                 tlptm::detail::meta_bytes_per_superblock};
}

/// The valid entries of ring `ring` in a copy of the file, as recovery sees them.
struct ring_walk {
    std::uint64_t generation, base_ts, last_ts;
    std::size_t end;
    std::vector<entry_view> entries;
    std::vector<std::size_t> offsets;
};

ring_walk walk_ring(std::vector<std::uint8_t>& bytes, std::uint32_t ring) {
    pool_geometry g = geometry_of(bytes);
    tlptm::detail::log_ring r;
    r.base = bytes.data() + g.log_offset + std::uint64_t{ring} * g.ring_size;
    r.size = g.ring_size;
    ring_walk w{r.generation(), r.base_ts(), r.base_ts(), 0, {}, {}};
    w.end = r.for_each_entry([&](const entry_view& e, std::size_t off) {
        w.entries.push_back(e);
        w.offsets.push_back(off);
        w.last_ts = e.ts;
    });
    return w;
}

/// Appends `entry` (sealed for the ring's generation after its last entry) to ring `ring` of a
/// closed pool, as a transaction of this process would have.
void append_entry(const std::string& path, std::uint32_t ring,
                  const std::vector<std::uint8_t>& entry) {
    auto bytes = read_bytes(path);
    pool_geometry g = geometry_of(bytes);
    ring_walk w = walk_ring(bytes, ring);
    write_at(path, g.log_offset + std::uint64_t{ring} * g.ring_size + 64 + w.end, entry.data(),
             entry.size());
}

/// Seals `records` in `format` as the next entry of ring `ring` with timestamp `ts`.
std::vector<std::uint8_t> forge_entry(const std::string& path, std::uint32_t ring, std::uint64_t ts,
                                      entry_format format, const std::vector<log_record>& records) {
    auto bytes = read_bytes(path);
    ring_walk w = walk_ring(bytes, ring);
    REQUIRE(ts > w.last_ts);
    entry_builder b;
    b.encode(format, records, {});
    auto sealed = b.seal(ts, w.last_ts, w.generation);
    return {sealed.begin(), sealed.end()};
}

struct tool_root {
    tlptm::p<std::uint64_t> a, b, c;
};

/// A pool with a tool_root, closed cleanly.
void make_pool(const std::string& path) {
    auto pool = tlptm::pool::create(path, small_options());
    pool.root<tool_root>();
}

/// Runs `body` on the pool at `path` in a child process that then exits without closing it (a
/// crash: CT stays where it was, the transactions' entries stay in the log). `body` returns
/// false if the child should report failure; so does an exception.
void crash_after(const std::string& path, const std::function<bool(tlptm::pool&)>& body) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        try {
            auto pool = tlptm::pool::open(path, small_options());
            if (body(pool))
                ::_exit(0);
        } catch (...) {
        }
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
}

/// Three transactions, then a crash: the three entries stay in the log with ts > CT.
void crash_after_three_transactions(const std::string& path) {
    crash_after(path, [](tlptm::pool& pool) {
        auto* r = pool.root<tool_root>();
        tlptm::atomic(pool, [&] { r->a = 1; });
        tlptm::atomic(pool, [&] {
            r->b = 0x2222;
            r->c = 0xdeadbeef;
        });
        tlptm::atomic(pool, [&] { r->a = r->a + 10; });
        return true;
    });
}

/// The dump-log line of a full-word record.
std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
    return buf;
}

std::string record_line(std::uint64_t offset, std::uint64_t value) {
    char buf[128];
    std::snprintf(buf, sizeof buf,
                  "offset 0x%" PRIx64 "  mask 0xffffffffffffffff  value 0x%016" PRIx64, offset,
                  value);
    return buf;
}

const std::vector<std::string> subcommands = {"info", "check", "dump-log", "recover", "create"};

} // namespace

TEST_CASE("tool: --help on the tool and every subcommand exits 0") {
    for (const char* h : {"--help", "-h", "help"}) {
        auto r = run_tool({h});
        CHECK(r.status == 0);
        CHECK(contains(r.out, "usage: tlptm <command>"));
        for (const auto& c : subcommands)
            CHECK(contains(r.out, "  " + c + " "));
    }
    for (const auto& c : subcommands) {
        CAPTURE(c);
        for (const char* h : {"--help", "-h"}) {
            auto r = run_tool({c, h});
            CHECK(r.status == 0);
            CHECK(contains(r.out, "usage: tlptm " + c));
        }
    }
}

TEST_CASE("tool: usage errors exit 2 with a usage message, an unreadable file exits 2") {
    temp_path path("usage");
    make_pool(path);
    auto expect_usage = [](const std::vector<std::string>& args, const std::string& what) {
        auto r = run_tool(args);
        CAPTURE(r.out);
        CHECK(r.status == 2);
        CHECK(contains(r.out, what));
    };
    expect_usage({}, "usage: tlptm <command>");
    expect_usage({"frobnicate", path}, "unknown command 'frobnicate'");
    for (const auto& c : subcommands) {
        expect_usage({c}, "missing POOL");
        expect_usage({c, path, "--bogus"}, "unknown option '--bogus'");
        expect_usage({c, path, "extra"}, "unexpected argument 'extra'");
        expect_usage({c, "-x", path}, "usage: tlptm " + c);
    }
    expect_usage({"info", path, "--json=yes"}, "takes no value");
    temp_path fresh("usage-create");
    expect_usage({"create", fresh}, "missing --size");
    expect_usage({"create", fresh, "--size"}, "needs a value");
    expect_usage({"create", fresh, "--size", "8X"}, "unknown suffix");
    expect_usage({"create", fresh, "--size", "-8M"}, "usage: tlptm create");
    expect_usage({"create", fresh, "--size", "99999999999999999999"}, "too large");
    expect_usage({"create", fresh, "--size", "8M", "--max-threads", "0"}, "1..4096");
    CHECK(::access(fresh.str().c_str(), F_OK) != 0); // nothing was created

    temp_path missing("missing");
    for (const char* c : {"info", "check", "dump-log", "recover"}) {
        auto r = run_tool({c, missing});
        CHECK(r.status == 2);
        CHECK(contains(r.out, missing.str() + ": cannot open"));
    }
}

TEST_CASE("tool: every subcommand on a fresh pool") {
    temp_path path("fresh");
    SUBCASE("create, then info, check, dump-log, recover") {
        auto r = run_tool({"create", path, "--size", "8M", "--max-threads", "2", "--log-capacity",
                           "16K", "--root-capacity", "64K", "--base-address", "0x300000000000",
                           "--layout", "tool test"});
        INFO(r.out);
        REQUIRE(r.status == 0);
        CHECK(contains(r.out, path.str() + ": created"));
        CHECK(contains(r.out, "magic                ok"));
        CHECK(contains(r.out, "base address         0x300000000000"));
        CHECK(contains(r.out, "size                 8388608 bytes (8 MiB)"));
        CHECK(contains(r.out, "max threads          2"));
        CHECK(contains(r.out, "layout name          'tool test'"));
        CHECK(contains(r.out, "root                 not set"));
        CHECK(contains(r.out, "layout version       0 "));
        CHECK(contains(r.out, "allocator            125 superblocks: 1 for the root, 0 of small "
                              "blocks, 0 in large spans, 124 free"));

        r = run_tool({"create", path, "--size", "8M"});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "already exists"));

        r = run_tool({"info", path, "--json"});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(r.out.front() == '{');
        CHECK(json_number(r.out, "format_version") == tlptm::detail::layout_version);
        CHECK(json_number(r.out, "layout_version") == 0);
        CHECK(contains(r.out, "\"layout_name\": \"tool test\""));
        CHECK(json_number(r.out, "pool_size") == 8u << 20);
        CHECK(json_number(r.out, "max_threads") == 2);
        CHECK(json_number(r.out, "ring_size") == 20480); // 64 + 16 KiB, rounded to 4 KiB
        CHECK(json_number(r.out, "root_capacity") == 64u << 10);
        CHECK(json_number(r.out, "checkpoint_ts") == 0);
        CHECK(json_number(r.out, "entries") == 0);
        CHECK(contains(r.out, "\"base_address\": \"0x300000000000\""));
        CHECK(contains(r.out, "\"header_valid\": true"));
        CHECK(contains(r.out, "\"root\": null"));
        CHECK(contains(r.out, "\"rings\": []"));

        r = run_tool({"check", path});
        CHECK(r.status == 0);
        CHECK(r.out == path.str() + ": ok\n");

        r = run_tool({"dump-log", path});
        CHECK(r.status == 0);
        CHECK(contains(r.out, "checkpoint CT 0; 0 entries with ts > CT"));
        CHECK(!contains(r.out, "entry ts"));

        r = run_tool({"recover", path});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(report_number(r.out, "rings scanned") == 2);
        CHECK(report_number(r.out, "entries replayed") == 0);
    }
    SUBCASE("info of a pool made by the library, with its root and layout version") {
        {
            auto opt = small_options();
            opt.layout = "made by the library";
            auto pool = tlptm::pool::create(path, opt);
            pool.root<tool_root>();
            tlptm::atomic(pool, [&] { pool.layout_version() = 7; });
        }
        auto r = run_tool({"info", path});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(contains(r.out, "layout name          'made by the library'"));
        CHECK(contains(r.out, "root                 24 bytes (may grow to 65472)"));
        CHECK(contains(r.out, "layout version       7 "));
        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "size") == sizeof(tool_root));
        CHECK(json_number(r.out, "max_size") == 65472);
        CHECK(json_number(r.out, "layout_version") == 7);
        CHECK(contains(r.out, "\"layout_name\": \"made by the library\""));
    }
    SUBCASE("info of a pool without a layout name") {
        make_pool(path);
        auto r = run_tool({"info", path});
        CHECK(contains(r.out, "layout name          none"));
        CHECK(contains(r.out, "no valid entries in 4 rings"));
        r = run_tool({"info", path, "--json"});
        CHECK(contains(r.out, "\"layout_name\": null"));
    }
}

TEST_CASE("tool: info --json escapes the path") {
    temp_path path("q\"uo\\te\ttab");
    make_pool(path);
    auto r = run_tool({"info", path, "--json"});
    CHECK(r.status == 0);
    CHECK(contains(r.out, "q\\\"uo\\\\te\\ttab"));
}

TEST_CASE("tool: a pool after a crash, with entries to replay") {
    temp_path path("crashed");
    make_pool(path);
    crash_after_three_transactions(path);
    auto bytes = read_bytes(path);
    const pool_geometry g = geometry_of(bytes);
    const std::uint64_t ct = g.checkpoint;
    const std::uint64_t root = g.heap_offset; // the root is at the start of the heap

    SUBCASE("info, dump-log, check, then recover and info") {
        auto r = run_tool({"info", path, "--json"});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(json_number(r.out, "entries") == 3);
        CHECK(json_number(r.out, "entries_to_replay") == 3);
        CHECK(json_number(r.out, "rings_with_entries") == 1);
        CHECK(json_number(r.out, "checkpoint_ts") == ct);
        CHECK(json_number(r.out, "oldest_ts") > ct);

        r = run_tool({"info", path});
        CHECK(contains(r.out, "3 with ts > CT"));

        r = run_tool({"dump-log", path});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(contains(r.out, "3 entries with ts > CT, in replay order"));
        CHECK(count(r.out, "\nentry ts ") == 3);
        auto first = r.out.find(record_line(root, 1));
        auto b = r.out.find(record_line(root + 8, 0x2222));
        auto c = r.out.find(record_line(root + 16, 0xdeadbeef));
        auto last = r.out.find(record_line(root, 11));
        REQUIRE(first != std::string::npos);
        REQUIRE(b != std::string::npos);
        REQUIRE(c != std::string::npos);
        REQUIRE(last != std::string::npos);
        CHECK(first < b); // replay order is ts order
        CHECK(b < c);
        CHECK(c < last);
        CHECK(contains(r.out, "ring 0  offset 0  compressed"));
        CHECK(contains(r.out, "2 records"));

        r = run_tool({"check", path});
        CHECK(r.status == 0);
        CHECK(r.out == path.str() + ": ok\n");
        CHECK(read_bytes(path) == bytes); // info, dump-log and check wrote nothing

        r = run_tool({"recover", path});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(report_number(r.out, "checkpoint before") == ct);
        CHECK(report_number(r.out, "checkpoint after") > ct);
        CHECK(report_number(r.out, "entries valid") == 3);
        CHECK(report_number(r.out, "entries replayed") == 3);
        CHECK(report_number(r.out, "records replayed") == 4);

        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries_to_replay") == 0);
        r = run_tool({"dump-log", path});
        CHECK(contains(r.out, "0 entries with ts > CT"));
        r = run_tool({"dump-log", path, "--all"});
        CHECK(count(r.out, "(ts <= CT: applied, not replayed)") == 3);

        auto pool = tlptm::pool::open(path, small_options());
        auto* rt = pool.root<tool_root>();
        CHECK(rt->a.get() == 11);
        CHECK(rt->b.get() == 0x2222);
        CHECK(rt->c.get() == 0xdeadbeef);
    }
    SUBCASE("a torn entry is not an error: it is not a valid entry") {
        ring_walk w = walk_ring(bytes, 0);
        REQUIRE(w.entries.size() == 3);
        // Flip the last payload byte of the last entry: its CRC no longer matches.
        std::uint64_t at = g.log_offset + 64 + w.offsets[2] + w.entries[2].length - 1;
        std::uint8_t byte = static_cast<std::uint8_t>(bytes[at] ^ 0x40);
        write_at(path, at, &byte, 1);

        auto r = run_tool({"check", path});
        CHECK(r.status == 0);
        CHECK(r.out == path.str() + ": ok\n");
        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries") == 2);
        CHECK(json_number(r.out, "entries_to_replay") == 2);
        r = run_tool({"dump-log", path});
        CHECK(count(r.out, "\nentry ts ") == 2);
        CHECK(!contains(r.out, record_line(root, 11)));

        r = run_tool({"recover", path});
        CHECK(r.status == 0);
        CHECK(report_number(r.out, "entries replayed") == 2);
        auto pool = tlptm::pool::open(path, small_options());
        CHECK(pool.root<tool_root>()->a.get() == 1); // the torn transaction never committed
    }
    SUBCASE("a damaged entry with committed ones behind it is a problem, not a torn tail") {
        ring_walk w = walk_ring(bytes, 0);
        REQUIRE(w.entries.size() == 3);
        // Flip the last payload byte of the middle entry: the third stays valid behind it.
        std::uint64_t at = g.log_offset + 64 + w.offsets[1] + w.entries[1].length - 1;
        std::uint8_t byte = static_cast<std::uint8_t>(bytes[at] ^ 0x40);
        write_at(path, at, &byte, 1);
        const auto damaged = read_bytes(path);

        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, path.str() + ": ring 0: the entry at offset " +
                                  std::to_string(w.offsets[1]) +
                                  " fails its checksum, yet a valid entry with ts " +
                                  std::to_string(w.entries[2].ts) + " > CT follows it"));
        r = run_tool({"recover", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "the log was damaged after it was written"));
        CHECK(read_bytes(path) == damaged); // recovery wrote nothing
        CHECK_THROWS_AS(tlptm::pool::open(path, small_options()), tlptm::corruption_error);
    }
}

TEST_CASE("tool: the allocator as recovery will rebuild it") {
    temp_path path("alloc");
    make_pool(path);
    // The allocator's descriptor and bitmap are only in the log after this crash.
    crash_after(path, [](tlptm::pool& pool) {
        auto* r = pool.root<tool_root>();
        tlptm::atomic(pool, [&] {
            for (int i = 0; i < 3; ++i)
                r->a = reinterpret_cast<std::uintptr_t>(tlptm::make<tool_root>());
        });
        return true;
    });
    auto bytes = read_bytes(path);
    const pool_geometry g = geometry_of(bytes);

    auto r = run_tool({"info", path, "--json"});
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(contains(r.out, "\"valid\": true"));
    CHECK(json_number(r.out, "entries_replayed_first") == 1);
    CHECK(json_number(r.out, "small_superblocks") == 1);
    CHECK(json_number(r.out, "root_superblocks") == 1);
    CHECK(json_number(r.out, "block_size") == 32); // 24-byte objects
    CHECK(json_number(r.out, "bytes_in_use") == (64u << 10) + 3 * 32);
    r = run_tool({"info", path});
    CHECK(contains(r.out, "superblocks per block size: 32 B: 1"));
    CHECK(contains(r.out, "(as recovery rebuilds it, after replaying 1 entry)"));
    r = run_tool({"dump-log", path});
    CHECK(contains(r.out, "descriptor)"));
    CHECK(contains(r.out, "bitmap word 0)"));
    CHECK(contains(r.out, "(root + 0)"));
    r = run_tool({"check", path});
    CHECK(r.status == 0);

    SUBCASE("after recovery") {
        r = run_tool({"recover", path});
        CHECK(r.status == 0);
        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries_replayed_first") == 0);
        CHECK(json_number(r.out, "small_superblocks") == 1);
    }
    SUBCASE("a damaged descriptor") {
        REQUIRE(run_tool({"recover", path}).status == 0);
        const std::uint64_t bad = std::uint64_t{7} << 56;
        write_at(path, g.meta_offset + 5 * 1024, &bad, 8);
        r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out,
                       path.str() +
                           ": allocator metadata of superblock 5: descriptor of unknown kind 7"));
        r = run_tool({"info", path});
        CHECK(r.status == 0);
        CHECK(contains(r.out, "allocator            DAMAGED: allocator metadata of superblock 5"));
        // The library rebuilds the heap lazily, arena by arena, when it first needs one: opening
        // the pool does not read superblock 5's descriptor, so `recover` succeeds; `check` is
        // the command that reads every arena.
        r = run_tool({"recover", path});
        CHECK(r.status == 0);
    }
}

TEST_CASE("tool: an entry recovery refuses (its covered block is not durable) is not replayed") {
    temp_path path("refused");
    make_pool(path);
    const std::vector<std::uint8_t> before = read_bytes(path);
    temp_path where("refused-offset");
    crash_after(path, [&](tlptm::pool& pool) { // the insert's entry is the ring's last
        auto* r = pool.root<tool_root>();
        // One insert: its 24-byte node is covered by the entry (a CRC of its bytes).
        auto* n = tlptm::atomic(pool, [&] {
            auto* x = tlptm::make<tool_root>();
            x->a = 0x1234;
            r->a = reinterpret_cast<std::uintptr_t>(x);
            return x;
        });
        std::uint64_t off = static_cast<std::uint64_t>(reinterpret_cast<std::uint8_t*>(n) -
                                                       static_cast<std::uint8_t*>(pool.base()));
        std::FILE* f = std::fopen(where.str().c_str(), "w");
        return f && std::fprintf(f, "%llu\n", static_cast<unsigned long long>(off)) > 0 &&
               std::fclose(f) == 0;
    });
    unsigned long long node = 0;
    {
        std::FILE* f = std::fopen(where.str().c_str(), "r");
        REQUIRE(f != nullptr);
        REQUIRE(std::fscanf(f, "%llu", &node) == 1);
        std::fclose(f);
    }
    SUBCASE("the node is durable: the entry is replayed") {
        auto r = run_tool({"info", path, "--json"});
        INFO(r.out);
        CHECK(json_number(r.out, "entries_refused") == 0);
        CHECK(json_number(r.out, "bytes_in_use") == (64u << 10) + 32);
    }
    SUBCASE("only the log entry reached persistent memory: the entry is refused") {
        // A crash before the commit's fence completed: the entry's non-temporal stores drained,
        // the node's line did not, and nothing was written back yet. The image is the pool
        // before the transaction with the rings of the pool after it.
        std::vector<std::uint8_t> image = before;
        const std::vector<std::uint8_t> after = read_bytes(path);
        const pool_geometry g = geometry_of(after);
        const std::uint64_t rings_end = g.log_offset + g.max_threads * g.ring_size;
        REQUIRE(node >= rings_end);
        std::copy(after.begin() + static_cast<std::ptrdiff_t>(g.log_offset),
                  after.begin() + static_cast<std::ptrdiff_t>(rings_end),
                  image.begin() + static_cast<std::ptrdiff_t>(g.log_offset));
        tlptm_test::write_file(path, image);
        auto r = run_tool({"info", path, "--json"});
        INFO(r.out);
        CHECK(r.status == 0);
        CHECK(json_number(r.out, "entries_refused") == 1);
        CHECK(json_number(r.out, "bytes_in_use") == (64u << 10)); // the node is not allocated
        r = run_tool({"info", path});
        CHECK(contains(r.out, "recovery would refuse 1 entry as never committed"));
        // Recovery agrees with the tool.
        {
            auto pool = tlptm::pool::open(path, small_options());
            CHECK(pool.last_recovery().entries_uncommitted == 1);
            CHECK(pool.stats().heap.bytes_in_use == (64u << 10));
            CHECK(pool.root<tool_root>()->a.get() == 0);
        }
        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries_refused") == 0);
        CHECK(json_number(r.out, "bytes_in_use") == (64u << 10));
    }
}

TEST_CASE("tool: allocator metadata is checked after the replay, as recovery rebuilds it") {
    temp_path path("alloc-replay");
    make_pool(path);
    const pool_geometry g = geometry_of(read_bytes(path));
    constexpr std::uint64_t full = ~std::uint64_t{0};
    const std::uint64_t head = std::uint64_t{2} << 56 | 2; // span of superblocks 3 and 4
    const std::uint64_t tail = std::uint64_t{3} << 56 | 3;
    const std::uint64_t ts = g.checkpoint + 1;

    SUBCASE("half written back before the crash: fine once the log is replayed") {
        write_at(path, g.meta_offset + 3 * 1024, &head, 8); // the head reached the pool...
        append_entry(path, 0,
                     forge_entry(path, 0, ts, entry_format::compressed,
                                 {{g.meta_offset + 3 * 1024, head, full},
                                  {g.meta_offset + 4 * 1024, tail, full},
                                  {g.summary_offset, 1, full}})); // ...the tail not
        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 0);
        r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "large_superblocks") == 2);
        r = run_tool({"recover", path});
        CHECK(r.status == 0);
    }
    SUBCASE("an entry that leaves the metadata inconsistent") {
        append_entry(path, 0,
                     forge_entry(path, 0, ts, entry_format::compressed,
                                 {{g.meta_offset + 3 * 1024, head, full},
                                  {g.summary_offset, 1, full}})); // no tail
        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, path.str() + ": allocator metadata of superblock 4: span tail does "
                                           "not point to its head 3"));
    }
}

TEST_CASE("tool: a bad header field is named by check, info, dump-log and recover") {
    struct damage {
        std::uint64_t offset;
        std::uint32_t value_xor;
        const char* field;
    };
    for (damage d : {damage{96, 0x10000, "heap_offset"}, damage{16, 0x3, "version"},
                     damage{72, 0x10000, "max_threads"}, damage{24, 0x1, "checksum"},
                     damage{128, 0x10000, "superblock_size"}}) {
        CAPTURE(d.field);
        temp_path path("badheader");
        make_pool(path);
        auto bytes = read_bytes(path);
        std::uint32_t word;
        std::memcpy(&word, bytes.data() + d.offset, 4);
        word ^= d.value_xor;
        write_at(path, d.offset, &word, 4);
        const std::string named = "header field '" + std::string(d.field) + "'";

        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, path.str() + ": " + named));
        CHECK(contains(r.out, path.str() + ": 1 problem(s)\n"));

        r = run_tool({"info", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "validation           FAILED: " + named));
        r = run_tool({"info", path, "--json"});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "\"header_valid\": false"));
        r = run_tool({"dump-log", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, named));
        auto before = read_bytes(path);
        r = run_tool({"recover", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, named));
        CHECK(read_bytes(path) == before);
    }
}

TEST_CASE("tool: random damage to the header and the rings never crashes the tool") {
    temp_path path("random");
    make_pool(path);
    crash_after_three_transactions(path);
    const auto clean = read_bytes(path);
    const pool_geometry g = geometry_of(clean);
    std::mt19937_64 rng(20240611);
    for (int round = 0; round < 30; ++round) {
        auto bytes = clean;
        for (int k = 0; k < 4; ++k) {
            // In the header's first 512 bytes, ring 0's first lines, or the descriptors and
            // bitmaps of the first superblocks.
            std::uint64_t at;
            switch (rng() % 3) {
            case 0:
                at = rng() % 512;
                break;
            case 1:
                at = g.log_offset + rng() % 256;
                break;
            default:
                at = g.meta_offset + rng() % 4096;
                break;
            }
            bytes[at] = static_cast<std::uint8_t>(rng());
        }
        write_at(path, 0, bytes.data(), g.log_offset + 256);
        write_at(path, g.meta_offset, bytes.data() + g.meta_offset, 4096);
        for (std::vector<std::string> args : {std::vector<std::string>{"check", path},
                                              {"info", path, "--json"},
                                              {"dump-log", path, "--all"}}) {
            auto r = run_tool(args);
            CAPTURE(args[0]);
            CAPTURE(r.out);
            CHECK((r.status == 0 || r.status == 1)); // never a signal, never "unreadable"
        }
        CHECK(read_bytes(path) == bytes);
    }
}

TEST_CASE("tool: a file that is not a pool") {
    {
        temp_path path("notapool");
        std::vector<std::uint8_t> junk(8192, 0x5A);
        int fd = ::open(path.str().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::write(fd, junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
        ::close(fd);
        auto r = run_tool({"check", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "header field 'magic'"));
        r = run_tool({"info", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "bad (not a tlptm pool)"));
    }
}

TEST_CASE("tool: forged entries with bad records fail check and recovery") {
    temp_path path("forged");
    make_pool(path);
    auto bytes = read_bytes(path);
    const pool_geometry g = geometry_of(bytes);
    const std::uint64_t ts = g.checkpoint + 5;
    constexpr std::uint64_t full = ~std::uint64_t{0};

    SUBCASE("a record at pool offset 0") {
        append_entry(path, 1, forge_entry(path, 1, ts, entry_format::baseline, {{0, 42, full}}));
        auto r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries_to_replay") == 1);

        r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, path.str() + ": ring 1: entry ts " + std::to_string(ts) +
                                  " at offset 0: record 0: offset 0x0 lies outside the heap"));
        CHECK(contains(r.out, path.str() + ": 1 problem(s)\n"));

        r = run_tool({"dump-log", path});
        CHECK(r.status == 0);
        CHECK(contains(r.out, "ring 1  offset 0  baseline  40 bytes  1 record"));
        CHECK(contains(r.out, record_line(0, 42)));

        auto before = read_bytes(path);
        r = run_tool({"recover", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "outside the pool's heap"));
        CHECK(read_bytes(path) == before); // I5: recovery wrote nothing
    }
    SUBCASE("misaligned and empty-mask records; heap and metadata records are fine") {
        append_entry(path, 2,
                     forge_entry(path, 2, ts, entry_format::compressed,
                                 {{g.meta_offset, 3, full}, {g.heap_offset, 7, full}}));
        append_entry(path, 2,
                     forge_entry(path, 2, ts + 1, entry_format::baseline,
                                 {{g.heap_offset + 4, 1, full}, {g.heap_offset + 8, 1, 0}}));
        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        std::string at =
            path.str() + ": ring 2: entry ts " + std::to_string(ts + 1) + " at offset ";
        CHECK(contains(r.out, at));
        CHECK(contains(r.out, "record 0: offset 0x"));
        CHECK(contains(r.out, "is not 8-byte aligned"));
        CHECK(contains(r.out, "record 1: offset"));
        CHECK(contains(r.out, "has an empty byte mask"));
        CHECK(contains(r.out, path.str() + ": 2 problem(s)\n"));
    }
    SUBCASE("one timestamp, one word, two rings") {
        append_entry(path, 0,
                     forge_entry(path, 0, ts, entry_format::compressed,
                                 {{g.heap_offset, 1, full}, {g.heap_offset + 8, 1, full}}));
        append_entry(
            path, 3,
            forge_entry(path, 3, ts, entry_format::compressed, {{g.heap_offset, 2, full}}));
        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1);
        CHECK(contains(r.out, "ring 3: entry ts " + std::to_string(ts) +
                                  " at offset 0: writes offset " + hex(g.heap_offset) +
                                  ", as does the entry with the same timestamp in ring 0"));
        CHECK(contains(r.out, path.str() + ": 1 problem(s)\n"));
        r = run_tool({"recover", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "two log entries carry timestamp " + std::to_string(ts) +
                                  " and both write offset " + std::to_string(g.heap_offset)));
    }
    SUBCASE("one timestamp, different words, two rings: fine") {
        append_entry(
            path, 0,
            forge_entry(path, 0, ts, entry_format::compressed, {{g.heap_offset, 1, full}}));
        append_entry(
            path, 3,
            forge_entry(path, 3, ts, entry_format::compressed, {{g.heap_offset + 8, 2, full}}));
        auto r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 0);
        r = run_tool({"recover", path});
        CHECK(r.status == 0);
        CHECK(report_number(r.out, "entries replayed") == 2);
    }
    SUBCASE("an entry whose CRC is valid but whose payload does not decode") {
        // format 2, payload length 1, ts delta, CRC, then a truncated 3-byte varint.
        auto walk_bytes = read_bytes(path);
        ring_walk w = walk_ring(walk_bytes, 0);
        std::vector<std::uint8_t> e = {
            0x02, 1 << 1, static_cast<std::uint8_t>((ts - w.last_ts) << 1), 0, 0, 0, 0, 0x03};
        REQUIRE(ts - w.last_ts < 128);
        std::uint32_t crc = tlptm::detail::entry_crc(e.data(), e.size(), 3, w.generation, ts);
        std::memcpy(e.data() + 3, &crc, 4);
        append_entry(path, 0, e);

        auto r = run_tool({"info", path, "--json"});
        CHECK(json_number(r.out, "entries") == 1); // it is a valid entry...
        r = run_tool({"check", path});
        INFO(r.out);
        CHECK(r.status == 1); // ...whose records cannot be decoded
        CHECK(contains(r.out, "ring 0: entry ts " + std::to_string(ts) +
                                  " at offset 0: compressed payload cannot be decoded"));
        r = run_tool({"dump-log", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "malformed"));
        r = run_tool({"recover", path});
        CHECK(r.status == 1);
        CHECK(contains(r.out, "malformed records"));
    }
}

TEST_CASE("tool: a pool held open by a process is reported, not touched") {
    temp_path path("held");
    auto pool = tlptm::pool::create(path, small_options());
    auto* rt = pool.root<tool_root>();
    tlptm::atomic(pool, [&] { rt->a = 5; });
    const auto before = read_bytes(path);
    for (const auto& c : subcommands) {
        CAPTURE(c);
        std::vector<std::string> args = {c, path};
        if (c == "create")
            args.insert(args.end(), {"--size", "8M"});
        auto r = run_tool(args);
        CHECK(r.status == 1);
        CHECK(
            contains(r.out, path.str() + ": in use by another process (locked); not touching it"));
    }
    CHECK(read_bytes(path) == before);
    CHECK(rt->a.get() == 5);
    pool.close();
    auto r = run_tool({"check", path});
    CHECK(r.status == 0); // closed: the lock is gone
}

#else

TEST_CASE("tool tests need the tool (configure with TLPTM_BUILD_TOOLS=ON)" * doctest::skip()) {}

#endif
