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

namespace {

bool HasInt16Path(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ8_0;
}

// Row blocks per matrix as MatMulShared cuts them: several per thread (dynamic balancing),
// multiples of 16 rows.
size_t RowBlock(const ThreadPool &pool, size_t rows) {
  const size_t threads = pool.size();
  const size_t block = (rows + threads * 4 - 1) / (threads * 4);
  return std::max<size_t>(16, (block + 15) / 16 * 16);
}

} // namespace

LlamaForward::LlamaForward(const LlamaModel &model, ThreadPool &pool, size_t max_rows)
    : model_(model), pool_(pool), kern_(BestKernels()), max_rows_(max_rows) {
  if (max_rows == 0)
    throw std::invalid_argument("LlamaForward: max_rows must be at least 1");
  const LlamaConfig &c = model.config();
  for (size_t i = 0; i < c.rope_dim / 2; ++i) {
    float f = std::pow(c.rope_base, -2.0f * float(i) / float(c.rope_dim));
    if (!c.rope_freq_factors.empty())
      f /= c.rope_freq_factors[i];
    inv_freq_.push_back(f / c.rope_linear_scale);
  }
  const size_t n = max_rows, kv = c.n_kv_heads * c.head_dim;
  rope_cs_.resize(n * inv_freq_.size() * 2);
  x_.resize(n * c.dim);
  xb_.resize(n * c.dim);
  q_.resize(n * c.dim);
  att_.resize(n * c.dim);
  k_.resize(n * kv);
  v_.resize(n * kv);
  hb_.resize(n * c.ffn_dim);
  hb2_.resize(n * c.ffn_dim);
}

size_t LlamaForward::ScratchBytes() const {
  return (rope_cs_.size() + x_.size() + xb_.size() + q_.size() + att_.size() + k_.size() +
          v_.size() + hb_.size() + hb2_.size() + xs_.size() + xsum_.size()) *
             sizeof(float) +
         xq_.size() * sizeof(int16_t);
}

void LlamaForward::CheckTokens(const int32_t *tokens, size_t n) const {
  const size_t vocab = model_.config().vocab;
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || size_t(tokens[i]) >= vocab) {
      throw std::out_of_range("token id " + std::to_string(tokens[i]) +
                              " outside the vocabulary (" + std::to_string(vocab) + " tokens)");
    }
  }
}

// GGUF stores Q and K for ggml's "normal" rotary layout: each head rotates adjacent pairs
// (x[2i], x[2i+1]) by pos * inv_freq[i]. The angles of a row are computed once per Run (every
// layer rotates by the same ones).
void LlamaForward::Rope(float *x, size_t n_heads, size_t row) const {
  const size_t hd = model_.config().head_dim, pairs = inv_freq_.size();
  const float *cs = &rope_cs_[row * pairs * 2];
  for (size_t i = 0; i < pairs; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    for (size_t h = 0; h < n_heads; ++h) {
      float *p = x + h * hd + 2 * i;
      const float a = p[0], b = p[1];
      p[0] = a * c - b * s;
      p[1] = a * s + b * c;
    }
  }
}

