// The attention interface of the runtime. The forward pass hands each layer's projected,
// rotated queries, keys and values to an Attention; the implementation owns the KV store
// (kv_cache.h) and decides which cached positions each query reads:
//   dense     every position, exactly (the baseline; also every prefill chunk of every method);
//   magicpig  LSH sampling (lsh_attention.h): sink + local tokens exact, the rest sampled;
//   topk, oracle, quest  the paper's baselines at a matched budget (budget_attention.h).
// Methods other than dense split the positions of a (layer, kv-head) the same way: sink tokens
// [0, sink), indexed tokens, local tokens [n - local, n); layers listed in dense_layers stay
// dense. Prefill (n > 1 queries in one call) is always dense and causal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "pig/runtime/kv_cache.h"
#include "pig/runtime/ops.h"
#include "pig/runtime/thread_pool.h"
#include "pig/spec/hybrid_config.h"
#include "pig/spec/lsh_params.h"
#include "pig/spec/method.h"
#include "pig/spec/transform_spec.h"

namespace pig::runtime {
namespace lsh {
class SimHash;
}

/// The cost counters of sparse decode steps (ALGORITHM.md section 1.8), summed over steps, sparse
/// layers and query heads. Work items of one step fill one each; they are summed once per step.
/// Where the attention's decode steps spent their time, in thread-seconds (each part summed over
/// the threads that ran it; divide by the pool's size for the step's wall time it would take with
/// every thread busy). Sampling methods report each part; others report nothing here.
struct StepParts {
  double dense = 0;    ///< groups attended densely (dense layers, too few tokens to sample)
  double build = 0;    ///< index builds over the cached positions (a (layer, kv-head)'s first step)
  double extend = 0;   ///< the step's key hashed into the index
  double encode = 0;   ///< the queries hashed
  double retrieve = 0; ///< bucket walks: the union of the sample sets
  double sampled = 0;  ///< the pass over the sampled and static tokens (and its merge)
  double stall = 0;    ///< an item waiting for its group's earlier item (no work)
  double total() const { return dense + build + extend + encode + retrieve + sampled + stall; }
  StepParts &operator+=(const StepParts &o) {
    dense += o.dense;
    build += o.build;
    extend += o.extend;
    encode += o.encode;
    retrieve += o.retrieve;
    sampled += o.sampled;
    stall += o.stall;
    return *this;
  }
  StepParts &operator-=(const StepParts &o) {
    dense -= o.dense;
    build -= o.build;
    extend -= o.extend;
    encode -= o.encode;
    retrieve -= o.retrieve;
    sampled -= o.sampled;
    stall -= o.stall;
    return *this;
  }
};

struct CostCounters {
  double indexed = 0;          ///< sum of indexed (sampleable) tokens seen by each query head
  double sampled = 0;          ///< sum of |S_h| (tokens read from the indexed part)
  double index_bytes_read = 0; ///< index traffic of retrieval (bucket offsets and ids)
  double kv_bytes_indexed = 0; ///< K+V bytes of the indexed tokens (denominator of cost1)
  double gathered = 0;         ///< sum of |S_1 u ... u S_G| per group step (rows read from memory)
  StepParts parts;             ///< where the steps' time went
  /// lsh-hybrid: sum of the tokens whose score each head's sampler computed and visited (every
  /// indexed token, or with rank=quant and a cut only those the sparse path listed)
  double ranked = 0;
  CostCounters &operator+=(const CostCounters &o) {
    indexed += o.indexed;
    sampled += o.sampled;
    index_bytes_read += o.index_bytes_read;
    kv_bytes_indexed += o.kv_bytes_indexed;
    gathered += o.gathered;
    parts += o.parts;
    ranked += o.ranked;
    return *this;
  }
  /// What happened between two readings: later -= earlier.
  CostCounters &operator-=(const CostCounters &o) {
    indexed -= o.indexed;
    sampled -= o.sampled;
    index_bytes_read -= o.index_bytes_read;
    kv_bytes_indexed -= o.kv_bytes_indexed;
    gathered -= o.gathered;
    parts -= o.parts;
    ranked -= o.ranked;
    return *this;
  }
};

/// What the decode steps of an Attention did.
struct AttentionStats : CostCounters {
  size_t decode_steps = 0; ///< single-token Forward calls (per layer: counted once, layer 0)
  size_t index_bytes = 0;  ///< index memory now (all layers, kv-heads), the shared apart
  /// The shared prefix indexes this sequence's indexes stand on (IndexShare), counted once each.
  size_t shared_index_bytes = 0;
  /// Fitted hashing (AttentionSpec::transform): the per-(layer, kv-head) key and query maps
  /// and per-token key norms, in bytes (0 for plain MagicPIG: its W is shared by every head).
  size_t hash_bytes = 0;
  std::string kernels; ///< which kernels served (KernelRegistry::describe), if any
  /// cost2: sampled fraction of the indexed tokens.
  double cost2() const { return indexed > 0 ? sampled / indexed : 0.0; }
  /// cost1: index traffic relative to reading the indexed tokens' K and V densely.
  double cost1() const { return kv_bytes_indexed > 0 ? index_bytes_read / kv_bytes_indexed : 0.0; }
  /// Overlap of the sample sets of a GQA group: the union's size over the sum of the heads'
  /// sizes, 1/G when the G heads sampled the same tokens, 1 when their sets are disjoint (0 when
  /// the method does not sample per group).
  double gather_ratio() const { return sampled > 0 ? gathered / sampled : 0.0; }
};

/// One decode row's attention of one layer as work items (Attention::BeginDecode), so that the
/// rows of several sequences run in one split over the threads (LlamaForward: one ParallelFor per
/// layer for every decode row of a batch). Items are claimed in index order: an item may wait for
/// an earlier item of the same row, never for a later one. `finish` runs once every item has,
/// on the calling thread; `q` and `out` of BeginDecode stay in use until then.
struct DecodeItems {
  size_t count = 0;
  std::function<void(size_t item, size_t thread)> run;
  std::function<void()> finish;
  /// With a HashBatch: items [0, first_stage) run before the batch's encode (HashBatch::Encode),
  /// the others after it. 0: no stage, any order.
  size_t first_stage = 0;
};

/// Rows that the decode steps of several sequences hash against one W, encoded together
/// (BatchAttention): W (K L x d floats, 384 KB at K L = 1500, d = 64) is read once per 8 rows
/// of the whole batch, where each sequence hashing its own rows reads it twice per kv-head (its
/// key, then its queries). Rows are grouped by W; a row's codes do not depend on the rows beside
/// it, so a sequence's step is the same bit for bit whatever batch it runs in.
class HashBatch {
public:
  struct Ticket {
    size_t group = 0, row = 0;
  };
  /// Thread-safe: copies rows a (na x W.d()) then b (nb x W.d()), one after the other, to be
  /// hashed with set.encode against W; their codes are at Codes(ticket) once Encode ran.
  Ticket Add(const lsh::LshKernelSet &set, const lsh::SimHash &W, const float *a, size_t na,
             const float *b, size_t nb);
  /// Encodes every row added since Clear, in blocks of 8 rows across the pool.
  void Encode(ThreadPool &pool);
  /// The L codes of each row of an Add, row after row.
  const std::uint16_t *Codes(Ticket t) const;
  /// Rows added since Clear.
  size_t rows() const;
  void Clear();

private:
  struct Group {
    const lsh::SimHash *W = nullptr;
    lsh::LshKernelSet set;
    std::vector<float> rows;
    std::vector<std::uint16_t> codes;
    size_t n = 0;
  };
  std::mutex mu_;
  std::vector<Group> groups_;
  size_t used_ = 0; // groups_ in use since Clear (the vectors are kept)
};

class Attention {
public:
  virtual ~Attention() = default;
  // Appends the keys and values of positions [pos, pos + n) of `layer`, then writes the causal
  // attention output of the n queries: out[i] attends to positions [0, pos + i].
  // q/out: n x (n_heads * head_dim); k/v: n x (n_kv_heads * head_dim), row-major.
  virtual void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                       const float *v, float *out, ThreadPool &pool) = 0;
  // Whether BeginDecode serves this attention's decode rows. When not, a batch calls Forward.
  virtual bool SplitsDecode() const { return false; }
  // Forward(layer, pos, 1, q, k, v, out, pool) as work items: stores the row's key and value,
  // returns the items that attend it. Running every item and then `finish` is that Forward, bit
  // for bit, whatever the other items of the split are. Only where SplitsDecode().
  // With `hash`, the items may give their rows to hash to it (DecodeItems::first_stage): the
  // caller encodes them between the stages. k and v null: the rows are in the cache already (a
  // cache over an engine's blocks, KvPool::External).
  virtual DecodeItems BeginDecode(size_t layer, size_t pos, const float *q, const float *k,
                                  const float *v, float *out, ThreadPool &pool,
                                  HashBatch *hash = nullptr) {
    (void)layer, (void)pos, (void)q, (void)k, (void)v, (void)out, (void)pool, (void)hash;
    return {};
  }
  // Forgets every cached position.
  virtual void Reset() = 0;
  virtual const AttentionShape &shape() const = 0;
  // KV store plus any index, in bytes.
  virtual size_t MemoryBytes() const = 0;
  // What MemoryBytes() can grow to once every position is used (the KV store takes blocks as the
  // sequence grows, an index grows with it): what a memory budget reserves (LlamaBatch). Default:
  // the KV store's blocks for the whole capacity and the rest of MemoryBytes() as it is now.
  virtual size_t ReservedBytes() const {
    return cache().ReservedBytes() + (MemoryBytes() - cache().MemoryBytes());
  }
  virtual AttentionStats stats() const { return {}; }
  // The KV store every method keeps (never null).
  virtual const KvCache &cache() const = 0;
  // The same, to hand it an engine's block table (KvCache::Adopt; PagedLshAttention).
  virtual KvCache &mutable_cache() = 0;
  // Takes positions [0, n) of every layer from `src` (same shape and dtype) as if they had been
  // prefilled here: lets several methods decode from one dense prefill. Forgets anything else.
  virtual void LoadPrefix(const KvCache &src, size_t n) = 0;
  // Takes n_blocks full blocks of the KV store's pool (a cached prompt prefix: PrefixCache) as
  // positions [0, n_blocks * block_tokens) of every layer, shared, not copied; the rest as
  // LoadPrefix: the method's state is built from those rows when it is needed. The cache must be
  // empty (KvCache::Attach's errors).
  virtual void AttachPrefix(const std::int32_t *blocks, size_t n_blocks) = 0;
  // After AttachPrefix from a PrefixCache: the prefix's name there (PrefixCache::Lookup's key),
  // which names what is kept on disk about it (magicpig: the index over it, IndexShare::SetDisk).
  virtual void SetPrefixKey(std::uint64_t key) {}

