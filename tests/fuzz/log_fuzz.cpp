// libFuzzer target: the log entry parser and the record decoders, fed arbitrary bytes, never
// read out of bounds (the input sits in an exactly sized heap buffer, so ASan sees any
// overread), never report a record that is not 8-aligned or has an empty mask, and whatever
// they accept re-encodes to records (and covered blocks) that decode identically.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <tlptm/log.hpp>

using namespace tlptm::detail;

namespace {
constexpr std::uint64_t pool_base = std::uint64_t{0x1000} << 32;
constexpr std::uint64_t pool_size = std::uint64_t{1} << 30;
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 9)
        return 0;
    // The first 8 bytes choose the generation and previous timestamp; the rest is the ring.
    std::uint64_t gen, prev;
    std::memcpy(&gen, data, 4);
    gen &= 0xFF;
    prev = data[4];
    auto buf = std::make_unique<std::uint8_t[]>(size - 8);
    std::memcpy(buf.get(), data + 8, size - 8);
    const std::uint8_t* p = buf.get();
    std::size_t n = size - 8;

    // As a chain of entries, the way recovery walks a ring.
    std::size_t off = 0;
    entry_view e;
    while (off < n && parse_entry(p + off, n - off, gen, prev, e)) {
        if (e.length == 0 || off + e.length > n || e.ts <= prev)
            std::abort();
        std::vector<log_record> recs;
        bool ok = decode_records(e, pool_base, [&](const log_record& r) {
            if (r.offset % 8 != 0 || r.mask == 0)
                std::abort();
            recs.push_back(r);
        });
        if (ok) {
            // Re-encode what was accepted (sorted, distinct words only: what a commit writes).
            bool sorted = true;
            for (std::size_t i = 1; i < recs.size(); ++i)
                sorted &= recs[i - 1].offset < recs[i].offset;
            if (sorted) {
                std::vector<pool_range> covered;
                std::uint32_t covered_crc =
                    for_each_covered(e, [&](const pool_range& r) { covered.push_back(r); });
                entry_builder b;
                b.encode(e.format, recs, pointer_range{pool_base, pool_size}, covered, covered_crc);
                auto bytes = b.seal(e.ts, prev, gen);
                entry_view again;
                if (!parse_entry(bytes.data(), bytes.size(), gen, prev, again))
                    std::abort();
                std::size_t c = 0;
                std::uint32_t again_crc = for_each_covered(again, [&](const pool_range& r) {
                    if (c >= covered.size() || r.offset != covered[c].offset ||
                        r.size != covered[c].size)
                        std::abort();
                    ++c;
                });
                if (c != covered.size() || again_crc != covered_crc)
                    std::abort();
                std::size_t k = 0;
                decode_records(again, pool_base, [&](const log_record& r) {
                    if (k >= recs.size() || r.offset != recs[k].offset || r.mask != recs[k].mask ||
                        (r.value & r.mask) != (recs[k].value & recs[k].mask))
                        std::abort();
                    ++k;
                });
                if (k != recs.size())
                    std::abort();
            }
        }
        off += e.length;
        prev = e.ts;
    }

    // As bare compressed records.
    decode_compressed_records(p, p + n, pool_base, [](const log_record& r) {
        if (r.offset % 8 != 0 || r.mask == 0)
            std::abort();
    });
    return 0;
}
