// Crash consistency of the containers.
//
// 1. fork + SIGKILL, per container: a child process runs random transactions on a pool and
//    reports each one that committed through a pipe; the parent kills it at a random moment,
//    reopens the pool (recovery) and compares the containers with a reference model of the
//    committed transactions. Each transaction also stores its own sequence number, so the
//    recovered pool says how many transactions it holds: the reported ones, or one more (the
//    transaction in flight may have committed before its report). The next round's child
//    continues on the recovered pool.
// 2. Crash images (tests/harness, docs/crash-testing.md): a vector that reallocates its
//    buffer and a hash_map that moves buckets during a rehash, swept at every flush and fence
//    of every log mode.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "harness/pool_file.hpp"
#include "harness/sweep.hpp"
#include "test_util.hpp"

namespace {

// ---- fork + SIGKILL -----------------------------------------------------------------------------

struct kill_root {
    tlptm::p<std::uint64_t> done; ///< transactions applied (stored by each transaction)
    tlptm::vector<std::uint64_t> vec;
    tlptm::string str;
    tlptm::hash_map<std::uint64_t, std::uint64_t> ints;
    tlptm::hash_map<tlptm::string, tlptm::string> strs;
};

tlptm::pool_options kill_pool_options() {
    tlptm::pool_options o;
    o.size = std::size_t{32} << 20;
    o.max_threads = 2;
    o.log_capacity = std::size_t{256} << 10;
    o.durability = tlptm::durability::emulate_pmem;
    return o;
}

/// The operations of transaction number `tx` (the same in the child and in the model):
/// written once for std:: and tlptm:: containers.
std::mt19937_64 tx_rng(std::uint64_t tx) {
    return std::mt19937_64(tx * 0x9E3779B97F4A7C15ull + 17);
}

template <class Vec> void vector_tx(std::uint64_t tx, Vec& v) {
    auto rng = tx_rng(tx);
    int ops = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < ops; ++k) {
        std::uint64_t x = rng();
        std::size_t n = v.size();
        switch (rng() % 8) {
        case 0:
        case 1:
        case 2:
            v.push_back(x);
            break;
        case 3:
            v.insert(v.begin() + static_cast<std::ptrdiff_t>(x % (n + 1)), 4 + x % 20, x);
            break;
        case 4:
            if (n != 0)
                v.erase(v.begin() + static_cast<std::ptrdiff_t>(x % n));
            break;
        case 5:
            if (n != 0)
                v[x % n] = x;
            break;
        case 6:
            if (n > 300) // keep the vector between a few hundred and a thousand elements
                v.erase(v.begin() + 10, v.begin() + static_cast<std::ptrdiff_t>(n / 2));
            break;
        default:
            if (x % 16 == 0)
                v.shrink_to_fit();
            else
                v.resize(n + x % 7);
            break;
        }
    }
}

template <class Str> void string_tx(std::uint64_t tx, Str& s) {
    auto rng = tx_rng(tx);
    int ops = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < ops; ++k) {
        std::uint64_t x = rng();
        std::size_t n = s.size();
        std::string text(x % 40, static_cast<char>('a' + x % 26));
        switch (rng() % 6) {
        case 0:
        case 1:
            s.append(text);
            break;
        case 2:
            s.insert(x % (n + 1), text);
            break;
        case 3:
            s.erase(x % (n + 1), 1 + x % 30);
            break;
        case 4:
            s.replace(x % (n + 1), x % 5, text);
            break;
        default:
            if (n > 2000)
                s.erase(0, n / 2);
            break;
        }
    }
}

