// The README's quick start, compiled: a bucket array in the root, nodes made by tlptm::make.
//
//   kv_quickstart [POOL]   (default: a file in /dev/shm, removed at the end)
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

struct node {
    tlptm::p<std::uint64_t> key, value;
    tlptm::p<node*> next;
};
struct root {
    tlptm::p<node*> buckets[1024];
    tlptm::p<std::uint64_t> count;
};

int main(int argc, char** argv) {
    bool temporary = argc < 2;
    std::string path = temporary ? (std::filesystem::is_directory("/dev/shm")
                                        ? std::filesystem::path("/dev/shm")
                                        : std::filesystem::temp_directory_path()) /
                                       "tlptm-kv-quickstart.pool"
                                 : std::filesystem::path(argv[1]);
    try {
        auto pool = tlptm::pool::open_or_create(path, {.size = std::size_t{64} << 20});
        tlptm::recovery_report r = pool.recover(); // idempotent; open() has already run it
        root* rt = pool.root<root>();              // zero-filled at creation

        tlptm::atomic(pool, [&] {          // also: [&](tlptm::tx& tx) { ... }
            node* n = tlptm::make<node>(); // AALO: n's bytes are never logged
            n->key = 42;
            n->value = 7;
            n->next = rt->buckets[3];
            rt->buckets[3] = n; // logged (redo), compressed
            rt->count += 1;
        });
        std::uint64_t c = tlptm::atomic(pool, [&] { return rt->count.get(); }); // read-only

        tlptm::stats s = pool.stats();
        std::printf("%llu node(s) in bucket 3; log %llu bytes, %llu fences, %llu AALO bytes; "
                    "recover() replayed %zu entries\n",
                    static_cast<unsigned long long>(c),
                    static_cast<unsigned long long>(s.log_bytes),
                    static_cast<unsigned long long>(s.fences),
                    static_cast<unsigned long long>(s.aalo_bytes), r.entries_replayed);
        pool.close();
        if (temporary)
            std::filesystem::remove(path);
        return c >= 1 ? 0 : 1;
    } catch (const tlptm::error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
