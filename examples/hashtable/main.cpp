// tlptm-workloads: the paper's workloads a / b / c on a persistent chained hash table, over
// tlptm's log modes (baseline, aalo, cblo, tlptm) at 0 and 500 ns emulated write latency, over
// PMDK's libpmemobj transactions as a peer, and in plain volatile memory (the walk floor: the
// same table without TM or persistence). See docs/workloads.md.
//
//   tlptm-workloads [--workload a|b|c|all] [--mode baseline|aalo|cblo|tlptm|all]
//                   [--ops N] [--preload N] [--value-size BYTES] [--values small|random]
//                   [--threads N[,N...]] [--reps R] [--write-ns N[,N...]]
//                   [--backend tlptm|pmdk|volatile|both|all[,...]] [--pool PATH]
//                   [--csv FILE] [--json FILE]
//                   [--seed N] [--no-pin] [--quiet]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "affinity.hpp"
#include "backends.hpp"
#include "cli.hpp"
#include "driver.hpp"
#include "floor.hpp"
#include "pool_cleanup.hpp"
#include "results.hpp"
#include "value.hpp"
#include "volatile_hashtable.hpp"

namespace {

using namespace workloads;
using workloads::cli::parse_u64;
using workloads::cli::split;
using workloads::cli::usage_error;

constexpr std::uint64_t default_ops_0ns = 100000;
constexpr std::uint64_t default_ops_slow = 50000;
constexpr std::uint64_t default_preload = 100000;
constexpr unsigned max_reps = 100;

#if TLPTM_WORKLOADS_HAVE_PMDK
constexpr bool have_pmdk = true;
#else
constexpr bool have_pmdk = false;
#endif

struct options {
    std::vector<workload> workloads{workload::a, workload::b, workload::c};
    std::vector<tlptm::log_mode> modes{tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                       tlptm::log_mode::cblo, tlptm::log_mode::tlptm};
    std::vector<std::uint32_t> write_ns{0, 500};
    std::optional<std::uint64_t> ops;
    std::uint64_t preload = default_preload;
    std::size_t value_size = 8;
    value_kind values = value_kind::small;
    std::vector<unsigned> threads{1}; ///< thread counts, each its own configuration
    unsigned reps = 1;                ///< runs of every configuration, round-robin
    bool run_tlptm = true;
    bool run_pmdk = have_pmdk;
    bool run_volatile = true;
    std::string pool; ///< empty: a file in /dev/shm or $TMPDIR
    std::string csv, json;
    std::uint64_t seed = 1;
    bool quiet = false;
    bool pin = true; ///< --no-pin clears it
    /// Filled by main: worker t runs on cpus[t % size], the main thread on cpus[0]; empty when
    /// not pinned.
    std::vector<int> cpus;

