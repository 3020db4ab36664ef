// tlptm-scale: throughput against threads, with error bars, for tlptm and PMDK libpmemobj
// side by side, and a fit of the Universal Scalability Law to each curve. See docs/scaling.md.
//
//   tlptm-scale [--workload LIST] [--backend tlptm|pmdk|both] [--threads LIST]
//               [--max-threads P] [--reps R] [--duration SECONDS] [--keys N] [--range N]
//               [--accounts N] [--hot N] [--conflict LIST] [--cores N] [--fit-all] [--no-pin]
//               [--pool-dir DIR] [--csv FILE] [--json FILE] [--seed N] [--verbose] [--quiet]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "../../examples/hashtable/cli.hpp"
#include "../../examples/hashtable/pool_cleanup.hpp"
#include "report.hpp"
#include "workloads.hpp"

namespace {

using namespace tlptm_scale;
using workloads::cli::join;
using workloads::cli::parse_u64;
using workloads::cli::split;
using workloads::cli::usage_error;

struct options {
    std::vector<workload_kind> kinds{workload_kind::spin,     workload_kind::chase,
                                     workload_kind::persist,  workload_kind::lookup,
                                     workload_kind::disjoint, workload_kind::b,
                                     workload_kind::c,        workload_kind::bank};
    std::vector<double> conflicts{0.0, 0.25};
    bool run_tlptm = true, run_pmdk = true;
    std::vector<unsigned> threads; ///< empty: the default for max_threads
    unsigned max_threads = 0;      ///< 0: twice the cores
    unsigned reps = 5;
    unsigned cores = 0; ///< 0: the CPUs this process may run on
    bool fit_all = false;
    bool pin = true;  ///< --no-pin clears it
    scale_config cfg; ///< cfg.cpus: filled in main() when pinned
    std::string pool_dir;
    std::string csv, json;
    bool verbose = false, quiet = false;
};

void print_usage(std::FILE* out) {
    std::fprintf(
        out, "usage: tlptm-scale [options]\n"
             "  --workload LIST      spin, chase, persist, lookup, disjoint, b, c, bank, or all\n"
             "                       (default all; spin, chase and persist are calibrations\n"
             "                       without transactions)\n"
             "  --backend B          tlptm, pmdk or both (default both)\n"
             "  --threads LIST       thread counts, e.g. 1,2,4,8 or 1-16 (default 1 .. P)\n"
             "  --max-threads P      the largest thread count (default twice the cores)\n"
             "  --reps R             repetitions per thread count (default 5, at least 2)\n"
             "  --duration SECONDS   measured time of one run (default 0.2)\n"
             "  --keys N             keys preloaded for lookup, b and c (default 16384)\n"
             "  --range N            disjoint: keys per thread; persist: lines per thread\n"
             "                       (default 2048)\n"
             "  --accounts N         bank: accounts per thread (default 1024)\n"
             "  --hot N              bank: accounts of the shared hot set (default 8)\n"
             "  --conflict LIST      bank: conflict rates, each a series (default 0,0.25)\n"
             "  --cores N            cores to assume (default: the CPUs this process may use)\n"
             "  --fit-all            fit the USL to the oversubscribed thread counts too\n"
             "  --no-pin             let the scheduler place the threads (default: worker t\n"
             "                       on the t-th allowed CPU, the data made on the first)\n"
             "  --pool-dir DIR       where the pool files go (default /dev/shm, else $TMPDIR)\n"
             "  --durability D       tlptm: pmem (emulated persistent memory, default) or msync\n"
             "  --csv FILE           points; FILE-fits.csv and FILE-curves.csv are written beside\n"
             "  --json FILE          everything, every repetition included\n"
             "  --seed N             random seed (default 1)\n"
             "  --verbose            one line per run on stderr\n"
             "  --quiet              print only the fit summary and errors\n");
}

double parse_double(const std::string& opt, const std::string& v) {
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(d >= 0))
        throw usage_error(opt + " needs a non-negative number, got '" + v + "'");
    return d;
}

