// The public API: pools, p<T>, tlptm::atomic, tx.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

struct twelve {
    std::uint32_t a, b, c;
};
struct twenty_four {
    std::uint64_t x, y;
    std::int32_t z;
    char tag[4];
};

#pragma pack(push, 1)
struct packed_fields {
    std::uint8_t pad1;
    tlptm::p<std::uint64_t, 1> unaligned64; // at offset 1: spans two words
    tlptm::p<std::uint16_t, 1> unaligned16; // at offset 9
    std::uint8_t pad2[5];
    tlptm::p<twelve, 1> unaligned12; // at offset 16
};
#pragma pack(pop)
static_assert(offsetof(packed_fields, unaligned64) == 1);
static_assert(offsetof(packed_fields, unaligned16) == 9);
static_assert(offsetof(packed_fields, unaligned12) == 16);
static_assert(alignof(tlptm::p<std::uint64_t, 1>) == 1);

struct node {
    tlptm::p<std::uint64_t> key;
    tlptm::p<node*> next;
};

struct api_root {
    tlptm::p<std::uint8_t> u8;
    tlptm::p<std::int16_t> i16;
    tlptm::p<std::uint32_t> u32;
    tlptm::p<std::uint64_t> u64;
    tlptm::p<twelve> t12;
    tlptm::p<twenty_four> t24;
    tlptm::p<double> dbl;
    packed_fields packed;
    tlptm::p<node*> head;
    node nodes[4];
    tlptm::p<std::uint64_t> words[64];
    std::uint64_t raw[16]; // plain words, written through tx.store / tx.write
};

static_assert(sizeof(tlptm::p<twelve>) == 12);
static_assert(sizeof(tlptm::p<std::uint8_t>) == 1);
static_assert(alignof(tlptm::p<std::uint64_t>) == alignof(std::uint64_t));

} // namespace

TEST_CASE("create, write, close, reopen in another process") {
    tlptm_test::temp_path path("roundtrip");
    {
        auto pool = tlptm::pool::create(path, tlptm_test::small_options());
        auto* r = pool.root<api_root>();
        CHECK(r->u64.get() == 0); // zero-filled at creation
        tlptm::atomic(pool, [&] {
            r->u64 = 0x1122334455667788ull;
            r->u8 = 7;
            r->t24 = twenty_four{1, 2, -3, {'a', 'b', 'c', 'd'}};
        });
    }
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The child checks the parent's data and adds its own.
        int rc = 0;
        try {
            auto pool = tlptm::pool::open(path, tlptm_test::small_options());
            auto* r = pool.root<api_root>();
            if (r->u64.get() != 0x1122334455667788ull || r->u8.get() != 7)
                rc = 2;
            if (r->t24.get().z != -3 || r->t24.get().tag[3] != 'd')
                rc = 3;
            tlptm::atomic(pool, [&] { r->u32 = 4242; });
        } catch (...) {
            rc = 4;
        }
        ::_exit(rc);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    auto pool = tlptm::pool::open(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    CHECK(r->u32.get() == 4242);
    CHECK(r->u64.get() == 0x1122334455667788ull);
    CHECK(pool.last_recovery().entries_replayed == 0); // clean close: nothing to replay
}

TEST_CASE("p<T> of 1, 2, 4, 8, 12 and 24 bytes, double, and unaligned fields") {
    tlptm_test::temp_path path("ptypes");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] {
        r->u8 = 0xAB;
        r->i16 = -12345;
        r->u32 = 0xDEADBEEF;
        r->u64 = ~std::uint64_t{0} - 5;
        r->t12 = twelve{1, 2, 3};
        r->t24 = twenty_four{0x0102030405060708ull, 9, -10, {'w', 'x', 'y', 'z'}};
        r->dbl = 3.25;
        r->packed.unaligned64 = 0xA1A2A3A4A5A6A7A8ull;
        r->packed.unaligned16 = 0xBEEF;
        r->packed.unaligned12 = twelve{7, 8, 9};
    });
    // Neighbouring bytes are untouched by sub-word and unaligned stores.
    CHECK(r->packed.pad1 == 0);
    CHECK(r->packed.pad2[0] == 0);
    pool.close();
    pool = tlptm::pool::open(path, tlptm_test::small_options());
    r = pool.root<api_root>();
    CHECK(r->u8.get() == 0xAB);
    CHECK(r->i16.get() == -12345);
    CHECK(r->u32.get() == 0xDEADBEEF);
    CHECK(r->u64.get() == ~std::uint64_t{0} - 5);
    CHECK(r->t12.get().c == 3);
    CHECK(r->t24.get().x == 0x0102030405060708ull);
    CHECK(r->t24.get().z == -10);
    CHECK(r->t24.get().tag[0] == 'w');
    CHECK(r->dbl.get() == 3.25);
    CHECK(r->packed.unaligned64.get() == 0xA1A2A3A4A5A6A7A8ull);
    CHECK(r->packed.unaligned16.get() == 0xBEEF);
    CHECK(r->packed.unaligned12.get().b == 8);
    // A sub-word store leaves the rest of its word alone.
    tlptm::atomic(pool, [&] { r->i16 = 1; });
    CHECK(r->u8.get() == 0xAB);
    CHECK(r->u32.get() == 0xDEADBEEF);
}

TEST_CASE("reads see the transaction's own writes; other memory sees them only at commit") {
    tlptm_test::temp_path path("row");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] {
        r->u64 = 10;
        CHECK(r->u64.get() == 10);
        // Redo log: the pool itself is untouched until commit.
        std::uint64_t raw;
        std::memcpy(&raw, &r->u64, 8);
        CHECK(raw == 0);
        r->u64 += 5;
        r->u64 *= 2;
        ++r->u64;
        CHECK(r->u64.get() == 31);
        r->packed.unaligned64 = 0x1111111111111111ull;
        r->packed.unaligned16 = 0x2222;
        CHECK(r->packed.unaligned64.get() == 0x1111111111111111ull);
        CHECK(r->packed.unaligned16.get() == 0x2222);
    });
    CHECK(r->u64.get() == 31);
}

TEST_CASE("atomic returns the lambda's result; both lambda forms") {
    tlptm_test::temp_path path("ret");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    int v = tlptm::atomic(pool, [&] {
        r->u32 = 41;
        return static_cast<int>(r->u32.get()) + 1;
    });
    CHECK(v == 42);
    std::uint64_t w = tlptm::atomic(pool, [&](tlptm::tx& tx) {
        tx.store(&r->raw[3], std::uint64_t{99});
        std::uint64_t x = 123;
        tx.write(&r->raw[4], &x, sizeof x);
        return tx.load(&r->raw[3]) + tx.load(&r->raw[4]);
    });
    CHECK(w == 222);
    CHECK(r->raw[4] == 123);
    tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.memcpy(&r->raw[10], &r->raw[3], 16); });
    CHECK(r->raw[10] == 99);
    CHECK(r->raw[11] == 123);
}

