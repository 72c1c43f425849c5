// The decoder-only transformers pig serves, read from a GGUF file: Llama 2/3 (and Mistral, which
// llama.cpp writes as llama), Qwen 2/2.5 (q/k/v biases), Qwen 3 (q/k norms), Gemma 2/3 (local and
// global layers, soft-capping, norms after each block, scaled embeddings, GeGLU) and Phi-3 (fused
// projections). Configuration from metadata, weights as views into the mapping (never dequantised
// as a whole), and one forward pass for all of them: RMSNorm, RoPE (ggml's adjacent pairs or the
// NEOX halves), grouped-query attention through an Attention, a gated feed-forward, tied or
// separate output embedding. What a file asks for that pig does not compute is refused at load,
// naming the key. Prefill runs whole chunks of tokens through matrix-matrix kernels; decode runs
// one token per sequence, for one sequence (LlamaSession) or many together, mixed with other
// sequences' prompt chunks (LlamaBatch). docs/MODELS.md lists what is tested for each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/gguf.h"
#include "pig/runtime/index_share.h"
#include "pig/runtime/ops.h"
#include "pig/runtime/prefix_cache.h"
#include "pig/runtime/thread_pool.h"
#include "pig/runtime/tokenizer.h"

namespace pig::runtime {

// The default model path (./pig installs it; CMake's PIG_MODEL).
const char *DefaultModelPath();

struct LlamaConfig {
  std::string arch;
  size_t n_layers = 0, dim = 0, ffn_dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t q_dim = 0; // n_heads * head_dim: dim, unless the file gives attention.key_length
  size_t vocab = 0, context_length = 0, rope_dim = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  std::string rope_scaling = "none";    // none, linear or yarn (rope.scaling.type, or flags)
  float rope_linear_scale = 1.0f;       // positions are divided by this ("linear" scaling)
  std::vector<float> rope_freq_factors; // per rotary pair (Llama 3.1 "rope_freqs"), or empty
  // YaRN (transformers' rope_type "yarn"): the factor, the context trained before it, and the
  // ramp's rotation bounds; cos and sin are multiplied by rope_attn_factor (0.1 ln factor + 1).
  float yarn_factor = 1.0f, yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f;
  size_t yarn_orig_ctx = 0;
  float rope_attn_factor = 1.0f;
  // Rotary layout: false, ggml's "normal" (adjacent pairs x[2i], x[2i+1]: llama, whose converter
  // permutes Q and K's rows to it); true, NEOX (x[i], x[i + rope_dim / 2]: every other family).
  bool rope_neox = false;
  // Local (windowed) layers' rotary base, with neither linear scaling nor frequency factors
  // (Gemma 3: rope.freq_base_swa, 10000); 0: every layer rotates as the global ones.
  float rope_base_local = 0;
  std::vector<std::uint32_t> windows; // per layer: sliding window (0: global); empty: none
  float attn_scale = 0;               // the logits' scale; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0;             // attention logits c tanh(s / c) (Gemma 2); 0: none
  float final_softcap = 0;            // output logits the same (Gemma 2); 0: none
  float embed_scale = 1;              // the token embedding's factor (Gemma: sqrt(dim))
  bool gelu = false; // the gate's activation: GELU (tanh approximation, Gemma), else SiLU

  // The attention shape of this model for `capacity` positions (windows, scale, soft-capping).
  AttentionShape Shape(size_t capacity) const;
  bool Local(size_t layer) const { return layer < windows.size() && windows[layer] != 0; }
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv;                     // empty when the model has no biases
  std::vector<float> q_norm, k_norm;                 // per-head RMSNorm (head_dim), or empty
  std::vector<float> attn_post_norm, ffn_post_norm;  // after each block (Gemma), or empty
  WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down; // views (Phi-3: of the fused matrices)
};

/// What a user sets over the file's metadata at load (pig-run's --rope-scaling, --rope-scale,
/// --yarn-orig-ctx): RoPE scaling as llama.cpp offers it. Unset fields keep the file's.
struct ModelOverrides {
  std::string rope_scaling; ///< none, linear or yarn; "": the file's rope.scaling.type
  float rope_scale = 0;     ///< the factor; 0: the file's rope.scaling.factor
  size_t yarn_orig_ctx = 0; ///< YaRN's trained context; 0: the file's, else its context_length
};

class LlamaModel {
public:
  /// Throws GgufError naming the file and the key of anything it does not serve.
  static std::unique_ptr<LlamaModel> Load(const std::string &path,
                                          const ModelOverrides &overrides = {});

