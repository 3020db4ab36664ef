// The persistent allocator and AALO (DESIGN §7, invariants I3 and I4).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

struct list_node {
    tlptm::p<std::uint64_t> key;
    tlptm::p<list_node*> next;
};

struct alloc_root {
    tlptm::p<list_node*> head;
    tlptm::p<std::uint64_t> count;
    tlptm::p<char*> keep[512];
    tlptm::p<char*> reused;
};

tlptm::pool_options opts(tlptm::log_mode mode = tlptm::log_mode::tlptm,
                         std::size_t size = 16 << 20) {
    auto o = tlptm_test::small_options(mode);
    o.size = size;
    o.max_threads = 6;
    return o;
}

std::uint64_t root_bytes(const tlptm::pool& p) {
    return p.stats().heap.superblocks > 0 ? 64 * 1024 : 0; // root_capacity 64 KiB
}

} // namespace

TEST_CASE("sizes, alignment and distinct blocks; aborted allocations vanish") {
    tlptm_test::temp_path path("allocbasic");
    auto pool = tlptm::pool::create(path, opts());
    auto* r = pool.root<alloc_root>();
    auto before = pool.stats().heap;
    CHECK(before.bytes_in_use == root_bytes(pool));
    std::set<std::uintptr_t> seen;
    std::size_t sizes[] = {1,   8,    15,   16,    17,    100,   128,
                           129, 1000, 4096, 32768, 32769, 65536, 200000};
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        int i = 0;
        for (std::size_t n : sizes) {
            char* b = static_cast<char*>(tx.alloc(n));
            auto a = reinterpret_cast<std::uintptr_t>(b);
            CHECK(a % 16 == 0);
            CHECK(seen.insert(a).second);
            CHECK(b >= static_cast<char*>(pool.base()));
            CHECK(b + n <= static_cast<char*>(pool.base()) + pool.size());
            std::memset(b, 0x5A, n); // plain writes: we own the block (AALO mode)
            tx.write(b, "abc", 3);
            r->keep[i++] = b;
        }
    });
    auto after = pool.stats().heap;
    CHECK(after.bytes_in_use > before.bytes_in_use);
    CHECK(after.superblocks_large >= 1 + 4); // 65536 and 200000 bytes take whole superblocks
    // An aborted transaction's allocations go back.
    auto mid = pool.stats().heap.bytes_in_use;
    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&](tlptm::tx& tx) {
                                      tx.alloc(100);
                                      tx.alloc(100000);
                                      tlptm::make<list_node>();
                                      throw std::runtime_error("abort");
                                  }),
                    std::runtime_error);
    CHECK(pool.stats().heap.bytes_in_use == mid);
    // Free everything: after I3 lets it, the heap is back where it started.
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        for (int i = 0; i < 14; ++i) {
            tx.free(r->keep[i]);
            r->keep[i] = nullptr;
        }
    });
    pool.close();
    pool = tlptm::pool::open(path, opts());
    CHECK(pool.stats().heap.bytes_in_use == before.bytes_in_use);
}

TEST_CASE("make and destroy; bad frees are refused") {
    tlptm_test::temp_path path("makedestroy");
    auto pool = tlptm::pool::create(path, opts());
    auto* r = pool.root<alloc_root>();
    tlptm::atomic(pool, [&] {
        list_node* n = tlptm::make<list_node>(list_node{7, nullptr});
        CHECK(n->key.get() == 7);
        r->head = n;
    });
    CHECK(r->head->key.get() == 7);
    CHECK_THROWS_AS(tlptm::make<list_node>(), tlptm::tx_scope_error);
    std::uint64_t local = 0;
    CHECK_THROWS_AS(tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(&local); }),
                    tlptm::tx_scope_error);
    CHECK_THROWS_AS(
        tlptm::atomic(pool,
                      [&](tlptm::tx& tx) { tx.free(reinterpret_cast<char*>(r->head.get()) + 8); }),
        tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(r); }),
                    tlptm::tx_scope_error); // the root
    tlptm::atomic(pool, [&] {
        tlptm::destroy(r->head.get());
        r->head = nullptr;
    });
    list_node* dangling = nullptr;
    tlptm::atomic(pool, [&] {
        dangling = tlptm::make<list_node>();
        tlptm::destroy(dangling);
    });
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { tlptm::destroy(dangling); }),
                    tlptm::tx_scope_error); // double free
}

namespace {

/// A type larger than make's stack buffer whose constructor throws, on request, once its
/// members are initialised.
struct counted_node {
    using values = std::array<std::uint64_t, 600>; // 4 800 bytes
    static values values_of(std::uint64_t k) {
        values v{};
        for (std::uint64_t i = 0; i < v.size(); ++i)
            v[i] = k * 1000 + i;
        return v;
    }
    tlptm::p<std::uint64_t> key;
    tlptm::p<list_node*> next;
    tlptm::p<values> big;
    counted_node(std::uint64_t k, list_node* n, bool fail) : key(k), next(n), big(values_of(k)) {
        if (fail)
            throw std::runtime_error("constructor failed");
    }
};

} // namespace

