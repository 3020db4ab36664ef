// The user guide's snippets on threads, exceptions and nesting (docs/guide.md).
// Run: guide_threads [POOL].
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct counters {
    tlptm::p<std::uint64_t> hits;
    tlptm::p<std::uint64_t> misses;
};

// guide: begin nested
void record_hit(tlptm::pool& pool, counters* c) {
    tlptm::atomic(pool, [&] { c->hits += 1; }); // nested when the caller is in a transaction
}

void nested_example(tlptm::pool& pool, counters* c) {
    try {
        tlptm::atomic(pool, [&] {
            c->misses += 1;
            try {
                tlptm::atomic(pool, [&] {
                    record_hit(pool, c);
                    throw std::runtime_error("inner failure");
                });
            } catch (const std::runtime_error&) {
                // Caught, but too late: the whole transaction will abort. Neither misses nor
                // hits change; the outermost atomic rethrows "inner failure".
            }
        });
    } catch (const std::runtime_error& e) {
        std::printf("aborted: %s\n", e.what());
    }
}
// guide: end

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "/dev/shm/tlptm-guide-threads.pool";
    tlptm::pool_options opt;
    opt.size = std::size_t{32} << 20;
    opt.layout = "guide-threads";
    opt.max_threads = 8; // 4 workers and the main thread
    tlptm::pool pool = tlptm::pool::open_or_create(path, opt);
    counters* c = pool.root<counters>();
    const std::uint64_t before = c->hits;

    // guide: begin threads
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
        workers.emplace_back([&] {
            for (int i = 0; i < 1000; ++i)
                tlptm::atomic(pool, [&] { c->hits += 1; }); // conflicts are retried
        });
    for (auto& w : workers)
        w.join();
    // guide: end

    nested_example(pool, c);

    // guide: begin errors
    try {
        tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.alloc(std::size_t{1} << 40); });
    } catch (const tlptm::out_of_memory& e) { // or tlptm::error, or std::exception
        std::printf("%s\n", e.what());        // the transaction was aborted
    }
    // guide: end

    const std::uint64_t after = c->hits;
    std::printf("hits %llu -> %llu\n", static_cast<unsigned long long>(before),
                static_cast<unsigned long long>(after));
    return after == before + 4000 ? 0 : 1;
}