  const LlamaConfig &config() const { return cfg_; }
  const Tokenizer &tokenizer() const { return *tokenizer_; }
  const GgufFile &file() const { return *file_; }
  const LayerWeights &layer(size_t i) const { return layers_[i]; }
  const WeightMatrix &token_embedding() const { return tok_embd_; }
  const WeightMatrix &output() const { return output_; }
  const std::vector<float> &output_norm() const { return output_norm_; }
  // Bytes of weights one decode step streams from memory (every matrix once, one embedding
  // row, the norms).
  size_t WeightBytesPerToken() const;
  // Summary of the weight types, e.g. "Q4_1 x210, Q8_0 x1".
  std::string WeightTypesSummary() const;
  // The matrices repacked at load for the integer path's packed kernels (ops.h, PackRows16:
  // where the best kernels have a packed path, for Q4_0 / Q4_1 / Q8_0 matrices of 16k rows):
  // their bytes (the file's own pages of them are released) and the seconds packing took.
  size_t PackedBytes() const;
  double PackSeconds() const { return pack_seconds_; }

private:
  LlamaModel() = default;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::vector<uint8_t>> packed_;
  double pack_seconds_ = 0;
  void Pack();
  LlamaConfig cfg_;
  std::vector<LayerWeights> layers_;
  WeightMatrix tok_embd_, output_;
  std::vector<float> output_norm_;
};

// Rows of the next prefill chunk of a prompt with `remaining` tokens still to run, in chunks of at
// most max_rows: min(remaining, max_rows), except that a chunk never leaves exactly one token
// behind (it takes max_rows - 1, and the last chunk two). A chunk of one row is a decode row to
// the forward pass: the integer weight path instead of the f32 one, and for magicpig a sparse
// decode step (even the index build) for a prompt token that must be attended densely. Only a
// prompt of one token, or max_rows < 3, still gives one-row chunks. remaining == 0 gives 0.
size_t PrefillChunk(size_t remaining, size_t max_rows);

// The layer loop of the forward pass, shared by LlamaSession (one sequence, consecutive
// positions) and LlamaBatch (one row per sequence). A call runs R rows of activations through
// every layer at once, so each weight matrix is streamed from memory once for all R rows. Rows
// are grouped in spans: consecutive rows of one sequence at consecutive positions, attended
// through that sequence's Attention (one Attention::Forward call per span and layer). Each row
// gets RoPE at its own position.
//
// Decode rows (spans of one row) take the path set by set_decode_path (the integer path of ops.h
// by default, where the weight type has one: Q4_0, Q4_1, Q8_0, Q4_K, Q6_K); rows of longer spans
// (prefill chunks) the path set by set_prefill_path (the f32 one by default). Both
// paths give a row the same bits whatever the other rows are, and the path depends only on the
// row's own span, so a sequence decoded in a batch of any size, beside other sequences' prefill
// chunks, gets the logits bit for bit that it gets alone, and a prefill chunk gets those it gets
// alone (batch_test).
class LlamaForward {
public:
  struct Span {
    Attention *attention = nullptr;
    size_t pos = 0;     // position of the span's first row
    size_t n = 0;       // rows
    bool logits = true; // kLastOfSpan: whether the span's last row goes through the output
  };
  enum class Logits {
    kNone,       // no output projection
    kLastOfSpan, // the last row of every span whose `logits` is set, in span order
    kAll,        // every row
  };

  // max_rows: the most rows one Run takes (scratch buffers are sized for it).
  LlamaForward(const LlamaModel &model, ThreadPool &pool, size_t max_rows);

  // Runs the rows of `spans` (tokens: one per row, spans in order) through the model and writes
  // the logits rows `which` selects (vocab floats each) to `logits`. Appends each row's keys and
  // values to its span's Attention. The caller has validated tokens and capacities; throws
  // std::invalid_argument for an empty span, a span without Attention, or over max_rows() rows.
  void Run(const int32_t *tokens, const Span *spans, size_t n_spans, Logits which, float *logits);

  // Runs n tokens of one sequence at positions [pos, pos + n) in chunks of at most max_rows()
  // rows (PrefillChunk: no one-row chunk unless n == 1): logits of the last token (vocab
  // floats), or of every token when all_logits (n x vocab);
  // `progress(done, n)` after each chunk. The caller has validated the tokens (CheckTokens) and
  // the capacity.
  void RunSequence(Attention &attention, size_t pos, const int32_t *tokens, size_t n, float *logits,
                   bool all_logits, const std::function<void(size_t, size_t)> &progress);

