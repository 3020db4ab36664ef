// Concurrency control: many threads commit at once (DESIGN §6, invariants I1, I2, I6).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

constexpr int accounts = 64;
constexpr std::int64_t initial_balance = 1000;

struct bank {
    tlptm::p<std::int64_t> balance[accounts];
    tlptm::p<std::uint64_t> done[16]; // transfers committed per thread
};

tlptm::pool_options concurrent_options(std::uint32_t threads) {
    auto o = tlptm_test::small_options();
    o.max_threads = threads + 2;
    return o;
}

void fund(tlptm::pool& pool, bank* b) {
    tlptm::atomic(pool, [&] {
        for (auto& a : b->balance)
            a = initial_balance;
    });
}

/// One transfer: moves a random amount between two random accounts if the source can pay.
void transfer(tlptm::pool& pool, bank* b, std::mt19937_64& rng, int thread) {
    int from = static_cast<int>(rng() % accounts), to = static_cast<int>(rng() % accounts);
    std::int64_t amount = static_cast<std::int64_t>(rng() % 50);
    tlptm::atomic(pool, [&] {
        if (b->balance[from].get() >= amount) {
            b->balance[from] -= amount;
            b->balance[to] += amount;
        }
        b->done[thread] += 1;
    });
}

struct audit_result {
    std::int64_t sum;
    bool negative;
};

audit_result audit(tlptm::pool& pool, bank* b) {
    return tlptm::atomic(pool, [&] {
        audit_result r{0, false};
        for (auto& a : b->balance) {
            std::int64_t v = a.get();
            r.sum += v;
            r.negative |= v < 0;
        }
        return r;
    });
}

} // namespace

TEST_CASE("bank transfers with 2, 4 and 8 threads keep the sum, audited live") {
    for (int threads : {2, 4, 8}) {
        CAPTURE(threads);
        tlptm_test::temp_path path("bank");
        auto pool =
            tlptm::pool::create(path, concurrent_options(static_cast<std::uint32_t>(threads) + 1));
        auto* b = pool.root<bank>();
        fund(pool, b);
        std::atomic<bool> stop{false};
        std::atomic<long> bad_audits{0}, audits{0};
        std::thread auditor([&] {
            while (!stop.load()) {
                audit_result r = audit(pool, b);
                if (r.sum != accounts * initial_balance || r.negative)
                    ++bad_audits;
                ++audits;
            }
        });
        std::vector<std::thread> ts;
        const int per_thread = 3000;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 77 + 1);
                for (int i = 0; i < per_thread; ++i)
                    transfer(pool, b, rng, t);
            });
        for (auto& t : ts)
            t.join();
        stop = true;
        auditor.join();
        CHECK(bad_audits.load() == 0);
        CHECK(audits.load() > 0);
        audit_result r = audit(pool, b);
        CHECK(r.sum == accounts * initial_balance);
        CHECK_FALSE(r.negative);
        for (int t = 0; t < threads; ++t)
            CHECK(b->done[t].get() == per_thread);
        auto st = pool.stats();
        CHECK(st.tx_committed == static_cast<std::uint64_t>(threads * per_thread) + 1);
        MESSAGE("threads " << threads << ": " << st.tx_committed << " commits, " << st.tx_aborted
                           << " aborts, " << st.tx_read_only << " read-only audits");
    }
}

