// libFuzzer target for recovery (include/tlptm/recovery.hpp) over damaged pool images.
//
// Once per process, a small valid pool is built and kept as bytes: ring 0 holds compressed
// entries (list pushes with pointer records, words, partial words) and ring 1 baseline entries
// of an earlier opening, all with timestamps above the image's CT, so that recovery has real
// work to do. Each input then damages a copy of that image:
//
//   byte 0: flags; bits 0-1 choose a ring, then each set bit reads its fields in this order:
//     0x08  CT      8 bytes: the header's checkpoint timestamp
//     0x10  header  16 bytes: the ring's generation and base timestamp
//     0x20  meta    2 bytes offset, 1 byte n, n bytes written into the allocator metadata
//     0x40  raw     2 bytes offset, 1 byte n, n bytes written into the ring's entry area
//     0x04  seal    the rest: entries appended after the ring's valid entries, each
//                   {ctl, delta, ctl & 0x7F bytes of records}: baseline if ctl & 0x80, else
//                   compressed; timestamp = previous + delta + 1; the header and the CRC are
//                   made valid, so recovery decodes, bounds-checks and replays the records.
//
// The image is written to the pool file and opened with tlptm::pool::open (durability
// emulate_pmem), which runs recovery. An independent oracle, built from the library's entry
// parser and record decoder, predicts the outcome: recovery must replay the valid entries
// with ts > CT in timestamp order (less a ring's last entry whose covered blocks no longer
// match, unless a later entry wrote into them) and persist CT = the last of them, or, if any
// such entry holds an address outside the heap and metadata (or two with one timestamp write
// one word, or a damaged entry has valid ones above CT behind it), throw corruption_error
// having written nothing. Checked, with abort() on the first violation:
//   - opening throws nothing but tlptm::layout_error / tlptm::corruption_error;
//   - the file afterwards is byte for byte the image (refused, or a header rejected) or the
//     prediction (recovered; also when the allocator metadata is then found corrupt): nothing
//     outside the heap, the metadata and CT changes, and nothing changes there but the replay;
//   - a second recovery replays nothing and changes nothing (I5), nor does closing.
// AddressSanitizer catches reads and writes outside the pool's mapping.

#include <tlptm/tlptm.hpp>

#include "../harness/pool_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace d = tlptm::detail;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "recovery_fuzz: %s\n", what);
    std::abort();
}

void check(bool ok, const char* what) {
    if (!ok)
        fail(what);
}

struct list_node {
    tlptm::p<std::uint64_t> key, value;
    tlptm::p<list_node*> next;
};

struct fuzz_root {
    tlptm::p<list_node*> head;
    tlptm::p<std::uint64_t> w[16];
    tlptm::p<std::uint16_t> small[4];
};

tlptm::pool_options fuzz_options(tlptm::log_mode mode) {
    tlptm::pool_options o;
    o.size = std::size_t{320} << 10;
    o.max_threads = 4;
    o.log_capacity = 4096;
    o.mode = mode;
    o.durability = tlptm::durability::emulate_pmem;
    return o;
}

void some_transactions(tlptm::pool& p, std::uint64_t seed) {
    fuzz_root* rt = p.root<fuzz_root>();
    for (std::uint64_t k = 0; k < 3; ++k) {
        tlptm::atomic(p, [&] {
            list_node* n = tlptm::make<list_node>(seed + k, (seed + k) * 7, rt->head.get());
            rt->head = n;
            rt->w[(seed + k) % 16] = ~(seed + k);
            rt->small[k % 4] = static_cast<std::uint16_t>(seed * 31 + k);
        });
    }
    tlptm::atomic(p, [&] { rt->head.get()->value = seed; });
}

/// The pool file, its base image and the geometry.
struct fixture {
    std::unique_ptr<tlptm_harness::scratch_file> file;
    std::unique_ptr<tlptm_harness::file_view> view;
    std::vector<std::uint8_t> base;
    tlptm_harness::pool_layout layout;

