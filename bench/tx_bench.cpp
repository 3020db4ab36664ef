// Micro-benchmarks of transactions: empty, 1-word and 10-word updates, read-only, a 4-level
// pointer chase, dependent reads that miss the caches (against plain loads), allocation, and a bulk
// load of many nodes in one transaction. Each reports, per transaction, the fences, flushed lines
// and log bytes that pool::stats() counted, next to the time.
//
// The pool lives in /dev/shm (or $TLPTM_BENCH_DIR) with persistent-memory emulation on (CPU
// flushes, no msync); TLPTM_EMULATE_WRITE_NS adds the emulated write latency per line.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include <tlptm/tlptm.hpp>

#include "../examples/hashtable/floor.hpp"

namespace {

struct chase_node {
    tlptm::p<chase_node*> next;
    tlptm::p<std::uint64_t> value;
};

/// A multi-word value, as a hash table's value of --value-size bytes.
template <std::size_t Bytes> struct blob { std::uint64_t w[Bytes / 8]; };

struct bench_root {
    tlptm::p<std::uint64_t> words[64];
    chase_node chain[4];
    tlptm::p<blob<1024>> big; ///< 64-byte aligned (the root is)
};

std::string bench_path() {
    const char* d = std::getenv("TLPTM_BENCH_DIR");
    std::filesystem::path dir = d && *d ? d : "/dev/shm";
    if (!std::filesystem::is_directory(dir))
        dir = std::filesystem::temp_directory_path();
    return (dir / ("tlptm-bench-" + std::to_string(::getpid()) + ".pool")).string();
}

/// One pool per benchmark run, in the log mode given by the benchmark's first argument.
struct bench_pool {
    explicit bench_pool(tlptm::log_mode mode) : path(bench_path()) {
        std::filesystem::remove(path);
        tlptm::pool_options o;
        o.size = std::size_t{64} << 20;
        o.max_threads = 4;
        o.mode = mode;
        o.durability = tlptm::durability::emulate_pmem;
        pool = tlptm::pool::create(path, o);
        root = pool.root<bench_root>();
        tlptm::atomic(pool, [&] {
            for (int i = 0; i < 4; ++i) {
                root->chain[i].next = i < 3 ? &root->chain[i + 1] : nullptr;
                root->chain[i].value = static_cast<std::uint64_t>(i + 1);
            }
        });
    }
    ~bench_pool() {
        pool.close();
        std::filesystem::remove(path);
    }
    std::string path;
    tlptm::pool pool;
    bench_root* root = nullptr;
};

void report(benchmark::State& state, const tlptm::stats& d) {
    auto n = static_cast<double>(state.iterations());
    state.counters["fences/tx"] = static_cast<double>(d.fences) / n;
    state.counters["lines/tx"] = static_cast<double>(d.flushed_lines) / n;
    state.counters["logB/tx"] = static_cast<double>(d.log_bytes) / n;
    state.counters["pmB/tx"] = static_cast<double>(d.pm_bytes_written()) / n;
    state.SetLabel(tlptm::to_string(static_cast<tlptm::log_mode>(state.range(0))));
}

template <int Words> void bm_update(benchmark::State& state) {
    bench_pool b(static_cast<tlptm::log_mode>(state.range(0)));
    tlptm::atomic(b.pool, [&] { b.root->words[0] = 1; }); // warm the ring
    auto s0 = b.pool.stats();
    std::uint64_t v = 0;
    for (auto _ : state) {
        ++v;
        tlptm::atomic(b.pool, [&] {
            for (int i = 0; i < Words; ++i)
                b.root->words[i * 3] = v + static_cast<std::uint64_t>(i);
        });
    }
    report(state, b.pool.stats() - s0);
}

void bm_empty_update(benchmark::State& state) {
    bench_pool b(static_cast<tlptm::log_mode>(state.range(0)));
    auto s0 = b.pool.stats();
    for (auto _ : state)
        tlptm::atomic(b.pool, [] {});
    report(state, b.pool.stats() - s0);
}

void bm_read_only(benchmark::State& state) {
    bench_pool b(static_cast<tlptm::log_mode>(state.range(0)));
    auto s0 = b.pool.stats();
    for (auto _ : state) {
        std::uint64_t x = tlptm::atomic(b.pool, [&] { return b.root->words[5].get(); });
        benchmark::DoNotOptimize(x);
    }
    report(state, b.pool.stats() - s0);
}

void bm_pointer_chase(benchmark::State& state) {
    bench_pool b(static_cast<tlptm::log_mode>(state.range(0)));
    auto s0 = b.pool.stats();
    for (auto _ : state) {
        std::uint64_t sum = tlptm::atomic(b.pool, [&] {
            std::uint64_t t = 0;
            for (chase_node* n = &b.root->chain[0]; n != nullptr; n = n->next)
                t += n->value;
            return t;
        });
        benchmark::DoNotOptimize(sum);
    }
    report(state, b.pool.stats() - s0);
}

/// A read-modify-write of a `Bytes`-byte value (range(1)), as an update of a hash table's
/// value: one transactional read of the whole value, one store of the whole new value. Measures
/// the per-word cost of the read path, the write-set, the entry's encoding and the write-back.
void bm_value_update(benchmark::State& state) {
    bench_pool b(static_cast<tlptm::log_mode>(state.range(0)));
    const auto bytes = static_cast<std::size_t>(state.range(1));
    auto* value = reinterpret_cast<std::uint64_t*>(&b.root->big);
    std::uint64_t buf[1024 / 8];
    auto s0 = b.pool.stats();
    for (auto _ : state) {
        tlptm::atomic(b.pool, [&](tlptm::tx& tx) {
            tx.read(buf, value, bytes);
            for (std::size_t i = 0; i < bytes / 8; ++i)
                ++buf[i];
            tx.write(value, buf, bytes);
        });
    }
    report(state, b.pool.stats() - s0);
    state.SetLabel(std::string(tlptm::to_string(static_cast<tlptm::log_mode>(state.range(0)))) +
                   " " + std::to_string(bytes) + " B");
}

/// A read-only transaction that reads a `Bytes`-byte value (range(1)) with one call.
void bm_value_read(benchmark::State& state) {
    bench_pool b(tlptm::log_mode::tlptm);
    const auto bytes = static_cast<std::size_t>(state.range(0));
    const auto* value = reinterpret_cast<const std::uint64_t*>(&b.root->big);
    std::uint64_t buf[1024 / 8];
    for (auto _ : state) {
        tlptm::atomic(b.pool, [&](tlptm::tx& tx) { tx.read(buf, value, bytes); });
        benchmark::DoNotOptimize(buf);
    }
}

/// Shared by the threads of the multi-threaded benchmarks: made by thread 0 before the loop
/// (the loop's start is a barrier), removed by thread 0 after it.
std::unique_ptr<bench_pool> shared_pool;

/// Update throughput with 1 or 2 threads: each transaction writes 4 words that are the
/// thread's own (range(0) = 0: disjoint, different orecs) or the same for every thread
/// (range(0) = 1: overlapping, every pair of concurrent transactions conflicts).
void bm_update_threads(benchmark::State& state) {
    if (state.thread_index() == 0)
        shared_pool = std::make_unique<bench_pool>(tlptm::log_mode::tlptm);
    bool overlap = state.range(0) == 1;
    std::size_t first = overlap ? 0 : 16 * static_cast<std::size_t>(state.thread_index());
    tlptm::stats s0;
    if (state.thread_index() == 0)
        s0 = shared_pool->pool.stats();
    std::uint64_t v = 0;
    for (auto _ : state) {
        ++v;
        tlptm::atomic(shared_pool->pool, [&] {
            for (std::size_t i = 0; i < 4; ++i)
                shared_pool->root->words[first + i] += v;
        });
    }
    if (state.thread_index() == 0) {
        auto d = shared_pool->pool.stats() - s0;
        double n = static_cast<double>(d.tx_committed);
        state.counters["aborts/tx"] = static_cast<double>(d.tx_aborted) / n;
        state.counters["fences/tx"] = static_cast<double>(d.fences) / n;
        state.SetLabel(overlap ? "overlapping" : "disjoint");
        shared_pool.reset();
    }
    state.SetItemsProcessed(state.iterations());
}

/// What a transactional read costs on data that misses every cache: four dependent loads per
/// iteration along a random cycle through the lines of a 96 MiB block of the pool, as plain
/// loads (range(0) = 0) and as one read-only transaction of four p<T> reads (range(0) = 1).
/// The difference per load is the read path's own cost (orec sample, re-check, snapshot) when
/// the data is a miss, as in a walk of a large table; the plain row is the memory's floor.
void bm_miss_chase(benchmark::State& state) {
    const bool tx_reads = state.range(0) != 0;
    const std::string path = bench_path();
    std::filesystem::remove(path);
    tlptm::pool_options o;
    o.size = std::size_t{160} << 20;
    o.durability = tlptm::durability::emulate_pmem;
    tlptm::pool pool = tlptm::pool::create(path, o);
    constexpr std::size_t bytes = std::size_t{96} << 20, lines = bytes / 64;
    auto* words = static_cast<std::uint64_t*>(
        tlptm::atomic(pool, [&](tlptm::tx& tx) { return tx.alloc(bytes); }));
    // A random cycle through its lines, written with plain stores: the benchmark reads it in
    // this opening only.
    workloads::write_random_cycle(words, lines, 8);
    auto* cells = reinterpret_cast<tlptm::p<std::uint64_t>*>(words);
    std::uint64_t at = 0;
    for (auto _ : state) {
        if (tx_reads) {
            at = tlptm::atomic(pool, [&] {
                std::uint64_t y = at;
                for (int h = 0; h < 4; ++h)
                    y = cells[y * 8].get();
                return y;
            });
        } else {
            for (int h = 0; h < 4; ++h)
                at = *static_cast<volatile std::uint64_t*>(&words[at * 8]);
        }
    }
    benchmark::DoNotOptimize(at);
    state.SetLabel(tx_reads ? "read-only tx, 4 dependent reads" : "4 dependent plain loads");
    state.SetItemsProcessed(state.iterations() * 4);
    pool.close();
    std::filesystem::remove(path);
}

/// One transaction that allocates a 32-byte node and one that frees it, per iteration.
void bm_alloc_free(benchmark::State& state) {
    if (state.thread_index() == 0)
        shared_pool = std::make_unique<bench_pool>(tlptm::log_mode::tlptm);
    for (auto _ : state) {
        chase_node* n = tlptm::atomic(shared_pool->pool, [&] { return tlptm::make<chase_node>(); });
        tlptm::atomic(shared_pool->pool, [&] { tlptm::destroy(n); });
    }
    if (state.thread_index() == 0)
        shared_pool.reset();
    state.SetItemsProcessed(state.iterations());
}

/// A bulk load: one transaction makes range(0) nodes, linking each in front of a list and
/// walking three links of it (as building a structure reads what it just built); the list is
/// freed untimed. Stores and reads into the transaction's own blocks are AALO lookups, so this
/// measures their cost as the transaction grows (before an index of the older blocks, each
/// scanned all of them: quadratic).
void bm_bulk_load(benchmark::State& state) {
    bench_pool bp(tlptm::log_mode::tlptm);
    const auto n = static_cast<int>(state.range(0));
    for (auto _ : state) {
        tlptm::atomic(bp.pool, [&] {
            chase_node* head = nullptr;
            for (int i = 0; i < n; ++i) {
                auto* x = tlptm::make<chase_node>();
                x->next = head;
                x->value = static_cast<std::uint64_t>(i);
                head = x;
                chase_node* y = head;
                for (int k = 0; k < 3 && y != nullptr; ++k)
                    y = y->next;
                benchmark::DoNotOptimize(y);
            }
            bp.root->chain[0].next = head;
        });
        state.PauseTiming();
        tlptm::atomic(bp.pool, [&] {
            for (chase_node* x = bp.root->chain[0].next; x != nullptr;) {
                chase_node* next = x->next;
                tlptm::destroy(x);
                x = next;
            }
            bp.root->chain[0].next = nullptr;
        });
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * n); // nodes per second
}

void modes(benchmark::internal::Benchmark* b) {
    for (auto m : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm})
        b->Arg(static_cast<int>(m));
}

} // namespace

BENCHMARK(bm_empty_update)->Apply(modes);
BENCHMARK(bm_update<1>)->Apply(modes);
BENCHMARK(bm_update<10>)->Apply(modes);
BENCHMARK(bm_read_only)->Apply(modes);
BENCHMARK(bm_pointer_chase)->Apply(modes);
BENCHMARK(bm_miss_chase)->Arg(0)->Arg(1);
BENCHMARK(bm_update_threads)->Arg(0)->Arg(1)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bm_alloc_free)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bm_value_update)
    ->ArgsProduct({{static_cast<int>(tlptm::log_mode::tlptm)}, {8, 64, 256, 1024}});
BENCHMARK(bm_value_read)->Arg(8)->Arg(64)->Arg(256)->Arg(1024);
BENCHMARK(bm_bulk_load)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
