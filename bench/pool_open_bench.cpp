// Time to create and to open pools of growing size with a fixed number of blocks in use
// (issue: creation and opening must not cost time in proportion to the pool's size).
//
//   pool_open_bench [--sizes 1,4,16,64] [--blocks 20000] [--runs 5] [--dir /dev/shm]
//                   [--preallocate]
//
// For each size (GiB): create the pool (timed), allocate `blocks` blocks of 64 bytes in
// transactions of 100 (a linked list from the root), close; then `runs` times: open (timed:
// mapping, recovery and the heap rebuild), one allocation and its free (timed: the first
// allocation after opening), stats() (timed: it rebuilds every arena in use), close. Prints the
// median of each. Pools are created with persistent-memory emulation (CLWB + SFENCE, no msync)
// and removed afterwards; a size whose file cannot be made is reported as skipped.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tlptm/tlptm.hpp>

namespace {

struct node {
    tlptm::p<node*> next;
    tlptm::p<std::uint64_t> value[6];
};
static_assert(sizeof(node) == 56); // a 64-byte block

struct root {
    tlptm::p<node*> head;
    tlptm::p<std::uint64_t> count;
};

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<unsigned> parse_sizes(const char* s) {
    std::vector<unsigned> out;
    for (const char* p = s; *p;) {
        char* end = nullptr;
        unsigned long v = std::strtoul(p, &end, 10);
        if (end == p)
            break;
        out.push_back(static_cast<unsigned>(v));
        p = *end == ',' ? end + 1 : end;
    }
    return out;
}

std::uint64_t file_bytes_allocated(const std::string& path) {
    struct stat sb {};
    return ::stat(path.c_str(), &sb) == 0 ? static_cast<std::uint64_t>(sb.st_blocks) * 512 : 0;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<unsigned> sizes = {1, 4, 16, 64};
    std::uint64_t blocks = 20000;
    int runs = 5;
    std::string dir = "/dev/shm";
    bool preallocate = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--sizes")
            sizes = parse_sizes(next());
        else if (a == "--blocks")
            blocks = std::strtoull(next(), nullptr, 10);
        else if (a == "--runs")
            runs = std::max(1, std::atoi(next()));
        else if (a == "--dir")
            dir = next();
        else if (a == "--preallocate")
            preallocate = true;
        else {
            std::fprintf(stderr,
                         "usage: %s [--sizes 1,4,16,64] [--blocks N] [--runs N] [--dir D] "
                         "[--preallocate]\n",
                         argv[0]);
            return 2;
        }
    }

    tlptm::pool_options opt;
    opt.durability = tlptm::durability::emulate_pmem;
    opt.preallocate = preallocate;

    std::printf("%llu blocks of 64 bytes in use, %d opening(s) per size, pools in %s%s\n",
                static_cast<unsigned long long>(blocks), runs, dir.c_str(),
                preallocate ? ", preallocated" : "");
    std::printf("| pool size | create (ms) | open (ms) | first alloc after open (ms) | "
                "stats() (ms) | file bytes allocated |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (unsigned gib : sizes) {
        std::uint64_t size = std::uint64_t{gib} << 30;
        std::string path = dir + "/tlptm-open-bench-" + std::to_string(::getpid()) + ".pool";
        ::unlink(path.c_str());
        struct statvfs vfs {};
        if (preallocate && ::statvfs(dir.c_str(), &vfs) == 0 &&
            static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize < size + (size >> 2)) {
            std::printf("| %u GiB | skipped: %s has too little free space |\n", gib, dir.c_str());
            continue;
        }
        opt.size = size;
        double create_ms = 0;
        try {
            auto t0 = clock_type::now();
            auto pool = tlptm::pool::create(path, opt);
            create_ms = ms_since(t0);
            root* r = pool.root<root>();
            for (std::uint64_t done = 0; done < blocks;) {
                std::uint64_t batch = std::min<std::uint64_t>(100, blocks - done);
                tlptm::atomic(pool, [&] {
                    for (std::uint64_t k = 0; k < batch; ++k) {
                        node* n = tlptm::make<node>();
                        n->next = r->head.get();
                        n->value[0] = done + k;
                        r->head = n;
                    }
                    r->count += batch;
                });
                done += batch;
            }
            pool.close();
        } catch (const std::exception& e) {
            std::printf("| %u GiB | skipped: %s |\n", gib, e.what());
            ::unlink(path.c_str());
            continue;
        }
        std::vector<double> open_ms, alloc_ms, stats_ms;
        bool ok = true;
        for (int run = 0; run < runs && ok; ++run) {
            auto t0 = clock_type::now();
            auto pool = tlptm::pool::open(path, opt);
            open_ms.push_back(ms_since(t0));
            auto t1 = clock_type::now();
            tlptm::atomic(pool, [&] { tlptm::destroy(tlptm::make<node>()); });
            alloc_ms.push_back(ms_since(t1));
            auto t2 = clock_type::now();
            auto st = pool.stats();
            stats_ms.push_back(ms_since(t2));
            // 20 000 blocks of 64 bytes plus the root's superblock.
            std::uint64_t expect = blocks * 64 + (std::uint64_t{64} << 10);
            if (st.heap.bytes_in_use != expect) {
                std::fprintf(stderr, "%u GiB: %llu bytes in use after opening, expected %llu\n",
                             gib, static_cast<unsigned long long>(st.heap.bytes_in_use),
                             static_cast<unsigned long long>(expect));
                ok = false;
            }
        }
        std::uint64_t allocated = file_bytes_allocated(path);
        ::unlink(path.c_str());
        std::printf("| %u GiB | %.1f | %.2f | %.2f | %.2f | %.1f MiB |\n", gib, create_ms,
                    median(open_ms), median(alloc_ms), median(stats_ms),
                    static_cast<double>(allocated) / (1 << 20));
        if (!ok)
            return 1;
    }
    return 0;
}
