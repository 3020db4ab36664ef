// The Universal Scalability Law (Gunther) and its fit to measured speedups:
//
//     S(p) = p / (1 + sigma (p - 1) + kappa p (p - 1))
//
// sigma is contention (queueing on a shared resource), kappa coherency (pairwise exchange).
// fit_usl() is a nonlinear least-squares fit by GSL's trust-region solver
// (gsl_multifit_nlinear), started from the linearised ordinary least-squares solution
// (p / S - 1 = sigma (p - 1) + kappa p (p - 1), gsl_multifit_linear). The covariance of the
// coefficients is GSL's (J^T J)^-1 scaled by the residual variance; intervals use Student t with
// n - 2 degrees of freedom. Points are (p, S) pairs, one per repetition (several per p).
#pragma once

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sample.hpp"

namespace tlptm_scale {

/// One measured speedup: S at p threads.
struct usl_point {
    double p = 1;
    double speedup = 1;
};

/// The USL speedup at p for the given coefficients.
inline double usl_speedup(double p, double sigma, double kappa) noexcept {
    return p / (1 + sigma * (p - 1) + kappa * p * (p - 1));
}

/// How far a fit can be trusted.
enum class usl_fit_status {
    fitted,          ///< sigma and kappa from enough thread counts
    indicative,      ///< sigma and kappa fitted, but from few thread counts: wide intervals
    contention_only, ///< one thread count above 1: only sigma, with kappa fixed at 0
    no_fit,          ///< nothing to fit (no thread count above 1)
    failed           ///< the solver did not converge
};

inline const char* to_string(usl_fit_status s) noexcept {
    switch (s) {
    case usl_fit_status::fitted:
        return "fitted";
    case usl_fit_status::indicative:
        return "indicative";
    case usl_fit_status::contention_only:
        return "contention-only";
    case usl_fit_status::no_fit:
        return "no-fit";
    case usl_fit_status::failed:
        return "failed";
    }
    return "?";
}

/// The fitted coefficients, their uncertainty and what follows from them.
struct usl_fit {
    usl_fit_status status = usl_fit_status::no_fit;
    std::size_t points = 0; ///< (p, S) pairs fitted
    std::size_t levels = 0; ///< distinct thread counts above 1 among them
    std::size_t dof = 0;    ///< points - fitted parameters
    double sigma = 0, kappa = 0;
    double sigma_se = 0, kappa_se = 0, cov_sigma_kappa = 0;
    double t = 0; ///< t(0.975, dof), the half-width factor of the 95 % intervals
    double sigma_lo = 0, sigma_hi = 0, kappa_lo = 0, kappa_hi = 0; ///< 95 % intervals
    double r2 = 0;                 ///< coefficient of determination of S
    double residual_sd = 0;        ///< sqrt(weighted sum of squared residuals / dof): with relative
                                   ///< weights, the relative spread of S about the curve
    std::optional<double> p_peak;  ///< p* = sqrt((1 - sigma) / kappa), when kappa > 0
    std::optional<double> s_peak;  ///< S(p*)
    std::optional<double> p_cross; ///< p_x = -sigma / kappa, where S crosses p, when sigma < 0
    std::vector<std::string> warnings;

    /// True when sigma and kappa were both fitted (fitted or indicative): a curve can be drawn.
    bool has_curve() const noexcept {
        return status == usl_fit_status::fitted || status == usl_fit_status::indicative;
    }

    /// The fitted speedup at p.
    double speedup(double p) const noexcept { return usl_speedup(p, sigma, kappa); }

