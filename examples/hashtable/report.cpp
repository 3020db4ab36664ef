// The console table, CSV and JSON of the workload runs.
#include "results.hpp"

#include <tlptm/detail/heap.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace workloads {

void run_result::measure_latency(std::vector<std::uint64_t>& ns) {
    if (ns.empty())
        return;
    long double sum = std::accumulate(ns.begin(), ns.end(), static_cast<long double>(0));
    lat_mean_ns = static_cast<double>(sum / static_cast<long double>(ns.size()));
    auto at = [&](double q) {
        auto k = static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1) + 0.5);
        std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(k), ns.end());
        return static_cast<double>(ns[k]);
    };
    lat_p50_ns = at(0.50);
    lat_p99_ns = at(0.99);
}

std::string progress_label(const run_result& r, unsigned reps) {
    std::string s =
        "[" + std::string(to_string(r.wl)) + "/" + r.mode + " " + std::to_string(r.write_ns) + "ns";
    if (r.threads > 1)
        s += " " + std::to_string(r.threads) + "t";
    if (reps > 1) // from 0, as the rep column of the CSV / JSON
        s += " rep " + std::to_string(r.rep);
    return s + "]";
}

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// A figure of a run, as the table, the CSV and the JSON show it.
struct figure {
    const char* column;    ///< CSV column / JSON key
    const char* change;    ///< CSV column / JSON key of its change against baseline
    const char* title;     ///< table header
    bool needs_stats;      ///< only backends with counters have it
    bool higher_is_better; ///< throughput: report the gain rather than the reduction
    int decimals;          ///< in the table; -1: k / M suffixes
    double (*get)(const run_result&);
};

const figure figures[] = {
    {"log_bytes_per_tx", "log_bytes_reduction_pct", "log B/tx", true, false, 1,
     [](const run_result& r) { return r.per_tx(r.pm.log_bytes); }},
    {"pm_bytes_per_tx", "pm_bytes_reduction_pct", "PM B/tx", true, false, 1,
     [](const run_result& r) { return r.per_tx(r.pm.pm_bytes_written()); }},
    {"flushed_lines_per_tx", "flushed_lines_reduction_pct", "lines/tx", true, false, 2,
     [](const run_result& r) { return r.per_tx(r.pm.flushed_lines); }},
    {"fences_per_tx", "fences_reduction_pct", "fences/tx", true, false, 2,
     [](const run_result& r) { return r.per_tx(r.pm.fences); }},
    {"round_trips_per_tx", "round_trips_reduction_pct", "rt/tx", true, false, 2,
     [](const run_result& r) { return r.per_tx(r.pm.round_trips); }},
    {"lat_mean_ns", "lat_mean_reduction_pct", "mean ns", false, false, 0,
     [](const run_result& r) { return r.lat_mean_ns; }},
    {"lat_p50_ns", "lat_p50_reduction_pct", "p50 ns", false, false, 0,
     [](const run_result& r) { return r.lat_p50_ns; }},
    {"lat_p99_ns", "lat_p99_reduction_pct", "p99 ns", false, false, 0,
     [](const run_result& r) { return r.lat_p99_ns; }},
    {"throughput_tx_s", "throughput_gain_pct", "tx/s", false, true, -1,
     [](const run_result& r) { return r.throughput(); }},
    {"cpu_ns_per_tx", "cpu_ns_reduction_pct", "CPU ns", false, false, 0,
     [](const run_result& r) { return r.per_tx(static_cast<std::uint64_t>(r.cpu_seconds * 1e9)); }},
};