  // Throws std::out_of_range naming the first token id outside [0, vocab).
  void CheckTokens(const int32_t *tokens, size_t n) const;

  // The path of decode rows (ops.h): kInteger (the default, and what LlamaSession decodes with)
  // or kFloat (the f32 kernels on dequantised rows). Either way a row's result does not depend on
  // the other rows; the two paths differ from each other by rounding. Throws std::invalid_argument
  // for kAuto (it would pick by row count, and a row's logits would depend on its batch).
  void set_decode_path(MatMulPath path);
  MatMulPath decode_path() const { return decode_path_; }
  // Whether a layer's decode rows of several sequences hash in one encode (BatchAttention::Run's
  // batch_hash; the default): the same output either way.
  void set_batch_hash(bool on) { batch_hash_ = on; }
  // The path of prompt chunks: kFloat (the default: prefill logits within 1e-4 of transformers,
  // Parity.LogitsOfFirst64Positions) or kInteger (kAuto means it too): 2.5x faster prefill on
  // AVX-512 VNNI, logits within ~1e-3 of the row's largest
  // (docs/PERFORMANCE.md#weight-kernels-issue-48).
  void set_prefill_path(MatMulPath path) {
    prefill_path_ = path == MatMulPath::kFloat ? path : MatMulPath::kInteger;
  }
  MatMulPath prefill_path() const { return prefill_path_; }
  size_t max_rows() const { return max_rows_; }
  ThreadPool &pool() const { return pool_; }
  size_t ScratchBytes() const;
  const Kernels &kernels() const { return kern_; }

private:
  // y_j (rows x w_j.rows) = x (rows x cols) * w_j^T for every job (MatMulShared on scratch_).
  void MatMulRows(const MatMulJob *jobs, size_t n_jobs, const float *x, size_t rows);
  // Rotates the n_heads heads of x (one row) by the angles of row `row` (rope_cs_) for `layer`
  // (local layers may have rotary angles of their own).
  void Rope(float *x, size_t n_heads, size_t row, size_t layer) const;
  // The attention of one layer for every span (q_, k_, v_ in, att_ out): model.cpp.
  void Attend(size_t layer, const Span *spans, size_t n_spans);

  const LlamaModel &model_;
  ThreadPool &pool_;
  const Kernels &kern_;
  size_t max_rows_;
  std::vector<float> inv_freq_; // [table][pair]: table 0 global layers, 1 local ones
  size_t rope_tables_ = 1;
  std::vector<float> rope_cs_; // per row of a Run and table: (cos, sin) of each rotary pair
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
  MatMulPath decode_path_ = MatMulPath::kInteger;
  bool batch_hash_ = true;
  MatMulPath prefill_path_ = MatMulPath::kFloat;
  MatMulScratch scratch_;                // the integer path's quantised activations
  std::vector<uint8_t> decode_row_;      // per row of a Run: 1 for a decode row (a span of one)
  std::vector<AttendSpan> attend_spans_; // Attend: the layer's spans
  BatchAttention batch_attention_;
};

// One decoding state: position, KV store (via Attention), scratch buffers.
class LlamaSession {
public:
  // capacity: positions to allocate (the model's context length when 0). Without an attention:
  // DenseAttention with an f32 KV store (the exact configuration).
  LlamaSession(const LlamaModel &model, ThreadPool &pool, size_t capacity,
               std::unique_ptr<Attention> attention = nullptr);

