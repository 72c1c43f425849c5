// Hash transforms fitted to the keys (transform.h): the fitted maps, and the statistical facts the
// estimator rests on, in the transformed space: collision frequency = u, unbiased weights, error
// falling with L.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "pig/reference/reference.h"
#include "test_util.h"

namespace {

using namespace pig::ref;
using pig::ref::testing::expect_unbiased_over_w;
using pig::ref::testing::gaussian_matrix;
using pig::ref::testing::gaussian_vector;

double dot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * double(b[i]);
  return s;
}

double norm(std::span<const float> a) { return std::sqrt(dot(a, a)); }

// Keys like an attention head's: variance concentrated in few directions (standard deviations
// 8, 8 decay, 8 decay^2, ... along a random orthonormal basis), plus an offset (the cone keys
// sit in).
OwnedMatrix anisotropic_keys(std::uint64_t seed, std::size_t n, std::size_t d,
                             std::vector<std::vector<double>> *basis = nullptr,
                             double decay = 0.5) {
  Rng rng(seed);
  // A random orthonormal basis by Gram-Schmidt on Gaussian vectors.
  std::vector<std::vector<double>> B;
  while (B.size() < d) {
    std::vector<double> v(d);
    for (double &x : v)
      x = rng.gaussian();
    for (const auto &b : B) {
      double p = 0;
      for (std::size_t j = 0; j < d; ++j)
        p += v[j] * b[j];
      for (std::size_t j = 0; j < d; ++j)
        v[j] -= p * b[j];
    }
    double nv = 0;
    for (double x : v)
      nv += x * x;
    for (double &x : v)
      x /= std::sqrt(nv);
    B.push_back(std::move(v));
  }
  OwnedMatrix K(n, d);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < d; ++c) {
      const double z = rng.gaussian() * 8.0 * std::pow(decay, double(c));
      for (std::size_t j = 0; j < d; ++j)
        K.at(i, j) += float(z * B[c][j]);
    }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < d; ++j)
      K.at(i, j) += 3.0f;
  if (basis)
    *basis = B;
  return K;
}

TEST(SymmetricEigen, ReconstructsTheMatrixWithOrthonormalVectors) {
  const std::size_t n = 24;
  Rng rng(3);
  std::vector<double> A(n * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i; j < n; ++j)
      A[i * n + j] = A[j * n + i] = rng.gaussian();
  const SymmetricEigen e = symmetric_eigen(A, n);
  ASSERT_EQ(e.values.size(), n);
  EXPECT_TRUE(std::is_sorted(e.values.rbegin(), e.values.rend()));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double vv = 0, rec = 0;
      for (std::size_t k = 0; k < n; ++k) {
        vv += e.vectors[i][k] * e.vectors[j][k];
        rec += e.values[k] * e.vectors[k][i] * e.vectors[k][j];
      }
      EXPECT_NEAR(vv, i == j ? 1.0 : 0.0, 1e-12);
      EXPECT_NEAR(rec, A[i * n + j], 1e-11);
    }
}

TEST(SymmetricEigen, DiagonalAndInvalidInputs) {
  const SymmetricEigen e = symmetric_eigen({1, 0, 0, 0, 5, 0, 0, 0, 0}, 3);
  EXPECT_EQ(e.values, (std::vector<double>{5, 1, 0}));
  EXPECT_EQ(e.vectors[0], (std::vector<double>{0, 1, 0}));
  EXPECT_THROW(symmetric_eigen({1, 2, 3, 4}, 2), std::invalid_argument);     // not symmetric
  EXPECT_THROW(symmetric_eigen({1, NAN, NAN, 4}, 2), std::invalid_argument); // NaN
  EXPECT_THROW(symmetric_eigen({1, 2, 3}, 2), std::invalid_argument);        // wrong size
  EXPECT_THROW(symmetric_eigen({}, 0), std::invalid_argument);
}