/// Figures only the files carry.
const figure extra_figures[] = {
    {"streamed_bytes_per_tx", nullptr, nullptr, true, false, 1,
     [](const run_result& r) { return r.per_tx(r.pm.streamed_bytes); }},
    {"data_bytes_per_tx", nullptr, nullptr, true, false, 1,
     [](const run_result& r) { return r.per_tx(r.pm.data_bytes_written); }},
    {"aalo_bytes_per_tx", nullptr, nullptr, true, false, 1,
     [](const run_result& r) { return r.per_tx(r.pm.aalo_bytes); }},
    {"aborts_per_tx", nullptr, nullptr, true, false, 4,
     [](const run_result& r) { return r.per_tx(r.pm.tx_aborted); }},
    {"solo_share", nullptr, nullptr, true, false, 4,
     [](const run_result& r) { return r.pm.transactions() ? r.pm.solo_share() : nan; }},
    {"floor_store_clwb_sfence_ns", nullptr, nullptr, false, false, 1,
     [](const run_result& r) { return r.floor_clwb_ns > 0 ? r.floor_clwb_ns : nan; }},
    {"floor_nt64_sfence_ns", nullptr, nullptr, false, false, 1,
     [](const run_result& r) { return r.floor_nt_ns > 0 ? r.floor_nt_ns : nan; }},
    {"floor_dependent_miss_ns", nullptr, nullptr, false, false, 1,
     [](const run_result& r) { return r.floor_miss_ns > 0 ? r.floor_miss_ns : nan; }},
    {"floor_fresh_page_ns", nullptr, nullptr, false, false, 1,
     [](const run_result& r) { return r.floor_page_ns > 0 ? r.floor_page_ns : nan; }},
    {"lat_mean_over_nt_floor", nullptr, nullptr, false, false, 3,
     [](const run_result& r) { return r.floor_nt_ns > 0 ? r.lat_mean_ns / r.floor_nt_ns : nan; }},
};

double value_of(const figure& f, const run_result& r) {
    if (!r.ok() || (f.needs_stats && !r.has_stats))
        return nan;
    return f.get(r);
}

bool same_config(const run_result& a, const run_result& b) {
    return a.wl == b.wl && a.value_size == b.value_size && a.values == b.values && a.ops == b.ops &&
           a.preload == b.preload;
}

/// b is the tlptm baseline run of r's configuration (any repetition).
bool is_baseline_for(const run_result& b, const run_result& r) {
    return b.backend == "tlptm" && b.mode == "baseline" && same_config(b, r) &&
           b.write_ns == r.write_ns && b.threads == r.threads;
}

/// r is a tlptm run that has peers, PMDK and the volatile table: one thread, 0 ns.
bool has_peers(const run_result& r) {
    return r.backend == "tlptm" && r.threads == 1 && r.write_ns == 0;
}

/// p is the run of `backend` ("pmdk" or "volatile": one thread, 0 ns) of r's workload and
/// values (any repetition).
bool is_peer_of(const run_result& p, const char* backend, const run_result& r) {
    return p.backend == backend && p.wl == r.wl && p.value_size == r.value_size &&
           p.values == r.values && p.threads == 1 && p.write_ns == 0;
}

/// The tlptm baseline run that `r` is compared with in the files: the one of the same
/// repetition, which ran in the same round, so as close in time as the list allows.
const run_result* baseline_of(const std::vector<run_result>& rows, const run_result& r) {
    if (r.backend != "tlptm")
        return nullptr;
    for (const run_result& b : rows)
        if (b.ok() && is_baseline_for(b, r) && b.rep == r.rep)
            return &b;
    return nullptr;
}

/// The run of `backend` ("pmdk" or "volatile") that `r` is compared with in the files (same
/// workload and repetition, one thread, 0 ns), or nullptr.
const run_result* peer_of(const std::vector<run_result>& rows, const char* backend,
                          const run_result& r) {
    if (!has_peers(r))
        return nullptr;
    for (const run_result& p : rows)
        if (p.ok() && is_peer_of(p, backend, r) && p.rep == r.rep)
            return &p;
    return nullptr;
}

/// Change of a figure from `b` (the base) to `x` in percent: the reduction of a cost, the gain
/// of a throughput. NaN when either is missing or the base is 0.
double change(const figure& f, double b, double x) {
    if (std::isnan(b) || std::isnan(x) || b == 0)
        return nan;
    return f.higher_is_better ? (x - b) / b * 100 : (b - x) / b * 100;
}

double change(const figure& f, const run_result* base, const run_result& r) {
    return base ? change(f, value_of(f, *base), value_of(f, r)) : nan;
}

