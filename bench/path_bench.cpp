// The transaction path alone: updates or lookups of random keys of the workloads' hash table
// (by default 100 000 keys, which stay in a server's last-level cache; --keys 2000000 does
// not), in a plain loop (no per-operation timing), so that the time per operation and an
// instruction count say what the library's path costs beyond the table walk itself.
//
//   path_bench [--op update|insert|lookup|walk] [--ops N] [--keys N] [--solo-after N]
//              [--thread-ops N] [--interrupt-us N] [--reps R] [--dir DIR]
//
// update: update_with(key, v + 1), one transaction writing one word; insert: a new key (a
// node allocated and written by the transaction, as in workloads a and b; each repetition
// inserts keys no earlier one did); lookup: a read-only transaction; walk: the same chain walk
// outside any transaction (the floor). --thread-ops N runs the operations in short-lived
// threads of N operations each, one after the other (each started once the previous one has
// exited): what a thread's first transactions and its exit cost. --interrupt-us N runs a
// second thread that updates one key every N microseconds throughout (a background thread's
// occasional transaction, which takes the pool back from a thread that runs solo). Prints the best
// of R runs' ns per operation and the run's solo share. Instructions per operation:
//
//   valgrind --tool=callgrind path_bench --ops 1000000 --reps 1   (then --ops 2000000)
//
// and divide the difference of the two totals by 1 000 000: the set-up (pool, preload) is the
// same in both and cancels. docs/design.md, "The transaction path", has the figures.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "hashtable.hpp"

namespace {

using table = tlptm_ht::hashtable<std::uint64_t>;

struct options {
    std::string op = "update";
    std::uint64_t ops = 1000000, keys = 100000;
    std::uint64_t thread_ops = 0;   ///< > 0: the operations run in threads of this many, in turn
    std::uint64_t interrupt_us = 0; ///< > 0: another thread's transaction every this many µs
    std::uint32_t solo_after = tlptm::pool_options{}.solo_after;
    int reps = 5;
    std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
};

std::uint64_t number(const char* flag, const char* v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0')
        throw std::invalid_argument(std::string(flag) + ": not a number: " + v);
    return n;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc)
            throw std::invalid_argument(a + ": a value is missing (see the file's header)");
        const char* v = argv[++i];
        if (a == "--op")
            o.op = v;
        else if (a == "--ops")
            o.ops = std::max<std::uint64_t>(1, number("--ops", v));
        else if (a == "--keys")
            o.keys = std::max<std::uint64_t>(1, number("--keys", v));
        else if (a == "--thread-ops")
            o.thread_ops = number("--thread-ops", v);
        else if (a == "--interrupt-us")
            o.interrupt_us = number("--interrupt-us", v);
        else if (a == "--solo-after")
            o.solo_after = static_cast<std::uint32_t>(number("--solo-after", v));
        else if (a == "--reps")
            o.reps = static_cast<int>(std::clamp<std::uint64_t>(number("--reps", v), 1, 100));
        else if (a == "--dir")
            o.dir = v;
        else
            throw std::invalid_argument("unknown option " + a);
    }
    if (o.op != "update" && o.op != "insert" && o.op != "lookup" && o.op != "walk")
        throw std::invalid_argument("--op: update, insert, lookup or walk");
    return o;
}

} // namespace