TEST_CASE("make builds T in every mode, in place in the AALO modes; a throwing constructor aborts "
          "the transaction and loses nothing") {
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                 tlptm::log_mode::cblo, tlptm::log_mode::tlptm}) {
        CAPTURE(static_cast<int>(mode));
        tlptm_test::temp_path path("make-modes");
        std::vector<counted_node*> made;
        {
            auto pool = tlptm::pool::create(path, opts(mode));
            auto* r = pool.root<alloc_root>();
            const tlptm::stats before = pool.stats();
            for (std::uint64_t k = 1; k <= 5; ++k)
                tlptm::atomic(pool, [&] {
                    auto* n = tlptm::make<counted_node>(k, r->head.get(), false);
                    CHECK(n->key.get() == k);
                    CHECK(n->big.get()[599] == k * 1000 + 599); // the transaction sees it
                    r->keep[k] = reinterpret_cast<char*>(n);
                    r->count += 1;
                });
            const tlptm::stats d = pool.stats() - before;
            const bool aalo = mode == tlptm::log_mode::aalo || mode == tlptm::log_mode::tlptm;
            // AALO: the nodes' bytes go in place, not to the log.
            CHECK((d.aalo_bytes >= 5 * sizeof(counted_node)) == aalo);
            CHECK((d.log_bytes < 5 * 600) == aalo); // else at least a byte a word (cblo)
            // A constructor that throws after its stores: nothing of the attempt stays.
            CHECK_THROWS_AS(tlptm::atomic(pool,
                                          [&] {
                                              r->count += 100;
                                              r->keep[9] = reinterpret_cast<char*>(
                                                  tlptm::make<counted_node>(9, nullptr, true));
                                          }),
                            std::runtime_error);
            CHECK(r->count.get() == 5);
            CHECK(r->keep[9].get() == nullptr);
        }
        auto pool = tlptm::pool::open(path, opts(mode));
        auto* r = pool.root<alloc_root>();
        CHECK(r->count.get() == 5);
        CHECK(r->keep[9].get() == nullptr);
        for (std::uint64_t k = 1; k <= 5; ++k) {
            auto* n = reinterpret_cast<counted_node*>(r->keep[k].get());
            REQUIRE(n != nullptr);
            CHECK(n->key.get() == k);
            CHECK(n->big.get() == counted_node::values_of(k));
        }
        // The block of the failed make was given back: the heap is consistent.
        tlptm::atomic(pool,
                      [&] { tlptm::destroy(reinterpret_cast<counted_node*>(r->keep[1].get())); });
    }
}

TEST_CASE("out_of_memory aborts the transaction, keeps the pool usable and loses nothing") {
    tlptm_test::temp_path path("oom");
    auto pool = tlptm::pool::create(path, opts(tlptm::log_mode::tlptm, 8 << 20));
    auto* r = pool.root<alloc_root>();
    int kept = 0;
    bool full = false;
    while (!full && kept < 512) {
        try {
            tlptm::atomic(pool, [&](tlptm::tx& tx) {
                char* b = static_cast<char*>(tx.alloc(40000)); // one superblock each
                tx.write(b, &kept, sizeof kept);
                r->keep[kept] = b;
            });
            ++kept;
        } catch (const tlptm::out_of_memory& e) {
            full = true;
            CHECK(std::string(e.what()).find("full") != std::string::npos);
        }
    }
    REQUIRE(full);
    CHECK(kept > 10);
    // It is a tlptm::error and so a std::exception (not a std::bad_alloc: a second
    // std::exception base would make catch (const std::exception&) miss it; tests/errors_test).
    CHECK_THROWS_AS(tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.alloc(1u << 30); }),
                    std::exception);
    // A failed transaction with other stores left nothing behind.
    CHECK_THROWS(tlptm::atomic(pool, [&](tlptm::tx& tx) {
        r->count = 99;
        tx.alloc(40000);
    }));
    CHECK(r->count.get() == 0);
    for (int i = 0; i < kept; ++i) {
        int v;
        std::memcpy(&v, r->keep[i].get(), sizeof v);
        CHECK(v == i);
    }
    // Free one; the next allocation gets it back (after I3: the library advances CT itself).
    char* old = r->keep[0];
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        tx.free(r->keep[0].get());
        r->keep[0] = nullptr;
    });
    char* again =
        tlptm::atomic(pool, [&](tlptm::tx& tx) { return static_cast<char*>(tx.alloc(40000)); });
    CHECK(again == old);
}