TEST(TransformSpec, ParsesPrintsAndRejects) {
  for (const char *s : {"plain", "pca:r=16", "whiten:a=0.5", "whiten:a=0.25", "mips:q=1",
                        "mips:q=0.9", "whiten:a=0.25+mips:q=0.9", "pca:r=8+mips:q=1"})
    EXPECT_EQ(TransformSpec::parse(s).str(), s);
  EXPECT_EQ(TransformSpec::parse("whiten").alpha, 0.5);
  EXPECT_EQ(TransformSpec::parse("mips").mips, 1.0);
  EXPECT_TRUE(TransformSpec::parse("none").identity());
  EXPECT_EQ(TransformSpec::parse("pca:r=8+mips").hashed_dim(64), 9u);
  EXPECT_EQ(TransformSpec::parse("whiten").hashed_dim(64), 64u);
  for (const char *bad : {"", "pca", "pca:r=0", "pca:r=2.5", "pca:r=x", "whiten:a=0",
                          "whiten:a=1.5", "whiten:b=1", "mips:q=0", "mips:q=2", "mips+pca:r=2",
                          "pca:r=2+whiten", "rotate", "mips:q", "mips+", "pca:r=4 "}) {
    try {
      TransformSpec::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument &e) {
      EXPECT_NE(std::string(e.what()).find("accepted: plain"), std::string::npos) << e.what();
    }
  }
  TransformSpec big;
  big.linear = TransformSpec::Linear::pca;
  big.rank = 65;
  EXPECT_THROW(big.validate(64), std::invalid_argument); // r beyond the head dim
}

TEST(FitTransform, PcaKeepsTheTopDirectionsOrthonormally) {
  const std::size_t n = 4000, d = 16;
  std::vector<std::vector<double>> B;
  const Centered c = center(anisotropic_keys(5, n, d, &B));
  const HashTransform T = fit_transform(c.keys, TransformSpec::parse("pca:r=3"));
  ASSERT_EQ(T.dim, 3u);
  ASSERT_EQ(T.key_map.rows, d);
  for (std::size_t a = 0; a < 3; ++a) {
    double along = 0;
    for (std::size_t j = 0; j < d; ++j)
      along += double(T.key_map.at(j, a)) * B[a][j];
    EXPECT_GT(std::fabs(along), 0.99) << "direction " << a; // sd 8, 4, 2: well separated
    for (std::size_t b = 0; b < 3; ++b) {
      double ab = 0;
      for (std::size_t j = 0; j < d; ++j)
        ab += double(T.key_map.at(j, a)) * double(T.key_map.at(j, b));
      EXPECT_NEAR(ab, a == b ? 1.0 : 0.0, 1e-6);
    }
  }
  // Full rank: a rotation, inner products kept.
  const HashTransform R = fit_transform(c.keys, TransformSpec::parse("pca:r=16"));
  Rng rng(6);
  const std::vector<float> q = gaussian_vector(rng, d);
  for (std::size_t i = 0; i < 20; ++i)
    EXPECT_NEAR(dot(R.query(q), R.key(c.keys.row_span(i))), dot(q, c.keys.row_span(i)),
                1e-5 * norm(q) * norm(c.keys.row_span(i)));
}

