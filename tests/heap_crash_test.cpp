// Crashes and races around the lazy heap rebuild (issue 17) and the reuse of emptied
// superblocks (issue 13, item 1):
// - threads free and allocate in arenas that are scanned only when first needed, while another
//   thread asks for the figures (which scans the rest): no block is handed out twice, and the
//   figures are exact;
// - the same, killed (SIGKILL) at random instants: after recovery the blocks in use are exactly
//   the reachable ones, for the lazy rebuild and for a full one;
// - the crash-image sweep of tests/harness over transactions that take the first superblocks of
//   an arena (the summary word), empty them and turn them into a span and back.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/scenarios.hpp"
#include "harness/sweep.hpp"
#include "test_util.hpp"

namespace {

namespace d = tlptm::detail;
using namespace tlptm_harness;

constexpr std::uint64_t root_bytes = 64 * 1024;
constexpr int lists = 4;

/// A block of a list: its requested size and a fill byte over the rest of it.
struct item {
    tlptm::p<item*> next;
    tlptm::p<std::uint64_t> size;
    tlptm::p<std::uint64_t> fill;
};

struct churn_root {
    tlptm::p<item*> head[lists];
    tlptm::p<std::uint64_t> count[lists];
};

std::uint64_t block_bytes(std::size_t n) {
    if (n <= d::max_small_size)
        return d::size_classes[d::class_of(n)];
    return (n + d::superblock_bytes - 1) / d::superblock_bytes * d::superblock_bytes;
}

tlptm::pool_options opts() {
    tlptm::pool_options o;
    o.size = std::size_t{64} << 20; // four arenas
    o.max_threads = 8;
    o.log_capacity = std::size_t{64} << 10;
    o.durability = tlptm::durability::emulate_pmem;
    return o;
}

std::size_t random_size(std::mt19937_64& rng) {
    return rng() % 6 == 0 ? 65537 + rng() % 130000 : sizeof(item) + rng() % 3000;
}

/// Pushes a new item of random size on list l (in the running transaction).
void push(churn_root* rt, int l, std::mt19937_64& rng) {
    std::size_t n = random_size(rng);
    auto* it = static_cast<item*>(tlptm::current_tx().alloc(n));
    auto fill = static_cast<std::uint8_t>(reinterpret_cast<std::uintptr_t>(it) >> 4);
    std::memset(reinterpret_cast<char*>(it) + sizeof(item), fill, n - sizeof(item));
    it->size = n;
    it->fill = fill;
    it->next = rt->head[l].get();
    rt->head[l] = it;
    rt->count[l] += 1;
}

/// Creates the pool and fills every arena: about half of the heap in use, in all four lists.
void prepare(const std::string& path) {
    auto pool = tlptm::pool::create(path, opts());
    auto* rt = pool.root<churn_root>();
    std::mt19937_64 rng(99);
    const std::uint64_t heap = pool.stats().heap.superblocks * d::superblock_bytes;
    while (pool.stats().heap.bytes_in_use < heap / 2)
        tlptm::atomic(pool, [&] {
            for (int l = 0; l < lists; ++l)
                push(rt, l, rng);
        });
}

/// Walks the lists without trusting them; returns the bytes the allocator must count in use, or
/// sets `problem`.
std::uint64_t reachable(tlptm::pool& pool, std::string& problem) {
    auto* rt = pool.root<churn_root>();
    std::uint64_t bytes = root_bytes;
    std::map<std::uintptr_t, std::uintptr_t> ranges;
    for (int l = 0; l < lists; ++l) {
        std::uint64_t n = 0;
        for (item* it = rt->head[l]; it != nullptr; it = it->next.get()) {
            std::string why;
            std::uint64_t size = allocated_block(pool, it, why);
            if (size == 0) {
                problem = "list " + std::to_string(l) + ": " + why;
                return 0;
            }
            if (size != block_bytes(it->size.get())) {
                problem = "an item's block has the wrong size";
                return 0;
            }
            auto a = reinterpret_cast<std::uintptr_t>(it);
            auto next = ranges.lower_bound(a);
            if ((next != ranges.end() && next->first < a + size) ||
                (next != ranges.begin() && std::prev(next)->second > a)) {
                problem = "two items overlap";
                return 0;
            }
            ranges[a] = a + size;
            const auto* body = reinterpret_cast<const std::uint8_t*>(it);
            for (std::size_t k = sizeof(item); k < it->size.get(); k += 97)
                if (body[k] != it->fill.get()) {
                    problem = "an item's contents were overwritten";
                    return 0;
                }
            bytes += size;
            ++n;
        }
        if (n != rt->count[l].get()) {
            problem = "list " + std::to_string(l) + " has " + std::to_string(n) +
                      " items, its count says " + std::to_string(rt->count[l].get());
            return 0;
        }
    }
    return bytes;
}

/// The figures of a full, eager rebuild (every arena read, the summary checked).
tlptm::heap_stats full_rebuild(tlptm::pool& pool) {
    d::pool_state& st = pool.state();
    d::heap h;
    h.rebuild(st.base, *st.header, st.path);
    h.scan_all();
    return h.figures();
}

/// Threads pop (free) and push (allocate) items on their lists, so that the first frees and
/// allocations after opening scan arenas; one more thread keeps asking for the figures.
/// Runs until `stop` or `ops` transactions per thread.
void churn(tlptm::pool& pool, int ops, std::atomic<bool>& stop, std::uint64_t seed) {
    auto* rt = pool.root<churn_root>();
    std::vector<std::thread> ts;
    for (int l = 0; l < lists; ++l)
        ts.emplace_back([&, l] {
            std::mt19937_64 rng(seed * 31 + static_cast<std::uint64_t>(l));
            for (int i = 0; i < ops && !stop.load(); ++i) {
                try {
                    tlptm::atomic(pool, [&] {
                        int pops = static_cast<int>(rng() % 3);
                        for (int k = 0; k < pops && rt->head[l].get() != nullptr; ++k) {
                            item* it = rt->head[l];
                            rt->head[l] = it->next.get();
                            rt->count[l] -= 1;
                            tlptm::destroy(it);
                        }
                        push(rt, l, rng);
                    });
                } catch (const tlptm::out_of_memory&) {
                    // The pool is half full and blocks are large: fine, pop more next time.
                }
            }
        });
    ts.emplace_back([&] {
        while (!stop.load()) {
            (void)pool.stats();
            std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
    });
    for (int l = 0; l < lists; ++l)
        ts[static_cast<std::size_t>(l)].join();
    stop = true;
    ts.back().join();
}

} // namespace

TEST_CASE("allocations and frees race the lazy scans of the arenas and the figures") {
    tlptm_test::temp_path path("heap-race");
    prepare(path);
    for (std::uint64_t round = 0; round < 3; ++round) {
        auto pool = tlptm::pool::open(path, opts());
        std::atomic<bool> stop{false};
        churn(pool, 300, stop, round);
        std::string problem;
        std::uint64_t bytes = reachable(pool, problem);
        REQUIRE_MESSAGE(problem.empty(), problem);
        CHECK(pool.stats().heap.bytes_in_use == bytes);
        CHECK(full_rebuild(pool).bytes_in_use == bytes); // the persistent bitmaps
        pool.close();
        pool = tlptm::pool::open(path, opts());
        CHECK(pool.stats().heap.bytes_in_use == bytes);
        CHECK(full_rebuild(pool).bytes_in_use == bytes);
    }
}

TEST_CASE("killed while threads scan arenas lazily: the blocks in use are the reachable ones") {
    tlptm_test::temp_path path("heap-kill");
    prepare(path);
    std::mt19937_64 rng(5);
    for (int round = 0; round < 8; ++round) {
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            auto pool = tlptm::pool::open(path, opts());
            std::atomic<bool> stop{false};
            churn(pool, 1 << 30, stop, static_cast<std::uint64_t>(round) + 100);
            ::_exit(0);
        }
        ::usleep(static_cast<useconds_t>(2000 + rng() % 40000));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        CHECK(WIFSIGNALED(status));
        auto pool = tlptm::pool::open(path, opts());
        std::string problem;
        std::uint64_t bytes = reachable(pool, problem);
        REQUIRE_MESSAGE(problem.empty(), problem);
        CHECK(pool.stats().heap.bytes_in_use == bytes);
        CHECK(full_rebuild(pool).bytes_in_use == bytes);
    }
}