void LlamaForward::MatMulRows(const MatMulJob *jobs, size_t n_jobs, const float *x, size_t rows,
                              bool rowwise) {
  bool int16 = rowwise && rows > 1;
  for (size_t j = 0; j < n_jobs; ++j)
    int16 = int16 && HasInt16Path(jobs[j].w->type) && jobs[j].w->cols == jobs[0].w->cols;
  if (!int16) { // one row: MatMulShared's own decode path; prefill rows: f32 matrix-matrix
    MatMulShared(pool_, kern_, jobs, n_jobs, x, rows);
    return;
  }
  // Every row quantised on its own, exactly as MatMulShared quantises a single decode vector, so
  // each row's result is the one it would get alone. The rows of a weight block are read from
  // memory once: the block (kBlockBytes, cache-resident) is multiplied with every row before
  // the next block.
  constexpr size_t kMaxJobs = 4, kBlockBytes = 16 << 10;
  if (n_jobs > kMaxJobs) {
    for (size_t j = 0; j < n_jobs; ++j)
      MatMulRows(jobs + j, 1, x, rows, rowwise);
    return;
  }
  const size_t cols = jobs[0].w->cols, nb = cols / 32;
  xq_.resize(std::max(xq_.size(), rows * cols));
  xs_.resize(std::max(xs_.size(), rows * nb));
  xsum_.resize(std::max(xsum_.size(), rows * nb));
  for (size_t r = 0; r < rows; ++r)
    kern_.quantize_i16(x + r * cols, cols, &xq_[r * cols], &xs_[r * nb], &xsum_[r * nb]);
  size_t block[kMaxJobs], first[kMaxJobs + 1] = {0};
  for (size_t j = 0; j < n_jobs; ++j) {
    block[j] = RowBlock(pool_, jobs[j].w->rows);
    first[j + 1] = first[j] + (jobs[j].w->rows + block[j] - 1) / block[j];
  }
  const int16_t *xq = xq_.data();
  const float *xs = xs_.data(), *xsum = xsum_.data();
  pool_.ParallelFor(first[n_jobs], [&](size_t item, size_t) {
    size_t j = 0;
    while (item >= first[j + 1])
      ++j;
    const WeightMatrix &w = *jobs[j].w;
    const size_t r0 = (item - first[j]) * block[j], r1 = std::min(w.rows, r0 + block[j]);
    const size_t sub = std::max<size_t>(1, kBlockBytes / w.row_bytes);
    for (size_t s0 = r0; s0 < r1; s0 += sub) {
      const size_t s1 = std::min(r1, s0 + sub);
      for (size_t r = 0; r < rows; ++r) {
        kern_.matvec_i16(w, xq + r * cols, xs + r * nb, xsum + r * nb, jobs[j].y + r * w.rows, s0,
                         s1);
      }
    }
  });
}

void LlamaForward::Run(const int32_t *tokens, const Span *spans, size_t n_spans, Logits which,
                       float *logits) {
  const LlamaConfig &c = model_.config();
  const size_t dim = c.dim, kv = c.n_kv_heads * c.head_dim, ffn = c.ffn_dim;
  size_t n = 0;
  bool rowwise = true;
  for (size_t s = 0; s < n_spans; ++s) {
    if (spans[s].n == 0 || !spans[s].attention)
      throw std::invalid_argument("LlamaForward: span " + std::to_string(s) +
                                  " has no rows or no Attention");
    n += spans[s].n;
    rowwise = rowwise && spans[s].n == 1;
  }
  rowwise = rowwise && n <= kRowwiseMaxRows;
  if (n == 0)
    return;
  if (n > max_rows_) {
    throw std::invalid_argument("LlamaForward: " + std::to_string(n) + " rows, at most " +
                                std::to_string(max_rows_));
  }
  const size_t pairs = inv_freq_.size();
  for (size_t s = 0, row = 0; s < n_spans; ++s) {
    for (size_t i = 0; i < spans[s].n; ++i, ++row) {
      const double pos = double(spans[s].pos + i);
      for (size_t p = 0; p < pairs; ++p) {
        const double angle = pos * double(inv_freq_[p]);
        rope_cs_[(row * pairs + p) * 2] = float(std::cos(angle));
        rope_cs_[(row * pairs + p) * 2 + 1] = float(std::sin(angle));
      }
    }
  }
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
    MatMulRows(qkv, 3, xb_.data(), n, rowwise);
    add_bias(q_.data(), w.bq);
    add_bias(k_.data(), w.bk);
    add_bias(v_.data(), w.bv);
    for (size_t i = 0; i < n; ++i) {
      Rope(&q_[i * dim], c.n_heads, i);
      Rope(&k_[i * kv], c.n_kv_heads, i);
    }
    for (size_t s = 0, row = 0; s < n_spans; row += spans[s].n, ++s) {
      spans[s].attention->Forward(l, spans[s].pos, spans[s].n, &q_[row * dim], &k_[row * kv],
                                  &v_[row * kv], &att_[row * dim], pool_);
    }
    const MatMulJob wo{&w.wo, xb_.data()};
    MatMulRows(&wo, 1, att_.data(), n, rowwise);
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];

    for (size_t i = 0; i < n; ++i) {
      kern_.rms_norm(&x_[i * dim], w.ffn_norm.data(), &xb_[i * dim], dim, c.rms_eps);
    }
    const MatMulJob gate_up[] = {{&w.w_gate, hb_.data()}, {&w.w_up, hb2_.data()}};
    MatMulRows(gate_up, 2, xb_.data(), n, rowwise);
    for (size_t i = 0; i < n; ++i)
      kern_.swiglu(&hb_[i * ffn], &hb2_[i * ffn], ffn);
    const MatMulJob down{&w.w_down, xb_.data()};
    MatMulRows(&down, 1, hb_.data(), n, rowwise);
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];
  }
  if (which == Logits::kNone || !logits)
    return;
  // Only the rows whose logits are wanted go through the (large) output projection.
  size_t rows = 0;
  for (size_t s = 0, row = 0; s < n_spans; row += spans[s].n, ++s) {
    const size_t first = which == Logits::kAll ? row : row + spans[s].n - 1;
    for (size_t i = first; i < row + spans[s].n; ++i, ++rows) {
      kern_.rms_norm(&x_[i * dim], model_.output_norm().data(), &xb_[rows * dim], dim, c.rms_eps);
    }
  }
  const MatMulJob out{&model_.output(), logits};
  MatMulRows(&out, 1, xb_.data(), rows, rowwise);
}

