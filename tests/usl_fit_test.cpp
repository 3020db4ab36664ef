// The USL fit of the scaling driver (bench/scale/usl_fit.hpp) on synthetic speedups made from
// known sigma and kappa: exact data is recovered exactly, noisy data within the reported 95 %
// intervals (and the intervals cover the truth about 95 % of the time), and too few thread
// counts are reported as such instead of as a confident fit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include "../bench/scale/sample.hpp"
#include "../bench/scale/usl_fit.hpp"

using tlptm_scale::fit_usl;
using tlptm_scale::usl_fit;
using tlptm_scale::usl_fit_status;
using tlptm_scale::usl_point;
using tlptm_scale::usl_speedup;

namespace {

const std::vector<double> thread_counts = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};

/// How the noise of synthetic speedups scales.
enum class noise_kind {
    relative, ///< standard deviation noise * S(p), as measured throughput spreads
    absolute  ///< standard deviation noise at every p
};

/// `reps` points per thread count: the USL speedup plus normal noise.
std::vector<usl_point> synthetic(double sigma, double kappa, double noise, int reps,
                                 std::mt19937_64& gen,
                                 const std::vector<double>& ps = thread_counts,
                                 noise_kind kind = noise_kind::relative) {
    std::normal_distribution<double> err(0.0, 1.0);
    std::vector<usl_point> pts;
    for (double p : ps)
        for (int r = 0; r < reps; ++r) {
            const double s = usl_speedup(p, sigma, kappa);
            const double sd = kind == noise_kind::relative ? noise * s : noise;
            pts.push_back({p, s + (noise > 0 ? sd * err(gen) : 0.0)});
        }
    return pts;
}

bool within(double v, double lo, double hi) {
    return lo <= v && v <= hi;
}

} // namespace

TEST_CASE("exact USL data gives back sigma and kappa, p* and p_x") {
    std::mt19937_64 gen(1);
    SUBCASE("contention and coherency, a peak at p*") {
        const double sigma = 0.05, kappa = 0.002;
        const usl_fit f = fit_usl(synthetic(sigma, kappa, 0.0, 1, gen));
        REQUIRE(f.status == usl_fit_status::fitted);
        CHECK(f.sigma == doctest::Approx(sigma).epsilon(1e-7));
        CHECK(f.kappa == doctest::Approx(kappa).epsilon(1e-7));
        CHECK(f.r2 == doctest::Approx(1.0).epsilon(1e-9));
        REQUIRE(f.p_peak.has_value());
        CHECK(*f.p_peak == doctest::Approx(std::sqrt((1 - sigma) / kappa)).epsilon(1e-6));
        CHECK(*f.s_peak == doctest::Approx(usl_speedup(*f.p_peak, sigma, kappa)).epsilon(1e-9));
        // The peak is a maximum of the curve.
        CHECK(f.speedup(*f.p_peak) > f.speedup(*f.p_peak * 0.9));
        CHECK(f.speedup(*f.p_peak) > f.speedup(*f.p_peak * 1.1));
        CHECK_FALSE(f.p_cross.has_value());
        CHECK(f.warnings.empty());
    }
    SUBCASE("negative sigma: superlinear, crossing the linear bound at p_x = -sigma / kappa") {
        const double sigma = -0.03, kappa = 0.0005;
        const usl_fit f = fit_usl(synthetic(sigma, kappa, 0.0, 1, gen));
        REQUIRE(f.status == usl_fit_status::fitted);
        CHECK(f.sigma == doctest::Approx(sigma).epsilon(1e-7));
        CHECK(f.kappa == doctest::Approx(kappa).epsilon(1e-7));
        REQUIRE(f.p_cross.has_value());
        CHECK(*f.p_cross == doctest::Approx(60.0).epsilon(1e-6));
        CHECK(f.speedup(*f.p_cross) == doctest::Approx(*f.p_cross).epsilon(1e-9));
        CHECK(f.speedup(30) > 30); // superlinear before p_x
        CHECK(f.speedup(90) < 90); // below the linear bound after it
        REQUIRE(f.p_peak.has_value());
        CHECK(*f.p_peak == doctest::Approx(std::sqrt(1.03 / 0.0005)).epsilon(1e-6));
    }
    SUBCASE("the linearised least squares agree on exact data") {
        const auto pts = synthetic(0.1, 0.004, 0.0, 1, gen);
        const tlptm_scale::usl_linearised l = tlptm_scale::fit_usl_linearised(pts);
        REQUIRE(l.ok);
        CHECK(l.sigma == doctest::Approx(0.1).epsilon(1e-9));
        CHECK(l.kappa == doctest::Approx(0.004).epsilon(1e-9));
    }
}