namespace {
/// A result the ABI returns through memory: tlptm::atomic builds it in place and commits after
/// (detail::invoke_and_commit), the commit running from a destructor.
struct big_result {
    std::uint64_t seen;
    std::uint64_t copy[7];
};
static_assert(tlptm::detail::returned_in_memory<big_result>);
static_assert(tlptm::detail::returned_in_memory<std::optional<std::array<std::uint64_t, 32>>>);
static_assert(!tlptm::detail::returned_in_memory<std::optional<std::uint64_t>>);
} // namespace

TEST_CASE("a result returned through memory: built before the commit, dropped when the commit "
          "throws") {
    tlptm_test::temp_path path("bigret");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    auto fill = [&](std::uint64_t v) {
        big_result b{};
        b.seen = v;
        for (auto& c : b.copy)
            c = v * 3;
        return b;
    };
    SUBCASE("the value, and the stores, of the committed attempt") {
        big_result b = tlptm::atomic(pool, [&] {
            r->u64 = 7;
            return fill(r->u64.get());
        });
        CHECK(b.seen == 7);
        CHECK(b.copy[6] == 21);
        CHECK(r->u64.get() == 7);
    }
    SUBCASE("conflicts at commit retry the whole function; each caller gets its own attempt's "
            "value") {
        // Two threads add to one counter; validation fails at commit now and then (the
        // commit's tx_retry leaves the destructor), and the retried attempt builds the result
        // again. Every value is seen once, and the counter holds the sum.
        constexpr int per_thread = 2000;
        std::array<std::vector<std::uint64_t>, 2> seen;
        std::array<std::thread, 2> ts;
        for (int k = 0; k < 2; ++k)
            ts[k] = std::thread([&, k] {
                for (int i = 0; i < per_thread; ++i) {
                    big_result b = tlptm::atomic(pool, [&] {
                        std::uint64_t v = r->u64.get() + 1;
                        r->u64 = v;
                        return fill(v);
                    });
                    CHECK(b.copy[0] == 3 * b.seen);
                    seen[k].push_back(b.seen);
                }
            });
        for (auto& t : ts)
            t.join();
        CHECK(r->u64.get() == 2 * per_thread);
        std::vector<std::uint64_t> all(seen[0]);
        all.insert(all.end(), seen[1].begin(), seen[1].end());
        std::sort(all.begin(), all.end());
        for (std::size_t i = 0; i < all.size(); ++i)
            REQUIRE(all[i] == i + 1);
        MESSAGE("attempts aborted (retried): " << pool.stats().tx_aborted);
    }
    SUBCASE("an exception that left a nested atomic is thrown by the commit: nothing stays") {
        tlptm::atomic(pool, [&] { r->u64 = 1; });
        CHECK_THROWS_AS(tlptm::atomic(pool,
                                      [&] {
                                          r->u64 = 2;
                                          try {
                                              tlptm::atomic(
                                                  pool, [&] { throw std::runtime_error("inner"); });
                                          } catch (const std::runtime_error&) {
                                              // swallowed here; the commit rethrows it
                                          }
                                          return fill(2);
                                      }),
                        std::runtime_error);
        CHECK(r->u64.get() == 1);
        big_result b = tlptm::atomic(pool, [&] { return fill(r->u64.get()); });
        CHECK(b.seen == 1);
    }
    SUBCASE("the function's own exception: no commit, and it propagates") {
        auto before = pool.stats();
        CHECK_THROWS_AS(tlptm::atomic(pool,
                                      [&]() -> big_result {
                                          r->u64 = 9;
                                          throw std::runtime_error("boom");
                                      }),
                        std::runtime_error);
        auto d = pool.stats() - before;
        CHECK(d.tx_committed == 0);
        CHECK(d.log_bytes == 0);
        CHECK(r->u64.get() == 0);
    }
}

TEST_CASE("an exception aborts: nothing of the transaction stays, and it propagates") {
    tlptm_test::temp_path path("abort");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] { r->u64 = 1; });
    auto before = pool.stats();
    CHECK_THROWS_AS(tlptm::atomic(pool,
                                  [&] {
                                      r->u64 = 2;
                                      r->u32 = 3;
                                      throw std::runtime_error("boom");
                                  }),
                    std::runtime_error);
    CHECK(r->u64.get() == 1);
    CHECK(r->u32.get() == 0);
    auto d = pool.stats() - before;
    CHECK(d.tx_aborted == 1);
    CHECK(d.log_bytes == 0);
    CHECK(d.fences == 0);
    // The pool stays usable and survives a reopen without the aborted stores.
    tlptm::atomic(pool, [&] { r->u32 = 5; });
    pool.close();
    pool = tlptm::pool::open(path, tlptm_test::small_options());
    r = pool.root<api_root>();
    CHECK(r->u64.get() == 1);
    CHECK(r->u32.get() == 5);
}

TEST_CASE("nested atomic calls flatten into the outermost transaction") {
    tlptm_test::temp_path path("nest");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    auto before = pool.stats();
    tlptm::atomic(pool, [&] {
        r->u64 = 1;
        int inner = tlptm::atomic(pool, [&] {
            r->u32 = 2;
            return 7;
        });
        CHECK(inner == 7);
        CHECK(r->u32.get() == 2);
    });
    auto d = pool.stats() - before;
    CHECK(d.tx_committed == 1); // one transaction, one log entry
    CHECK(r->u32.get() == 2);
    // An exception in the inner call that escapes aborts the whole transaction.
    CHECK_THROWS(tlptm::atomic(pool, [&] {
        r->u64 = 100;
        tlptm::atomic(pool, [&] {
            r->u32 = 200;
            throw std::logic_error("inner");
        });
    }));
    CHECK(r->u64.get() == 1);
    CHECK(r->u32.get() == 2);
}