void LlamaForward::RunSequence(Attention &attention, size_t pos, const int32_t *tokens, size_t n,
                               float *logits, bool all_logits,
                               const std::function<void(size_t, size_t)> &progress) {
  const size_t vocab = model_.config().vocab;
  for (size_t done = 0; done < n; done += max_rows_) {
    const Span span{&attention, pos + done, std::min(max_rows_, n - done)};
    const bool last = done + span.n == n;
    if (all_logits) {
      Run(tokens + done, &span, 1, Logits::kAll, logits ? logits + done * vocab : nullptr);
    } else {
      Run(tokens + done, &span, 1, last ? Logits::kLastOfSpan : Logits::kNone, logits);
    }
    if (progress)
      progress(done + span.n, n);
  }
}

LlamaSession::LlamaSession(const LlamaModel &model, ThreadPool &pool, size_t capacity,
                           std::unique_ptr<Attention> attention)
    : attn_(std::move(attention)), fwd_(model, pool, kChunk) {
  const LlamaConfig &c = model.config();
  capacity_ = capacity ? capacity : c.context_length;
  if (!attn_) {
    // The exact configuration (f32 KV) that the parity tests compare with transformers; callers
    // that want the bf16 store pass an Attention (pig-run: MakeAttention with --kv).
    attn_ = std::make_unique<DenseAttention>(
        AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, capacity_},
        lsh::DType::f32);
  }
}

void LlamaSession::SetPosition(size_t pos) {
  if (pos > capacity_)
    throw std::runtime_error("position " + std::to_string(pos) + " beyond the capacity " +
                             std::to_string(capacity_));
  pos_ = pos;
}

void LlamaSession::Reset() {
  pos_ = 0;
  attn_->Reset();
}

size_t LlamaSession::MemoryBytes() const { return attn_->MemoryBytes() + fwd_.ScratchBytes(); }

void LlamaSession::Forward(const int32_t *tokens, size_t n, float *logits, bool all_logits,
                           const std::function<void(size_t, size_t)> &progress) {
  fwd_.CheckTokens(tokens, n);
  if (pos_ + n > capacity_) {
    throw std::runtime_error("context full: " + std::to_string(pos_ + n) + " tokens, capacity " +
                             std::to_string(capacity_));
  }
  // Advance chunk by chunk, as the Attention does: an exception from a later chunk leaves the
  // position consistent with what the KV store holds.
  const size_t start = pos_;
  fwd_.RunSequence(*attn_, start, tokens, n, logits, all_logits, [&](size_t done, size_t total) {
    pos_ = start + done;
    if (progress)
      progress(done, total);
  });
}

