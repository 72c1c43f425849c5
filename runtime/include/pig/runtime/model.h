// Llama-family model (llama, and qwen2's q/k/v biases) read from a GGUF file: configuration
// from metadata, weights as views into the mapping (never dequantised as a whole), and the
// forward pass: RMSNorm, RoPE, grouped-query attention through an Attention, SwiGLU, tied or
// separate output embedding. Prefill runs whole chunks of tokens through matrix-matrix
// kernels; decode runs one token per sequence, for one sequence (LlamaSession) or up to 16
// together (LlamaBatch).
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
#include "pig/runtime/ops.h"
#include "pig/runtime/thread_pool.h"
#include "pig/runtime/tokenizer.h"

namespace pig::runtime {

// The default model path (./pig installs it; CMake's PIG_MODEL).
const char *DefaultModelPath();

struct LlamaConfig {
  std::string arch;
  size_t n_layers = 0, dim = 0, ffn_dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t vocab = 0, context_length = 0, rope_dim = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_linear_scale = 1.0f;       // positions are divided by this ("linear" scaling)
  std::vector<float> rope_freq_factors; // per rotary pair (Llama 3.1 "rope_freqs"), or empty
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv; // empty when the model has no biases
  WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

class LlamaModel {
public:
  static std::unique_ptr<LlamaModel> Load(const std::string &path);

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

private:
  LlamaModel() = default;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  LlamaConfig cfg_;
  std::vector<LayerWeights> layers_;
  WeightMatrix tok_embd_, output_;
  std::vector<float> output_norm_;
};

// The layer loop of the forward pass, shared by LlamaSession (one sequence, consecutive
// positions) and LlamaBatch (one row per sequence). A call runs R rows of activations through
// every layer at once, so each weight matrix is streamed from memory once for all R rows. Rows
// are grouped in spans: consecutive rows of one sequence at consecutive positions, attended
// through that sequence's Attention (one Attention::Forward call per span and layer). Each row
// gets RoPE at its own position.
//
// Decode steps (every span a single row) of up to kRowwiseMaxRows rows take the decode path row
// by row: each row's activations are quantised to int16 on their own and multiplied with the
// Q4_0 / Q4_1 / Q8_0 blocks by integer dots while the block is in cache, so such a sequence's
// logits do not depend on what it is batched with (bit-identical to decoding it alone). More rows,
// and prefill, take the f32 matrix-matrix kernels, which dequantise each weight block once for all
// rows: the integer dot costs about as much per row from cache as from memory (~10 of the 13.6
// CPU ms of a 135M Q4_1 step on AVX2), so past ~6 rows the one-off dequantisation is cheaper
// (CPU time per step, 1 thread, on the shared 2-core development machine: 4 rows 36 ms rowwise
// vs 49 ms f32, 8 rows 79 vs 64 ms).
class LlamaForward {
public:
  struct Span {
    Attention *attention = nullptr;
    size_t pos = 0; // position of the span's first row
    size_t n = 0;   // rows
  };
  static constexpr size_t kRowwiseMaxRows = 4;
  enum class Logits {
    kNone,       // no output projection
    kLastOfSpan, // the last row of every span, in span order
    kAll,        // every row
  };

  // max_rows: the most rows one Run takes (scratch buffers are sized for it).
  LlamaForward(const LlamaModel &model, ThreadPool &pool, size_t max_rows);

  // Runs the rows of `spans` (tokens: one per row, spans in order) through the model and writes
  // the logits rows `which` selects (vocab floats each) to `logits`. Appends each row's keys and
  // values to its span's Attention. The caller has validated tokens and capacities; throws
  // std::invalid_argument for an empty span, a span without Attention, or over max_rows() rows.
  void Run(const int32_t *tokens, const Span *spans, size_t n_spans, Logits which, float *logits);

  // Runs n tokens of one sequence at positions [pos, pos + n) in chunks of max_rows() rows:
  // logits of the last token (vocab floats), or of every token when all_logits (n x vocab);
  // `progress(done, n)` after each chunk. The caller has validated the tokens (CheckTokens) and
  // the capacity.
  void RunSequence(Attention &attention, size_t pos, const int32_t *tokens, size_t n, float *logits,
                   bool all_logits, const std::function<void(size_t, size_t)> &progress);

