#include "pig/runtime/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#ifndef PIG_DEFAULT_MODEL
#define PIG_DEFAULT_MODEL ""
#endif

namespace pig::runtime {
namespace {

WeightMatrix Matrix(const GgufFile &f, const std::string &name, size_t rows, size_t cols) {
  const GgufTensorInfo &t = f.Tensor(name);
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
    std::string dims;
    for (auto d : t.dims)
      dims += (dims.empty() ? "" : " x ") + std::to_string(d);
    throw GgufError(f.path() + ": tensor " + name + " has shape [" + dims + "], expected [" +
                    std::to_string(cols) + " x " + std::to_string(rows) + "]");
  }
  if (!GgmlInfo(t.type).supported) {
    throw GgufError(f.path() + ": tensor " + name + " has type " + GgmlTypeName(t.type) +
                    ", which pig cannot compute with (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K)");
  }
  return WeightMatrix{t.type, t.data, rows, cols, t.RowBytes()};
}

std::vector<float> Vector(const GgufFile &f, const std::string &name, size_t n) {
  const GgufTensorInfo &t = f.Tensor(name);
  if (t.n_elements != n) {
    throw GgufError(f.path() + ": tensor " + name + " has " + std::to_string(t.n_elements) +
                    " elements, expected " + std::to_string(n));
  }
  std::vector<float> v(n);
  DequantizeRowScalar(t.type, t.data, v.data(), n);
  return v;
}

} // namespace

const char *DefaultModelPath() { return PIG_DEFAULT_MODEL; }

std::unique_ptr<LlamaModel> LlamaModel::Load(const std::string &path) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = GgufFile::Open(path);
  const GgufFile &f = *m->file_;
  LlamaConfig &c = m->cfg_;
  c.arch = std::string(f.GetString("general.architecture"));
  if (c.arch != "llama" && c.arch != "qwen2") {
    throw GgufError(path + ": architecture '" + c.arch + "' is not supported (llama, qwen2)");
  }
  const std::string a = c.arch + ".";
  c.n_layers = f.GetUint(a + "block_count");
  c.dim = f.GetUint(a + "embedding_length");
  c.ffn_dim = f.GetUint(a + "feed_forward_length");
  c.n_heads = f.GetUint(a + "attention.head_count");
  c.n_kv_heads = f.GetUint(a + "attention.head_count_kv", c.n_heads);
  c.context_length = f.GetUint(a + "context_length", 4096);
  c.rms_eps = float(f.GetFloat(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = float(f.GetFloat(a + "rope.freq_base", 10000.0));
  auto bad = [&](const std::string &what) { throw GgufError(path + ": " + what); };
  if (c.n_layers == 0 || c.n_layers > 1024 || c.dim == 0 || c.dim > (1 << 16) || c.n_heads == 0 ||
      c.n_kv_heads == 0 || c.ffn_dim == 0 || c.ffn_dim > (1 << 18)) {
    bad("implausible model dimensions in the metadata");
  }
  if (c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0) {
    bad("head counts do not divide the embedding size");
  }
  c.head_dim = c.dim / c.n_heads;
  c.rope_dim = f.GetUint(a + "rope.dimension_count", c.head_dim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2)
    bad("invalid rope.dimension_count");
  const std::string scaling(f.GetString(a + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    c.rope_linear_scale = float(f.GetFloat(a + "rope.scaling.factor", 1.0));
  } else if (scaling != "none" && scaling != "") {
    bad("rope scaling '" + scaling + "' is not supported (none, linear, rope_freqs)");
  }
  if (f.FindTensor("rope_freqs.weight")) {
    c.rope_freq_factors = Vector(f, "rope_freqs.weight", c.rope_dim / 2);
  }

  m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::FromGguf(f));
  c.vocab = m->tokenizer_->vocab_size();
  const size_t kv_dim = c.n_kv_heads * c.head_dim;
  m->tok_embd_ = Matrix(f, "token_embd.weight", c.vocab, c.dim);
  m->output_ = f.FindTensor("output.weight") ? Matrix(f, "output.weight", c.vocab, c.dim)
                                             : m->tok_embd_; // tied embeddings
  m->output_norm_ = Vector(f, "output_norm.weight", c.dim);
  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = Vector(f, p + "attn_norm.weight", c.dim);
    w.ffn_norm = Vector(f, p + "ffn_norm.weight", c.dim);
    w.wq = Matrix(f, p + "attn_q.weight", c.dim, c.dim);
    w.wk = Matrix(f, p + "attn_k.weight", kv_dim, c.dim);
    w.wv = Matrix(f, p + "attn_v.weight", kv_dim, c.dim);
    w.wo = Matrix(f, p + "attn_output.weight", c.dim, c.dim);
    w.w_gate = Matrix(f, p + "ffn_gate.weight", c.ffn_dim, c.dim);
    w.w_up = Matrix(f, p + "ffn_up.weight", c.ffn_dim, c.dim);
    w.w_down = Matrix(f, p + "ffn_down.weight", c.dim, c.ffn_dim);
    if (f.FindTensor(p + "attn_q.bias")) {
      w.bq = Vector(f, p + "attn_q.bias", c.dim);
      w.bk = Vector(f, p + "attn_k.bias", kv_dim);
      w.bv = Vector(f, p + "attn_v.bias", kv_dim);
    }
    m->layers_.push_back(std::move(w));
  }
  return m;
}