/// "1,2,4" or "1-8" or "1-4,8,16": sorted, without duplicates.
std::vector<unsigned> parse_threads(const std::string& v) {
    std::vector<unsigned> out;
    for (const std::string& part : split(v)) {
        const std::size_t dash = part.find('-');
        const std::uint64_t lo = parse_u64("--threads", part.substr(0, dash));
        const std::uint64_t hi =
            dash == std::string::npos ? lo : parse_u64("--threads", part.substr(dash + 1));
        if (lo < 1 || hi < lo || hi > 4096)
            throw usage_error("--threads: '" + part + "' is not a range within 1..4096");
        for (std::uint64_t t = lo; t <= hi; ++t)
            out.push_back(static_cast<unsigned>(t));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            print_usage(stdout);
            std::exit(0);
        } else if (a == "--workload") {
            o.kinds.clear();
            for (const std::string& w : split(value())) {
                if (w == "all")
                    o.kinds = options{}.kinds;
                else if (w == "spin")
                    o.kinds.push_back(workload_kind::spin);
                else if (w == "chase")
                    o.kinds.push_back(workload_kind::chase);
                else if (w == "persist")
                    o.kinds.push_back(workload_kind::persist);
                else if (w == "lookup")
                    o.kinds.push_back(workload_kind::lookup);
                else if (w == "disjoint")
                    o.kinds.push_back(workload_kind::disjoint);
                else if (w == "b")
                    o.kinds.push_back(workload_kind::b);
                else if (w == "c")
                    o.kinds.push_back(workload_kind::c);
                else if (w == "bank")
                    o.kinds.push_back(workload_kind::bank);
                else
                    throw usage_error("--workload: unknown workload '" + w + "'");
            }
        } else if (a == "--backend") {
            const std::string b = value();
            if (b != "tlptm" && b != "pmdk" && b != "both")
                throw usage_error("--backend: tlptm, pmdk or both");
            o.run_tlptm = b != "pmdk";
            o.run_pmdk = b != "tlptm";
        } else if (a == "--threads") {
            o.threads = parse_threads(value());
        } else if (a == "--max-threads") {
            const std::uint64_t p = parse_u64(a, value());
            if (p < 1 || p > 4096)
                throw usage_error("--max-threads: 1..4096");
            o.max_threads = static_cast<unsigned>(p);
        } else if (a == "--reps") {
            const std::uint64_t r = parse_u64(a, value());
            if (r < 2 || r > 1000)
                throw usage_error("--reps: 2..1000 (an error needs two repetitions)");
            o.reps = static_cast<unsigned>(r);
        } else if (a == "--duration") {
            o.cfg.seconds = parse_double(a, value());
            if (o.cfg.seconds < 0.01 || o.cfg.seconds > 3600)
                throw usage_error("--duration: 0.01 .. 3600 seconds");
        } else if (a == "--keys") {
            o.cfg.keys = parse_u64(a, value());
        } else if (a == "--range") {
            o.cfg.range = parse_u64(a, value());
        } else if (a == "--accounts") {
            o.cfg.accounts = parse_u64(a, value());
        } else if (a == "--hot") {
            o.cfg.hot = parse_u64(a, value());
        } else if (a == "--conflict") {
            o.conflicts.clear();
            for (const std::string& c : split(value())) {
                const double r = parse_double(a, c);
                if (r > 1)
                    throw usage_error("--conflict: rates are probabilities in [0, 1]");
                o.conflicts.push_back(r);
            }
        } else if (a == "--cores") {
            const std::uint64_t c = parse_u64(a, value());
            if (c < 1 || c > 4096)
                throw usage_error("--cores: 1..4096");
            o.cores = static_cast<unsigned>(c);
        } else if (a == "--no-pin") {
            o.pin = false;
        } else if (a == "--pin") { // the default; accepted so that older command lines run
            o.pin = true;
        } else if (a == "--fit-all") {
            o.fit_all = true;
        } else if (a == "--pool-dir") {
            o.pool_dir = value();
        } else if (a == "--durability") {
            const std::string d = value();
            if (d == "pmem")
                o.cfg.durability = tlptm::durability::emulate_pmem;
            else if (d == "msync")
                o.cfg.durability = tlptm::durability::msync;
            else
                throw usage_error("--durability: pmem or msync");
        } else if (a == "--csv") {
            o.csv = value();
        } else if (a == "--json") {
            o.json = value();
        } else if (a == "--seed") {
            o.cfg.seed = parse_u64(a, value());
        } else if (a == "--verbose") {
            o.verbose = true;
        } else if (a == "--quiet") {
            o.quiet = true;
        } else {
            throw usage_error("unknown option '" + a + "'");
        }
    }
    if (o.kinds.empty())
        throw usage_error("--workload: no workload");
    if (o.cfg.keys < 16 || o.cfg.range < 1)
        throw usage_error("--keys needs at least 16, --range at least 1");
    if (o.cfg.hot < 2 || o.cfg.accounts < 2)
        throw usage_error("--hot and --accounts need at least 2 accounts each");
    return o;
}

