// Log entries: both formats round-trip any write-set, reject torn, truncated and stale bytes;
// the write-set merges stores.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <tlptm/detail/write_set.hpp>
#include <tlptm/log.hpp>
#include <tlptm/persist.hpp>
#include <tlptm/recovery.hpp>

using tlptm::detail::entry_builder;
using tlptm::detail::entry_format;
using tlptm::detail::entry_view;
using tlptm::detail::log_record;
using tlptm::detail::pointer_range;
using tlptm::detail::pool_range;

namespace {

constexpr std::uint64_t pool_base = std::uint64_t{0x1234} << 32;
constexpr std::uint64_t pool_size = std::uint64_t{1} << 30;
constexpr pointer_range ptrs{pool_base, pool_size};

std::vector<log_record> decode(const entry_view& e) {
    std::vector<log_record> out;
    bool ok =
        tlptm::detail::decode_records(e, pool_base, [&](const log_record& r) { out.push_back(r); });
    REQUIRE(ok);
    return out;
}

/// Seals `recs` in `fmt` (covering `covered` with `crc`), parses the bytes back and checks every
/// record and covered block survived.
std::vector<std::uint8_t> round_trip(entry_format fmt, const std::vector<log_record>& recs,
                                     std::uint64_t ts = 1000, std::uint64_t prev = 990,
                                     std::uint64_t gen = 7,
                                     const std::vector<pool_range>& covered = {},
                                     std::uint32_t crc = 0) {
    entry_builder b;
    std::size_t bound = b.encode(fmt, recs, ptrs, covered, crc);
    auto bytes = b.seal(ts, prev, gen);
    REQUIRE(bytes.size() <= bound);
    std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
    entry_view e;
    REQUIRE(tlptm::detail::parse_entry(copy.data(), copy.size(), gen, prev, e));
    CHECK(e.ts == ts);
    CHECK(e.length == copy.size());
    CHECK((e.covered != nullptr) == !covered.empty());
    std::vector<pool_range> got_covered;
    std::uint32_t got_crc =
        tlptm::detail::for_each_covered(e, [&](const pool_range& r) { got_covered.push_back(r); });
    REQUIRE(got_covered.size() == covered.size());
    for (std::size_t i = 0; i < covered.size(); ++i) {
        CHECK(got_covered[i].offset == covered[i].offset);
        CHECK(got_covered[i].size == covered[i].size);
    }
    if (!covered.empty())
        CHECK(got_crc == crc);
    auto got = decode(e);
    REQUIRE(got.size() == recs.size());
    for (std::size_t i = 0; i < recs.size(); ++i) {
        CHECK(got[i].offset == recs[i].offset);
        CHECK(got[i].mask == recs[i].mask);
        CHECK((got[i].value & got[i].mask) == (recs[i].value & recs[i].mask));
    }
    return copy;
}

std::vector<log_record> random_write_set(std::mt19937_64& rng) {
    std::map<std::uint64_t, log_record> words;
    std::size_t n = rng() % 40 + 1;
    std::uint64_t at = (rng() % (pool_size / 8)) * 8;
    for (std::size_t i = 0; i < n; ++i) {
        switch (rng() % 4) { // address pattern: adjacent, near, far, either end of the pool
        case 0:
            at += 8;
            break;
        case 1:
            at += 8 * (rng() % 64 + 1);
            break;
        case 2:
            at = (rng() % (pool_size / 8)) * 8;
            break;
        default:
            at = rng() % 2 ? 0 : pool_size - 8;
            break;
        }
        at %= pool_size;
        std::uint64_t value;
        switch (rng() % 5) { // value distribution: small, negative, pointer, random, boundary
        case 0:
            value = rng() % 200;
            break;
        case 1:
            value = static_cast<std::uint64_t>(-static_cast<std::int64_t>(rng() % 1000));
            break;
        case 2:
            value = pool_base + (rng() % pool_size);
            break;
        case 3:
            value = rng();
            break;
        default: {
            const std::uint64_t b[] = {0,
                                       ~std::uint64_t{0},
                                       static_cast<std::uint64_t>(INT64_MIN),
                                       static_cast<std::uint64_t>(INT64_MAX),
                                       pool_base,
                                       pool_base + pool_size,
                                       pool_base - 1};
            value = b[rng() % 7];
        }
        }
        std::uint64_t mask = ~std::uint64_t{0};
        if (rng() % 4 == 0) {
            std::uint8_t be = static_cast<std::uint8_t>(rng() % 254 + 1);
            mask = tlptm::detail::mask_of(be);
        }
        words[at] = log_record{at, value & mask, mask};
    }
    std::vector<log_record> out;
    for (auto& [off, r] : words)
        out.push_back(r);
    return out;
}

} // namespace

