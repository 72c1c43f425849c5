// The paper's sparse-attention baselines as runtime Attentions, at a budget matched to MagicPIG's
// cost (ALGORITHM.md, "Baselines"): each query head of a sparse layer reads m = max(1,
// round(budget * n_indexed)) tokens of the indexed part, plus every static (sink and local) token
// exactly.
//   topk    the m indexed tokens with the highest q.k; one softmax over static + selected.
//   oracle  m i.i.d. draws from the exact softmax over the indexed tokens, the mean of their values
//           (unbiased for the indexed part, pig::ref::oracle_sampling), merged with the exact
//           static part by LSE (ALGORITHM.md 1.7). Cost = unique draws.
//   lsh-hybrid  pig::ref::hybrid_attention (docs/HYBRID.md): SimHash codes of the centred keys
//           rank the indexed tokens by an estimated logit (Hamming distance to the query's codes
//           times the key norm); the best head_share * m are attended exactly, the rest drawn
//           with Horvitz-Thompson weights 1/pi (seeded per layer, head and position as oracle's).
//           The codes are computed by the LSH encode kernel once per token; the scan, the scores,
//           the selection, the draw and the softmax are Highway kernels (hybrid_rank.h,
//           hybrid_select.h), equal to the reference.
//           With rank=quant the ranker is each centred key in int4 instead of its codes
//           (hybrid_rank.h: hybrid_quant_scan), an integer dot product with the int8 query.
//   quest   pages of spec.quest_page indexed tokens, each keeping the element-wise min and max of
//           its keys (folded in as tokens leave the local window, never recomputed); the pages
//           with the highest bound sum_j max(q_j min_j, q_j max_j) covering >= m tokens
//           (ceil(m / page) pages) are attended exactly, with the static tokens, in one softmax.
// These exist to measure accuracy against MagicPIG, so they mirror pig::ref (scores in double
// from the cache's f32 / bf16 rows, the same selection order and tie rules, the same RNG) rather
// than being fast; they stay O(n d) per head and step (one score pass; quest not even that).
// Prefill and dense layers run the dense kernels, like every other method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"

namespace pig::runtime {
namespace lsh {
class SimHash;
}

/// Tokens a query head reads from n_indexed indexed tokens: max(1, round(budget * n_indexed)),
/// at most n_indexed (0 when nothing is indexed).
size_t BudgetTokens(double budget, size_t n_indexed);

/// The seed of the oracle draws of (layer, query head, position of the query): a run is
/// reproducible, and two runs that load the same prefix draw the same samples at the same step.
std::uint64_t OracleSeed(std::uint64_t sample_seed, size_t layer, size_t head, size_t pos);

class BudgetAttention final : public Attention {
public:
  using Method = spec::Method; ///< topk, oracle, quest or lsh_hybrid

  /// spec.method must be topk, oracle or quest; throws std::invalid_argument otherwise, for a
  /// spec that AttentionSpec::Validate rejects, for quest_page == 0, and when no dense kernel
  /// serves the head dim.
  /// pool: the KV store's blocks (KvCache), or null for a pool of its own.
  BudgetAttention(const AttentionSpec &spec, const AttentionShape &shape,
                  std::shared_ptr<KvPool> pool = nullptr);
  /// ReservedBytes() of BudgetAttention(spec, shape) right after construction, without
  /// allocating: the constructor's std::invalid_argument, std::length_error past a size_t.
  static size_t ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape);
  ~BudgetAttention() override;

  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool) override;
  void Reset() override;
  const AttentionShape &shape() const override { return cache_.shape(); }
  /// The KV store plus Quest's page bounds.
  size_t MemoryBytes() const override;
  /// indexed / sampled per sparse layer and query head; index_bytes_read is what finding the
  /// selection reads: every indexed key for topk and oracle (an exact score pass), the page
  /// bounds for quest; index_bytes the page bounds.
  AttentionStats stats() const override;
  const KvCache &cache() const override { return cache_; }
  KvCache &mutable_cache() override { return cache_; }
  void LoadPrefix(const KvCache &src, size_t n) override;
  void AttachPrefix(const std::int32_t *blocks, size_t n_blocks) override;

  Method method() const { return method_; }