/// The CPUs this process may run on (its affinity mask: taskset and cgroups count).
unsigned available_cores() {
    const std::vector<int> cpus = workloads::allowed_cpus();
    return cpus.empty() ? std::max(1u, std::thread::hardware_concurrency())
                        : static_cast<unsigned>(cpus.size());
}

/// 1 .. P when P <= 16; otherwise about 16 counts spread geometrically (each about 1.25-1.5x
/// the last), with the core count itself among them.
std::vector<unsigned> default_threads(unsigned max_threads, unsigned cores) {
    std::vector<unsigned> t;
    if (max_threads <= 16) {
        for (unsigned p = 1; p <= max_threads; ++p)
            t.push_back(p);
        return t;
    }
    for (unsigned p = 1; p <= 4; ++p)
        t.push_back(p);
    for (double p = 6; p < max_threads; p *= 1.33)
        t.push_back(static_cast<unsigned>(p + 0.5));
    t.push_back(max_threads);
    if (cores <= max_threads)
        t.push_back(cores);
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    return t;
}

/// The 1-minute load average (/proc/loadavg), or a negative number if unknown.
double load_average() {
    std::FILE* f = std::fopen("/proc/loadavg", "r");
    if (f == nullptr)
        return -1;
    double load = -1;
    if (std::fscanf(f, "%lf", &load) != 1)
        load = -1;
    std::fclose(f);
    return load;
}

/// Warns when other processes keep the cores busy: then p threads do not get p cores, and the
/// speedups (and sigma) say more about the neighbours than about the workload.
void warn_if_busy(double load, unsigned cores) {
    if (load > 0.5 * cores)
        std::fprintf(stderr,
                     "tlptm-scale: warning: load average %.2f before the runs on %u cores: other "
                     "processes compete for the cores, the speedups will be understated\n",
                     load, cores);
}

std::string pool_path_in(const std::string& dir_opt) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir = dir_opt.empty() ? fs::path("/dev/shm") : fs::path(dir_opt);
    if (dir_opt.empty() && (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0))
        dir = fs::temp_directory_path(ec);
    return (dir / ("tlptm-scale-" + std::to_string(::getpid()) + ".pool")).string();
}

} // namespace