TEST_CASE("noisy data: the truth lies within the reported 95 % intervals") {
    struct truth {
        double sigma, kappa;
    };
    // Five repetitions per thread count, 3 % relative noise; one fixed seed.
    for (truth t :
         {truth{0.08, 0.001}, truth{-0.03, 0.0005}, truth{0.0, 0.0}, truth{0.02, 0.0002}}) {
        CAPTURE(t.sigma);
        CAPTURE(t.kappa);
        std::mt19937_64 gen(42);
        const usl_fit f = fit_usl(synthetic(t.sigma, t.kappa, 0.03, 5, gen));
        REQUIRE(f.status == usl_fit_status::fitted);
        CHECK(f.dof == thread_counts.size() * 5 - 2);
        CHECK(f.sigma_se > 0);
        CHECK(f.kappa_se > 0);
        CHECK(within(t.sigma, f.sigma_lo, f.sigma_hi));
        CHECK(within(t.kappa, f.kappa_lo, f.kappa_hi));
        CHECK(f.r2 > 0.9);
        auto [lo, hi] = f.band(32);
        CHECK(lo < f.speedup(32));
        CHECK(f.speedup(32) < hi);
        CHECK(within(usl_speedup(32, t.sigma, t.kappa), lo, hi));
        if (t.sigma < 0) {
            REQUIRE(f.p_cross.has_value());
            CHECK(*f.p_cross == doctest::Approx(60.0).epsilon(0.5));
        }
    }
}

TEST_CASE("the 95 % intervals cover the truth about 95 % of the time") {
    // 400 independent data sets of sigma = -0.02, kappa = 0.0004 (superlinear at first),
    // p = 1..16, three repetitions each. A nominal 95 % interval that is right covers 380 of 400
    // (binomial sd 4.4); too narrow intervals (the covariance not scaled by the residual
    // variance, weights that do not match the noise) cover far
    // fewer, too wide ones nearly all. Relative weights go with relative noise (measured
    // throughput), no weights with noise of one size.
    struct noise_case {
        noise_kind kind;
        double noise;
        tlptm_scale::usl_weighting weighting;
    };
    for (noise_case nc :
         {noise_case{noise_kind::relative, 0.03, tlptm_scale::usl_weighting::relative},
          noise_case{noise_kind::absolute, 0.1, tlptm_scale::usl_weighting::none}}) {
        CAPTURE(nc.noise);
        std::mt19937_64 gen(7);
        std::vector<double> ps;
        for (int p = 1; p <= 16; ++p)
            ps.push_back(p);
        const double sigma = -0.02, kappa = 0.0004;
        tlptm_scale::usl_fit_options opt;
        opt.weighting = nc.weighting;
        int trials = 400, sigma_in = 0, kappa_in = 0, band_in = 0;
        for (int i = 0; i < trials; ++i) {
            const usl_fit f = fit_usl(synthetic(sigma, kappa, nc.noise, 3, gen, ps, nc.kind), opt);
            REQUIRE(f.has_curve());
            sigma_in += within(sigma, f.sigma_lo, f.sigma_hi);
            kappa_in += within(kappa, f.kappa_lo, f.kappa_hi);
            auto [lo, hi] = f.band(12);
            band_in += within(usl_speedup(12, sigma, kappa), lo, hi);
        }
        CHECK(sigma_in >= 360);
        CHECK(sigma_in <= 396);
        CHECK(kappa_in >= 360);
        CHECK(kappa_in <= 396);
        CHECK(band_in >= 360);
        CHECK(band_in <= 396);
        MESSAGE("coverage of 400: sigma " << sigma_in << ", kappa " << kappa_in << ", band at p=12 "
                                          << band_in);
    }
}