TEST_CASE("stores outside a transaction throw tx_scope_error") {
    tlptm_test::temp_path path("scope");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    CHECK_THROWS_AS(r->u64 = 5, tlptm::tx_scope_error);
    CHECK_THROWS_AS(r->u64 += 1, tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::current_tx(), tlptm::tx_scope_error);
    CHECK(r->u64.get() == 0);
    // A transactional store to memory that is not the pool's heap is refused too.
    std::uint64_t local = 0;
    CHECK_THROWS_AS(tlptm::atomic(pool, [&](tlptm::tx& tx) { tx.store(&local, std::uint64_t{1}); }),
                    tlptm::tx_scope_error);
    // Another pool's memory inside this pool's transaction: refused.
    tlptm_test::temp_path other_path("scope2");
    auto other = tlptm::pool::create(other_path, tlptm_test::small_options());
    auto* o = other.root<api_root>();
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { o->u64 = 1; }), tlptm::tx_scope_error);
    CHECK_THROWS_AS(tlptm::atomic(pool, [&] { tlptm::atomic(other, [] {}); }),
                    tlptm::tx_scope_error);
    CHECK(o->u64.get() == 0);
}

TEST_CASE("pointers between objects in the pool survive a reopen") {
    tlptm_test::temp_path path("ptr");
    {
        auto pool = tlptm::pool::create(path, tlptm_test::small_options());
        auto* r = pool.root<api_root>();
        tlptm::atomic(pool, [&] {
            for (int i = 0; i < 4; ++i) {
                r->nodes[i].key = static_cast<std::uint64_t>(i * 10);
                r->nodes[i].next = r->head.get();
                r->head = &r->nodes[i];
            }
        });
    }
    auto pool = tlptm::pool::open(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    std::uint64_t sum = 0;
    int n = 0;
    for (node* x = r->head; x != nullptr; x = x->next) {
        sum += x->key;
        ++n;
    }
    CHECK(n == 4);
    CHECK(sum == 60);
    CHECK(r->head->key.get() == 30);
}

TEST_CASE("log_write: entries written with stores and flushes or as whole lines are counted as "
          "whole lines and are replayed by recovery") {
    for (auto lw : {tlptm::log_write::non_temporal, tlptm::log_write::store_and_flush,
                    tlptm::log_write::non_temporal_lines}) {
        CAPTURE(static_cast<int>(lw));
        tlptm_test::temp_path path("log-write"), image("log-write-image");
        auto opt = tlptm_test::small_options(tlptm::log_mode::baseline);
        opt.log_write = lw;
        {
            auto pool = tlptm::pool::create(path, opt);
            auto* r = pool.root<api_root>();
            tlptm::atomic(pool, [&] { r->u64 = 1; });
            auto s0 = pool.stats();
            for (std::uint64_t i = 0; i < 50; ++i)
                tlptm::atomic(pool, [&] {
                    r->u64 = i + 2;
                    r->words[i % 64] = i;
                });
            auto d = pool.stats() - s0;
            CHECK(d.log_bytes == 50 * (16 + 2 * 24));
            if (lw == tlptm::log_write::non_temporal) {
                CHECK(d.streamed_bytes == d.log_bytes);
                CHECK(d.log_lines_flushed == 0);
            } else if (lw == tlptm::log_write::non_temporal_lines) {
                // The ring's generation began with this opening's first entry, so the 64-byte
                // entries start at s0.log_bytes + 64 i: two lines each, or one if aligned.
                CHECK(d.streamed_bytes == 50 * (s0.log_bytes % 64 == 0 ? 64 : 128));
                CHECK(d.log_lines_flushed == 0);
            } else {
                CHECK(d.streamed_bytes == 0);
                // 64-byte entries laid end to end: one or two lines each.
                CHECK(d.log_lines_flushed >= 50);
                CHECK(d.log_lines_flushed <= 100);
            }
            CHECK(d.pm_bytes_written() ==
                  d.streamed_bytes + 64 * (d.flushed_lines + d.log_lines_flushed));
            CHECK(d.fences == 50);
            // The file as a crash would leave it: the checkpoint has not passed the last
            // commits, so opening it replays their entries.
            std::filesystem::copy_file(path.str(), image.str());
            pool.close();
        }
        auto pool = tlptm::pool::open(image, opt);
        CHECK(pool.last_recovery().entries_replayed > 0);
        auto* r = pool.root<api_root>();
        CHECK(r->u64 == 51);
        CHECK(r->words[49] == 49);
    }
}

TEST_CASE("log_write::non_temporal_lines: each entry rewrites the entries before it in its "
          "first line with their own bytes, and zeros the rest of its last line") {
    // Entries of many sizes (1 to 40 words, baseline and compressed), so that they start and
    // end anywhere in a line, span lines and end on a line boundary. The file, read after
    // each commit, must hold every entry so far as a valid entry of the generation, in order,
    // zeros from the last entry's end to the end of its line, and the commit must have
    // streamed exactly the lines its entry touches.
    // The pool file up to the end of its log rings (the header says where they end).
    auto read_rings = [](const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        std::vector<std::uint8_t> bytes(sizeof(tlptm::detail::pool_header));
        in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        const auto* h = reinterpret_cast<const tlptm::detail::pool_header*>(bytes.data());
        const std::uint64_t end = h->log_offset + std::uint64_t{h->max_threads} * h->ring_size;
        bytes.resize(end);
        in.seekg(0);
        in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(end));
        REQUIRE(in.good());
        return bytes;
    };
    for (tlptm::log_mode mode : {tlptm::log_mode::baseline, tlptm::log_mode::tlptm}) {
        const std::string mode_name = tlptm::to_string(mode);
        CAPTURE(mode_name);
        tlptm_test::temp_path path("log-write-lines");
        auto opt = tlptm_test::small_options(mode);
        opt.log_write = tlptm::log_write::non_temporal_lines;
        auto pool = tlptm::pool::create(path, opt);
        CHECK(pool.chosen_log_write().method == tlptm::log_write::non_temporal_lines);
        CHECK(pool.chosen_log_write().large_method == tlptm::log_write::non_temporal_lines);
        auto* r = pool.root<api_root>();
        std::mt19937_64 rng(11);
        std::size_t commits = 0, end = 0, ends_aligned = 0, spanning = 0;
        for (int i = 0; i < 120; ++i) {
            std::vector<std::uint64_t> values(1 + rng() % 40);
            for (auto& v : values)
                v = rng() >> (rng() % 64); // values of every size
            const auto s0 = pool.stats();
            tlptm::atomic(pool, [&] {
                for (std::size_t w = 0; w < values.size(); ++w)
                    r->words[(static_cast<std::size_t>(i) + w) % 64] = values[w];
            });
            const auto d = pool.stats() - s0;
            ++commits;
            CHECK(d.log_lines_flushed == 0);

            const std::vector<std::uint8_t> bytes = read_rings(path.str());
            const auto* h = reinterpret_cast<const tlptm::detail::pool_header*>(bytes.data());
            std::size_t found = 0, stop = 0;
            // The thread's slot has one of the pool's rings; the others hold no entry.
            for (std::uint32_t k = 0; k < h->max_threads; ++k) {
                tlptm::detail::log_ring ring;
                ring.base = const_cast<std::uint8_t*>(bytes.data()) + h->log_offset +
                            std::uint64_t{k} * h->ring_size;
                ring.size = h->ring_size;
                std::size_t n = 0;
                const std::size_t at = ring.for_each_entry(
                    [&](const tlptm::detail::entry_view&, std::size_t) { ++n; });
                if (n == 0)
                    continue;
                found += n;
                stop = at;
                for (std::size_t b = stop; b < (stop + 63) / 64 * 64; ++b)
                    REQUIRE(ring.data()[b] == 0);
            }
            REQUIRE(found == commits);
            REQUIRE(stop > end);
            // The entry is [end, stop): its lines, whole.
            CHECK(d.streamed_bytes == 64 * ((stop + 63) / 64 - end / 64));
            spanning += stop / 64 != end / 64 && stop % 64 != 0 ? 1 : 0;
            ends_aligned += stop % 64 == 0 ? 1 : 0;
            end = stop;
        }
        MESSAGE(mode_name << ": " << commits << " entries, " << spanning
                          << " ending in another line than they began, " << ends_aligned
                          << " ending on a line boundary");
        CHECK(spanning > 0);
    }
}

