// The user guide's snippet on changing the root in a new version of a program
// (docs/guide.md). Run: guide_versions [POOL].
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

struct config_v1 { // what version 1 of the program stored
    tlptm::p<std::uint64_t> entries;
};

// guide: begin grow
struct config { // version 2: fields are only ever added at the end
    tlptm::p<std::uint64_t> entries;
    tlptm::p<std::uint64_t> max_entries; // new in version 2
};

config* open_config(tlptm::pool& pool) {
    config* c = pool.root<config>(); // a version-1 root grows; the new bytes are zero
    if (pool.layout_version() < 2)
        tlptm::atomic(pool, [&] {
            c->max_entries = 1000;     // set up the new field...
            pool.layout_version() = 2; // ...and record it, in the same transaction
        });
    return c;
}
// guide: end

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "/dev/shm/tlptm-guide-versions.pool";
    tlptm::pool_options opt;
    opt.size = std::size_t{16} << 20;
    opt.layout = "guide-config";
    {
        // Version 1 of the program.
        tlptm::pool pool = tlptm::pool::open_or_create(path, opt);
        if (pool.root_size() == 0) {
            config_v1* c = pool.root<config_v1>();
            tlptm::atomic(pool, [&] { c->entries = 12; });
        }
    }
    // Version 2 of the program.
    tlptm::pool pool = tlptm::pool::open(path, opt);
    config* c = open_config(pool);
    std::printf("entries %llu, max %llu, layout version %llu\n",
                static_cast<unsigned long long>(c->entries.get()),
                static_cast<unsigned long long>(c->max_entries.get()),
                static_cast<unsigned long long>(pool.layout_version().get()));
    return c->entries.get() == 12 && c->max_entries.get() == 1000 ? 0 : 1;
}