  // Work the next decode step (Forward with n == 1 on every layer, at the position after the
  // cached ones) would do for the first time and that can be done ahead, between steps, in
  // units (magicpig: one unit builds one (layer, kv-head) index over the positions cached now).
  // Does at most max_units of them (across the pool) and returns how many remain: 0 when the
  // next step has nothing left to build. A server spreads a long prompt's index build over
  // several steps this way instead of stalling every stream's next step. Call it once the prompt
  // is complete: decoding gives the same output bit for bit with or without it, however the
  // units are sliced. Default: nothing to do ahead.
  virtual size_t PrepareDecode(ThreadPool &pool, size_t max_units) {
    (void)pool;
    (void)max_units;
    return 0;
  }
  // What PrepareDecode(pool, 0) returns, without a pool: the units still to do.
  virtual size_t DecodeUnitsPending() const { return 0; }
};

/// An Attention that forwards every call to another. Tools derive from it to observe Forward
/// (time it, keep the queries) and override only that.
class ForwardingAttention : public Attention {
public:
  explicit ForwardingAttention(std::unique_ptr<Attention> inner) : inner_(std::move(inner)) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool) override {
    inner_->Forward(layer, pos, n, q, k, v, out, pool);
  }
  void Reset() override { inner_->Reset(); }
  const AttentionShape &shape() const override { return inner_->shape(); }
  size_t MemoryBytes() const override { return inner_->MemoryBytes(); }
  size_t ReservedBytes() const override { return inner_->ReservedBytes(); }
  AttentionStats stats() const override { return inner_->stats(); }
  const KvCache &cache() const override { return inner_->cache(); }
  KvCache &mutable_cache() override { return inner_->mutable_cache(); }
  void LoadPrefix(const KvCache &src, size_t n) override { inner_->LoadPrefix(src, n); }
  void AttachPrefix(const std::int32_t *blocks, size_t n_blocks) override {
    inner_->AttachPrefix(blocks, n_blocks);
  }
  void SetPrefixKey(std::uint64_t key) override { inner_->SetPrefixKey(key); }
  size_t PrepareDecode(ThreadPool &pool, size_t max_units) override {
    return inner_->PrepareDecode(pool, max_units);
  }
  size_t DecodeUnitsPending() const override { return inner_->DecodeUnitsPending(); }

