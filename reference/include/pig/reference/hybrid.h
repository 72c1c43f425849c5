// LSH-hybrid attention: LSH as the ranker, an exact head, a sampled tail with known probabilities
// (docs/HYBRID.md: the method, its measurements and what is missing).
//
// MagicPIG attends to the tokens whose SimHash codes collide with the query's, weighted by 1/u_i,
// u_i the probability *over the draw of W* that token i collides. On a real model that proposal
// samples many keys that matter little and misses some that matter (docs/RESULTS.md part 1), and
// the estimate is only unbiased over hash functions, not for the W a model runs with. LSH-hybrid
// keeps MagicPIG's index and uses it only to *rank*:
//
//   1. Rank. Every indexed token gets an estimated logit l^_i = scale |q| |k~_i| cos^_i (k~ the
//      centred key; q.k and q.k~ differ by a constant that cancels in the softmax), cos^_i
//      estimated from the codes alone:
//        collisions: c_i = tables where the token's code equals the query's (what MagicPIG's
//                    retrieval counts), P^ = (c_i + 1/2) / (L + 1) per table, p^ = P^^(1/K),
//                    cos^ = cos(pi (1 - p^)) (the inverse of table_collision_probability, with
//                    the Jeffreys-like 1/2 so that c = 0 is not "opposite");
//        hamming:    H_i = bits where the token's codes differ from the query's, cos^ =
//                    cos(pi H_i / B) over B = `bits` SimHash columns (all K L by default):
//                    SimHash's unbiased angle estimate, every table's Hamming distance to the
//                    query's bucket summed (SOCKET's soft collision score taken to its limit).
//        lowrank:    no codes: l^_i = scale q'.k^'_i with k'_i = U_R^T (k_i - mu) the centred
//                    key's top R = `dims` principal components (transform.h's pca:r=R, fitted to
//                    the indexed keys), rounded to int8 with one scale per token, q' = U_R^T q.
//                    The query's part outside U_R adds a near-constant to every logit. A
//                    low-rank sketch of the keys (the observation behind Loki, Singhania et al.,
//                    2024: attention keys live in few dimensions), R + 4 bytes per token.
//      Optionally + log |v_i| (tokens with small values matter less to the output).
//      With cand = t > 0 only the candidates (codes equal to the query's in >= t tables: what
//      MagicPIG's retrieval returns) are ranked, the rest is left at -inf: a kernel reads the
//      codes of the candidates only.
//   2. Exact head: the `head` best-ranked indexed tokens, with the sink and local tokens, are
//      attended exactly (bias 0).
//   3. Sampled tail: every other indexed token i is drawn independently (Poisson sampling) with
//      inclusion probability pi_i = min(1, lambda r_i), r_i = (1 - floor) softmax(l^)_i +
//      floor / N_tail (a uniform floor: every token can be drawn), lambda set so that
//      sum_i pi_i = tail budget. Token i is drawn iff U_i < pi_i, U_i a uniform from a counter
//      hash of (seed, token): seeded, reproducible, and nested (a larger budget draws a superset).
//      Drawn tokens enter the one softmax with bias log pi_i (weight 1/pi_i, Horvitz-Thompson).
//      Tokens of score -inf (with `cand`, every token outside the candidates) share one pi_0 and
//      are drawn by a Bernoulli(pi_0) process over the indexed positions, walked by geometric
//      skips of a second seeded stream: a kernel draws them in O(pi_0 N) without visiting them.
//   4. Budget (epsilon > 0): the tail budget doubles from its start until the estimated relative
//      error of the output, z_{1-delta/2} sqrt(V^) / (D^ |o^|), is at most epsilon or the cap is
//      reached; V^ = sum_{i in S} (1 - pi_i) / pi_i^2 w_i^2 |v_i - o^|^2 is the Horvitz-Thompson
//      variance estimate of the linearised error (vAttention's central-limit rule, for Poisson
//      sampling).
//
// Unbiasedness: for a fixed W and query (so fixed ranks, head and pi), over the draw of U,
// E[1{U_i < pi_i} / pi_i] = 1 for every tail token, so exp(lse) (the partition function) and
// exp(lse) o (the numerator) are unbiased whatever the hash did; o is their ratio. With
// epsilon > 0 the stopping rule looks at the sample, and the estimate is only approximately so.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pig/reference/attention.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/matrix.h"
#include "pig/reference/transform.h"
#include "pig/spec/hybrid_config.h"