TEST_CASE("bank transfers survive SIGKILL of a multi-threaded process at random moments") {
    tlptm_test::temp_path path("bankcrash");
    const int threads = 3;
    {
        auto pool = tlptm::pool::create(path, concurrent_options(threads));
        fund(pool, pool.root<bank>());
    }
    std::mt19937_64 rng(2024);
    std::vector<std::uint64_t> reported(threads, 0);
    for (int round = 0; round < 25; ++round) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::close(fds[0]);
            auto pool = tlptm::pool::open(path, concurrent_options(threads));
            auto* b = pool.root<bank>();
            std::vector<std::thread> ts;
            for (int t = 0; t < threads; ++t)
                ts.emplace_back([&, t] {
                    std::mt19937_64 r(static_cast<std::uint64_t>(::getpid()) * 31 +
                                      static_cast<std::uint64_t>(t));
                    for (;;) {
                        transfer(pool, b, r, t);
                        // Report (thread, done) after atomic() returned: it must survive.
                        std::uint64_t msg[2] = {static_cast<std::uint64_t>(t), b->done[t].get()};
                        if (::write(fds[1], msg, sizeof msg) != sizeof msg)
                            ::_exit(3);
                    }
                });
            for (auto& t : ts)
                t.join();
            ::_exit(0);
        }
        ::close(fds[1]);
        ::usleep(static_cast<useconds_t>(2000 + rng() % 30000));
        ::kill(child, SIGKILL);
        std::uint64_t msg[2];
        while (::read(fds[0], msg, sizeof msg) == sizeof msg)
            if (msg[1] > reported[msg[0]])
                reported[msg[0]] = msg[1];
        ::close(fds[0]);
        int status = 0;
        ::waitpid(child, &status, 0);
        auto pool = tlptm::pool::open(path, concurrent_options(threads));
        auto* b = pool.root<bank>();
        audit_result r = audit(pool, b);
        CHECK(r.sum == accounts * initial_balance);
        CHECK_FALSE(r.negative);
        for (int t = 0; t < threads; ++t) {
            CHECK(b->done[t].get() >= reported[t]); // every reported commit is present
            reported[t] = b->done[t].get();
        }
    }
}

namespace {

constexpr int set_threads = 3;
constexpr int nodes_per_thread = 256;

struct set_node {
    tlptm::p<std::uint64_t> key;
    tlptm::p<set_node*> next;
};
struct set_root {
    tlptm::p<set_node*> head;
    set_node nodes[set_threads * nodes_per_thread];
};

/// Sorted linked-list set; returns true if the set changed.
bool set_insert(tlptm::pool& pool, set_root* r, std::uint64_t key, set_node* fresh) {
    return tlptm::atomic(pool, [&] {
        tlptm::p<set_node*>* link = &r->head;
        set_node* cur = *link;
        while (cur != nullptr && cur->key < key) {
            link = &cur->next;
            cur = *link;
        }
        if (cur != nullptr && cur->key == key)
            return false;
        fresh->key = key;
        fresh->next = cur;
        *link = fresh;
        return true;
    });
}

set_node* set_erase(tlptm::pool& pool, set_root* r, std::uint64_t key) {
    return tlptm::atomic(pool, [&]() -> set_node* {
        tlptm::p<set_node*>* link = &r->head;
        set_node* cur = *link;
        while (cur != nullptr && cur->key < key) {
            link = &cur->next;
            cur = *link;
        }
        if (cur == nullptr || cur->key != key)
            return nullptr;
        *link = cur->next.get();
        return cur;
    });
}

bool set_contains(tlptm::pool& pool, set_root* r, std::uint64_t key) {
    return tlptm::atomic(pool, [&] {
        for (set_node* cur = r->head; cur != nullptr; cur = cur->next) {
            if (cur->key == key)
                return true;
            if (cur->key > key)
                return false;
        }
        return false;
    });
}

} // namespace

