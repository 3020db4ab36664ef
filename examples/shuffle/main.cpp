// tlptm-shuffle: a persistent shuffle store after NV-Shuffle, against file-based shuffles.
// docs/shuffle.md describes the design, the options and the figures.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "driver.hpp"

namespace {

using namespace shuffle;

const char* usage_text =
    R"(usage: tlptm-shuffle [options]

Modes (--mode):
  compare   the four backends and the in-memory no-shuffle baseline side by side on the same
            records (default)
  sweep     tlptm private and shared buffers for chunk sizes 4 KiB .. 1 MiB: throughput, space
  skew      lazy against eager allocation (private buffers): allocations and space
  crash     kill the map stage with SIGKILL at random moments, restart, compare (--kills N)

Job:
  --workload terasort|wordcount   (terasort)
  --size BYTES          input data, suffixes k m g (256m)
  --maps M              map tasks (16)
  --reduces R           reduce tasks = partitions (16)
  --threads T           worker threads running the tasks (2)
  --record-size B       terasort record size (100; 10-byte key)
  --zipf S              key / word skew exponent, 0 = uniform (terasort 0, wordcount 0.99)
  --vocabulary N        wordcount: distinct words (65536)
  --no-combine          wordcount: no map-side combining
  --seed N              (1)
Store:
  --backend B           tlptm-private|tlptm-shared|file-hash|file-sort|in-memory|all (all);
                        in-memory: no shuffle, the records handed over in DRAM (the baseline
                        the summary subtracts; generate-only is an old name for it)
  --chunk BYTES         chunk size incl. its 16-byte header (64k; wordcount, skew mode 8k)
  --eager               allocate one chunk per (map, partition) up front
  --no-prefault         do not map the whole pool's pages when it is created (by default the
                        shuffle's pools are prefaulted: MADV_POPULATE_WRITE, setup time)
  --no-populate         without prefault: no madvise(MADV_POPULATE_WRITE) per new chunk
  --chunk-tx            private buffers: one transaction per chunk (records staged in DRAM)
                        instead of one transaction per map task
  --copy-read           tlptm reducers copy the records out of the pool before sorting
  --write-ns N[,N...]   emulated persistent-memory write latency per line (0)
  --dir PATH            pools and shuffle files (/dev/shm)
Output:
  --repeat N            run each configuration N times, keep the run of least CPU time (1);
                        compare mode: N rounds over all configurations (interleaved)
  --kills N             crash mode: kills (30)
  --csv FILE  --json FILE  --progress  --quiet
)";

std::uint64_t parse_size(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    std::string suf = end ? end : "";
    std::uint64_t mul = 1;
    if (suf == "k" || suf == "K" || suf == "KiB")
        mul = 1ull << 10;
    else if (suf == "m" || suf == "M" || suf == "MiB")
        mul = 1ull << 20;
    else if (suf == "g" || suf == "G" || suf == "GiB")
        mul = 1ull << 30;
    else if (!suf.empty())
        throw std::invalid_argument("bad size: " + s);
    if (v < 0)
        throw std::invalid_argument("bad size: " + s);
    return static_cast<std::uint64_t>(v * static_cast<double>(mul));
}

std::vector<std::uint32_t> parse_list(const std::string& s) {
    std::vector<std::uint32_t> v;
    std::size_t at = 0;
    while (at <= s.size()) {
        std::size_t comma = s.find(',', at);
        std::string item =
            s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        v.push_back(static_cast<std::uint32_t>(std::stoul(item)));
        if (comma == std::string::npos)
            break;
        at = comma + 1;
    }
    return v;
}

struct cli {
    std::string mode = "compare";
    job_options job;
    std::vector<backend_kind> backends;
    std::vector<std::uint32_t> write_ns{0};
    bool zipf_set = false;
    bool prefault_set = false;
    unsigned kills = 30;
    unsigned repeat = 1;
    std::string csv, json;
    bool quiet = false;
};