    std::uint64_t ops_at(std::uint32_t ns) const {
        return ops ? *ops : (ns == 0 ? default_ops_0ns : default_ops_slow);
    }
    bool single_threaded() const { return threads.size() == 1 && threads[0] == 1; }
    bool has_one_thread() const {
        return std::find(threads.begin(), threads.end(), 1u) != threads.end();
    }
    bool has_zero_ns() const {
        return std::find(write_ns.begin(), write_ns.end(), 0u) != write_ns.end();
    }
    /// "2" or "1,2": the thread counts as --threads took them.
    std::string threads_list() const { return cli::join(threads); }
    std::string write_ns_list() const { return cli::join(write_ns); }
};

void print_usage(std::FILE* out) {
    std::fprintf(
        out,
        "usage: tlptm-workloads [options]\n"
        "  --workload a|b|c|all     a: 100%% inserts, b: 50%% inserts / 50%% updates,\n"
        "                           c: 100%% updates (default all; a list like a,c works)\n"
        "  --mode M|all             tlptm log modes: baseline, aalo, cblo, tlptm (default all)\n"
        "  --ops N                  operations (= transactions) per run\n"
        "                           (default %llu at 0 ns, %llu at other latencies)\n"
        "  --preload N              keys inserted before b and c, not measured (default %llu)\n"
        "  --value-size BYTES       8 (default), 16, 32, 64, 128, 256, 512 or 1024\n"
        "  --values small|random    per-key counters (default) or random 64-bit values\n"
        "  --threads N[,N...]       worker threads, ops/N each (default 1; PMDK and\n"
        "                           volatile: 1 only);\n"
        "                           a list runs each count and prints its scaling over 1\n"
        "  --reps R                 runs of each configuration, interleaved round-robin;\n"
        "                           the tables show medians (default 1, at most %u)\n"
        "  --write-ns N[,N...]      emulated write latency per line (default 0,500;\n"
        "                           PMDK and volatile run at 0 ns only)\n"
        "  --backend B[,B...]       tlptm, pmdk (libpmemobj), volatile (the same table in\n"
        "                           plain memory: no TM, no persistence; the walk floor),\n"
        "                           both (= tlptm,pmdk) or all (default all; pmdk and\n"
        "                           volatile run at 1 thread and 0 ns only)\n"
        "  --pool PATH              pool file, must not exist; removed after each run\n"
        "                           (default: /dev/shm or $TMPDIR)\n"
        "  --csv FILE, --json FILE  machine-readable results, one row per run and repetition\n"
        "  --seed N                 random seed (default 1)\n"
        "  --no-pin                 let the scheduler place the threads (default: worker t\n"
        "                           on the t-th allowed CPU, the preload on the first)\n"
        "  --quiet                  print nothing but errors\n",
        static_cast<unsigned long long>(default_ops_0ns),
        static_cast<unsigned long long>(default_ops_slow),
        static_cast<unsigned long long>(default_preload), max_reps);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_value = false;
        if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg.resize(eq);
            has_value = true;
        }
        auto need = [&]() -> const std::string& {
            if (!has_value) {
                if (i + 1 >= argc)
                    throw usage_error(arg + " needs a value");
                value = argv[++i];
                has_value = true;
            }
            return value;
        };
        if (arg == "--help" || arg == "-h") {
            print_usage(stdout);
            std::exit(0);
        } else if (arg == "--workload") {
            o.workloads.clear();
            for (const std::string& w : split(need())) {
                if (w == "all")
                    o.workloads = {workload::a, workload::b, workload::c};
                else if (w == "a" || w == "b" || w == "c")
                    o.workloads.push_back(static_cast<workload>(w[0] - 'a'));
                else
                    throw usage_error("--workload must be a, b, c or all, got '" + w + "'");
            }
        } else if (arg == "--mode") {
            o.modes.clear();
            for (const std::string& m : split(need())) {
                if (m == "all") {
                    o.modes = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                               tlptm::log_mode::cblo, tlptm::log_mode::tlptm};
                    continue;
                }
                bool found = false;
                for (auto lm : {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                tlptm::log_mode::cblo, tlptm::log_mode::tlptm})
                    if (m == tlptm::to_string(lm)) {
                        o.modes.push_back(lm);
                        found = true;
                    }
                if (!found)
                    throw usage_error("--mode must be baseline, aalo, cblo, tlptm or all, got '" +
                                      m + "'");
            }
        } else if (arg == "--ops") {
            o.ops = parse_u64(arg, need());
            if (*o.ops == 0)
                throw usage_error("--ops must be at least 1");
        } else if (arg == "--preload") {
            o.preload = parse_u64(arg, need());
        } else if (arg == "--value-size") {
            o.value_size = parse_u64(arg, need());
            bool known = false;
            for (std::size_t s : value_sizes)
                known = known || s == o.value_size;
            if (!known)
                throw usage_error("--value-size must be 8, 16, 32, 64, 128, 256, 512 or 1024");
        } else if (arg == "--values") {
            if (need() == "small")
                o.values = value_kind::small;
            else if (value == "random")
                o.values = value_kind::random;
            else
                throw usage_error("--values must be small or random, got '" + value + "'");
        } else if (arg == "--threads") {
            o.threads.clear();
            for (const std::string& w : split(need())) {
                if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos)
                    throw usage_error("--threads needs a thread count or a list like 1,2, got '" +
                                      value + "'");
                std::uint64_t t = parse_u64(arg, w);
                if (t < 1 || t > 1024)
                    throw usage_error("--threads must be in 1..1024");
                // Twice the same count would be one configuration run twice as often.
                if (std::find(o.threads.begin(), o.threads.end(), t) != o.threads.end())
                    throw usage_error("--threads lists " + w + " twice");
                o.threads.push_back(static_cast<unsigned>(t));
            }
        } else if (arg == "--reps") {
            std::uint64_t r = parse_u64(arg, need());
            if (r < 1 || r > max_reps)
                throw usage_error("--reps must be in 1.." + std::to_string(max_reps));
            o.reps = static_cast<unsigned>(r);
        } else if (arg == "--write-ns") {
            o.write_ns.clear();
            for (const std::string& w : split(need())) {
                std::uint64_t ns = parse_u64(arg, w);
                if (ns > 1000000)
                    throw usage_error("--write-ns is at most 1000000 (1 ms per line)");
                o.write_ns.push_back(static_cast<std::uint32_t>(ns));
            }
        } else if (arg == "--backend") {
            o.run_tlptm = o.run_pmdk = o.run_volatile = false;
            for (const std::string& b : split(need())) {
                if (b == "tlptm" || b == "both" || b == "all")
                    o.run_tlptm = true;
                if (b == "pmdk" || b == "both")
                    o.run_pmdk = true;
                if (b == "all") // as the default: PMDK when this build has it
                    o.run_pmdk = o.run_pmdk || have_pmdk;
                if (b == "volatile" || b == "all")
                    o.run_volatile = true;
                if (b != "tlptm" && b != "pmdk" && b != "volatile" && b != "both" && b != "all")
                    throw usage_error("--backend must be tlptm, pmdk, volatile, both, all or a "
                                      "list such as tlptm,volatile, got '" +
                                      b + "'");
            }
        } else if (arg == "--pool") {
            o.pool = need();
        } else if (arg == "--csv") {
            o.csv = need();
        } else if (arg == "--json") {
            o.json = need();
        } else if (arg == "--seed") {
            o.seed = parse_u64(arg, need());
        } else if (arg == "--no-pin") {
            o.pin = false;
        } else if (arg == "--pin") {
            o.pin = true;
        } else if (arg == "--quiet" || arg == "-q") {
            o.quiet = true;
        } else {
            throw usage_error("unknown option '" + arg + "'");
        }
        if (has_value && arg.rfind("--", 0) == 0 && value.empty())
            throw usage_error(arg + " needs a value");
    }
    for (workload w : o.workloads)
        if (w != workload::a && o.preload == 0)
            throw usage_error(std::string("workload ") + to_string(w) +
                              " updates existing keys: it needs --preload of at least 1");
    return o;
}