/// Adapters: std::unordered_map and tlptm::hash_map through one set of names.
template <class K, class V, class A, class B>
void map_put(std::unordered_map<K, V>& m, const A& k, const B& v) {
    m.insert_or_assign(K(k), V(v));
}
template <class K, class V, class A, class B>
void map_put(tlptm::hash_map<K, V>& m, const A& k, const B& v) {
    m.insert_or_assign(k, v);
}
template <class K, class V, class A> void map_erase(std::unordered_map<K, V>& m, const A& k) {
    m.erase(K(k));
}
template <class K, class V, class A> void map_erase(tlptm::hash_map<K, V>& m, const A& k) {
    m.erase(k);
}
template <class K, class V> void map_clear(std::unordered_map<K, V>& m) {
    m.clear();
}
template <class K, class V> void map_clear(tlptm::hash_map<K, V>& m) {
    m.destroy();
}

/// Inserts up to 3000 keys (the table grows through several rehashes), updates, erases, and
/// every 700th transaction starts again from an empty map.
template <class M> void int_map_tx(std::uint64_t tx, M& m) {
    auto rng = tx_rng(tx);
    if (tx % 700 == 699) {
        map_clear(m);
        return;
    }
    int ops = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < ops; ++k) {
        std::uint64_t key = rng() % 3000, v = rng();
        if (rng() % 5 == 0)
            map_erase(m, key);
        else
            map_put(m, key, v);
    }
}

template <class M> void string_map_tx(std::uint64_t tx, M& m) {
    auto rng = tx_rng(tx);
    if (tx % 500 == 499) {
        map_clear(m);
        return;
    }
    int ops = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < ops; ++k) {
        std::string key = "k" + std::to_string(rng() % 600);
        std::string v(rng() % 50, static_cast<char>('A' + rng() % 26));
        if (rng() % 5 == 0)
            map_erase(m, std::string_view(key));
        else
            map_put(m, std::string_view(key), std::string_view(v));
    }
}

/// Equality of a recovered container and its model.
bool same(const tlptm::vector<std::uint64_t>& v, const std::vector<std::uint64_t>& m) {
    return v.to_std() == m;
}
bool same(const tlptm::string& s, const std::string& m) {
    return s.str() == m;
}
template <class K, class V, class MK, class MV>
bool same(const tlptm::hash_map<K, V>& h, const std::unordered_map<MK, MV>& m) {
    std::unordered_map<MK, MV> seen;
    for (const auto& [k, v] : h) {
        MK key;
        MV value;
        if constexpr (std::is_same_v<K, tlptm::string>)
            key = k.str();
        else
            key = k.get();
        if constexpr (std::is_same_v<V, tlptm::string>)
            value = v.str();
        else
            value = v.get();
        if (!seen.emplace(key, value).second)
            return false;
    }
    return h.size() == m.size() && seen == m;
}

struct kill_figures {
    std::size_t kills = 0, committed = 0, in_flight_applied = 0, checks = 0;
};

