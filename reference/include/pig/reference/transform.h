// Hashing in a space fitted to the keys (docs/HASHING.md).
//
// SimHash's collision probability (lsh.h) holds for ANY pair of vectors: if the keys are hashed
// as k' = Tk(k - mu) and the query as q' = Tq(q), token i is sampled with probability
// u(cos(q', k'_i)), exactly, whatever the maps are. So pig may fit the maps per (layer, kv-head)
// to the keys it indexes and keep an exact importance-sampling estimator: only the proposal
// changes, never the weights' correctness. Three families, each cheap to apply:
//
//  - pca:r=R      k' = U_R^T (k - mu), q' = U_R^T q with U_R the top R principal directions of
//                 the centred keys. Drops the directions the keys do not vary in: the query's
//                 component there adds the same amount to every logit (softmax ignores it) but
//                 inflates |q| and pulls every cosine towards 0.
//  - whiten:a=A   k' = C^-A (k - mu), q' = C^+A q with C the covariance of the centred keys
//                 (normalised to largest eigenvalue 1). q' . k' = q . (k - mu): logits keep their
//                 order, but the keys' variance is spread over all directions (A = 1/2: whitened).
//  - mips:q=Q     the asymmetric norm augmentation of maximum-inner-product search, Simple-LSH
//                 (B. Neyshabur, N. Srebro, "On Symmetric and Asymmetric LSHs for Inner Product
//                 Search", ICML 2015): k' = [x, sqrt(M^2 - |x|^2)], q' = [q, 0], x = k - mu
//                 (or the linear map's output) and M the Q-quantile of |x| over the fitted keys.
//                 Then cos(q', k') = q . x / (|q| max(M, |x|)): for every key with |x| <= M the
//                 collision probability is monotone in the inner product (which softmax ranks by)
//                 instead of in the angle. Keys with |x| > M (beyond the quantile, or indexed
//                 after the fit) get no extra coordinate and are hashed by angle; u is still
//                 computed from the vectors actually hashed, so the estimator stays exact.
//                 Q = 1 is Simple-LSH; Q -> 0 tends to plain SimHash.
//
// A linear map and the augmentation compose: "whiten:a=0.25+mips:q=0.9". "plain" is the identity
// (plain MagicPIG, the paper's algorithm and the baseline).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pig/reference/matrix.h"
#include "pig/spec/transform_spec.h"

namespace pig::ref {

/// The spelling of a transform: pig::spec's (pig/spec/transform_spec.h).
using spec::TransformSpec;

/// The maps of one (layer, kv-head), fitted by fit_transform. A linear map is stored as a d x m
/// matrix applied on the right (x' = x^T A), which is also how it folds into SimHash:
/// sign(x'^T W) = sign(x^T (A W)).
///
/// How pig hashes with it (build_index, sample_tokens; the runtime does the same, bit for bit):
/// keys as encode(key(k - mu), W), queries as encode(query(q), W), u from the cosine of the two.
/// k' costs d * m multiply-adds per key, which the runtime pays anyway for |k'|; W stays the one
/// matrix every head shares (a W folded per head, A W, would cost d * K * L * 4 bytes per head
/// and, read for every new key, 0.85x plain's decode speed at 32k).
struct HashTransform {
  TransformSpec spec;
  std::size_t d = 0;     ///< input dimension
  std::size_t dim = 0;   ///< hashed dimension (spec.hashed_dim(d))
  OwnedMatrix key_map;   ///< d x m; empty: identity
  OwnedMatrix query_map; ///< d x m; empty: identity
  double M = 0;          ///< augmentation norm; 0: no augmentation

  /// k' for a CENTRED key (dim floats). Products in double, each coordinate rounded once.
  std::vector<float> key(std::span<const float> centered) const;
  /// q' (dim floats).
  std::vector<float> query(std::span<const float> q) const;
};

/// Keys a fit reads at most: every ceil(n / kFitRows)-th centred key when there are more (the
/// covariance of 4096 keys of a 64-dim head is accurate to a few percent per eigenvalue, and the
/// runtime fits every (layer, kv-head) at the first decode step, where the fit's d^2 / 2 work
/// per key would otherwise grow with the context).
inline constexpr std::size_t kFitRows = 4096;
/// The stride a fit of n keys reads them at: every fit_stride(n)-th, from the first.
inline std::size_t fit_stride(std::size_t n) {
  return n > kFitRows ? (n + kFitRows - 1) / kFitRows : 1;
}

/// Fits `spec` to the centred keys (rows of X, d columns; at most kFitRows of them, evenly
/// strided). The covariance C = X^T X / n is accumulated in double. Degenerate keys: eigenvalues
/// below 1e-6 of the largest are raised to it before whitening; if every key is zero (C = 0) the
/// linear map is the identity (pca keeps the first R coordinates) and M = 0. Throws on an invalid
/// spec or an empty X.
HashTransform fit_transform(Matrix centered_keys, const TransformSpec &spec);

/// Eigen-decomposition of a symmetric matrix (cyclic Jacobi, in double): eigenvalues descending,
/// vectors[i] the unit eigenvector of values[i]. For the d <= 256 covariances of attention heads.
struct SymmetricEigen {
  std::vector<double> values;
  std::vector<std::vector<double>> vectors;
};
/// `a` is n x n row-major and must be symmetric (throws otherwise, or on NaN).
SymmetricEigen symmetric_eigen(const std::vector<double> &a, std::size_t n);

} // namespace pig::ref