double pmdk_ratio(const std::vector<run_result>& rows, const run_result& r) {
    const run_result* p = peer_of(rows, "pmdk", r);
    if (!p || !r.ok() || p->throughput() == 0)
        return nan;
    return r.throughput() / p->throughput();
}

/// The walk floor of `r` in the files: the mean latency of the volatile table in the same
/// workload and repetition.
double walk_floor(const std::vector<run_result>& rows, const run_result& r) {
    const run_result* v = peer_of(rows, "volatile", r);
    return v && r.ok() ? v->lat_mean_ns : nan;
}

/// The repetitions of one configuration (backend, mode, workload, write latency, threads) in
/// the order they ran. The console shows their medians: one run of ~50 ms on a shared 2-vCPU
/// guest varies by +-20 %, and the median of a few interleaved runs is not dragged by the one
/// that a neighbour's burst or a preemption hit, as a mean would be.
struct config_runs {
    std::vector<const run_result*> reps;

    const run_result& first() const { return *reps.front(); }
    /// The first failed repetition, or nullptr: one failure fails the row, as a single run's
    /// failure does.
    const run_result* failed() const {
        for (const run_result* r : reps)
            if (!r->ok())
                return r;
        return nullptr;
    }
    bool ok() const { return failed() == nullptr; }
};

bool same_run(const run_result& a, const run_result& b) {
    return a.backend == b.backend && a.mode == b.mode && same_config(a, b) &&
           a.write_ns == b.write_ns && a.threads == b.threads;
}

/// `rows` grouped by configuration, in the order of each configuration's first repetition.
std::vector<config_runs> group_runs(const std::vector<run_result>& rows) {
    std::vector<config_runs> groups;
    for (const run_result& r : rows) {
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](const config_runs& c) { return same_run(c.first(), r); });
        if (g == groups.end())
            groups.push_back({{&r}});
        else
            g->reps.push_back(&r);
    }
    return groups;
}