TEST_CASE("a freed small block is found again when the heap is full (no spurious out_of_memory)") {
    tlptm_test::temp_path path("oomsmall");
    auto pool = tlptm::pool::create(path, opts(tlptm::log_mode::tlptm, 8 << 20));
    auto* r = pool.root<alloc_root>();
    int kept = 0;
    for (; kept < 512; ++kept) {
        try {
            tlptm::atomic(
                pool, [&](tlptm::tx& tx) { r->keep[kept] = static_cast<char*>(tx.alloc(32768)); });
        } catch (const tlptm::out_of_memory&) {
            break;
        }
    }
    REQUIRE(kept < 512);
    char* victim = r->keep[kept / 2];
    tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(victim); });
    // The block sits in a superblock this thread owns, behind I3: the first try must find it.
    char* again =
        tlptm::atomic(pool, [&](tlptm::tx& tx) { return static_cast<char*>(tx.alloc(32768)); });
    CHECK(again == victim);
}

TEST_CASE("many threads allocate and free at random: no overlap, cross-thread frees") {
    tlptm_test::temp_path path("allocthreads");
    auto pool = tlptm::pool::create(path, opts(tlptm::log_mode::tlptm, 64 << 20));
    const int threads = 4;
    std::mutex handoff_mutex;
    std::deque<std::pair<char*, std::size_t>> handoff; // blocks freed by another thread
    std::atomic<int> corrupt{0}, ooms{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 11);
            std::vector<std::pair<char*, std::size_t>> mine;
            auto check = [&](char* b, std::size_t n) {
                auto tag = static_cast<char>(reinterpret_cast<std::uintptr_t>(b) >> 4);
                for (std::size_t i = 0; i < n; i += 61)
                    if (b[i] != tag)
                        ++corrupt;
            };
            for (int i = 0; i < 1500; ++i) {
                auto op = rng() % 10;
                if (op < 5 || mine.empty()) {
                    std::size_t n = rng() % 8 == 0 ? 33000 + rng() % 100000 : 1 + rng() % 3000;
                    try {
                        char* b = tlptm::atomic(pool, [&](tlptm::tx& tx) {
                            char* m = static_cast<char*>(tx.alloc(n));
                            // Tag every byte with the block's address: an overlap shows.
                            std::memset(
                                m, static_cast<char>(reinterpret_cast<std::uintptr_t>(m) >> 4), n);
                            return m;
                        });
                        mine.emplace_back(b, n);
                    } catch (const tlptm::out_of_memory&) {
                        ++ooms;
                    }
                } else if (op < 8) {
                    std::size_t k = rng() % mine.size();
                    auto [b, n] = mine[k];
                    check(b, n);
                    tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b); });
                    mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
                } else if (op == 8) { // hand a block to another thread
                    std::lock_guard lk(handoff_mutex);
                    handoff.push_back(mine.back());
                    mine.pop_back();
                } else { // free a block another thread allocated
                    std::pair<char*, std::size_t> got{nullptr, 0};
                    {
                        std::lock_guard lk(handoff_mutex);
                        if (!handoff.empty()) {
                            got = handoff.front();
                            handoff.pop_front();
                        }
                    }
                    if (got.first) {
                        check(got.first, got.second);
                        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(got.first); });
                    }
                }
            }
            for (auto [b, n] : mine) {
                check(b, n);
                tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b); });
            }
        });
    for (auto& t : ts)
        t.join();
    for (auto [b, n] : handoff)
        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.free(b); });
    CHECK(corrupt.load() == 0);
    CHECK(ooms.load() == 0);
    pool.close(); // everything freed: a reopen rebuilds an empty heap
    pool = tlptm::pool::open(path, opts(tlptm::log_mode::tlptm, 64 << 20));
    CHECK(pool.stats().heap.bytes_in_use == root_bytes(pool));
}

namespace {
template <std::size_t N> struct value_node {
    tlptm::p<std::uint64_t> key;
    tlptm::p<value_node*> next;
    std::uint8_t value[N];
};

template <std::size_t N> std::uint64_t insert_log_bytes(tlptm::log_mode mode) {
    tlptm_test::temp_path path("aalo");
    auto pool = tlptm::pool::create(path, opts(mode));
    auto* r = pool.root<alloc_root>();
    tlptm::atomic(pool, [&] { r->count = 1; }); // start the ring
    auto s0 = pool.stats();
    for (std::uint64_t k = 0; k < 10; ++k)
        tlptm::atomic(pool, [&] {
            auto* n = tlptm::make<value_node<N>>();
            n->key = k;
            std::uint8_t v[N];
            std::memset(v, static_cast<int>(k), N);
            tlptm::current_tx().write(n->value, v, N);
            n->next = reinterpret_cast<value_node<N>*>(r->head.get());
            r->head = reinterpret_cast<list_node*>(n);
            r->count += 1;
        });
    auto d = pool.stats() - s0;
    // The node's bytes are right, however they were written.
    auto* n = reinterpret_cast<value_node<N>*>(r->head.get());
    CHECK(n->key.get() == 9);
    CHECK(n->value[N - 1] == 9);
    if (mode == tlptm::log_mode::aalo || mode == tlptm::log_mode::tlptm)
        CHECK(d.aalo_bytes >= 10 * N);
    return d.log_bytes / 10;
}
} // namespace

