// lsh-hybrid's configuration: the ranker, the budget and its split, and every knob of
// docs/HYBRID.md, with its parser, validation and spellings ("head=0.25:floor=0.1:rank=hamming").
// Here, with the other facts every layer shares, so that the runtime, the tools, pig-serve's
// requests and tune's hybrid points read it without the oracle; the method itself, the scalar
// reference every kernel is tested against, is pig/reference/hybrid.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pig::spec {

enum class HybridRank : std::uint8_t {
  collisions, ///< c_i, the equal codes over L tables (what retrieval counts)
  hamming,    ///< H_i, the differing bits over the L codes (reads every code of every token)
  lowrank,    ///< q'.k^'_i: the centred key's top-`dims` principal components, int8 per token
  quant,      ///< q.k~_i with k~_i the centred key itself rounded to `kbits`, the query to int8
};
const char *to_string(HybridRank r);
/// The ranker named `name` (to_string's names), or nothing.
std::optional<HybridRank> parse_rank(std::string_view name);

struct HybridConfig {
  double budget = 0.05;     ///< expected tokens read / indexed tokens (cost2), in (0, 1]
  double head_share = 0.25; ///< share of the budget attended exactly, in [0, 1]
  double floor = 0.1;       ///< share of the tail's proposal spread uniformly, in (0, 1]
  double epsilon = 0.0;     ///< target relative error (0: the tail budget stays fixed)
  double delta = 0.05;      ///< the bound holds with probability 1 - delta, in (0, 1)
  double max_budget = 0.25; ///< cost2 cap of the growing tail (epsilon > 0; below budget: budget)
  HybridRank rank = HybridRank::hamming; ///< the defaults: docs/HYBRID.md's measured best
  bool value_norm = false;               ///< rank by l^_i + log |v_i|
  /// hamming: the first `bits` SimHash columns only (table b / K, bit b % K), in [1, K L]; 0: all
  /// K L. A kernel keeps them packed per token (bits / 8 bytes), the ranker's whole read.
  int bits = 0;
  /// lowrank: principal components kept, in [1, d]; a kernel reads dims kbits / 8 + 4 bytes
  /// per token.
  int dims = 16;
  /// lowrank and quant: bits per key component, 8 or 4 (quant: 4 by default, see
  /// effective_kbits). With 4, and always with quant, the query's components are rounded to int8
  /// too (one scale), so that the dot product is an integer sum, the same in any order.
  int kbits = 0;
  /// kbits, or its default for the ranker (lowrank 8, quant 4).
  int effective_kbits() const { return kbits ? kbits : rank == HybridRank::quant ? 4 : 8; }
  /// Rank only the candidates, the tokens whose codes equal the query's in >= `candidates`
  /// tables (what MagicPIG's retrieval at t = `candidates` returns from the bucket tables; at most
  /// L); the others are left unscored (score -inf: the uniform floor alone, drawn by skips, see
  /// hybrid_estimate). 0: every indexed token is ranked.
  int candidates = 0;
  /// hamming: a cascade. The first `prebits` columns score every indexed token coarsely: step 1's
  /// formula over those bits, with the mean key norm of the indexed tokens (prenorm: each
  /// token's own). The best `prefilter` share of them (at least one; ties to the lower position)
  /// is then scored with all `bits`; the others keep the coarse score. 0: off. A kernel reads
  /// prebits / 8 bytes of every token and the rest of the sketch of the kept ones, and (without
  /// prenorm or vnorm) can treat the others per coarse distance instead of per token.
  double prefilter = 0;
  int prebits = 512;    ///< in [1, K L]
  bool prenorm = false; ///< the coarse score with each token's key norm
  /// Decode steps one selection serves (docs/HYBRID.md, "Reusing a selection"): a selection (head,
  /// drawn tail, pi) is made at one step and attended by the queries of the next reuse - 1 steps
  /// too (hybrid_reuse), with every token from the selection's indexed end on attended exactly.
  /// 1: a selection per step. In [1, 4096].
  int reuse = 1;
  /// A cut of the tail's proposal, in logit units (docs/HYBRID.md, "A cut of the tail's proposal";
  /// pig::ref only: the runtime refuses it, its sparse sampler measured slower): after the head is
  /// chosen, every tail token scoring below m - cut, m the tail's best score, is left unscored
  /// (the uniform floor alone, drawn by skips like cand's), so that a kernel computes the softmax
  /// share, the inclusion probability and the uniform of the tokens within `cut` of the best only.
  /// Such a token's share of the proposal was below (1 - floor) e^-cut. 0: off. Finite, >= 0.
  double cut = 0;
  std::uint64_t seed = 0x5eed;

  /// Throws std::invalid_argument naming the first field out of range (NaN included).
  void validate() const;
  /// "b=5% head=0.25 floor=0.1 hamming" (+ " bits=256", " lowrank dims=16", " eps=0.05 ...",
  /// " |v|", " cand=1", " pre=10%/512", " prenorm", " reuse=8", " cut=10").
  std::string str() const;
  /// The SPEC that parse() reads back to this configuration, budget and seed excepted (a tool's
  /// --budget and --seed set them): "head=0.25:floor=0.1:rank=hamming", then each other field that
  /// differs from the defaults, numbers in their shortest round-trip form.
  std::string spec() const;
  /// Fields from "key=value" pairs separated by ':' over the defaults: budget (a fraction or
  /// "5%"), head, floor, eps, delta, cap, rank (collisions | hamming | lowrank | quant), bits,
  /// dims, kbits, cand, vnorm (0 | 1), pre (a fraction or "10%"), prebits, prenorm (0 | 1), reuse,
  /// cut, seed;
  /// then validate(). Throws std::invalid_argument naming the bad pair.
  static HybridConfig parse(const std::string &text);
};

} // namespace pig::spec
