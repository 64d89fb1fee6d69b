/**
 * @file kernel_test_utils.h
 * @brief Shared helpers for the CPU kernel tests: seeded inputs, poisoning, comparisons that
 *        report max abs/rel error and the first mismatches, central finite differences, and a
 *        scoped OpenMP thread count.
 *
 * Finite differences: numeric_gradient() perturbs each element of a double vector by +-step
 * and differentiates a scalar objective, usually weighted_sum(out, R) = sum(out * R) for a
 * fixed random R, so the analytic gradient to compare with is the op's backward fed dout = R.
 * A comparison passes element i when |actual - expected| <= max(atol, rtol * |expected|).
 */
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "base/rng.h"

namespace gpt2::test {

/// n draws of scale * N(0, 1) from a generator seeded with seed.
template <typename Real>
std::vector<Real> random_normal(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<Real> v(n);
  for (auto& x : v) x = static_cast<Real>(scale * rng.normal());
  return v;
}

/// n draws uniform in [lo, hi).
template <typename Real>
std::vector<Real> random_uniform(size_t n, uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  std::vector<Real> v(n);
  for (auto& x : v) x = static_cast<Real>(lo + (hi - lo) * rng.uniform());
  return v;
}

/// n token ids in [0, V).
inline std::vector<int> random_tokens(size_t n, uint64_t seed, int V) {
  Rng rng(seed);
  std::vector<int> v(n);
  for (auto& x : v) x = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(V)));
  return v;
}

/// A buffer filled with NaN: an output that is "overwritten" must not keep any of it.
template <typename Real>
std::vector<Real> poisoned(size_t n) {
  return std::vector<Real>(n, std::numeric_limits<Real>::quiet_NaN());
}

template <typename To, typename From>
std::vector<To> convert(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

/// sum_i out[i] * weights[i] in double: the scalar objective of the gradient checks.
template <typename Real>
double weighted_sum(const std::vector<Real>& out, const std::vector<Real>& weights) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * weights[i];
  return sum;
}

/// Central differences d objective / d x[i] = (f(x + step e_i) - f(x - step e_i)) / (2 step).
/// objective() must read x (which is restored after each element).
inline std::vector<double> numeric_gradient(std::vector<double>& x,
                                            const std::function<double()>& objective,
                                            double step = 1e-6) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + step;
    const double plus = objective();
    x[i] = saved - step;
    const double minus = objective();
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * step);
  }
  return grad;
}

/// Elementwise comparison; on failure the message names `what`, the max abs and rel errors,
/// the number of mismatches and the first few of them.
template <typename A, typename E>
::testing::AssertionResult all_close(const std::vector<A>& actual, const std::vector<E>& expected,
                                     double rtol, double atol, const std::string& what) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " != expected size " << expected.size();
  double max_abs = 0.0, max_rel = 0.0;
  size_t mismatches = 0;
  std::ostringstream first;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = static_cast<double>(actual[i]);
    const double e = static_cast<double>(expected[i]);
    const double abs_err = std::fabs(a - e);
    const double rel_err = abs_err / std::max(std::fabs(e), std::numeric_limits<double>::min());
    const bool ok = abs_err <= std::max(atol, rtol * std::fabs(e));  // false for NaN
    if (std::isfinite(abs_err)) {
      max_abs = std::max(max_abs, abs_err);
      max_rel = std::max(max_rel, std::min(rel_err, 1e300));
    }
    if (!ok) {
      if (mismatches < 8)
        first << "\n  [" << i << "] actual " << a << " expected " << e << " abs " << abs_err;
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << mismatches << " of " << actual.size()
         << " elements off (rtol " << rtol << ", atol " << atol << "); max abs err " << max_abs
         << ", max rel err " << max_rel << "; first:" << first.str();
}

/// Bitwise equality (NaNs included), reporting the first differing elements.
template <typename Real>
::testing::AssertionResult bit_identical(const std::vector<Real>& a, const std::vector<Real>& b,
                                         const std::string& what) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  size_t differing = 0;
  std::ostringstream first;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(Real)) != 0) {
      if (differing < 8) first << "\n  [" << i << "] " << a[i] << " vs " << b[i];
      ++differing;
    }
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << differing << " of " << a.size() << " elements differ; first:"
         << first.str();
}

/// Elementwise a - b (for checking accumulated gradients against their starting values).
template <typename Real>
std::vector<double> difference(const std::vector<Real>& a, const std::vector<Real>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = static_cast<double>(a[i]) - b[i];
  return d;
}

/// Sets the OpenMP thread count for the scope, restoring the previous one.
class ScopedThreadCount {
 public:
  explicit ScopedThreadCount(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedThreadCount() { omp_set_num_threads(saved_); }
  ScopedThreadCount(const ScopedThreadCount&) = delete;
  ScopedThreadCount& operator=(const ScopedThreadCount&) = delete;

 private:
  int saved_;
};

/// Thread counts the determinism tests compare: 1 and 3 (more threads than this machine's
/// 2 cores, and not a divisor of the usual sizes).
constexpr int kThreadCountsToCompare[] = {1, 3};

}  // namespace gpt2::test