TEST_CASE(
    "AALO: an insert's log does not grow with the node size in aalo/tlptm, and does in baseline") {
    auto b8 = insert_log_bytes<8>(tlptm::log_mode::baseline);
    auto b64 = insert_log_bytes<64>(tlptm::log_mode::baseline);
    auto b1k = insert_log_bytes<1024>(tlptm::log_mode::baseline);
    auto a8 = insert_log_bytes<8>(tlptm::log_mode::aalo);
    auto a64 = insert_log_bytes<64>(tlptm::log_mode::aalo);
    auto a1k = insert_log_bytes<1024>(tlptm::log_mode::aalo);
    auto t8 = insert_log_bytes<8>(tlptm::log_mode::tlptm);
    auto t1k = insert_log_bytes<1024>(tlptm::log_mode::tlptm);
    MESSAGE("log bytes per insert: baseline "
            << b8 << " / " << b64 << " / " << b1k << ", aalo " << a8 << " / " << a64 << " / " << a1k
            << ", tlptm " << t8 << " / " << t1k << " (8 / 64 / 1024-byte values)");
    CHECK(b64 > b8);
    CHECK(b1k > b64 + 1000); // every word of the value is logged
    CHECK(a64 == a8);
    // A node of at most cover_blocks_max_bytes is covered by the entry (its range and a CRC,
    // about 10 bytes, instead of a fence of its own); a larger one gets F0 and no such bytes.
    CHECK(a1k < a8);
    CHECK(a8 - a1k <= 16);
    CHECK(t1k < t8);
    CHECK(t8 - t1k <= 16);
    CHECK(a8 < b8);
    CHECK(t8 < a8);
}

TEST_CASE("I3: a reused block is never overwritten by replay of entries older than its free") {
    for (auto mode : {tlptm::log_mode::tlptm, tlptm::log_mode::aalo, tlptm::log_mode::baseline}) {
        CAPTURE(tlptm::to_string(mode));
        tlptm_test::temp_path path("i3");
        auto o = opts(mode, 8 << 20);
        { tlptm::pool::create(path, o); }
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            int rc = 0;
            try {
                auto pool = tlptm::pool::open(path, o);
                auto* r = pool.root<alloc_root>();
                int kept = 0;
                for (;; ++kept) { // fill the heap with one-superblock blocks
                    try {
                        tlptm::atomic(pool, [&](tlptm::tx& tx) {
                            r->keep[kept] = static_cast<char*>(tx.alloc(40000));
                        });
                    } catch (const tlptm::out_of_memory&) {
                        break;
                    }
                }
                char* victim = r->keep[0];
                // t1: a logged store into the block (it was allocated by an earlier transaction).
                tlptm::atomic(pool, [&](tlptm::tx& tx) {
                    tx.store(reinterpret_cast<std::uint64_t*>(victim), std::uint64_t{0x1111});
                });
                // t2: free it.
                tlptm::atomic(pool, [&](tlptm::tx& tx) {
                    tx.free(victim);
                    r->keep[0] = nullptr;
                });
                // t3: the only free memory is the victim: reuse it and write it (AALO in place).
                char* again = tlptm::atomic(pool, [&](tlptm::tx& tx) {
                    char* b = static_cast<char*>(tx.alloc(40000));
                    tx.store(reinterpret_cast<std::uint64_t*>(b), std::uint64_t{0x2222});
                    r->reused = b;
                    return b;
                });
                if (again != victim)
                    rc = 2;
            } catch (...) {
                rc = 3;
            }
            ::_exit(rc); // crash: no close; t1's entry is still in the ring
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE(WIFEXITED(status));
        REQUIRE(WEXITSTATUS(status) == 0);
        auto pool = tlptm::pool::open(path, o);
        auto* r = pool.root<alloc_root>();
        REQUIRE(r->reused.get() != nullptr);
        std::uint64_t v;
        std::memcpy(&v, r->reused.get(), sizeof v);
        CHECK(v == 0x2222); // replaying t1 would have written 0x1111
    }
}

