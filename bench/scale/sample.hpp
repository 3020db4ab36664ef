// The summary of repeated measurements of one quantity: mean, sample standard deviation,
// standard error of the mean and its 95 % confidence interval (Student t with n - 1 degrees of
// freedom, from GSL).
#pragma once

#include <gsl/gsl_cdf.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

namespace tlptm_scale {

/// The 0.975 quantile of Student's t with `dof` degrees of freedom (the half-width factor of a
/// two-sided 95 % interval); NaN when dof is 0.
inline double student_t_975(std::size_t dof) {
    if (dof == 0)
        return std::numeric_limits<double>::quiet_NaN();
    return gsl_cdf_tdist_Pinv(0.975, static_cast<double>(dof));
}

/// Mean, spread and 95 % confidence interval of the mean of n repetitions.
struct sample_summary {
    std::size_t n = 0;
    double mean = 0;
    double sd = 0; ///< sample standard deviation (n - 1 in the denominator); 0 when n < 2
    double se = 0; ///< standard error of the mean, sd / sqrt(n)
    double ci_lo = 0, ci_hi = 0; ///< mean -+ t(0.975, n - 1) * se; equal to mean when n < 2

    /// Relative standard error, se / mean (0 when the mean is 0).
    double relative_error() const noexcept { return mean == 0 ? 0 : se / mean; }
};

/// Summarises the values (any number, none gives all zeros).
inline sample_summary summarise(std::span<const double> values) {
    sample_summary s;
    s.n = values.size();
    if (s.n == 0)
        return s;
    double sum = 0;
    for (double v : values)
        sum += v;
    s.mean = sum / static_cast<double>(s.n);
    s.ci_lo = s.ci_hi = s.mean;
    if (s.n < 2)
        return s;
    double ss = 0;
    for (double v : values)
        ss += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(s.n - 1));
    s.se = s.sd / std::sqrt(static_cast<double>(s.n));
    const double half = student_t_975(s.n - 1) * s.se;
    s.ci_lo = s.mean - half;
    s.ci_hi = s.mean + half;
    return s;
}

} // namespace tlptm_scale