int main(int argc, char** argv) try {
    const options o = parse(argc, argv);
    const std::string path = o.dir + "/path_bench-" + std::to_string(getpid()) + ".pool";
    tlptm::pool_options po;
    // Room for the inserted nodes too (a 32-byte block each, with the allocator's slack).
    po.size = (std::size_t{256} << 20) +
              (o.op == "insert" ? o.ops * static_cast<std::size_t>(o.reps) * 64 : 0);
    po.durability = tlptm::durability::emulate_pmem;
    po.solo_after = o.solo_after;
    tlptm::pool pool = tlptm::pool::create(path, po);
    unlink(path.c_str()); // the mapping stays; nothing is left behind however the run ends

    table ht = table::create(pool, o.keys); // about one key per bucket
    for (std::uint64_t first = 0; first < o.keys; first += 256)
        tlptm::atomic(pool, [&] {
            for (std::uint64_t k = first; k < std::min(o.keys, first + 256); ++k)
                ht.insert(k + 1, 1);
        });
    std::mt19937_64 rng(1);
    std::vector<std::uint64_t> keys(o.ops);
    for (auto& k : keys)
        k = rng() % o.keys + 1;

    // The walk outside a transaction: plain loads of the nodes (tlptm::p reads directly when
    // no transaction runs).
    auto* root = pool.root<table::root_type>();
    const tlptm::p<table::node_type*>* heads = root->buckets.get();
    const int shift = tlptm_ht::bucket_shift(root->bucket_count);
    auto walk = [&](std::uint64_t key) {
        for (table::node_type* n = heads[tlptm_ht::bucket_index(key, shift)]; n; n = n->next)
            if (n->key == key)
                return true;
        return false;
    };

    double best = 0;
    std::uint64_t found = 0;
    const tlptm::stats before = pool.stats();
    std::atomic<bool> stop{false};
    std::uint64_t interruptions = 0;
    std::thread interrupter;
    if (o.interrupt_us != 0)
        interrupter = std::thread([&] {
            while (!stop.load(std::memory_order_relaxed)) {
                std::this_thread::sleep_for(std::chrono::microseconds(o.interrupt_us));
                ht.update_with(1, [](std::uint64_t v) { return v + 1; });
                ++interruptions;
            }
        });
    for (int r = 0; r < o.reps; ++r) {
        // Operations [i, j) of this repetition; returns how many found their key (or inserted).
        auto run_ops = [&](std::uint64_t i, std::uint64_t j) {
            std::uint64_t n = 0;
            if (o.op == "update") {
                for (; i < j; ++i)
                    n += ht.update_with(keys[i], [](std::uint64_t v) { return v + 1; }).has_value();
            } else if (o.op == "insert") {
                const std::uint64_t first = o.keys + 1 + static_cast<std::uint64_t>(r) * o.ops;
                for (; i < j; ++i)
                    n += ht.insert(first + i, 1);
            } else if (o.op == "lookup") {
                for (; i < j; ++i)
                    n += ht.lookup(keys[i]).has_value();
            } else {
                for (; i < j; ++i)
                    n += walk(keys[i]);
            }
            return n;
        };
        const auto t0 = std::chrono::steady_clock::now();
        if (o.thread_ops == 0) {
            found += run_ops(0, o.ops);
        } else { // short-lived threads, one after the other
            for (std::uint64_t i = 0; i < o.ops; i += o.thread_ops) {
                std::uint64_t n = 0;
                std::thread t([&] { n = run_ops(i, std::min(o.ops, i + o.thread_ops)); });
                t.join();
                found += n;
            }
        }
        const double ns =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                .count() /
            static_cast<double>(o.ops);
        best = r == 0 ? ns : std::min(best, ns);
    }
    stop = true;
    if (interrupter.joinable())
        interrupter.join();
    const tlptm::stats ran = pool.stats() - before;
    if (found != o.ops * static_cast<std::uint64_t>(o.reps)) {
        std::fprintf(stderr, "path_bench: %llu of %llu keys found\n",
                     static_cast<unsigned long long>(found),
                     static_cast<unsigned long long>(o.ops * static_cast<std::uint64_t>(o.reps)));
        return 1;
    }
    std::printf("path_bench: %s, %llu keys, %llu ops x %d reps: best %.1f ns/op "
                "(%.2f M ops/s); solo %.1f %% of %llu transactions",
                o.op.c_str(), static_cast<unsigned long long>(o.keys),
                static_cast<unsigned long long>(o.ops), o.reps, best, 1e3 / best,
                100.0 * ran.solo_share(), static_cast<unsigned long long>(ran.transactions()));
    if (o.interrupt_us != 0)
        std::printf("; %llu interruptions", static_cast<unsigned long long>(interruptions));
    std::printf("\n");
    pool.close();
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "path_bench: %s\n", e.what());
    return 2;
}