/// The median of `get` over the repetitions (the mean of the middle two for an even count);
/// NaN if a repetition failed or lacks the figure.
template <class F> double median_over(const config_runs& g, F get) {
    if (!g.ok())
        return nan;
    std::vector<double> v;
    for (const run_result* r : g.reps) {
        double x = get(*r);
        if (std::isnan(x))
            return nan;
        v.push_back(x);
    }
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double median_of(const figure& f, const config_runs& g) {
    return median_over(g, [&](const run_result& r) { return value_of(f, r); });
}

double median_throughput(const config_runs& g) {
    return median_over(g, [](const run_result& r) { return r.throughput(); });
}

double median_latency(const config_runs& g) {
    return median_over(g, [](const run_result& r) { return r.lat_mean_ns; });
}

/// The configuration of `backend` ("pmdk" or "volatile") that `g` is compared with in the
/// console (same workload, one thread, 0 ns), or nullptr.
const config_runs* peer_of(const std::vector<config_runs>& groups, const char* backend,
                           const config_runs& g) {
    if (!has_peers(g.first()))
        return nullptr;
    for (const config_runs& p : groups)
        if (p.ok() && is_peer_of(p.first(), backend, g.first()))
            return &p;
    return nullptr;
}

/// The tlptm baseline configuration that `g` is compared with in the table, or nullptr.
const config_runs* baseline_of(const std::vector<config_runs>& groups, const config_runs& g) {
    const run_result& r = g.first();
    if (r.backend != "tlptm")
        return nullptr;
    for (const config_runs& b : groups)
        if (b.ok() && is_baseline_for(b.first(), r))
            return &b;
    return nullptr;
}

double change(const figure& f, const config_runs* base, const config_runs& g) {
    return base ? change(f, median_of(f, *base), median_of(f, g)) : nan;
}

/// Median throughput of `g` over the median of its PMDK peer (same workload, one thread,
/// 0 ns): the ratio of the medians.
double pmdk_ratio(const std::vector<config_runs>& groups, const config_runs& g) {
    const config_runs* p = peer_of(groups, "pmdk", g);
    if (!p || !g.ok())
        return nan;
    const double t = median_throughput(*p);
    return t > 0 ? median_throughput(g) / t : nan;
}

/// What tlptm adds to the latency of the volatile table `walk` in a table's rows `sel`: the
/// median mean latency of each tlptm row less the volatile row's, in ns and in NT floors.
/// "; tlptm adds 101 ns = 0.97 x the NT floor" for one log mode, "; tlptm adds: baseline 300 ns
/// = 2.88 x, ..., tlptm 101 ns = 0.97 x the NT floor" for several; "" without tlptm rows.
std::string added_to_walk(const std::vector<const config_runs*>& sel, const config_runs& walk,
                          double nt_floor_ns) {
    std::vector<const config_runs*> modes;
    for (const config_runs* g : sel)
        if (g->first().backend == "tlptm" && g->ok())
            modes.push_back(g);
    const double walk_ns = median_latency(walk);
    std::string s;
    for (std::size_t i = 0; i < modes.size(); ++i) {
        const double added = median_latency(*modes[i]) - walk_ns;
        char buf[64];
        if (nt_floor_ns > 0)
            std::snprintf(buf, sizeof buf, "%.0f ns = %.2f x", added, added / nt_floor_ns);
        else
            std::snprintf(buf, sizeof buf, "%.0f ns", added);
        const std::string& m = modes[i]->first().mode;
        if (modes.size() > 1)
            s += (i == 0 ? "; tlptm adds: " : ", ") + m + " " + buf;
        else
            s = (m == "tlptm" ? "; tlptm adds " : "; tlptm (mode " + m + ") adds ") + buf;
    }
    if (!s.empty() && nt_floor_ns > 0)
        s += " the NT floor";
    return s;
}

std::string format(double v, int decimals) {
    if (std::isnan(v))
        return "-";
    char buf[64];
    if (decimals >= 0)
        std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    else if (v >= 1e6)
        std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
}

std::string format_pct(double v) {
    if (std::isnan(v))
        return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", std::fabs(v) < 0.5 ? 0.0 : v); // no "-0%"
    return buf;
}

/// A number for CSV / JSON: fixed decimals, "" for NaN.
std::string plain(double v, int decimals) {
    if (std::isnan(v))
        return "";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

constexpr int file_decimals(const figure& f) {
    return f.decimals < 0 ? 1 : (f.decimals == 0 ? 1 : f.decimals + 2);
}

std::string csv_quote(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos)
        return s;
    std::string q = "\"";
    for (char c : s) {
        if (c == '"')
            q += '"';
        q += c == '\n' ? ' ' : c;
    }
    return q + "\"";
}

std::string json_string(const std::string& s) {
    std::string q = "\"";
    for (unsigned char c : s) {
        switch (c) {
        case '"':
            q += "\\\"";
            break;
        case '\\':
            q += "\\\\";
            break;
        case '\n':
            q += "\\n";
            break;
        case '\t':
            q += "\\t";
            break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                q += buf;
            } else {
                q += static_cast<char>(c);
            }
        }
    }
    return q + "\"";
}

/// The columns of a run in file order: (name, value or "" / null, is a string).
struct field {
    std::string name;
    std::string value;
    bool is_string;
};

