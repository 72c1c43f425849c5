// Llama-family model (llama, and qwen2's q/k/v biases) read from a GGUF file: configuration
// from metadata, weights as views into the mapping (never dequantised as a whole), and the
// forward pass: RMSNorm, RoPE, grouped-query attention through an Attention, SwiGLU, tied or
// separate output embedding. Prefill runs whole chunks of tokens through matrix-matrix
// kernels; decode runs one token at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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

// One decoding state: position, KV store (via Attention), scratch buffers.
class LlamaSession {
public:
  // capacity: positions to allocate (clamped to the model's context length when 0).
  LlamaSession(const LlamaModel &model, ThreadPool &pool, size_t capacity,
               std::unique_ptr<Attention> attention = nullptr);

  // Runs tokens at positions [position(), position() + n) and advances. Writes logits of the
  // last token to `logits` (vocab floats), or of every token when `all_logits` (n x vocab).
  // Long inputs are processed in chunks; `progress(done, total)` is called after each chunk.
  void Forward(const int32_t *tokens, size_t n, float *logits, bool all_logits = false,
               const std::function<void(size_t, size_t)> &progress = nullptr);
  size_t position() const { return pos_; }
  size_t capacity() const { return capacity_; }
  void Reset();
  size_t MemoryBytes() const;
  const Kernels &kernels() const { return kern_; }
  static constexpr size_t kChunk = 128; // prefill tokens per matrix-matrix pass

private:
  void ForwardChunk(const int32_t *tokens, size_t n, float *logits, bool all_logits);
  void Rope(float *x, size_t n_heads, size_t pos) const;

  const LlamaModel &model_;
  ThreadPool &pool_;
  const Kernels &kern_;
  std::unique_ptr<Attention> attn_;
  size_t capacity_ = 0, pos_ = 0;
  std::vector<float> inv_freq_;
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
};

} // namespace pig::runtime