  // Throws std::out_of_range naming the first token id outside [0, vocab).
  void CheckTokens(const int32_t *tokens, size_t n) const;

  size_t max_rows() const { return max_rows_; }
  size_t ScratchBytes() const;
  const Kernels &kernels() const { return kern_; }

private:
  // y_j (rows x w_j.rows) = x (rows x cols) * w_j^T for every job; `rowwise`: one quantised
  // integer matrix-vector product per row (see the class comment).
  void MatMulRows(const MatMulJob *jobs, size_t n_jobs, const float *x, size_t rows, bool rowwise);
  // Rotates the n_heads heads of x (one row) by the angles of row `row` (rope_cs_).
  void Rope(float *x, size_t n_heads, size_t row) const;

  const LlamaModel &model_;
  ThreadPool &pool_;
  const Kernels &kern_;
  size_t max_rows_;
  std::vector<float> inv_freq_;
  std::vector<float> rope_cs_; // per row of a Run: (cos, sin) of each rotary pair
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
  std::vector<int16_t> xq_;      // rowwise steps: int16 activations, rows x cols (grown on use)
  std::vector<float> xs_, xsum_; // and their per-32-block scales and sums
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
  static constexpr size_t kChunk = 128; // prefill tokens per matrix-matrix pass

private:
  std::unique_ptr<Attention> attn_;
  size_t capacity_ = 0, pos_ = 0;
  LlamaForward fwd_;
};

// B sequences (1 <= B <= kMaxSequences) of different lengths decoded together: each has its own
// Attention (KV store) and position; Step runs the next token of any subset of them in one
// forward pass, streaming the weights once for all of them. Every error (unknown sequence, full
// context, bad token, malformed batch) throws before any state changes.
class LlamaBatch {
public:
  static constexpr size_t kMaxSequences = 16;

  // One Attention per sequence (e.g. MakeAttention(spec, shape) or DenseAttention); its shape
  // must match the model's, and its capacity is the sequence's. Throws std::invalid_argument for 0
  // or more than kMaxSequences attentions, a null one, or a shape that does not match the model.
  LlamaBatch(const LlamaModel &model, ThreadPool &pool,
             std::vector<std::unique_ptr<Attention>> attentions);

  // Runs n tokens of sequence `seq` at positions [position(seq), position(seq) + n) (chunked
  // like LlamaSession::Forward) and advances it. Writes the last token's logits (vocab floats)
  // when `logits` is not null.
  void Prefill(size_t seq, const int32_t *tokens, size_t n, float *logits);

  // One decode step of m distinct sequences seqs[0..m): tokens[i] goes to sequence seqs[i] at
  // its position, which then advances by one; logits row i (m x vocab) belongs to seqs[i]
  // (not written when `logits` is null).
  // Throws std::out_of_range for an unknown sequence or token id, std::invalid_argument for
  // m == 0 or a sequence named twice, std::runtime_error when a sequence's context is full.
  void Step(const int32_t *tokens, const size_t *seqs, size_t m, float *logits);

  size_t size() const { return seqs_.size(); }
  size_t position(size_t seq) const { return At(seq).pos; }
  size_t capacity(size_t seq) const { return At(seq).capacity; }
  Attention &attention(size_t seq) { return *At(seq).attn; }
  const Attention &attention(size_t seq) const { return *At(seq).attn; }
  // Forgets sequence `seq` (position 0, empty KV store).
  void Reset(size_t seq);
  size_t MemoryBytes() const;
  const Kernels &kernels() const { return fwd_.kernels(); }

private:
  struct Sequence {
    std::unique_ptr<Attention> attn;
    size_t pos = 0, capacity = 0;
  };
  const Sequence &At(size_t seq) const;
  Sequence &At(size_t seq) { return const_cast<Sequence &>(std::as_const(*this).At(seq)); }

  std::vector<Sequence> seqs_;
  LlamaForward fwd_;
  std::vector<LlamaForward::Span> spans_;
};

} // namespace pig::runtime