private:
  struct Scratch; // per pool thread, defined in the .cpp
  using HeadCount = CostCounters;

  void DenseDecode(size_t layer, size_t n_tok, const float *q, float *out, ThreadPool &pool);
  template <typename E>
  void SparseHead(size_t layer, size_t head, size_t pos, const float *q, float *out, Scratch &s,
                  HeadCount &count) const;
  // Quest: folds the keys of positions [quest_end_[layer], end) of every kv-head into its pages.
  void QuestFold(size_t layer, size_t end);
  // Quest: forgets the pages from the one holding `pos` on (those positions are being rewritten).
  void QuestTruncate(size_t layer, size_t pos);
  // lsh-hybrid: encodes the keys of positions [hybrid_[..].end, end) of every kv-head of the
  // layer (the mean frozen at the first call that indexes anything), and forgets from `pos` on.
  void HybridFold(size_t layer, size_t end, ThreadPool &pool);
  void HybridTruncate(size_t layer, size_t pos);
  // lsh-hybrid, per decode step of a sparse layer: for each kv-head, the codes of its G queries
  // (hybrid_qcodes_) and, with rank=hamming, every indexed token's H for the G heads from one scan
  // of the packed sketches (hybrid_H_): the sketches stream once per group, not once per head.
  void HybridRankGroups(size_t layer, size_t n_idx, const float *q, ThreadPool &pool);
  bool Quant() const { return spec_.hybrid.rank == spec::HybridRank::quant; }
  // Runs scan(kv-head, from, to) over the indexed tokens of every kv-head in chunks of a multiple
  // of `granule` tokens across the pool: the rankers' scans.
  void ScanInChunks(size_t n_idx, size_t granule, ThreadPool &pool,
                    const std::function<void(size_t, size_t, size_t)> &scan);
  // The Hamming ranker's columns: hybrid.bits, or all K L.
  int RankerBits() const { return spec_.hybrid.bits > 0 ? spec_.hybrid.bits : spec_.K * spec_.L; }
  template <typename E>
  void HybridHead(size_t layer, size_t head, size_t pos, const float *q, float *out, Scratch &s,
                  HeadCount &count) const;
  // After positions [0, n) came from elsewhere (LoadPrefix, AttachPrefix): Quest's pages folded
  // over them, lsh-hybrid's sketches left to the next decode step.
  void Loaded(size_t n);
  // The end of the indexed part for a sequence of n tokens, or sink when nothing is indexed.
  size_t IndexedEnd(size_t n) const;

  AttentionSpec spec_;
  Method method_;
  KvCache cache_;
  lsh::LshKernelSet set_;
  std::vector<bool> dense_layer_;
  // Quest page bounds per (layer, kv-head): pages x head_dim floats, page p covering positions
  // [sink + p P, sink + (p + 1) P); positions [sink, quest_end_[layer]) are folded in.
  std::vector<std::vector<float>> qmin_, qmax_;
  std::vector<size_t> quest_end_;
  // lsh-hybrid's sketch per (layer, kv-head): the SimHash codes (L per position, token-major;
  // packed into bit strings for the Hamming ranker's scan) of the centred keys of positions
  // [sink, end) and their norms |k - mean| (double, as the
  // reference's hybrid_scores), the mean frozen at the first decode step that indexed anything.
  struct HybridIndex {
    std::vector<float> mean;
    std::vector<std::uint16_t> codes;  ///< with rank=collisions or cand only
    std::vector<std::uint64_t> sketch; ///< rank=hamming: packed (hybrid_rank.h), per position
    std::vector<double> norms;
    std::vector<double> log_vnorms; ///< log |v| per position, with hybrid.value_norm only
    /// rank=quant: the centred keys in int4 (hybrid_quant_pack), hybrid_quant_bytes(d) per
    /// position, and their scales.
    std::vector<std::uint8_t> qkeys;
    std::vector<float> kscale;
    size_t end = 0;
  };
  std::vector<HybridIndex> hybrid_;
  std::vector<std::vector<std::uint16_t>> hybrid_qcodes_, hybrid_H_; // per kv-head, this step
  std::vector<std::vector<std::uint64_t>> hybrid_qsketch_;           // per kv-head, this step
  // rank=quant, per kv-head and this step: the G queries in int8 (as floats, 2 hybrid_quant_bytes
  // each), their scales, and every indexed token's integer dot product with each (G x n).
  std::vector<std::vector<float>> hybrid_q8_, hybrid_qscale_, hybrid_acc_;
  std::unique_ptr<lsh::SimHash> simhash_; // lsh-hybrid: W of (K, L, seed)
  std::vector<std::unique_ptr<Scratch>> scratch_;
  std::vector<HeadCount> head_count_;
  AttentionStats stats_;
};

/// The Attention for spec.method in {topk, oracle, quest, lsh-hybrid} (called by MakeAttention).
std::unique_ptr<Attention> MakeBudgetAttention(const AttentionSpec &spec,
                                               const AttentionShape &shape,
                                               std::shared_ptr<KvPool> pool = nullptr);

} // namespace pig::runtime