TEST_CASE("a concurrent sorted set ends with exactly the keys the threads' histories say") {
    tlptm_test::temp_path path("set");
    auto pool = tlptm::pool::create(path, concurrent_options(set_threads));
    auto* r = pool.root<set_root>();
    std::vector<std::set<std::uint64_t>> expect(set_threads);
    std::vector<std::thread> ts;
    std::atomic<int> wrong_contains{0};
    for (int t = 0; t < set_threads; ++t)
        ts.emplace_back([&, t] {
            // Thread t owns the keys k with k % set_threads == t and the nodes of its range.
            std::vector<set_node*> free_nodes;
            for (int i = 0; i < nodes_per_thread; ++i)
                free_nodes.push_back(&r->nodes[t * nodes_per_thread + i]);
            std::map<std::uint64_t, set_node*> mine;
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 100);
            for (int i = 0; i < 4000; ++i) {
                std::uint64_t key = (rng() % 150) * set_threads + static_cast<std::uint64_t>(t);
                switch (rng() % 3) {
                case 0:
                    if (!free_nodes.empty()) {
                        set_node* n = free_nodes.back();
                        if (set_insert(pool, r, key, n)) {
                            free_nodes.pop_back();
                            mine[key] = n;
                        }
                    }
                    break;
                case 1:
                    if (set_node* n = set_erase(pool, r, key)) {
                        if (mine[key] != n)
                            ++wrong_contains;
                        mine.erase(key);
                        free_nodes.push_back(n);
                    }
                    break;
                default:
                    if (set_contains(pool, r, key) != (mine.count(key) == 1))
                        ++wrong_contains;
                }
            }
            for (auto& [k, n] : mine)
                expect[static_cast<std::size_t>(t)].insert(k);
        });
    for (auto& t : ts)
        t.join();
    CHECK(wrong_contains.load() == 0);
    std::set<std::uint64_t> want, got;
    for (auto& e : expect)
        want.insert(e.begin(), e.end());
    std::uint64_t prev = 0;
    bool sorted = true;
    for (set_node* cur = r->head; cur != nullptr; cur = cur->next) {
        if (!got.empty() && cur->key.get() <= prev)
            sorted = false;
        prev = cur->key;
        got.insert(cur->key);
    }
    CHECK(sorted);
    CHECK(got == want);
}

namespace {

struct opacity_root {
    tlptm::p<std::uint64_t> a, b;     // always equal in every committed state
    tlptm::p<std::uint64_t> index;    // always < 8 in every committed state
    tlptm::p<std::uint64_t> slots[8]; // slots[index] == a
};

} // namespace

TEST_CASE("opacity: a running transaction never observes an inconsistent snapshot") {
    tlptm_test::temp_path path("opacity");
    auto pool = tlptm::pool::create(path, concurrent_options(3));
    auto* r = pool.root<opacity_root>();
    tlptm::atomic(pool, [&] { r->slots[0] = 0; });
    std::atomic<bool> stop{false};
    std::atomic<long> inconsistent{0}, reads{0};
    std::thread writer([&] {
        std::mt19937_64 rng(5);
        while (!stop.load()) {
            std::uint64_t v = rng(), i = rng() % 8;
            tlptm::atomic(pool, [&] {
                r->a = v;
                r->slots[i] = v;
                r->index = i;
                r->b = v;
            });
        }
    });
    std::thread reader([&] {
        for (int n = 0; n < 20000; ++n) {
            tlptm::atomic(pool, [&] {
                std::uint64_t a = r->a;
                for (int spin = 0; spin < 50; ++spin)
                    tlptm::detail::cpu_relax(); // widen the window
                std::uint64_t i = r->index;
                // An inconsistent snapshot would index out of bounds here, or see a != b; the
                // check stands in for the wild access a zombie transaction could make.
                if (i >= 8) {
                    ++inconsistent;
                    return;
                }
                std::uint64_t s = r->slots[i];
                std::uint64_t b = r->b;
                if (a != b || s != a)
                    ++inconsistent;
            });
            ++reads;
        }
        stop = true;
    });
    reader.join();
    writer.join();
    CHECK(inconsistent.load() == 0);
    CHECK(reads.load() == 20000);
}