int main(int argc, char** argv) {
    // Before the first libpmemobj call: treat the pool file as persistent memory (CPU flushes,
    // no msync), the same emulation tlptm gets from durability::emulate_pmem.
    ::setenv("PMEM_IS_PMEM_FORCE", "1", 1);
    options o;
    try {
        o = parse(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "tlptm-scale: %s\n\n", e.what());
        print_usage(stderr);
        return 2;
    }

    scale_header h;
    h.cores = o.cores ? o.cores : available_cores();
    const unsigned max_threads = o.max_threads ? o.max_threads : 2 * h.cores;
    h.thread_counts = o.threads.empty() ? default_threads(max_threads, h.cores) : o.threads;
    if (h.thread_counts.front() != 1)
        h.thread_counts.insert(h.thread_counts.begin(), 1); // S(p) is relative to X(1)
    o.cfg.max_threads = h.thread_counts.back();
    o.cfg.pool_path = pool_path_in(o.pool_dir);
    h.reps = o.reps;
    h.seconds = o.cfg.seconds;
    h.keys = o.cfg.keys;
    h.range = o.cfg.range;
    h.accounts = o.cfg.accounts;
    h.hot = o.cfg.hot;
    h.seed = o.cfg.seed;
    h.msync = o.cfg.durability == tlptm::durability::msync;
    h.pool_path = o.cfg.pool_path;
    h.load_before = load_average();
#ifdef TLPTM_SCALE_PMEMOBJ_VERSION
    h.pmemobj_version = TLPTM_SCALE_PMEMOBJ_VERSION;
#endif
    std::error_code ec;
    if (std::filesystem::exists(o.cfg.pool_path, ec)) {
        std::fprintf(stderr, "tlptm-scale: the pool file %s exists; remove it\n",
                     o.cfg.pool_path.c_str());
        return 2;
    }
    workloads::remove_pool_on_interrupt(o.cfg.pool_path);
    // Pinned, this thread (it makes, preloads and checks every run's data) stays on the first
    // allowed CPU and worker t runs on the t-th: worker 0 finds the data warm in its CPU's
    // caches at every thread count, for both backends alike (docs/scaling.md, "Pinning").
    if (o.pin)
        o.cfg.cpus = workloads::pin_main_thread("tlptm-scale");
    h.cpus = o.cfg.cpus;

    std::vector<workload_spec> specs;
    for (workload_kind k : o.kinds) {
        if (k == workload_kind::bank)
            for (double c : o.conflicts)
                specs.push_back({k, c});
        else
            specs.push_back({k, 0.0});
    }
    std::vector<bool> backends; // true: tlptm
    if (o.run_tlptm)
        backends.push_back(true);
    if (o.run_pmdk)
        backends.push_back(false);

    if (!o.quiet) {
        std::printf("tlptm-scale: throughput against threads, Universal Scalability Law fit\n");
        std::printf("  %u cores; threads", h.cores);
        for (unsigned t : h.thread_counts)
            std::printf(" %u%s", t, t > h.cores ? "*" : "");
        std::printf(" (* oversubscribed)\n");
        std::printf("  %u repetitions of %.2f s per point, each on a fresh pool in %s\n", o.reps,
                    o.cfg.seconds, o.cfg.pool_path.c_str());
        std::printf("  tlptm: log mode tlptm, durability::%s; PMDK: libpmemobj %s with "
                    "striped locks, PMEM_IS_PMEM_FORCE=1\n",
                    o.cfg.durability == tlptm::durability::msync ? "msync" : "emulate_pmem",
                    h.pmemobj_version.c_str());
        std::printf("  lookup / b / c: %llu preloaded keys; disjoint: %llu keys per thread; "
                    "bank: %llu accounts per thread, %llu hot\n",
                    static_cast<unsigned long long>(o.cfg.keys),
                    static_cast<unsigned long long>(o.cfg.range),
                    static_cast<unsigned long long>(o.cfg.accounts),
                    static_cast<unsigned long long>(o.cfg.hot));
        if (o.cfg.cpus.empty())
            std::printf("  threads not pinned: the scheduler places them (%s)\n",
                        o.pin ? "the affinity could not be set" : "--no-pin");
        else
            std::printf("  threads pinned: worker t on CPU number t mod %zu of %s; the data "
                        "made and checked on CPU %d (--no-pin: the scheduler places them)\n",
                        o.cfg.cpus.size(), join(o.cfg.cpus).c_str(), o.cfg.cpus[0]);
        if (h.load_before >= 0)
            std::printf("  load average before the runs: %.2f\n", h.load_before);
        std::printf("  the USL is fitted to %s\n", o.fit_all
                                                       ? "every thread count (--fit-all)"
                                                       : "the thread counts up to the core count");
        std::fflush(stdout);
    }

    warn_if_busy(h.load_before, h.cores);
    const auto started = std::chrono::steady_clock::now();
    std::vector<scale_series> all;
    int failures = 0;
    for (const workload_spec& w : specs) {
        std::vector<scale_series> group;
        // A calibration has no backend: one series, run once.
        const std::vector<bool> series_backends =
            is_calibration(w.kind) ? std::vector<bool>{true} : backends;
        for (bool tl : series_backends) {
            scale_series s;
            s.workload = w.name();
            s.description = w.describe();
            s.backend = is_calibration(w.kind) ? "none" : tl ? "tlptm" : "pmdk";
            s.fit_oversubscribed = o.fit_all;
            for (unsigned t : h.thread_counts) {
                scale_point p;
                p.threads = t;
                p.oversubscribed = t > h.cores;
                s.points.push_back(p);
            }
            group.push_back(std::move(s));
        }
        if (!o.quiet)
            std::fprintf(stderr, "tlptm-scale: %s: %zu runs...\n", w.name().c_str(),
                         group.size() * h.thread_counts.size() * o.reps);
        // Repetition by repetition over every thread count and backend, so that a slow drift
        // of the machine spreads over all points instead of biasing some.
        for (unsigned rep = 0; rep < o.reps; ++rep) {
            for (std::size_t pi = 0; pi < h.thread_counts.size(); ++pi) {
                for (std::size_t bi = 0; bi < series_backends.size(); ++bi) {
                    scale_config cfg = o.cfg;
                    cfg.seed = o.cfg.seed + rep * 1000003ull;
                    const unsigned t = h.thread_counts[pi];
                    const run_outcome r = run_workload(w, series_backends[bi], cfg, t);
                    scale_point& p = group[bi].points[pi];
                    if (r.error.empty()) {
                        p.throughputs.push_back(r.throughput());
                        p.ops += r.ops;
                        p.aborts += r.aborts;
                        p.fences += r.fences;
                        p.msync_calls += r.msync_calls;
                    } else {
                        p.errors.push_back(r.error);
                        ++failures;
                        std::fprintf(stderr, "tlptm-scale: %s %s p=%u rep %u FAILED: %s\n",
                                     w.name().c_str(), group[bi].backend.c_str(), t, rep + 1,
                                     r.error.c_str());
                    }
                    if (o.verbose)
                        std::fprintf(stderr, "  %s %s p=%u rep %u: %.0f tx/s\n", w.name().c_str(),
                                     group[bi].backend.c_str(), t, rep + 1, r.throughput());
                }
            }
        }
        for (scale_series& s : group) {
            analyse(s, h.cores);
            if (!o.quiet)
                print_series(stdout, s, h);
            std::fflush(stdout);
            all.push_back(std::move(s));
        }
    }
    std::error_code rm;
    std::filesystem::remove(o.cfg.pool_path, rm);
    h.load_after = load_average(); // this program's threads included: for the record only

    print_fit_summary(stdout, all);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!o.quiet)
        std::printf("\n%.0f s in all.\n", elapsed);

    int status = failures ? 1 : 0;
    if (!o.csv.empty()) {
        if (std::string bad = write_csv(o.csv, all, h); !bad.empty()) {
            std::fprintf(stderr, "tlptm-scale: cannot write %s: %s\n", bad.c_str(),
                         std::strerror(errno));
            status = 1;
        } else if (!o.quiet) {
            std::printf("wrote %s, %s, %s\n", o.csv.c_str(), sibling_csv(o.csv, "-fits").c_str(),
                        sibling_csv(o.csv, "-curves").c_str());
        }
    }
    if (!o.json.empty()) {
        if (!write_json(o.json, all, h)) {
            std::fprintf(stderr, "tlptm-scale: cannot write %s\n", o.json.c_str());
            status = 1;
        } else if (!o.quiet) {
            std::printf("wrote %s\n", o.json.c_str());
        }
    }
    if (failures)
        std::fprintf(stderr, "tlptm-scale: %d runs FAILED (see above)\n", failures);
    return status;
}