/// The default pool file: in /dev/shm (RAM, the paper's NVM emulation) or else $TMPDIR.
std::string default_pool_path() {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir = "/dev/shm";
    if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
        dir = fs::temp_directory_path(ec);
    return (dir / ("tlptm-workloads-" + std::to_string(::getpid()) + ".pool")).string();
}

/// How tlptm wrote its log entries, and the measurement behind the choice.
void print_log_write(std::FILE* out, const tlptm::log_write_choice& c) {
    std::fprintf(out, "tlptm log entries: %s\n", describe_log_write(c).c_str());
}

/// The share of tlptm's measured transactions that ran solo (pool_options::solo_after: a
/// thread alone takes the pool and runs without concurrency control), per thread count.
void print_solo(std::FILE* out, const std::vector<run_result>& rows) {
    std::map<unsigned, tlptm::stats> by_threads; // the runs' counters, summed
    for (const run_result& r : rows)
        if (r.backend == "tlptm" && r.ok() && r.has_stats)
            by_threads[r.threads] = by_threads[r.threads] + r.pm;
    if (by_threads.empty())
        return;
    std::fprintf(out, "tlptm solo (a thread alone runs without concurrency control): ");
    const char* sep = "";
    for (const auto& [threads, sum] : by_threads) {
        std::fprintf(out, "%s%u thread%s %.1f %% of transactions", sep, threads,
                     threads == 1 ? "" : "s", 100.0 * sum.solo_share());
        sep = ", ";
    }
    std::fprintf(out, "\n");
}