namespace {

/// The log entries of `entries` transactions (the stats difference d) were written as log_write
/// `w` says: as stores and flushes of at least one line each, or streamed with none flushed.
void check_entries_written(const tlptm::stats& d, tlptm::log_write w, std::uint64_t entries) {
    CHECK(d.log_bytes > 0);
    if (w == tlptm::log_write::store_and_flush) {
        CHECK(d.streamed_bytes == 0);
        CHECK(d.log_lines_flushed >= entries);
    } else {
        CHECK(d.streamed_bytes >= d.log_bytes);
        CHECK(d.log_lines_flushed == 0);
    }
}

} // namespace

TEST_CASE("log_write::automatic: the measurement keeps every byte and picks the faster method "
          "for each size") {
    // On a file of the pool's kind of mapping (shared, in the tests' directory), filled with
    // random bytes: the measurement rewrites words with their own values only.
    tlptm_test::temp_path path("log-write-probe");
    const std::size_t bytes = 128 << 10; // room for the new blocks' rounds after 64 KiB
    int fd = ::open(path.str().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(m != MAP_FAILED);
    auto* area = static_cast<std::uint8_t*>(m);
    std::mt19937_64 rng(7);
    for (std::size_t i = 0; i < bytes; i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(area + i, &v, 8);
    }
    const std::vector<std::uint8_t> before(area, area + bytes);
    const tlptm::log_write_choice c = tlptm::detail::measure_log_write(area, bytes);
    CHECK(std::memcmp(area, before.data(), bytes) == 0);
    // An area smaller than any pool's ring is not measured on.
    CHECK_FALSE(tlptm::detail::measure_log_write(area, 1024).measured);
    CHECK(std::memcmp(area, before.data(), bytes) == 0);
    // A ring too small for the new blocks' rounds (a small pool's 16 KiB) measures the
    // entries only; the blocks then go as the small entries do.
    const tlptm::log_write_choice small_ring = tlptm::detail::measure_log_write(area, 16 << 10);
    CHECK(std::memcmp(area, before.data(), bytes) == 0);
    ::munmap(m, bytes);
#if defined(__x86_64__)
    CHECK(c.measured);
    CHECK(c.non_temporal_small_ns > 0);
    CHECK(c.store_and_flush_small_ns > 0);
    CHECK(c.non_temporal_large_ns > 0);
    CHECK(c.store_and_flush_large_ns > 0);
    CHECK(c.non_temporal_lines_small_ns > 0);
    CHECK(c.non_temporal_lines_large_ns > 0);
    auto faster = [](double store_and_flush, double non_temporal) {
        return store_and_flush < tlptm::log_write_choice::flush_margin * non_temporal
                   ? tlptm::log_write::store_and_flush
                   : tlptm::log_write::non_temporal;
    };
    // Whole lines must beat whole words by 5 %, stores and flushes the non-temporal way chosen
    // by 10 %.
    auto fastest = [&](double words, double lines, double store_and_flush) {
        const bool by_lines = lines < tlptm::log_write_choice::lines_margin * words;
        const tlptm::log_write w = faster(store_and_flush, by_lines ? lines : words);
        return w == tlptm::log_write::non_temporal && by_lines
                   ? tlptm::log_write::non_temporal_lines
                   : w;
    };
    CHECK(c.method == fastest(c.non_temporal_small_ns, c.non_temporal_lines_small_ns,
                              c.store_and_flush_small_ns));
    CHECK(c.large_method == fastest(c.non_temporal_large_ns, c.non_temporal_lines_large_ns,
                                    c.store_and_flush_large_ns));
    MESSAGE("entries + SFENCE, small / large: whole words "
            << c.non_temporal_small_ns << " / " << c.non_temporal_large_ns << " ns, whole lines "
            << c.non_temporal_lines_small_ns << " / " << c.non_temporal_lines_large_ns
            << " ns, stores + CLWB " << c.store_and_flush_small_ns << " / "
            << c.store_and_flush_large_ns << " ns");
    CHECK(c.new_block_non_temporal_ns > 0);
    CHECK(c.new_block_store_and_flush_ns > 0);
    CHECK(c.new_blocks == faster(c.new_block_store_and_flush_ns, c.new_block_non_temporal_ns));
    MESSAGE("new 32 B blocks with a small entry + SFENCE: rewritten non-temporally "
            << c.new_block_non_temporal_ns << " ns, flushed " << c.new_block_store_and_flush_ns
            << " ns");
    CHECK(small_ring.measured);
    CHECK(small_ring.new_block_non_temporal_ns == 0);
    CHECK(small_ring.new_block_store_and_flush_ns == 0);
    CHECK(small_ring.new_blocks == tlptm::detail::new_blocks_like(small_ring.method));
#endif
}

TEST_CASE("log_write::automatic: a pool writes its entries the way it chose, and recovery "
          "replays them") {
    tlptm_test::temp_path path("log-write-auto"), image("log-write-auto-image"),
        other("log-write-auto-other");
    auto opt = tlptm_test::small_options(tlptm::log_mode::baseline);
    REQUIRE(opt.log_write == tlptm::log_write::automatic); // the default
    {
        auto pool = tlptm::pool::create(path, opt);
        const tlptm::log_write_choice c = pool.chosen_log_write();
        CHECK(c.measured);
        CHECK(c.method != tlptm::log_write::automatic);
        CHECK(c.large_method != tlptm::log_write::automatic);
        auto* r = pool.root<api_root>();
        // Each entry written the way chosen for its size: one word in baseline mode logs less
        // than large_entry_bytes, sixteen words more.
        auto s0 = pool.stats();
        for (std::uint64_t i = 0; i < 20; ++i)
            tlptm::atomic(pool, [&] { r->u64 = i + 1; });
        auto d = pool.stats() - s0;
        CHECK(d.log_bytes < 20 * tlptm::log_write_choice::large_entry_bytes);
        check_entries_written(d, c.method, 20);
        s0 = pool.stats();
        for (std::uint64_t i = 0; i < 20; ++i)
            tlptm::atomic(pool, [&] {
                for (std::size_t w = 0; w < 16; ++w)
                    r->words[w] = i * 16 + w;
            });
        d = pool.stats() - s0;
        CHECK(d.log_bytes >= 20 * tlptm::log_write_choice::large_entry_bytes);
        check_entries_written(d, c.large_method, 20);
        // Measured once per device: a second pool beside it takes the same choice.
        {
            auto second = tlptm::pool::create(other, opt);
            CHECK(second.chosen_log_write().method == c.method);
            CHECK(second.chosen_log_write().large_method == c.large_method);
            CHECK(second.chosen_log_write().non_temporal_small_ns == c.non_temporal_small_ns);
        }
        std::filesystem::copy_file(path.str(), image.str());
        pool.close();
    }
    auto pool = tlptm::pool::open(image, opt);
    CHECK(pool.last_recovery().entries_replayed > 0);
    CHECK(pool.root<api_root>()->u64 == 20);
    CHECK(pool.root<api_root>()->words[15] == 19 * 16 + 15);
}

TEST_CASE("log_write::automatic: an insert's new blocks are measured once a pool's rings have "
          "room for it, and the choice is kept for the device") {
    tlptm_test::temp_path small("new-blocks-small"), big("new-blocks-big"),
        after("new-blocks-after");
    const auto opt = tlptm_test::small_options(); // 64 KiB rings: no room for the blocks' rounds
    auto first = tlptm::pool::create(small, opt);
    const tlptm::log_write_choice c1 = first.chosen_log_write();
    CHECK(c1.measured);
    if (c1.new_block_non_temporal_ns == 0) // nothing measured them yet in this process
        CHECK(c1.new_blocks == tlptm::detail::new_blocks_like(c1.method));
    auto big_opt = tlptm_test::small_options();
    big_opt.log_capacity = std::size_t{128} << 10;
    auto second = tlptm::pool::create(big, big_opt);
    const tlptm::log_write_choice c2 = second.chosen_log_write();
#if defined(__x86_64__)
    CHECK(c2.new_block_non_temporal_ns > 0);
    CHECK(c2.new_block_store_and_flush_ns > 0);
    CHECK(c2.new_blocks ==
          (c2.new_block_store_and_flush_ns <
                   tlptm::log_write_choice::flush_margin * c2.new_block_non_temporal_ns
               ? tlptm::log_write::store_and_flush
               : tlptm::log_write::non_temporal));
#endif
    // A pool opened after it on the same device takes that measurement, small rings or not.
    auto third = tlptm::pool::create(after, opt);
    CHECK(third.chosen_log_write().new_blocks == c2.new_blocks);
    CHECK(third.chosen_log_write().new_block_non_temporal_ns == c2.new_block_non_temporal_ns);
    CHECK(third.chosen_log_write().non_temporal_small_ns == c2.non_temporal_small_ns);
}

TEST_CASE("large_log_write: entries of 64 B and more are written their own way, the others "
          "log_write's") {
    for (auto [small, large] :
         {std::pair{tlptm::log_write::store_and_flush, tlptm::log_write::non_temporal},
          std::pair{tlptm::log_write::non_temporal, tlptm::log_write::store_and_flush}}) {
        CAPTURE(static_cast<int>(small));
        tlptm_test::temp_path path("large-log-write");
        tlptm_test::ram_policy policy;
        auto opt = tlptm_test::options_with(policy, tlptm::log_mode::baseline);
        opt.log_write = small;
        opt.large_log_write = large;
        auto pool = tlptm::pool::create(path, opt);
        CHECK(pool.chosen_log_write().method == small);
        CHECK(pool.chosen_log_write().large_method == large);
        auto* r = pool.root<api_root>();
        auto s0 = pool.stats();
        tlptm::atomic(pool, [&] { r->u64 = 5; }); // one word: a small entry
        const auto one = pool.stats() - s0;
        s0 = pool.stats();
        tlptm::atomic(pool, [&] { // sixteen words: a large one
            for (std::size_t w = 0; w < 16; ++w)
                r->words[w] = w + 1;
        });
        const auto sixteen = pool.stats() - s0;
        REQUIRE(one.log_bytes < tlptm::log_write_choice::large_entry_bytes);
        REQUIRE(sixteen.log_bytes >= tlptm::log_write_choice::large_entry_bytes);
        check_entries_written(one, small, 1);
        check_entries_written(sixteen, large, 1);
    }
}

TEST_CASE("log_write: nothing is measured when the method is given, in msync mode or with a "
          "test policy") {
    tlptm_test::temp_path a("log-write-given"), b("log-write-msync"), c("log-write-policy");
    auto opt = tlptm_test::small_options();
    opt.log_write = tlptm::log_write::store_and_flush;
    auto given = tlptm::pool::create(a, opt);
    CHECK_FALSE(given.chosen_log_write().measured);
    CHECK(given.chosen_log_write().method == tlptm::log_write::store_and_flush);
    CHECK(given.chosen_log_write().large_method == tlptm::log_write::store_and_flush);
    CHECK(given.chosen_log_write().new_blocks == tlptm::log_write::store_and_flush);

    opt = tlptm_test::small_options();
    opt.durability = tlptm::durability::msync;
    auto synced = tlptm::pool::create(b, opt);
    CHECK_FALSE(synced.chosen_log_write().measured);
    CHECK(synced.chosen_log_write().method == tlptm::log_write::non_temporal);

    tlptm_test::ram_policy policy;
    auto traced = tlptm::pool::create(c, tlptm_test::options_with(policy));
    CHECK_FALSE(traced.chosen_log_write().measured);
    CHECK(traced.chosen_log_write().method == tlptm::log_write::non_temporal);
}

TEST_CASE("write_back::automatic: adaptive where a flushed line measured clearly slower than a "
          "non-temporal entry, eager otherwise or when nothing was measured") {
    namespace d = tlptm::detail;
    using wb = tlptm::write_back;
    tlptm::log_write_choice c;
    c.measured = true;
    c.method = tlptm::log_write::non_temporal;
    c.non_temporal_small_ns = 120;
    c.store_and_flush_small_ns = 120 * d::adaptive_flush_ratio;
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::adaptive);
    c.store_and_flush_small_ns = 120 * d::adaptive_flush_ratio - 1; // just below the ratio
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::eager);
    c.store_and_flush_small_ns = 200;
    c.method = tlptm::log_write::store_and_flush; // the entry's fence waits for a flush anyway
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::eager);
    // Entries as whole lines: the ratio is to their time, not to whole words'.
    c.method = tlptm::log_write::non_temporal_lines;
    c.non_temporal_lines_small_ns = 100;
    c.store_and_flush_small_ns = 100 * d::adaptive_flush_ratio - 1; // 1.29 x lines, 1.07 x words
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::eager);
    c.store_and_flush_small_ns = 100 * d::adaptive_flush_ratio;
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::adaptive);
    c.method = tlptm::log_write::non_temporal;
    c.measured = false; // msync, a test policy, a given log_write
    CHECK(d::resolve_write_back(wb::automatic, c) == wb::eager);
    for (wb given : {wb::eager, wb::lazy, wb::prompt, wb::adaptive})
        CHECK(d::resolve_write_back(given, c) == given);

    // A pool reports what it resolved: a test policy measures nothing (eager); a given policy
    // is kept.
    tlptm_test::temp_path a("write-back-policy"), b("write-back-given");
    tlptm_test::ram_policy policy;
    auto traced = tlptm::pool::create(a, tlptm_test::options_with(policy));
    CHECK(traced.chosen_write_back() == wb::eager);
    auto opt = tlptm_test::small_options();
    opt.write_back = wb::adaptive;
    auto given = tlptm::pool::create(b, opt);
    CHECK(given.chosen_write_back() == wb::adaptive);
    CHECK(std::string(tlptm::to_string(given.chosen_write_back())) == "adaptive");
}