cli parse(int argc, char** argv) {
    cli c;
    c.job.prefault = true; // the shuffle's pools are prefaulted (docs/shuffle.md)
    bool chunk_set = false;
    std::string backend = "all";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            std::fputs(usage_text, stdout);
            std::exit(0);
        } else if (a == "--mode") {
            c.mode = value();
        } else if (a == "--workload") {
            std::string v = value();
            if (v == "terasort")
                c.job.w.kind = workload_kind::terasort;
            else if (v == "wordcount")
                c.job.w.kind = workload_kind::wordcount;
            else
                throw std::invalid_argument("unknown workload " + v);
        } else if (a == "--size") {
            c.job.w.input_bytes = parse_size(value());
        } else if (a == "--maps") {
            c.job.w.maps = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (a == "--reduces") {
            c.job.w.partitions = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (a == "--threads") {
            c.job.threads = static_cast<unsigned>(std::stoul(value()));
        } else if (a == "--record-size") {
            c.job.w.record_size = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (a == "--zipf") {
            c.job.w.zipf = std::stod(value());
            c.zipf_set = true;
        } else if (a == "--vocabulary") {
            c.job.w.vocabulary = static_cast<std::uint32_t>(std::stoul(value()));
        } else if (a == "--no-combine") {
            c.job.w.combine = false;
        } else if (a == "--seed") {
            c.job.w.seed = std::stoull(value());
        } else if (a == "--backend") {
            backend = value();
        } else if (a == "--chunk") {
            c.job.chunk_size = parse_size(value());
            chunk_set = true;
        } else if (a == "--prefault") {
            c.job.prefault = true;
            c.prefault_set = true;
        } else if (a == "--no-prefault") {
            c.job.prefault = false;
            c.prefault_set = true;
        } else if (a == "--no-populate") {
            c.job.populate = false;
        } else if (a == "--chunk-tx") {
            c.job.task_transaction = false;
        } else if (a == "--copy-read") {
            c.job.read_in_place = false;
        } else if (a == "--eager") {
            c.job.lazy = false;
        } else if (a == "--write-ns") {
            c.write_ns = parse_list(value());
        } else if (a == "--dir") {
            c.job.dir = value();
        } else if (a == "--repeat") {
            c.repeat = std::max(1u, static_cast<unsigned>(std::stoul(value())));
        } else if (a == "--kills") {
            c.kills = static_cast<unsigned>(std::stoul(value()));
        } else if (a == "--csv") {
            c.csv = value();
        } else if (a == "--json") {
            c.json = value();
        } else if (a == "--progress") {
            c.job.progress = true;
        } else if (a == "--quiet") {
            c.quiet = true;
        } else {
            throw std::invalid_argument("unknown option " + a + " (--help)");
        }
    }
    if (!c.zipf_set && c.job.w.kind == workload_kind::wordcount)
        c.job.w.zipf = 0.99;
    // TeraSort: 64 KiB chunks, one allocator superblock each (docs/shuffle.md, the sweep).
    // WordCount's small shuffle and the skew mode's fine partitioning (thousands of (map,
    // partition) pairs of a few KiB) keep the paper's 8 KiB.
    if (!chunk_set)
        c.job.chunk_size =
            c.mode == "skew" || c.job.w.kind == workload_kind::wordcount ? 8192 : 65536;
    for (backend_kind b :
         {backend_kind::tlptm_private, backend_kind::tlptm_shared, backend_kind::file_hash,
          backend_kind::file_sort, backend_kind::in_memory})
        if (backend == "all" || backend == to_string(b) ||
            (backend == "generate-only" && b == backend_kind::in_memory))
            c.backends.push_back(b);
    if (c.backends.empty())
        throw std::invalid_argument("unknown backend " + backend);
    if (c.mode != "compare" && c.mode != "sweep" && c.mode != "skew" && c.mode != "crash")
        throw std::invalid_argument("unknown mode " + c.mode);
    c.job.w.validate();
    return c;
}

/// One row of the output: a run and the settings it ran with.
struct row {
    std::string mode;
    job_options job;
    job_result r;
};

std::string human(double bytes) {
    char buf[32];
    if (bytes >= 1 << 20)
        std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1 << 20));
    else
        std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
    return buf;
}

/// The median (the mean of the two middle values of an even count; inf counts as the largest).
double median(std::vector<double> v) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void print_header() {
    std::printf("%-14s %6s %8s %6s | %8s %8s %8s | %7s %7s %7s %7s | %8s %7s %7s | %s\n", "backend",
                "wr_ns", "chunk", "alloc", "map MB/s", "red MB/s", "all MB/s", "map s", "red s",
                "map cpu", "red cpu", "space/B", "alloc/M", "aborts", "checksum");
}