TEST(FitTransform, WhiteningKeepsInnerProductsAndEqualisesVariance) {
  // Decay 0.7: a condition number of 2500, where the maps stay well conditioned in f32 (at
  // 0.5 the smallest eigenvalues hit the 1e-6 floor and a = 1 amplifies the f32 rounding).
  const std::size_t n = kFitRows, d = 12; // every key in the fit
  const Centered c = center(anisotropic_keys(7, n, d, nullptr, 0.7));
  Rng rng(8);
  const std::vector<float> q = gaussian_vector(rng, d, 3.0);
  for (double a : {0.25, 0.5, 1.0}) {
    TransformSpec spec;
    spec.linear = TransformSpec::Linear::whiten;
    spec.alpha = a;
    const HashTransform T = fit_transform(c.keys, spec);
    for (std::size_t i = 0; i < 50; ++i)
      EXPECT_NEAR(dot(T.query(q), T.key(c.keys.row_span(i))), dot(q, c.keys.row_span(i)),
                  1e-4 * norm(q) * norm(c.keys.row_span(i)))
          << "a=" << a;
    // The exponent observed: the mapped keys' covariance is C^-a C C^-a = lmax^2a C^(1-2a), so
    // along C's eigenvectors v_i its variance is lambda_i^(1-2a) relative to the largest's
    // (a = 0.25: the spread's square root; a = 0.5: all equal; a = 1: the spread inverted).
    std::vector<double> C(d * d, 0.0), M(d * d, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> k = c.keys.row_span(i);
      const std::vector<float> x = T.key(k);
      for (std::size_t r = 0; r < d; ++r)
        for (std::size_t s = 0; s < d; ++s) {
          C[r * d + s] += double(k[r]) * double(k[s]) / double(n);
          M[r * d + s] += double(x[r]) * double(x[s]) / double(n);
        }
    }
    const SymmetricEigen e = symmetric_eigen(C, d);
    auto along = [&](const std::vector<double> &v) { // v^T M v
      double s = 0;
      for (std::size_t r = 0; r < d; ++r)
        for (std::size_t t = 0; t < d; ++t)
          s += v[r] * M[r * d + t] * v[t];
      return s;
    };
    ASSERT_GT(e.values.back() / e.values.front(), 1e-4); // above the 1e-6 floor
    const double top = along(e.vectors[0]);
    for (std::size_t i = 1; i < d; ++i) {
      const double want = std::pow(e.values[i] / e.values[0], 1.0 - 2.0 * a);
      EXPECT_NEAR(along(e.vectors[i]) / top, want, 2e-3 * want) << "a=" << a << " i=" << i;
    }
    if (a == 0.5) { // whitened: every direction's variance equal (to the largest's, normalised)
      const SymmetricEigen w = symmetric_eigen(M, d);
      EXPECT_LT(w.values.front() / w.values.back(), 1.001);
    }
  }
}

TEST(FitTransform, MipsAugmentationMakesTheCosineAnInnerProduct) {
  const std::size_t n = 500, d = 8;
  const Centered c = center(anisotropic_keys(9, n, d));
  Rng rng(10);
  const std::vector<float> q = gaussian_vector(rng, d);
  std::vector<double> norms;
  for (std::size_t i = 0; i < n; ++i)
    norms.push_back(norm(c.keys.row_span(i)));
  std::sort(norms.begin(), norms.end());
  for (double quantile : {1.0, 0.5}) {
    TransformSpec spec;
    spec.mips = quantile;
    const HashTransform T = fit_transform(c.keys, spec);
    ASSERT_EQ(T.dim, d + 1);
    EXPECT_NEAR(T.M, quantile == 1.0 ? norms.back() : norms[249], 1e-5 * norms.back());
    EXPECT_EQ(T.query(q).back(), 0.0f);
    std::size_t below = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> x = c.keys.row_span(i);
      const std::vector<float> k = T.key(x);
      const double nx = norm(x);
      // |k'| = max(M, |x|); cos(q', k') = q.x / (|q| max(M, |x|)).
      EXPECT_NEAR(norm(k), std::max(T.M, nx), 1e-4 * T.M);
      EXPECT_NEAR(cosine(T.query(q), k), dot(q, x) / (norm(q) * std::max(T.M, nx)), 1e-4);
      below += nx <= T.M;
    }
    EXPECT_EQ(below, quantile == 1.0 ? n : 250u);
  }
}