/// Runs `rounds` fork + SIGKILL rounds of `Workload` and checks each recovered pool.
/// `member` selects the container in the root, `tx_body` is the workload's transaction.
template <class Model, class Member, class Body>
kill_figures fork_kill(const char* name, int rounds, Member member, Body tx_body) {
    tlptm_test::temp_path path(std::string("kill-") + name);
    tlptm::pool::create(path, kill_pool_options()).close();
    Model model;
    std::uint64_t model_tx = 0; // model == the state after model_tx transactions
    kill_figures f;
    std::mt19937_64 rng(std::hash<std::string>{}(name));
    for (int round = 0; round < rounds; ++round) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) { // the child: run transactions until killed
            ::close(fds[0]);
            int status = 0;
            try {
                auto pool = tlptm::pool::open(path, kill_pool_options());
                kill_root* r = pool.root<kill_root>();
                for (std::uint64_t tx = r->done.get(); tx < 1000000; ++tx) {
                    tlptm::atomic(pool, [&] {
                        tx_body(tx, member(*r));
                        r->done = tx + 1;
                    });
                    std::uint64_t reported = tx + 1; // committed and durable
                    if (::write(fds[1], &reported, sizeof reported) != sizeof reported)
                        break;
                }
            } catch (...) {
                status = 3;
            }
            ::_exit(status);
        }
        ::close(fds[1]);
        // The kill lands at a random moment once the child commits: opening the pool (with
        // recovery) may take longer than the random delay on a loaded machine or under ASan.
        std::uint64_t reported = model_tx, got = 0;
        std::uint64_t buf[512];
        if (::read(fds[0], buf, 8) == 8) {
            reported = buf[0];
            ++got;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 25000));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        REQUIRE_MESSAGE(WIFSIGNALED(status),
                        name << ": the child ended on its own (status " << status << ")");
        for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
            for (ssize_t i = 0; i < n / 8; ++i, ++got)
                reported = buf[i];
        ::close(fds[0]);
        ++f.kills;

        auto pool = tlptm::pool::open(path, kill_pool_options()); // recovery
        kill_root* r = pool.root<kill_root>();
        std::uint64_t done = r->done.get();
        REQUIRE_MESSAGE((done == reported || done == reported + 1),
                        name << " round " << round << ": the pool holds " << done
                             << " transactions, " << reported << " were reported committed");
        f.in_flight_applied += done - reported;
        f.committed += done - model_tx;
        for (; model_tx < done; ++model_tx)
            tx_body(model_tx, model);
        REQUIRE_MESSAGE(same(member(*r), model), name << " round " << round
                                                      << ": recovered state differs from the model "
                                                      << "after " << done << " transactions");
        ++f.checks;
        // A transaction on the recovered pool still works (the structure is intact).
        tlptm::atomic(pool, [&] {
            tx_body(done, member(*r));
            r->done = done + 1;
        });
        tx_body(model_tx++, model);
        REQUIRE(same(member(*r), model));
        pool.close();
    }
    MESSAGE(std::string(name) << ": " << f.kills << " kills, " << f.committed
                              << " committed transactions replayed into the model and checked, "
                              << f.in_flight_applied << " in-flight transactions found applied");
    CHECK(f.committed > static_cast<std::size_t>(rounds)); // the child got work done
    return f;
}

int kill_rounds() {
    const char* v = std::getenv("TLPTM_KILL_ROUNDS");
    return v ? std::max(1, std::atoi(v)) : 16;
}

} // namespace

TEST_CASE("fork + SIGKILL: vector") {
    fork_kill<std::vector<std::uint64_t>>(
        "vector", kill_rounds(), [](kill_root & r) -> auto& { return r.vec; },
        [](std::uint64_t tx, auto& v) { vector_tx(tx, v); });
}

TEST_CASE("fork + SIGKILL: string") {
    fork_kill<std::string>(
        "string", kill_rounds(), [](kill_root & r) -> auto& { return r.str; },
        [](std::uint64_t tx, auto& s) { string_tx(tx, s); });
}

TEST_CASE("fork + SIGKILL: hash_map<uint64, uint64> (rehashes under way)") {
    fork_kill<std::unordered_map<std::uint64_t, std::uint64_t>>(
        "hash_map", kill_rounds(), [](kill_root & r) -> auto& { return r.ints; },
        [](std::uint64_t tx, auto& m) { int_map_tx(tx, m); });
}

TEST_CASE("fork + SIGKILL: hash_map<string, string>") {
    fork_kill<std::unordered_map<std::string, std::string>>(
        "string hash_map", kill_rounds(), [](kill_root & r) -> auto& { return r.strs; },
        [](std::uint64_t tx, auto& m) { string_map_tx(tx, m); });
}

// ---- crash images -------------------------------------------------------------------------------