TEST_CASE("stats: fences and flushed lines of a 1-word and a 10-word update, eager write-back") {
    tlptm_test::temp_path path("stats");
    auto opt = tlptm_test::small_options(tlptm::log_mode::baseline);
    opt.write_back = tlptm::write_back::eager;
    auto pool = tlptm::pool::create(path, opt);
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] { r->u64 = 1; }); // first transaction also starts the ring
    auto s0 = pool.stats();
    tlptm::atomic(pool, [&] { r->u64 = 2; });
    auto one = pool.stats() - s0;
    CHECK(one.tx_committed == 1);
    CHECK(one.fences == 1); // F1; it also completes the previous commit's write-back
    // Eager write-back flushes a commit's lines in the slot's next commit, after its locked
    // instructions and before its F1; but a line that this commit writes again (here the
    // previous transaction's only line) is left to this commit's own write-back.
    CHECK(one.flushed_lines == 0);
    CHECK(one.round_trips == 1); // no locked instruction waits for a pending flush
    CHECK(one.log_bytes == 16 + 24);
    auto s1 = pool.stats();
    tlptm::atomic(pool, [&] {
        for (int i = 0; i < 10; ++i)
            r->words[i] = static_cast<std::uint64_t>(i + 1);
    });
    auto ten = pool.stats() - s1;
    CHECK(ten.fences == 1);
    CHECK(ten.log_bytes == 16 + 10 * 24);
    CHECK(ten.data_bytes_written == 80);
    CHECK(ten.flushed_lines == 1); // the line of the two commits before
    CHECK(ten.round_trips == 1);
    auto s3 = pool.stats();
    tlptm::atomic(pool, [&] { r->u64 = 3; });
    auto next = pool.stats() - s3;
    CHECK(next.flushed_lines >= 2); // the ten words' 80 bytes span two or three lines
    CHECK(next.flushed_lines <= 3);
    CHECK(next.fences == 1);
    // Read-only transactions write nothing persistent.
    auto s2 = pool.stats();
    std::uint64_t got = tlptm::atomic(pool, [&] { return r->words[9].get(); });
    // (the line of u64 stays pending: read-only transactions flush nothing)
    CHECK(got == 10);
    auto ro = pool.stats() - s2;
    CHECK(ro.tx_read_only == 1);
    CHECK(ro.fences == 0);
    CHECK(ro.flushed_lines == 0);
    CHECK(ro.log_bytes == 0);
    // Partial words count the bytes written: u8 and i16 share a word (3 bytes), u32 has
    // another half (4), t12 one whole word and half of the next (12).
    auto s4 = pool.stats();
    tlptm::atomic(pool, [&] {
        r->u8 = 7;
        r->i16 = -3;
        r->u32 = 9;
        r->t12 = twelve{};
    });
    CHECK((pool.stats() - s4).data_bytes_written == 1 + 2 + 4 + 12);
}

