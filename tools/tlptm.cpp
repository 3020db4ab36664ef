// tlptm — the command-line tool for tlptm pool files (what `pmempool info/check/dump` is to
// PMDK users): inspect a pool's header and log, check it without writing, dump the log
// entries recovery would replay, run recovery, create a pool. See docs/tool.md.
//
// Every command but `recover` and `create` is read-only: it opens the file O_RDONLY, takes a
// shared flock (a pool open in a process holds LOCK_EX: the tool then reports it and touches
// nothing) and maps it PROT_READ anywhere in its address space.

#include "json_writer.hpp"
#include "pool_view.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <tlptm/tlptm.hpp>

#ifndef TLPTM_TOOL_VERSION
#define TLPTM_TOOL_VERSION "unknown"
#endif

namespace tlptm::tool {
namespace {

using detail::entry_format;
using detail::entry_view;
using detail::log_record;
using detail::pool_header;
using tlptm::heap_stats;

// ---- command line -------------------------------------------------------------------------

/// A malformed command line: the message and the command's usage go to stderr, exit 2.
class usage_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct command;

/// The options and operands of one command, parsed against its option table.
struct arguments {
    const command* cmd = nullptr;
    std::vector<std::string> operands;
    std::map<std::string, std::string> values; ///< options with a value, by long name
    std::set<std::string> flags;               ///< options without a value, by long name
    bool help = false;