private:
  std::unique_ptr<Attention> inner_;
};

/// Exact attention over every cached position, one pass over K/V per GQA group (the LSH kernel
/// set's dense kernel, specialised for head_dim when one was generated).
/// Dense attention of one decode row over n_tokens cached positions, as work items: (kv-head,
/// part) pairs, each part a range of at least kPartRows positions, the parts of a group merged
/// exactly (LSE) by finish. One item per kv-head left a thread idle for a third of every dense
/// layer with 3 kv-heads on 2 threads. The split depends on n_tokens only, never on the pool:
/// a row's output is the same on any number of threads; below 2 * kPartRows it is one item per
/// kv-head, CausalDense's. One instance per Attention (its scratch), one row at a time.
class DenseDecodeSplit {
public:
  static constexpr size_t kPartRows = 2048;
  /// The parts a group of n_tokens positions is split into.
  static size_t Parts(size_t n_tokens) { return std::max<size_t>(1, n_tokens / kPartRows); }
  /// q, out: n_heads x head_dim; both stay in use until finish.
  DecodeItems Begin(const KvCache &cache, const lsh::LshKernelSet &set, size_t layer,
                    size_t n_tokens, const float *q, float *out);

private:
  std::vector<float> out_, lse_; // [kv-head][part][G x d], [kv-head][part][G]
};