TEST_CASE("write-sets larger than the linear limit keep read-own-writes and merge stores") {
    tlptm_test::temp_path path("bigws");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] {
        for (int round = 0; round < 3; ++round)
            for (int i = 0; i < 64; ++i)
                r->words[i] += static_cast<std::uint64_t>(i);
        for (int i = 0; i < 64; ++i)
            CHECK(r->words[i].get() == static_cast<std::uint64_t>(3 * i));
    });
    for (int i = 0; i < 64; ++i)
        CHECK(r->words[i].get() == static_cast<std::uint64_t>(3 * i));
}

TEST_CASE("transactions from several threads are serialised and all committed") {
    tlptm_test::temp_path path("threads");
    auto pool = tlptm::pool::create(path, tlptm_test::small_options());
    auto* r = pool.root<api_root>();
    std::array<std::thread, 3> ts;
    for (auto& t : ts)
        t = std::thread([&] {
            for (int i = 0; i < 500; ++i)
                tlptm::atomic(pool, [&] { r->u64 += 1; });
        });
    for (auto& t : ts)
        t.join();
    CHECK(r->u64.get() == 1500);
    // Slots of exited threads are released and reused: more threads than slots over time.
    for (int round = 0; round < 3; ++round) {
        std::array<std::thread, 4> more;
        for (auto& t : more)
            t = std::thread([&] { tlptm::atomic(pool, [&] { r->u32 += 1; }); });
        for (auto& t : more)
            t.join();
    }
    CHECK(r->u32.get() == 12);
}