TEST_CASE("both entry formats round-trip random write-sets") {
    std::mt19937_64 rng(42);
    for (int i = 0; i < 3000; ++i) {
        auto recs = random_write_set(rng);
        round_trip(entry_format::baseline, recs);
        round_trip(entry_format::compressed, recs);
    }
}

TEST_CASE("entries that cover new blocks round-trip in both formats; damage never validates") {
    std::mt19937_64 rng(5);
    for (int i = 0; i < 1000; ++i) {
        auto recs = random_write_set(rng);
        std::vector<pool_range> covered;
        std::uint64_t at = rng() % 4096;
        for (std::size_t k = rng() % 5 + 1; k-- > 0;) {
            at += rng() % 3 == 0 ? 0 : rng() % 100000; // adjacent blocks too
            std::uint64_t size = 16 * (rng() % 64 + 1);
            covered.push_back({at, size});
            at += size;
        }
        auto crc = static_cast<std::uint32_t>(rng());
        for (auto fmt : {entry_format::baseline, entry_format::compressed}) {
            auto bytes = round_trip(fmt, recs, 1000, 990, 7, covered, crc);
            CHECK((bytes[0] & tlptm::detail::entry_covers_blocks) != 0);
            entry_view e;
            auto torn = bytes;
            torn[rng() % torn.size()] ^= static_cast<std::uint8_t>(rng() % 255 + 1);
            CHECK_FALSE(tlptm::detail::parse_entry(torn.data(), torn.size(), 7, 990, e));
        }
    }
    // Malformed sections: no range, an empty range, a missing CRC.
    std::uint32_t crc = 0;
    auto nop = [](const pool_range&) {};
    std::vector<std::uint8_t> enc(32);
    std::size_t n = tlptm::codec::put_varint(enc.data(), 0);
    CHECK(tlptm::detail::parse_covered(enc.data(), enc.data() + n + 4, crc, nop) == 0);
    n = tlptm::codec::put_varint(enc.data(), 1);
    n += tlptm::codec::put_varint(enc.data() + n, 64);
    n += tlptm::codec::put_varint(enc.data() + n, 0); // empty block
    CHECK(tlptm::detail::parse_covered(enc.data(), enc.data() + n + 4, crc, nop) == 0);
    n = tlptm::codec::put_varint(enc.data(), 1);
    n += tlptm::codec::put_varint(enc.data() + n, 64);
    n += tlptm::codec::put_varint(enc.data() + n, 32);
    CHECK(tlptm::detail::parse_covered(enc.data(), enc.data() + n + 3, crc, nop) == 0);
    CHECK(tlptm::detail::parse_covered(enc.data(), enc.data() + n + 4, crc, nop) == n + 4);
}

TEST_CASE("boundary values and offsets at both ends of the pool") {
    std::vector<log_record> recs;
    std::uint64_t off = 0;
    std::vector<std::uint64_t> values = {0, 1, ~std::uint64_t{0},
                                         static_cast<std::uint64_t>(INT64_MIN),
                                         static_cast<std::uint64_t>(INT64_MAX)};
    for (int k = 0; k < 64; ++k) {
        values.push_back(std::uint64_t{1} << k);
        values.push_back((std::uint64_t{1} << k) - 1);
        values.push_back((std::uint64_t{1} << k) + 1);
        values.push_back(static_cast<std::uint64_t>(-(std::int64_t{1} << (k % 63))));
    }
    for (std::uint64_t v : values) {
        recs.push_back({off, v, ~std::uint64_t{0}});
        off += 16; // not adjacent: one record per value
    }
    recs.push_back({pool_size - 8, 5, ~std::uint64_t{0}});
    round_trip(entry_format::baseline, recs);
    round_trip(entry_format::compressed, recs);
    // The same values as one run of adjacent words.
    for (std::size_t i = 0; i < recs.size(); ++i)
        recs[i].offset = 8 * i;
    round_trip(entry_format::compressed, recs);
    // A timestamp delta at the top of the range.
    round_trip(entry_format::compressed, recs, tlptm::detail::max_timestamp, 0);
}