TEST_CASE("starvation: a long transaction completes against many short conflicting ones") {
    tlptm_test::temp_path path("starve");
    auto pool = tlptm::pool::create(path, concurrent_options(4));
    auto* b = pool.root<bank>();
    fund(pool, b);
    std::atomic<bool> stop{false};
    std::vector<std::thread> shorts;
    for (int t = 0; t < 2; ++t)
        shorts.emplace_back([&, t] {
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 9);
            while (!stop.load())
                transfer(pool, b, rng, t);
        });
    // The long transaction reads every account, spins, and writes every account.
    auto before = pool.stats();
    int long_done = 0;
    for (int k = 0; k < 5; ++k) {
        tlptm::atomic(pool, [&] {
            std::int64_t v[accounts];
            for (int i = 0; i < accounts; ++i)
                v[i] = b->balance[i];
            // Long enough that the short transactions surely change some account meanwhile.
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            // Rotate the balances: the sum is unchanged.
            for (int i = 0; i < accounts; ++i)
                b->balance[i] = v[(i + 1) % accounts];
        });
        ++long_done;
    }
    stop = true;
    for (auto& t : shorts)
        t.join();
    CHECK(long_done == 5);
    CHECK(audit(pool, b).sum == accounts * initial_balance);
    auto d = pool.stats() - before;
    // Each long transaction conflicts until it runs alone (serial mode after 16 aborts).
    CHECK(d.tx_aborted >= tlptm::serial_after_aborts);
    MESSAGE("long transactions done with " << d.tx_aborted << " aborts in total");
}

TEST_CASE("slots are held by running transactions: idle threads hold none, extra threads wait") {
    tlptm_test::temp_path path("slots");
    auto o = tlptm_test::small_options();
    o.max_threads = 2;
    auto pool = tlptm::pool::create(path, o);
    auto* b = pool.root<bank>();

    // The main thread and an idle thread have run transactions; a third thread still gets a
    // slot (before, threads kept their slot until they exited: "all 2 thread slots are in use").
    tlptm::atomic(pool, [&] { b->done[0] += 1; });
    std::atomic<bool> idle_ran{false}, stop_idle{false};
    std::thread idle([&] {
        tlptm::atomic(pool, [&] { b->done[0] += 1; });
        idle_ran = true;
        while (!stop_idle.load())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!idle_ran.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::thread third([&] { tlptm::atomic(pool, [&] { b->done[0] += 1; }); });
    third.join();
    CHECK(b->done[0].get() == 3);

    // Three threads run transactions that stay inside until released: two run, the third
    // waits for a slot instead of failing, and all three commit.
    std::atomic<int> inside{0}, most_inside{0}, done{0};
    std::atomic<bool> release{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t)
        ts.emplace_back([&] {
            tlptm::atomic(pool, [&] {
                // Counted while the body runs, which is while the attempt holds its slot: the
                // guard leaves on return and on a retry's unwinding. (Leaving after atomic
                // returned let the third thread, given the freed slot, count itself first.)
                struct leave_on_exit {
                    std::atomic<int>& n;
                    ~leave_on_exit() { --n; }
                };
                int now = ++inside;
                leave_on_exit guard{inside};
                int m = most_inside.load();
                while (now > m && !most_inside.compare_exchange_weak(m, now)) {
                }
                while (!release.load())
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                b->done[1] += 1;
            });
            ++done;
        });
    for (int i = 0; i < 200 && inside.load() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(inside.load() == 2); // the third waits for a slot
    release = true;
    for (auto& t : ts)
        t.join();
    CHECK(most_inside.load() == 2);
    CHECK(done.load() == 3);
    CHECK(b->done[1].get() == 3);
    stop_idle = true;
    idle.join();
}

TEST_CASE("orecs: the allocator's metadata never shares an orec with the heap") {
    // Before, orecs were indexed by the offset alone, so a bitmap or descriptor word shared its
    // orec with heap words a multiple of 4 MiB away: an allocation invalidated their readers.
    tlptm_test::temp_path path("orec-split");
    auto o = tlptm_test::small_options(tlptm::log_mode::tlptm);
    o.size = std::size_t{64} << 20;
    auto pool = tlptm::pool::create(path, o);
    const auto& st = pool.state();
    using tlptm::detail::orec_table;
    REQUIRE(st.meta_end <= st.heap_begin);
    std::set<std::uint32_t> meta;
    for (std::uint64_t off = st.meta_begin; off < st.meta_end; off += 8) {
        std::uint32_t i = st.orecs.index(off);
        CHECK(i >= orec_table::size);
        CHECK(i < orec_table::count);
        meta.insert(i);
    }
    std::size_t aliased = 0;
    for (std::uint64_t off = st.heap_begin; off < st.heap_end; off += 8) {
        std::uint32_t i = st.orecs.index(off);
        aliased += i >= orec_table::size || meta.count(i) != 0;
    }
    CHECK(aliased == 0);
    constexpr std::uint64_t granule = std::uint64_t{1} << orec_table::granule_log2;
    static_assert(granule == 64);
    CHECK(st.orecs.index(st.heap_begin) != st.orecs.index(st.heap_begin + granule));
    CHECK(st.orecs.index(st.heap_begin) == st.orecs.index(st.heap_begin + granule - 8));
    // Orecs are 16 bytes apart in the table (a line holds four), so consecutive granules'
    // orecs are consecutive slots of the table.
    CHECK(reinterpret_cast<std::uintptr_t>(&st.orecs[1]) -
              reinterpret_cast<std::uintptr_t>(&st.orecs[0]) ==
          orec_table::orec_bytes);

    // And in a transaction: a reader of one word in every heap orec (a 4 MiB block, one word
    // per granule) is not invalidated by another thread's allocations, whose bitmap and
    // descriptor stores hit orecs that, before, were those of some of these words.
    struct root_t {
        tlptm::p<std::uint64_t*> block;
        tlptm::p<std::uint64_t> sum;
    };
    auto* r = pool.root<root_t>();
    constexpr std::size_t span = orec_table::size << orec_table::granule_log2; // 4 MiB
    tlptm::atomic(pool,
                  [&](tlptm::tx& tx) { r->block = static_cast<std::uint64_t*>(tx.alloc(span)); });
    std::uint64_t* block = r->block;
    std::vector<void*> kept;
    int attempts = 0;
    std::atomic<bool> read{false}, allocated{false};
    std::thread other([&] {
        while (!read.load())
            std::this_thread::yield();
        // Only the allocator's words are written: the blocks are kept in volatile memory
        // (and freed below), not linked from the heap.
        for (int k = 0; k < 64; ++k)
            kept.push_back(tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(48); }));
        allocated.store(true);
    });
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        ++attempts;
        std::uint64_t sum = 0;
        for (std::size_t w = 0; w < span / 8; w += granule / 8)
            sum += tx.load(block + w);
        read.store(true);
        while (!allocated.load())
            std::this_thread::yield();
        r->sum = sum + 1;
    });
    other.join();
    CHECK(attempts == 1);
    CHECK(r->sum.get() >= 1);
    CHECK(pool.stats().heap.bytes_in_use >= span + 64 * 48);
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        for (void* k : kept)
            tx.free(k);
    });
}