TEST_CASE("open_or_create creates once and then opens; recover() on an open pool") {
    tlptm_test::temp_path path("ooc");
    {
        auto pool = tlptm::pool::open_or_create(path, tlptm_test::small_options());
        tlptm::atomic(pool, [&] { pool.root<api_root>()->u64 = 77; });
        auto rep = pool.recover();
        CHECK(rep.entries_replayed == 0); // everything applied was checkpointed first
        CHECK(rep.checkpoint_after >= 1);
        CHECK(pool.root<api_root>()->u64.get() == 77);
    }
    auto pool = tlptm::pool::open_or_create(path, tlptm_test::small_options());
    CHECK(pool.root<api_root>()->u64.get() == 77);
}

TEST_CASE("stats: prompt write-back flushes a commit's lines at once, unless it rewrites the "
          "previous commit's lines") {
    tlptm_test::temp_path path("stats-prompt");
    auto opt = tlptm_test::small_options(tlptm::log_mode::tlptm);
    opt.write_back = tlptm::write_back::prompt;
    {
        auto pool = tlptm::pool::create(path, opt);
        auto* r = pool.root<api_root>();
        tlptm::atomic(pool, [&] { r->words[0] = 1; }); // the first also starts the ring
        // Distinct lines: each commit flushes its own line right after its write-back, and
        // the next commit's first locked instruction finds that flush pending.
        auto s0 = pool.stats();
        for (int i = 1; i <= 4; ++i)
            tlptm::atomic(pool, [&] { r->words[8 * i] = static_cast<std::uint64_t>(i); });
        auto early = pool.stats() - s0;
        CHECK(early.fences == 4);
        CHECK(early.flushed_lines == 4);
        CHECK(early.round_trips == 8);
        // The same line again and again: hot, left to the next commit as in eager mode (which
        // flushes nothing then: each commit writes the line again).
        tlptm::atomic(pool, [&] { r->u64 = 5; });
        tlptm::atomic(pool, [&] { r->u64 = 6; });
        auto s1 = pool.stats();
        for (int i = 0; i < 4; ++i)
            tlptm::atomic(pool, [&] { r->u64 = static_cast<std::uint64_t>(10 + i); });
        auto hot = pool.stats() - s1;
        CHECK(hot.fences == 4);
        CHECK(hot.flushed_lines == 0);
        CHECK(hot.round_trips == 4);
        pool.close();
    }
    auto pool = tlptm::pool::open(path, opt);
    auto* r = pool.root<api_root>();
    CHECK(r->u64.get() == 13);
    for (int i = 1; i <= 4; ++i)
        CHECK(r->words[8 * i].get() == static_cast<std::uint64_t>(i));
}

namespace {
/// Inserts a node with `key` at the head of the root's list, in a transaction of its own.
void push_node(tlptm::pool& pool, api_root* r, std::uint64_t key) {
    tlptm::atomic(pool, [&] {
        node* n = tlptm::make<node>();
        n->key = key;
        n->next = r->head.get();
        r->head = n;
    });
}
} // namespace

TEST_CASE("stats: adaptive write-back leaves an update's line to the next insert or batch") {
    tlptm_test::temp_path path("stats-adaptive");
    auto opt = tlptm_test::small_options(tlptm::log_mode::tlptm);
    opt.write_back = tlptm::write_back::adaptive;
    opt.write_back_lines = 8;
    // Entries stored and flushed: an insert flushes the new node its entry covers (with
    // non-temporal entries it streams it instead and defers, the next test case).
    opt.log_write = tlptm::log_write::store_and_flush;
    {
        auto pool = tlptm::pool::create(path, opt);
        auto* r = pool.root<api_root>();
        tlptm::atomic(pool, [&] { r->u64 = 1; }); // the first also starts the ring
        push_node(pool, r, 1);                    // ... and the first insert takes a superblock
        // One-line updates: one fence each, nothing flushed, their lines left pending.
        auto s0 = pool.stats();
        for (int i = 1; i <= 3; ++i)
            tlptm::atomic(pool, [&] { r->words[8 * i] = static_cast<std::uint64_t>(i); });
        auto upd = pool.stats() - s0;
        CHECK(upd.fences == 3);
        CHECK(upd.round_trips == 3);
        CHECK(upd.flushed_lines == 0);
        CHECK(upd.write_back_batches == 0);
        // An insert flushes its new node before its fence anyway (the entry covers it): the
        // three pending lines, and the previous insert's, join it under the same fence.
        auto s1 = pool.stats();
        push_node(pool, r, 2);
        auto ins = pool.stats() - s1;
        CHECK(ins.fences == 1);
        CHECK(ins.round_trips == 1);
        CHECK(ins.flushed_lines >= 1 + 3 + 1);
        // An update of two lines (at most half of the 8-line batch) defers too.
        auto s2 = pool.stats();
        tlptm::atomic(pool, [&] {
            r->words[0] = 10;
            r->words[63] = 11;
        });
        auto two = pool.stats() - s2;
        CHECK(two.fences == 1);
        CHECK(two.round_trips == 1);
        CHECK(two.flushed_lines == 0);
        CHECK(two.write_back_batches == 0);
        // An update of five lines (more than half a batch) flushes as eager: the insert's
        // line and the two-line update's go now, under its fence.
        auto s5 = pool.stats();
        tlptm::atomic(pool, [&] {
            for (int i = 0; i < 5; ++i)
                r->words[8 * i + 12] = static_cast<std::uint64_t>(30 + i);
        });
        auto five = pool.stats() - s5;
        CHECK(five.fences == 1);
        CHECK(five.round_trips == 1);
        CHECK(five.flushed_lines >= 2); // (two of them may share a line)
        CHECK(five.write_back_batches == 0);
        // One-line updates of distinct lines reach the watermark: one batch, one more fence.
        auto s3 = pool.stats();
        for (int i = 0; i < 8; ++i)
            tlptm::atomic(pool, [&] { r->words[8 * i + 1] = static_cast<std::uint64_t>(20 + i); });
        auto batch = pool.stats() - s3;
        CHECK(batch.write_back_batches == 1);
        CHECK(batch.fences == 8 + 1);
        CHECK(batch.round_trips == batch.fences);
        pool.close();
    }
    auto pool = tlptm::pool::open(path, opt);
    auto* r = pool.root<api_root>();
    CHECK(pool.last_recovery().entries_replayed == 0); // the close flushed everything
    CHECK(r->words[0].get() == 10);
    CHECK(r->words[63].get() == 11);
    for (int i = 0; i < 5; ++i)
        CHECK(r->words[8 * i + 12].get() == static_cast<std::uint64_t>(30 + i));
    for (int i = 1; i <= 3; ++i)
        CHECK(r->words[8 * i].get() == static_cast<std::uint64_t>(i));
    for (int i = 0; i < 8; ++i)
        CHECK(r->words[8 * i + 1].get() == static_cast<std::uint64_t>(20 + i));
    CHECK(r->head.get()->key.get() == 2);
    CHECK(r->head.get()->next.get()->key.get() == 1);
}