TEST_CASE("compression: small values, runs, full masks and pointers are cheap") {
    std::vector<log_record> recs;
    for (std::uint64_t i = 0; i < 8; ++i)
        recs.push_back({4096 + 8 * i, i, ~std::uint64_t{0}});
    auto c = round_trip(entry_format::compressed, recs);
    auto b = round_trip(entry_format::baseline, recs);
    CHECK(b.size() == 16 + 8 * 24);
    // header (1 + 1 + 1 + 4) + H (2 bytes: gap 512 words) + count (1) + 8 one-byte values.
    CHECK(c.size() == 7 + 2 + 1 + 8);
    // An in-pool pointer costs its offset, not 8 bytes.
    std::vector<log_record> p = {{64, pool_base + 4096, ~std::uint64_t{0}}};
    auto cp = round_trip(entry_format::compressed, p);
    CHECK(cp.size() == 7 + 1 + 2);
    // A one-byte store: H, the byte-enable byte, one value byte.
    std::vector<log_record> sub = {{64, std::uint64_t{0x7F} << 16, std::uint64_t{0xFF} << 16}};
    auto cs = round_trip(entry_format::compressed, sub);
    CHECK(cs.size() == 7 + 1 + 1 + 1);
}

TEST_CASE("a torn, truncated, stale or foreign entry never validates") {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 300; ++i) {
        auto recs = random_write_set(rng);
        for (auto fmt : {entry_format::baseline, entry_format::compressed}) {
            auto bytes = round_trip(fmt, recs, 500, 499, 3);
            entry_view e;
            // Any single changed byte (a torn 8-byte unit changes at least one) is caught.
            std::size_t at = rng() % bytes.size();
            auto torn = bytes;
            torn[at] ^= static_cast<std::uint8_t>(rng() % 255 + 1);
            CHECK_FALSE(tlptm::detail::parse_entry(torn.data(), torn.size(), 3, 499, e));
            // Truncated: the entry claims more bytes than there are.
            CHECK_FALSE(tlptm::detail::parse_entry(bytes.data(), bytes.size() - 1, 3, 499, e));
            // Another ring generation (a stale entry of an earlier lap of the ring).
            CHECK_FALSE(tlptm::detail::parse_entry(bytes.data(), bytes.size(), 4, 499, e));
            // A timestamp that does not increase.
            CHECK_FALSE(tlptm::detail::parse_entry(bytes.data(), bytes.size(), 3, 500, e));
        }
    }
    std::vector<std::uint8_t> zeros(64, 0);
    entry_view e;
    CHECK_FALSE(tlptm::detail::parse_entry(zeros.data(), zeros.size(), 0, 0, e));
}

TEST_CASE("malformed compressed records are rejected, never read out of bounds") {
    std::mt19937_64 rng(99);
    std::size_t rejected = 0;
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::uint8_t> junk(rng() % 24);
        for (auto& b : junk)
            b = static_cast<std::uint8_t>(rng());
        std::size_t words = 0;
        bool ok = tlptm::detail::decode_compressed_records(junk.data(), junk.data() + junk.size(),
                                                           pool_base, [&](const log_record& r) {
                                                               CHECK(r.offset % 8 == 0);
                                                               CHECK(r.mask != 0);
                                                               ++words;
                                                           });
        if (!ok)
            ++rejected;
        CHECK(words <= junk.size()); // every word costs at least one byte
    }
    CHECK(rejected > 0);
    // Specific cases: partial + run, a zero byte-enable, a count beyond the input.
    const std::uint8_t partial_run[] = {0x06, 0x00}; // H = 3: run | partial
    CHECK_FALSE(tlptm::detail::decode_compressed_records(partial_run, partial_run + 2, pool_base,
                                                         [](const log_record&) {}));
    const std::uint8_t zero_be[] = {0x04, 0x00, 0x02}; // H = 2 (partial), be = 0
    CHECK_FALSE(tlptm::detail::decode_compressed_records(zero_be, zero_be + 3, pool_base,
                                                         [](const log_record&) {}));
    const std::uint8_t long_run[] = {0x02, 0x7E, 0x00}; // H = 1 (run), count - 2 = 63
    CHECK_FALSE(tlptm::detail::decode_compressed_records(long_run, long_run + 3, pool_base,
                                                         [](const log_record&) {}));
}

