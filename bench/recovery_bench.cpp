// Time of recovery: on a cleanly closed pool, and after a crash that leaves a full ring of
// committed entries to replay.
//
//   recovery_bench [TRANSACTIONS] [WORDS_PER_TX]     (defaults 20000 and 4)
//   recovery_bench full [WORDS_PER_TX]              every ring of a default pool (256 MiB, 16
//                                                   slots of 1 MiB) filled by its own thread,
//                                                   then a crash: the longest recovery there is
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <tlptm/tlptm.hpp>

namespace {
struct root {
    tlptm::p<std::uint64_t> words[4096];
};

void print(const char* what, const tlptm::recovery_report& r) {
    std::printf("%-34s %9.3f ms  entries replayed %7zu  records %8zu  log bytes scanned %9zu\n",
                what, static_cast<double>(r.duration.count()) / 1e6, r.entries_replayed,
                r.records_replayed, r.log_bytes_scanned);
}
} // namespace

/// The "full" mode: 16 threads, one per slot, each commits until its ring is nearly full (no
/// checkpoint runs, so CT stays at 0), then the process ends without closing the pool.
int every_ring_full(const std::string& path, int words) {
    tlptm::pool_options o; // the defaults: 256 MiB, 16 slots, 1 MiB rings
    o.durability = tlptm::durability::emulate_pmem;
    unsigned slots = o.max_threads;
    std::size_t ring_bytes = 0;
    {
        auto p = tlptm::pool::create(path, o);
        ring_bytes = p.state_ptr()->slots.front()->ring.capacity();
    }
    pid_t child = ::fork();
    if (child == 0) {
        auto p = tlptm::pool::open(path, o);
        auto* r = p.root<root>();
        // Bytes of one entry, measured on the first transactions (their values are small).
        auto tx = [&](long t) {
            tlptm::atomic(p, [&] {
                for (int i = 0; i < words; ++i)
                    // Small values (one-byte varints) keep every entry of the size probed.
                    r->words[(t * 7 + i * 131) % 4096] = static_cast<std::uint64_t>(t % 61);
            });
        };
        const tlptm::stats s0 = p.stats();
        for (long t = 0; t < 100; ++t)
            tx(t);
        const double per_entry = static_cast<double>((p.stats() - s0).log_bytes) / 100;
        // Leave room for the worst entry: the thread that made the probe entries also fills.
        const long per_thread =
            static_cast<long>(static_cast<double>(ring_bytes) * 0.9 / per_entry);
        // A thread keeps its slot until it exits: the workers wait for each other before they
        // end, so that no ring is taken over (and wrapped) by a later thread. This thread, which
        // holds a slot already, fills it too.
        std::atomic<unsigned> finished{0};
        auto fill = [&](unsigned k) {
            for (long t = 0; t < per_thread - (k == 0 ? 100 : 0); ++t)
                tx(static_cast<long>(k) * per_thread + t);
            finished.fetch_add(1);
            while (finished.load() < slots)
                std::this_thread::yield();
        };
        std::vector<std::thread> threads;
        for (unsigned k = 1; k < slots; ++k)
            threads.emplace_back(fill, k);
        fill(0);
        for (auto& th : threads)
            th.join();
        std::printf("filled %u rings of %zu bytes: %ld transactions of %d words each, %.1f log "
                    "bytes per entry\n",
                    slots, ring_bytes, per_thread, words, per_entry);
        std::fflush(stdout);
        ::_exit(0); // crash: no close, no checkpoint
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    auto p = tlptm::pool::open(path, o);
    print("open after crash, every ring full", p.last_recovery());
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "full") {
        std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                        ? "/dev/shm"
                                        : std::filesystem::temp_directory_path();
        std::string path = (dir / ("tlptm-recovery-bench-" + std::to_string(::getpid()) + ".pool"));
        int rc = 1;
        try {
            rc = every_ring_full(path, argc > 2 ? std::atoi(argv[2]) : 4);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", e.what());
        }
        std::filesystem::remove(path);
        return rc;
    }
    long txs = argc > 1 ? std::atol(argv[1]) : 20000;
    int words = argc > 2 ? std::atoi(argv[2]) : 4;
    std::filesystem::path dir = std::filesystem::is_directory("/dev/shm")
                                    ? "/dev/shm"
                                    : std::filesystem::temp_directory_path();
    std::string path = (dir / ("tlptm-recovery-bench-" + std::to_string(::getpid()) + ".pool"));
    tlptm::pool_options o;
    o.size = std::size_t{128} << 20;
    o.max_threads = 2;
    o.log_capacity = std::size_t{16} << 20;
    o.durability = tlptm::durability::emulate_pmem;
    try {
        { tlptm::pool::create(path, o); }
        {
            auto p = tlptm::pool::open(path, o);
            print("recover() on a clean pool (open)", p.last_recovery());
            print("recover() again on the open pool", p.recover());
        }
        pid_t child = ::fork();
        if (child == 0) {
            auto p = tlptm::pool::open(path, o);
            auto* r = p.root<root>();
            for (long t = 0; t < txs; ++t)
                tlptm::atomic(p, [&] {
                    for (int i = 0; i < words; ++i)
                        r->words[(t * 7 + i * 131) % 4096] = static_cast<std::uint64_t>(t);
                });
            ::_exit(0); // crash: no close, no checkpoint
        }
        int status = 0;
        ::waitpid(child, &status, 0);
        auto p = tlptm::pool::open(path, o);
        char what[64];
        std::snprintf(what, sizeof what, "open after crash (%ld tx x %d w)", txs, words);
        print(what, p.last_recovery());
        p.close();
        auto q = tlptm::pool::open(path, o);
        print("open after that (nothing left)", q.last_recovery());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::filesystem::remove(path);
        return 1;
    }
    std::filesystem::remove(path);
    return 0;
}