    fixture() {
        file = std::make_unique<tlptm_harness::scratch_file>("recovery-fuzz");
        const std::string& path = file->str();
        std::vector<std::uint8_t> first;
        {
            tlptm::pool p = tlptm::pool::create(path, fuzz_options(tlptm::log_mode::baseline));
            some_transactions(p, 100);
            first = tlptm_harness::read_whole_file(path); // entries above CT (not closed yet)
            p.close();
        }
        {
            tlptm::pool p = tlptm::pool::open(path, fuzz_options(tlptm::log_mode::tlptm));
            some_transactions(p, 200);
            base = tlptm_harness::read_whole_file(path);
            p.close();
        }
        layout = tlptm_harness::pool_layout::of(base.data());
        // Ring 1 gets ring 0 of the first opening (baseline entries, older timestamps), and CT
        // goes back to 0: every entry of both rings is to be replayed, in timestamp order,
        // over data that already holds their effect (as after a crash between F1 and CT).
        std::memcpy(base.data() + layout.log_offset + layout.ring_size,
                    first.data() + layout.log_offset, layout.ring_size);
        std::uint64_t zero = 0;
        std::memcpy(base.data() + tlptm_harness::pool_layout::ct_offset, &zero, 8);
        view = std::make_unique<tlptm_harness::file_view>(path);
    }
};

fixture& the_fixture() {
    static fixture f;
    return f;
}

std::uint64_t load64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

/// Reads fields from the input.
struct input {
    const std::uint8_t* p;
    std::size_t n;
    bool take(void* dst, std::size_t k) {
        if (n < k)
            return false;
        std::memcpy(dst, p, k);
        p += k;
        n -= k;
        return true;
    }
};

/// Appends sealed entries after the valid entries of ring r.
void append_entries(std::vector<std::uint8_t>& img, const tlptm_harness::pool_layout& l,
                    std::uint64_t r, input& in) {
    std::uint8_t* ring_base = img.data() + l.log_offset + r * l.ring_size;
    d::log_ring ring{ring_base, l.ring_size};
    std::uint64_t prev = ring.base_ts();
    std::size_t end =
        ring.for_each_entry([&](const d::entry_view& e, std::size_t) { prev = e.ts; });
    const std::uint64_t gen = ring.generation();
    std::uint8_t ctl, delta;
    while (in.take(&ctl, 1) && in.take(&delta, 1)) {
        std::size_t len = std::min<std::size_t>(ctl & 0x7F, in.n);
        std::uint64_t ts = prev + delta + 1;
        if (ts > d::max_timestamp)
            return;
        std::vector<std::uint8_t> e;
        std::size_t crc_at;
        if (ctl & 0x80) {
            len -= len % 24;
            e.resize(d::baseline_header_bytes + len);
            d::store_u64(e.data(), 1 | ts << 8);
            auto len32 = static_cast<std::uint32_t>(e.size());
            std::memcpy(e.data() + 8, &len32, 4);
            crc_at = 12;
            std::memcpy(e.data() + d::baseline_header_bytes, in.p, len);
        } else {
            std::uint8_t hdr[1 + 2 * tlptm::codec::put_varint_writable_bytes];
            std::size_t h = 0;
            hdr[h++] = 2;
            h += tlptm::codec::put_varint(hdr + h, len);
            h += tlptm::codec::put_varint(hdr + h, ts - prev);
            crc_at = h;
            e.assign(hdr, hdr + h);
            e.resize(h + 4);
            e.insert(e.end(), in.p, in.p + len);
        }
        in.p += len;
        in.n -= len;
        std::uint32_t crc = d::entry_crc(e.data(), e.size(), crc_at, gen, ts);
        std::memcpy(e.data() + crc_at, &crc, 4);
        if (end + e.size() > ring.capacity())
            return;
        std::memcpy(ring.data() + end, e.data(), e.size());
        end += e.size();
        prev = ts;
    }
}

/// What recovery must leave: the replay of the valid entries with ts > CT, or (refused)
/// nothing.
struct oracle {
    bool refuses = false;
    std::size_t replays = 0;
    std::vector<std::uint8_t> after;
};