TEST_CASE("too few thread counts are reported, not fitted with confidence") {
    std::mt19937_64 gen(3);
    SUBCASE("p = 1 and 2 only (a 2-core machine): contention-only, no curve") {
        const auto pts = synthetic(0.1, 0.0, 0.01, 5, gen, {1, 2});
        const usl_fit f = fit_usl(pts);
        CHECK(f.status == usl_fit_status::contention_only);
        CHECK_FALSE(f.has_curve());
        CHECK(f.levels == 1);
        CHECK(f.kappa == 0);
        CHECK_FALSE(f.p_peak.has_value());
        // sigma from S(2) = 2 / (1 + sigma), within its interval.
        CHECK(within(0.1, f.sigma_lo, f.sigma_hi));
        REQUIRE_FALSE(f.warnings.empty());
        CHECK(f.warnings.front().find("cannot be told apart") != std::string::npos);
        CHECK_FALSE(tlptm_scale::fit_usl_linearised(pts).ok);
    }
    SUBCASE("p = 1 only: nothing to fit") {
        const usl_fit f = fit_usl(synthetic(0.1, 0.0, 0.01, 5, gen, {1}));
        CHECK(f.status == usl_fit_status::no_fit);
        CHECK_FALSE(f.has_curve());
        CHECK_FALSE(f.warnings.empty());
    }
    SUBCASE("p = 1, 2, 3, 4: fitted, but marked indicative") {
        const usl_fit f = fit_usl(synthetic(0.05, 0.01, 0.01, 5, gen, {1, 2, 3, 4}));
        CHECK(f.status == usl_fit_status::indicative);
        CHECK(f.has_curve());
        CHECK(f.levels == 3);
        CHECK_FALSE(f.warnings.empty());
    }
    SUBCASE("bad points are refused") {
        CHECK_THROWS_AS(fit_usl(std::vector<usl_point>{{0.5, 1.0}, {2, 1.5}}),
                        std::invalid_argument);
        CHECK_THROWS_AS(fit_usl(std::vector<usl_point>{{1, 1.0}, {2, -1.0}}),
                        std::invalid_argument);
        CHECK_THROWS_AS(fit_usl(std::vector<usl_point>{{1, 1.0}, {2, std::nan("")}}),
                        std::invalid_argument);
    }
}

TEST_CASE("summary of repetitions: mean, sd, standard error and Student-t interval") {
    const std::vector<double> v = {1, 2, 3, 4, 5};
    const tlptm_scale::sample_summary s = tlptm_scale::summarise(v);
    CHECK(s.n == 5);
    CHECK(s.mean == doctest::Approx(3.0));
    CHECK(s.sd == doctest::Approx(std::sqrt(2.5)));
    CHECK(s.se == doctest::Approx(std::sqrt(2.5) / std::sqrt(5.0)));
    // t(0.975, 4) = 2.7764451...
    CHECK(tlptm_scale::student_t_975(4) == doctest::Approx(2.7764451).epsilon(1e-6));
    CHECK(s.ci_hi - s.mean == doctest::Approx(2.7764451 * s.se).epsilon(1e-6));
    CHECK(s.mean - s.ci_lo == doctest::Approx(2.7764451 * s.se).epsilon(1e-6));
    const tlptm_scale::sample_summary one = tlptm_scale::summarise(std::vector<double>{7});
    CHECK(one.mean == 7);
    CHECK(one.sd == 0);
    CHECK(one.ci_lo == 7);
    CHECK(one.ci_hi == 7);
}