class DenseAttention final : public Attention {
public:
  /// pool: the KV store's blocks (KvCache), or null for a pool of its own.
  DenseAttention(const AttentionShape &shape, lsh::DType dtype = lsh::DType::bf16,
                 std::shared_ptr<KvPool> pool = nullptr);
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool) override;
  bool SplitsDecode() const override { return true; }
  DecodeItems BeginDecode(size_t layer, size_t pos, const float *q, const float *k, const float *v,
                          float *out, ThreadPool &pool, HashBatch *hash = nullptr) override;
  void Reset() override {}
  const AttentionShape &shape() const override { return cache_.shape(); }
  size_t MemoryBytes() const override { return cache_.MemoryBytes(); }
  AttentionStats stats() const override;
  const KvCache &cache() const override { return cache_; }
  KvCache &mutable_cache() override { return cache_; }
  void LoadPrefix(const KvCache &src, size_t n) override { cache_.CopyPrefix(src, n); }
  void AttachPrefix(const std::int32_t *blocks, size_t n_blocks) override {
    cache_.Attach(blocks, n_blocks);
  }

private:
  KvCache cache_;
  lsh::LshKernelSet set_;
  DenseDecodeSplit split_;
  size_t decode_steps_ = 0;
};

/// One span of a step's rows for one sequence: n rows at positions [pos, pos + n) (n == 1: a
/// decode row). q/out: n x (n_heads * head_dim); k/v: n x (n_kv_heads * head_dim), or both null
/// when the rows are in the cache already (KvPool::External).
struct AttendSpan {
  Attention *attention = nullptr;
  size_t pos = 0, n = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float *out = nullptr;
};

/// One layer's attention for every sequence of a step (LlamaForward, PagedLshAttention): spans of
/// several rows (prefill chunks) and methods that do not split run their Forward; the decode rows
/// of the others run as one split over the threads, and with `batch_hash` (two split rows or
/// more) the keys and queries they hash are encoded in one pass (HashBatch) between two stages.
/// Each sequence's output is what its own Forward would write, bit for bit.
class BatchAttention {
public:
  void Run(size_t layer, const AttendSpan *spans, size_t n_spans, ThreadPool &pool,
           bool batch_hash = true);

private:
  std::vector<DecodeItems> items_;
  std::vector<size_t> first_[2]; // per stage: each split row's first item
  std::vector<size_t> row_[2];   // per stage: which split row
  HashBatch hash_;
};