void print_row(const row& x) {
    const job_result& r = x.r;
    double per_map = x.job.w.maps ? static_cast<double>(r.allocations) / x.job.w.maps : 0;
    std::string status = r.error.empty() ? "ok" : "FAILED: " + r.error;
    bool blocks = is_tlptm(x.job.backend) || x.job.backend == backend_kind::in_memory;
    std::printf("%-14s %6u %8s %6s | %8.0f %8.0f %8.0f | %7.3f %7.3f %7.3f %7.3f | %8.3f %7.1f "
                "%7llu | %016llx %s\n",
                r.backend.c_str(), r.write_ns,
                blocks ? human(static_cast<double>(r.chunk_size)).c_str() : "-",
                is_tlptm(x.job.backend) ? (r.lazy ? "lazy" : "eager") : "-", r.map_mbps(),
                r.reduce_mbps(), r.shuffle_mbps(), r.map_s, r.reduce_s, r.map_cpu_s, r.reduce_cpu_s,
                r.space_ratio(), per_map, static_cast<unsigned long long>(r.aborts),
                static_cast<unsigned long long>(r.checksum), status.c_str());
    std::fflush(stdout);
}

bool is_file(backend_kind b) {
    return b == backend_kind::file_hash || b == backend_kind::file_sort;
}

/// The in-memory baseline's stages: the same job with a hand-off between the stages that
/// costs nothing. A backend's stages less the baseline's are what its shuffle adds.
struct baseline {
    bool found = false;
    double map_cpu = 0, reduce_cpu = 0, map_wall = 0, reduce_wall = 0;
};

baseline baseline_of(const std::vector<row>& rows, const std::string& mode) {
    baseline b;
    for (const row& x : rows)
        if (x.mode == mode && x.job.backend == backend_kind::in_memory && x.r.error.empty()) {
            b.found = true;
            b.map_cpu = x.r.map_cpu_s;
            b.reduce_cpu = x.r.reduce_cpu_s;
            b.map_wall = x.r.map_s;
            b.reduce_wall = x.r.reduce_s;
            break;
        }
    return b;
}

/// What the shuffle adds to the job in CPU seconds (cpu) or wall-clock seconds: the backend's
/// map and reduce stages less the baseline's. A difference of two measurements, so noise can
/// make it 0 or negative. None without a baseline.
std::optional<double> shuffle_alone_s(const job_result& r, const baseline& b, bool cpu) {
    if (!b.found)
        return std::nullopt;
    return cpu ? r.map_cpu_s + r.reduce_cpu_s - b.map_cpu - b.reduce_cpu
               : r.map_s + r.reduce_s - b.map_wall - b.reduce_wall;
}

/// The map stage less the baseline's (the shuffle's write side).
std::optional<double> write_s(const job_result& r, const baseline& b, bool cpu) {
    if (!b.found)
        return std::nullopt;
    return cpu ? r.map_cpu_s - b.map_cpu : r.map_s - b.map_wall;
}

/// MB of shuffle data per second of `s`; none if there is no positive time to divide by (a
/// difference at or below 0 is noise, not an infinite rate).
std::optional<double> rate(const job_result& r, std::optional<double> s) {
    if (!s || *s <= 0)
        return std::nullopt;
    return static_cast<double>(r.shuffle_bytes) / *s / 1e6;
}

/// The best file shuffle's figure of a column. A file backend whose difference is not positive
/// (no figure) makes the best unknown: no x is printed against it.
struct best_of {
    std::optional<double> v;
    bool unknown = false;
    void add(std::optional<double> x) {
        if (!x)
            unknown = true;
        else if (!v || *x > *v)
            v = x;
    }
    std::optional<double> get() const { return unknown ? std::nullopt : v; }
};

std::string cell(std::optional<double> v, int width, int decimals = 0) {
    char buf[32];
    if (v)
        std::snprintf(buf, sizeof buf, "%*.*f", width, decimals, *v);
    else
        std::snprintf(buf, sizeof buf, "%*s", width, "n/a");
    return buf;
}

std::string times(std::optional<double> mine, std::optional<double> best) {
    char buf[32];
    if (mine && best && *best > 0)
        std::snprintf(buf, sizeof buf, "%5.2fx", *mine / *best);
    else
        std::snprintf(buf, sizeof buf, "%6s", "n/a");
    return buf;
}