template <std::size_t N> int run_all(const options& o, const std::string& pool_path) {
    std::FILE* out = stdout;
    std::vector<run_result> rows;
    auto record = [&](run_result r) {
        if (!r.ok())
            std::fprintf(stderr, "tlptm-workloads: %s FAILED: %s\n",
                         progress_label(r, o.reps).c_str(), r.error.c_str());
        rows.push_back(std::move(r));
    };
    // The persistence floor, measured next to the pool before the runs (and again after them:
    // the lower of the two, the less disturbed); every row carries it.
    persistence_floor floor = measure_floor(pool_path);
    if (!o.quiet && floor.measured())
        std::fprintf(out,
                     "persistence floor on this machine: 8 B store + CLWB + SFENCE %.0f ns, "
                     "64 B non-temporal store + SFENCE %.0f ns; one dependent cache miss "
                     "(random lines of 64 MiB, the pool's kind of mapping) %.0f ns; a fresh "
                     "4 KiB page (populated, first written) %.0f ns\n",
                     floor.store_clwb_sfence_ns, floor.nt64_sfence_ns, floor.dependent_miss_ns,
                     floor.fresh_page_ns);
    auto with_floor = [&](run_result r) {
        r.floor_clwb_ns = floor.store_clwb_sfence_ns;
        r.floor_nt_ns = floor.nt64_sfence_ns;
        r.floor_miss_ns = floor.dependent_miss_ns;
        r.floor_page_ns = floor.fresh_page_ns;
        return r;
    };
    // The configurations in the order of the tables: latency, workload, thread count, then the
    // modes, PMDK and the volatile table (one thread, 0 ns). --reps runs the whole list round
    // after round rather than each configuration R times in a row, so that the machine's slow
    // drift (a neighbour's load, the clock) falls on every configuration alike, not on those run
    // last.
    enum class backend_kind { tlptm, pmdk, volatile_table };
    struct planned {
        run_config c;
        backend_kind backend = backend_kind::tlptm;
        bool ends_table = false; ///< its table is complete after its last repetition
    };
    std::vector<planned> plan;
    for (std::uint32_t ns : o.write_ns) {
        for (workload wl : o.workloads) {
            for (unsigned threads : o.threads) {
                run_config c;
                c.wl = wl;
                c.write_ns = ns;
                c.ops = o.ops_at(ns);
                c.preload = o.preload;
                c.value_size = N;
                c.values = o.values;
                c.threads = threads;
                c.seed = o.seed;
                c.reps = o.reps;
                c.pool_path = pool_path;
                c.progress = !o.quiet;
                c.cpus = o.cpus;
                const std::size_t table_start = plan.size();
                if (o.run_tlptm) {
                    for (tlptm::log_mode m : o.modes) {
                        c.mode = m;
                        plan.push_back({c});
                    }
                }
                if (have_pmdk && o.run_pmdk && threads == 1 && ns == 0)
                    plan.push_back({c, backend_kind::pmdk});
                if (o.run_volatile && threads == 1 && ns == 0)
                    plan.push_back({c, backend_kind::volatile_table});
                if (plan.size() > table_start)
                    plan.back().ends_table = true;
            }
        }
    }
    for (unsigned rep = 0; rep < o.reps; ++rep) {
        for (planned& p : plan) {
            p.c.rep = rep;
            switch (p.backend) {
            case backend_kind::tlptm:
                record(with_floor(run<tlptm_backend<N>>(p.c)));
                break;
            case backend_kind::pmdk:
#if TLPTM_WORKLOADS_HAVE_PMDK
                record(with_floor(run<pmdk_backend<N>>(p.c)));
#endif
                break;
            case backend_kind::volatile_table:
                record(with_floor(run<volatile_backend<N>>(p.c)));
                break;
            }
            if (rep + 1 == o.reps && p.ends_table && !o.quiet) {
                print_table(out, rows, p.c.wl, p.c.write_ns, p.c.threads);
                std::fflush(out);
            }
        }
    }
    if (persistence_floor again = measure_floor(pool_path); again.measured() && floor.measured()) {
        floor.store_clwb_sfence_ns =
            std::min(floor.store_clwb_sfence_ns, again.store_clwb_sfence_ns);
        floor.nt64_sfence_ns = std::min(floor.nt64_sfence_ns, again.nt64_sfence_ns);
        if (again.dependent_miss_ns > 0)
            floor.dependent_miss_ns =
                floor.dependent_miss_ns > 0
                    ? std::min(floor.dependent_miss_ns, again.dependent_miss_ns)
                    : again.dependent_miss_ns;
        if (again.fresh_page_ns > 0)
            floor.fresh_page_ns = floor.fresh_page_ns > 0
                                      ? std::min(floor.fresh_page_ns, again.fresh_page_ns)
                                      : again.fresh_page_ns;
        for (run_result& r : rows)
            r = with_floor(std::move(r));
        if (!o.quiet)
            std::fprintf(out,
                         "\npersistence floor, measured again after the runs (the lower kept): "
                         "store + CLWB + SFENCE %.0f ns, 64 B NT + SFENCE %.0f ns; one "
                         "dependent cache miss %.0f ns; a fresh page %.0f ns\n",
                         floor.store_clwb_sfence_ns, floor.nt64_sfence_ns, floor.dependent_miss_ns,
                         floor.fresh_page_ns);
    }
    if (const auto& lw = tlptm_backend<N>::last_log_write; lw && !o.quiet) {
        print_log_write(out, *lw);
        if (const auto& wb = tlptm_backend<N>::last_write_back)
            std::fprintf(out, "tlptm write-back: %s\n",
                         describe_write_back(wb->chosen, wb->asked, *lw).c_str());
        print_solo(out, rows);
    }
    std::size_t failed = 0;
    bool ran_volatile = false;
    for (const run_result& r : rows) {
        failed += r.ok() ? 0 : 1;
        ran_volatile = ran_volatile || r.backend == "volatile";
    }
    if (!o.quiet) {
        print_pmdk_comparison(out, rows);
        print_scaling(out, rows);
        std::fprintf(out,
                     "\nverified %zu of %zu runs: size = preload + inserts = nodes in the "
                     "chains, every key found with its latest value, 64 erases, the same after "
                     "reopening the pool%s\n",
                     rows.size() - failed, rows.size(),
                     ran_volatile ? " (the volatile table has nothing to reopen)" : "");
    }
    int status = failed ? 1 : 0;
    if (!o.csv.empty() && !write_csv(o.csv, rows)) {
        std::fprintf(stderr, "tlptm-workloads: cannot write %s: %s\n", o.csv.c_str(),
                     std::strerror(errno));
        status = 1;
    }
    if (!o.json.empty() && !write_json(o.json, rows)) {
        std::fprintf(stderr, "tlptm-workloads: cannot write %s: %s\n", o.json.c_str(),
                     std::strerror(errno));
        status = 1;
    }
    return status;
}

