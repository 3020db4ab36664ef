// Large pools (issue 17): creation writes only the header of a sparse file, opening reads only
// the heap summary, and the heap is rebuilt arena by arena when first needed — with the same
// answers as a full rebuild.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

namespace d = tlptm::detail;

constexpr std::uint64_t root_bytes = 64 * 1024;

std::uint64_t allocated_bytes(const std::string& path) {
    struct stat sb {};
    REQUIRE(::stat(path.c_str(), &sb) == 0);
    return static_cast<std::uint64_t>(sb.st_blocks) * 512;
}

/// True if the test directory keeps a file sized with ftruncate sparse.
bool sparse_files() {
    tlptm_test::temp_path probe("sparse-probe");
    int fd = ::open(probe.str().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    bool sparse = ::ftruncate(fd, std::int64_t{1} << 30) == 0;
    struct stat sb {};
    sparse = sparse && ::fstat(fd, &sb) == 0 && sb.st_blocks * 512 < (1 << 20);
    ::close(fd);
    return sparse;
}

tlptm::pool_options opts(std::uint64_t size) {
    tlptm::pool_options o;
    o.size = size;
    o.max_threads = 4;
    o.durability = tlptm::durability::emulate_pmem;
    return o;
}

/// The full, eager rebuild of the tool: every arena scanned, the summary checked against the
/// superblocks. Throws corruption_error.
tlptm::heap_stats full_rebuild(tlptm::pool& pool) {
    d::pool_state& st = pool.state();
    d::heap h;
    h.rebuild(st.base, *st.header, st.path);
    h.scan_all();
    return h.figures();
}

struct block {
    char* p;
    std::size_t n;
};

std::uint64_t block_bytes(std::size_t n) {
    if (n <= d::max_small_size)
        return d::size_classes[d::class_of(n)];
    return (n + d::superblock_bytes - 1) / d::superblock_bytes * d::superblock_bytes;
}

} // namespace

TEST_CASE("a large pool is created by writing its header and opened by reading its summary") {
    const std::uint64_t size = std::uint64_t{8} << 30;
    tlptm_test::temp_path path("large");
    auto o = opts(size);
    {
        auto pool = tlptm::pool::create(path, o);
        CHECK(pool.size() == size);
        if (sparse_files()) // tmpfs and most file systems: only the header page and a ring
            CHECK(allocated_bytes(path) < (std::uint64_t{1} << 20));
        struct node {
            tlptm::p<node*> next;
        };
        auto* head = pool.root<tlptm::p<node*>>();
        for (int k = 0; k < 200; ++k)
            tlptm::atomic(pool, [&] {
                for (int j = 0; j < 100; ++j) {
                    node* n = tlptm::make<node>();
                    n->next = head->get();
                    *head = n;
                }
            });
        auto h = pool.stats().heap;
        CHECK(h.arenas == (h.superblocks + d::arena_superblocks - 1) / d::arena_superblocks);
        CHECK(h.arenas > 500);
        CHECK(h.bytes_in_use == root_bytes + 20000 * 16);
        // 20 000 blocks of 16 bytes fill five superblocks of the first arena.
        CHECK(h.arenas_scanned <= 2);
    }
    auto pool = tlptm::pool::open(path, o);
    auto h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes + 20000 * 16);
    CHECK(h.arenas_scanned == 1); // only the arena the summary marks used is read
    CHECK(h.superblocks_free == h.superblocks - 1 - 5);
    if (sparse_files())
        CHECK(allocated_bytes(path) < (std::uint64_t{8} << 20));
    auto full = full_rebuild(pool);
    CHECK(full.bytes_in_use == h.bytes_in_use);
    CHECK(full.superblocks_free == h.superblocks_free);
}

TEST_CASE("preallocate reserves the whole file at creation") {
    tlptm_test::temp_path path("prealloc");
    auto o = opts(std::uint64_t{16} << 20);
    o.preallocate = true;
    auto pool = tlptm::pool::create(path, o);
    CHECK(allocated_bytes(path) >= o.size);
}

