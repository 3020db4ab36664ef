// The figures of a scaling series and how they are reported: the console table with the USL
// fit, CSV (points, fits, fitted curves) and JSON.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sample.hpp"
#include "usl_fit.hpp"

namespace tlptm_scale {

/// One thread count of a series: the throughput of every repetition and their summary.
struct scale_point {
    unsigned threads = 1;
    bool oversubscribed = false;               ///< more threads than cores
    std::vector<double> throughputs;           ///< tx/s of each verified repetition
    std::uint64_t ops = 0, aborts = 0;         ///< summed over the repetitions
    std::uint64_t fences = 0, msync_calls = 0; ///< summed over the repetitions (tlptm)
    std::vector<std::string> errors;           ///< repetitions that failed (not in throughputs)
    sample_summary x;                          ///< of throughputs
    double speedup = 0;                        ///< x.mean / X(1)
    double speedup_lo = 0, speedup_hi = 0;     ///< 95 % interval (error propagation of both means)
};

/// One workload on one backend over all thread counts, and its USL fit.
struct scale_series {
    std::string workload;    ///< lookup, disjoint, b, c, bank-<rate>
    std::string description; ///< one line
    std::string backend;     ///< tlptm or pmdk
    std::vector<scale_point> points;
    bool fit_oversubscribed = false; ///< the fit includes the points above the core count
    usl_fit fit;
    usl_linearised linearised; ///< the linearised least-squares coefficients, for comparison
};

/// What the whole run was.
struct scale_header {
    unsigned cores = 1;
    unsigned reps = 5;
    double seconds = 0;
    std::vector<unsigned> thread_counts;
    std::uint64_t keys = 0, range = 0, accounts = 0, hot = 0;
    std::uint64_t seed = 1;
    std::string pool_path;
    std::vector<int> cpus; ///< worker t pinned to cpus[t mod size]; empty: not pinned
    bool msync = false;    ///< tlptm's durability is msync: the tables show msync calls per tx
    std::string pmemobj_version;              ///< "" when PMDK was not built
    double load_before = -1, load_after = -1; ///< 1-minute load averages (-1: unknown)
};

/// Fills the summaries, speedups and the fit of a series whose throughputs are measured.
void analyse(scale_series& s, unsigned cores);

/// Prints one series: a row per thread count and the fit.
void print_series(std::FILE* out, const scale_series& s, const scale_header& h);

/// Prints the one-line-per-series summary of the fits.
void print_fit_summary(std::FILE* out, const std::vector<scale_series>& all);

/// Writes the points (one row per series and thread count), the fits (`<stem>-fits.csv`) and
/// the fitted curves with their 95 % band (`<stem>-curves.csv`) next to `path`. Returns "" or
/// the file that could not be written.
std::string write_csv(const std::string& path, const std::vector<scale_series>& all,
                      const scale_header& h);

/// Writes everything, the repetitions included, as one JSON document. Returns false on failure.
bool write_json(const std::string& path, const std::vector<scale_series>& all,
                const scale_header& h);

/// The path of a CSV file next to `points_csv`: "out/scale.csv" + "-fits" -> "out/scale-fits.csv".
std::string sibling_csv(const std::string& points_csv, const std::string& suffix);

} // namespace tlptm_scale