std::vector<field> fields_of(const std::vector<run_result>& rows, const run_result& r) {
    std::vector<field> f = {
        {"backend", r.backend, true},
        {"workload", to_string(r.wl), true},
        {"mode", r.mode, true},
        {"write_ns", std::to_string(r.write_ns), false},
        {"threads", std::to_string(r.threads), false},
        {"ops", std::to_string(r.ops), false},
        {"preload", std::to_string(r.preload), false},
        {"value_size", std::to_string(r.value_size), false},
        {"values", to_string(r.values), true},
        {"inserts", std::to_string(r.inserts), false},
        {"updates", std::to_string(r.updates), false},
        {"seconds", plain(r.ok() ? r.seconds : nan, 6), false},
    };
    const run_result* base = baseline_of(rows, r);
    for (const figure& g : figures)
        f.push_back({g.column, plain(value_of(g, r), file_decimals(g)), false});
    for (const figure& g : extra_figures)
        f.push_back({g.column, plain(value_of(g, r), file_decimals(g)), false});
    for (const figure& g : figures)
        f.push_back({g.change, plain(change(g, base, r), 2), false});
    f.push_back({"throughput_vs_pmdk", plain(pmdk_ratio(rows, r), 4), false});
    f.push_back({"verified", r.verified ? "true" : "false", false});
    f.push_back({"error", r.error, true});
    f.push_back({"rep", std::to_string(r.rep), false});
    // Newer columns after rep, so that the older ones keep their place.
    const double walk = walk_floor(rows, r);
    f.push_back({"walk_floor_ns", plain(walk, 1), false});
    f.push_back({"added_over_walk_floor_ns", plain(r.lat_mean_ns - walk, 1), false});
    f.push_back({"pinned", r.pinned ? "true" : "false", false});
    return f;
}

struct file_closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

} // namespace

void print_table(std::FILE* out, const std::vector<run_result>& rows, workload wl,
                 std::uint32_t write_ns, unsigned threads) {
    const std::vector<config_runs> groups = group_runs(rows);
    std::vector<const config_runs*> sel;
    std::size_t reps = 0;
    for (const config_runs& g : groups)
        if (g.first().wl == wl && g.first().write_ns == write_ns && g.first().threads == threads) {
            sel.push_back(&g);
            reps = std::max(reps, g.reps.size());
        }
    if (sel.empty())
        return;
    const run_result& first = sel.front()->first();
    std::fprintf(out, "\nworkload %s: %s\n  %llu ops", to_string(wl), describe(wl),
                 static_cast<unsigned long long>(first.ops));
    if (first.preload)
        std::fprintf(out, " after a preload of %llu keys",
                     static_cast<unsigned long long>(first.preload));
    std::fprintf(out, ", %u ns emulated write latency, %u thread%s\n", write_ns, threads,
                 threads == 1 ? "" : "s");

    std::fprintf(out, "  %-9s", "mode");
    for (const figure& f : figures)
        std::fprintf(out, " %9s %5s", f.title, f.higher_is_better ? "gain" : "red");
    std::fprintf(out, "\n");
    for (const config_runs* g : sel) {
        std::fprintf(out, "  %-9s", g->first().mode.c_str());
        if (const run_result* bad = g->failed()) {
            if (reps > 1)
                std::fprintf(out, " FAILED (rep %u): %s\n", bad->rep, bad->error.c_str());
            else
                std::fprintf(out, " FAILED: %s\n", bad->error.c_str());
            continue;
        }
        const config_runs* base = baseline_of(groups, *g);
        for (const figure& f : figures) {
            std::string pct = base == g ? "" : format_pct(change(f, base, *g));
            std::fprintf(out, " %9s %5s", format(median_of(f, *g), f.decimals).c_str(),
                         pct.c_str());
        }
        std::fprintf(out, "\n");
    }
    if (reps > 1) {
        // The spread says how far one run alone could have been off.
        std::string spread;
        for (const config_runs* g : sel) {
            if (!g->ok())
                continue;
            double lo = g->first().throughput(), hi = lo;
            for (const run_result* r : g->reps) {
                lo = std::min(lo, r->throughput());
                hi = std::max(hi, r->throughput());
            }
            spread += g->first().mode + " " + format(lo, -1) + "-" + format(hi, -1) + "  ";
        }
        std::fprintf(out, "  median of %zu interleaved repetitions; tx/s min-max: %s\n", reps,
                     spread.c_str());
    }
    std::string ratios;
    for (const config_runs* g : sel) {
        double q = pmdk_ratio(groups, *g);
        if (!std::isnan(q)) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "%s %.2fx  ", g->first().mode.c_str(), q);
            ratios += buf;
        }
    }
    if (!ratios.empty())
        std::fprintf(out, "  throughput tlptm / PMDK: %s\n", ratios.c_str());
    std::string floors;
    for (const config_runs* g : sel) {
        const run_result& r = g->first();
        if (r.backend != "tlptm" || !g->ok() || r.floor_nt_ns <= 0)
            continue;
        char buf[64];
        std::snprintf(
            buf, sizeof buf, "%s %.2f  ", r.mode.c_str(),
            median_over(*g, [](const run_result& x) { return x.lat_mean_ns / x.floor_nt_ns; }));
        floors += buf;
    }
    if (!floors.empty())
        std::fprintf(out,
                     "  mean latency / persistence floor (64 B NT store + SFENCE, %.0f ns): %s\n",
                     first.floor_nt_ns, floors.c_str());
    const config_runs* walk = nullptr;
    for (const config_runs* g : sel)
        if (g->first().backend == "volatile" && g->ok())
            walk = g;
    if ((!floors.empty() || walk) && first.floor_miss_ns > 0)
        std::fprintf(out,
                     "  one dependent cache miss on this machine: %.0f ns (a table walk pays about "
                     "one per link, the persist floor does not include it)\n",
                     first.floor_miss_ns);
    if ((!floors.empty() || walk) && first.floor_page_ns > 0 && first.wl != workload::c) {
        // Every backend's inserts fill new memory: one node block each (tlptm's size class of
        // the node; PMDK's and the volatile table's are about as large).
        const double block = static_cast<double>(
            tlptm::detail::size_classes[tlptm::detail::class_of(16 + first.value_size)]);
        const double share = first.wl == workload::a ? 1.0 : 0.5;
        std::fprintf(out,
                     "  a fresh 4 KiB page on this machine: %.0f ns; inserts of %.0f-byte nodes "
                     "take one every %.0f inserts, about %.0f ns a transaction here (PMDK and "
                     "the volatile table pay it; tlptm's page-ahead thread readies the pages "
                     "unless TLPTM_POPULATE_AHEAD=0)\n",
                     first.floor_page_ns, block, 4096 / block,
                     share * first.floor_page_ns * block / 4096);
    }
    if (walk)
        std::fprintf(out,
                     "  the same table in volatile memory (no TM, no persistence, same keys): "
                     "%.0f ns%s\n",
                     median_latency(*walk), added_to_walk(sel, *walk, first.floor_nt_ns).c_str());
}