LlamaBatch::LlamaBatch(const LlamaModel &model, ThreadPool &pool,
                       std::vector<std::unique_ptr<Attention>> attentions)
    : fwd_(model, pool, std::max(LlamaSession::kChunk, kMaxSequences)) {
  if (attentions.empty() || attentions.size() > kMaxSequences) {
    throw std::invalid_argument("LlamaBatch: " + std::to_string(attentions.size()) +
                                " sequences (1 to " + std::to_string(kMaxSequences) +
                                " supported)");
  }
  const LlamaConfig &c = model.config();
  for (size_t i = 0; i < attentions.size(); ++i) {
    if (!attentions[i])
      throw std::invalid_argument("LlamaBatch: sequence " + std::to_string(i) +
                                  " has no Attention");
    const AttentionShape &s = attentions[i]->shape();
    if (s.n_layers != c.n_layers || s.n_heads != c.n_heads || s.n_kv_heads != c.n_kv_heads ||
        s.head_dim != c.head_dim) {
      throw std::invalid_argument(
          "LlamaBatch: sequence " + std::to_string(i) + "'s Attention has " +
          std::to_string(s.n_layers) + " layers, " + std::to_string(s.n_heads) + "/" +
          std::to_string(s.n_kv_heads) + " heads of " + std::to_string(s.head_dim) +
          "; the model has " + std::to_string(c.n_layers) + ", " + std::to_string(c.n_heads) + "/" +
          std::to_string(c.n_kv_heads) + " of " + std::to_string(c.head_dim));
    }
    Sequence seq;
    seq.capacity = s.capacity;
    seq.attn = std::move(attentions[i]);
    seqs_.push_back(std::move(seq));
  }
  spans_.resize(kMaxSequences);
}

const LlamaBatch::Sequence &LlamaBatch::At(size_t seq) const {
  if (seq >= seqs_.size()) {
    throw std::out_of_range("LlamaBatch: sequence " + std::to_string(seq) + " (batch of " +
                            std::to_string(seqs_.size()) + ")");
  }
  return seqs_[seq];
}

void LlamaBatch::Reset(size_t seq) {
  Sequence &s = At(seq);
  s.pos = 0;
  s.attn->Reset();
}

size_t LlamaBatch::MemoryBytes() const {
  size_t total = fwd_.ScratchBytes();
  for (const Sequence &s : seqs_)
    total += s.attn->MemoryBytes();
  return total;
}

void LlamaBatch::Prefill(size_t seq, const int32_t *tokens, size_t n, float *logits) {
  Sequence &s = At(seq);
  fwd_.CheckTokens(tokens, n);
  if (s.pos + n > s.capacity) {
    throw std::runtime_error("sequence " + std::to_string(seq) +
                             ": context full: " + std::to_string(s.pos + n) + " tokens, capacity " +
                             std::to_string(s.capacity));
  }
  const size_t start = s.pos;
  fwd_.RunSequence(*s.attn, start, tokens, n, logits, false,
                   [&](size_t done, size_t) { s.pos = start + done; });
}

void LlamaBatch::Step(const int32_t *tokens, const size_t *seqs, size_t m, float *logits) {
  if (m == 0 || m > seqs_.size()) {
    throw std::invalid_argument("LlamaBatch::Step: " + std::to_string(m) + " sequences (1 to " +
                                std::to_string(seqs_.size()) + ")");
  }
  bool named[kMaxSequences] = {};
  for (size_t i = 0; i < m; ++i) {
    const Sequence &s = At(seqs[i]);
    if (named[seqs[i]]) {
      throw std::invalid_argument("LlamaBatch::Step: sequence " + std::to_string(seqs[i]) +
                                  " named twice");
    }
    named[seqs[i]] = true;
    if (s.pos >= s.capacity) {
      throw std::runtime_error("sequence " + std::to_string(seqs[i]) +
                               ": context full: " + std::to_string(s.pos + 1) +
                               " tokens, capacity " + std::to_string(s.capacity));
    }
  }
  fwd_.CheckTokens(tokens, m);
  for (size_t i = 0; i < m; ++i) {
    Sequence &s = seqs_[seqs[i]];
    spans_[i] = LlamaForward::Span{s.attn.get(), s.pos, 1};
  }
  fwd_.Run(tokens, spans_.data(), m, LlamaForward::Logits::kLastOfSpan, logits);
  for (size_t i = 0; i < m; ++i)
    ++seqs_[seqs[i]].pos;
}

} // namespace pig::runtime
