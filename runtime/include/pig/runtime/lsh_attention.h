// MagicPIG decoding (ALGORITHM.md section 1) as an Attention: the runtime's main job.
//
// Per (layer, kv-head), at the first decode step after prefill (or ahead of it, between steps:
// PrepareDecode): the keys of the indexed tokens of the positions cached before that step
// (everything but `sink` first and `local` last) are centered on their mean, hashed with W and
// sorted into the bucket tables (lsh_index.h). Each decode step, for each kv-head, the first
// included:
//   1. the index grows by the token that just left the local window (incremental indexing: the
//      window slides and generation length is bounded only by the capacity);
//   2. the G query heads of the group are hashed, and retrieval returns the union of their
//      sample sets with a per-token head mask;
//   3. one fused pass gathers each sampled K/V row once for the whole group, scores it with
//      log u, and runs the softmax together with the sink and local tokens (u = 1).
// Layers in spec.dense_layers, and sequences still too short to index, are attended densely with
// the same kernels. Prefill (several queries in one call) is dense and causal.
//
// A per-layer operating point (spec.layers, from pig-tune) gives each layer its own (K, L, t) or
// dense attention: each distinct (K, L) has its kernel set and W, each distinct (K, L, t) its
// log u table, shared by the layers that chose it.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_step.h"

namespace pig::runtime {

/// What the layers of a magicpig spec share, for LshAttention and PagedLshAttention: the kernel
/// set of (spec.K, spec.L) (dense layers, short sequences, prefill) and, per sparse layer, its
/// configuration: one per distinct (K, L, t), with its kernel set and log u table; one SimHash W
/// for all, the widest (K, L)'s, the others as its column prefixes.
class LshLayers {
public:
  /// (K, L, t, r) in the spec::LshParams base; {{K, L, t, r}, set, W, log_u} initialises.
  struct Config : spec::LshParams {
    lsh::LshKernelSet set;
    std::shared_ptr<const lsh::SimHash> W; // shared by the configurations of one (K, L)
    lsh::LogUTableData log_u;
  };
  /// Throws std::invalid_argument when no kernel serves a (K, L) at head_dim.
  LshLayers(const AttentionSpec &spec, size_t n_layers, size_t head_dim);
  /// The LshLayers of (spec, n_layers, head_dim), shared by every attention alive that asks for
  /// the same: W is drawn once, not per sequence, and a batch's sequences hash against one W
  /// (HashBatch groups rows by W). Thread-safe.
  static std::shared_ptr<const LshLayers> Shared(const AttentionSpec &spec, size_t n_layers,
                                                 size_t head_dim);
  /// Layer l's configuration, or null for a dense layer.
  const Config *layer(size_t l) const { return layer_cfg_.at(l); }
  /// The kernels of (spec.K, spec.L).
  const lsh::LshKernelSet &dense_set() const { return set_; }
  /// The kernels that serve: the dense set's, then each other (K, L) (KernelRegistry::describe).
  std::string describe() const;

private:
  lsh::LshKernelSet set_;
  std::vector<std::unique_ptr<Config>> configs_;
  std::vector<const Config *> layer_cfg_;
};

class LshAttention final : public Attention {
public:
  /// Throws std::invalid_argument for an invalid spec, a head dim no kernel serves or a GQA
  /// group larger than lsh::kMaxGroup.
  /// pool: the KV store's blocks (KvCache), or null for a pool of its own.
  LshAttention(const AttentionSpec &spec, const AttentionShape &shape,
               std::shared_ptr<KvPool> pool = nullptr);
  /// ReservedBytes() of LshAttention(spec, shape) right after construction, without allocating:
  /// throws what the constructor throws for an invalid spec or shape (std::invalid_argument), and
  /// std::length_error when the size does not fit in a size_t.
  static size_t ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape);

  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool) override;
  bool SplitsDecode() const override { return true; }
  /// With `hash`, each sampled group's joining key and queries are hashed by the caller's encode
  /// between two stages (BatchAttention); without, each group hashes its own and its sampled
  /// pass may start while other groups still retrieve (no barrier). Both give the same output.
  DecodeItems BeginDecode(size_t layer, size_t pos, const float *q, const float *k, const float *v,
                          float *out, ThreadPool &pool, HashBatch *hash = nullptr) override;
  void Reset() override;
  const AttentionShape &shape() const override { return cache_.shape(); }
  size_t MemoryBytes() const override;
  // The KV store plus every sparse layer's tables over the whole capacity (IndexLayout).
  size_t ReservedBytes() const override;
  AttentionStats stats() const override;
  const KvCache &cache() const override { return cache_; }
  KvCache &mutable_cache() override { return cache_; }
  void LoadPrefix(const KvCache &src, size_t n) override;
  void AttachPrefix(const std::int32_t *blocks, size_t n_blocks) override;
  void SetPrefixKey(std::uint64_t key) override { prefix_key_ = key; }
  /// Units: the (layer, kv-head) indexes the next decode step would build (sparse layers whose
  /// next step has at least kMinIndexed indexed tokens), built here over the cached positions,
  /// as that step would build them.
  size_t PrepareDecode(ThreadPool &pool, size_t max_units) override;
  size_t DecodeUnitsPending() const override;

  /// The index of one (layer, kv-head), or null before it is built (tests, tools).
  const lsh::LshIndex *index(size_t layer, size_t kvh) const;
  /// The spec it runs (dense_below resolved when MakeAttention measured it).
  const AttentionSpec &spec() const { return spec_; }
  /// Fewest indexed tokens worth an index; shorter sequences are attended densely.
  static constexpr size_t kMinIndexed = 16;