TEST_CASE("write_set merges masked stores and finds words past the linear limit") {
    tlptm::detail::write_set ws;
    ws.put(8, 0x00000000000000AAull, 0x00000000000000FFull);
    ws.put(8, 0x0000000000BB0000ull, 0x0000000000FF0000ull);
    ws.put(8, 0x00000000000000CCull, 0x00000000000000FFull);
    REQUIRE(ws.size() == 1);
    tlptm::detail::write_set::word e{};
    REQUIRE(ws.find(8, e));
    CHECK(e.value == 0x0000000000BB00CCull);
    CHECK(e.mask == 0x0000000000FF00FFull);
    CHECK_FALSE(ws.find(16, e));
    for (std::uint64_t i = 0; i < 1000; ++i)
        ws.put(1024 + 8 * i, i, ~std::uint64_t{0});
    CHECK(ws.runs().size() == 2); // the partial word, and one run of 1000 words
    for (std::uint64_t i = 0; i < 1000; ++i) {
        REQUIRE(ws.find(1024 + 8 * i, e));
        CHECK(e.value == i);
    }
    CHECK_FALSE(ws.find(1024 + 8 * 1000, e));
    ws.sort_for_commit();
    CHECK(std::is_sorted(ws.runs().begin(), ws.runs().end(),
                         [](const auto& a, const auto& b) { return a.offset < b.offset; }));
    ws.clear();
    CHECK(ws.empty());
    CHECK_FALSE(ws.find(8, e));
}

TEST_CASE("write_set agrees with a plain map over mixed ascending, bulk and random stores") {
    // Ascending stores keep the set sorted (binary search past the linear limit); the first
    // store below the top switches it to its hash index; put_words adds a run at once above
    // the top and word by word otherwise. Every mix must find exactly what a map holds.
    std::mt19937_64 rng(42);
    for (int round = 0; round < 200; ++round) {
        tlptm::detail::write_set ws;
        std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> want; // value, mask
        auto merge = [&](std::uint64_t off, std::uint64_t v, std::uint64_t m) {
            auto& [wv, wm] = want[off];
            wv = (wv & ~m) | (v & m);
            wm |= m;
        };
        std::uint64_t top = 0;
        const int ops = 1 + static_cast<int>(rng() % 120);
        for (int k = 0; k < ops; ++k) {
            const unsigned kind = static_cast<unsigned>(rng() % 4);
            if (kind == 0) { // ascending single word
                top += 8 * (1 + rng() % 3);
                std::uint64_t v = rng();
                ws.put(top, v, ~std::uint64_t{0});
                merge(top, v, ~std::uint64_t{0});
            } else if (kind == 1) { // a run, usually above the top, sometimes overlapping it
                std::uint64_t n = 1 + rng() % 40;
                std::uint64_t at =
                    rng() % 4 == 0 && top >= 64 ? top - 8 * (rng() % 8) : top + 8 * (1 + rng() % 2);
                // Words of every kind the encoder tells apart inside a run: random, small
                // (short zigzag codes), pool pointers (offset codes), and one-byte codes of
                // either kind, mixed or in stretches (the encoder scans a stretch four words
                // at a time).
                std::vector<std::uint8_t> bytes(8 * n);
                const unsigned mix = static_cast<unsigned>(rng() % 6);
                for (std::uint64_t i = 0; i < n; ++i) {
                    const unsigned kind_of_word = mix == 5 ? static_cast<unsigned>(rng() % 5) : mix;
                    std::uint64_t v = rng();
                    if (kind_of_word == 1)
                        v = v % 256 - 128;
                    else if (kind_of_word == 2)
                        v = 0x10000 + v % 0x100000;
                    else if (kind_of_word == 3)
                        v = v % 128 - 64; // zigzag code below 128
                    else if (kind_of_word == 4)
                        v = 0x10000 + v % 128; // offset code below 128
                    std::memcpy(bytes.data() + 8 * i, &v, 8);
                }
                ws.put_words(at, bytes.data(), n);
                for (std::uint64_t i = 0; i < n; ++i) {
                    std::uint64_t v;
                    std::memcpy(&v, bytes.data() + 8 * i, 8);
                    merge(at + 8 * i, v, ~std::uint64_t{0});
                }
                top = std::max(top, at + 8 * (n - 1));
            } else { // anywhere below the top, partial or full
                std::uint64_t off = 8 * (rng() % (top / 8 + 1));
                std::uint64_t m = kind == 2 ? ~std::uint64_t{0} : 0xFFull << (8 * (rng() % 8));
                std::uint64_t v = rng();
                ws.put(off, v, m);
                merge(off, v, m);
            }
        }
        REQUIRE(ws.size() == want.size());
        for (std::uint64_t off = 0; off <= top + 16; off += 8) {
            tlptm::detail::write_set::word e{};
            const bool found = ws.find(off, e);
            auto it = want.find(off);
            REQUIRE(found == (it != want.end()));
            if (found) {
                CHECK(e.value == (it->second.first & it->second.second));
                CHECK(e.mask == it->second.second);
            }
        }
        // Encoded from its runs, the set gives the bytes of its words encoded one by one.
        std::vector<log_record> sorted;
        for (const auto& [off, vm] : want)
            sorted.push_back(log_record{off, vm.first & vm.second, vm.second});
        tlptm::detail::append_vector<tlptm::detail::write_set::run> runs;
        ws.sorted_runs(runs);
        for (const auto fmt : {entry_format::compressed, entry_format::baseline}) {
            entry_builder from_runs, from_words;
            const tlptm::detail::pointer_range ptrs{0x10000, 0x100000};
            const std::size_t n1 = from_runs.encode_words(fmt, ws.words(runs), ws.size(), ptrs);
            const std::size_t n2 = from_words.encode(fmt, sorted, ptrs);
            REQUIRE(n1 == n2);
            auto a = from_runs.seal(9, 1, 2);
            auto b = from_words.seal(9, 1, 2);
            CHECK(std::vector<std::uint8_t>(a.begin(), a.end()) ==
                  std::vector<std::uint8_t>(b.begin(), b.end()));
        }
        ws.sort_for_commit();
        REQUIRE(ws.size() == want.size());
        auto it = want.begin();
        ws.for_each_word([&](std::uint64_t off, std::uint64_t v, std::uint64_t m) {
            CHECK(off == it->first);
            CHECK(m == it->second.second);
            CHECK(v == (it->second.first & it->second.second));
            ++it;
        });
        CHECK(it == want.end());
    }
}