size_t LlamaModel::WeightBytesPerToken() const {
  auto bytes = [](const WeightMatrix &w) { return w.rows * w.row_bytes; };
  size_t total = tok_embd_.row_bytes + bytes(output_) + output_norm_.size() * 4;
  for (const auto &l : layers_) {
    total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.w_gate) +
             bytes(l.w_up) + bytes(l.w_down) + (l.attn_norm.size() + l.ffn_norm.size()) * 4;
  }
  return total;
}

std::string LlamaModel::WeightTypesSummary() const {
  std::map<std::string, int> n;
  for (const auto &t : file_->tensors())
    ++n[GgmlTypeName(t.type)];
  std::string s;
  for (const auto &[name, count] : n) {
    s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  return s;
}

LlamaSession::LlamaSession(const LlamaModel &model, ThreadPool &pool, size_t capacity,
                           std::unique_ptr<Attention> attention)
    : model_(model), pool_(pool), kern_(BestKernels()), attn_(std::move(attention)) {
  const LlamaConfig &c = model.config();
  capacity_ = capacity ? capacity : c.context_length;
  if (!attn_) {
    attn_ = std::make_unique<DenseAttention>(
        AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, capacity_});
  }
  for (size_t i = 0; i < c.rope_dim / 2; ++i) {
    float f = std::pow(c.rope_base, -2.0f * float(i) / float(c.rope_dim));
    if (!c.rope_freq_factors.empty())
      f /= c.rope_freq_factors[i];
    inv_freq_.push_back(f / c.rope_linear_scale);
  }
  const size_t n = kChunk, kv = c.n_kv_heads * c.head_dim;
  x_.resize(n * c.dim);
  xb_.resize(n * c.dim);
  q_.resize(n * c.dim);
  att_.resize(n * c.dim);
  k_.resize(n * kv);
  v_.resize(n * kv);
  hb_.resize(n * c.ffn_dim);
  hb2_.resize(n * c.ffn_dim);
}

void LlamaSession::Reset() {
  pos_ = 0;
  attn_->Reset();
}

size_t LlamaSession::MemoryBytes() const {
  return attn_->MemoryBytes() + (x_.size() + xb_.size() + q_.size() + att_.size() + k_.size() +
                                 v_.size() + hb_.size() + hb2_.size()) *
                                    sizeof(float);
}

// GGUF stores Q and K for ggml's "normal" rotary layout: each head rotates adjacent pairs
// (x[2i], x[2i+1]) by pos * inv_freq[i].
void LlamaSession::Rope(float *x, size_t n_heads, size_t pos) const {
  const size_t hd = model_.config().head_dim;
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = double(pos) * double(inv_freq_[i]);
    const float cs = float(std::cos(angle)), sn = float(std::sin(angle));
    for (size_t h = 0; h < n_heads; ++h) {
      float *p = x + h * hd + 2 * i;
      const float a = p[0], b = p[1];
      p[0] = a * cs - b * sn;
      p[1] = a * sn + b * cs;
    }
  }
}