  // Runs tokens at positions [position(), position() + n) and advances. Writes logits of the
  // last token to `logits` (vocab floats), or of every token when `all_logits` (n x vocab).
  // Long inputs are processed in chunks; `progress(done, total)` is called after each chunk.
  void Forward(const int32_t *tokens, size_t n, float *logits, bool all_logits = false,
               const std::function<void(size_t, size_t)> &progress = nullptr);
  size_t position() const { return pos_; }
  Attention &attention() { return *attn_; }
  const Attention &attention() const { return *attn_; }
  // Continues at `pos`: the caller has put positions [0, pos) into attention() (LoadPrefix).
  void SetPosition(size_t pos);
  size_t capacity() const { return capacity_; }
  void Reset();
  size_t MemoryBytes() const;
  const Kernels &kernels() const { return fwd_.kernels(); }
  void set_prefill_path(MatMulPath path) { fwd_.set_prefill_path(path); } // LlamaForward's
  static constexpr size_t kChunk = 128; // prefill tokens per matrix-matrix pass

private:
  std::unique_ptr<Attention> attn_;
  size_t capacity_ = 0, pos_ = 0;
  LlamaForward fwd_;
};

// Sequences of different lengths decoded together, a serving loop's state: each has its own
// Attention (KV store, LSH index) and position in a slot; slots are added and removed at any step
// (freed slots are reused, lowest first) up to a memory budget. Run takes decode rows of some
// sequences and prompt chunks of others in one forward pass, streaming the weights once for the
// decode rows and once for the prompt chunks; every row's logits are bit-identical to running its
// sequence alone (see LlamaForward). Every error (unknown sequence, full context, bad token,
// budget, malformed step) throws before any state changes.
struct LlamaBatchOptions {
  size_t max_rows = 256;    // rows one Run takes (decode rows plus prompt tokens)
  size_t memory_budget = 0; // bytes all sequences' Attentions may reserve (KV + index at full
                            // capacity: Attention::ReservedBytes); 0: no limit
  // Decode rows' weight path (LlamaForward::set_decode_path): kInteger gives every sequence the
  // logits of decoding it alone with LlamaSession; kFloat the same logits in any batch of this
  // engine, up to rounding from LlamaSession's.
  MatMulPath decode_path = MatMulPath::kInteger;
  // Decode rows of several sequences hash their keys and queries in one encode per layer
  // (BatchAttention, HashBatch); off: each sequence hashes its own (the same logits either way).
  bool batch_hash = true;
  // Prompt prefixes shared across sequences (PrefixCache, one per KV pool): AttachCachedPrefix
  // finds a prompt's longest cached prefix and attaches its KV blocks; CachePrompt caches a
  // prefilled prompt's full blocks.
  bool prefix_cache = false;
  size_t prefix_cache_bytes = 0; // the most KV bytes each cache holds (0: the pool's limit)
  // The disk tier (PrefixCache::SetDisk): a directory ("": none), its size limit (0: none), and
  // the model file's identity (FileHash), which names the blocks with the model's shape.
  std::string prefix_cache_dir = {};
  size_t prefix_cache_disk_bytes = 0;
  std::uint64_t model_id = 0;
};

class LlamaBatch {
public:
  using Options = LlamaBatchOptions;
  // One unit of a step: n tokens of sequence seq at its position (n == 1: a decode row; more: a
  // prompt chunk), which then advances by n. logits: the last token's logits (vocab floats), or
  // null when they are not wanted (a prompt chunk before the last: no output projection).
  struct Work {
    size_t seq = 0;
    const int32_t *tokens = nullptr;
    size_t n = 0;
    float *logits = nullptr;
  };
  struct SequenceMemory {
    size_t kv = 0, index = 0; // the KV store's bytes; the rest of the Attention (LSH tables)
  };

  LlamaBatch(const LlamaModel &model, ThreadPool &pool, Options options);
  // Adds each attention in order (sequences 0 .. n-1), with default options unless given.
  LlamaBatch(const LlamaModel &model, ThreadPool &pool,
             std::vector<std::unique_ptr<Attention>> attentions, Options options = {});

  // The KV pool of one element type that this batch's sequences share (made at the first call):
  // MakeAttention(spec, shape, KvPoolOf(spec.kv_dtype)) builds a sequence whose KV store takes
  // blocks from it as it grows, so the memory a sequence holds is what it has used. Its size is
  // the memory budget's blocks (no limit without a budget): the budget admits sequences (Add).
  std::shared_ptr<KvPool> KvPoolOf(lsh::DType dtype);
  // The bytes the pools have committed: the most blocks their sequences held at once.
  size_t KvResidentBytes() const;