    /// The 95 % confidence band of the fitted mean curve at p (delta method: the gradient of S
    /// in (sigma, kappa) through the coefficients' covariance).
    std::pair<double, double> band(double p) const noexcept {
        const double d = 1 + sigma * (p - 1) + kappa * p * (p - 1);
        const double g_sigma = -p * (p - 1) / (d * d);
        const double g_kappa = -p * p * (p - 1) / (d * d);
        const double var = g_sigma * g_sigma * sigma_se * sigma_se +
                           2 * g_sigma * g_kappa * cov_sigma_kappa +
                           g_kappa * g_kappa * kappa_se * kappa_se;
        const double half = t * std::sqrt(var > 0 ? var : 0);
        const double s = speedup(p);
        return {s - half, s + half};
    }
};

/// How the residuals of the points are weighed.
enum class usl_weighting {
    relative, ///< by 1 / S^2: every point's relative error counts alike (measured throughput)
    none      ///< ordinary least squares of S (errors of one size at every p)
};

/// Options of fit_usl().
struct usl_fit_options {
    /// Thread counts above 1 needed for a fit that is not marked `indicative`.
    std::size_t min_levels = 4;
    usl_weighting weighting = usl_weighting::relative;
};

/// The linearised least-squares solution: y = p / S - 1 regressed on (p - 1, p (p - 1)) with no
/// intercept. With exact USL data it equals the nonlinear fit; with noise it weighs the points
/// differently (fit_usl uses it as its starting point).
struct usl_linearised {
    bool ok = false;
    double sigma = 0, kappa = 0;
};

namespace detail {

struct gsl_vector_deleter {
    void operator()(gsl_vector* v) const noexcept { gsl_vector_free(v); }
};
struct gsl_matrix_deleter {
    void operator()(gsl_matrix* m) const noexcept { gsl_matrix_free(m); }
};
using vector_ptr = std::unique_ptr<gsl_vector, gsl_vector_deleter>;
using matrix_ptr = std::unique_ptr<gsl_matrix, gsl_matrix_deleter>;

inline vector_ptr make_vector(std::size_t n) {
    vector_ptr v(gsl_vector_calloc(n));
    if (!v)
        throw std::bad_alloc();
    return v;
}
inline matrix_ptr make_matrix(std::size_t rows, std::size_t cols) {
    matrix_ptr m(gsl_matrix_calloc(rows, cols));
    if (!m)
        throw std::bad_alloc();
    return m;
}

/// Turns GSL's default error handler (abort()) off while alive: the fit reports failures
/// through status codes instead.
class gsl_errors_off {
public:
    gsl_errors_off() : previous_(gsl_set_error_handler_off()) {}
    ~gsl_errors_off() { gsl_set_error_handler(previous_); }
    gsl_errors_off(const gsl_errors_off&) = delete;
    gsl_errors_off& operator=(const gsl_errors_off&) = delete;

private:
    gsl_error_handler_t* previous_;
};

struct model_data {
    std::span<const usl_point> points;
    bool with_kappa;
};

/// Residuals S_model(p_i) - S_i. A denominator at or below zero (a step into the region where
/// the model has a pole) gets a huge residual, so that the trust region rejects the step.
inline int usl_residuals(const gsl_vector* x, void* params, gsl_vector* f) {
    const auto* d = static_cast<const model_data*>(params);
    const double sigma = gsl_vector_get(x, 0);
    const double kappa = d->with_kappa ? gsl_vector_get(x, 1) : 0.0;
    for (std::size_t i = 0; i < d->points.size(); ++i) {
        const usl_point& pt = d->points[i];
        const double den = 1 + sigma * (pt.p - 1) + kappa * pt.p * (pt.p - 1);
        gsl_vector_set(f, i, den > 1e-9 ? pt.p / den - pt.speedup : 1e6);
    }
    return GSL_SUCCESS;
}

/// The Jacobian: dS/dsigma = -p (p - 1) / D^2, dS/dkappa = -p^2 (p - 1) / D^2.
inline int usl_jacobian(const gsl_vector* x, void* params, gsl_matrix* j) {
    const auto* d = static_cast<const model_data*>(params);
    const double sigma = gsl_vector_get(x, 0);
    const double kappa = d->with_kappa ? gsl_vector_get(x, 1) : 0.0;
    for (std::size_t i = 0; i < d->points.size(); ++i) {
        const double p = d->points[i].p;
        double den = 1 + sigma * (p - 1) + kappa * p * (p - 1);
        if (den <= 1e-9)
            den = 1e-9;
        gsl_matrix_set(j, i, 0, -p * (p - 1) / (den * den));
        if (d->with_kappa)
            gsl_matrix_set(j, i, 1, -p * p * (p - 1) / (den * den));
    }
    return GSL_SUCCESS;
}

/// Least squares of the USL in sigma (and kappa, if with_kappa) from `start`. Fills the
/// coefficients, their covariance, R^2 and the residual spread of `out`; returns false if the
/// solver failed.
inline bool solve(std::span<const usl_point> points, bool with_kappa, double sigma0, double kappa0,
                  usl_weighting weighting, usl_fit& out) {
    const std::size_t n = points.size();
    const std::size_t k = with_kappa ? 2 : 1;
    model_data data{points, with_kappa};
    gsl_multifit_nlinear_fdf fdf{};
    fdf.f = usl_residuals;
    fdf.df = usl_jacobian;
    fdf.fvv = nullptr;
    fdf.n = n;
    fdf.p = k;
    fdf.params = &data;
    gsl_multifit_nlinear_parameters params = gsl_multifit_nlinear_default_parameters();
    std::unique_ptr<gsl_multifit_nlinear_workspace, void (*)(gsl_multifit_nlinear_workspace*)> w(
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &params, n, k),
        gsl_multifit_nlinear_free);
    if (!w)
        throw std::bad_alloc();
    vector_ptr x0 = make_vector(k);
    gsl_vector_set(x0.get(), 0, sigma0);
    if (with_kappa)
        gsl_vector_set(x0.get(), 1, kappa0);
    // Weights 1 / S_i^2: the residuals are relative, as the spread of measured throughput is
    // (a few per cent at every p), so the high-p points do not outweigh the rest.
    vector_ptr weights = make_vector(n);
    for (std::size_t i = 0; i < n; ++i)
        gsl_vector_set(weights.get(), i,
                       weighting == usl_weighting::relative
                           ? 1.0 / (points[i].speedup * points[i].speedup)
                           : 1.0);
    if (gsl_multifit_nlinear_winit(x0.get(), weights.get(), &fdf, w.get()) != GSL_SUCCESS)
        return false;
    int info = 0;
    const int status =
        gsl_multifit_nlinear_driver(500, 1e-12, 1e-12, 0.0, nullptr, nullptr, &info, w.get());
    if (status != GSL_SUCCESS)
        return false;

