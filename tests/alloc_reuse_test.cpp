// Reuse of emptied superblocks, heap figures and small pools (issue 13, items 1, 6 and 8).
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

constexpr std::uint64_t root_bytes = 64 * 1024; // root_capacity 64 KiB: one superblock

tlptm::pool_options opts(std::size_t size) {
    auto o = tlptm_test::small_options();
    o.size = size;
    return o;
}

/// Fills the heap with blocks of n bytes, 64 per transaction, until it is full.
std::vector<void*> fill(tlptm::pool& pool, std::size_t n) {
    std::vector<void*> blocks;
    for (;;) {
        try {
            tlptm::atomic(pool, [&](tlptm::tx& tx) {
                std::vector<void*> got;
                for (int k = 0; k < 64; ++k)
                    got.push_back(tx.alloc(n));
                blocks.insert(blocks.end(), got.begin(), got.end());
            });
        } catch (const tlptm::out_of_memory&) {
            // The last transaction aborted whole; fill the rest one block at a time.
            for (;;) {
                try {
                    blocks.push_back(
                        tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(n); }));
                } catch (const tlptm::out_of_memory&) {
                    return blocks;
                }
            }
        }
    }
}

void free_all(tlptm::pool& pool, std::vector<void*>& blocks) {
    for (std::size_t i = 0; i < blocks.size(); i += 64)
        tlptm::atomic(pool, [&](tlptm::tx& tx) {
            for (std::size_t k = i; k < blocks.size() && k < i + 64; ++k)
                tx.free(blocks[k]);
        });
    blocks.clear();
}

/// The number in "... the smallest pool with these options is N bytes" of a message; 0 if none.
std::uint64_t stated_minimum(const std::string& what) {
    const std::string key = "the smallest pool with these options is ";
    auto at = what.find(key);
    if (at == std::string::npos)
        return 0;
    return std::strtoull(what.c_str() + at + key.size(), nullptr, 10);
}

} // namespace

TEST_CASE("superblocks emptied of small blocks serve large allocations, at once and after "
          "reopening") {
    tlptm_test::temp_path path("reuse-empty");
    const auto o = opts(32 << 20);
    auto pool = tlptm::pool::create(path, o);
    const std::uint64_t superblocks = pool.stats().heap.superblocks;
    std::vector<void*> blocks = fill(pool, 1000); // 1024-byte class: 64 per superblock
    REQUIRE(blocks.size() > 60 * (superblocks - 2));
    CHECK(pool.stats().heap.superblocks_free == 0);
    free_all(pool, blocks);

    // At run time: a span of one superblock, then one of almost the whole heap. Every
    // superblock held small blocks; the frees wait for I3, which the allocator advances.
    void* one = tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(40000); });
    CHECK(one != nullptr);
    const std::size_t most = (superblocks - 3) * tlptm::detail::superblock_bytes;
    void* big = tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(most); });
    CHECK(big != nullptr);
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        tx.free(one);
        tx.free(big);
    });

    // Fill and empty again, then reopen: the rebuilt heap calls them free and so does the
    // allocator: the whole heap but the root is one span.
    blocks = fill(pool, 1000);
    free_all(pool, blocks);
    pool.close();
    pool = tlptm::pool::open(path, o);
    auto h = pool.stats().heap;
    CHECK(h.superblocks_free == superblocks - 1);
    CHECK(h.bytes_in_use == root_bytes);
    CHECK(h.bytes_pending_free == 0);
    CHECK(h.superblocks_large == 0);
    void* all = tlptm::atomic(pool, [&](tlptm::tx& tx) {
        return tx.alloc((superblocks - 1) * tlptm::detail::superblock_bytes);
    });
    CHECK(all != nullptr);
    CHECK(pool.stats().heap.superblocks_free == 0);
    CHECK_THROWS_AS(tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.alloc(16); }),
                    tlptm::out_of_memory);
    tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(all); });
    // And back to small blocks of another class in the same superblocks.
    blocks = fill(pool, 4000); // 4096-byte class: 16 per superblock
    CHECK(blocks.size() == 16 * (superblocks - 1));
}

TEST_CASE("an empty superblock of one class is given to another class") {
    tlptm_test::temp_path path("reuse-class");
    auto pool = tlptm::pool::create(path, opts(8 << 20));
    std::vector<void*> blocks = fill(pool, 2000); // 2048-byte class: 32 per superblock
    const std::size_t small_count = blocks.size();
    free_all(pool, blocks);
    blocks = fill(pool, 3000);
    // 3072-byte blocks: 21 per superblock, in every superblock but the root's.
    const std::uint64_t superblocks = pool.stats().heap.superblocks;
    CHECK(blocks.size() == 21 * (superblocks - 1));
    free_all(pool, blocks);
    blocks = fill(pool, 2000);
    CHECK(blocks.size() == small_count);
}