TEST_CASE("the worked example of docs/log-format.md") {
    std::vector<log_record> recs;
    for (std::uint64_t i = 0; i < 8; ++i)
        recs.push_back({4096 + 8 * i, i, ~std::uint64_t{0}});
    entry_builder b;
    b.encode(entry_format::compressed, recs, pointer_range{});
    auto bytes = b.seal(1000, 990, 7);
    const std::vector<std::uint8_t> want = {0x02, 0x16, 0x14, 0x72, 0xcc, 0x33, 0x4e, 0x05, 0x40,
                                            0x0c, 0x00, 0x04, 0x08, 0x0c, 0x10, 0x14, 0x18, 0x1c};
    CHECK(std::vector<std::uint8_t>(bytes.begin(), bytes.end()) == want);
}

TEST_CASE("a one-word entry encodes as the general encoder encodes it") {
    std::mt19937_64 rng(5);
    const pointer_range none{};
    for (int i = 0; i < 200000; ++i) {
        const pointer_range& range = i % 4 == 0 ? none : ptrs;
        std::uint64_t offset = 8 * (rng() % (pool_size / 8));
        if (i % 7 == 0)
            offset = i % 14 == 0 ? 0 : pool_size - 8;
        std::uint64_t value;
        switch (rng() % 5) { // small, negative, a pointer into the pool, its ends, random
        case 0:
            value = rng() % 300;
            break;
        case 1:
            value = ~(rng() % 300);
            break;
        case 2:
            value = pool_base + rng() % pool_size;
            break;
        case 3:
            value = rng() % 2 ? pool_base : pool_base + pool_size - (rng() % 2);
            break;
        default:
            value = rng();
            break;
        }
        CAPTURE(offset);
        CAPTURE(value);
        const std::vector<log_record> recs = {{offset, value, ~std::uint64_t{0}}};
        entry_builder general, one;
        const std::size_t bound_general = general.encode(entry_format::compressed, recs, range);
        const std::size_t bound_one = one.encode_one_word(offset, value, range);
        REQUIRE(bound_one == bound_general);
        const std::uint64_t ts = 100 + rng() % 300;
        auto a = general.seal(ts, 99, 4);
        auto b = one.seal(ts, 99, 4);
        REQUIRE(std::vector<std::uint8_t>(a.begin(), a.end()) ==
                std::vector<std::uint8_t>(b.begin(), b.end()));
    }
}