void LlamaSession::Forward(const int32_t *tokens, size_t n, float *logits, bool all_logits,
                           const std::function<void(size_t, size_t)> &progress) {
  const size_t vocab = model_.config().vocab;
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || size_t(tokens[i]) >= vocab) {
      throw std::out_of_range("token id " + std::to_string(tokens[i]) + " outside the vocabulary");
    }
  }
  if (pos_ + n > capacity_) {
    throw std::runtime_error("context full: " + std::to_string(pos_ + n) + " tokens, capacity " +
                             std::to_string(capacity_));
  }
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = std::min(kChunk, n - done);
    const bool last = done + m == n;
    float *out = all_logits ? logits + done * vocab : (last ? logits : nullptr);
    ForwardChunk(tokens + done, m, out, all_logits);
    if (progress)
      progress(done + m, n);
  }
}

void LlamaSession::ForwardChunk(const int32_t *tokens, size_t n, float *logits, bool all_logits) {
  const LlamaConfig &c = model_.config();
  const size_t dim = c.dim, kv = c.n_kv_heads * c.head_dim, ffn = c.ffn_dim;
  const WeightMatrix &emb = model_.token_embedding();
  for (size_t i = 0; i < n; ++i) {
    kern_.dequant_row(emb.type, emb.data + size_t(tokens[i]) * emb.row_bytes, &x_[i * dim], dim);
  }
  auto add_bias = [n](float *y, const std::vector<float> &b) {
    if (b.empty())
      return;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < b.size(); ++j)
        y[i * b.size() + j] += b[j];
    }
  };
  for (size_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights &w = model_.layer(l);
    for (size_t i = 0; i < n; ++i) {
      kern_.rms_norm(&x_[i * dim], w.attn_norm.data(), &xb_[i * dim], dim, c.rms_eps);
    }
    const MatMulJob qkv[] = {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}};
    MatMulShared(pool_, kern_, qkv, 3, xb_.data(), n);
    add_bias(q_.data(), w.bq);
    add_bias(k_.data(), w.bk);
    add_bias(v_.data(), w.bv);
    for (size_t i = 0; i < n; ++i) {
      Rope(&q_[i * dim], c.n_heads, pos_ + i);
      Rope(&k_[i * kv], c.n_kv_heads, pos_ + i);
    }
    attn_->Forward(l, pos_, n, q_.data(), k_.data(), v_.data(), att_.data(), pool_, kern_);
    MatMul(pool_, kern_, w.wo, att_.data(), n, xb_.data());
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];

    for (size_t i = 0; i < n; ++i) {
      kern_.rms_norm(&x_[i * dim], w.ffn_norm.data(), &xb_[i * dim], dim, c.rms_eps);
    }
    const MatMulJob gate_up[] = {{&w.w_gate, hb_.data()}, {&w.w_up, hb2_.data()}};
    MatMulShared(pool_, kern_, gate_up, 2, xb_.data(), n);
    for (size_t i = 0; i < n; ++i)
      kern_.swiglu(&hb_[i * ffn], &hb2_[i * ffn], ffn);
    MatMul(pool_, kern_, w.w_down, hb_.data(), n, xb_.data());
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];
  }
  pos_ += n;
  if (!logits)
    return;
  // Only the rows whose logits are wanted go through the (large) output projection.
  const size_t first = all_logits ? 0 : n - 1;
  const size_t rows = n - first;
  for (size_t i = first; i < n; ++i) {
    kern_.rms_norm(&x_[i * dim], model_.output_norm().data(), &xb_[(i - first) * dim], dim,
                   c.rms_eps);
  }
  MatMul(pool_, kern_, model_.output(), xb_.data(), rows, logits);
}

} // namespace pig::runtime
