#include "report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tlptm_scale {

namespace {

/// n per operation (0 when there was none).
double per_op(std::uint64_t n, std::uint64_t ops) {
    return ops ? static_cast<double>(n) / static_cast<double>(ops) : 0.0;
}

/// p / X(p) in nanoseconds: the time each thread spends on one operation (with more threads
/// than cores, its waits for a core included). Its growth over one thread's is what sharing
/// costs each operation: compared with the chase calibration's, it says how much of that is
/// the machine's price for moving written lines between cores. 0 without a throughput.
double thread_ns_per_op(const scale_point& p) {
    return p.x.mean > 0 ? p.threads * 1e9 / p.x.mean : 0.0;
}

/// "1.23M", "456.7k", "89.0": a rate for the console.
std::string human(double v) {
    char buf[32];
    const double a = std::fabs(v);
    if (a >= 1e6)
        std::snprintf(buf, sizeof buf, "%.3fM", v / 1e6);
    else if (a >= 1e3)
        std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}

/// A double for CSV / JSON ("" / null when not finite is the caller's business).
std::string num(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
}

std::string opt_num(const std::optional<double>& v, const char* none) {
    return v ? num(*v) : none;
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

std::string csv_string(const std::string& s) {
    std::string out = "\"";
    for (char ch : s)
        out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

struct file_closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

/// Closes f and reports whether everything written reached the file.
bool finish(file_ptr f) {
    const bool ok = std::ferror(f.get()) == 0;
    return std::fclose(f.release()) == 0 && ok;
}

std::string fit_scope(const scale_series& s, unsigned cores) {
    return s.fit_oversubscribed ? "all thread counts" : "p <= " + std::to_string(cores) + " cores";
}

const scale_point* point_at(const scale_series& s, unsigned threads) {
    for (const scale_point& p : s.points)
        if (p.threads == threads)
            return &p;
    return nullptr;
}

} // namespace

void analyse(scale_series& s, unsigned cores) {
    for (scale_point& p : s.points)
        p.x = summarise(p.throughputs);
    const scale_point* one = point_at(s, 1);
    if (one == nullptr || one->x.n == 0 || one->x.mean <= 0)
        return; // no baseline: no speedups, no fit
    const double x1 = one->x.mean;
    const double rel1 = one->x.relative_error();
    std::vector<usl_point> pts;
    for (scale_point& p : s.points) {
        if (p.x.n == 0)
            continue;
        p.speedup = p.x.mean / x1;
        // Relative errors of the two means add in quadrature (at p = 1 the ratio is of one
        // mean with itself: its own relative error is kept as the spread).
        const double rel =
            p.threads == 1 ? rel1
                           : std::sqrt(p.x.relative_error() * p.x.relative_error() + rel1 * rel1);
        const double t = p.x.n >= 2 ? student_t_975(p.x.n - 1) : 0.0;
        p.speedup_lo = p.speedup * (1 - t * rel);
        p.speedup_hi = p.speedup * (1 + t * rel);
        if (p.threads <= cores || s.fit_oversubscribed)
            for (double v : p.throughputs)
                pts.push_back({static_cast<double>(p.threads), v / x1});
    }
    s.fit = fit_usl(pts);
    s.linearised = fit_usl_linearised(pts);
    if (s.fit_oversubscribed)
        s.fit.warnings.emplace_back(
            "the fit includes thread counts above the " + std::to_string(cores) +
            " cores: there threads share cores (time slicing), which the USL does not model");
}

void print_series(std::FILE* out, const scale_series& s, const scale_header& h) {
    std::fprintf(out, "\n== %s (%s), %s ==\n", s.workload.c_str(), s.description.c_str(),
                 s.backend.c_str());
    std::fprintf(out, "%8s %11s %10s %10s %25s %8s %6s %15s %11s %10s%s\n", "threads", "mean tx/s",
                 "sd", "se", "95% CI of the mean", "rel.err", "S(p)", "95% CI of S", "ns/op/thr",
                 "aborts/tx", h.msync ? "   msync/tx" : "");
    bool any_over = false;
    for (const scale_point& p : s.points) {
        any_over = any_over || p.oversubscribed;
        if (p.x.n == 0) {
            std::fprintf(out, "%6u %s  no verified repetition\n", p.threads,
                         p.oversubscribed ? "*" : " ");
            continue;
        }
        char ci[64];
        std::snprintf(ci, sizeof ci, "[%s, %s]", human(p.x.ci_lo).c_str(),
                      human(p.x.ci_hi).c_str());
        char sci[40];
        std::snprintf(sci, sizeof sci, "[%.2f, %.2f]", p.speedup_lo, p.speedup_hi);
        const double aborts = per_op(p.aborts, p.ops);
        std::fprintf(out, "%6u %s %11s %10s %10s %25s %7.1f%% %6.2f %15s %11.1f %10.4f", p.threads,
                     p.oversubscribed ? "*" : " ", human(p.x.mean).c_str(), human(p.x.sd).c_str(),
                     human(p.x.se).c_str(), ci, 100 * p.x.relative_error(), p.speedup, sci,
                     thread_ns_per_op(p), aborts);
        if (h.msync)
            std::fprintf(out, " %10.3f", per_op(p.msync_calls, p.ops));
        std::fputc('\n', out);
        for (const std::string& e : p.errors)
            std::fprintf(out, "         FAILED repetition: %s\n", e.c_str());
    }
    if (any_over)
        std::fprintf(out, "  * more threads than the %u cores (oversubscribed)\n", h.cores);

    const usl_fit& f = s.fit;
    std::fprintf(out, "  USL fit (%s; %zu runs, %zu thread counts above 1): %s\n",
                 fit_scope(s, h.cores).c_str(), f.points, f.levels, to_string(f.status));
    if (f.status == usl_fit_status::contention_only) {
        std::fprintf(out, "    sigma = %.4f +- %.4f (95%% CI [%.4f, %.4f]) if kappa = 0\n", f.sigma,
                     f.sigma_se, f.sigma_lo, f.sigma_hi);
    } else if (f.has_curve()) {
        std::fprintf(out, "    sigma = %.5f +- %.5f (95%% CI [%.5f, %.5f])\n", f.sigma, f.sigma_se,
                     f.sigma_lo, f.sigma_hi);
        std::fprintf(out, "    kappa = %.6f +- %.6f (95%% CI [%.6f, %.6f])\n", f.kappa, f.kappa_se,
                     f.kappa_lo, f.kappa_hi);
        std::fprintf(out, "    R^2 = %.4f, residual sd of S = %.4f, %zu degrees of freedom\n", f.r2,
                     f.residual_sd, f.dof);
        if (f.p_peak)
            std::fprintf(out, "    peak: p* = %.1f threads, S(p*) = %.2f\n", *f.p_peak, *f.s_peak);
        if (f.p_cross)
            std::fprintf(out, "    crosses the linear bound at p_x = %.1f\n", *f.p_cross);
        if (s.linearised.ok)
            std::fprintf(out, "    (linearised least squares: sigma = %.5f, kappa = %.6f)\n",
                         s.linearised.sigma, s.linearised.kappa);
    }
    for (const std::string& w : f.warnings)
        std::fprintf(out, "    warning: %s\n", w.c_str());
}

void print_fit_summary(std::FILE* out, const std::vector<scale_series>& all) {
    std::fprintf(out, "\nUSL fits, one line per workload and backend:\n");
    std::fprintf(out, "%-10s %-6s %-16s %28s %30s %7s %8s %7s %7s\n", "workload", "backend",
                 "status", "sigma [95% CI]", "kappa [95% CI]", "R^2", "p*", "S(p*)", "p_x");
    for (const scale_series& s : all) {
        const usl_fit& f = s.fit;
        char sigma[64] = "-", kappa[64] = "-", r2[16] = "-", pk[16] = "-", sp[16] = "-",
             px[16] = "-";
        if (f.status == usl_fit_status::contention_only || f.has_curve())
            std::snprintf(sigma, sizeof sigma, "%.4f [%.4f, %.4f]", f.sigma, f.sigma_lo,
                          f.sigma_hi);
        if (f.has_curve()) {
            std::snprintf(kappa, sizeof kappa, "%.5f [%.5f, %.5f]", f.kappa, f.kappa_lo,
                          f.kappa_hi);
            std::snprintf(r2, sizeof r2, "%.3f", f.r2);
            if (f.p_peak) {
                std::snprintf(pk, sizeof pk, "%.1f", *f.p_peak);
                std::snprintf(sp, sizeof sp, "%.2f", *f.s_peak);
            }
            if (f.p_cross)
                std::snprintf(px, sizeof px, "%.1f", *f.p_cross);
        } else if (f.status == usl_fit_status::contention_only) {
            std::snprintf(kappa, sizeof kappa, "(fixed at 0)");
        }
        std::fprintf(out, "%-10s %-6s %-16s %28s %30s %7s %8s %7s %7s\n", s.workload.c_str(),
                     s.backend.c_str(), to_string(f.status), sigma, kappa, r2, pk, sp, px);
    }
}

std::string sibling_csv(const std::string& points_csv, const std::string& suffix) {
    const std::string ext = ".csv";
    if (points_csv.size() > ext.size() &&
        points_csv.compare(points_csv.size() - ext.size(), ext.size(), ext) == 0)
        return points_csv.substr(0, points_csv.size() - ext.size()) + suffix + ext;
    return points_csv + suffix + ext;
}

std::string write_csv(const std::string& path, const std::vector<scale_series>& all,
                      const scale_header& h) {
    {
        file_ptr f(std::fopen(path.c_str(), "w"));
        if (!f)
            return path;
        std::fprintf(f.get(),
                     "workload,backend,threads,cores,oversubscribed,reps,mean_tx_s,sd_tx_s,"
                     "se_tx_s,ci95_lo_tx_s,ci95_hi_tx_s,rel_err,speedup,speedup_ci95_lo,"
                     "speedup_ci95_hi,aborts_per_tx,failed_reps,fences_per_tx,msync_per_tx,"
                     "thread_ns_per_op\n");
        for (const scale_series& s : all)
            for (const scale_point& p : s.points)
                std::fprintf(
                    f.get(), "%s,%s,%u,%u,%s,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%zu,%s,%s,%s\n",
                    s.workload.c_str(), s.backend.c_str(), p.threads, h.cores,
                    p.oversubscribed ? "true" : "false", p.x.n, num(p.x.mean).c_str(),
                    num(p.x.sd).c_str(), num(p.x.se).c_str(), num(p.x.ci_lo).c_str(),
                    num(p.x.ci_hi).c_str(), num(p.x.relative_error()).c_str(),
                    num(p.speedup).c_str(), num(p.speedup_lo).c_str(), num(p.speedup_hi).c_str(),
                    num(per_op(p.aborts, p.ops)).c_str(), p.errors.size(),
                    num(per_op(p.fences, p.ops)).c_str(), num(per_op(p.msync_calls, p.ops)).c_str(),
                    num(thread_ns_per_op(p)).c_str());
        if (!finish(std::move(f)))
            return path;
    }
    const std::string fits = sibling_csv(path, "-fits");
    {
        file_ptr f(std::fopen(fits.c_str(), "w"));
        if (!f)
            return fits;
        std::fprintf(f.get(), "workload,backend,status,fit_scope,points,levels,dof,sigma,sigma_se,"
                              "sigma_ci95_lo,sigma_ci95_hi,kappa,kappa_se,kappa_ci95_lo,"
                              "kappa_ci95_hi,r2,p_peak,s_peak,p_cross,lin_sigma,lin_kappa,"
                              "warnings\n");
        for (const scale_series& s : all) {
            const usl_fit& fit = s.fit;
            std::string warnings;
            for (const std::string& w : fit.warnings)
                warnings += (warnings.empty() ? "" : "; ") + w;
            // Empty cells for what the fit did not estimate.
            const bool has_sigma = fit.has_curve() || fit.status == usl_fit_status::contention_only;
            auto sig = [&](double v) { return has_sigma ? num(v) : std::string(); };
            auto kap = [&](double v) { return fit.has_curve() ? num(v) : std::string(); };
            std::fprintf(
                f.get(), "%s,%s,%s,%s,%zu,%zu,%zu,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
                s.workload.c_str(), s.backend.c_str(), to_string(fit.status),
                s.fit_oversubscribed ? "all" : "cores", fit.points, fit.levels, fit.dof,
                sig(fit.sigma).c_str(), sig(fit.sigma_se).c_str(), sig(fit.sigma_lo).c_str(),
                sig(fit.sigma_hi).c_str(), kap(fit.kappa).c_str(), kap(fit.kappa_se).c_str(),
                kap(fit.kappa_lo).c_str(), kap(fit.kappa_hi).c_str(), kap(fit.r2).c_str(),
                opt_num(fit.p_peak, "").c_str(), opt_num(fit.s_peak, "").c_str(),
                opt_num(fit.p_cross, "").c_str(),
                s.linearised.ok ? num(s.linearised.sigma).c_str() : "",
                s.linearised.ok ? num(s.linearised.kappa).c_str() : "",
                csv_string(warnings).c_str());
        }
        if (!finish(std::move(f)))
            return fits;
    }
    const std::string curves = sibling_csv(path, "-curves");
    {
        file_ptr f(std::fopen(curves.c_str(), "w"));
        if (!f)
            return curves;
        std::fprintf(f.get(), "workload,backend,p,speedup,band95_lo,band95_hi\n");
        const double pmax = h.thread_counts.empty()
                                ? 1.0
                                : static_cast<double>(*std::max_element(h.thread_counts.begin(),
                                                                        h.thread_counts.end()));
        for (const scale_series& s : all) {
            if (!s.fit.has_curve())
                continue;
            for (int i = 0; i <= 200; ++i) {
                const double p = 1 + (pmax - 1) * i / 200.0;
                auto [lo, hi] = s.fit.band(p);
                std::fprintf(f.get(), "%s,%s,%s,%s,%s,%s\n", s.workload.c_str(), s.backend.c_str(),
                             num(p).c_str(), num(s.fit.speedup(p)).c_str(), num(lo).c_str(),
                             num(hi).c_str());
            }
        }
        if (!finish(std::move(f)))
            return curves;
    }
    return "";
}

bool write_json(const std::string& path, const std::vector<scale_series>& all,
                const scale_header& h) {
    file_ptr f(std::fopen(path.c_str(), "w"));
    if (!f)
        return false;
    std::FILE* o = f.get();
    auto opt = [](const std::optional<double>& v) { return v ? num(*v) : std::string("null"); };
    std::fprintf(o, "{\n  \"tool\": \"tlptm-scale\",\n");
    std::fprintf(o,
                 "  \"config\": {\"cores\": %u, \"reps\": %u, \"seconds\": %s, \"keys\": %llu, "
                 "\"range\": %llu, \"accounts_per_thread\": %llu, \"hot_accounts\": %llu, "
                 "\"seed\": %llu, \"pool\": %s, \"pmemobj_version\": %s, "
                 "\"load_average_before\": %s, \"load_average_after\": %s, \"threads\": [",
                 h.cores, h.reps, num(h.seconds).c_str(), static_cast<unsigned long long>(h.keys),
                 static_cast<unsigned long long>(h.range),
                 static_cast<unsigned long long>(h.accounts),
                 static_cast<unsigned long long>(h.hot), static_cast<unsigned long long>(h.seed),
                 json_string(h.pool_path).c_str(), json_string(h.pmemobj_version).c_str(),
                 h.load_before < 0 ? "null" : num(h.load_before).c_str(),
                 h.load_after < 0 ? "null" : num(h.load_after).c_str());
    for (std::size_t i = 0; i < h.thread_counts.size(); ++i)
        std::fprintf(o, "%s%u", i ? ", " : "", h.thread_counts[i]);
    std::fprintf(o, "], \"pinned\": %s, \"cpus\": [", h.cpus.empty() ? "false" : "true");
    for (std::size_t i = 0; i < h.cpus.size(); ++i)
        std::fprintf(o, "%s%d", i ? ", " : "", h.cpus[i]);
    std::fprintf(o, "]},\n  \"series\": [");
    for (std::size_t si = 0; si < all.size(); ++si) {
        const scale_series& s = all[si];
        std::fprintf(o, "%s\n    {\"workload\": %s, \"description\": %s, \"backend\": %s,\n",
                     si ? "," : "", json_string(s.workload).c_str(),
                     json_string(s.description).c_str(), json_string(s.backend).c_str());
        std::fprintf(o, "     \"points\": [");
        for (std::size_t pi = 0; pi < s.points.size(); ++pi) {
            const scale_point& p = s.points[pi];
            std::fprintf(o,
                         "%s\n       {\"threads\": %u, \"oversubscribed\": %s, \"throughputs\": [",
                         pi ? "," : "", p.threads, p.oversubscribed ? "true" : "false");
            for (std::size_t i = 0; i < p.throughputs.size(); ++i)
                std::fprintf(o, "%s%s", i ? ", " : "", num(p.throughputs[i]).c_str());
            std::fprintf(o,
                         "], \"mean\": %s, \"sd\": %s, \"se\": %s, \"ci95\": [%s, %s], "
                         "\"speedup\": %s, \"speedup_ci95\": [%s, %s], \"thread_ns_per_op\": %s, "
                         "\"ops\": %llu, "
                         "\"aborts\": %llu, \"fences\": %llu, \"msync_calls\": %llu, \"errors\": [",
                         num(p.x.mean).c_str(), num(p.x.sd).c_str(), num(p.x.se).c_str(),
                         num(p.x.ci_lo).c_str(), num(p.x.ci_hi).c_str(), num(p.speedup).c_str(),
                         num(p.speedup_lo).c_str(), num(p.speedup_hi).c_str(),
                         num(thread_ns_per_op(p)).c_str(), static_cast<unsigned long long>(p.ops),
                         static_cast<unsigned long long>(p.aborts),
                         static_cast<unsigned long long>(p.fences),
                         static_cast<unsigned long long>(p.msync_calls));
            for (std::size_t i = 0; i < p.errors.size(); ++i)
                std::fprintf(o, "%s%s", i ? ", " : "", json_string(p.errors[i]).c_str());
            std::fprintf(o, "]}");
        }
        const usl_fit& fit = s.fit;
        std::fprintf(o,
                     "],\n     \"fit\": {\"status\": %s, \"scope\": %s, \"points\": %zu, "
                     "\"levels\": %zu, \"dof\": %zu, \"sigma\": %s, \"sigma_se\": %s, "
                     "\"sigma_ci95\": [%s, %s], \"kappa\": %s, \"kappa_se\": %s, "
                     "\"kappa_ci95\": [%s, %s], \"r2\": %s, \"p_peak\": %s, \"s_peak\": %s, "
                     "\"p_cross\": %s, \"linearised\": %s, \"warnings\": [",
                     json_string(to_string(fit.status)).c_str(),
                     json_string(s.fit_oversubscribed ? "all" : "cores").c_str(), fit.points,
                     fit.levels, fit.dof, num(fit.sigma).c_str(), num(fit.sigma_se).c_str(),
                     num(fit.sigma_lo).c_str(), num(fit.sigma_hi).c_str(), num(fit.kappa).c_str(),
                     num(fit.kappa_se).c_str(), num(fit.kappa_lo).c_str(),
                     num(fit.kappa_hi).c_str(), num(fit.r2).c_str(), opt(fit.p_peak).c_str(),
                     opt(fit.s_peak).c_str(), opt(fit.p_cross).c_str(),
                     s.linearised.ok ? ("{\"sigma\": " + num(s.linearised.sigma) +
                                        ", \"kappa\": " + num(s.linearised.kappa) + "}")
                                           .c_str()
                                     : "null");
        for (std::size_t i = 0; i < fit.warnings.size(); ++i)
            std::fprintf(o, "%s%s", i ? ", " : "", json_string(fit.warnings[i]).c_str());
        std::fprintf(o, "]}}");
    }
    std::fprintf(o, "\n  ]\n}\n");
    return finish(std::move(f));
}

} // namespace tlptm_scale
