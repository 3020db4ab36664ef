// The figures of a run and how they are reported: the console table (in the spirit of the
// paper's figures 4-8), CSV and JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <tlptm/stats.hpp>

#include "value.hpp"

namespace workloads {

/// The paper's workloads (DESIGN.md §9).
enum class workload { a, b, c };

inline const char* to_string(workload w) noexcept {
    switch (w) {
    case workload::a:
        return "a";
    case workload::b:
        return "b";
    case workload::c:
        return "c";
    }
    return "?";
}

inline const char* describe(workload w) noexcept {
    switch (w) {
    case workload::a:
        return "100% inserts of new keys";
    case workload::b:
        return "50% inserts of new keys, 50% updates of existing keys";
    case workload::c:
        return "100% updates of existing keys";
    }
    return "?";
}

/// The outcome of one run: one repetition of one (backend, workload, mode, write latency,
/// threads).
struct run_result {
    std::string backend; ///< "tlptm", "pmdk" or "volatile"
    workload wl = workload::a;
    std::string mode; ///< tlptm's log mode, or "pmdk" / "volatile"
    std::uint32_t write_ns = 0;
    unsigned threads = 1;
    std::uint64_t ops = 0;
    std::uint64_t preload = 0;
    std::size_t value_size = 8;
    value_kind values = value_kind::small;
    unsigned rep = 0;    ///< which repetition of its configuration (--reps), from 0
    bool pinned = false; ///< worker t ran on the t-th allowed CPU (run_config::cpus)

    std::uint64_t inserts = 0;
    std::uint64_t updates = 0;
    double seconds = 0;     ///< wall time of the measured phase
    double cpu_seconds = 0; ///< CPU time of the worker threads in the measured phase
    double lat_mean_ns = 0, lat_p50_ns = 0, lat_p99_ns = 0;
    bool has_stats = false; ///< pm holds the backend's counters of the measured phase
    tlptm::stats pm;

    /// The persistence floor measured in the same run (the same for every row).
    double floor_clwb_ns = 0, floor_nt_ns = 0;
    double floor_miss_ns = 0; ///< one dependent cache miss, measured in the same run
    double floor_page_ns = 0; ///< first use of a fresh 4 KiB page, measured in the same run

    bool verified = false;
    std::string error; ///< why the run failed (exception or failed check), or ""

    bool ok() const noexcept { return error.empty(); }
    double throughput() const noexcept {
        return seconds > 0 ? static_cast<double>(ops) / seconds : 0;
    }
    double per_tx(std::uint64_t v) const noexcept {
        return ops ? static_cast<double>(v) / static_cast<double>(ops) : 0;
    }
    /// Sets the latency mean / p50 / p99 from per-transaction latencies (reorders them).
    void measure_latency(std::vector<std::uint64_t>& ns);
};

/// "[a/tlptm 500ns]": what a progress line and an error message name; "[a/tlptm 500ns rep 2]"
/// when its configuration runs `reps` > 1 times.
std::string progress_label(const run_result& r, unsigned reps = 1);

/// Prints the table of one workload at one write latency and thread count: one row per log
/// mode (and PMDK's and the volatile table's, if they ran), each figure per transaction with
/// its reduction against `baseline`. A row is the median of each figure over the repetitions
/// of its configuration in `rows` (a note under the table gives their count and the spread of
/// tx/s); a row with a failed repetition is FAILED. Below it, the ratios to PMDK, the latency
/// over the persistence floor, and what each mode adds to the volatile table's latency.
void print_table(std::FILE* out, const std::vector<run_result>& rows, workload wl,
                 std::uint32_t write_ns, unsigned threads);

/// Prints tlptm's throughput over PMDK's per workload and log mode (single thread, 0 ns), from
/// the medians over repetitions, and the volatile table's mean latency if it ran. Prints
/// nothing if PMDK did not run.
void print_pmdk_comparison(std::FILE* out, const std::vector<run_result>& rows);

/// Prints, per workload, log mode and write latency run at one thread and at more, the median
/// throughput at N threads over the median at one. Prints nothing without such pairs.
void print_scaling(std::FILE* out, const std::vector<run_result>& rows);

/// Writes one CSV row per run, every repetition its own (header first). Returns false with
/// errno set on failure.
bool write_csv(const std::string& path, const std::vector<run_result>& rows);

/// Writes {"tool": ..., "results": [one object per run, every repetition its own]}. Returns
/// false on failure.
bool write_json(const std::string& path, const std::vector<run_result>& rows);

} // namespace workloads