private:
  struct PerThread {
    lsh::RetrievalScratch scratch;
    std::vector<float> lse;
    StepParts parts; // this step's, on this thread (added to total_ by the step's finish)
    explicit PerThread(size_t capacity) : scratch(capacity) {}
  };
  // One kv-head group's decode step between its two phases.
  struct Group {
    lsh::StepBuffers buf;        // the retrieved union (tokens, masks) and the query codes
    size_t n_union = 0;          // retrieved tokens
    bool sampled = false;        // false: the group was attended densely in the first phase
    std::vector<float> out, lse; // [part][G x d] (two parts only), [part][G]: partial results
    // Batched hashing (HashBatch): the joining keys' rows, their count, where their codes (and
    // then the queries') will be.
    std::vector<float> key_rows;
    size_t keys = 0;
    HashBatch::Ticket ticket;
  };
  // First phase of a group's step: the dense pass (dense layers, short sequences), or index
  // build / extend and retrieval. The second: the fused pass over part `part` of `parts` of the
  // retrieved tokens (the first part with the static tokens).
  void PrepareGroup(size_t layer, size_t kvh, size_t n_tokens, const float *q, float *out,
                    PerThread &pt, Group &g, CostCounters &c);
  // PrepareGroup in two halves around a batch's encode: the dense pass, or the index built and
  // the rows to hash given to `hash` (returns whether the group samples); then the index
  // extended with the codes and the union retrieved.
  bool PrepareRows(size_t layer, size_t kvh, size_t n_tokens, const float *q, float *out,
                   PerThread &pt, Group &g, HashBatch &hash);
  void RetrieveEncoded(size_t layer, size_t kvh, size_t n_tokens, PerThread &pt, Group &g,
                       const HashBatch &hash, CostCounters &c);
  // Whether the group of (layer, kvh) is attended densely at a step of n_tokens tokens.
  bool DenseStep(size_t layer, size_t kvh, size_t n_tokens) const;
  void DenseGroup(size_t layer, size_t kvh, size_t n_tokens, const float *q, float *out,
                  PerThread &pt);
  void AttendGroup(size_t layer, size_t kvh, const float *q, float *out, PerThread &pt, Group &g,
                   size_t part, size_t parts);
  // A step's finish, on the calling thread once its items ran: the threads' parts into total_,
  // and the step counted (at layer 0).
  void EndStep(size_t layer);
  // Tokens a sequence of n_tokens indexes (neither sink nor local).
  size_t Indexable(size_t n_tokens) const;
  // The mean's window: spec.mean_window, or the attached prefix's indexed keys.
  size_t MeanWindow() const;
  // Builds the index of (layer, kv-head) over positions [0, n).
  void BuildSlot(size_t layer, size_t kvh, size_t n);
  // The slots (layer * n_kv_heads + kvh) the next decode step would build, in that order.
  void PendingUnits(std::vector<size_t> &units) const;

  using Config = LshLayers::Config;

  AttentionSpec spec_;
  std::string share_key_;        // IndexShare::Request::key; empty: this sequence shares no index
  size_t attached_ = 0;          // positions of the cached prefix AttachPrefix gave
  std::uint64_t prefix_key_ = 0; // its PrefixCache key (SetPrefixKey), 0: none
  KvCache cache_;
  std::shared_ptr<const LshLayers> layers_; // LshLayers::Shared
  const lsh::LshKernelSet &set_; // layers_->dense_set(): dense layers, short sequences, prefill
  std::vector<std::optional<lsh::LshIndex>> index_; // [layer][kv-head]
  std::vector<size_t> cached_; // [layer]: positions the cache holds (the last Forward's pos + n)
  std::vector<std::unique_ptr<PerThread>> threads_;
  std::vector<CostCounters> per_kvh_;
  std::vector<Group> groups_;                     // [kv-head]
  std::unique_ptr<std::atomic<bool>[]> prepared_; // [kv-head]: PrepareGroup finished this step
  DenseDecodeSplit dense_split_;                  // the dense layers' decode rows
  size_t prepared_size_ = 0;
  CostCounters total_;
  size_t decode_steps_ = 0;
};

} // namespace pig::runtime