/// Causal dense attention of n queries at positions [pos, pos + n) over `cache` (prefill of every
/// method). Work items: (kv-head, query) pairs across the pool.
void CausalDense(const KvCache &cache, const lsh::LshKernelSet &set, size_t layer, size_t pos,
                 size_t n, const float *q, float *out, ThreadPool &pool);
/// One work item of CausalDense: query i (at position pos + i) of kv-head kvh's group.
void CausalDenseItem(const KvCache &cache, const lsh::LshKernelSet &set, size_t layer, size_t pos,
                     size_t i, size_t kvh, const float *q, float *out);

/// One layer's choice in a per-layer operating point (pig-tune): dense, or LSH sampling with
/// its own (K, L, t, r) (the spec::LshParams base; {{K, L, t}} initialises, {{}, true} is dense).
struct LayerLsh : spec::LshParams {
  bool dense = false;
  friend bool operator==(const LayerLsh &, const LayerLsh &) = default;
  /// "dense" or "K=10 L=150 t=2".
  std::string str() const;
};

/// Which attention to run and its parameters (pig-run's --attention, --lsh, --sink, --local,
/// --dense-layers, --budget, --hybrid, --kv, --tuning).
/// magicpig's and lsh-hybrid's (K, L, t) are the spec::LshParams base (spec.K, spec.L, spec.t).
struct AttentionSpec : spec::LshParams {
  spec::Method method = spec::Method::dense; ///< pig/spec/method.h: dense, magicpig, topk, ...
  lsh::DType kv_dtype = lsh::DType::bf16;
  std::uint64_t seed = 0x9e3779b97f4a7c15ull; ///< W (pig::ref::simhash_matrix)
  size_t sink = 4, local = 64;
  /// magicpig: the centring mean averages the first mean_window indexed keys (0: all of them,
  /// the paper's rule; kMeanOfPrefix: those of the cached prefix the sequence attached, all of
  /// them without one). Nonzero, sequences that attached a cached prefix holding those keys share
  /// one LSH index over it (index_share.h). A fixed window gives every request the tokens it
  /// gives without the cache; kMeanOfPrefix gives those of the same request run with
  /// mean_window = its cached positions - sink (pig-serve's default).
  size_t mean_window = 0;
  static constexpr size_t kMeanOfPrefix = ~size_t(0);
  /// "0", "1024" or "prefix".
  std::string MeanWindowName() const;
  /// magicpig: a sequence shorter than dense_below positions decodes its sampled layers densely
  /// (each (layer, kv-head) builds its index at its first step at or past it): below some length
  /// the fixed work of a sampled step (hashing, L bucket walks) costs more than the attention it
  /// saves. 0: never (the paper's rule; pig-run's default). kDenseBelowMeasured: the length where
  /// sampling starts to pay, measured once per process for the kernels, head dim, group and KV
  /// type (MeasuredDenseCrossover; pig-serve's default); MakeAttention resolves it.
  size_t dense_below = 0;
  static constexpr size_t kDenseBelowMeasured = ~size_t(0);
  /// "0", "2048" or "measured".
  std::string DenseBelowName() const;
  /// Layers that stay dense; unset: the first layer and the middle one ({0, n_layers / 2}).
  std::vector<size_t> dense_layers;
  bool dense_layers_set = false;
  /// topk / quest / oracle / lsh-hybrid: tokens read from the indexed part, as a fraction of it.
  double budget = 0.02;
  size_t quest_page = 16;
  std::uint64_t sample_seed = 1; ///< oracle sampling draws
  /// magicpig: the kernel schedule asked of the registry (pig/spec/schedule.h); the registry serves
  /// the default schedule's set when none is registered for it, and says so in stats().kernels.
  lsh::Schedule schedule{};
  /// magicpig: one choice per layer (a tuned operating point, pig-tune); empty: (K, L, t) on every
  /// layer but the dense ones. Set, it replaces K, L, t and dense_layers for decoding (K and L
  /// still name the kernel set of the dense layers and of prefill).
  std::vector<LayerLsh> layers;
  /// magicpig: the space keys and queries are hashed in (pig/reference/transform.h): plain (the
  /// paper's SimHash of centred keys, the default) or fitted per (layer, kv-head) at the first
  /// decode step. The runtime serves plain and whiten:a=A (a linear map that keeps q . (k - mu),
  /// so the kernels' logits serve u too); other transforms are pig-eval's (Validate refuses them).
  /// Ignored by the other methods, like K and L.
  spec::TransformSpec transform{};
  /// lsh-hybrid: the head share, floor, ranker, central-limit budget (pig/reference/hybrid.h).
  /// Its budget is `budget`; W is (K, L, seed)'s, the draws are seeded by sample_seed per
  /// (layer, query head, position) like oracle's.
  spec::HybridConfig hybrid{};