TEST_CASE("stats: with non-temporal entries an insert streams its new node and defers its "
          "lines under adaptive write-back") {
    tlptm_test::temp_path path("stats-adaptive-stream");
    auto opt = tlptm_test::small_options(tlptm::log_mode::tlptm);
    opt.write_back = tlptm::write_back::adaptive;
    opt.write_back_lines = 8;
    opt.log_write = tlptm::log_write::non_temporal;
    {
        auto pool = tlptm::pool::create(path, opt);
        auto* r = pool.root<api_root>();
        tlptm::atomic(pool, [&] { r->u64 = 1; });
        push_node(pool, r, 1); // the first insert takes a superblock
        auto s0 = pool.stats();
        tlptm::atomic(pool, [&] { r->words[8] = 5; }); // one line left pending
        auto upd = pool.stats() - s0;
        CHECK(upd.flushed_lines == 0);
        // The insert's entry covers its node: the node's words are written again
        // non-temporally before the one fence, nothing is flushed, and the pending line, the
        // head's and the allocator's lines wait for a batch.
        auto s1 = pool.stats();
        push_node(pool, r, 2);
        auto ins = pool.stats() - s1;
        CHECK(ins.fences == 1);
        CHECK(ins.round_trips == 1);
        CHECK(ins.flushed_lines == 0);
        CHECK(ins.write_back_batches == 0);
        MESSAGE("streamed: update " << upd.streamed_bytes << " B, insert " << ins.streamed_bytes
                                    << " B");
        CHECK(ins.streamed_bytes >= upd.streamed_bytes + sizeof(node)); // entry + the node
        pool.close();
    }
    // The close flushed what was pending; a crash instead would have replayed the entries.
    auto pool = tlptm::pool::open(path, opt);
    auto* r = pool.root<api_root>();
    CHECK(r->words[8].get() == 5);
    CHECK(r->head.get()->key.get() == 2);
    CHECK(r->head.get()->next.get()->key.get() == 1);
}

TEST_CASE("new_block_write: an insert's new node is flushed or rewritten non-temporally as given, "
          "whichever way its entry is written") {
    using lw = tlptm::log_write;
    for (auto [entries, blocks] : {std::pair{lw::non_temporal, lw::store_and_flush},
                                   std::pair{lw::store_and_flush, lw::non_temporal}}) {
        CAPTURE(static_cast<int>(entries));
        tlptm_test::temp_path path("new-block-write");
        auto opt = tlptm_test::small_options(tlptm::log_mode::tlptm);
        opt.write_back = tlptm::write_back::adaptive;
        opt.write_back_lines = 8;
        opt.log_write = entries;
        opt.new_block_write = blocks;
        {
            auto pool = tlptm::pool::create(path, opt);
            CHECK(pool.chosen_log_write().method == entries);
            CHECK(pool.chosen_log_write().new_blocks == blocks);
            auto* r = pool.root<api_root>();
            push_node(pool, r, 1); // the first insert takes a superblock
            auto s0 = pool.stats();
            tlptm::atomic(pool, [&] { r->words[8] = 5; }); // an update
            const auto upd = pool.stats() - s0;
            s0 = pool.stats();
            push_node(pool, r, 2);
            const auto ins = pool.stats() - s0;
            CHECK(ins.fences == 1);
            CHECK(ins.round_trips == 1);
            const std::uint64_t entry_streamed = entries == lw::non_temporal ? ins.log_bytes : 0;
            if (blocks == lw::store_and_flush) {
                // The update left its line unflushed (its fence waits for its entry alone);
                // the insert flushes the node's line and, under the same fence, that pending
                // line: nothing but the entry is streamed.
                CHECK(upd.flushed_lines == 0);
                CHECK(ins.streamed_bytes >= entry_streamed); // the entry in whole words
                CHECK(ins.streamed_bytes < entry_streamed + 16);
                CHECK(ins.flushed_lines >= 2);
            } else {
                // The node's words are written again non-temporally, none of its lines
                // flushed (the entry's own lines are counted apart, in log_lines_flushed).
                CHECK(ins.streamed_bytes >= entry_streamed + sizeof(node));
                CHECK(ins.log_lines_flushed >= 1);
            }
            pool.close();
        }
        auto pool = tlptm::pool::open(path, opt);
        auto* r = pool.root<api_root>();
        CHECK(r->words[8].get() == 5);
        CHECK(r->head.get()->key.get() == 2);
        CHECK(r->head.get()->next.get()->key.get() == 1);
    }
}

TEST_CASE("stats: lazy write-back has one round trip per update and flushes in batches") {
    tlptm_test::temp_path path("stats-lazy");
    auto opt = tlptm_test::small_options(tlptm::log_mode::tlptm);
    opt.write_back = tlptm::write_back::lazy;
    opt.write_back_lines = 8;
    auto pool = tlptm::pool::create(path, opt);
    auto* r = pool.root<api_root>();
    tlptm::atomic(pool, [&] { r->u64 = 1; }); // first transaction also starts the ring
    tlptm::atomic(pool, [&] { r->u64 = 1; }); // ... and its first round trip is behind us
    auto s0 = pool.stats();
    tlptm::atomic(pool, [&] { r->u64 = 2; });
    auto one = pool.stats() - s0;
    CHECK(one.fences == 1);
    CHECK(one.round_trips == 1);
    CHECK(one.flushed_lines == 0); // written back in place, not flushed yet
    CHECK(one.write_back_batches == 0);
    // The same line again and again counts once toward the watermark.
    auto s1 = pool.stats();
    for (int i = 0; i < 40; ++i)
        tlptm::atomic(pool, [&] { r->u64 = static_cast<std::uint64_t>(i); });
    CHECK((pool.stats() - s1).write_back_batches == 0);
    // Distinct lines reach it: one batch, one fence for all of them.
    auto s2 = pool.stats();
    for (int i = 0; i < 8; ++i)
        tlptm::atomic(pool, [&] { r->words[8 * i] = static_cast<std::uint64_t>(i); });
    auto batch = pool.stats() - s2;
    CHECK(batch.write_back_batches == 1);
    CHECK(batch.fences == 8 + 1);
    // A batch starts once at least half the watermark is distinct lines after duplicates are
    // dropped, and flushes each of its lines once.
    CHECK(batch.flushed_lines >= 5);
    CHECK(batch.flushed_lines <= 9);
    CHECK(batch.round_trips == batch.fences);
}
