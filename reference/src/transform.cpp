#include "pig/reference/transform.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pig::ref {

namespace {

bool finite_row(std::span<const float> x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

// x^T A (A: d x m), products in double, each coordinate rounded once.
std::vector<float> apply(std::span<const float> x, const OwnedMatrix &A) {
  if (A.rows == 0)
    return {x.begin(), x.end()};
  std::vector<double> acc(A.cols, 0.0);
  for (std::size_t r = 0; r < A.rows; ++r) {
    const double xr = x[r];
    const float *a = A.row(r);
    for (std::size_t c = 0; c < A.cols; ++c)
      acc[c] += xr * double(a[c]);
  }
  return {acc.begin(), acc.end()};
}

double squared_norm(std::span<const float> x) {
  double s = 0;
  for (float v : x)
    s += double(v) * double(v);
  return s;
}

} // namespace

std::vector<float> HashTransform::key(std::span<const float> centered) const {
  if (centered.size() != d)
    throw std::invalid_argument("HashTransform::key: " + std::to_string(centered.size()) +
                                " values, fitted for " + std::to_string(d));
  std::vector<float> x = apply(centered, key_map);
  if (spec.mips > 0)
    x.push_back(float(std::sqrt(std::max(0.0, M * M - squared_norm(x)))));
  return x;
}

std::vector<float> HashTransform::query(std::span<const float> q) const {
  if (q.size() != d)
    throw std::invalid_argument("HashTransform::query: " + std::to_string(q.size()) +
                                " values, fitted for " + std::to_string(d));
  std::vector<float> x = apply(q, query_map);
  if (spec.mips > 0)
    x.push_back(0.0f);
  return x;
}

HashTransform fit_transform(Matrix X, const TransformSpec &spec) {
  const std::size_t d = X.cols;
  spec.validate(d);
  if (X.rows == 0)
    throw std::invalid_argument("fit_transform: no keys to fit");
  HashTransform T;
  T.spec = spec;
  T.d = d;
  T.dim = spec.hashed_dim(d);
  // Rows with NaN or inf are left out of the fit (they hash to all-zero bits and carry a NaN or
  // infinite logit anyway); if nothing is left the fit is the degenerate one.
  std::vector<std::size_t> rows;
  for (std::size_t i = 0, stride = fit_stride(X.rows); i < X.rows; i += stride)
    if (finite_row(X.row_span(i)))
      rows.push_back(i);
  if (spec.linear != TransformSpec::Linear::none) {
    std::vector<double> C(d * d, 0.0);
    for (std::size_t i : rows) {
      const float *x = X.row(i);
      for (std::size_t a = 0; a < d; ++a)
        for (std::size_t b = a; b < d; ++b)
          C[a * d + b] += double(x[a]) * double(x[b]);
    }
    for (std::size_t a = 0; a < d; ++a)
      for (std::size_t b = a; b < d; ++b)
        C[b * d + a] = C[a * d + b] /= double(std::max<std::size_t>(rows.size(), 1));
    const SymmetricEigen e = symmetric_eigen(C, d);
    const double lmax = e.values[0];
    const std::size_t m = spec.linear == TransformSpec::Linear::pca ? spec.rank : d;
    T.key_map = OwnedMatrix(d, m);
    T.query_map = OwnedMatrix(d, m);
    if (!(lmax > 0) || !std::isfinite(lmax)) {
      for (std::size_t c = 0; c < m; ++c) // degenerate keys: identity (first m coordinates)
        T.key_map.at(c, c) = T.query_map.at(c, c) = 1.0f;
    } else if (spec.linear == TransformSpec::Linear::pca) {
      for (std::size_t j = 0; j < d; ++j)
        for (std::size_t c = 0; c < m; ++c)
          T.key_map.at(j, c) = T.query_map.at(j, c) = float(e.vectors[c][j]);
    } else {
      // C^-a = sum_i l_i^-a v_i v_i^T with l_i normalised by the largest (the scale cancels in
      // q'.k' and SimHash ignores it) and floored at 1e-6.
      std::vector<double> kmap(d * d, 0.0), qmap(d * d, 0.0);
      for (std::size_t i = 0; i < d; ++i) {
        const double l = std::max(e.values[i] / lmax, 1e-6);
        const double lk = std::pow(l, -spec.alpha), lq = std::pow(l, spec.alpha);
        const std::vector<double> &v = e.vectors[i];
        for (std::size_t a = 0; a < d; ++a)
          for (std::size_t b = 0; b < d; ++b) {
            kmap[a * d + b] += lk * v[a] * v[b];
            qmap[a * d + b] += lq * v[a] * v[b];
          }
      }
      for (std::size_t j = 0; j < d * d; ++j) {
        T.key_map.data[j] = float(kmap[j]);
        T.query_map.data[j] = float(qmap[j]);
      }
    }
  }
  if (spec.mips > 0 && !rows.empty()) {
    std::vector<double> norms;
    norms.reserve(rows.size());
    for (std::size_t i : rows)
      norms.push_back(std::sqrt(squared_norm(apply(X.row_span(i), T.key_map))));
    // Nearest rank: the smallest norm with at least a fraction q of the keys at or below it.
    const std::size_t rank =
        std::min(norms.size() - 1,
                 std::size_t(std::max(0.0, std::ceil(spec.mips * double(norms.size())) - 1.0)));
    std::nth_element(norms.begin(), norms.begin() + std::ptrdiff_t(rank), norms.end());
    T.M = norms[rank];
  }
  return T;
}

SymmetricEigen symmetric_eigen(const std::vector<double> &a_in, std::size_t n) {
  if (n == 0 || a_in.size() != n * n)
    throw std::invalid_argument("symmetric_eigen: " + std::to_string(a_in.size()) +
                                " entries for n = " + std::to_string(n));
  double scale = 0;
  for (double x : a_in) {
    if (!std::isfinite(x))
      throw std::invalid_argument("symmetric_eigen: the matrix has NaN or inf");
    scale = std::max(scale, std::fabs(x));
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (std::fabs(a_in[i * n + j] - a_in[j * n + i]) > 1e-12 * scale)
        throw std::invalid_argument("symmetric_eigen: the matrix is not symmetric");
  std::vector<double> A = a_in, V(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    V[i * n + i] = 1.0;
  // Cyclic Jacobi: rotate away each off-diagonal entry in turn until the off-diagonal mass is
  // negligible; quadratic convergence, ~6-10 sweeps for n = 64.
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (std::size_t i = 0; i < n; ++i) {
      diag += A[i * n + i] * A[i * n + i];
      for (std::size_t j = i + 1; j < n; ++j)
        off += A[i * n + j] * A[i * n + j];
    }
    if (off <= 1e-30 * diag || off == 0)
      break;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        const double apq = A[p * n + q];
        if (apq == 0)
          continue;
        const double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::hypot(theta, 1.0));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (std::size_t k = 0; k < n; ++k) { // columns p and q
          const double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < n; ++k) { // rows p and q
          const double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
        for (std::size_t k = 0; k < n; ++k) {
          const double vkp = V[k * n + p], vkq = V[k * n + q];
          V[k * n + p] = c * vkp - s * vkq;
          V[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return A[a * n + a] > A[b * n + b]; });
  SymmetricEigen e;
  for (std::size_t i : order) {
    e.values.push_back(A[i * n + i]);
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k)
      v[k] = V[k * n + i];
    e.vectors.push_back(std::move(v));
  }
  return e;
}

} // namespace pig::ref