namespace pig::ref {

// The method's configuration (its fields, parse, validate, spellings) is spec's: the runtime and
// the tools take it without the oracle.
using spec::HybridConfig;
using spec::HybridRank;
using spec::parse_rank;
using spec::to_string;

struct HybridResult {
  Attention attention;
  std::vector<std::size_t> head; ///< exactly attended indexed tokens, ascending
  std::vector<std::size_t> tail; ///< drawn indexed tokens, ascending
  std::vector<double> pi;        ///< inclusion probability of each tail token
  std::size_t indexed = 0;
  std::size_t static_tokens = 0;
  std::size_t scored = 0;     ///< indexed tokens with a finite score (the candidates, with cand)
  std::size_t cut_off = 0;    ///< scored tail tokens the cut left to the floor
  double tail_budget = 0;     ///< the expected tail size the draw used (after growth)
  double estimated_error = 0; ///< z sqrt(V^) / (D^ |o^|) at the end (epsilon > 0; else 0)
  /// Cost2 = (|head| + |tail|) / indexed (0 when nothing is indexed).
  double cost() const {
    return indexed == 0 ? 0.0 : double(head.size() + tail.size()) / double(indexed);
  }
};

/// The lowrank ranker's sketch: transform.h's pca:r=dims fitted to the centred indexed keys, and
/// each key's dims components rounded to int8 with one scale per token (max |k'_j| / 127).
struct HybridLowRank {
  HashTransform transform;
  struct Key {
    std::vector<std::int8_t> x;
    float scale = 0; ///< 0 for a zero key; NaN for a non-finite one (its score is then -inf)
  };
  /// Throws std::invalid_argument if dims > the keys' dimension or there is no key.
  static HybridLowRank fit(Matrix centered_keys, int dims);
  /// The key's components rounded to the integers [-(2^(kbits-1) - 1), 2^(kbits-1) - 1], one
  /// scale (max |k'_j| over that top level).
  Key key(std::span<const float> centered, int kbits = 8) const;
  /// q'.k^' in double: scale * sum_j q'_j x_j (q' = transform.query(q)).
  static double dot(std::span<const float> q_mapped, const Key &k);
  /// kbits = 4: q' rounded to int8 (round(q'_j / s), s = max |q'_j| / 127), and the dot product
  /// s_q s_k sum_j q_j x_j with the integer sum exact (|sum| <= 127 * 7 * d < 2^24 for d <= 2^14,
  /// so a kernel summing in f32 in any order gets the same integer).
  static Key query8(std::span<const float> q_mapped);
  /// A vector rounded as key() rounds the mapped key (quant: the centred key itself).
  static Key round_key(const std::vector<float> &k, int kbits);
  static double dot8(const Key &q, const Key &k);
};

/// The estimated logits l^_i (index order: l^[i] for token indexed_begin + i), from the codes
/// of the query (hashed as sample_tokens hashes it) and the index; + log |v_i| with value_norm
/// (V: the value rows of all n tokens).
std::vector<double> hybrid_scores(std::span<const float> q, Matrix V, Matrix W,
                                  const LshIndex &index, const HybridConfig &cfg,
                                  std::optional<double> scale = {});

/// Inclusion probabilities pi_i = min(1, lambda r_i) of the tail tokens with scores `scores`,
/// r_i = (1 - floor) softmax(scores)_i + floor / N, lambda such that sum pi_i = min(budget, N)
/// (to 1e-12 relative; every pi_i > 0 when budget > 0). NaN scores count as -inf.
std::vector<double> inclusion_probabilities(std::span<const double> scores, double budget,
                                            double floor);

/// The same for tokens split in two: `scores` (the scored ones; NaN or -inf count as unscored)
/// and `unscored` more tokens of score -inf, which all share one probability: pi[i] for
/// scores[i], pi_unscored for each unscored token. The dense form calls this one, so a caller
/// that never lists the unscored tokens (a kernel with `cand`) gets the same doubles.
struct SplitInclusion {
  std::vector<double> pi;
  double pi_unscored = 0;
};
SplitInclusion inclusion_probabilities(std::span<const double> scores, std::size_t unscored,
                                       double budget, double floor);
/// z with P(|N(0,1)| > z) = delta: the two-sided normal quantile of step 4's error bound.
double hybrid_error_quantile(double delta);

/// The uniform U_i in [0, 1) of token `token` under `seed` (a splitmix64 hash of both: no state,
/// so the draw of a token does not depend on which other tokens are considered).
double hybrid_uniform(std::uint64_t seed, std::size_t token);

/// Indexed positions in [0, n), each drawn independently with probability p (0 <= p <= 1), in
/// ascending order: a Bernoulli process walked by geometric skips, gap = floor(log U / log(1 - p))
/// with U = hybrid_uniform(seed ^ kHybridSkipStream, k) for the k-th gap. O(p n) work.
inline constexpr std::uint64_t kHybridSkipStream = 0xa5c3'96e1'0f1d'2b47ull;
std::vector<std::size_t> hybrid_skip_draw(std::uint64_t seed, std::size_t n, double p);
/// The tables (of L) in which a token's codes equal the query's: what retrieval counts.
int hybrid_collisions(int L, const std::uint16_t *codes, const std::uint16_t *query_codes);
/// H: the bits in which a token's codes and the query's differ over the first `bits` SimHash
/// columns (table b / K, bit b % K), bits in [1, K L].
int hybrid_hamming(int bits, int K, const std::uint16_t *codes, const std::uint16_t *query_codes);
/// The hamming ranker's cos^ = cos(pi H / bits), written once here so that a table of it holds
/// the same doubles.
inline double hamming_cosine(int H, int bits) {
  return std::cos(std::numbers::pi * double(H) / double(bits));
}

/// cos^ of one token from its codes and the query's (L each): the ranker of step 1. bits: the
/// hamming columns used (0: K L).
double hybrid_cosine(HybridRank rank, int bits, int K, int L, const std::uint16_t *codes,
                     const std::uint16_t *query_codes);

/// What hybrid_estimate reads of the tokens, as callbacks: the reference (hybrid_attention) and
/// the runtime (BudgetAttention's lsh-hybrid) share the selection, the draw and the budget rule.
struct HybridTokens {
  std::span<const std::size_t> static_ids; ///< always attended exactly
  std::size_t indexed_begin = 0;           ///< the token of score[0]
  /// One softmax over `ids` with logits scale q.k_i - bias_j (attention_over's contract).
  std::function<Attention(std::span<const std::size_t> ids, std::span<const double> bias)> attend;
  /// scale q.k of a token (epsilon > 0 only).
  std::function<double(std::size_t token)> logit;
  /// |v_token - o|^2 (epsilon > 0 only).
  std::function<double(std::size_t token, std::span<const float> o)> value_dist2;
};

/// Steps 2-4 for indexed tokens with ranker scores `score` (hybrid_scores' order): the head, the
/// seeded tail draw, the softmax through t.attend and the tail's growth. Throws on an invalid
/// cfg.
HybridResult hybrid_estimate(std::span<const double> score, const HybridTokens &t,
                             const HybridConfig &cfg);

/// The estimator (header comment): one softmax over static + head (bias 0) + drawn tail
/// (bias log pi_i). Throws on an invalid cfg or a mismatched index.
HybridResult hybrid_attention(std::span<const float> q, Matrix K, Matrix V, Matrix W,
                              const LshIndex &index, const HybridConfig &cfg,
                              std::optional<double> scale = {});

/// A selection reused (HybridConfig::reuse): `sel`, made by hybrid_attention (or
/// hybrid_estimate) for an earlier query over tokens whose indexed part was [sink, indexed_end),
/// attended by a later query q over all n = K.rows tokens. One softmax over the sink [0, sink),
/// every token of [indexed_end, n) (the local window then and every token appended since), exactly,
/// and sel's head (bias 0) and tail (bias log pi), in that order. pi was fixed before this draw and
/// does not depend on q, so the partition function and the numerator stay unbiased over the draw
/// for q too; only the proposal is older. Throws when sel reaches past indexed_end, indexed_end
/// past n, or sink past indexed_end.
Attention hybrid_reuse(std::span<const float> q, Matrix K, Matrix V, const HybridResult &sel,
                       std::size_t sink, std::size_t indexed_end, std::optional<double> scale = {});

} // namespace pig::ref