TEST(FitTransform, DegenerateAndNonFiniteKeys) {
  const std::size_t d = 6;
  OwnedMatrix zeros(40, d); // all keys equal: centred keys are all zero
  for (const char *s : {"pca:r=3", "whiten", "mips", "whiten+mips"}) {
    const HashTransform T = fit_transform(zeros, TransformSpec::parse(s));
    EXPECT_EQ(T.M, 0.0) << s;
    std::vector<float> e(d, 0.0f);
    e[1] = 2.0f;
    const std::vector<float> k = T.key(e);
    EXPECT_EQ(k[1], 2.0f) << s << ": the degenerate fit is the identity";
    for (float x : T.query(e))
      EXPECT_TRUE(std::isfinite(x)) << s;
  }
  Rng rng(11);
  OwnedMatrix X = gaussian_matrix(rng, 50, d);
  const HashTransform clean = fit_transform(X, TransformSpec::parse("whiten+mips"));
  X.at(7, 2) = NAN; // a NaN row is left out of the fit: the same maps as without it...
  OwnedMatrix without(49, d);
  for (std::size_t i = 0, o = 0; i < 50; ++i)
    if (i != 7)
      std::copy(X.row(i), X.row(i) + d, without.row(o++));
  const HashTransform a = fit_transform(X, TransformSpec::parse("whiten+mips"));
  const HashTransform b = fit_transform(without, TransformSpec::parse("whiten+mips"));
  EXPECT_EQ(a.key_map.data, b.key_map.data);
  EXPECT_EQ(a.M, b.M);
  EXPECT_NE(a.M, clean.M);
  EXPECT_TRUE(std::isnan(a.key(X.row_span(7))[0])); // ...and the NaN key stays NaN
  EXPECT_THROW(fit_transform(OwnedMatrix(0, d), TransformSpec::parse("mips")),
               std::invalid_argument);
  EXPECT_THROW(fit_transform(X, TransformSpec::parse("pca:r=7")), std::invalid_argument);
}

// The eigenvalue floor: keys of rank 2 (not zero: 14 of 16 eigenvalues are 0 and raised to 1e-6
// of the largest) give finite maps, finite mapped keys and queries, and q'.k' = q.k; keys that
// are all NaN or all infinite leave nothing to fit: the identity, M = 0, finite queries.
TEST(FitTransform, EigenvalueFloorAndAllNonFiniteKeys) {
  const std::size_t n = 300, d = 16;
  Rng rng(41);
  const std::vector<float> u = gaussian_vector(rng, d), v = gaussian_vector(rng, d);
  OwnedMatrix X(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = 1e3 * rng.gaussian(), b = 1e3 * rng.gaussian();
    for (std::size_t j = 0; j < d; ++j)
      X.at(i, j) = float(a * u[j] + b * v[j]);
  }
  const std::vector<float> q = gaussian_vector(rng, d, 2.0);
  auto all_finite = [](const std::vector<float> &x) {
    return std::all_of(x.begin(), x.end(), [](float y) { return std::isfinite(y); });
  };
  for (const char *name :
       {"whiten:a=0.25", "whiten:a=0.5", "whiten:a=1", "whiten+mips:q=0.9", "pca:r=4", "mips"}) {
    const HashTransform T = fit_transform(X, TransformSpec::parse(name));
    EXPECT_TRUE(all_finite(T.key_map.data)) << name;
    EXPECT_TRUE(all_finite(T.query_map.data)) << name;
    EXPECT_TRUE(std::isfinite(T.M)) << name;
    EXPECT_TRUE(all_finite(T.query(q))) << name;
    for (std::size_t i = 0; i < 20; ++i) {
      const std::vector<float> k = T.key(X.row_span(i));
      ASSERT_TRUE(all_finite(k)) << name << " key " << i;
      // The maps are inverse (both floored alike): logits unchanged, to the f32 rounding of maps
      // whose range is 1e6^a at the floor (a = 1: ~1e-3 of |q| |k|).
      const std::string sn = name;
      if (sn.starts_with("whiten")) {
        const double tol = sn == "whiten:a=1" ? 1e-2 : 1e-4;
        EXPECT_NEAR(dot(T.query(q), k), dot(q, X.row_span(i)), tol * norm(q) * norm(X.row_span(i)))
            << name << " key " << i;
      }
    }
  }
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    OwnedMatrix B(50, d);
    std::fill(B.data.begin(), B.data.end(), bad);
    for (const char *name : {"whiten:a=0.5", "pca:r=4", "whiten+mips"}) {
      const HashTransform T = fit_transform(B, TransformSpec::parse(name));
      EXPECT_EQ(T.M, 0.0) << name;
      for (std::size_t r = 0; r < T.key_map.rows; ++r)
        for (std::size_t c = 0; c < T.key_map.cols; ++c)
          ASSERT_EQ(T.key_map.at(r, c), r == c ? 1.0f : 0.0f) << name << " " << bad;
      EXPECT_TRUE(all_finite(T.query(q))) << name << " " << bad;
    }
  }
}