TEST_CASE("crash during alloc/free-heavy transactions: allocated blocks == reachable blocks") {
    for (auto mode : {tlptm::log_mode::tlptm, tlptm::log_mode::baseline}) {
        CAPTURE(tlptm::to_string(mode));
        tlptm_test::temp_path path("alloccrash");
        auto o = opts(mode, 16 << 20);
        { tlptm::pool::create(path, o); }
        std::mt19937_64 rng(77);
        for (int round = 0; round < 15; ++round) {
            pid_t child = ::fork();
            REQUIRE(child >= 0);
            if (child == 0) {
                auto pool = tlptm::pool::open(path, o);
                auto* r = pool.root<alloc_root>();
                std::mt19937_64 g(static_cast<std::uint64_t>(::getpid()));
                for (;;) {
                    tlptm::atomic(pool, [&] {
                        // Push two nodes and pop one (or pop two): allocs and frees in one tx.
                        for (int k = 0; k < 2; ++k) {
                            list_node* n = tlptm::make<list_node>();
                            n->key = g();
                            n->next = r->head.get();
                            r->head = n;
                            r->count += 1;
                        }
                        int pops = g() % 2 ? 1 : 3;
                        for (int k = 0; k < pops && r->head.get() != nullptr; ++k) {
                            list_node* h = r->head;
                            r->head = h->next.get();
                            tlptm::destroy(h);
                            r->count -= 1;
                        }
                    });
                }
            }
            ::usleep(static_cast<useconds_t>(1000 + rng() % 20000));
            ::kill(child, SIGKILL);
            int status = 0;
            ::waitpid(child, &status, 0);
            auto pool = tlptm::pool::open(path, o);
            auto* r = pool.root<alloc_root>();
            std::set<list_node*> reachable;
            for (list_node* n = r->head; n != nullptr; n = n->next)
                REQUIRE(reachable.insert(n).second);
            CHECK(reachable.size() == r->count.get());
            auto h = pool.stats().heap;
            // No leak and no double allocation: exactly the reachable nodes are in use.
            CHECK(h.bytes_in_use == root_bytes(pool) + 16 * reachable.size());
            // A full allocate/free cycle still works.
            tlptm::atomic(pool, [&] {
                auto* n = tlptm::make<list_node>();
                tlptm::destroy(n);
            });
        }
    }
}

TEST_CASE("in_aalo: blocks of a transaction that allocates many are all found, freed ones not") {
    // The lookup scans the newest blocks and binary-searches the older ones (a sorted index);
    // checked against a plain scan over random, non-overlapping blocks in random order, with
    // blocks dropped (freed by the transaction) on the way.
    std::mt19937_64 rng(7);
    tlptm::detail::alloc_tx_state a;
    std::vector<tlptm::detail::alloc_tx_state::range> live;
    std::vector<std::uint64_t> slots(400);
    for (std::size_t k = 0; k < slots.size(); ++k)
        slots[k] = 4096 + 64 * k;
    std::shuffle(slots.begin(), slots.end(), rng);
    auto brute = [&](std::uint64_t off, std::uint64_t n) {
        return std::any_of(live.begin(), live.end(), [&](const auto& r) {
            return off >= r.offset && off + n <= r.offset + r.size;
        });
    };
    std::size_t checked = 0, found = 0;
    for (std::size_t k = 0; k < slots.size(); ++k) {
        std::uint64_t size = 16 + 16 * (rng() % 4); // 16..64 bytes of a 64-byte slot
        a.aalo.push_back({slots[k], size});
        a.allocated.push_back({slots[k], size});
        live.push_back({slots[k], size});
        if (k % 37 == 36) { // the transaction frees one of its blocks
            std::size_t victim = rng() % live.size();
            a.drop_block(live[victim].offset);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
        }
        for (int q = 0; q < 20; ++q) {
            std::uint64_t off = 4096 - 64 + rng() % (64 * (slots.size() + 2));
            std::uint64_t n = 1 + rng() % 24;
            bool want = brute(off, n);
            REQUIRE(a.in_aalo(off, n) == want);
            ++checked;
            found += want;
        }
    }
    CHECK(a.aalo.size() == live.size());
    CHECK(a.allocated.size() == live.size());
    CHECK(found > checked / 10); // both answers were exercised
    CHECK(found < checked);
    a.clear();
    CHECK_FALSE(a.in_aalo(slots[0], 8));
}