TEST_CASE("false_sharing_span: the pool bytes whose orecs share one cache line") {
    // tlptm::false_sharing_span tells users how far apart to keep data that threads update
    // independently: it must match the orec table's mapping of heap offsets.
    tlptm::detail::orec_table t;
    const std::uint64_t heap = 1 << 20;
    t.set_heap_begin(heap);
    auto line_of = [&](std::uint64_t off) {
        return reinterpret_cast<std::uintptr_t>(&t[t.index(off)]) / 64;
    };
    const std::uint64_t span = tlptm::false_sharing_span;
    CHECK(span == 256);
    REQUIRE(reinterpret_cast<std::uintptr_t>(&t[0]) % 64 == 0); // lines start at orec 0
    for (std::uint64_t at : {heap, heap + 5 * span, heap + 12345 * span}) {
        CAPTURE(at);
        for (std::uint64_t k = 8; k < span; k += 8)
            CHECK(line_of(at + k) == line_of(at)); // one span: one line of orecs
        CHECK(line_of(at + span) != line_of(at));  // the next span: another line
        CHECK(line_of(at - 8) != line_of(at));
    }
}

namespace {

/// A record of `words` words that a writer fills with one value per transaction.
struct wide_record {
    static constexpr std::size_t words = 40;
    tlptm::p<std::uint64_t> w[words];
};

/// The value of generation g in every byte of a word: a torn word would mix two generations.
std::uint64_t generation_word(std::uint64_t g) {
    return (g % 255 + 1) * 0x0101010101010101ull;
}

} // namespace