/// The compare mode's tables: MB of shuffle data per CPU second of the stage's threads (the
/// machine is shared: wall time measures the others' load as much as this program), then per
/// wall-clock second. Beside the stages (whole = map + reduce), the shuffle alone: the map and
/// reduce stages less the in-memory baseline's (the same job, the records handed over in DRAM
/// at no cost), and its write side (the map stage less the baseline's); the reducers' fetch of
/// their data. x: against the best file-based shuffle of the same column. Setup: creating the
/// pool (with prefault, mapping its pages), the baseline's memory or the directory, before the
/// map stage; "+setup" adds it to whole. n/a: a backend's stages took no more time than the
/// baseline's (noise), so there is no rate to print.
void print_summary(const std::vector<row>& rows) {
    const std::string mode = rows.empty() ? "" : rows.front().mode;
    const baseline base = baseline_of(rows, mode);
    bool not_positive = false;
    auto per = [](const job_result& r, double s) {
        return s > 0 ? static_cast<double>(r.shuffle_bytes) / s / 1e6 : 0.0;
    };
    for (bool cpu : {true, false}) {
        auto map_rate = [&](const job_result& r) { return cpu ? r.map_cpu_mbps() : r.map_mbps(); };
        auto red_rate = [&](const job_result& r) {
            return cpu ? r.reduce_cpu_mbps() : r.reduce_mbps();
        };
        auto whole_rate = [&](const job_result& r) {
            return cpu ? r.shuffle_cpu_mbps() : r.shuffle_mbps();
        };
        auto alone_rate = [&](const job_result& r) {
            return rate(r, shuffle_alone_s(r, base, cpu));
        };
        auto write_rate = [&](const job_result& r) { return rate(r, write_s(r, base, cpu)); };
        auto read_rate = [&](const job_result& r) { return per(r, r.fetch_cpu_s); };
        auto setup_s = [&](const job_result& r) { return cpu ? r.setup_cpu_s : r.setup_s; };
        auto setup_rate = [&](const job_result& r) {
            return per(r, cpu ? r.map_cpu_s + r.reduce_cpu_s + r.setup_cpu_s
                              : r.map_s + r.reduce_s + r.setup_s);
        };
        double b_map = 0, b_red = 0, b_all = 0, b_read = 0, b_setup = 0;
        best_of b_alone, b_write;
        for (const row& x : rows)
            if (is_file(x.job.backend)) {
                b_map = std::max(b_map, map_rate(x.r));
                b_red = std::max(b_red, red_rate(x.r));
                b_all = std::max(b_all, whole_rate(x.r));
                b_alone.add(alone_rate(x.r));
                b_write.add(write_rate(x.r));
                b_read = std::max(b_read, read_rate(x.r));
                b_setup = std::max(b_setup, setup_rate(x.r));
            }
        if (base.found)
            std::printf("\nMB per %s second (in-memory baseline, no shuffle: map %.3f + reduce "
                        "%.3f %s; x = against the best file-based shuffle)\n",
                        cpu ? "CPU" : "wall-clock", cpu ? base.map_cpu : base.map_wall,
                        cpu ? base.reduce_cpu : base.reduce_wall, cpu ? "CPU s" : "s");
        else
            std::printf("\nMB per %s second (no in-memory baseline in this run: no shuffle or "
                        "write column; x = against the best file-based shuffle)\n",
                        cpu ? "CPU" : "wall-clock");
        std::printf("%-14s %6s | %6s %6s | %6s %6s | %6s %6s | %7s %6s | %6s %6s |", "backend",
                    "wr_ns", "map", "x", "reduce", "x", "whole", "x", "shuffle", "x", "write", "x");
        if (cpu)
            std::printf(" %7s %6s |", "read", "x");
        std::printf(" %7s | %8s %6s", "setup s", "+setup", "x");
        if (cpu)
            std::printf(" | %7s %7s", "space/B", "alloc/M");
        std::printf("\n");
        for (const row& x : rows) {
            const job_result& r = x.r;
            const bool is_base = x.job.backend == backend_kind::in_memory;
            std::optional<double> alone = alone_rate(r), write = write_rate(r);
            if (!is_base && base.found && (!alone || !write))
                not_positive = true;
            std::string alone_s = is_base ? "      -" : cell(alone, 7);
            std::string alone_x = is_base ? "     -" : times(alone, b_alone.get());
            std::string write_c = is_base ? "     -" : cell(write, 6);
            std::string write_x = is_base ? "     -" : times(write, b_write.get());
            std::printf("%-14s %6u | %6.0f %6s | %6.0f %6s | %6.0f %6s | %s %s | %s %s |",
                        r.backend.c_str(), r.write_ns, map_rate(r),
                        times(map_rate(r), b_map).c_str(), red_rate(r),
                        times(red_rate(r), b_red).c_str(), whole_rate(r),
                        times(whole_rate(r), b_all).c_str(), alone_s.c_str(), alone_x.c_str(),
                        write_c.c_str(), write_x.c_str());
            if (cpu)
                std::printf(" %7.0f %6s |", read_rate(r), times(read_rate(r), b_read).c_str());
            std::printf(" %7.3f | %8.0f %6s", setup_s(r), setup_rate(r),
                        times(setup_rate(r), b_setup).c_str());
            if (cpu)
                std::printf(" | %7.3f %7.1f", r.space_ratio(),
                            static_cast<double>(r.allocations) / x.job.w.maps);
            std::printf("\n");
        }
    }
    if (not_positive)
        std::printf("n/a: the backend's stages took no more time than the in-memory baseline's "
                    "(noise): no rate, and no x against it\n");
}