oracle predict(const std::vector<std::uint8_t>& img, const tlptm_harness::pool_layout& l) {
    oracle o;
    o.after = img;
    std::uint64_t ct = load64(img.data() + tlptm_harness::pool_layout::ct_offset);
    struct todo_entry {
        std::uint64_t ts;
        d::entry_view e;
        bool last; ///< its ring's last valid entry
    };
    std::vector<todo_entry> todo;
    for (std::uint64_t r = 0; r < l.max_threads; ++r) {
        d::log_ring ring{const_cast<std::uint8_t*>(img.data()) + l.log_offset + r * l.ring_size,
                         l.ring_size};
        std::size_t first = todo.size();
        std::uint64_t last_ts = ring.base_ts();
        std::size_t stop = ring.for_each_entry([&](const d::entry_view& e, std::size_t) {
            last_ts = e.ts;
            if (e.ts > ct)
                todo.push_back(todo_entry{e.ts, e, false});
        });
        if (todo.size() > first && todo.back().ts == last_ts)
            todo.back().last = true;
        // A damaged entry with entries above CT behind it: the log is refused.
        ring.for_each_entry_after_damage(stop, last_ts, [&](const d::entry_view& e, std::size_t) {
            if (e.ts > ct)
                o.refuses = true;
        });
    }
    std::stable_sort(todo.begin(), todo.end(),
                     [](const auto& a, const auto& b) { return a.ts < b.ts; });
    // No commit timestamp above max_commit_ts is ever issued: such an entry is refused.
    if (!todo.empty() && todo.back().ts > d::max_commit_ts)
        o.refuses = true;
    auto replayable = [&](std::uint64_t off) {
        return off % 8 == 0 && ((off >= l.heap_offset && off <= l.heap_offset + l.heap_size - 8) ||
                                (off >= l.meta_offset && off <= l.meta_offset + l.meta_size - 8));
    };
    // The words each entry writes, validated before anything is replayed.
    std::vector<std::vector<d::log_record>> writes(todo.size());
    for (std::size_t i = 0; i < todo.size() && !o.refuses; ++i) {
        bool ok = d::decode_records(todo[i].e, l.base_address, [&](const d::log_record& rec) {
            if (!replayable(rec.offset) || rec.mask == 0)
                o.refuses = true;
            writes[i].push_back(rec);
        });
        d::for_each_covered(todo[i].e, [&](const d::pool_range& r) {
            if (r.offset < l.heap_offset || r.offset > l.heap_offset + l.heap_size ||
                r.size > l.heap_offset + l.heap_size - r.offset)
                o.refuses = true;
        });
        if (!ok)
            o.refuses = true;
    }
    // Entries may share a timestamp, but not a word: then the last value is unknown.
    for (std::size_t i = 0; i < todo.size() && !o.refuses; ++i)
        for (std::size_t j = i + 1; j < todo.size() && todo[j].ts == todo[i].ts; ++j)
            for (const d::log_record& x : writes[i])
                for (const d::log_record& y : writes[j])
                    if (x.offset == y.offset)
                        o.refuses = true;
    if (o.refuses) {
        o.after = img;
        return o;
    }
    // A ring's last entry that covers blocks whose bytes (in the image, before any replay) no
    // longer match its CRC never committed, unless a later entry to replay (a larger ts) writes
    // into one of those blocks: it is skipped, though CT still passes it.
    const std::vector<d::log_record> none;
    auto uncommitted = [&](std::size_t i) {
        std::vector<d::pool_range> ranges;
        std::uint32_t want =
            d::for_each_covered(todo[i].e, [&](const d::pool_range& r) { ranges.push_back(r); });
        if (!todo[i].last || ranges.empty() || d::covered_blocks_crc(img.data(), ranges) == want)
            return false;
        for (std::size_t j = i + 1; j < todo.size(); ++j)
            for (const d::log_record& rec : todo[j].ts > todo[i].ts ? writes[j] : none)
                for (const d::pool_range& r : ranges)
                    if (rec.offset + 8 > r.offset && rec.offset < r.offset + r.size)
                        return false;
        return true;
    };
    for (std::size_t i = 0; i < todo.size(); ++i) {
        if (uncommitted(i))
            continue;
        for (const d::log_record& rec : writes[i]) {
            std::uint64_t w = load64(o.after.data() + rec.offset);
            w = (w & ~rec.mask) | (rec.value & rec.mask);
            std::memcpy(o.after.data() + rec.offset, &w, 8);
        }
        ++o.replays;
    }
    if (!todo.empty())
        std::memcpy(o.after.data() + tlptm_harness::pool_layout::ct_offset, &todo.back().ts, 8);
    return o;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fixture& fx = the_fixture();
    const tlptm_harness::pool_layout& l = fx.layout;
    std::vector<std::uint8_t> img = fx.base;
    input in{data, size};
    std::uint8_t flags = 0;
    if (!in.take(&flags, 1))
        return 0;
    std::uint64_t ring = flags & 3;
    std::uint8_t* ring_base = img.data() + l.log_offset + ring * l.ring_size;
    if (flags & 0x08) {
        std::uint64_t ct;
        if (!in.take(&ct, 8))
            return 0;
        std::memcpy(img.data() + tlptm_harness::pool_layout::ct_offset, &ct, 8);
    }
    if ((flags & 0x10) && !in.take(ring_base, 16))
        return 0;
    for (std::uint8_t region : {std::uint8_t{0x20}, std::uint8_t{0x40}}) {
        if (!(flags & region))
            continue;
        std::uint16_t at;
        std::uint8_t n;
        if (!in.take(&at, 2) || !in.take(&n, 1))
            return 0;
        std::uint8_t* dst = region == 0x20 ? img.data() + l.meta_offset : ring_base + 64;
        std::size_t room = region == 0x20 ? l.meta_size : l.ring_size - 64;
        std::size_t k = std::min<std::size_t>({n, in.n, room - std::min<std::size_t>(at, room)});
        std::memcpy(dst + std::min<std::size_t>(at, room), in.p, k);
        in.p += k;
        in.n -= k;
    }
    if (flags & 0x04)
        append_entries(img, l, ring, in);

    oracle want = predict(img, l);
    std::uint8_t* file = fx.view->data();
    std::memcpy(file, img.data(), img.size());
    // A CT in the last 2^32 timestamps is refused (detail::max_commit_ts).
    bool header_ok = load64(img.data() + tlptm_harness::pool_layout::ct_offset) <= d::max_commit_ts;
    try {
        tlptm::pool p = tlptm::pool::open(fx.file->str(), fuzz_options(tlptm::log_mode::tlptm));
        check(header_ok, "a header with CT out of range was accepted");
        check(!want.refuses, "recovery accepted an entry it must refuse");
        check(p.last_recovery().entries_replayed == want.replays,
              "recovery replayed another number of entries than the valid ones above CT");
        check(std::memcmp(file, want.after.data(), img.size()) == 0,
              "recovery wrote something else than the replay of the valid entries above CT");
        tlptm::recovery_report again = p.recover();
        check(again.entries_replayed == 0, "a second recovery replayed entries");
        check(std::memcmp(file, want.after.data(), img.size()) == 0,
              "a second recovery changed the pool");
        p.close();
        check(std::memcmp(file, want.after.data(), img.size()) == 0, "closing changed the pool");
    } catch (const tlptm::layout_error&) {
        check(!header_ok, "layout_error on a header that only differs in the log rings");
        check(std::memcmp(file, img.data(), img.size()) == 0,
              "a rejected header, yet the pool was written");
    } catch (const tlptm::corruption_error&) {
        // Refused log entries: nothing written. Allocator metadata found corrupt after the
        // replay: exactly the replay written.
        check(std::memcmp(file, want.after.data(), img.size()) == 0,
              "corruption_error, but the pool holds neither the image nor its replay");
    }
    return 0;
}