TEST_CASE("blocks another thread's slot took ahead (its stash) are not counted and go to "
          "whoever fills the heap") {
    tlptm_test::temp_path path("reuse-stash");
    auto pool = tlptm::pool::create(path, opts(4 << 20));
    const std::uint64_t free_sbs = pool.stats().heap.superblocks_free;
    // Another thread allocates one 16-byte block: its slot takes a whole bitmap word (64
    // blocks) ahead and keeps the other 63. The thread keeps its slot while this one fills
    // the heap from another.
    void* theirs = nullptr;
    std::atomic<int> stage{0};
    std::thread other([&] {
        theirs = tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(16); });
        stage.store(1);
        while (stage.load() != 2)
            std::this_thread::yield();
    });
    while (stage.load() != 1)
        std::this_thread::yield();
    auto h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes + 16);
    // 16-byte blocks, 4096 per superblock: this thread gets every block but that one, the
    // other slot's stash included.
    std::vector<void*> blocks = fill(pool, 16);
    stage.store(2);
    other.join();
    CHECK(blocks.size() == free_sbs * 4096 - 1);
    CHECK(pool.stats().heap.bytes_in_use == root_bytes + 16 * (blocks.size() + 1));
    blocks.push_back(theirs);
    free_all(pool, blocks);
    h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes);
    // Once the frees are reclaimed the heap is whole again: one span of every superblock.
    void* all = tlptm::atomic(pool, [&](tlptm::tx& tx) {
        return tx.alloc((h.superblocks - 1) * tlptm::detail::superblock_bytes);
    });
    CHECK(all != nullptr);
}

TEST_CASE("heap figures: freed blocks count as free at once and are reported as pending") {
    tlptm_test::temp_path path("figures");
    auto pool = tlptm::pool::create(path, opts(16 << 20));
    std::vector<void*> blocks;
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        for (int k = 0; k < 1000; ++k)
            blocks.push_back(tx.alloc(1000));
    });
    auto h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes + 1000 * 1024);
    CHECK(h.bytes_pending_free == 0);
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        for (void* b : blocks)
            tx.free(b);
    });
    h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes);
    CHECK(h.bytes_pending_free == 1000 * 1024); // nothing allocated since: not reclaimed yet
    // Once reclaimed, nothing is pending and the superblocks are free again.
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        tx.free(tx.alloc((h.superblocks - 1) * tlptm::detail::superblock_bytes));
    });
    h = pool.stats().heap;
    CHECK(h.bytes_in_use == root_bytes);
    CHECK(h.bytes_pending_free == 0);
    CHECK(h.superblocks_free == h.superblocks - 1);
}

TEST_CASE("small pools: the default log rings follow the pool size; a refusal states the "
          "minimum") {
    tlptm_test::temp_path path("smallpool");
    tlptm::pool_options o;
    o.durability = tlptm::durability::emulate_pmem;
    o.size = std::size_t{16} << 20; // 16 thread slots by default
    {
        auto pool = tlptm::pool::create(path, o);
        auto* r = pool.root<tlptm::p<std::uint64_t>>();
        tlptm::atomic(pool, [&] { *r = 7; });
        const auto& h = *pool.state().header;
        CHECK(h.max_threads == 16);
        CHECK(h.ring_size < (std::uint64_t{1} << 20));
        CHECK(h.ring_size * 16 <= o.size / 8);
        // The rings hold a transaction of a few thousand words.
        auto* big = tlptm::atomic(
            pool, [&](tlptm::tx& tx) { return static_cast<std::uint64_t*>(tx.alloc(8000 * 8)); });
        tlptm::atomic(pool, [&](tlptm::tx& tx) {
            for (std::uint64_t k = 0; k < 1000; ++k)
                tx.store(big + k * 8, k);
        });
    }
    std::remove(path.str().c_str());

    // Too small: the message states the smallest size, which works, and one page less does not.
    o.size = 256 << 10;
    std::string what;
    try {
        tlptm::pool::create(path, o);
    } catch (const tlptm::pool_error& e) {
        what = e.what();
    }
    std::uint64_t minimum = stated_minimum(what);
    INFO(what);
    REQUIRE(minimum > o.size);
    CHECK(minimum <= std::uint64_t{1} << 20); // well below the 17 MiB of fixed 1 MiB rings
    MESSAGE("smallest pool with the default options: " << minimum << " bytes");
    o.size = minimum - 4096;
    CHECK_THROWS_AS(tlptm::pool::create(path, o), tlptm::pool_error);
    std::remove(path.str().c_str());
    o.size = minimum;
    {
        auto pool = tlptm::pool::create(path, o);
        auto* r = pool.root<tlptm::p<std::uint64_t>>();
        tlptm::atomic(pool, [&] { *r = 1; });
        CHECK(r->get() == 1);
    }
    std::remove(path.str().c_str());

    // An explicit log capacity is kept, and the minimum follows it.
    o.size = std::size_t{16} << 20;
    o.log_capacity = std::size_t{1} << 20;
    what.clear();
    try {
        tlptm::pool::create(path, o);
    } catch (const tlptm::pool_error& e) {
        what = e.what();
    }
    CHECK(stated_minimum(what) > (std::uint64_t{16} << 20));
    CHECK(what.find("log_capacity = 1048576") != std::string::npos);
}