namespace {

/// A root for the sweep: six small blocks or one span.
struct reuse_root {
    tlptm::p<std::uint64_t*> small[6];
    tlptm::p<std::uint64_t*> span;
    tlptm::p<std::uint64_t> phase;
};

observation observe_reuse(tlptm::pool& p) {
    observation o;
    auto* rt = p.root<reuse_root>();
    o.reachable_bytes = tlptm_harness::root_bytes(p);
    std::uint64_t n = 0, sum = 0;
    auto visit = [&](std::uint64_t* b) {
        std::string why;
        std::uint64_t size = allocated_block(p, b, why);
        if (size == 0) {
            o.problem = why;
            return;
        }
        o.reachable_bytes += size;
        sum += *b;
    };
    for (auto& s : rt->small)
        if (std::uint64_t* b = s.get()) {
            visit(b);
            ++n;
        }
    bool span = rt->span.get() != nullptr;
    if (span)
        visit(rt->span.get());
    o.state = {rt->phase.get(), n, span ? 1u : 0u, sum};
    return o;
}

/// The heap of the harness's tiny pool is the root and three superblocks, in one arena. Six
/// blocks of 32 KiB take the three (the first takes the arena: its summary word is written);
/// freed, the three are emptied small superblocks; a span of three takes them; freed, blocks
/// of another class take them again.
scenario emptied_to_span(tlptm::log_mode mode) {
    scenario s;
    s.name = "emptied-to-span/" + std::string(tlptm::to_string(mode));
    s.options = scenarios::tiny_pool(mode);
    s.setup = [](tlptm::pool& p) { p.root<reuse_root>(); };
    s.observe = observe_reuse;
    s.run = [](tlptm::pool& p, recorder& rec) {
        auto* rt = p.root<reuse_root>();
        auto fill = [&](std::size_t bytes, std::uint64_t first, std::uint64_t phase) {
            rec.atomic(
                p,
                [&](tlptm::tx& tx) {
                    for (std::uint64_t k = 0; k < 6; ++k) {
                        auto* b = static_cast<std::uint64_t*>(tx.alloc(bytes));
                        tx.store(b, first + k);
                        rt->small[k] = b;
                    }
                    rt->phase = phase;
                },
                [=](digest& dg) {
                    dg = {phase, 6, 0, 6 * first + 15};
                });
        };
        auto empty = [&](std::uint64_t phase) {
            rec.atomic(
                p,
                [&](tlptm::tx& tx) {
                    for (auto& b : rt->small) {
                        tx.free(b.get());
                        b = nullptr;
                    }
                    rt->phase = phase;
                },
                [=](digest& dg) {
                    dg = {phase, 0, 0, 0};
                });
        };
        fill(32768, 100, 1);
        empty(2);
        rec.atomic(
            p,
            [&](tlptm::tx& tx) {
                auto* b = static_cast<std::uint64_t*>(tx.alloc(3 * d::superblock_bytes - 64));
                tx.store(b, std::uint64_t{7777});
                rt->span = b;
                rt->phase = 3;
            },
            [](digest& dg) {
                dg = {3, 0, 1, 7777};
            });
        rec.atomic(
            p,
            [&](tlptm::tx& tx) {
                tx.free(rt->span.get());
                rt->span = nullptr;
                rt->phase = 4;
            },
            [](digest& dg) {
                dg = {4, 0, 0, 0};
            });
        fill(20000, 200, 5); // 20480-byte blocks: three per superblock
        empty(6);
    };
    return s;
}

} // namespace

TEST_CASE("crash images: superblocks emptied of small blocks become a span and small again") {
    sweep_config cfg;
    cfg.images = {1024, 48, 48, 12, 1};
    cfg.max_recoveries = 1500;
    cfg.max_new_per_point = 16;
    for (auto mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        sweep_result r = run_sweep(emptied_to_span(mode), cfg);
        MESSAGE(r.name << ": " << r.transactions << " transactions, " << r.crash_points
                       << " crash points, " << r.image_checks << " images checked, " << r.recoveries
                       << " recovered, " << r.violations << " violations");
        for (const auto& m : r.messages)
            MESSAGE(m);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.transactions == 6);
        CHECK(r.crash_points > 0);
        CHECK(r.recoveries > 0);
    }
}
