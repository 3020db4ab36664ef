// Throughput of the persistent containers, one operation per transaction unless the name says
// otherwise: vector push_back and random access, string append, and hash_map insert / find /
// update against the workload table of examples/hashtable (fixed bucket count, 64-bit keys).
//
//   containers_bench [--benchmark_filter=...]
//
// Pools go to /dev/shm (else the temporary directory) with persistent-memory emulation
// (durability::emulate_pmem: CLWB + SFENCE, no msync) and are removed at the end.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include <tlptm/tlptm.hpp>

#include "../examples/hashtable/hashtable.hpp"

namespace {

/// A fresh pool for one benchmark run, removed afterwards.
class bench_pool {
public:
    explicit bench_pool(const char* name, std::size_t size = std::size_t{1} << 30) {
        std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                        ? std::filesystem::path("/dev/shm")
                                        : std::filesystem::temp_directory_path();
        path_ =
            (dir / ("tlptm-containers-bench-" + std::to_string(::getpid()) + "-" + name + ".pool"))
                .string();
        std::filesystem::remove(path_);
        tlptm::pool_options o;
        o.size = size;
        o.max_threads = 4;
        o.durability = tlptm::durability::emulate_pmem;
        pool_ = tlptm::pool::create(path_, o);
    }
    ~bench_pool() {
        pool_.close();
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    bench_pool(const bench_pool&) = delete;
    bench_pool& operator=(const bench_pool&) = delete;
    tlptm::pool& operator*() noexcept { return pool_; }

private:
    std::string path_;
    tlptm::pool pool_;
};

void report_log(benchmark::State& state, tlptm::pool& p) {
    tlptm::stats s = p.stats();
    double txs = static_cast<double>(s.tx_committed);
    if (txs > 0) {
        state.counters["log_B/tx"] = static_cast<double>(s.log_bytes) / txs;
        state.counters["fences/tx"] = static_cast<double>(s.fences) / txs;
    }
}

// ---- vector -------------------------------------------------------------------------------------

struct vec_root {
    tlptm::vector<std::uint64_t> v;
};

/// push_back, range(0) elements per transaction (growth reallocates in place, AALO).
void BM_vector_push_back(benchmark::State& state) {
    bench_pool p("vector-push");
    auto* r = (*p).root<vec_root>();
    const auto per_tx = static_cast<std::uint64_t>(state.range(0));
    std::uint64_t x = 0;
    for (auto _ : state) {
        tlptm::atomic(*p, [&] {
            for (std::uint64_t k = 0; k < per_tx; ++k)
                r->v.push_back(x + k);
        });
        x += per_tx;
        if (r->v.size() >= (std::size_t{1} << 22)) { // keep the pool from filling up
            state.PauseTiming();
            tlptm::atomic(*p, [&] { r->v.clear(); });
            state.ResumeTiming();
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(x));
    report_log(state, *p);
}
BENCHMARK(BM_vector_push_back)->Arg(1)->Arg(16)->Arg(256);

/// The same pattern into a std::vector in volatile memory, for scale.
void BM_std_vector_push_back(benchmark::State& state) {
    std::vector<std::uint64_t> v;
    std::uint64_t x = 0;
    for (auto _ : state) {
        v.push_back(x++);
        if (v.size() >= (std::size_t{1} << 22))
            v.clear();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(x));
}
BENCHMARK(BM_std_vector_push_back);

/// Random reads of a 1 Mi-element vector: 16 per read-only transaction, or outside one.
void BM_vector_random_read(benchmark::State& state) {
    bench_pool p("vector-read");
    auto* r = (*p).root<vec_root>();
    constexpr std::size_t n = std::size_t{1} << 20;
    for (std::size_t done = 0; done < n; done += 8192)
        tlptm::atomic(*p, [&] {
            for (std::size_t k = done; k < done + 8192; ++k)
                r->v.push_back(k);
        });
    const bool in_tx = state.range(0) != 0;
    std::mt19937_64 rng(1);
    std::uint64_t sum = 0, reads = 0;
    for (auto _ : state) {
        auto read16 = [&] {
            std::uint64_t s = 0;
            for (int k = 0; k < 16; ++k)
                s += r->v[rng() % n];
            return s;
        };
        sum += in_tx ? tlptm::atomic(*p, read16) : read16();
        reads += 16;
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(static_cast<std::int64_t>(reads));
    state.SetLabel(in_tx ? "16 reads per read-only transaction" : "outside a transaction");
}
BENCHMARK(BM_vector_random_read)->Arg(1)->Arg(0);

/// A random write v[i] = x per transaction (one logged word).
void BM_vector_random_write(benchmark::State& state) {
    bench_pool p("vector-write");
    auto* r = (*p).root<vec_root>();
    constexpr std::size_t n = std::size_t{1} << 16;
    tlptm::atomic(*p, [&] { r->v.resize(n); });
    std::mt19937_64 rng(2);
    for (auto _ : state) {
        std::size_t i = rng() % n;
        tlptm::atomic(*p, [&] { r->v[i] = i; });
    }
    state.SetItemsProcessed(state.iterations());
    report_log(state, *p);
}
BENCHMARK(BM_vector_random_write);

// ---- string -------------------------------------------------------------------------------------

struct str_root {
    tlptm::string s;
};

/// append of range(0) bytes per transaction.
void BM_string_append(benchmark::State& state) {
    bench_pool p("string-append");
    auto* r = (*p).root<str_root>();
    const std::string piece(static_cast<std::size_t>(state.range(0)), 'x');
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        tlptm::atomic(*p, [&] { r->s += piece; });
        bytes += piece.size();
        if (r->s.size() >= (std::size_t{1} << 24)) {
            state.PauseTiming();
            tlptm::atomic(*p, [&] { r->s.clear(); });
            state.ResumeTiming();
        }
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
    report_log(state, *p);
}
BENCHMARK(BM_string_append)->Arg(8)->Arg(64)->Arg(1024);

// ---- hash_map against the example's table -------------------------------------------------------

constexpr std::uint64_t map_keys = 1 << 20;

struct map_root {
    tlptm::hash_map<std::uint64_t, std::uint64_t> m;
};

struct string_map_root {
    tlptm::hash_map<tlptm::string, std::uint64_t> m;
};

/// Insert of fresh keys into a table that grows from empty (incremental rehashing included).
void BM_hash_map_insert(benchmark::State& state) {
    std::uint64_t k = 0;
    auto p = std::make_unique<bench_pool>("map-insert");
    auto* r = (**p).root<map_root>();
    for (auto _ : state) {
        if (k == map_keys) { // start again on a fresh pool
            state.PauseTiming();
            p.reset();
            p = std::make_unique<bench_pool>("map-insert");
            r = (**p).root<map_root>();
            k = 0;
            state.ResumeTiming();
        }
        tlptm::atomic(**p, [&] { r->m.insert(k * 0x9E3779B97F4A7C15ull, k); });
        ++k;
    }
    state.SetItemsProcessed(state.iterations());
    report_log(state, **p);
}
BENCHMARK(BM_hash_map_insert);

/// The example's table: its bucket count is fixed at creation (here map_keys: no growth).
void BM_example_table_insert(benchmark::State& state) {
    std::uint64_t k = 0;
    auto p = std::make_unique<bench_pool>("example-insert");
    auto t = std::make_unique<tlptm_ht::hashtable<std::uint64_t>>(
        tlptm_ht::hashtable<std::uint64_t>::create(**p, map_keys));
    for (auto _ : state) {
        if (k == map_keys) {
            state.PauseTiming();
            t.reset();
            p.reset();
            p = std::make_unique<bench_pool>("example-insert");
            t = std::make_unique<tlptm_ht::hashtable<std::uint64_t>>(
                tlptm_ht::hashtable<std::uint64_t>::create(**p, map_keys));
            k = 0;
            state.ResumeTiming();
        }
        t->insert(k * 0x9E3779B97F4A7C15ull, k);
        ++k;
    }
    state.SetItemsProcessed(state.iterations());
    report_log(state, **p);
}
BENCHMARK(BM_example_table_insert);

constexpr std::uint64_t lookup_keys = 1 << 16;

/// find (read-only transaction) and update (one logged value) on 64 Ki keys.
void BM_hash_map_find(benchmark::State& state) {
    bench_pool p("map-find");
    auto* r = (*p).root<map_root>();
    for (std::uint64_t k = 0; k < lookup_keys; k += 1024)
        tlptm::atomic(*p, [&] {
            for (std::uint64_t j = k; j < k + 1024; ++j)
                r->m.insert(j, j);
        });
    std::mt19937_64 rng(3);
    std::uint64_t sum = 0;
    for (auto _ : state) {
        std::uint64_t key = rng() % lookup_keys;
        sum += tlptm::atomic(*p, [&] {
            auto it = r->m.find(key);
            return it == r->m.end() ? 0 : it->second.get();
        });
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_hash_map_find);

void BM_example_table_find(benchmark::State& state) {
    bench_pool p("example-find");
    auto t = tlptm_ht::hashtable<std::uint64_t>::create(*p, lookup_keys);
    for (std::uint64_t k = 0; k < lookup_keys; k += 1024)
        tlptm::atomic(*p, [&] {
            for (std::uint64_t j = k; j < k + 1024; ++j)
                t.insert(j, j);
        });
    std::mt19937_64 rng(3);
    std::uint64_t sum = 0;
    for (auto _ : state)
        sum += t.lookup(rng() % lookup_keys).value_or(0);
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_example_table_find);

void BM_hash_map_update(benchmark::State& state) {
    bench_pool p("map-update");
    auto* r = (*p).root<map_root>();
    for (std::uint64_t k = 0; k < lookup_keys; k += 1024)
        tlptm::atomic(*p, [&] {
            for (std::uint64_t j = k; j < k + 1024; ++j)
                r->m.insert(j, j);
        });
    std::mt19937_64 rng(4);
    for (auto _ : state) {
        std::uint64_t key = rng() % lookup_keys;
        tlptm::atomic(*p, [&] { r->m.find(key)->second += 1; });
    }
    state.SetItemsProcessed(state.iterations());
    report_log(state, *p);
}
BENCHMARK(BM_hash_map_update);

void BM_example_table_update(benchmark::State& state) {
    bench_pool p("example-update");
    auto t = tlptm_ht::hashtable<std::uint64_t>::create(*p, lookup_keys);
    for (std::uint64_t k = 0; k < lookup_keys; k += 1024)
        tlptm::atomic(*p, [&] {
            for (std::uint64_t j = k; j < k + 1024; ++j)
                t.insert(j, j);
        });
    std::mt19937_64 rng(4);
    for (auto _ : state)
        t.update_with(rng() % lookup_keys, [](std::uint64_t v) { return v + 1; });
    state.SetItemsProcessed(state.iterations());
    report_log(state, *p);
}
BENCHMARK(BM_example_table_update);

/// Insert with a 16-character tlptm::string key (its characters are a block of their own:
/// there is no small-string optimisation), on a fresh map that grows.
void BM_hash_map_string_key_insert(benchmark::State& state) {
    std::uint64_t k = 0;
    auto p = std::make_unique<bench_pool>("map-string-insert");
    auto* r = (**p).root<string_map_root>();
    char key[17];
    for (auto _ : state) {
        if (k == map_keys / 2) {
            state.PauseTiming();
            p.reset();
            p = std::make_unique<bench_pool>("map-string-insert");
            r = (**p).root<string_map_root>();
            k = 0;
            state.ResumeTiming();
        }
        std::snprintf(key, sizeof key, "key-%012llu", static_cast<unsigned long long>(k));
        tlptm::atomic(**p, [&] { r->m.insert(std::string_view(key, 16), k); });
        ++k;
    }
    state.SetItemsProcessed(state.iterations());
    report_log(state, **p);
}
BENCHMARK(BM_hash_map_string_key_insert);

} // namespace

BENCHMARK_MAIN();