void print_header(const options& o, const std::string& pool_path) {
    std::printf("tlptm-workloads: persistent chained hash table, workloads a / b / c\n");
    std::printf("  keys 8 B, values %zu B (%s), %s thread%s, seed %llu; one operation = one "
                "transaction\n",
                o.value_size, o.values == value_kind::small ? "small counters" : "random 64-bit",
                o.threads_list().c_str(), o.single_threaded() ? "" : "s",
                static_cast<unsigned long long>(o.seed));
    std::printf("  ops per run:");
    for (std::size_t i = 0; i < o.write_ns.size(); ++i)
        std::printf("%s %llu at %u ns", i ? "," : "",
                    static_cast<unsigned long long>(o.ops_at(o.write_ns[i])), o.write_ns[i]);
    std::printf("; b and c first preload %llu keys (not measured)\n",
                static_cast<unsigned long long>(o.preload));
    if (o.reps > 1)
        std::printf("  every configuration runs %u times, interleaved (round after round over all "
                    "of them), each run as above; the tables show medians\n",
                    o.reps);
    if (o.cpus.empty())
        std::printf("  threads not pinned: the scheduler places them (%s)\n",
                    o.pin ? "the affinity could not be set" : "--no-pin");
    else
        std::printf("  threads pinned: worker t on CPU number t mod %zu of %s; the preload, the "
                    "floors and the checks on CPU %d (--no-pin: the scheduler places them)\n",
                    o.cpus.size(), cli::join(o.cpus).c_str(), o.cpus[0]);
    std::printf("  pool %s (removed after each run), persistent memory emulated: tlptm "
                "durability::emulate_pmem, PMDK PMEM_IS_PMEM_FORCE=1\n",
                pool_path.c_str());
    if (o.run_pmdk && !have_pmdk)
        std::printf("  PMDK: not built (libpmemobj was not found at build time): tlptm only\n");
#if TLPTM_WORKLOADS_HAVE_PMDK
    if (o.run_pmdk && !o.has_one_thread())
        std::printf("  PMDK: skipped, it runs single-threaded only (--threads %s asked)\n",
                    o.threads_list().c_str());
    else if (o.run_pmdk && !o.single_threaded())
        std::printf("  PMDK: libpmemobj %s transactions, at 0 ns and 1 thread only (it runs "
                    "single-threaded only, and an emulated write latency cannot be injected into "
                    "libpmemobj); no persistent-memory counters\n",
                    TLPTM_WORKLOADS_PMEMOBJ_VERSION);
    else if (o.run_pmdk)
        std::printf("  PMDK: libpmemobj %s transactions, at 0 ns only (an emulated write latency "
                    "cannot be injected into libpmemobj); no persistent-memory counters\n",
                    TLPTM_WORKLOADS_PMEMOBJ_VERSION);
#endif
    if (o.run_volatile && !o.has_one_thread())
        std::printf("  volatile: skipped, it runs single-threaded only (--threads %s asked)\n",
                    o.threads_list().c_str());
    else if (o.run_volatile && !o.has_zero_ns())
        std::printf("  volatile: skipped, it runs at 0 ns only (--write-ns %s asked)\n",
                    o.write_ns_list().c_str());
    else if (o.run_volatile)
        std::printf("  volatile: the same table in plain memory (a scratch file at the pool path, "
                    "the same keys; no TM, no persistence), at 0 ns%s only: what the table's walk "
                    "costs by itself\n",
                    o.single_threaded() ? "" : " and 1 thread");
    std::printf("  per transaction: log B = log bytes, PM B = persistent-memory bytes written "
                "(streamed + 64 per flushed line); latency in ns;\n"
                "  red = reduction against baseline (negative: more), gain = throughput change "
                "against baseline\n");
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
        std::fprintf(stderr, "tlptm-workloads: %s\n\n", e.what());
        print_usage(stderr);
        return 2;
    }
    if (o.run_pmdk && !o.run_tlptm && !o.run_volatile && !have_pmdk) {
        std::fprintf(stderr, "tlptm-workloads: --backend pmdk: this build has no PMDK backend "
                             "(libpmemobj was not found at build time)\n");
        return 2;
    }
    // Without tlptm, only backends that run at one thread and 0 ns are left.
    const char* only_peers = o.run_pmdk && o.run_volatile ? "the PMDK and volatile backends run"
                             : o.run_pmdk                 ? "the PMDK backend runs"
                                                          : "the volatile backend runs";
    if (!o.run_tlptm && !o.single_threaded()) {
        std::fprintf(stderr, "tlptm-workloads: %s single-threaded only (--threads %s asked)\n",
                     only_peers, o.threads_list().c_str());
        return 2;
    }
    if (!o.run_tlptm && !o.has_zero_ns()) {
        std::fprintf(stderr, "tlptm-workloads: %s at 0 ns only (--write-ns %s asked)\n", only_peers,
                     o.write_ns_list().c_str());
        return 2;
    }
    std::string pool_path = o.pool.empty() ? default_pool_path() : o.pool;
    std::error_code ec;
    if (std::filesystem::exists(pool_path, ec)) {
        std::fprintf(stderr,
                     "tlptm-workloads: the pool file %s exists; give a path that does "
                     "not (it is created and removed by every run)\n",
                     pool_path.c_str());
        return 2;
    }
    remove_pool_on_interrupt(pool_path);
    // Pinned, the main thread (preload, floors, checks) stays on the first allowed CPU for the
    // whole program and worker t runs on the t-th: a one-thread run finds the table warm in the
    // caches of the CPU that loaded it, every run and every backend alike (affinity.hpp).
    if (o.pin)
        o.cpus = pin_main_thread("tlptm-workloads");
    if (!o.quiet)
        print_header(o, pool_path);
    const auto start = std::chrono::steady_clock::now();
    int status = 2;
    switch (o.value_size) {
    case 8:
        status = run_all<8>(o, pool_path);
        break;
    case 16:
        status = run_all<16>(o, pool_path);
        break;
    case 32:
        status = run_all<32>(o, pool_path);
        break;
    case 64:
        status = run_all<64>(o, pool_path);
        break;
    case 128:
        status = run_all<128>(o, pool_path);
        break;
    case 256:
        status = run_all<256>(o, pool_path);
        break;
    case 512:
        status = run_all<512>(o, pool_path);
        break;
    case 1024:
        status = run_all<1024>(o, pool_path);
        break;
    }
    if (!o.quiet)
        std::printf(
            "total time %.1f s\n",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return status;
}