  /// Each layer's choice for a model of n_layers: `layers` when set, else (K, L, t) with the
  /// dense layers dense.
  std::vector<LayerLsh> LayerChoices(size_t n_layers) const;

  /// The method's name ("magicpig"): spec::name(method).
  const char *method_name() const { return spec::name(method); }
  /// "magicpig K=10 L=150 t=2 sink=4 local=64 dense={0,15} kv=bf16" (after defaults resolve).
  std::string str(size_t n_layers) const;
  /// The dense layers for a model of n_layers (validated: each < n_layers; from `layers` when
  /// set).
  std::vector<size_t> DenseLayers(size_t n_layers) const;
  /// Throws std::invalid_argument with a message for an invalid (K, L, t),
  /// a budget outside (0, 1], a layer outside the model, per-layer choices that do not cover the
  /// model's layers exactly or are given together with dense layers.
  void Validate(size_t n_layers) const;
};

/// Throws std::invalid_argument, naming what is served, unless the runtime serves the hash
/// transform: plain or whiten:a=A (AttentionSpec::transform).
void CheckServedTransform(const spec::TransformSpec &t);
/// spec::TransformSpec::parse, then CheckServedTransform: what a tool's flag takes.
spec::TransformSpec ParseServedTransform(std::string_view text);

/// The shortest context at which a magicpig decode step of `spec` costs less than a dense one on
/// this machine, for one layer of shape's kv-heads and group: both are timed on a pool of the
/// machine's threads (the split of the kv-heads over them is part of the cost) over synthetic
/// keys (a fixed seed; a shared offset plus noise, as real keys have) at 512, 1024, ..., 8192
/// positions, and the crossing interpolated between the two probes around it; 16384 when
/// sampling was slower at every probe. Measured once per process for each (K, L, t, sink, local,
/// transform, schedule, kv-heads, group, head dim, KV type) and remembered (well under a second);
/// timings vary between runs, so a run that must be reproduced pins dense_below.
size_t MeasuredDenseCrossover(const AttentionSpec &spec, const AttentionShape &shape);

/// Throws std::invalid_argument naming what a sparse method (every method but dense) does not
/// serve yet in `shape`: soft-capped logits (Gemma 2). Dense attention serves them.
void CheckSparseServes(const AttentionSpec &spec, const AttentionShape &shape);

/// The spec a sparse method decodes `shape` with: its layers with a sliding window (Mistral,
/// Gemma's local layers) dense, so that they stay exact and windowed and sampling applies to the
/// layers that attend globally. The spec itself when no layer has a window.
AttentionSpec LocalLayersDense(const AttentionSpec &spec, const AttentionShape &shape);

/// Builds the Attention a spec names for a model shape, its KV store over `pool` (a pool of the
/// spec's kv_dtype several sequences share: LlamaBatch::KvPoolOf) or, when null, over a pool of
/// its own. Throws std::invalid_argument as AttentionSpec::Validate, when no kernel serves the
/// head dim, or for a pool of another shape or dtype; std::length_error when the pool cannot
/// reserve the capacity's blocks.
std::unique_ptr<Attention> MakeAttention(const AttentionSpec &spec, const AttentionShape &shape,
                                         std::shared_ptr<KvPool> pool = nullptr);

/// MakeAttention(spec, shape)->ReservedBytes() right after construction, without allocating
/// anything: what admitting a sequence costs a memory budget, decided before its KV store exists
/// (a request for 10^9 tokens is refused, not allocated). Throws std::invalid_argument as
/// MakeAttention does, and std::length_error when the size does not fit in a size_t (it never
/// wraps).
size_t ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape);

} // namespace pig::runtime