    const gsl_vector* x = gsl_multifit_nlinear_position(w.get());
    const gsl_vector* f = gsl_multifit_nlinear_residual(w.get());
    matrix_ptr covar = make_matrix(k, k);
    if (gsl_multifit_nlinear_covar(gsl_multifit_nlinear_jac(w.get()), 0.0, covar.get()) !=
        GSL_SUCCESS)
        return false;
    double wssr = 0; // the weighted sum of squared residuals
    gsl_blas_ddot(f, f, &wssr);

    out.points = n;
    out.dof = n - k;
    out.sigma = gsl_vector_get(x, 0);
    out.kappa = with_kappa ? gsl_vector_get(x, 1) : 0.0;
    // (J^T W J)^-1 is the covariance for errors of variance 1 / w_i; their scale is unknown
    // and estimated from the weighted residuals.
    const double s2 = out.dof > 0 ? wssr / static_cast<double>(out.dof) : 0.0;
    out.residual_sd = std::sqrt(s2);
    out.sigma_se = std::sqrt(gsl_matrix_get(covar.get(), 0, 0) * s2);
    out.kappa_se = with_kappa ? std::sqrt(gsl_matrix_get(covar.get(), 1, 1) * s2) : 0.0;
    out.cov_sigma_kappa = with_kappa ? gsl_matrix_get(covar.get(), 0, 1) * s2 : 0.0;
    out.t = out.dof > 0 ? student_t_975(out.dof) : 0.0;
    out.sigma_lo = out.sigma - out.t * out.sigma_se;
    out.sigma_hi = out.sigma + out.t * out.sigma_se;
    out.kappa_lo = out.kappa - out.t * out.kappa_se;
    out.kappa_hi = out.kappa + out.t * out.kappa_se;

    // R^2 of S itself (unweighted), whatever the weighting.
    double mean = 0;
    for (const usl_point& pt : points)
        mean += pt.speedup;
    mean /= static_cast<double>(n);
    double sst = 0, ssr = 0;
    for (const usl_point& pt : points) {
        sst += (pt.speedup - mean) * (pt.speedup - mean);
        const double e = usl_speedup(pt.p, out.sigma, out.kappa) - pt.speedup;
        ssr += e * e;
    }
    out.r2 = sst > 0 ? 1 - ssr / sst : 1.0;
    return std::isfinite(out.sigma) && std::isfinite(out.kappa) && std::isfinite(out.sigma_se) &&
           std::isfinite(out.kappa_se);
}

inline void check_points(std::span<const usl_point> points) {
    for (const usl_point& pt : points)
        if (!(pt.p >= 1) || !std::isfinite(pt.p) || !(pt.speedup > 0) || !std::isfinite(pt.speedup))
            throw std::invalid_argument("usl fit: every point needs p >= 1 and a finite S > 0");
}

} // namespace detail