/// The shuffle-alone figures of a row for the CSV and JSON outputs: the baseline's stages,
/// and the backend's less them; empty (null) without a baseline, and the rate empty if the
/// difference is not positive.
struct alone_fields {
    std::string base_cpu, alone_cpu, alone_cpu_mbps, base_wall, alone_wall, alone_mbps;
};

alone_fields alone_of(const row& x, const baseline& b) {
    alone_fields f;
    if (!b.found)
        return f;
    auto num = [](std::optional<double> v) {
        if (!v)
            return std::string();
        std::ostringstream o;
        o << *v;
        return o.str();
    };
    f.base_cpu = num(b.map_cpu + b.reduce_cpu);
    f.base_wall = num(b.map_wall + b.reduce_wall);
    f.alone_cpu = num(shuffle_alone_s(x.r, b, true));
    f.alone_wall = num(shuffle_alone_s(x.r, b, false));
    f.alone_cpu_mbps = num(rate(x.r, shuffle_alone_s(x.r, b, true)));
    f.alone_mbps = num(rate(x.r, shuffle_alone_s(x.r, b, false)));
    return f;
}

void write_csv(const std::string& path, const std::vector<row>& rows) {
    std::ofstream f(path);
    f << "mode,workload,backend,write_ns,chunk_size,lazy,maps,partitions,threads,zipf,"
         "input_bytes,shuffle_bytes,shuffle_records,map_s,reduce_s,map_cpu_s,reduce_cpu_s,"
         "fetch_cpu_s,setup_s,setup_cpu_s,map_MBps,reduce_MBps,shuffle_MBps,map_cpu_MBps,reduce_"
         "cpu_MBps,"
         "shuffle_cpu_MBps,baseline_cpu_s,shuffle_alone_cpu_s,shuffle_alone_cpu_MBps,baseline_s,"
         "shuffle_alone_s,shuffle_alone_MBps,space_bytes,space_ratio,superblock_bytes,allocations,"
         "allocations_per_"
         "map,"
         "empty_chunks,transactions,aborts,log_bytes,flushed_lines,fences,checksum,valid\n";
    for (const row& x : rows) {
        const job_result& r = x.r;
        alone_fields a = alone_of(x, baseline_of(rows, x.mode));
        char sum[24];
        std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(r.checksum));
        f << x.mode << ',' << to_string(x.job.w.kind) << ',' << r.backend << ',' << r.write_ns
          << ',' << r.chunk_size << ',' << (r.lazy ? 1 : 0) << ',' << x.job.w.maps << ','
          << x.job.w.partitions << ',' << x.job.threads << ',' << x.job.w.zipf << ','
          << x.job.w.input_bytes << ',' << r.shuffle_bytes << ',' << r.shuffle_records << ','
          << r.map_s << ',' << r.reduce_s << ',' << r.map_cpu_s << ',' << r.reduce_cpu_s << ','
          << r.fetch_cpu_s << ',' << r.setup_s << ',' << r.setup_cpu_s << ',' << r.map_mbps() << ','
          << r.reduce_mbps() << ',' << r.shuffle_mbps() << ',' << r.map_cpu_mbps() << ','
          << r.reduce_cpu_mbps() << ',' << r.shuffle_cpu_mbps() << ',' << a.base_cpu << ','
          << a.alone_cpu << ',' << a.alone_cpu_mbps << ',' << a.base_wall << ',' << a.alone_wall
          << ',' << a.alone_mbps << ',' << r.space_bytes << ',' << r.space_ratio() << ','
          << r.superblock_bytes << ',' << r.allocations << ','
          << static_cast<double>(r.allocations) / x.job.w.maps << ',' << r.empty_chunks << ','
          << r.transactions << ',' << r.aborts << ',' << r.log_bytes << ',' << r.flushed_lines
          << ',' << r.fences << ',' << sum << ',' << (r.error.empty() ? 1 : 0) << '\n';
    }
}