  // Options::prefix_cache. A new sequence (position 0, over KvPoolOf's pool) attaches the KV
  // blocks of the longest cached prefix of its prompt tokens[0, n) and continues after them:
  // returns that position (0: no hit, or no cache). Prefilling the rest gives the logits of
  // prefilling the whole prompt, bit for bit.
  size_t AttachCachedPrefix(size_t seq, const int32_t *tokens, size_t n);
  // Caches the full blocks of sequence seq's prompt tokens[0, n), which it has prefilled (with
  // chunks of two rows or more: PrefillChunk's; the rows of a decode step are not a prompt's).
  void CachePrompt(size_t seq, const int32_t *tokens, size_t n);
  // The prefix caches' counters, summed over the pools (zero without Options::prefix_cache).
  PrefixCache::Stats PrefixStats() const;
  // The LSH indexes shared over cached prefixes (index_share.h; magicpig with a mean window),
  // summed over the pools.
  IndexShare::Stats SharedIndexStats() const;
  // Evicts every cached prefix no sequence holds, and forgets the indexes shared over them.
  void ClearPrefixCache();
  // Evicts cached prefixes no sequence holds, least recently used first, until `bytes` are given
  // back or none is left; returns the bytes given back.
  size_t EvictPrefix(size_t bytes);

  // Adds a sequence (e.g. MakeAttention(spec, shape)); its capacity is the Attention's. Returns
  // its id, the lowest free slot. Throws std::invalid_argument for a null Attention or a shape
  // that does not match the model, std::length_error when the budget would be exceeded.
  size_t Add(std::unique_ptr<Attention> attention);
  // Frees sequence seq's slot and returns its Attention; the others are untouched.
  std::unique_ptr<Attention> Remove(size_t seq);

  // One forward pass over n_work items of distinct sequences (decode rows and prompt chunks in
  // any mix and order). Throws std::out_of_range for an unknown sequence or token id,
  // std::invalid_argument for no items, an empty item, a sequence named twice or more than
  // max_rows rows, std::runtime_error naming the sequence when it would exceed its capacity.
  void Run(const Work *work, size_t n_work);

  // Runs n tokens of sequence `seq` alone (chunked by max_rows) and advances it. Writes the last
  // token's logits (vocab floats) when `logits` is not null.
  void Prefill(size_t seq, const int32_t *tokens, size_t n, float *logits);
  // One decode step of m distinct sequences seqs[0..m): tokens[i] goes to seqs[i]; logits row i
  // (m x vocab) belongs to seqs[i] (not written when `logits` is null). Run's errors.
  void Step(const int32_t *tokens, const size_t *seqs, size_t m, float *logits);

  size_t size() const { return live_; }         // sequences
  size_t slots() const { return seqs_.size(); } // ids in use or free: ids are < slots()
  bool contains(size_t seq) const { return seq < seqs_.size() && seqs_[seq].attn != nullptr; }
  size_t position(size_t seq) const { return At(seq).pos; }
  size_t capacity(size_t seq) const { return At(seq).capacity; }
  Attention &attention(size_t seq) { return *At(seq).attn; }
  const Attention &attention(size_t seq) const { return *At(seq).attn; }
  SequenceMemory Memory(size_t seq) const;
  // Continues sequence `seq` at `pos`: the caller has put positions [0, pos) into its
  // attention() (LoadPrefix). Throws std::runtime_error beyond the capacity.
  void SetPosition(size_t seq, size_t pos);
  // Forgets sequence `seq`'s tokens (position 0, empty KV store); it keeps its slot.
  void Reset(size_t seq);
  // Scratch plus every sequence's Attention.
  size_t MemoryBytes() const;
  const Options &options() const { return opts_; }
  const Kernels &kernels() const { return fwd_.kernels(); }
  // LlamaForward's; cached prefixes were computed on the other path: the caches take a new salt.
  void set_prefill_path(MatMulPath path);

private:
  struct Sequence {
    std::unique_ptr<Attention> attn;
    size_t pos = 0, capacity = 0;
  };
  const Sequence &At(size_t seq) const;
  Sequence &At(size_t seq) { return const_cast<Sequence &>(std::as_const(*this).At(seq)); }
  size_t ReservedAttentionBytes() const; // what the budget counts

  const LlamaModel &model_;
  Options opts_;
  std::vector<std::shared_ptr<KvPool>> pools_;       // KvPoolOf's, one per element type in use
  std::vector<std::unique_ptr<PrefixCache>> prefix_; // [pool], with Options::prefix_cache
  PrefixCache *PrefixOf(size_t seq);
  std::uint64_t PrefixSalt() const; // the model, its identity, the prefill path
  std::vector<Sequence> seqs_;
  size_t live_ = 0;
  LlamaForward fwd_;
  // Per-step buffers, grown on use (a steady serving loop allocates nothing per step).
  std::vector<LlamaForward::Span> spans_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  std::vector<uint8_t> named_;
  std::vector<Work> work_;
};

} // namespace pig::runtime