    bool has(const std::string& flag) const { return flags.count(flag) != 0; }
    const std::string* value(const std::string& name) const {
        auto it = values.find(name);
        return it == values.end() ? nullptr : &it->second;
    }
    /// The single POOL operand.
    const std::string& pool() const {
        if (operands.empty())
            throw usage_error("missing POOL");
        if (operands.size() > 1)
            throw usage_error("unexpected argument '" + operands[1] + "'");
        return operands[0];
    }
};

struct option_spec {
    const char* name; ///< long name, without the dashes
    bool takes_value;
};

struct command {
    const char* name;
    const char* summary;
    const char* usage; ///< full help text, starting with the synopsis
    std::vector<option_spec> options;
    int (*run)(const arguments&);
};

/// Parses `--name`, `--name VALUE`, `--name=VALUE`, `-h`, `--help` and operands (`--` ends the
/// options). Throws usage_error for unknown options or a missing value.
arguments parse_arguments(const command& cmd, int argc, char** argv, int first) {
    arguments a;
    a.cmd = &cmd;
    bool options_done = false;
    for (int i = first; i < argc; ++i) {
        std::string arg = argv[i];
        if (options_done || arg.size() < 2 || arg[0] != '-') {
            a.operands.push_back(arg);
            continue;
        }
        if (arg == "--") {
            options_done = true;
            continue;
        }
        if (arg == "-h" || arg == "--help") {
            a.help = true;
            continue;
        }
        if (arg.compare(0, 2, "--") != 0)
            throw usage_error("unknown option '" + arg + "'");
        std::string name = arg.substr(2), value;
        bool inline_value = false;
        if (auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name.resize(eq);
            inline_value = true;
        }
        auto spec = std::find_if(cmd.options.begin(), cmd.options.end(),
                                 [&](const option_spec& o) { return name == o.name; });
        if (spec == cmd.options.end())
            throw usage_error("unknown option '--" + name + "'");
        if (!spec->takes_value) {
            if (inline_value)
                throw usage_error("option '--" + name + "' takes no value");
            a.flags.insert(name);
            continue;
        }
        if (!inline_value) {
            if (i + 1 >= argc)
                throw usage_error("option '--" + name + "' needs a value");
            value = argv[++i];
        }
        a.values[name] = value;
    }
    return a;
}

/// Parses a byte count with an optional binary suffix: 4096, 64K, 8M, 1G, 2T (also KiB, MiB,
/// GiB, TiB, lower case too). A "0x" prefix reads hexadecimal digits.
std::uint64_t parse_size(const std::string& option, const std::string& text) {
    auto bad = [&](const char* why) {
        return usage_error("option '--" + option + "': '" + text + "' " + why +
                           " (expected a number with an optional suffix K, M, G or T)");
    };
    std::size_t i = 0;
    unsigned radix = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        radix = 16;
        i = 2;
    }
    std::uint64_t v = 0;
    std::size_t digits = 0;
    for (; i < text.size(); ++i, ++digits) {
        auto c = static_cast<unsigned char>(text[i]);
        unsigned d;
        if (std::isdigit(c))
            d = c - '0';
        else if (radix == 16 && std::isxdigit(c))
            d = static_cast<unsigned>(std::tolower(c) - 'a' + 10);
        else
            break;
        if (__builtin_mul_overflow(v, radix, &v) || __builtin_add_overflow(v, d, &v))
            throw bad("is too large");
    }
    if (digits == 0)
        throw bad("is not a size");
    std::string suffix = text.substr(i);
    for (auto& c : suffix)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    unsigned shift = 0;
    if (!suffix.empty()) {
        static const std::map<std::string, unsigned> shifts = {
            {"K", 10},  {"M", 20},   {"G", 30},   {"T", 40},   {"KB", 10},  {"MB", 20}, {"GB", 30},
            {"TB", 40}, {"KIB", 10}, {"MIB", 20}, {"GIB", 30}, {"TIB", 40}, {"B", 0}};
        auto it = shifts.find(suffix);
        if (it == shifts.end())
            throw bad("has an unknown suffix");
        shift = it->second;
    }
    if (shift != 0 && v > (~std::uint64_t{0} >> shift))
        throw bad("is too large");
    return v << shift;
}

// ---- formatting ---------------------------------------------------------------------------

std::string hex(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
    return buf;
}

std::string hex16(std::uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
    return buf;
}

/// "8388608 bytes (8 MiB)": the exact count, and a binary unit when it is at least 1 KiB.
std::string bytes_text(std::uint64_t n) {
    std::string s = std::to_string(n) + (n == 1 ? " byte" : " bytes");
    static const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = -1;
    double v = static_cast<double>(n);
    while (v >= 1024 && u < 3) {
        v /= 1024;
        ++u;
    }
    if (u >= 0) {
        char buf[32];
        if (v == static_cast<double>(static_cast<std::uint64_t>(v)))
            std::snprintf(buf, sizeof buf, " (%.0f %s)", v, units[u]);
        else
            std::snprintf(buf, sizeof buf, " (%.2f %s)", v, units[u]);
        s += buf;
    }
    return s;
}

std::string uuid_hex(const pool_header& h) {
    std::string s;
    char buf[4];
    for (std::uint8_t b : h.uuid) {
        std::snprintf(buf, sizeof buf, "%02x", b);
        s += buf;
    }
    return s;
}

const char* format_name(entry_format f) {
    switch (f) {
    case entry_format::baseline:
        return "baseline";
    case entry_format::compressed:
        return "compressed";
    }
    return "unknown";
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// One "  key   value" line of the text reports.
void field(std::string_view key, const std::string& value) {
    std::printf("  %-20.*s %s\n", static_cast<int>(key.size()), key.data(), value.c_str());
}

/// Bytes of a ring that hold entries (0 for a damaged header's ring size below one line).
std::uint64_t entry_capacity(const pool_header& h) {
    return h.ring_size < detail::ring_header_bytes ? 0 : h.ring_size - detail::ring_header_bytes;
}

// ---- info ---------------------------------------------------------------------------------

/// What `info` reports about the log of a valid pool.
struct log_summary {
    struct ring_info {
        std::uint32_t index;
        std::uint64_t generation, base_ts, entries, bytes, oldest_ts, newest_ts, to_replay;
    };
    std::vector<ring_info> rings; ///< rings with at least one valid entry
    std::uint32_t ring_count = 0;
    std::uint64_t entries = 0, bytes = 0, to_replay = 0;
    std::uint64_t oldest_ts = 0, newest_ts = 0; ///< meaningful when entries > 0
};

log_summary summarize_log(std::uint64_t ct, const std::vector<ring_scan>& rings) {
    log_summary s;
    s.ring_count = static_cast<std::uint32_t>(rings.size());
    for (const ring_scan& r : rings) {
        if (r.entries.empty())
            continue;
        log_summary::ring_info ri{
            r.index,   r.generation,         r.base_ts,           r.entries.size(),
            r.bytes(), r.entries.front().ts, r.entries.back().ts, 0};
        for (const entry_view& e : r.entries)
            ri.to_replay += e.ts > ct;
        if (s.entries == 0 || ri.oldest_ts < s.oldest_ts)
            s.oldest_ts = ri.oldest_ts;
        s.newest_ts = std::max(s.newest_ts, ri.newest_ts);
        s.entries += ri.entries;
        s.bytes += ri.bytes;
        s.to_replay += ri.to_replay;
        s.rings.push_back(ri);
    }
    return s;
}

/// "16 B: 3, 48 B: 1": superblocks per block size, for the classes in use.
std::string classes_text(const heap_stats& f) {
    std::string s;
    for (std::size_t c = 0; c < heap_stats::max_classes; ++c) {
        if (f.superblocks_per_class[c] == 0)
            continue;
        if (!s.empty())
            s += ", ";
        s += std::to_string(f.block_sizes[c]) + " B: " + std::to_string(f.superblocks_per_class[c]);
    }
    return s.empty() ? "none" : s;
}

void print_allocator_text(const allocator_summary& a) {
    if (a.log_refused) {
        field("allocator", "not rebuilt: recovery would refuse the log (run 'tlptm check')");
        return;
    }
    if (!a.ok) {
        field("allocator", "DAMAGED: " + a.error);
        return;
    }
    const heap_stats& f = a.figures;
    field("allocator", std::to_string(f.superblocks) +
                           " superblocks: " + std::to_string(a.root_superblocks) +
                           " for the root, " + std::to_string(a.small_superblocks()) +
                           " of small blocks, " + std::to_string(f.superblocks_large) +
                           " in large spans, " + std::to_string(f.superblocks_free) + " free");
    field("", std::to_string(f.bytes_in_use) + " bytes in use in " +
                  std::to_string(f.bytes_in_superblocks) + " bytes of superblocks");
    field("", "superblocks per block size: " + classes_text(f));
    if (a.entries_replayed > 0)
        field("", "(as recovery rebuilds it, after replaying " +
                      plural(a.entries_replayed, "entry", "entries") + ")");
    if (a.entries_refused > 0)
        field("", "(recovery would refuse " + plural(a.entries_refused, "entry", "entries") +
                      " as never committed: a ring's last entry whose new blocks do not match "
                      "its checksum)");
}

void print_info_text(const pool_view& v) {
    const pool_header& h = v.header();
    std::printf("%s\n", v.path().c_str());
    if (!v.valid())
        field("validation", "FAILED: " + v.header_error());
    if (!v.header_present()) {
        field("magic", v.file_size() < detail::header_bytes ? "missing (file shorter than a header)"
                                                            : "bad (not a tlptm pool)");
        return;
    }
    field("magic", "ok");
    field("format version", std::to_string(h.version));
    if (h.layout_check == 0)
        field("layout name", "none (created without pool_options::layout)");
    else
        field("layout name", "'" + detail::stored_layout(h) + "'");
    field("uuid", uuid_hex(h));
    field("size", bytes_text(h.pool_size));
    field("base address", hex(h.base_address));
    field("header", "offset 0, " + bytes_text(h.header_size));
    field("log rings", "offset " + std::to_string(h.log_offset) + ", " +
                           plural(h.max_threads, "ring", "rings") + " of " +
                           bytes_text(h.ring_size));
    field("max threads", std::to_string(h.max_threads));
    field("ring size",
          bytes_text(h.ring_size) + ", " + std::to_string(entry_capacity(h)) + " for entries");
    field("allocator metadata",
          "offset " + std::to_string(h.meta_offset) + ", " + bytes_text(h.meta_size));
    field("heap", "offset " + std::to_string(h.heap_offset) + ", " + bytes_text(h.heap_size) +
                      ", " +
                      (h.superblock_size == 0
                           ? std::string("superblock size 0")
                           : std::to_string(h.heap_size / h.superblock_size) + " superblocks of " +
                                 std::to_string(h.superblock_size) + " bytes"));
    field("root capacity",
          "offset " + std::to_string(h.root_offset) + ", " + bytes_text(h.root_capacity));
    if (h.root_info == 0)
        field("root", "not set (no root requested yet)");
    else
        field("root", plural(h.root_info & 0xFFFFFFFFu, "byte", "bytes") + " (may grow to " +
                          std::to_string(detail::max_root_size(h.root_capacity)) + ")");
    field("checkpoint CT", std::to_string(h.checkpoint_ts));
    if (!v.valid())
        return;
    field("layout version",
          std::to_string(v.layout_version()) + " (pool.layout_version(), before any replay)");

    const std::vector<ring_scan> rings = v.scan_rings();
    print_allocator_text(v.allocator_after_replay(rings));
    log_summary s = summarize_log(v.checkpoint(), rings);
    std::printf("log (recovery replays the entries with ts > CT)\n");
    for (const auto& r : s.rings)
        field("ring " + std::to_string(r.index),
              "generation " + std::to_string(r.generation) + ", base_ts " +
                  std::to_string(r.base_ts) + ", " + plural(r.entries, "entry", "entries") + ", " +
                  plural(r.bytes, "byte", "bytes") + ", ts " + std::to_string(r.oldest_ts) + ".." +
                  std::to_string(r.newest_ts) + ", " + std::to_string(r.to_replay) +
                  " with ts > CT");
    if (s.entries == 0)
        field("total",
              "no valid entries in " + plural(s.ring_count, "ring", "rings") + ", 0 with ts > CT");
    else
        field("total", plural(s.entries, "entry", "entries") + " in " +
                           std::to_string(s.rings.size()) + " of " +
                           plural(s.ring_count, "ring", "rings") + ", " +
                           plural(s.bytes, "byte", "bytes") + ", ts " +
                           std::to_string(s.oldest_ts) + ".." + std::to_string(s.newest_ts) + ", " +
                           std::to_string(s.to_replay) + " with ts > CT");
}

void print_info_json(const pool_view& v) {
    const pool_header& h = v.header();
    json_writer j;
    j.begin_object();
    j.string("path", v.path());
    j.boolean("header_valid", v.valid());
    if (v.valid())
        j.null("header_error");
    else
        j.string("header_error", v.header_error());
    j.boolean("magic_ok", v.header_present());
    if (v.header_present()) {
        j.number("format_version", std::uint64_t{h.version});
        if (h.layout_check == 0)
            j.null("layout_name");
        else
            j.string("layout_name", detail::stored_layout(h));
        j.string("uuid", uuid_hex(h));
        j.number("pool_size", h.pool_size);
        j.string("base_address", hex(h.base_address));
        j.number("header_size", std::uint64_t{h.header_size});
        j.number("log_offset", h.log_offset);
        j.number("ring_size", h.ring_size);
        j.number("ring_capacity", entry_capacity(h));
        j.number("max_threads", std::uint64_t{h.max_threads});
        j.number("meta_offset", h.meta_offset);
        j.number("meta_size", h.meta_size);
        j.number("heap_offset", h.heap_offset);
        j.number("heap_size", h.heap_size);
        j.number("superblock_size", h.superblock_size);
        j.number("root_offset", h.root_offset);
        j.number("root_capacity", h.root_capacity);
        if (h.root_info == 0) {
            j.null("root");
        } else {
            j.begin_object("root");
            j.number("size", h.root_info & 0xFFFFFFFFu);
            j.number("max_size", detail::max_root_size(h.root_capacity));
            j.end_object();
        }
        j.number("checkpoint_ts", h.checkpoint_ts);
    }
    if (v.valid())
        j.number("layout_version", v.layout_version());
    else if (v.header_present())
        j.null("layout_version");
    if (v.valid()) {
        const std::vector<ring_scan> rings = v.scan_rings();
        const allocator_summary a = v.allocator_after_replay(rings);
        j.begin_object("allocator");
        j.boolean("valid", a.ok);
        if (a.ok)
            j.null("error");
        else
            j.string("error",
                     a.log_refused ? "not rebuilt: recovery would refuse the log" : a.error);
        if (a.ok) {
            const heap_stats& f = a.figures;
            j.number("entries_replayed_first", a.entries_replayed);
            j.number("entries_refused", a.entries_refused);
            j.number("superblocks", f.superblocks);
            j.number("root_superblocks", a.root_superblocks);
            j.number("small_superblocks", a.small_superblocks());
            j.number("large_superblocks", f.superblocks_large);
            j.number("free_superblocks", f.superblocks_free);
            j.number("bytes_in_use", f.bytes_in_use);
            j.number("bytes_in_superblocks", f.bytes_in_superblocks);
            j.begin_array("classes");
            for (std::size_t c = 0; c < heap_stats::max_classes; ++c) {
                if (f.superblocks_per_class[c] == 0)
                    continue;
                j.begin_object();
                j.number("block_size", std::uint64_t{f.block_sizes[c]});
                j.number("superblocks", std::uint64_t{f.superblocks_per_class[c]});
                j.end_object();
            }
            j.end_array();
        }
        j.end_object();
        log_summary s = summarize_log(v.checkpoint(), rings);
        j.begin_array("rings");
        for (const auto& r : s.rings) {
            j.begin_object();
            j.number("ring", std::uint64_t{r.index});
            j.number("generation", r.generation);
            j.number("base_ts", r.base_ts);
            j.number("entries", r.entries);
            j.number("bytes", r.bytes);
            j.number("oldest_ts", r.oldest_ts);
            j.number("newest_ts", r.newest_ts);
            j.number("entries_to_replay", r.to_replay);
            j.end_object();
        }
        j.end_array();
        j.begin_object("totals");
        j.number("rings", std::uint64_t{s.ring_count});
        j.number("rings_with_entries", std::uint64_t{s.rings.size()});
        j.number("entries", s.entries);
        j.number("bytes", s.bytes);
        if (s.entries == 0) {
            j.null("oldest_ts");
            j.null("newest_ts");
        } else {
            j.number("oldest_ts", s.oldest_ts);
            j.number("newest_ts", s.newest_ts);
        }
        j.number("entries_to_replay", s.to_replay);
        j.end_object();
    }
    j.end_object();
    std::fputs(j.str().c_str(), stdout);
}

int run_info(const arguments& a) {
    pool_view v(a.pool());
    if (a.has("json"))
        print_info_json(v);
    else
        print_info_text(v);
    return v.valid() ? exit_ok : exit_problems;
}

// ---- check --------------------------------------------------------------------------------

/// Bad records listed per entry before the rest are summed up in one line.
constexpr std::size_t max_record_problems_per_entry = 8;

int run_check(const arguments& a) {
    pool_view v(a.pool());
    std::size_t problems = 0;
    auto report = [&](const std::string& what) {
        std::printf("%s: %s\n", v.path().c_str(), what.c_str());
        ++problems;
    };
    auto finish = [&] {
        if (problems == 0)
            std::printf("%s: ok\n", v.path().c_str());
        else
            std::printf("%s: %zu problem(s)\n", v.path().c_str(), problems);
        return problems == 0 ? exit_ok : exit_problems;
    };

    if (!v.valid()) {
        // Nothing past the header can be located without trusting it.
        report(v.header_error());
        return finish();
    }
    const pool_header& h = v.header();
    const std::string areas = "the heap [" + hex(h.heap_offset) + ", " +
                              hex(h.heap_offset + h.heap_size) + ") and the allocator metadata [" +
                              hex(h.meta_offset) + ", " + hex(h.meta_offset + h.meta_size) + ")";

    struct stamp {
        std::uint64_t ts;
        std::uint32_t ring;
        std::size_t offset;
        const entry_view* entry;
    };
    std::vector<stamp> stamps;
    const std::vector<ring_scan> rings = v.scan_rings();
    for (const ring_scan& r : rings) {
        const std::string ring = "ring " + std::to_string(r.index);
        if (r.base_ts > detail::max_timestamp)
            report(ring + ": base_ts " + std::to_string(r.base_ts) +
                   " exceeds the 56-bit timestamp range (recovery ignores this ring)");
        if (!v.ring_reserved_zero(r.index))
            report(ring + ": reserved bytes 16..63 of the ring header are not zero");
        for (std::size_t i = 0; i < r.beyond_damage.size(); ++i)
            if (r.beyond_damage[i].ts > v.checkpoint()) {
                report(ring + ": the entry at offset " + std::to_string(r.end) +
                       " fails its checksum, yet a valid entry with ts " +
                       std::to_string(r.beyond_damage[i].ts) + " > CT follows it at offset " +
                       std::to_string(r.beyond_offsets[i]) +
                       ": the log was damaged after it was written (recovery refuses it)");
                break;
            }
        for (std::size_t i = 0; i < r.entries.size(); ++i) {
            const entry_view& e = r.entries[i];
            const std::string where = ring + ": entry ts " + std::to_string(e.ts) + " at offset " +
                                      std::to_string(r.offsets[i]);
            stamps.push_back(stamp{e.ts, r.index, r.offsets[i], &e});
            std::size_t index = 0, bad = 0;
            bool decoded = detail::decode_records(e, h.base_address, [&](const log_record& rec) {
                std::string why;
                if (rec.offset % 8 != 0)
                    why = "offset " + hex(rec.offset) + " is not 8-byte aligned";
                else if (!v.replayable(rec.offset))
                    why = "offset " + hex(rec.offset) + " lies outside " + areas;
                else if (rec.mask == 0)
                    why = "offset " + hex(rec.offset) + " has an empty byte mask";
                if (!why.empty() && bad++ < max_record_problems_per_entry)
                    report(where + ": record " + std::to_string(index) + ": " + why);
                ++index;
            });
            if (bad > max_record_problems_per_entry)
                report(where + ": " + std::to_string(bad - max_record_problems_per_entry) +
                       " more bad records not listed");
            if (!decoded)
                report(where + ": " + format_name(e.format) +
                       " payload cannot be decoded (malformed after " +
                       plural(index, "record", "records") + ")");
            detail::for_each_covered(e, [&](const detail::pool_range& b) {
                if (!v.in_heap(b.offset, b.size))
                    report(where + ": a block it covers (offset " + hex(b.offset) + ", " +
                           std::to_string(b.size) + " bytes) lies outside the heap");
            });
        }
    }
    // Commits of disjoint data may share a timestamp; two entries with the same ts that write
    // the same word are corruption, and recovery refuses to replay them.
    std::sort(stamps.begin(), stamps.end(), [](const stamp& x, const stamp& y) {
        return x.ts != y.ts ? x.ts < y.ts : x.ring < y.ring;
    });
    std::vector<const entry_view*> entries;
    for (const stamp& x : stamps)
        entries.push_back(x.entry);
    std::set<std::pair<std::size_t, std::size_t>> reported; // one problem per pair of entries
    detail::for_each_word_written_twice_at_one_ts(
        entries, h.base_address, [&](std::size_t i, std::size_t j, std::uint64_t offset) {
            const stamp& x = stamps[i];
            const stamp& y = stamps[j];
            if (reported.emplace(i, j).second)
                report("ring " + std::to_string(y.ring) + ": entry ts " + std::to_string(y.ts) +
                       " at offset " + std::to_string(y.offset) + ": writes offset " + hex(offset) +
                       ", as does the entry with the same timestamp in ring " +
                       std::to_string(x.ring) + " at offset " + std::to_string(x.offset));
        });
    // The allocator metadata must rebuild once the log is replayed (after a crash it may be
    // half written back until then). If recovery would refuse the log, the entry is reported.
    allocator_summary alloc = v.allocator_after_replay(rings);
    if (!alloc.ok && !alloc.log_refused)
        report(alloc.error);
    return finish();
}

// ---- dump-log -----------------------------------------------------------------------------

/// What a record's pool offset is, when it is not an ordinary heap word: the root object, or
/// a superblock's descriptor or bitmap in the allocator metadata.
std::string record_place(const pool_header& h, std::uint64_t offset) {
    if (offset >= h.root_offset && offset - h.root_offset < h.root_capacity)
        return "  (root + " + std::to_string(offset - h.root_offset) + ")";
    if (offset >= h.meta_offset && offset - h.meta_offset < h.meta_size) {
        std::uint64_t rel = offset - h.meta_offset;
        std::uint64_t sb = rel / detail::meta_bytes_per_superblock;
        std::uint64_t in = rel % detail::meta_bytes_per_superblock;
        std::string what = "  (superblock " + std::to_string(sb);
        if (in < detail::bitmap_offset_in_meta)
            return what + (in == 0 ? " descriptor)" : " descriptor line)");
        return what + " bitmap word " + std::to_string((in - detail::bitmap_offset_in_meta) / 8) +
               ")";
    }
    return {};
}

int run_dump_log(const arguments& a) {
    pool_view v(a.pool());
    if (!v.valid())
        throw failure(exit_problems, v.path() + ": " + v.header_error());
    const bool all = a.has("all");
    const std::uint64_t ct = v.checkpoint();
    struct item {
        std::uint32_t ring;
        std::size_t offset;
        entry_view entry;
    };
    std::vector<item> items;
    std::uint64_t to_replay = 0;
    for (const ring_scan& r : v.scan_rings())
        for (std::size_t i = 0; i < r.entries.size(); ++i) {
            to_replay += r.entries[i].ts > ct;
            if (all || r.entries[i].ts > ct)
                items.push_back(item{r.index, r.offsets[i], r.entries[i]});
        }
    std::stable_sort(items.begin(), items.end(),
                     [](const item& x, const item& y) { return x.entry.ts < y.entry.ts; });

    if (all)
        std::printf("%s: checkpoint CT %" PRIu64 "; %s, %" PRIu64
                    " with ts > CT; in ts order across rings\n",
                    v.path().c_str(), ct,
                    plural(items.size(), "valid entry", "valid entries").c_str(), to_replay);
    else
        std::printf("%s: checkpoint CT %" PRIu64 "; %s with ts > CT, in replay order\n",
                    v.path().c_str(), ct, plural(items.size(), "entry", "entries").c_str());

    int status = exit_ok;
    const std::uint64_t base = v.header().base_address;
    std::vector<log_record> records;
    for (const item& it : items) {
        records.clear();
        bool ok = detail::decode_records(it.entry, v.header().base_address,
                                         [&](const log_record& r) { records.push_back(r); });
        std::vector<detail::pool_range> covered;
        std::uint32_t covered_crc = detail::for_each_covered(
            it.entry, [&](const detail::pool_range& b) { covered.push_back(b); });
        std::printf("entry ts %" PRIu64 "  ring %u  offset %zu  %s  %zu bytes  %s%s\n", it.entry.ts,
                    it.ring, it.offset, format_name(it.entry.format), it.entry.length,
                    plural(records.size(), "record", "records").c_str(),
                    it.entry.ts > ct ? "" : "  (ts <= CT: applied, not replayed)");
        if (!covered.empty())
            std::printf("  covers %s, CRC32C %08x\n",
                        plural(covered.size(), "new block", "new blocks").c_str(), covered_crc);
        for (const detail::pool_range& b : covered)
            std::printf("  block  offset %s  %" PRIu64 " bytes%s\n", hex(b.offset).c_str(), b.size,
                        b.offset >= v.header().heap_offset &&
                                b.offset - v.header().heap_offset <= v.header().heap_size &&
                                b.size <= v.header().heap_size - (b.offset - v.header().heap_offset)
                            ? ""
                            : "  (outside the heap: recovery refuses the log)");
        for (const log_record& r : records) {
            std::string notes = record_place(v.header(), r.offset);
            // A value that points into the pool is shown as the offset it points to as well.
            if (r.value - base < v.header().pool_size)
                notes += "  (-> pool offset " + hex(r.value - base) + ")";
            std::printf("  offset %s  mask %s  value %s%s\n", hex(r.offset).c_str(),
                        hex16(r.mask).c_str(), hex16(r.value).c_str(), notes.c_str());
        }
        if (!ok) {
            std::printf("  malformed: the payload cannot be decoded past the records above\n");
            status = exit_problems;
        }
    }
    return status;
}

// ---- recover and create -------------------------------------------------------------------

/// Fails with the tool's "in use" message if another process holds the pool open, so that
/// recover/create report it the same way as the read-only commands. The shared lock is dropped
/// again before the library opens the file.
void refuse_if_locked(const std::string& path) {
    open_shared_locked(path);
}

int run_recover(const arguments& a) {
    const std::string& path = a.pool();
    refuse_if_locked(path);
    tlptm::pool p = tlptm::pool::open(path);
    recovery_report r = p.last_recovery();
    p.close();
    auto ms = std::chrono::duration<double, std::milli>(r.duration).count();
    char duration[48];
    std::snprintf(duration, sizeof duration, "%.3f ms", ms);
    std::printf("%s: recovered\n", path.c_str());
    field("checkpoint before", std::to_string(r.checkpoint_before));
    field("checkpoint after", std::to_string(r.checkpoint_after));
    field("rings scanned", std::to_string(r.rings_scanned));
    field("entries valid", std::to_string(r.entries_valid));
    field("entries replayed", std::to_string(r.entries_replayed));
    field("entries uncommitted", std::to_string(r.entries_uncommitted));
    field("records replayed", std::to_string(r.records_replayed));
    field("log bytes scanned", std::to_string(r.log_bytes_scanned));
    field("duration", duration);
    return exit_ok;
}

int run_create(const arguments& a) {
    const std::string& path = a.pool();
    pool_options opt;
    const std::string* size = a.value("size");
    if (!size)
        throw usage_error("missing --size");
    opt.size = parse_size("size", *size);
    if (const std::string* s = a.value("max-threads")) {
        std::uint64_t n = parse_size("max-threads", *s);
        if (n == 0 || n > 4096)
            throw usage_error("option '--max-threads': " + *s + " is not in 1..4096");
        opt.max_threads = static_cast<std::uint32_t>(n);
    }
    if (const std::string* s = a.value("log-capacity"))
        opt.log_capacity = parse_size("log-capacity", *s);
    if (const std::string* s = a.value("root-capacity"))
        opt.root_capacity = parse_size("root-capacity", *s);
    if (const std::string* s = a.value("base-address"))
        opt.base_address = parse_size("base-address", *s);
    if (const std::string* s = a.value("layout"))
        opt.layout = *s;

    struct stat sb {};
    if (::stat(path.c_str(), &sb) == 0) {
        refuse_if_locked(path); // an open pool is reported as such
        throw failure(exit_problems, path + ": cannot create: the file already exists");
    }
    tlptm::pool p = tlptm::pool::create(path, opt);
    p.close();
    std::printf("%s: created\n", path.c_str());
    pool_view v(path);
    print_info_text(v);
    return v.valid() ? exit_ok : exit_problems;
}

// ---- the command table --------------------------------------------------------------------

const std::vector<command>& commands() {
    static const std::vector<command> table = {
        {"info",
         "header fields, areas and a summary of the log rings",
         "usage: tlptm info POOL [--json]\n"
         "\n"
         "Prints the pool header (magic, format version, layout name, uuid, size, base\n"
         "address, the offsets and sizes of the areas, max threads, ring size, root capacity\n"
         "and root size, the checkpoint timestamp CT), the program's layout version, the\n"
         "allocator as recovery rebuilds it (superblocks by kind\n"
         "and block size, bytes in use) and, per log ring with valid entries, its generation,\n"
         "base_ts, entries, bytes, oldest and newest ts and how many entries have ts > CT\n"
         "(recovery would replay them), with totals. Read-only.\n"
         "\n"
         "  --json      print one JSON object with the same facts\n"
         "  -h, --help  print this help\n"
         "\n"
         "Exit status: 0 ok, 1 invalid header or pool in use, 2 usage error or unreadable "
         "file.\n",
         {{"json", false}},
         run_info},
        {"check",
         "validate the header and every log entry (never writes)",
         "usage: tlptm check POOL\n"
         "\n"
         "Validates the header field by field, then every log ring: each valid entry's records\n"
         "must decode, lie 8-byte aligned in the heap or the allocator metadata and have a\n"
         "non-empty mask; no two entries may carry the same timestamp; the allocator metadata\n"
         "(descriptors and bitmaps) must rebuild once the log is replayed (the replay is done\n"
         "in a private copy of the mapping). A torn entry is not an error: it is simply not a\n"
         "valid entry (recovery ignores it; `info` counts fewer entries). Prints one line per\n"
         "problem, 'POOL: <where>: <problem>', then 'POOL: ok' or 'POOL: N problem(s)'.\n"
         "Opens the file read-only and maps it PROT_READ (and a private copy-on-write view).\n"
         "\n"
         "  -h, --help  print this help\n"
         "\n"
         "Exit status: 0 clean, 1 problems found or pool in use, 2 usage error or unreadable "
         "file.\n",
         {},
         run_check},
        {"dump-log",
         "list the log entries recovery would replay, record by record",
         "usage: tlptm dump-log POOL [--all]\n"
         "\n"
         "Lists the entries with ts > CT (those recovery replays) in ts order across rings:\n"
         "ring, offset in the ring's entry area, ts, format (baseline/compressed), bytes and\n"
         "record count, then one line per record: pool offset, byte mask and value (hex).\n"
         "Pointer values of compressed records are decoded with the header's base address.\n"
         "Read-only.\n"
         "\n"
         "  --all       list every valid entry of every ring, also those with ts <= CT\n"
         "  -h, --help  print this help\n"
         "\n"
         "Exit status: 0 ok, 1 invalid header, malformed entry or pool in use, 2 usage error\n"
         "or unreadable file.\n",
         {{"all", false}},
         run_dump_log},
        {"recover",
         "open the pool (runs recovery), report what recovery did, close",
         "usage: tlptm recover POOL\n"
         "\n"
         "Opens the pool with tlptm::pool::open, which replays the committed log entries with\n"
         "ts > CT and advances CT, prints the recovery report and closes the pool. Writes to\n"
         "the pool; refuses a pool that another process has open. Recovery writes nothing if\n"
         "any entry to replay is corrupt (it reports which).\n"
         "\n"
         "  -h, --help  print this help\n"
         "\n"
         "Exit status: 0 recovered, 1 the library refused (damaged header, corrupt log, pool\n"
         "in use), 2 usage error or unreadable file.\n",
         {},
         run_recover},
        {"create",
         "create a new pool file",
         "usage: tlptm create POOL --size SIZE [--layout NAME] [--max-threads N]\n"
         "                         [--log-capacity SIZE] [--root-capacity SIZE]\n"
         "                         [--base-address ADDR]\n"
         "\n"
         "Creates a pool with tlptm::pool::create (POOL must not exist) and prints its info.\n"
         "Sizes take the suffixes K, M, G, T (powers of 1024); numbers may be hexadecimal\n"
         "with a 0x prefix.\n"
         "\n"
         "  --size SIZE           size of the pool file (rounded up to 4 KiB)\n"
         "  --layout NAME         the pool's layout name (pool_options::layout), up to 119\n"
         "                        bytes; default: none\n"
         "  --max-threads N       threads that may run transactions at once (one log ring\n"
         "                        each), 1..4096; default 16\n"
         "  --log-capacity SIZE   log bytes per ring, 4K..2G; default 0: from the pool size\n"
         "                        (an eighth of the pool for all rings, 16K..1M each)\n"
         "  --root-capacity SIZE  bytes reserved for the root object; default 64K\n"
         "  --base-address ADDR   address to map the pool at, page aligned; default: chosen\n"
         "                        at random in [16 TiB, 96 TiB)\n"
         "  -h, --help            print this help\n"
         "\n"
         "Exit status: 0 created, 1 the library refused (file exists, options cannot make a\n"
         "pool), 2 usage error.\n",
         {{"size", true},
          {"layout", true},
          {"max-threads", true},
          {"log-capacity", true},
          {"root-capacity", true},
          {"base-address", true}},
         run_create},
    };
    return table;
}

std::string tool_usage() {
    std::string s = "usage: tlptm <command> [options] POOL\n"
                    "\n"
                    "Inspects, checks and recovers tlptm pool files.\n"
                    "\n"
                    "commands:\n";
    for (const command& c : commands()) {
        char line[160];
        std::snprintf(line, sizeof line, "  %-10s %s\n", c.name, c.summary);
        s += line;
    }
    s += "\n"
         "Run 'tlptm <command> --help' for the options of a command.\n"
         "Exit status: 0 success (a clean pool), 1 problems found, pool in use or the library\n"
         "refused, 2 usage error or unreadable file.\n";
    return s;
}

const command* find_command(std::string_view name) {
    for (const command& c : commands())
        if (name == c.name)
            return &c;
    return nullptr;
}

int run(int argc, char** argv) {
    if (argc < 2) {
        std::fputs(tool_usage().c_str(), stderr);
        return exit_usage;
    }
    std::string_view name = argv[1];
    if (name == "-h" || name == "--help" || name == "help") {
        const command* c = argc > 2 ? find_command(argv[2]) : nullptr;
        std::fputs(c ? c->usage : tool_usage().c_str(), stdout);
        return exit_ok;
    }
    if (name == "--version") {
        std::printf("tlptm %s\n", TLPTM_TOOL_VERSION);
        return exit_ok;
    }
    const command* cmd = find_command(name);
    if (!cmd) {
        std::fprintf(stderr, "tlptm: unknown command '%.*s'\n\n%s", static_cast<int>(name.size()),
                     name.data(), tool_usage().c_str());
        return exit_usage;
    }
    try {
        arguments a = parse_arguments(*cmd, argc, argv, 2);
        if (a.help) {
            std::fputs(cmd->usage, stdout);
            return exit_ok;
        }
        a.pool(); // a missing or extra operand is a usage error before anything is touched
        return cmd->run(a);
    } catch (const usage_error& e) {
        std::fflush(stdout);
        // The synopsis is the usage text up to its first blank line.
        std::string_view usage = cmd->usage;
        usage = usage.substr(0, usage.find("\n\n") + 1);
        std::fprintf(stderr, "tlptm %s: %s\n%.*sRun 'tlptm %s --help' for more.\n", cmd->name,
                     e.what(), static_cast<int>(usage.size()), usage.data(), cmd->name);
        return exit_usage;
    } catch (const failure& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", e.what());
        return e.status();
    } catch (const tlptm::error& e) {
        // The library's messages name the file and the field.
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", e.what());
        return exit_problems;
    }
}

} // namespace
} // namespace tlptm::tool

int main(int argc, char** argv) {
    try {
        return tlptm::tool::run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "tlptm: %s\n", e.what());
        return tlptm::tool::exit_problems;
    }
}
