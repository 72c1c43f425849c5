// lsh-hybrid's step after the ranker, for the runtime (docs/HYBRID.md, steps 2-3): from one
// head's scores, the exact head, the tail's inclusion probabilities and the seeded draw
// (HybridSampler), then one softmax over the attended rows with the tail's weights 1/pi
// (hybrid_attend). Each is a few passes over the head's indexed tokens on the best Highway target.
//
// HybridSampler computes what pig::ref::hybrid_estimate computes before it attends, in f64, and
// differs from it only where that is cheaper and provably harmless:
//   - the head (the `head` best by score descending, position ascending) comes from blocks of
//     f64 lanes: their maxima, a selection of the head-th largest one (beta), then a partition of
//     the tokens scoring >= beta. The same set, since the order is total;
//   - exp(s_i - max) is hwy/contrib/math's Exp (within 2 ulp of std::exp) and sums run in vector
//     lanes, so an inclusion probability differs from the reference's in its last bits (tested
//     to max(1e-13, n 2^-53) relative: a sum of n terms in another order), and a draw U_i < pi_i
//     could differ only for a U_i that close to pi_i;
//   - the water-filling's capping passes run only when something caps (lambda max r >= 1).
// The uniforms U_i are the reference's integers (bit for bit on every target) and the unscored
// tokens' skip draw is ref::hybrid_skip_draw itself: the same seeds draw the same tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "pig/runtime/lsh_kernels.h" // DType

namespace pig::runtime::lsh {

/// e[i] = exp(s[i] - m) for i in [0, n), on the best Highway target; returns their sum (in vector
/// lanes: within n ulp of the reference's sum in index order). s[i] <= m, no NaN.
double hybrid_exp_shifted(const double *s, std::size_t n, double m, double *e);

/// u[i] = ref::hybrid_uniform(seed, begin + i) for i in [0, n), on the best Highway target (the
/// same integers, so the same doubles).
void hybrid_uniforms(std::uint64_t seed, std::size_t begin, std::size_t n, double *u);

/// One softmax over `count` rows of one kv-head's cache (bf16, f32 or q8 rows, row i at
/// i * row_bytes(d)): logit_c = scale q.k_{ids[c]} - bias[c], out = sum softmax(logit)_c
/// v_{ids[c]} (pig::ref's attention_over with biases, as budget attention's lsh-hybrid attends:
/// bias log pi is weight 1 / pi). Dot products and values in f64 lanes on the best Highway
/// target: every product of two floats is exact in double, so the result differs from the
/// reference's f64 sums in their order only (q8 rows are dequantised first, exactly). Returns the
/// lse (-inf for no finite logit; NaN, with a NaN output, for a NaN one). `logits`, when given,
/// receives each logit_c (count entries). Rows in pages (`paged`, a KvCache's) are gathered
/// first, bit for bit.
double hybrid_attend(const float *q, const void *K, const void *V, DType dtype, std::size_t d,
                     double scale, const std::uint32_t *ids, const double *bias, std::size_t count,
                     float *out, double *logits = nullptr, const PagedRows &paged = {});

class HybridSampler {
public:
  /// Steps 1-2 for one head: `score` holds the n indexed tokens' estimated logits (-inf:
  /// unscored; NaN is not allowed: the caller maps it to -inf, as the runtime's ranker does). The
  /// sampler takes them (a swap: `score` comes back holding an unspecified buffer, for reuse).
  /// Keeps the `head` best (score descending, position ascending); the rest is the tail, its
  /// scored tokens drawn by the uniforms U_i = ref::hybrid_uniform(seed, indexed_begin + i),
  /// its unscored ones by ref::hybrid_skip_draw(seed, n, pi_0). cut > 0: the tail's tokens
  /// scoring below its best - cut become unscored (ref::HybridConfig::cut).
  void Rank(std::vector<double> &score, std::size_t head, std::uint64_t seed,
            std::size_t indexed_begin, double cut = 0);

  /// Rank over a subset of the n indexed tokens: score[k] is the score of token pos[k] (pos
  /// ascending, index-relative), every other token counts as unscored. The same head, tail,
  /// inclusion probabilities and draw as Rank over all n scores with -inf outside the subset,
  /// provided the subset holds more than `head` scored tokens (so that the head and the tail's
  /// best are in it) and every tail token within `cut` of the tail's best: lsh-hybrid's sparse
  /// path lists only those (budget_attention.cpp). Throws std::invalid_argument otherwise.
  void RankSubset(std::vector<double> &score, std::span<const std::uint32_t> pos, std::size_t n,
                  std::size_t head, std::uint64_t seed, std::size_t indexed_begin, double cut);

  /// Step 3: the tail drawn at expected size T with the uniform `floor`
  /// (ref::inclusion_probabilities then the draw of ref::hybrid_estimate). Replaces the last
  /// draw; Rank must have run.
  void Draw(double T, double floor);

  std::span<const std::uint32_t> head() const { return head_; } ///< index-relative, ascending
  std::span<const std::uint32_t> tail() const { return tail_; } ///< index-relative, ascending
  std::span<const double> pi() const { return pi_drawn_; }      ///< per tail token
  std::size_t scored() const { return scored_; }   ///< indexed tokens with a finite score
  std::size_t cut_off() const { return cut_off_; } ///< scored tail tokens the cut left unscored
  /// The tail's best score before the cut (-inf: nothing scored in the tail).
  double tail_best() const { return tail_max_; }

private:
  void RankListed(std::size_t head, double cut);

  std::uint64_t seed_ = 0;
  // n_: the listed tokens (all indexed ones, or RankSubset's); total_: the indexed tokens.
  std::size_t n_ = 0, total_ = 0, begin_ = 0, scored_ = 0, n_unscored_ = 0, cut_off_ = 0;
  std::vector<std::uint32_t> pos_;    // RankSubset: the listed tokens' positions (empty: 0..n-1)
  double tail_max_ = 0;               // the largest score outside the head (-inf: none scored)
  std::vector<std::uint32_t> head_k_; // the head, as indices of the listed tokens
  std::vector<std::uint32_t> head_, tail_; // positions (index-relative)
  std::vector<double> pi_drawn_;
  std::vector<std::pair<double, std::uint32_t>> heap_; // the head's candidates
  std::vector<double> block_max_;                      // per block of f64 lanes: its largest score
  std::vector<double> top_blocks_;                     // block maxima, for the selection of beta
  // Per indexed token: the score with the head's set to -inf; the tail's proposal r (0 for the
  // head) and, when the water-filling caps, its uncapped part.
  std::vector<double> ts_, r_, rr_;
  std::vector<std::uint32_t> drawn_ids_; // the scored tail's draw, before the merge
  std::vector<double> drawn_pi_;
};

} // namespace pig::runtime::lsh