TEST_CASE("the compressed header: one-byte fields and longer ones on either side of 128") {
    // seal() writes one-byte header fields directly and longer ones with put_varint; either
    // way the header is format byte, payload size, ts - prev_ts (prefix varints), then the CRC.
    for (std::size_t words : {1u, 2u, 41u, 42u, 43u, 60u}) {
        std::vector<log_record> recs;
        for (std::uint64_t i = 0; i < words; ++i) // 3-byte records: 1-byte H, 2-byte value
            recs.push_back({8 * 2 * i, 1000 + i, ~std::uint64_t{0}});
        for (std::uint64_t delta : {1u, 126u, 127u, 128u, 129u, 20000u}) {
            CAPTURE(words);
            CAPTURE(delta);
            const std::uint64_t prev = 5000, ts = prev + delta;
            auto bytes = round_trip(entry_format::compressed, recs, ts, prev);
            entry_builder b;
            const std::size_t payload = b.encode(entry_format::compressed, recs, ptrs) -
                                        tlptm::detail::max_compressed_header_bytes;
            std::uint8_t want[9 + 9 + 9];
            std::size_t n1 = tlptm::codec::put_varint(want, payload);
            std::size_t n2 = tlptm::codec::put_varint(want + 9, delta);
            REQUIRE(bytes.size() == 1 + n1 + n2 + 4 + payload);
            CHECK(bytes[0] == static_cast<std::uint8_t>(entry_format::compressed));
            CHECK(std::memcmp(bytes.data() + 1, want, n1) == 0);
            CHECK(std::memcmp(bytes.data() + 1 + n1, want + 9, n2) == 0);
            CHECK((payload < 128) == (n1 == 1));
        }
    }
}

