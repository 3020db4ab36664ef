// The user guide's snippets on variable-size data and on pointers to volatile memory
// (docs/guide.md). Run: guide_blob [POOL].
#include <tlptm/tlptm.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>

// guide: begin blob
// A value of any length: a header and its bytes in ONE block of tx.alloc.
struct blob {
    tlptm::p<std::uint64_t> size;
    char* bytes() { return reinterpret_cast<char*>(this + 1); } // right after the header
};

blob* make_blob(tlptm::tx& tx, std::string_view text) {
    auto* b = static_cast<blob*>(tx.alloc(sizeof(blob) + text.size()));
    b->size = text.size();
    tx.write(b->bytes(), text.data(), text.size());
    return b;
}

std::string read_blob(tlptm::pool& pool, blob* b) {
    return tlptm::atomic(pool, [&](tlptm::tx& tx) {
        std::string s(b->size.get(), '\0');
        tx.read(s.data(), b->bytes(), s.size());
        return s;
    });
}
// guide: end

// guide: begin volatile
struct session { // lives in DRAM, rebuilt at every start
    std::string user;
};
std::unordered_map<std::uint64_t, session> sessions; // volatile

struct root {
    tlptm::p<blob*> greeting;             // a pointer into the pool: fine, the pool maps at
                                          // the same address in every run
    tlptm::p<std::uint64_t> last_session; // a KEY of the volatile table, never a session*
};
// guide: end

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "/dev/shm/tlptm-guide-blob.pool";
    tlptm::pool_options opt;
    opt.size = std::size_t{16} << 20;
    opt.layout = "guide-blob";
    tlptm::pool pool = tlptm::pool::open_or_create(path, opt);
    root* r = pool.root<root>();

    // guide: begin replace
    tlptm::atomic(pool, [&](tlptm::tx& tx) {
        blob* old = r->greeting;
        r->greeting = make_blob(tx, "hello, persistent world");
        if (old)
            tx.free(old); // at commit; the block is reused once no one can still see it
    });
    // guide: end
    sessions[7] = session{"ada"};
    tlptm::atomic(pool, [&] { r->last_session = 7; });

    std::string text = read_blob(pool, r->greeting);
    std::printf("%s (session of %s)\n", text.c_str(), sessions.at(r->last_session).user.c_str());
    return text == "hello, persistent world" ? 0 : 1;
}