void print_pmdk_comparison(std::FILE* out, const std::vector<run_result>& rows) {
    const std::vector<config_runs> groups = group_runs(rows);
    std::vector<const config_runs*> pmdk;
    std::vector<std::string> modes;
    std::size_t reps = 0;
    bool walk = false; // the volatile table ran: its column too
    for (const config_runs& g : groups) {
        const run_result& r = g.first();
        if (r.backend == "pmdk" && g.ok()) {
            pmdk.push_back(&g);
            reps = std::max(reps, g.reps.size());
        }
        walk = walk || (r.backend == "volatile" && g.ok());
        if (has_peers(r) && std::find(modes.begin(), modes.end(), r.mode) == modes.end())
            modes.push_back(r.mode);
    }
    if (pmdk.empty() || modes.empty())
        return;
    std::string medians;
    if (reps > 1)
        medians = ", medians of " + std::to_string(reps) + " repetitions";
    std::fprintf(out, "\ntlptm vs PMDK libpmemobj (1 thread, 0 ns%s): throughput tlptm / PMDK%s\n",
                 medians.c_str(),
                 walk ? "; volatile ns: mean latency of the same table in volatile memory (no TM, "
                        "no persistence)"
                      : "");
    std::fprintf(out, "  %-8s %10s %12s", "workload", "PMDK tx/s", "PMDK mean ns");
    for (const std::string& m : modes)
        std::fprintf(out, " %9s", m.c_str());
    if (walk)
        std::fprintf(out, " %11s", "volatile ns");
    std::fprintf(out, "\n");
    for (const config_runs* p : pmdk) {
        std::fprintf(out, "  %-8s %10s %12s", to_string(p->first().wl),
                     format(median_throughput(*p), -1).c_str(),
                     format(median_latency(*p), 0).c_str());
        for (const std::string& m : modes) {
            double q = nan;
            for (const config_runs& g : groups) {
                const run_result& r = g.first();
                if (r.backend == "tlptm" && r.mode == m && r.wl == p->first().wl &&
                    r.threads == 1 && r.write_ns == 0)
                    q = pmdk_ratio(groups, g);
            }
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.2fx", q);
            std::fprintf(out, " %9s", std::isnan(q) ? "-" : buf);
        }
        if (walk) {
            double v = nan;
            for (const config_runs& g : groups)
                if (g.ok() && is_peer_of(g.first(), "volatile", p->first()))
                    v = median_latency(g);
            std::fprintf(out, " %11s", format(v, 0).c_str());
        }
        std::fprintf(out, "\n");
    }
}