TEST_CASE("entries written as whole words or whole lines leave the ring byte-packed, with zeros "
          "after the tail") {
    // What a commit does: widen the entry to the aligned words (or lines) around its ring
    // position, the bytes before it from the slot's copy of the tail line (advance_tail_line
    // keeps it), and copy them with non-temporal stores. The ring must then hold exactly the
    // byte-packed entries, every entry must walk and validate, the bytes after the last entry
    // up to its word's (line's) end must be zero and nothing after that may change. The two
    // ways also alternate at random, as log_write::automatic may choose them by entry size.
    std::mt19937_64 rng(11);
    for (int way = 0; way < 3; ++way) { // words, lines, either
        CAPTURE(way);
        for (int round = 0; round < 20; ++round) {
            alignas(64) static std::uint8_t ring[1 << 15];
            std::memset(ring, 0xA5, sizeof ring); // an older lap's bytes
            std::vector<std::uint8_t> packed;     // what the ring must hold
            std::vector<std::uint64_t> ts_of;
            entry_builder b;
            std::size_t head = 0, written = 0;
            std::array<std::uint8_t, 64> tail_line{};
            std::uint64_t ts = 50;
            const std::uint64_t gen = 3, base_ts = 49;
            std::uint64_t prev = base_ts;
            for (int k = 0; k < 40; ++k) {
                std::vector<log_record> recs = random_write_set(rng);
                const auto fmt = rng() % 3 == 0 ? entry_format::baseline : entry_format::compressed;
                std::size_t bound = b.encode(fmt, recs, ptrs);
                if (head + bound + 64 > sizeof ring)
                    break;
                ts += rng() % 3 + 1;
                std::span<const std::uint8_t> e = b.seal(ts, prev, gen);
                packed.insert(packed.end(), e.begin(), e.end());
                const bool lines = way == 1 || (way == 2 && rng() % 2 == 0);
                const std::size_t unit = lines ? 64 : 8;
                std::uint64_t before = 0;
                std::memcpy(&before, tail_line.data() + head % 64 / 8 * 8, 8);
                std::span<const std::uint8_t> out = lines ? b.widen_to_lines(head, tail_line.data())
                                                          : b.widen_to_words(head, before);
                REQUIRE(out.size() % unit == 0);
                REQUIRE(out.size() >= e.size());
                std::uint8_t* dst = ring + head / unit * unit;
                // Bytes before the entry in its first word or line are rewritten with what
                // they held.
                CHECK(std::memcmp(out.data(), dst, head % unit) == 0);
                tlptm::detail::stream_copy(dst, out.data(), out.size());
                tlptm::detail::advance_tail_line(tail_line.data(), head, e);
                head += e.size();
                // Zeros from the head to the end of what any entry wrote (an earlier entry
                // written as lines may have zeroed past this one's last word), then bytes
                // never written.
                written = std::max(written, (head + unit - 1) / unit * unit);
                for (std::size_t i = head; i < written; ++i)
                    CHECK(ring[i] == 0);
                CHECK(ring[written] == 0xA5);
                // The copy is the ring's line at the head, zeros from the head on.
                CHECK(std::memcmp(tail_line.data(), ring + head / 64 * 64, head % 64) == 0);
                for (std::size_t i = head % 64; i < 64; ++i)
                    CHECK(tail_line[i] == 0);
                prev = ts;
                ts_of.push_back(ts);
            }
            std::atomic_thread_fence(std::memory_order_seq_cst); // orders the NT stores
            REQUIRE(std::memcmp(ring, packed.data(), packed.size()) == 0);
            // Walk the ring as recovery does: every entry validates, in order, and the walk
            // stops at the zeros after the last one.
            std::size_t at = 0, n = 0;
            prev = base_ts;
            while (at < sizeof ring) {
                entry_view v;
                if (!tlptm::detail::parse_entry(ring + at, sizeof ring - at, gen, prev, v))
                    break;
                REQUIRE(n < ts_of.size());
                CHECK(v.ts == ts_of[n]);
                prev = v.ts;
                at += v.length;
                ++n;
            }
            CHECK(n == ts_of.size());
            CHECK(at == packed.size());
        }
    }
}

TEST_CASE("stream_copy writes exactly the range, aligned or not") {
    alignas(64) std::uint8_t dst[1024];
    std::uint8_t src[1024];
    for (std::size_t i = 0; i < sizeof src; ++i)
        src[i] = static_cast<std::uint8_t>(i * 7 + 1);
    for (std::size_t at : {0, 3, 8, 16, 24, 40, 61})
        for (std::size_t n : {1, 7, 8, 16, 24, 40, 64, 72, 600}) {
            std::memset(dst, 0, sizeof dst);
            tlptm::detail::stream_copy(dst + at, src, n);
            std::atomic_thread_fence(std::memory_order_seq_cst); // orders the non-temporal stores
            CHECK(std::memcmp(dst + at, src, n) == 0);
            for (std::size_t i = 0; i < sizeof dst; ++i)
                if (i < at || i >= at + n)
                    REQUIRE(dst[i] == 0);
        }
}

TEST_CASE("recovery's line set holds each inserted line once, whatever the repeats") {
    // Against std::set: runs of one line (the repeat shortcut), a few hot lines among many cold
    // ones (collisions and growth), and the largest line numbers a pool can have.
    std::mt19937_64 rng(7);
    for (std::size_t n : {0, 1, 5, 1000, 200000}) {
        tlptm::detail::line_set lines;
        std::set<std::uint64_t> want;
        for (std::size_t i = 0; i < n; ++i) {
            std::uint64_t l;
            switch (rng() % 4) {
            case 0:
                l = rng() % 8; // hot, line 0 among them
                break;
            case 1:
                l = (std::numeric_limits<std::uint64_t>::max() >> 6) - rng() % 3; // the top
                break;
            default:
                l = rng() % (n + 1) * 64; // equal low bits, different high bits
            }
            for (std::uint64_t k = 1 + rng() % 3; k-- > 0;) // one to three times in a row
                lines.insert(l);
            want.insert(l);
        }
        const std::vector<std::uint64_t> got = lines.sorted();
        CHECK(got == std::vector<std::uint64_t>(want.begin(), want.end()));
    }
}