// Past kFitRows keys the fit reads every ceil(n / kFitRows)-th one.
TEST(FitTransform, LongIndexesAreFittedOnEvenlyStridedKeys) {
  const std::size_t n = 2 * kFitRows + 1, d = 4; // stride 3
  Rng rng(20);
  const OwnedMatrix X = gaussian_matrix(rng, n, d);
  OwnedMatrix every3((n + 2) / 3, d);
  for (std::size_t i = 0; i < n; i += 3)
    std::copy(X.row(i), X.row(i) + d, every3.row(i / 3));
  for (const char *name : {"whiten:a=0.5+mips:q=0.5", "pca:r=2"}) {
    const HashTransform a = fit_transform(X, TransformSpec::parse(name));
    const HashTransform b = fit_transform(every3, TransformSpec::parse(name));
    EXPECT_EQ(a.key_map.data, b.key_map.data) << name;
    EXPECT_EQ(a.M, b.M) << name;
  }
}

TEST(BuildIndex, TransformNeedsWOfTheHashedDimension) {
  Rng rng(12);
  const OwnedMatrix K = gaussian_matrix(rng, 300, 8);
  const LshConfig cfg{4, 8, 2, 1};
  const TransformSpec spec = TransformSpec::parse("pca:r=4+mips");
  EXPECT_THROW(
      build_index(K, simhash_matrix(1, 8, 4, 8), cfg, {}, Centering::mean_of_indexed, spec),
      std::invalid_argument);
  const LshIndex index =
      build_index(K, simhash_matrix(1, 5, 4, 8), cfg, {}, Centering::mean_of_indexed, spec);
  EXPECT_EQ(index.hashed.cols, 5u);
  EXPECT_EQ(index.hashed.rows, index.split.indexed());
  EXPECT_EQ(index.codes, encode_rows(index.hashed, simhash_matrix(1, 5, 4, 8), cfg));
  for (std::size_t i = 0; i < index.split.indexed(); i += 17) {
    const std::vector<float> k =
        index.transform.key(index.centered_key(index.split.indexed_begin + i));
    EXPECT_TRUE(std::equal(k.begin(), k.end(), index.hashed.row(i)));
  }
  // The identity keeps plain MagicPIG exactly.
  const LshIndex plain = build_index(K, simhash_matrix(1, 8, 4, 8), cfg);
  EXPECT_EQ(plain.hashed.rows, 0u);
  EXPECT_EQ(plain.codes, encode_rows(plain.centered, simhash_matrix(1, 8, 4, 8), cfg));
}

const char *const kTransforms[] = {"pca:r=3", "whiten:a=0.5", "mips:q=1",
                                   "whiten:a=0.25+mips:q=0.9"};