void write_json(const std::string& path, const std::vector<row>& rows) {
    std::ofstream f(path);
    f << "[\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const row& x = rows[i];
        const job_result& r = x.r;
        alone_fields a = alone_of(x, baseline_of(rows, x.mode));
        auto value = [](const std::string& v) { return v.empty() ? std::string("null") : v; };
        char sum[24];
        std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(r.checksum));
        f << "  {\"mode\": \"" << x.mode << "\", \"workload\": \"" << to_string(x.job.w.kind)
          << "\", \"backend\": \"" << r.backend << "\", \"write_ns\": " << r.write_ns
          << ", \"chunk_size\": " << r.chunk_size << ", \"lazy\": " << (r.lazy ? "true" : "false")
          << ", \"maps\": " << x.job.w.maps << ", \"partitions\": " << x.job.w.partitions
          << ", \"threads\": " << x.job.threads << ", \"zipf\": " << x.job.w.zipf
          << ", \"input_bytes\": " << x.job.w.input_bytes
          << ", \"shuffle_bytes\": " << r.shuffle_bytes << ", \"map_s\": " << r.map_s
          << ", \"reduce_s\": " << r.reduce_s << ", \"map_cpu_s\": " << r.map_cpu_s
          << ", \"reduce_cpu_s\": " << r.reduce_cpu_s << ", \"fetch_cpu_s\": " << r.fetch_cpu_s
          << ", \"setup_s\": " << r.setup_s << ", \"setup_cpu_s\": " << r.setup_cpu_s
          << ", \"map_MBps\": " << r.map_mbps() << ", \"reduce_MBps\": " << r.reduce_mbps()
          << ", \"shuffle_MBps\": " << r.shuffle_mbps()
          << ", \"shuffle_cpu_MBps\": " << r.shuffle_cpu_mbps()
          << ", \"baseline_cpu_s\": " << value(a.base_cpu)
          << ", \"shuffle_alone_cpu_s\": " << value(a.alone_cpu)
          << ", \"shuffle_alone_cpu_MBps\": " << value(a.alone_cpu_mbps)
          << ", \"baseline_s\": " << value(a.base_wall)
          << ", \"shuffle_alone_s\": " << value(a.alone_wall)
          << ", \"shuffle_alone_MBps\": " << value(a.alone_mbps)
          << ", \"space_bytes\": " << r.space_bytes << ", \"space_ratio\": " << r.space_ratio()
          << ", \"allocations\": " << r.allocations << ", \"empty_chunks\": " << r.empty_chunks
          << ", \"aborts\": " << r.aborts << ", \"log_bytes\": " << r.log_bytes
          << ", \"checksum\": \"" << sum
          << "\", \"valid\": " << (r.error.empty() ? "true" : "false") << "}"
          << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    f << "]\n";
}