namespace {

using namespace tlptm_harness;

struct vec_root {
    tlptm::vector<std::uint64_t> v;
};

/// 320 KiB pool (the harness's tiny pool): 4 rings of 4 KiB entries, 3 free superblocks.
tlptm::pool_options tiny(tlptm::log_mode mode) {
    tlptm::pool_options o;
    o.size = std::size_t{320} << 10;
    o.max_threads = 4;
    o.log_capacity = 4096;
    o.root_capacity = std::size_t{64} << 10;
    o.mode = mode;
    return o;
}

/// The vector's size, capacity and elements; its buffer must be an allocated block.
observation observe_vector(tlptm::pool& p) {
    observation o;
    auto& v = p.root<vec_root>()->v;
    o.reachable_bytes = root_bytes(p);
    std::size_t n = v.size(), cap = v.capacity();
    o.state = {n, cap};
    if (cap == 0)
        return o;
    std::string why;
    std::uint64_t block = allocated_block(p, v.data(), why);
    if (block == 0) {
        o.problem = "vector buffer: " + why;
        return o;
    }
    if (n > cap || cap * 8 > block) {
        o.problem = "vector size " + std::to_string(n) + " / capacity " + std::to_string(cap) +
                    " do not fit its block of " + std::to_string(block) + " bytes";
        return o;
    }
    o.reachable_bytes += block;
    for (std::size_t i = 0; i < n; ++i)
        o.state.push_back(v[i].get());
    return o;
}

/// push_back through two reallocations (capacity 4 -> 8 -> 16), a store into an old element,
/// an erase and a shrink_to_fit (one more reallocation, to capacity 8). The tiny pool has three
/// free superblocks: one per block size used (32, 64 and 128 bytes).
scenario vector_growth(tlptm::log_mode mode) {
    scenario s;
    s.name = std::string("vector-growth/") + tlptm::to_string(mode);
    s.options = tiny(mode);
    s.setup = [](tlptm::pool& p) { p.root<vec_root>(); };
    s.observe = observe_vector;
    s.run = [](tlptm::pool& p, recorder& rec) {
        auto& v = p.root<vec_root>()->v;
        // Each transaction's effect on the model is the whole state after it (one thread:
        // the states are applied in order).
        auto state = [](const std::vector<std::uint64_t>& m, std::size_t cap) {
            digest d{m.size(), cap};
            d.insert(d.end(), m.begin(), m.end());
            return d;
        };
        std::vector<std::uint64_t> model;
        std::size_t cap = 0;
        for (std::uint64_t k = 1; k <= 13; k += 3) { // three elements per transaction
            for (std::uint64_t j = k; j < k + 3; ++j)
                model.push_back(j * 1111);
            cap = std::max<std::size_t>(cap, 4);
            while (cap < model.size())
                cap *= 2;
            rec.atomic(
                p,
                [&] {
                    for (std::uint64_t j = k; j < k + 3; ++j)
                        v.push_back(j * 1111);
                },
                [d = state(model, cap)](digest& out) { out = d; });
        }
        model[1] = 77;
        rec.atomic(
            p, [&] { v[1] = 77; }, [d = state(model, cap)](digest& out) { out = d; });
        model.erase(model.begin() + 2, model.begin() + 9);
        rec.atomic(
            p, [&] { v.erase(v.begin() + 2, v.begin() + 9); },
            [d = state(model, cap)](digest& out) { out = d; });
        cap = model.size();
        rec.atomic(
            p, [&] { v.shrink_to_fit(); }, [d = state(model, cap)](digest& out) { out = d; });
        if (v.capacity() != cap)
            throw std::runtime_error("vector-growth: unexpected capacity");
    };
    return s;
}

using ht = tlptm::hash_map<std::uint64_t, std::uint64_t>;

struct map_root {
    ht m;
};

/// The map's pairs (sorted) and size; every node must be an allocated block, and the tables
/// (power-of-two arrays of 8-byte heads: exactly their size class) are counted as reachable.
observation observe_map(tlptm::pool& p) {
    observation o;
    const ht& m = p.root<map_root>()->m;
    o.reachable_bytes = root_bytes(p);
    std::size_t buckets = m.bucket_count();
    if (buckets != 0)
        o.reachable_bytes += (m.rehashing() ? buckets + buckets / 2 : buckets) * 8;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs;
    for (auto it = m.begin(); it != m.end(); ++it) {
        std::string why;
        std::uint64_t block = allocated_block(p, &*it, why);
        if (block == 0) {
            o.problem = "map node: " + why;
            return o;
        }
        if (pairs.size() > 1000) {
            o.problem = "more than 1000 nodes (a cycle?)";
            return o;
        }
        o.reachable_bytes += block;
        pairs.emplace_back(it->first.get(), it->second.get());
    }
    std::sort(pairs.begin(), pairs.end());
    o.state = {m.size(), pairs.size()};
    for (auto [k, v] : pairs) {
        o.state.push_back(k);
        o.state.push_back(v);
    }
    return o;
}

/// The digest observe_map gives for `model`.
void map_digest(digest& d, const std::map<std::uint64_t, std::uint64_t>& model) {
    d.assign({model.size(), model.size()});
    for (auto [k, v] : model) {
        d.push_back(k);
        d.push_back(v);
    }
}

/// A map filled (untraced) until a rehash from 16 to 32 buckets has started; then traced
/// inserts, each moving two old buckets (the eighth retires the old table), updates and
/// erases in the middle of the rehash.
scenario map_rehash(tlptm::log_mode mode) {
    scenario s;
    s.name = std::string("hash-map-rehash/") + tlptm::to_string(mode);
    s.options = tiny(mode);
    s.setup = [](tlptm::pool& p) {
        ht& m = p.root<map_root>()->m;
        for (std::uint64_t k = 1; !m.rehashing(); ++k) {
            if (k > 64)
                throw std::runtime_error("hash-map-rehash: no rehash started");
            tlptm::atomic(p, [&] { m.insert(k, k * 10); });
        }
    };
    s.observe = observe_map;
    s.run = [](tlptm::pool& p, recorder& rec) {
        ht& m = p.root<map_root>()->m;
        std::map<std::uint64_t, std::uint64_t> model;
        for (const auto& [k, v] : m)
            model.emplace(k.get(), v.get());
        std::uint64_t next = 1000;
        for (int step = 0; step < 10; ++step) {
            std::map<std::uint64_t, std::uint64_t> after = model;
            std::uint64_t key = next++, old_key = 1 + static_cast<std::uint64_t>(step);
            after[key] = key * 3;
            if (step % 3 == 1)
                after[old_key] = 5;
            if (step % 3 == 2)
                after.erase(old_key);
            rec.atomic(
                p,
                [&] {
                    m.insert(key, key * 3);
                    if (step % 3 == 1)
                        m.insert_or_assign(old_key, 5);
                    if (step % 3 == 2)
                        m.erase(old_key);
                },
                [after](digest& d) { map_digest(d, after); });
            model = std::move(after);
        }
        if (m.rehashing())
            throw std::runtime_error("hash-map-rehash: the rehash did not finish");
    };
    return s;
}

sweep_config crash_image_config() {
    sweep_config cfg;
    cfg.images = {1024, 48, 48, 12, 1};
    cfg.max_recoveries = 1500;
    cfg.max_new_per_point = 24;
    cfg.recovery_crashes = 4;
    cfg.max_per_recovery_crash = 64;
    return cfg;
}

template <class Make> void sweep_modes(const char* what, Make make) {
    sweep_result total;
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                 tlptm::log_mode::cblo, tlptm::log_mode::tlptm}) {
        sweep_result r = run_sweep(make(mode), crash_image_config());
        MESSAGE(r.summary());
        for (const auto& msg : r.messages)
            MESSAGE("  violation: " << msg);
        CHECK_MESSAGE(r.violations == 0, r.name << ": " << r.violations << " violations");
        CHECK(r.crash_points > 0);
        CHECK(r.recoveries > 0);
        total += r;
    }
    MESSAGE(std::string(what) << " total: " << total.transactions << " transactions, "
                              << total.crash_points << " crash points, " << total.image_checks
                              << " images checked, " << total.recoveries << " recovered, "
                              << total.violations << " violations");
}

} // namespace

TEST_CASE("crash images: vector reallocation (AALO copy, free of the old buffer)") {
    sweep_modes("vector-growth", vector_growth);
}

TEST_CASE("crash images: hash_map rehash steps (relinked nodes, retired table)") {
    sweep_modes("hash-map-rehash", map_rehash);
}