TEST_CASE("write-back of multi-word runs: every length and offset in a line, exact bytes") {
    // Runs of 4 words or more are written back with 32-byte stores on AVX CPUs
    // (store_run_words); the last store may overlap the one before it. Each run must change
    // exactly its own words, in place and after the pool is reopened.
    tlptm_test::temp_path path("wide_write_back");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
#if defined(__x86_64__) && !defined(TLPTM_TSAN)
    MESSAGE("32-byte write-back stores: " << (tlptm::detail::cpu_has_avx ? "yes" : "no (no AVX)"));
#endif
    struct area {
        tlptm::p<std::uint64_t> w[64];
    };
    constexpr std::size_t span = 64;
    area* a = pool.root<area>();
    std::uint64_t model[span];
    tlptm::atomic(pool, [&] {
        for (std::size_t k = 0; k < span; ++k) {
            model[k] = 0xA5A5000000000000ull | k;
            a->w[k] = model[k];
        }
    });
    auto mismatch = [&](area* at) -> std::size_t {
        for (std::size_t k = 0; k < span; ++k)
            if (at->w[k].get() != model[k])
                return k;
        return span;
    };
    std::uint64_t stamp = 0;
    std::size_t runs = 0, wrong = 0;
    for (std::size_t len = 1; len <= 40; ++len)
        for (std::size_t start = 0; start < 8; ++start) {
            std::uint64_t src[40];
            for (std::size_t k = 0; k < len; ++k)
                src[k] = ++stamp * 0x9E3779B97F4A7C15ull;
            tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.write(&a->w[start], src, len * 8); });
            for (std::size_t k = 0; k < len; ++k)
                model[start + k] = src[k];
            ++runs;
            if (std::size_t k = mismatch(a); k != span && ++wrong <= 5)
                FAIL_CHECK("run of " << len << " words at word " << start << ": word " << k
                                     << " is wrong");
        }
    CHECK(runs == 320);
    CHECK(wrong == 0);
    pool.close();
    auto again = tlptm::pool::open(path, tlptm_test::small_options());
    CHECK(mismatch(again.root<area>()) == span);
}

TEST_CASE("readers never see a multi-word value half written back") {
    // A writer stores one generation into all 40 words per transaction (one run: 32-byte
    // stores on AVX CPUs). Transactional readers must see a single generation; plain reads
    // outside transactions may mix generations across words but never within a word.
    tlptm_test::temp_path path("wide_readers");
    auto pool = tlptm::pool::create(path, concurrent_options(3));
    auto* r = pool.root<wide_record>();
    tlptm::atomic(pool, [&] {
        for (auto& w : r->w)
            w = generation_word(0);
    });
    std::atomic<bool> stop{false};
    std::atomic<long> mixed{0}, torn{0}, tx_reads{0}, plain_reads{0};
    std::thread writer([&] {
        std::uint64_t src[wide_record::words];
        for (std::uint64_t g = 1; !stop.load(std::memory_order_relaxed); ++g) {
            std::fill(std::begin(src), std::end(src), generation_word(g));
            tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.write(&r->w[0], src, sizeof src); });
        }
    });
    std::thread reader([&] {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < until) {
            bool same = tlptm::atomic(pool, [&] {
                std::uint64_t first = r->w[0];
                for (auto& w : r->w)
                    if (w.get() != first)
                        return false;
                return true;
            });
            mixed += same ? 0 : 1;
            ++tx_reads;
            for (auto& w : r->w) { // outside a transaction: each word old or new, whole
                std::uint64_t v = w.get();
                if (v != (v & 0xFF) * 0x0101010101010101ull)
                    ++torn;
            }
            ++plain_reads;
        }
        stop = true;
    });
    reader.join();
    writer.join();
    CHECK(mixed.load() == 0);
    CHECK(torn.load() == 0);
    CHECK(tx_reads.load() > 100);
    MESSAGE(tx_reads.load() << " transactional and " << plain_reads.load() << " plain reads");
}