void print_scaling(std::FILE* out, const std::vector<run_result>& rows) {
    const std::vector<config_runs> groups = group_runs(rows);
    // The latency is named only when the runs have several: one line per pair either way.
    bool several_ns = false;
    for (const config_runs& g : groups)
        several_ns = several_ns || g.first().write_ns != groups.front().first().write_ns;
    bool any = false;
    for (const config_runs& one : groups) {
        const run_result& r = one.first();
        if (r.backend != "tlptm" || r.threads != 1 || !one.ok())
            continue;
        const double t1 = median_throughput(one);
        for (const config_runs& many : groups) {
            const run_result& n = many.first();
            if (n.backend != "tlptm" || n.mode != r.mode || n.threads <= 1 || !same_config(n, r) ||
                n.write_ns != r.write_ns || !many.ok() || t1 <= 0)
                continue;
            const double tn = median_throughput(many);
            std::string at = several_ns ? " at " + std::to_string(r.write_ns) + " ns" : "";
            std::fprintf(out,
                         "%sscaling %s/%s%s: %u threads %.2fx one thread (median tx/s %s vs %s)\n",
                         any ? "" : "\n", to_string(r.wl), r.mode.c_str(), at.c_str(), n.threads,
                         tn / t1, format(tn, -1).c_str(), format(t1, -1).c_str());
            any = true;
        }
    }
}

bool write_csv(const std::string& path, const std::vector<run_result>& rows) {
    std::unique_ptr<std::FILE, file_closer> f(std::fopen(path.c_str(), "w"));
    if (!f)
        return false;
    bool header = true;
    for (const run_result& r : rows) {
        std::vector<field> fs = fields_of(rows, r);
        if (header) {
            for (std::size_t i = 0; i < fs.size(); ++i)
                std::fprintf(f.get(), "%s%s", i ? "," : "", fs[i].name.c_str());
            std::fprintf(f.get(), "\n");
            header = false;
        }
        for (std::size_t i = 0; i < fs.size(); ++i)
            std::fprintf(f.get(), "%s%s", i ? "," : "", csv_quote(fs[i].value).c_str());
        std::fprintf(f.get(), "\n");
    }
    return std::fflush(f.get()) == 0 && !std::ferror(f.get());
}

bool write_json(const std::string& path, const std::vector<run_result>& rows) {
    std::unique_ptr<std::FILE, file_closer> f(std::fopen(path.c_str(), "w"));
    if (!f)
        return false;
    std::fprintf(f.get(), "{\n  \"tool\": \"tlptm-workloads\",\n  \"results\": [");
    for (std::size_t k = 0; k < rows.size(); ++k) {
        std::vector<field> fs = fields_of(rows, rows[k]);
        std::fprintf(f.get(), "%s\n    {", k ? "," : "");
        for (std::size_t i = 0; i < fs.size(); ++i) {
            std::string v = fs[i].is_string       ? json_string(fs[i].value)
                            : fs[i].value.empty() ? "null"
                                                  : fs[i].value;
            std::fprintf(f.get(), "%s\"%s\": %s", i ? ", " : "", fs[i].name.c_str(), v.c_str());
        }
        std::fprintf(f.get(), "}");
    }
    std::fprintf(f.get(), "\n  ]\n}\n");
    return std::fflush(f.get()) == 0 && !std::ferror(f.get());
}

} // namespace workloads
