// The persistent containers of docs/containers.md, compiled: a vector, a string and a hash_map
// in a pool's root, a container made with tlptm::make, and how each is freed.
//
//   containers [POOL]   (default: a file in /dev/shm, removed at the end)
#include <tlptm/tlptm.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <ranges>
#include <string>

// [root]
struct inventory {
    tlptm::vector<std::uint32_t> counts;                     // trivially copyable elements
    tlptm::string title;                                     // characters in a block of their own
    tlptm::hash_map<tlptm::string, std::uint64_t> stock;     // string keys, integer values
    tlptm::p<tlptm::hash_map<std::uint64_t, double>*> index; // made with tlptm::make
};
// [root]

int main(int argc, char** argv) {
    bool temporary = argc < 2;
    std::string path = temporary ? (std::filesystem::is_directory("/dev/shm")
                                        ? std::filesystem::path("/dev/shm")
                                        : std::filesystem::temp_directory_path()) /
                                       "tlptm-containers-example.pool"
                                 : std::filesystem::path(argv[1]);
    try {
        auto pool = tlptm::pool::open_or_create(path, {.size = std::size_t{64} << 20});
        inventory* inv = pool.root<inventory>(); // zero-filled: every container is empty

        // [vector]
        tlptm::atomic(pool, [&] {
            for (std::uint32_t i = 0; i < 10; ++i)
                inv->counts.push_back(i * i); // growth: a new buffer, written in place (AALO)
            inv->counts[3] = 100;             // a transactional store through cell<T>&
            inv->counts.at(4) += 1;
            std::ranges::sort(inv->counts, std::greater<>{}); // algorithms work on cell<T>
            inv->counts.erase(inv->counts.begin() + 8, inv->counts.end());
        });
        // Reads are allowed outside a transaction (no snapshot across elements).
        std::uint32_t total = std::accumulate(inv->counts.begin(), inv->counts.end(), 0u);
        // [vector]

        // [string]
        tlptm::atomic(pool, [&] {
            inv->title = "spring";
            inv->title += " inventory";
            inv->title.replace(0, 6, "autumn");
            std::string copy = inv->title.str(); // inside a transaction: copy it out
            if (inv->title.find("inventory") == tlptm::string::npos || copy.empty())
                throw std::logic_error("lost characters");
        });
        std::string_view committed = inv->title; // outside one: a view of the pool's bytes
        // [string]

        // [hash_map]
        tlptm::atomic(pool, [&] {
            inv->stock.insert("apples", 12);
            inv->stock.insert_or_assign("pears", 7);
            inv->stock["plums"] += 3; // inserted as 0, then incremented
            inv->stock.erase("pears");
            auto* idx = tlptm::make<tlptm::hash_map<std::uint64_t, double>>();
            for (std::uint64_t k = 0; k < 1000; ++k) // grows by incremental rehashing
                idx->insert(k, static_cast<double>(k) / 4);
            inv->index = idx;
        });
        std::uint64_t apples = inv->stock.at("apples");
        for (const auto& [name, count] : inv->stock)
            std::printf("  %s: %llu\n", name.str().c_str(),
                        static_cast<unsigned long long>(count.get()));
        // [hash_map]

        std::printf("counts: %u in %zu elements; title: \"%.*s\"; apples: %llu; index: %zu "
                    "keys in %zu buckets\n",
                    total, inv->counts.size(), static_cast<int>(committed.size()), committed.data(),
                    static_cast<unsigned long long>(apples), inv->index.get()->size(),
                    inv->index.get()->bucket_count());

        // [destroy]
        tlptm::atomic(pool, [&] {
            tlptm::destroy(inv->index.get()); // frees the nodes, the tables, then the object
            inv->index = nullptr;
            inv->stock.destroy(); // members of the root: free what they own
            inv->title.destroy();
            inv->counts.destroy();
        });
        // [destroy]
        pool.close();
        if (temporary)
            std::filesystem::remove(path);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "containers: %s\n", e.what());
        if (temporary)
            std::filesystem::remove(path);
        return 1;
    }
}