TEST_CASE("lazy rebuild: frees and allocations in arenas not scanned yet, spans across arenas") {
    tlptm_test::temp_path path("lazy");
    auto o = opts(std::uint64_t{64} << 20); // four arenas
    std::vector<block> live;
    std::mt19937_64 rng(3);
    {
        auto pool = tlptm::pool::create(path, o);
        REQUIRE(pool.stats().heap.arenas == 4);
        // Spans of two superblocks, one of which crosses the first arena's end, and small
        // blocks of several classes, until the pool is full.
        for (bool full = false; !full;) {
            std::size_t n = rng() % 3 == 0 ? 65537 + rng() % 60000 : 1 + rng() % 2000;
            try {
                char* p = tlptm::atomic(pool, [&](tlptm::tx& tx) {
                    char* m = static_cast<char*>(tx.alloc(n));
                    std::memset(m, static_cast<int>(live.size() % 251), n);
                    return m;
                });
                live.push_back({p, n});
            } catch (const tlptm::out_of_memory&) {
                full = n <= 2000; // a small block found no room either
            }
        }
        CHECK(pool.stats().heap.superblocks_free == 0);
    }
    // Free a third of the blocks, from the last arena backwards (arenas scanned by their first
    // free), then allocate until full again: no block may overlap a live one.
    auto pool = tlptm::pool::open(path, o);
    std::vector<block> kept;
    std::vector<block> freed;
    for (std::size_t i = live.size(); i-- > 0;)
        (i % 3 == 0 ? freed : kept).push_back(live[i]);
    for (const block& b : freed)
        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b.p); });
    std::map<std::uintptr_t, std::uintptr_t> ranges; // start -> end of every live block
    for (std::size_t i = 0; i < kept.size(); ++i) {
        auto a = reinterpret_cast<std::uintptr_t>(kept[i].p);
        ranges[a] = a + kept[i].n;
    }
    int overlaps = 0;
    for (bool full = false; !full;) {
        std::size_t n = rng() % 3 == 0 ? 65537 + rng() % 60000 : 1 + rng() % 2000;
        try {
            char* p =
                tlptm::atomic(pool, [&](tlptm::tx& tx) { return static_cast<char*>(tx.alloc(n)); });
            auto a = reinterpret_cast<std::uintptr_t>(p);
            auto next = ranges.lower_bound(a);
            if ((next != ranges.end() && next->first < a + n) ||
                (next != ranges.begin() && std::prev(next)->second > a))
                ++overlaps;
            ranges[a] = a + n;
            kept.push_back({p, n});
        } catch (const tlptm::out_of_memory&) {
            full = n <= 2000;
        }
    }
    CHECK(overlaps == 0);
    std::uint64_t expect = root_bytes;
    for (const block& b : kept)
        expect += block_bytes(b.n);
    CHECK(pool.stats().heap.bytes_in_use == expect);
    pool.close();
    pool = tlptm::pool::open(path, o);
    CHECK(pool.stats().heap.bytes_in_use == expect);
    CHECK(full_rebuild(pool).bytes_in_use == expect);
}

TEST_CASE("a pool of layout version 1 is refused with a message that says why") {
    tlptm_test::temp_path path("v1");
    auto o = opts(std::uint64_t{8} << 20);
    { tlptm::pool::create(path, o); }
    auto image = tlptm_test::read_file(path);
    d::pool_header h;
    std::memcpy(&h, image.data(), sizeof h);
    h.version = 1;
    h.checksum = d::header_checksum(h);
    tlptm_test::write_at(path, 0, &h, sizeof h);
    std::string what;
    try {
        tlptm::pool::open(path, o);
    } catch (const tlptm::layout_error& e) {
        what = e.what();
    }
    CHECK(what.find("layout version 1") != std::string::npos);
    CHECK(what.find("recreate the pool") != std::string::npos);
}

TEST_CASE("an arena the summary calls empty is not read; the tool's full check sees the "
          "mismatch") {
    tlptm_test::temp_path path("summary");
    auto o = opts(std::uint64_t{64} << 20);
    std::uint64_t summary_word = 0;
    {
        auto pool = tlptm::pool::create(path, o);
        d::pool_state& st = pool.state();
        const auto& hd = *st.header;
        std::uint64_t n = hd.heap_size / d::superblock_bytes;
        summary_word = hd.meta_offset + n * d::meta_bytes_per_superblock; // arena 0
        // One span in the third arena: its summary word is set, the others stay 0.
        void* far = nullptr;
        tlptm::atomic(pool, [&](tlptm::tx& tx) {
            far = tx.alloc((2 * d::arena_superblocks + 10) * d::superblock_bytes);
        });
        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.alloc(100); });
        auto words = reinterpret_cast<const std::uint64_t*>(st.base + summary_word);
        CHECK(words[0] != 0);
        CHECK(words[1] != 0);
        CHECK(words[2] != 0);
        CHECK(words[3] == 0);
        CHECK(full_rebuild(pool).bytes_in_use == pool.stats().heap.bytes_in_use);
    }
    // Damage: clear arena 0's summary word. The library then treats arena 0 as empty (it
    // trusts the summary as it trusts descriptors); the full check reports it.
    std::uint64_t zero = 0;
    tlptm_test::write_at(path, summary_word, &zero, sizeof zero);
    auto pool = tlptm::pool::open(path, o);
    CHECK_THROWS_WITH_AS(full_rebuild(pool), doctest::Contains("heap summary word is 0"),
                         tlptm::corruption_error);
}
