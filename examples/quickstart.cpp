// The quick start of the README: a persistent counter and a small array updated atomically.
//
//   quickstart [POOL]   (default: /dev/shm/tlptm-quickstart.pool, or $TMPDIR)
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

struct root {
    tlptm::p<std::uint64_t> runs;
    tlptm::p<std::uint64_t> slots[8];
};

int main(int argc, char** argv) {
    std::string path =
        argc > 1 ? argv[1]
        : std::filesystem::is_directory("/dev/shm")
            ? "/dev/shm/tlptm-quickstart.pool"
            : (std::filesystem::temp_directory_path() / "tlptm-quickstart.pool").string();
    try {
        auto pool = tlptm::pool::open_or_create(path, {.size = std::size_t{64} << 20});
        const tlptm::recovery_report& r = pool.last_recovery();
        std::printf("pool %s: recovery replayed %zu entries in %.3f ms\n", path.c_str(),
                    r.entries_replayed, static_cast<double>(r.duration.count()) / 1e6);
        root* rt = pool.root<root>();
        // All nine words change together or not at all.
        std::uint64_t run = tlptm::atomic(pool, [&] {
            rt->runs += 1;
            for (auto& s : rt->slots)
                s += rt->runs.get();
            return rt->runs.get();
        });
        std::uint64_t sum = tlptm::atomic(pool, [&] {
            std::uint64_t t = 0;
            for (auto& s : rt->slots)
                t += s;
            return t;
        });
        tlptm::stats st = pool.stats();
        std::printf("run %llu: slots sum to %llu (expected %llu); %llu log bytes, %llu fences\n",
                    static_cast<unsigned long long>(run), static_cast<unsigned long long>(sum),
                    static_cast<unsigned long long>(8 * run * (run + 1) / 2),
                    static_cast<unsigned long long>(st.log_bytes),
                    static_cast<unsigned long long>(st.fences));
        return sum == 8 * run * (run + 1) / 2 ? 0 : 1;
    } catch (const tlptm::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
