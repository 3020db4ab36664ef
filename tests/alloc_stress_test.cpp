// The allocator under many threads in a small pool (issue 13, item 1): blocks of mixed sizes are
// allocated, freed and handed between threads while far less than the pool is live. No
// allocation may fail, no block may overlap another, and the heap figures must be exact, while
// running and after reopening. Also runs under ThreadSanitizer (label `concurrency`).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace {

namespace d = tlptm::detail;

constexpr std::uint64_t root_bytes = 64 * 1024;

/// Bytes the allocator gives a request of n bytes: its size class, or whole superblocks.
std::uint64_t block_bytes(std::size_t n) {
    if (n <= d::max_small_size)
        return d::size_classes[d::class_of(n)];
    return (n + d::superblock_bytes - 1) / d::superblock_bytes * d::superblock_bytes;
}

struct block {
    char* p = nullptr;
    std::size_t n = 0;
};

char tag_of(const char* p) {
    return static_cast<char>(reinterpret_cast<std::uintptr_t>(p) >> 4);
}

bool intact(const block& b) {
    for (std::size_t i = 0; i < b.n; i += 61)
        if (b.p[i] != tag_of(b.p))
            return false;
    return b.p[b.n - 1] == tag_of(b.p);
}

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int ops_per_thread = 1500;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr int ops_per_thread = 1500;
#else
constexpr int ops_per_thread = 6000;
#endif
#else
constexpr int ops_per_thread = 6000;
#endif

} // namespace

TEST_CASE("many threads, a 16 MiB pool, small and large blocks: no spurious out_of_memory, "
          "exact heap figures") {
    tlptm_test::temp_path path("allocstress");
    auto o = tlptm_test::small_options();
    o.size = std::size_t{16} << 20;
    o.max_threads = 12;
    o.log_capacity = std::size_t{8} << 10;
    auto pool = tlptm::pool::create(path, o);
    const std::uint64_t heap_bytes = pool.stats().heap.superblocks * d::superblock_bytes;

    const int threads = 8;
    // Live bytes stay below a fifth of the heap (counted in what the allocator gives).
    const std::uint64_t live_cap = heap_bytes / 5;
    std::mutex handoff_mutex;
    std::deque<block> handoff;
    // Out of memory for a small block, and for a span of whole superblocks.
    std::atomic<std::uint64_t> ooms{0}, span_ooms{0}, corrupt{0}, allocs{0}, peak_live{0};
    std::atomic<std::int64_t> live_total{0};
    std::vector<std::vector<block>> kept(threads);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);

    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 7919 + 1);
            std::vector<block>& mine = kept[static_cast<std::size_t>(t)];
            auto add_live = [&](std::int64_t delta) {
                std::int64_t now = live_total.fetch_add(delta) + delta;
                std::uint64_t peak = peak_live.load();
                while (now > 0 && static_cast<std::uint64_t>(now) > peak &&
                       !peak_live.compare_exchange_weak(peak, static_cast<std::uint64_t>(now))) {
                }
            };
            auto free_block = [&](const block& b) {
                if (!intact(b))
                    ++corrupt;
                tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b.p); });
                add_live(-static_cast<std::int64_t>(block_bytes(b.n)));
            };
            for (int i = 0; i < ops_per_thread && std::chrono::steady_clock::now() < deadline;
                 ++i) {
                auto op = rng() % 16;
                if (op < 8 || mine.empty()) {
                    std::size_t n = rng() % 8 == 0 ? 65537 + rng() % 140000 : 1 + rng() % 4000;
                    if (live_total.load() + static_cast<std::int64_t>(block_bytes(n)) >
                        static_cast<std::int64_t>(live_cap)) {
                        // At the cap: free something (own blocks first, then handed-off ones).
                        if (!mine.empty()) {
                            std::size_t k = rng() % mine.size();
                            free_block(mine[k]);
                            mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
                        } else {
                            block got;
                            {
                                std::lock_guard lk(handoff_mutex);
                                if (!handoff.empty()) {
                                    got = handoff.front();
                                    handoff.pop_front();
                                }
                            }
                            if (got.p)
                                free_block(got);
                        }
                        continue;
                    }
                    try {
                        char* p = tlptm::atomic(pool, [&](tlptm::tx& tx) {
                            char* m = static_cast<char*>(tx.alloc(n));
                            std::memset(m, tag_of(m), n); // AALO: in place
                            return m;
                        });
                        mine.push_back({p, n});
                        add_live(static_cast<std::int64_t>(block_bytes(n)));
                        ++allocs;
                    } catch (const tlptm::out_of_memory&) {
                        ++(n > d::max_small_size ? span_ooms : ooms);
                    }
                } else if (op < 13) {
                    std::size_t k = rng() % mine.size();
                    free_block(mine[k]);
                    mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
                } else if (op < 15) { // hand a block to another thread
                    std::lock_guard lk(handoff_mutex);
                    handoff.push_back(mine.back());
                    mine.pop_back();
                } else { // free a block another thread allocated
                    block got;
                    {
                        std::lock_guard lk(handoff_mutex);
                        if (!handoff.empty()) {
                            got = handoff.front();
                            handoff.pop_front();
                        }
                    }
                    if (got.p)
                        free_block(got);
                }
            }
        });
    for (auto& t : ts)
        t.join();
    MESSAGE(allocs.load() << " allocations, peak live " << peak_live.load() << " of " << heap_bytes
                          << " heap bytes, " << ooms.load() << " out_of_memory for small blocks, "
                          << span_ooms.load() << " for spans");
    CHECK(ooms.load() == 0);
    // A span needs contiguous free superblocks. With 8 threads each keeping superblocks of up to
    // ~30 size classes (Hoard's local heaps) in a 249-superblock heap, the free ones are
    // occasionally not contiguous even at a quarter live: a rare span may fail (0-4 in 22,000
    // allocations measured; before the fixes of issue 13 there were 4,140 failures of every
    // size). Blocks are never moved, so that is fragmentation, not a lost superblock: every
    // superblock is accounted for below.
    CHECK(span_ooms.load() * 1000 <= allocs.load());
    CHECK(corrupt.load() == 0);
    CHECK(allocs.load() > 1000);

    // What is still live (the threads' blocks and the handed-off ones) is exactly what the
    // allocator counts in use: blocks freed and waiting for I3 are not.
    std::uint64_t expect = root_bytes;
    for (const auto& v : kept)
        for (const block& b : v) {
            CHECK(intact(b));
            expect += block_bytes(b.n);
        }
    for (const block& b : handoff) {
        CHECK(intact(b));
        expect += block_bytes(b.n);
    }
    auto check_figures = [&](const tlptm::heap_stats& h) {
        CHECK(h.bytes_in_use == expect);
        std::uint64_t small = 0;
        for (std::uint32_t c : h.superblocks_per_class)
            small += c;
        CHECK(h.superblocks_free + h.superblocks_large + small + 1 == h.superblocks);
    };
    check_figures(pool.stats().heap);
    pool.close();
    pool = tlptm::pool::open(path, o);
    auto h = pool.stats().heap;
    CHECK(h.bytes_pending_free == 0);
    check_figures(h);
    // Everything freed: the whole heap but the root is free again, for any use.
    for (auto& v : kept)
        for (const block& b : v)
            tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b.p); });
    for (const block& b : handoff)
        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b.p); });
    void* all = tlptm::atomic(
        pool, [&](tlptm::tx& tx) { return tx.alloc((h.superblocks - 1) * d::superblock_bytes); });
    CHECK(all != nullptr);
}