TEST_CASE("AALO: a transaction allocating hundreds of nodes writes the older ones in place") {
    tlptm_test::temp_path path("aalo-many");
    auto pool = tlptm::pool::create(path, opts(tlptm::log_mode::tlptm));
    auto* r = pool.root<alloc_root>();
    tlptm::atomic(pool, [&] { r->count = 1; }); // start the ring
    constexpr int n = 500;
    auto s0 = pool.stats();
    tlptm::atomic(pool, [&] {
        std::vector<list_node*> nodes;
        for (int k = 0; k < n; ++k) {
            nodes.push_back(tlptm::make<list_node>());
            if (k % 50 == 49) // some are freed by the transaction that made them
                tlptm::destroy(nodes[static_cast<std::size_t>(k - 25)]);
        }
        for (int k = 0; k < n; ++k) { // back to the older ones: stores in place, not logged
            if (k % 50 == 24)
                continue;
            list_node* x = nodes[static_cast<std::size_t>(k)];
            x->key = static_cast<std::uint64_t>(k);
            x->next = r->head.get();
            r->head = x;
        }
        r->count = n;
    });
    auto d = pool.stats() - s0;
    CHECK(d.aalo_bytes >= 16 * (n - n / 50));
    // Logged: the head, the count and the allocator's words, not the nodes (500 x 16 bytes).
    CHECK(d.log_bytes < 2000);
    std::uint64_t seen = 0;
    for (list_node* x = r->head; x != nullptr; x = x->next)
        ++seen;
    CHECK(seen == n - n / 50);
}

namespace {

/// Pages of [p, p + n) in the page cache (a pool file's pages exist once first written).
std::size_t resident_pages(const void* p, std::size_t n) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto a = reinterpret_cast<std::uintptr_t>(p) / page * page;
    const std::size_t len = reinterpret_cast<std::uintptr_t>(p) + n - a;
    std::vector<unsigned char> in((len + page - 1) / page);
    REQUIRE(::mincore(reinterpret_cast<void*>(a), len, in.data()) == 0);
    return static_cast<std::size_t>(
        std::count_if(in.begin(), in.end(), [](unsigned char v) { return (v & 1) != 0; }));
}

} // namespace

TEST_CASE("pool_options::populate maps a ring at its first commit and a superblock when taken") {
    namespace d = tlptm::detail;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    for (bool populate : {false, true}) {
        CAPTURE(populate);
        tlptm_test::temp_path path("populate");
        auto o = opts();
        o.populate = populate;
        {
            auto pool = tlptm::pool::create(path, o);
            d::pool_state& st = pool.state();
            if (populate && ::madvise(st.base, page, MADV_POPULATE_WRITE) != 0) {
                MESSAGE("the kernel has no MADV_POPULATE_WRITE (Linux < 5.14): nothing to check");
                return;
            }
            auto* r = pool.root<alloc_root>();
            list_node* n = tlptm::atomic(pool, [&] {
                list_node* k = tlptm::make<list_node>(list_node{7, nullptr});
                r->head = k;
                return k;
            });
            // The ring of the slot that committed: the whole ring, or the pages the commit
            // wrote (its header and the entry).
            const d::thread_slot* used = nullptr;
            for (const auto& s : st.slots)
                if (s->attached)
                    used = s.get();
            REQUIRE(used != nullptr);
            const std::size_t ring_pages = used->ring.size / page;
            REQUIRE(ring_pages > 4);
            if (populate)
                CHECK(resident_pages(used->ring.base, used->ring.size) == ring_pages);
            else
                CHECK(resident_pages(used->ring.base, used->ring.size) <= 2);
            // The superblock the node came from (fresh: the pool had no block of its class).
            const auto i =
                static_cast<std::uint32_t>((st.offset_of(n) - st.heap_begin) / d::superblock_bytes);
            const std::uint8_t* sb = st.base + st.allocator.sb_offset(i);
            if (populate)
                CHECK(resident_pages(sb, d::superblock_bytes) == d::superblock_bytes / page);
            else
                CHECK(resident_pages(sb, d::superblock_bytes) <= 2);
            // Populating never changes what the pages hold: bytes of a later block of that
            // superblock, written raw, survive a second populate of the superblock.
            auto* tail = const_cast<std::uint8_t*>(sb) + d::superblock_bytes - 4096;
            for (std::size_t k = 0; k < 4096; ++k)
                tail[k] = static_cast<std::uint8_t>(k * 7 + 1);
            st.populate(sb, d::superblock_bytes);
            bool same = true;
            for (std::size_t k = 0; k < 4096; ++k)
                same = same && tail[k] == static_cast<std::uint8_t>(k * 7 + 1);
            CHECK(same);
            std::memset(tail, 0, 4096); // free blocks hold no promise, but leave it as it was
        }
        // A reopening populates the ring again (after recovery): the committed data is kept.
        auto pool = tlptm::pool::open(path, o);
        auto* r = pool.root<alloc_root>();
        tlptm::atomic(pool, [&] { r->count = r->count + 1; });
        REQUIRE(r->head.get() != nullptr);
        CHECK(r->head->key.get() == 7);
        CHECK(r->count.get() == 1);
    }
}