/// The linearised ordinary least-squares estimate (gsl_multifit_linear); ok is false when the
/// two regressors cannot be told apart (fewer than two thread counts above 1).
/// @throw std::invalid_argument a point with p < 1 or S <= 0
inline usl_linearised fit_usl_linearised(std::span<const usl_point> points) {
    detail::check_points(points);
    detail::gsl_errors_off quiet;
    usl_linearised r;
    std::set<double> levels;
    for (const usl_point& pt : points)
        if (pt.p >= 2)
            levels.insert(pt.p);
    if (levels.size() < 2)
        return r;
    const std::size_t n = points.size();
    detail::matrix_ptr x = detail::make_matrix(n, 2);
    detail::vector_ptr y = detail::make_vector(n);
    for (std::size_t i = 0; i < n; ++i) {
        const double p = points[i].p;
        gsl_matrix_set(x.get(), i, 0, p - 1);
        gsl_matrix_set(x.get(), i, 1, p * (p - 1));
        gsl_vector_set(y.get(), i, p / points[i].speedup - 1);
    }
    detail::vector_ptr c = detail::make_vector(2);
    detail::matrix_ptr cov = detail::make_matrix(2, 2);
    std::unique_ptr<gsl_multifit_linear_workspace, void (*)(gsl_multifit_linear_workspace*)> w(
        gsl_multifit_linear_alloc(n, 2), gsl_multifit_linear_free);
    if (!w)
        throw std::bad_alloc();
    double chisq = 0;
    if (gsl_multifit_linear(x.get(), y.get(), c.get(), cov.get(), &chisq, w.get()) != GSL_SUCCESS)
        return r;
    r.sigma = gsl_vector_get(c.get(), 0);
    r.kappa = gsl_vector_get(c.get(), 1);
    r.ok = std::isfinite(r.sigma) && std::isfinite(r.kappa);
    return r;
}

/// Fits the USL to the points (one per repetition; p = 1 points anchor S near 1). With two or
/// more thread counts above 1, sigma and kappa are fitted (status `indicative` below
/// opt.min_levels of them); with one, only sigma (kappa fixed at 0, status `contention_only`);
/// with none, nothing. Every limitation is also spelled out in `warnings`.
/// @throw std::invalid_argument a point with p < 1 or S <= 0
inline usl_fit fit_usl(std::span<const usl_point> points, const usl_fit_options& opt = {}) {
    detail::check_points(points);
    detail::gsl_errors_off quiet;
    usl_fit r;
    r.points = points.size();
    std::set<double> levels;
    for (const usl_point& pt : points)
        if (pt.p >= 2)
            levels.insert(pt.p);
    r.levels = levels.size();

    if (r.levels == 0) {
        r.status = usl_fit_status::no_fit;
        r.warnings.emplace_back("no thread count above 1: nothing to fit");
        return r;
    }
    if (r.levels == 1) {
        // S at a single p > 1 fixes one equation in two unknowns: any sigma + kappa p on a line
        // fits it. Only the contention-only model (kappa = 0) can be estimated.
        if (!detail::solve(points, false, 0.0, 0.0, opt.weighting, r)) {
            r.status = usl_fit_status::failed;
            r.warnings.emplace_back("the contention-only fit did not converge");
            return r;
        }
        r.status = usl_fit_status::contention_only;
        r.warnings.emplace_back(
            "only one thread count above 1 (p = " + std::to_string(int(*levels.begin())) +
            "): sigma and kappa cannot be told apart; shown is sigma with kappa fixed at 0, not "
            "a USL curve. Measure on a machine with more cores (8 or more thread counts)");
        return r;
    }

    const usl_linearised start = fit_usl_linearised(points);
    const double sigma0 = start.ok ? start.sigma : 0.0;
    const double kappa0 = start.ok ? start.kappa : 0.0;
    if (!detail::solve(points, true, sigma0, kappa0, opt.weighting, r)) {
        r.status = usl_fit_status::failed;
        r.warnings.emplace_back("the nonlinear fit did not converge");
        return r;
    }
    r.status = r.levels >= opt.min_levels ? usl_fit_status::fitted : usl_fit_status::indicative;
    if (r.status == usl_fit_status::indicative)
        r.warnings.emplace_back("only " + std::to_string(r.levels) +
                                " thread counts above 1: too few for a meaningful fit of two "
                                "coefficients; indicative only, the intervals are wide");
    if (r.dof == 0)
        r.warnings.emplace_back("no degree of freedom left: no intervals");
    if (r.kappa > 0 && r.sigma < 1) {
        r.p_peak = std::sqrt((1 - r.sigma) / r.kappa);
        r.s_peak = r.speedup(*r.p_peak);
    } else if (r.kappa < 0) {
        r.warnings.emplace_back("kappa < 0 is not physical (noise, or a superlinear effect "
                                "that the model does not describe): no peak");
    }
    if (r.sigma < 0) {
        r.warnings.emplace_back("sigma < 0: apparent superlinear speedup, which cannot last");
        if (r.kappa > 0)
            r.p_cross = -r.sigma / r.kappa;
    }
    return r;
}

} // namespace tlptm_scale