int run_crash_mode(const cli& c) {
    job_options o = c.job;
    o.backend = backend_kind::tlptm_private;
    o.write_ns = c.write_ns.front();
    o.tag = "crash";
    // No prefault unless asked: a restart's open then measures recovery, not page mapping.
    if (!c.prefault_set)
        o.prefault = false;
    crash_reference ref = reference_run(o);
    std::printf("crash test: %s, %s input, M=%u R=%u, chunk %s; crash-free map stage %.3f s, "
                "checksum %016llx\n",
                to_string(o.w.kind), human(static_cast<double>(o.w.input_bytes)).c_str(), o.w.maps,
                o.w.partitions, human(static_cast<double>(o.chunk_size)).c_str(), ref.map_s,
                static_cast<unsigned long long>(ref.checksum));
    std::printf("%4s %8s %6s %8s %7s %8s %9s %9s %9s %s\n", "kill", "after s", "kept", "rerun",
                "freed", "open ms", "restart ms", "rerun s", "heap ok", "checksum");
    std::mt19937_64 rng(o.w.seed * 7919 + 17);
    unsigned killed = 0, failed = 0;
    double restart_sum = 0, restart_max = 0;
    std::uint64_t kept_sum = 0;
    for (unsigned k = 0; k < c.kills; ++k) {
        // A random moment in the map stage (forking and opening the pool take a few ms).
        double after = ref.map_s * (0.02 + 0.93 * std::uniform_real_distribution<>(0, 1)(rng));
        crash_trial t = crash_and_restart(o, ref, after);
        killed += t.killed;
        failed += !t.error.empty();
        restart_sum += t.restart_s;
        restart_max = std::max(restart_max, t.restart_s);
        kept_sum += t.complete_before;
        std::printf(
            "%4u %8.3f %6u %8u %7llu %8.2f %9.2f %9.3f %9s %016llx %s\n", k + 1, after,
            t.complete_before, t.rerun, static_cast<unsigned long long>(t.discarded.chunks_freed),
            t.open_s * 1e3, t.restart_s * 1e3, t.rerun_s,
            t.heap_after_discard == t.heap_expected_after_discard && t.heap_final == ref.heap_final
                ? "yes"
                : "NO",
            static_cast<unsigned long long>(t.checksum),
            t.error.empty() ? (t.killed ? "ok" : "ok (finished before the kill)")
                            : ("FAILED: " + t.error).c_str());
        std::fflush(stdout);
    }
    std::printf("%u trials, %u killed in the map stage, %u failed; map tasks kept per crash "
                "%.1f of %u; restart (open + discard) mean %.2f ms, max %.2f ms\n",
                c.kills, killed, failed, c.kills ? static_cast<double>(kept_sum) / c.kills : 0,
                o.w.maps, c.kills ? restart_sum / c.kills * 1e3 : 0, restart_max * 1e3);
    return failed == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    cli c;
    try {
        c = parse(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tlptm-shuffle: %s\n", e.what());
        return 2;
    }
    try {
        if (c.mode == "crash")
            return run_crash_mode(c);
        std::vector<row> rows;
        bool failed = false;
        auto run = [&](const std::string& mode, job_options o) {
            // Best of --repeat runs: the machine is shared, the fastest run is the least
            // disturbed one. Every run is checked.
            row x{mode, o, run_job(o)};
            for (unsigned k = 1; k < c.repeat && x.r.error.empty(); ++k) {
                job_result again = run_job(o);
                if (!again.error.empty() ||
                    again.map_cpu_s + again.reduce_cpu_s < x.r.map_cpu_s + x.r.reduce_cpu_s)
                    x.r = again;
            }
            if (!c.quiet)
                print_row(x);
            failed |= !x.r.error.empty();
            rows.push_back(std::move(x));
        };
        const workload& w = c.job.w;
        std::printf("%s: %s input, M=%u map tasks, R=%u partitions, %u threads, zipf %.2f%s\n",
                    c.mode.c_str(), human(static_cast<double>(w.input_bytes)).c_str(), w.maps,
                    w.partitions, c.job.threads, w.zipf,
                    w.kind == workload_kind::terasort
                        ? (", terasort records of " + std::to_string(w.record_size) + " B").c_str()
                        : ", wordcount");
        if (!c.quiet)
            print_header();
        if (c.mode == "compare") {
            // --repeat N runs every configuration once per round, N rounds, and keeps each
            // configuration's run of least CPU time: the machine is shared, and interleaving
            // spreads the other load's bursts over all backends. Every run is checked.
            std::vector<job_options> configs;
            for (std::uint32_t ns : c.write_ns)
                for (backend_kind b : c.backends) {
                    if (ns != c.write_ns.front() && !is_tlptm(b))
                        continue; // files do not see the emulated latency
                    job_options o = c.job;
                    o.write_ns = ns;
                    o.backend = b;
                    o.tag = to_string(b);
                    configs.push_back(o);
                }
            // Per round, at the first write latency: tlptm-private against the best file
            // shuffle, on the whole job and on the shuffle alone (the stages less the in-memory
            // baseline's of the same round).
            std::vector<double> round_whole, round_alone;
            unsigned alone_na = 0;
            for (unsigned k = 0; k < c.repeat; ++k) {
                std::vector<job_result> got(configs.size());
                for (std::size_t i = 0; i < configs.size(); ++i) {
                    job_result& r = got[i];
                    r = run_job(configs[i]);
                    if (k == 0) {
                        rows.push_back(row{c.mode, configs[i], r});
                    } else if (rows[i].r.error.empty() &&
                               (!r.error.empty() ||
                                r.map_cpu_s + r.reduce_cpu_s <
                                    rows[i].r.map_cpu_s + rows[i].r.reduce_cpu_s)) {
                        rows[i].r = r;
                    }
                }
                std::vector<row> round;
                for (std::size_t i = 0; i < configs.size(); ++i)
                    if (configs[i].write_ns == c.write_ns.front())
                        round.push_back(row{c.mode, configs[i], got[i]});
                const job_result* mine = nullptr;
                double best_file = 0;
                for (const row& x : round)
                    if (x.job.backend == backend_kind::tlptm_private)
                        mine = &x.r;
                    else if (is_file(x.job.backend))
                        best_file = std::max(best_file, x.r.shuffle_cpu_mbps());
                if (!mine || best_file <= 0)
                    continue;
                round_whole.push_back(mine->shuffle_cpu_mbps() / best_file);
                baseline base = baseline_of(round, c.mode);
                if (!base.found)
                    continue;
                // The ratio of rates is the ratio of costs (the same bytes): the best file
                // shuffle's least cost over tlptm's. A cost at or below 0 is noise: tlptm's
                // makes the round's ratio unbounded (inf: above every measured one for the
                // median), a file shuffle's makes it 0; both, no ratio.
                double mine_s = *shuffle_alone_s(*mine, base, true);
                std::optional<double> file_s;
                for (const row& x : round)
                    if (is_file(x.job.backend)) {
                        double s = *shuffle_alone_s(x.r, base, true);
                        file_s = file_s ? std::min(*file_s, s) : s;
                    }
                if (mine_s > 0)
                    round_alone.push_back(std::max(0.0, *file_s) / mine_s);
                else if (*file_s > 0)
                    round_alone.push_back(std::numeric_limits<double>::infinity());
                else
                    ++alone_na;
            }
            for (const row& x : rows) {
                if (!c.quiet)
                    print_row(x);
                failed |= !x.r.error.empty();
            }
            auto print_rounds = [](const char* what, const std::vector<double>& v) {
                std::printf("%s, MB per CPU s, tlptm-private / best file shuffle, per round:",
                            what);
                for (double x : v)
                    std::printf(" %.2f", x);
                if (v.empty())
                    std::printf(" none; median n/a\n");
                else
                    std::printf("; median %.2f\n", median(v));
            };
            if (c.repeat > 1 && !round_whole.empty())
                print_rounds("whole job (map + reduce)", round_whole);
            if (c.repeat > 1 && (!round_alone.empty() || alone_na > 0)) {
                print_rounds("shuffle alone (less the in-memory baseline)", round_alone);
                bool inf = std::any_of(round_alone.begin(), round_alone.end(),
                                       [](double x) { return std::isinf(x); });
                bool zero = std::any_of(round_alone.begin(), round_alone.end(),
                                        [](double x) { return x == 0; });
                if (inf)
                    std::printf("  inf: tlptm-private's stages took no more CPU time than the "
                                "baseline's in that round (noise; counted above every ratio)\n");
                if (zero)
                    std::printf("  0: the best file shuffle's stages took no more CPU time than "
                                "the baseline's in that round (noise)\n");
                if (alone_na > 0)
                    std::printf("  %u rounds left out: both took no more than the baseline\n",
                                alone_na);
            }
        }
        for (std::uint32_t ns : c.write_ns) {
            job_options o = c.job;
            o.write_ns = ns;
            if (c.mode == "compare") {
            } else if (c.mode == "sweep") {
                for (backend_kind b : c.backends) {
                    if (!is_tlptm(b))
                        continue;
                    o.backend = b;
                    o.tag = to_string(b);
                    for (std::size_t chunk = 4096; chunk <= (1u << 20); chunk *= 2) {
                        o.chunk_size = chunk;
                        run(c.mode, o);
                    }
                }
            } else { // skew
                o.backend = backend_kind::tlptm_private;
                o.tag = "skew";
                for (bool lazy : {true, false}) {
                    o.lazy = lazy;
                    run(c.mode, o);
                }
            }
        }
        if (c.mode == "compare")
            print_summary(rows);
        // Every backend of a mode must agree on the result.
        for (const row& x : rows)
            if (x.r.error.empty() && x.r.checksum != rows.front().r.checksum) {
                std::printf("checksums differ between backends\n");
                failed = true;
                break;
            }
        if (!c.csv.empty())
            write_csv(c.csv, rows);
        if (!c.json.empty())
            write_json(c.json, rows);
        return failed ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tlptm-shuffle: %s\n", e.what());
        return 1;
    }
}