// For keys and a query hashed through a fitted transform, the fraction of independent W draws
// in which the pair collides in >= t tables must be u of the TRANSFORMED vectors' cosine
// (z = 5 standard errors plus 1/N, as lsh_test's EmpiricalFrequencyMatchesFormula), and the test
// has teeth: for some pair, u of the raw cosine is far outside that band.
TEST(TransformedHashing, CollisionFrequencyIsUOfTheTransformedCosine) {
  const std::size_t n = 2000, d = 8, draws = 400;
  const Centered c = center(anisotropic_keys(13, n, d));
  Rng rng(14);
  const std::vector<float> q = gaussian_vector(rng, d, 2.0);
  std::uint64_t seed = 100;
  for (const char *name : kTransforms) {
    const HashTransform T = fit_transform(c.keys, TransformSpec::parse(name));
    const std::vector<float> qh = T.query(q);
    const LshConfig cfg{3, 6, 2, 0};
    auto u_raw = [&](std::size_t i) {
      return collision_probability(cosine(q, c.keys.row_span(i)), cfg.K, cfg.L, cfg.t);
    };
    auto u_hashed = [&](std::size_t i) {
      return collision_probability(cosine(qh, T.key(c.keys.row_span(i))), cfg.K, cfg.L, cfg.t);
    };
    // Keys 0 and 1, and the two of the first 200 whose u the transform changes most.
    std::vector<std::size_t> order(200);
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](auto a, auto b) {
      return std::fabs(u_raw(a) - u_hashed(a)) > std::fabs(u_raw(b) - u_hashed(b));
    });
    bool raw_differs = false;
    for (std::size_t i : {std::size_t(0), std::size_t(1), order[0], order[1]}) {
      const std::vector<float> kh = T.key(c.keys.row_span(i));
      int hits = 0;
      for (std::size_t r = 0; r < draws; ++r) {
        const OwnedMatrix W = simhash_matrix(seed++, T.dim, cfg.K, cfg.L);
        hits += count_collisions(encode(qh, W, cfg), encode(kh, W, cfg)) >= cfg.t;
      }
      const double f = double(hits) / draws;
      const double u = collision_probability(cosine(qh, kh), cfg.K, cfg.L, cfg.t);
      const double band = 5.0 * std::sqrt(u * (1.0 - u) / draws) + 1.0 / draws;
      EXPECT_NEAR(f, u, band) << name << " key " << i;
      raw_differs |= std::fabs(u_raw(i) - f) > 2 * band;
    }
    EXPECT_TRUE(raw_differs) << name << ": the transform did not change any collision rate";
  }
}

// ImportanceWeightsAreUnbiasedOverW (magicpig_test) through each transform: the transform is
// fitted once (it depends on the keys, not on W) and W is drawn 400 times.
TEST(TransformedHashing, ImportanceWeightsStayUnbiased) {
  const std::size_t n = 200, d = 8, draws = 400;
  OwnedMatrix K = anisotropic_keys(15, n, d);
  Rng rng(16);
  const OwnedMatrix V = gaussian_matrix(rng, n, d);
  const std::vector<float> q = gaussian_vector(rng, d, 0.3);
  const Attention exact = dense_attention(q, K, V);
  for (const char *name : kTransforms) {
    const TransformSpec spec = TransformSpec::parse(name);
    const double sampled = expect_unbiased_over_w(
        exact, draws,
        [&](std::size_t r) {
          const LshConfig cfg{3, 6, 2, 5000 + r};
          const OwnedMatrix W = simhash_matrix(cfg.seed, spec.hashed_dim(d), cfg.K, cfg.L);
          return magicpig_attention(q, K, V, W, cfg, {}, Centering::mean_of_indexed, {}, spec);
        },
        name);
    EXPECT_GT(sampled, 5.0) << name;
    EXPECT_LT(sampled, n - 68 - 5) << name;
  }
}

// More tables, smaller variance, through each transform (mean over 4 seeds, as magicpig_test's
// ErrorShrinksAsLGrows).
TEST(TransformedHashing, ErrorFallsWithL) {
  const std::size_t n = 2048, d = 16;
  const OwnedMatrix K = anisotropic_keys(17, n, d);
  Rng rng(18);
  const OwnedMatrix V = gaussian_matrix(rng, n, d);
  const std::vector<float> q = gaussian_vector(rng, d, 0.4);
  const Attention exact = dense_attention(q, K, V);
  for (const char *name : kTransforms) {
    const TransformSpec spec = TransformSpec::parse(name);
    double err10 = 0, err200 = 0;
    for (int s = 0; s < 4; ++s)
      for (int L : {10, 200}) {
        const LshConfig cfg{6, L, 2, std::uint64_t(70 + s)};
        const OwnedMatrix W = simhash_matrix(cfg.seed, spec.hashed_dim(d), cfg.K, cfg.L);
        const MagicPigResult r =
            magicpig_attention(q, K, V, W, cfg, {}, Centering::mean_of_indexed, {}, spec);
        (L == 10 ? err10 : err200) += relative_l2_error(r.attention.out, exact.out) / 4;
      }
    EXPECT_LT(err200, 0.7 * err10) << name << ": " << err200 << " vs " << err10;
  }
}

} // namespace
