// SimHash locality-sensitive hashing as MagicPIG uses it (ALGORITHM.md section 1, steps 1-4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "pig/reference/matrix.h"
#include "pig/spec/lsh_params.h"

namespace pig::ref {

/// The largest K and L (and why): pig::spec's (pig/spec/lsh_params.h).
using spec::kMaxK;
using spec::kMaxL;
using spec::kMaxR;

/// (K, L, t, r) (the spec::LshParams base) and W's seed. {K, L, t, seed} and {K, L, t, seed, r}
/// initialise (constructors, not aggregate order: r follows t in LshParams, and brace elision
/// would read a seed given fourth as r).
struct LshConfig : spec::LshParams {
  std::uint64_t seed = 0; ///< seed of W (see simhash_matrix)

  LshConfig() = default;
  LshConfig(int K_, int L_, int t_ = 2, std::uint64_t seed_ = 0, int r_ = 0) : seed(seed_) {
    K = K_;
    L = L_;
    t = t_;
    r = r_;
  }
  LshConfig(const spec::LshParams &p, std::uint64_t seed_) : spec::LshParams(p), seed(seed_) {}

  /// Throws std::invalid_argument naming the parameter, its range and the value given (hides
  /// LshParams::validate, which returns spec's message instead).
  void validate() const;
  std::size_t columns() const { return std::size_t(K) * std::size_t(L); }
};

/// The mean of rows [begin, end) of X (accumulated in double, rounded to float once).
/// Throws if the range is empty or out of bounds.
std::vector<float> mean_of_rows(Matrix X, std::size_t begin, std::size_t end);
/// The keys a centring mean averages (StaticConfig::mean_window), from the first indexed one:
/// the `indexed` keys when mean_window is 0, else the first mean_window keys after the sink, of
/// the `after_sink` there are (a window may reach into the local window: it is a range of
/// positions, the same for every sequence that holds them).
std::size_t mean_count(std::size_t indexed, std::size_t after_sink, std::size_t mean_window);

struct Centered {
  std::vector<float> mean; ///< the mean of the rows it was taken over
  OwnedMatrix keys;        ///< every row of the input minus `mean`
};

/// Centering (ALGORITHM.md 1.1): subtract the mean of rows [begin, end) from every row. Keys and
/// queries sit in opposite cones; after centering, keys spread around the origin and the query
/// collides with the ones it actually aligns with.
Centered center(Matrix K, std::size_t begin, std::size_t end);
Centered center(Matrix K);

/// The L codes of x: bit j of code l is `x . W[:, l*K + j] > 0` (dot product in double). W must
/// have x.size() rows and at least K*L columns; only the first K*L are used, which is exact
/// because smaller configurations are column prefixes of simhash_matrix (see random.h).
/// A zero vector (and any NaN) hashes to all-zero bits, since the comparison is false.
std::vector<std::uint16_t> encode(std::span<const float> x, Matrix W, const LshConfig &cfg);

/// encode() of every row of X: n*L codes, token-major (codes of token i at [i*L, (i+1)*L)).
std::vector<std::uint16_t> encode_rows(Matrix X, Matrix W, const LshConfig &cfg);

/// In how many of the L tables the two code lists agree in all but at most r bits (r = 0:
/// equal codes; r > 0: multi-probe, the query's table is probed in every bucket within Hamming
/// distance r of its code).
int count_collisions(std::span<const std::uint16_t> a, std::span<const std::uint16_t> b, int r = 0);

/// Tokens i in [begin, end) whose codes collide with the query's (within cfg.r bits) in at
/// least cfg.t tables, ascending. key_codes are token-major as returned by encode_rows (row i =
/// token i).
std::vector<std::size_t> sample_set(std::span<const std::uint16_t> query_codes,
                                    std::span<const std::uint16_t> key_codes, const LshConfig &cfg,
                                    std::size_t begin, std::size_t end);

/// cos of the angle between a and b in double. A zero-norm vector has no direction; it is
/// defined to have cosine 0 (angle pi/2, the uninformative choice: collision p = 1/2). The result
/// is NOT clamped here (rounding can push it just past +-1); collision_probability clamps.
double cosine(std::span<const float> a, std::span<const float> b);

/// Probability that two vectors at cosine `cos_theta` collide in one table: their codes differ
/// in at most r of K bits, q_r = sum_{i <= r} C(K, i) p^(K-i) (1-p)^i with
/// p = 1 - acos(clamp(cos, -1, 1)) / pi (r = 0: p^K). NaN in, NaN out; never NaN otherwise.
double table_collision_probability(double cos_theta, int K, int r = 0);

/// u = P[Binomial(L, P) >= t] with P the per-table probability (table_collision_probability at
/// probe radius r): the probability that a token at this cosine is sampled (t = 1: 1 - (1-P)^L;
/// t = 2: 1 - (1-P)^L - L P (1-P)^(L-1)).
/// Computed in log space from whichever side of the threshold is smaller, each a sum of positive
/// binomial terms: no cancellation when u is tiny (the regime that matters, u ~ C(L,t) P^t,
/// where the formulas above lose every digit) nor when u is close to 1. Validates K, L, t like
/// LshConfig.
double collision_probability(double cos_theta, int K, int L, int t, int r = 0);

/// log u, accurate even where u itself underflows a double. -inf when P == 0 (cos = -1).
double log_collision_probability(double cos_theta, int K, int L, int t, int r = 0);

} // namespace pig::ref
