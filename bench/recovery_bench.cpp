// Time of recovery: on a cleanly closed pool, and after a crash that leaves a full ring of
// committed entries to replay.
//
//   recovery_bench [TRANSACTIONS] [WORDS_PER_TX]     (defaults 20000 and 4)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

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

int main(int argc, char** argv) {
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
