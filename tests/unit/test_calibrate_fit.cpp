// The calibration's link fit: two timings of t = latency + bytes / bandwidth give back the latency
// and bandwidth they were made from; a latency the timings put below zero is clamped.
#include <doctest/doctest.h>

#include "plan/calibrate.h"

TEST_CASE("calibrate: the link fit recovers the latency and bandwidth two exact timings were made from") {
  for (const auto& [latency, bandwidth] : {std::pair{50e-6, 2e9}, std::pair{1e-3, 1.5e8}, std::pair{0.0, 1e10}}) {
    CAPTURE(latency);
    CAPTURE(bandwidth);
    const double small = 4096, large = 4 << 20;
    const spmd::LinkRate fit =
        spmd::fit_link(small, latency + small / bandwidth, large, latency + large / bandwidth);
    CHECK(fit.bytes_per_s == doctest::Approx(bandwidth).epsilon(1e-9));
    CHECK(fit.latency_s == doctest::Approx(latency).epsilon(1e-9).scale(1e-6));
  }
}

TEST_CASE("calibrate: a fit whose latency would be negative is clamped at zero, the bandwidth kept") {
  // The small transfer timed faster than the line through the large one allows.
  const spmd::LinkRate fit = spmd::fit_link(1000, 1e-7, 1e6, 1e-3);
  CHECK(fit.latency_s == 0);
  CHECK(fit.bytes_per_s == doctest::Approx((1e6 - 1000) / (1e-3 - 1e-7)));
}