TEST_CASE("pool_options::populate_ahead readies the next free superblocks, reading only") {
    namespace d = tlptm::detail;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    tlptm_test::temp_path path("ahead");
    auto o = opts(tlptm::log_mode::tlptm, 64 << 20);
    o.populate = true;
    o.populate_ahead = true;
    auto pool = tlptm::pool::create(path, o);
    d::pool_state& st = pool.state();
    if (::madvise(st.base, page, MADV_POPULATE_WRITE) != 0) {
        MESSAGE("the kernel has no MADV_POPULATE_WRITE (Linux < 5.14): nothing to check");
        return;
    }
#if defined(TLPTM_TSAN)
    CHECK_FALSE(st.populate_ahead); // never in ThreadSanitizer builds
    return;
#endif
    REQUIRE(st.populate_ahead);
    auto* r = pool.root<alloc_root>();
    auto push = [&](std::uint64_t key) {
        tlptm::atomic(pool, [&] {
            list_node* k = tlptm::make<list_node>(list_node{key, r->head.get()});
            r->head = k;
        });
    };
    push(1); // the first small block: a fresh superblock, and the thread's first job
    // The superblocks the allocator hands out next. Raw bytes in the last page of each stand
    // for what a free superblock may hold; the job below must leave them as they are.
    std::uint32_t next[d::pool_state::superblocks_ahead];
    const std::size_t n = st.allocator.next_free(next, d::pool_state::superblocks_ahead);
    REQUIRE(n == d::pool_state::superblocks_ahead);
    auto last_page = [&](std::uint32_t i) {
        return st.base + st.allocator.sb_offset(i) + d::superblock_bytes - page;
    };
    // The thread may have readied them already; the pattern goes in either way.
    for (std::size_t k = 0; k < n; ++k)
        for (std::size_t b = 0; b < page; ++b)
            last_page(next[k])[b] = static_cast<std::uint8_t>(b * 13 + k + 1);
    st.ready_next_superblocks(); // what the thread runs, here synchronously
    for (std::size_t k = 0; k < n; ++k) {
        CAPTURE(k);
        CHECK(st.ahead_ready(next[k]));
        CHECK(resident_pages(st.base + st.allocator.sb_offset(next[k]), d::superblock_bytes) ==
              d::superblock_bytes / page);
        bool same = true;
        for (std::size_t b = 0; b < page; ++b)
            same = same && last_page(next[k])[b] == static_cast<std::uint8_t>(b * 13 + k + 1);
        CHECK(same);
        std::memset(last_page(next[k]), 0, page); // leave the free superblocks as they were
    }
    // The thread runs a job after each superblock taken fresh: once the allocator has gone
    // through three more, the superblocks it takes next are ready (after the last job).
    const std::size_t per_sb =
        d::superblock_bytes / d::size_classes[d::class_of(sizeof(list_node))];
    const std::uint64_t jobs = st.ahead.jobs_run();
    for (std::uint64_t k = 0; k < 3 * per_sb; ++k)
        push(k + 2);
    auto all_next_ready = [&] {
        std::uint32_t now[d::pool_state::superblocks_ahead];
        const std::size_t m = st.allocator.next_free(now, d::pool_state::superblocks_ahead);
        return m == d::pool_state::superblocks_ahead &&
               std::all_of(now, now + m, [&](std::uint32_t i) { return st.ahead_ready(i); });
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!all_next_ready() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(all_next_ready());
    CHECK(st.ahead.jobs_run() > jobs);

    // What was committed is all there after a reopening (the thread stops with the pool).
    pool.close();
    auto again = tlptm::pool::open(path, o);
    auto* r2 = again.root<alloc_root>();
    std::uint64_t count = 0;
    tlptm::atomic(again, [&] {
        count = 0;
        for (list_node* k = r2->head.get(); k != nullptr; k = k->next.get())
            ++count;
    });
    CHECK(count == 3 * per_sb + 1);
}

TEST_CASE(
    "the page-ahead thread is absent in a forked child, which neither uses nor waits for it") {
    namespace d = tlptm::detail;
    std::atomic<int> runs{0};
    auto ahead = std::make_unique<d::page_ahead>();
    REQUIRE(ahead->poke([&] { runs.fetch_add(1); }));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ahead->jobs_run() < 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(ahead->jobs_run() == 1); // the thread now waits on its condition variable
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // A poke is refused, and destroying the object returns (the copied condition variable
        // counts the parent's thread as a waiter: destroying it would wait forever).
        const bool refused = !ahead->poke([] {});
        ahead.reset();
        ::_exit(refused ? 0 : 3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    // The parent's thread goes on: another poke runs the job again, and stop() joins it.
    REQUIRE(ahead->poke([] {}));
    while (ahead->jobs_run() < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(ahead->jobs_run() == 2);
    CHECK(runs.load() == 2); // the first job given is the one kept
    ahead.reset();
}

TEST_CASE("the page-ahead thread runs on the CPUs the process started with, not its creator's") {
    namespace d = tlptm::detail;
    // The capture: this test program pins no thread before this point.
    cpu_set_t now;
    REQUIRE(::sched_getaffinity(0, sizeof now, &now) == 0);
    CHECK(CPU_EQUAL(&now, &d::startup_cpus));

    // Pokes `ahead` and reads its thread's affinity; CHECKs only (it also runs on a thread of
    // the test's own, where a REQUIRE's exception would end the program).
    auto runs_on = [](d::page_ahead& ahead, cpu_set_t& cpus) {
        CHECK(ahead.poke([] {}));
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (ahead.jobs_run() < 1 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        CHECK(ahead.jobs_run() == 1); // the thread has set its affinity before its first job
        const bool read = ahead.thread_cpus(cpus);
        CHECK(read);
        return read;
    };
    std::vector<int> mine;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &now))
            mine.push_back(cpu);
    REQUIRE_FALSE(mine.empty());
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(mine.back(), &one);
    {
        // Given one CPU, it runs there.
        d::page_ahead ahead(one);
        cpu_set_t cpus;
        if (runs_on(ahead, cpus))
            CHECK(CPU_EQUAL(&cpus, &one));
    }
    if (mine.size() < 2) {
        MESSAGE("one CPU allowed: a pinned creator cannot be told from the process's CPUs");
        return;
    }
    // Started by a thread pinned to one CPU (as the workloads' inserting threads are), it runs
    // on every CPU the process started with, and no more.
    cpu_set_t pinned;
    CPU_ZERO(&pinned);
    CPU_SET(mine.front(), &pinned);
    std::thread creator([&] {
        const bool set = ::pthread_setaffinity_np(::pthread_self(), sizeof pinned, &pinned) == 0;
        CHECK(set);
        d::page_ahead ahead;
        cpu_set_t cpus;
        if (set && runs_on(ahead, cpus)) {
            CHECK(CPU_EQUAL(&cpus, &d::startup_cpus));
            CHECK_FALSE(CPU_EQUAL(&cpus, &pinned));
        }
    });
    creator.join();

    // A pool counts those CPUs for its "every CPU busy" rule.
    tlptm_test::temp_path path("ahead_cpus");
    auto o = opts(tlptm::log_mode::tlptm, 16 << 20);
    o.populate = true;
    o.populate_ahead = true;
    auto pool = tlptm::pool::create(path, o);
    if (pool.state().populate_ahead)
        CHECK(pool.state().ahead.cpu_count() == mine.size());
}

TEST_CASE("pool::prepare_thread attaches the thread's slot and maps its ring, keeping its bytes") {
    namespace d = tlptm::detail;
    tlptm_test::temp_path path("prepare");
    auto o = opts();
    o.populate = false; // the pages it maps are then its own doing
    {
        auto pool = tlptm::pool::create(path, o);
        auto* r = pool.root<alloc_root>();
        for (int k = 0; k < 50; ++k) // entries in a ring, for the reopening below to keep
            tlptm::atomic(pool, [&] { r->count = r->count + 1; });
    }
    auto pool = tlptm::pool::open(path, o);
    d::pool_state& st = pool.state();
    auto* r = pool.root<alloc_root>();
    // Every ring's bytes but the header line (the generation a slot starts when it attaches).
    auto bodies = [&] {
        std::vector<std::vector<std::uint8_t>> b;
        for (const auto& s : st.slots)
            b.emplace_back(s->ring.base + 64, s->ring.base + s->ring.size);
        return b;
    };
    const auto before = bodies();
    for (const auto& s : st.slots)
        REQUIRE_FALSE(s->attached);

    pool.prepare_thread();
    const d::thread_slot* mine = nullptr;
    for (const auto& s : st.slots)
        if (s->attached) {
            CHECK(mine == nullptr); // one slot only
            mine = s.get();
        }
    REQUIRE(mine != nullptr);
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    CHECK(resident_pages(mine->ring.base, mine->ring.size) == mine->ring.size / page);
    CHECK(bodies() == before);
    pool.prepare_thread(); // idempotent
    CHECK(bodies() == before);

    // The thread's transactions use that slot, and what they commit is kept.
    tlptm::atomic(pool, [&] { r->count = r->count + 1; });
    CHECK(mine->last_ts > 0);
    std::size_t attached = 0;
    for (const auto& s : st.slots)
        attached += s->attached ? 1 : 0;
    CHECK(attached == 1);
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { pool.prepare_thread(); }), tlptm::tx_scope_error);
    pool.close();
    auto again = tlptm::pool::open(path, o);
    CHECK(again.root<alloc_root>()->count.get() == 51);
}
