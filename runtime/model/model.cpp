#include "pig/runtime/model.h"

#include "pig/runtime/index_share.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

namespace {

// What distinguishes the architectures the loader takes (llama.cpp's names and conventions: the
// converter has already permuted the llama family's Q/K rows and added 1 to Gemma's norms).
struct ArchRules {
  const char *name;
  bool neox;            // NEOX rotary layout
  bool gemma;           // scaled embeddings, GeGLU, norms after each block
  size_t local_pattern; // windowed layers: every layer but each n-th (0: every layer)
  float local_base;     // default rotary base of local layers (0: the global one)
};
constexpr ArchRules kArchs[] = {
    {"llama", false, false, 0, 0}, {"qwen2", true, false, 0, 0},
    {"qwen3", true, false, 0, 0},  {"phi3", true, false, 0, 0},
    {"gemma2", true, true, 2, 0},  {"gemma3", true, true, 6, 10000.0f},
};

} // namespace

AttentionShape LlamaConfig::Shape(size_t capacity) const {
  AttentionShape s{n_layers, n_heads, n_kv_heads, head_dim, capacity};
  s.scale = attn_scale;
  s.windows = windows;
  s.softcap = attn_softcap;
  return s;
}

std::unique_ptr<LlamaModel> LlamaModel::Load(const std::string &path, const ModelOverrides &o) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->file_ = GgufFile::Open(path);
  const GgufFile &f = *m->file_;
  LlamaConfig &c = m->cfg_;
  c.arch = std::string(f.GetString("general.architecture"));
  const ArchRules *rules = nullptr;
  std::string known;
  for (const ArchRules &r : kArchs) {
    known += (known.empty() ? "" : ", ") + std::string(r.name);
    if (c.arch == r.name)
      rules = &r;
  }
  if (!rules) {
    throw GgufError(path + ": architecture '" + c.arch + "' (general.architecture) is not " +
                    "supported (" + known + ")");
  }
  const std::string a = c.arch + ".";
  auto bad = [&](const std::string &what) { throw GgufError(path + ": " + what); };
  // What changes the computation and is not served here: refused by its key.
  if (f.GetUint(a + "expert_count", 0) > 0)
    bad("mixture of experts (" + a + "expert_count) is not supported");
  for (const char *k : {"attention.q_lora_rank", "attention.kv_lora_rank", "ssm.state_size",
                        "rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor",
                        "rope.scaling.yarn_ext_factor"})
    if (f.Find(a + k))
      bad(a + k + " is not supported");
  c.n_layers = f.GetUint(a + "block_count");
  c.dim = f.GetUint(a + "embedding_length");
  c.ffn_dim = f.GetUint(a + "feed_forward_length");
  c.n_heads = f.GetUint(a + "attention.head_count");
  c.n_kv_heads = f.GetUint(a + "attention.head_count_kv", c.n_heads);
  c.context_length = f.GetUint(a + "context_length", 4096);
  c.rms_eps = float(f.GetFloat(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = float(f.GetFloat(a + "rope.freq_base", 10000.0));
  if (c.n_layers == 0 || c.n_layers > 1024 || c.dim == 0 || c.dim > (1 << 16) || c.n_heads == 0 ||
      c.n_kv_heads == 0 || c.ffn_dim == 0 || c.ffn_dim > (1 << 18) || c.n_heads > 1024) {
    bad("implausible model dimensions in the metadata");
  }
  if (c.n_heads % c.n_kv_heads != 0)
    bad("attention.head_count is not a multiple of attention.head_count_kv");
  if (!f.Find(a + "attention.key_length") && c.dim % c.n_heads != 0)
    bad("attention.head_count does not divide the embedding size");
  c.head_dim = f.GetUint(a + "attention.key_length", c.dim / c.n_heads);
  if (f.GetUint(a + "attention.value_length", c.head_dim) != c.head_dim)
    bad(a + "attention.value_length differs from attention.key_length: not supported");
  if (c.head_dim == 0 || c.head_dim > 1024)
    bad("implausible attention.key_length");
  c.q_dim = c.n_heads * c.head_dim;
  c.rope_dim = f.GetUint(a + "rope.dimension_count", c.head_dim);
  if (c.rope_dim > c.head_dim || c.rope_dim % 2)
    bad("invalid rope.dimension_count");
  c.rope_neox = rules->neox;
  // RoPE scaling: the file's, or the flags' (which then extend the trained context by the
  // factor, as a YaRN model's file says: original_context_length x factor).
  c.rope_scaling = o.rope_scaling.empty()
                       ? std::string(f.GetString(a + "rope.scaling.type", "none"))
                       : o.rope_scaling;
  if (c.rope_scaling.empty())
    c.rope_scaling = "none";
  const float factor =
      o.rope_scale > 0 ? o.rope_scale : float(f.GetFloat(a + "rope.scaling.factor", 1.0));
  if (!(factor > 0) || !std::isfinite(factor) || factor > 1024)
    bad("rope scaling factor " + std::to_string(factor) + " (" + a +
        "rope.scaling.factor or --rope-scale) outside (0, 1024]");
  const bool from_flags = !o.rope_scaling.empty() || o.rope_scale > 0 || o.yarn_orig_ctx > 0;
  if (c.rope_scaling == "linear") {
    c.rope_linear_scale = factor;
    if (from_flags)
      c.context_length = size_t(double(c.context_length) * std::max(1.0f, factor));
  } else if (c.rope_scaling == "yarn") {
    c.yarn_factor = factor;
    c.yarn_orig_ctx = o.yarn_orig_ctx > 0
                          ? o.yarn_orig_ctx
                          : f.GetUint(a + "rope.scaling.original_context_length", c.context_length);
    if (c.yarn_orig_ctx == 0 || c.yarn_orig_ctx > (size_t(1) << 24))
      bad("implausible YaRN original context (" + a + "rope.scaling.original_context_length or " +
          "--yarn-orig-ctx)");
    c.yarn_beta_fast = float(f.GetFloat(a + "rope.scaling.yarn_beta_fast", 32.0));
    c.yarn_beta_slow = float(f.GetFloat(a + "rope.scaling.yarn_beta_slow", 1.0));
    if (!(c.yarn_beta_fast > c.yarn_beta_slow && c.yarn_beta_slow > 0))
      bad("YaRN needs yarn_beta_fast > yarn_beta_slow > 0");
    c.rope_attn_factor = factor <= 1 ? 1.0f : float(0.1 * std::log(double(factor)) + 1.0);
    c.context_length =
        std::max(c.context_length, size_t(double(c.yarn_orig_ctx) * std::max(1.0f, factor)));
  } else if (c.rope_scaling != "none") {
    bad("rope scaling '" + c.rope_scaling + "' (" + a + "rope.scaling.type or --rope-scaling) " +
        "is not supported (none, linear, yarn; llama3 through rope_freqs.weight)");
  }
  if (f.FindTensor("rope_freqs.weight")) {
    c.rope_freq_factors = Vector(f, "rope_freqs.weight", c.rope_dim / 2);
  }
  for (const char *t : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (f.FindTensor(t))
      bad(std::string("LongRoPE (tensor ") + t + ") is not supported");
  // Sliding windows: every layer (llama: Mistral; phi3), or all but every n-th (Gemma).
  if (const uint64_t w = f.GetUint(a + "attention.sliding_window", 0); w > 0) {
    if (w > (uint64_t(1) << 31))
      bad("implausible " + a + "attention.sliding_window");
    const uint64_t pattern =
        f.GetUint(a + "attention.sliding_window_pattern", rules->local_pattern);
    c.windows.assign(c.n_layers, 0);
    for (size_t l = 0; l < c.n_layers; ++l)
      if (pattern == 0 || (l + 1) % pattern != 0)
        c.windows[l] = uint32_t(w);
    c.rope_base_local = float(f.GetFloat(a + "rope.freq_base_swa", rules->local_base));
  }
  c.attn_scale = float(f.GetFloat(a + "attention.scale", 0.0));
  c.attn_softcap = float(f.GetFloat(a + "attn_logit_softcapping", 0.0));
  c.final_softcap = float(f.GetFloat(a + "final_logit_softcapping", 0.0));
  if (c.attn_scale < 0 || c.attn_softcap < 0 || c.final_softcap < 0)
    bad("negative attention.scale or logit soft-capping");
  if (rules->gemma) {
    c.embed_scale = std::sqrt(float(c.dim));
    c.gelu = true;
  }

  m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::FromGguf(f));
  c.vocab = m->tokenizer_->vocab_size();
  const size_t kv_dim = c.n_kv_heads * c.head_dim, qd = c.q_dim;
  m->tok_embd_ = Matrix(f, "token_embd.weight", c.vocab, c.dim);
  m->output_ = f.FindTensor("output.weight") ? Matrix(f, "output.weight", c.vocab, c.dim)
                                             : m->tok_embd_; // tied embeddings
  m->output_norm_ = Vector(f, "output_norm.weight", c.dim);
  // Rows [r0, r0 + rows) of a matrix: one part of a fused projection.
  auto rows_of = [](WeightMatrix w, size_t r0, size_t rows) {
    w.data += r0 * w.row_bytes;
    w.rows = rows;
    return w;
  };
  for (size_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = Vector(f, p + "attn_norm.weight", c.dim);
    w.ffn_norm = Vector(f, p + "ffn_norm.weight", c.dim);
    if (f.FindTensor(p + "attn_qkv.weight")) { // Phi-3: Q, K, V rows in one matrix
      const WeightMatrix qkv = Matrix(f, p + "attn_qkv.weight", qd + 2 * kv_dim, c.dim);
      w.wq = rows_of(qkv, 0, qd);
      w.wk = rows_of(qkv, qd, kv_dim);
      w.wv = rows_of(qkv, qd + kv_dim, kv_dim);
    } else {
      w.wq = Matrix(f, p + "attn_q.weight", qd, c.dim);
      w.wk = Matrix(f, p + "attn_k.weight", kv_dim, c.dim);
      w.wv = Matrix(f, p + "attn_v.weight", kv_dim, c.dim);
    }
    w.wo = Matrix(f, p + "attn_output.weight", c.dim, qd);
    if (f.FindTensor(p + "ffn_gate.weight")) {
      w.w_gate = Matrix(f, p + "ffn_gate.weight", c.ffn_dim, c.dim);
      w.w_up = Matrix(f, p + "ffn_up.weight", c.ffn_dim, c.dim);
    } else { // Phi-3: the gate's rows, then the up projection's, in ffn_up
      const WeightMatrix up = Matrix(f, p + "ffn_up.weight", 2 * c.ffn_dim, c.dim);
      w.w_gate = rows_of(up, 0, c.ffn_dim);
      w.w_up = rows_of(up, c.ffn_dim, c.ffn_dim);
    }
    w.w_down = Matrix(f, p + "ffn_down.weight", c.dim, c.ffn_dim);
    if (f.FindTensor(p + "attn_q.bias")) {
      w.bq = Vector(f, p + "attn_q.bias", qd);
      w.bk = Vector(f, p + "attn_k.bias", kv_dim);
      w.bv = Vector(f, p + "attn_v.bias", kv_dim);
    }
    if (f.FindTensor(p + "attn_q_norm.weight")) {
      w.q_norm = Vector(f, p + "attn_q_norm.weight", c.head_dim);
      w.k_norm = Vector(f, p + "attn_k_norm.weight", c.head_dim);
    }
    if (f.FindTensor(p + "attn_post_norm.weight"))
      w.attn_post_norm = Vector(f, p + "attn_post_norm.weight", c.dim);
    if (f.FindTensor(p + "ffn_post_norm.weight"))
      w.ffn_post_norm = Vector(f, p + "ffn_post_norm.weight", c.dim);
    for (const char *t : {"attn_output.bias", "ffn_up.bias", "ffn_down.bias", "attn_qkv.bias"})
      if (f.FindTensor(p + t))
        bad("tensor " + p + t + " is not supported (no bias on this projection)");
    m->layers_.push_back(std::move(w));
  }
  m->Pack();
  return m;
}

// Repacks every matrix that has a packed layout (the projections and the output; the token
// embedding keeps the file's layout for its row lookups), where the best kernels use it. The
// file's pages of a packed matrix are dropped from this process (they are re-read from the page
// cache only if something reads them again), so the weights stay resident once.
void LlamaModel::Pack() {
  if (!BestKernels().packed_path)
    return;
  const auto t0 = std::chrono::steady_clock::now();
  const long page = sysconf(_SC_PAGESIZE);
  auto pack = [&](WeightMatrix &w, bool release) {
    std::vector<uint8_t> p = PackRows16(w);
    if (p.empty())
      return;
    w.packed = p.data();
    packed_.push_back(std::move(p)); // the buffer does not move with the vector
    if (release && file_->mapped() && page > 0) {
      const uintptr_t b = reinterpret_cast<uintptr_t>(w.data), e = b + w.rows * w.row_bytes;
      const uintptr_t pb = (b + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page);
      const uintptr_t pe = e / uintptr_t(page) * uintptr_t(page);
      if (pe > pb)
        madvise(reinterpret_cast<void *>(pb), pe - pb, MADV_DONTNEED);
    }
  };
  for (auto &l : layers_)
    for (WeightMatrix *w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      pack(*w, true);
  pack(output_, output_.data != tok_embd_.data);
  pack_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t LlamaModel::PackedBytes() const {
  size_t n = 0;
  for (const auto &p : packed_)
    n += p.size();
  return n;
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

size_t PrefillChunk(size_t remaining, size_t max_rows) {
  if (remaining <= max_rows)
    return remaining;
  // remaining - max_rows == 1 would leave one token: take one fewer, leaving two.
  return remaining - max_rows == 1 && max_rows >= 3 ? max_rows - 1 : max_rows;
}

LlamaForward::LlamaForward(const LlamaModel &model, ThreadPool &pool, size_t max_rows)
    : model_(model), pool_(pool), kern_(BestKernels()), max_rows_(max_rows) {
  if (max_rows == 0)
    throw std::invalid_argument("LlamaForward: max_rows must be at least 1");
  const LlamaConfig &c = model.config();
  // Table 0 rotates the global layers (frequency factors and linear scaling); table 1, where the
  // model has one, the local layers (their own base, unscaled: Gemma 3).
  rope_tables_ = c.rope_base_local > 0 ? 2 : 1;
  const size_t dim = c.rope_dim, pairs = dim / 2;
  // YaRN: each pair's frequency between the interpolated one (divided by the factor) and the
  // original, by a ramp over the pairs that make between beta_slow and beta_fast rotations in
  // the trained context (transformers' _compute_yarn_parameters, truncated bounds).
  double ramp_lo = 0, ramp_hi = 0;
  if (c.rope_scaling == "yarn") {
    auto correction = [&](double rotations) {
      return double(dim) * std::log(double(c.yarn_orig_ctx) / (rotations * 2.0 * M_PI)) /
             (2.0 * std::log(double(c.rope_base)));
    };
    ramp_lo = std::max(0.0, std::floor(correction(c.yarn_beta_fast)));
    ramp_hi = std::min(double(dim - 1), std::ceil(correction(c.yarn_beta_slow)));
    if (ramp_lo == ramp_hi)
      ramp_hi += 0.001;
  }
  for (size_t t = 0; t < rope_tables_; ++t)
    for (size_t i = 0; i < pairs; ++i) {
      const float base = t == 0 ? c.rope_base : c.rope_base_local;
      float f = std::pow(base, -2.0f * float(i) / float(dim));
      if (t == 0 && !c.rope_freq_factors.empty())
        f /= c.rope_freq_factors[i];
      if (t == 0 && c.rope_scaling == "yarn") {
        const float ramp = float(std::clamp((double(i) - ramp_lo) / (ramp_hi - ramp_lo), 0.0, 1.0));
        const float extrapolation = 1.0f - ramp;
        f = f / c.yarn_factor * (1.0f - extrapolation) + f * extrapolation;
      }
      inv_freq_.push_back(t == 0 ? f / c.rope_linear_scale : f);
    }
  const size_t n = max_rows, kv = c.n_kv_heads * c.head_dim;
  rope_cs_.resize(n * inv_freq_.size() * 2);
  decode_row_.resize(n);
  x_.resize(n * c.dim);
  xb_.resize(n * std::max(c.dim, c.q_dim));
  q_.resize(n * c.q_dim);
  att_.resize(n * c.q_dim);
  k_.resize(n * kv);
  v_.resize(n * kv);
  hb_.resize(n * c.ffn_dim);
  hb2_.resize(n * c.ffn_dim);
}

void LlamaForward::set_decode_path(MatMulPath path) {
  if (path == MatMulPath::kAuto)
    throw std::invalid_argument("LlamaForward: the decode path must be integer or float, not auto "
                                "(a row's logits would depend on its batch)");
  decode_path_ = path;
}

size_t LlamaForward::ScratchBytes() const {
  return (rope_cs_.size() + x_.size() + xb_.size() + q_.size() + att_.size() + k_.size() +
          v_.size() + hb_.size() + hb2_.size()) *
             sizeof(float) +
         scratch_.bytes();
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

// GGUF stores Q and K of the llama family for ggml's "normal" rotary layout: each head rotates
// adjacent pairs (x[2i], x[2i+1]) by pos * inv_freq[i]. The other families keep transformers'
// NEOX layout: pair i is (x[i], x[i + rope_dim / 2]). The angles of a row are computed once per
// Run for each table (every layer of a kind rotates by the same ones).
void LlamaForward::Rope(float *x, size_t n_heads, size_t row, size_t layer) const {
  const LlamaConfig &c = model_.config();
  const size_t hd = c.head_dim, pairs = c.rope_dim / 2;
  const size_t table = rope_tables_ > 1 && c.Local(layer) ? 1 : 0;
  const float *cs = &rope_cs_[(row * rope_tables_ + table) * pairs * 2];
  const size_t stride = c.rope_neox ? 1 : 2, other = c.rope_neox ? pairs : 1;
  for (size_t i = 0; i < pairs; ++i) {
    const float co = cs[2 * i], si = cs[2 * i + 1];
    for (size_t h = 0; h < n_heads; ++h) {
      float *p = x + h * hd + stride * i;
      const float a = p[0], b = p[other];
      p[0] = a * co - b * si;
      p[other] = a * si + b * co;
    }
  }
}

void LlamaForward::MatMulRows(const MatMulJob *jobs, size_t n_jobs, const float *x, size_t rows) {
  // Runs of consecutive rows of one kind (decode rows, prefill rows) each take their path: decode
  // rows and prompt chunks the paths set for them (never chosen by the batch); a step that mixes
  // them reads the weights once per run. (The callers pass Q/K/V at most.)
  constexpr size_t kMaxJobs = 3;
  if (n_jobs > kMaxJobs)
    throw std::logic_error("LlamaForward::MatMulRows: more than 3 matrices");
  for (size_t r0 = 0; r0 < rows;) {
    size_t r1 = r0 + 1;
    while (r1 < rows && decode_row_[r1] == decode_row_[r0])
      ++r1;
    MatMulJob run[kMaxJobs];
    for (size_t j = 0; j < n_jobs; ++j)
      run[j] = MatMulJob{jobs[j].w, jobs[j].y + r0 * jobs[j].w->rows};
    MatMulShared(pool_, kern_, run, n_jobs, x + r0 * jobs[0].w->cols, r1 - r0, &scratch_,
                 decode_row_[r0] ? decode_path_ : prefill_path_);
    r0 = r1;
  }
}

// One layer's attention for every span of a Run. A prompt chunk, and a decode row whose
// Attention does not split its step (SplitsDecode), is one Forward. The other decode rows run as
// one split over the threads: every row's items (Attention::BeginDecode) in one ParallelFor, so a
// batch of B sequences wakes the pool once a layer, not B times, and the threads share the B
// rows' work instead of each row's few kv-heads. A row's items run the arithmetic of its Forward,
// so its output is bit-identical to decoding it alone.
void LlamaForward::Attend(size_t layer, const Span *spans, size_t n_spans) {
  const LlamaConfig &c = model_.config();
  const size_t dim = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  attend_spans_.resize(n_spans);
  for (size_t s = 0, row = 0; s < n_spans; row += spans[s].n, ++s)
    attend_spans_[s] = {spans[s].attention, spans[s].pos,  spans[s].n,      &q_[row * dim],
                        &k_[row * kv],      &v_[row * kv], &att_[row * dim]};
  batch_attention_.Run(layer, attend_spans_.data(), n_spans, pool_, batch_hash_);
}

void LlamaForward::Run(const int32_t *tokens, const Span *spans, size_t n_spans, Logits which,
                       float *logits) {
  const LlamaConfig &c = model_.config();
  const size_t dim = c.dim, qd = c.q_dim, kv = c.n_kv_heads * c.head_dim, ffn = c.ffn_dim;
  size_t n = 0;
  for (size_t s = 0; s < n_spans; ++s) {
    if (spans[s].n == 0 || !spans[s].attention)
      throw std::invalid_argument("LlamaForward: span " + std::to_string(s) +
                                  " has no rows or no Attention");
    n += spans[s].n;
  }
  if (n == 0)
    return;
  if (n > max_rows_) {
    throw std::invalid_argument("LlamaForward: " + std::to_string(n) + " rows, at most " +
                                std::to_string(max_rows_));
  }
  const size_t angles = inv_freq_.size(); // every table's pairs
  for (size_t s = 0, row = 0; s < n_spans; ++s) {
    for (size_t i = 0; i < spans[s].n; ++i, ++row) {
      decode_row_[row] = spans[s].n == 1;
      const double pos = double(spans[s].pos + i);
      for (size_t p = 0; p < angles; ++p) {
        const double angle = pos * double(inv_freq_[p]);
        // YaRN's attention factor scales cos and sin of the global table (so q and k).
        const float m = p < angles / rope_tables_ ? c.rope_attn_factor : 1.0f;
        rope_cs_[(row * angles + p) * 2] = float(std::cos(angle)) * m;
        rope_cs_[(row * angles + p) * 2 + 1] = float(std::sin(angle)) * m;
      }
    }
  }
  const WeightMatrix &emb = model_.token_embedding();
  for (size_t i = 0; i < n; ++i) {
    kern_.dequant_row(emb.type, emb.data + size_t(tokens[i]) * emb.row_bytes, &x_[i * dim], dim);
  }
  if (c.embed_scale != 1.0f)
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] *= c.embed_scale;
  // RMSNorm of each of `count` vectors of `len` floats in place, through a row of scratch (the
  // kernel's input and output may not alias): q/k norms per head, Gemma's norms after a block.
  auto norm_rows = [&](float *y, size_t count, size_t len, const std::vector<float> &w) {
    if (w.empty())
      return;
    thread_local std::vector<float> tmp;
    tmp.resize(len);
    for (size_t r = 0; r < count; ++r) {
      kern_.rms_norm(y + r * len, w.data(), tmp.data(), len, c.rms_eps);
      std::copy(tmp.begin(), tmp.end(), y + r * len);
    }
  };
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
    MatMulRows(qkv, 3, xb_.data(), n);
    add_bias(q_.data(), w.bq);
    add_bias(k_.data(), w.bk);
    add_bias(v_.data(), w.bv);
    norm_rows(q_.data(), n * c.n_heads, c.head_dim, w.q_norm);
    norm_rows(k_.data(), n * c.n_kv_heads, c.head_dim, w.k_norm);
    for (size_t i = 0; i < n; ++i) {
      Rope(&q_[i * qd], c.n_heads, i, l);
      Rope(&k_[i * kv], c.n_kv_heads, i, l);
    }
    Attend(l, spans, n_spans);
    const MatMulJob wo{&w.wo, xb_.data()};
    MatMulRows(&wo, 1, att_.data(), n);
    norm_rows(xb_.data(), n, dim, w.attn_post_norm);
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];

    for (size_t i = 0; i < n; ++i) {
      kern_.rms_norm(&x_[i * dim], w.ffn_norm.data(), &xb_[i * dim], dim, c.rms_eps);
    }
    const MatMulJob gate_up[] = {{&w.w_gate, hb_.data()}, {&w.w_up, hb2_.data()}};
    MatMulRows(gate_up, 2, xb_.data(), n);
    if (c.gelu) { // GeGLU with GELU's tanh approximation, as transformers' gelu_pytorch_tanh
      for (size_t i = 0; i < n * ffn; ++i) {
        const float g = hb_[i];
        hb_[i] = 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g))) *
                 hb2_[i];
      }
    } else {
      for (size_t i = 0; i < n; ++i)
        kern_.swiglu(&hb_[i * ffn], &hb2_[i * ffn], ffn);
    }
    const MatMulJob down{&w.w_down, xb_.data()};
    MatMulRows(&down, 1, hb_.data(), n);
    norm_rows(xb_.data(), n, dim, w.ffn_post_norm);
    for (size_t i = 0; i < n * dim; ++i)
      x_[i] += xb_[i];
  }
  if (which == Logits::kNone || !logits)
    return;
  // Only the rows whose logits are wanted go through the (large) output projection.
  size_t rows = 0;
  for (size_t s = 0, row = 0; s < n_spans; row += spans[s].n, ++s) {
    if (which == Logits::kLastOfSpan && !spans[s].logits)
      continue;
    const size_t first = which == Logits::kAll ? row : row + spans[s].n - 1;
    for (size_t i = first; i < row + spans[s].n; ++i, ++rows) {
      kern_.rms_norm(&x_[i * dim], model_.output_norm().data(), &xb_[rows * dim], dim, c.rms_eps);
      decode_row_[rows] = spans[s].n == 1; // rows <= i: the kinds still to read are intact
    }
  }
  if (rows == 0)
    return;
  const MatMulJob out{&model_.output(), logits};
  MatMulRows(&out, 1, xb_.data(), rows);
  if (const float cap = c.final_softcap; cap > 0)
    for (size_t i = 0; i < rows * c.vocab; ++i)
      logits[i] = cap * std::tanh(logits[i] / cap);
}

void LlamaForward::RunSequence(Attention &attention, size_t pos, const int32_t *tokens, size_t n,
                               float *logits, bool all_logits,
                               const std::function<void(size_t, size_t)> &progress) {
  const size_t vocab = model_.config().vocab;
  for (size_t done = 0; done < n;) {
    const Span span{&attention, pos + done, PrefillChunk(n - done, max_rows_)};
    const bool last = done + span.n == n;
    if (all_logits) {
      Run(tokens + done, &span, 1, Logits::kAll, logits ? logits + done * vocab : nullptr);
    } else {
      Run(tokens + done, &span, 1, last ? Logits::kLastOfSpan : Logits::kNone, logits);
    }
    done += span.n;
    if (progress)
      progress(done, n);
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
    attn_ = std::make_unique<DenseAttention>(c.Shape(capacity_), lsh::DType::f32);
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
  // A first decode step builds its indexes ahead, every (layer, kv-head) in one split over the
  // threads (inside the step each layer would build its kv-heads' alone: 3 on 2 threads left
  // one idle); the same output either way (Attention::PrepareDecode).
  if (n == 1 && attn_->DecodeUnitsPending() > 0)
    attn_->PrepareDecode(fwd_.pool(), ~size_t(0));
  // Advance chunk by chunk, as the Attention does: an exception from a later chunk leaves the
  // position consistent with what the KV store holds.
  const size_t start = pos_;
  fwd_.RunSequence(*attn_, start, tokens, n, logits, all_logits, [&](size_t done, size_t total) {
    pos_ = start + done;
    if (progress)
      progress(done, total);
  });
}

LlamaBatch::LlamaBatch(const LlamaModel &model, ThreadPool &pool, Options options)
    : model_(model), opts_(options), fwd_(model, pool, options.max_rows) {
  fwd_.set_decode_path(options.decode_path);
  fwd_.set_batch_hash(options.batch_hash);
}

LlamaBatch::LlamaBatch(const LlamaModel &model, ThreadPool &pool,
                       std::vector<std::unique_ptr<Attention>> attentions, Options options)
    : LlamaBatch(model, pool, options) {
  if (attentions.empty())
    throw std::invalid_argument("LlamaBatch: no sequences");
  for (auto &a : attentions)
    Add(std::move(a));
}

std::shared_ptr<KvPool> LlamaBatch::KvPoolOf(lsh::DType dtype) {
  for (const auto &p : pools_)
    if (p->dtype() == dtype)
      return p;
  const LlamaConfig &c = model_.config();
  const AttentionShape shape = c.Shape(0);
  // The budget bounds the KV blocks of the sequences it admitted (they are part of
  // ReservedBytes); a candidate reserves its blocks before Add weighs it against the budget. So a
  // pool of twice the budget's blocks never refuses first a sequence that fits the budget alone,
  // and Add's refusal names the budget. No budget: no limit.
  const size_t max_blocks =
      opts_.memory_budget ? 2 * (opts_.memory_budget / KvPool::BlockBytesFor(shape, dtype)) + 1 : 0;
  pools_.push_back(std::make_shared<KvPool>(shape, dtype, max_blocks));
  prefix_.push_back(opts_.prefix_cache ? std::make_unique<PrefixCache>(pools_.back(), PrefixSalt())
                                       : nullptr);
  if (prefix_.back() && opts_.prefix_cache_bytes)
    prefix_.back()->set_max_blocks(
        std::max<size_t>(1, opts_.prefix_cache_bytes / pools_.back()->BlockBytes()));
  if (prefix_.back() && !opts_.prefix_cache_dir.empty()) {
    const std::string dir = opts_.prefix_cache_dir + "/" + lsh::to_string(dtype);
    prefix_.back()->SetDisk(dir, opts_.prefix_cache_disk_bytes);
    pools_.back()->shared_indexes().SetDisk(dir + "/index", PrefixSalt(),
                                            opts_.prefix_cache_disk_bytes);
  }
  return pools_.back();
}

std::uint64_t LlamaBatch::PrefixSalt() const {
  // What the rows depend on besides their tokens: the model (its shape, and the file's hash when
  // given), the prefill path; the element type is the pool's.
  const LlamaConfig &c = model_.config();
  std::uint64_t salt = 0x7069672d6b76ull;
  for (size_t x : {c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.dim, c.vocab,
                   size_t(opts_.model_id), size_t(fwd_.prefill_path())})
    salt = (salt ^ x) * 0x100000001b3ull;
  return salt;
}

void LlamaBatch::set_prefill_path(MatMulPath path) {
  fwd_.set_prefill_path(path);
  for (const auto &p : prefix_)
    if (p)
      p->set_salt(PrefixSalt());
}

PrefixCache *LlamaBatch::PrefixOf(size_t seq) {
  const KvPool *pool = &At(seq).attn->cache().pool();
  for (size_t i = 0; i < pools_.size(); ++i)
    if (pools_[i].get() == pool)
      return prefix_[i].get();
  return nullptr; // a sequence over a pool of its own
}

size_t LlamaBatch::AttachCachedPrefix(size_t seq, const int32_t *tokens, size_t n) {
  PrefixCache *cache = PrefixOf(seq);
  Sequence &s = At(seq);
  if (!cache || s.pos != 0 || !s.attn->cache().blocks().empty())
    return 0;
  fwd_.CheckTokens(tokens, n);
  std::vector<std::int32_t> blocks;
  std::uint64_t key = 0;
  const size_t hit = cache->Lookup(tokens, std::min(n, s.capacity), blocks, &key);
  if (hit == 0)
    return 0;
  s.attn->AttachPrefix(blocks.data(), blocks.size());
  s.attn->SetPrefixKey(key);
  s.pos = hit;
  return hit;
}

void LlamaBatch::CachePrompt(size_t seq, const int32_t *tokens, size_t n) {
  PrefixCache *cache = PrefixOf(seq);
  if (!cache)
    return;
  const Sequence &s = At(seq);
  if (n > s.pos)
    throw std::invalid_argument("LlamaBatch: caching " + std::to_string(n) +
                                " prompt tokens of sequence " + std::to_string(seq) + " at " +
                                std::to_string(s.pos));
  cache->Insert(tokens, n, s.attn->cache().blocks());
}

PrefixCache::Stats LlamaBatch::PrefixStats() const {
  PrefixCache::Stats t;
  for (const auto &p : prefix_)
    if (p)
      t += p->stats();
  return t;
}

size_t LlamaBatch::EvictPrefix(size_t bytes) {
  size_t freed = 0;
  for (size_t i = 0; i < prefix_.size() && freed < bytes; ++i)
    if (prefix_[i]) {
      const size_t bb = pools_[i]->BlockBytes();
      freed += prefix_[i]->Evict((bytes - freed + bb - 1) / bb) * bb;
      pools_[i]->shared_indexes().Collect(*pools_[i]);
    }
  return freed;
}

void LlamaBatch::ClearPrefixCache() {
  for (size_t i = 0; i < prefix_.size(); ++i)
    if (prefix_[i]) {
      prefix_[i]->Clear();
      pools_[i]->shared_indexes().Clear();
    }
}

IndexShare::Stats LlamaBatch::SharedIndexStats() const {
  IndexShare::Stats t;
  for (const auto &p : pools_) {
    const IndexShare::Stats s = p->shared_indexes().stats();
    t.nodes += s.nodes;
    t.bytes += s.bytes;
    t.hits += s.hits;
    t.builds += s.builds;
    t.disk_reads += s.disk_reads;
    t.disk_writes += s.disk_writes;
    t.disk_rejected += s.disk_rejected;
  }
  return t;
}

size_t LlamaBatch::KvResidentBytes() const {
  size_t total = 0;
  for (const auto &p : pools_)
    total += p->ResidentBytes();
  return total;
}

size_t LlamaBatch::ReservedAttentionBytes() const {
  size_t total = 0;
  for (const Sequence &s : seqs_)
    total += s.attn ? s.attn->ReservedBytes() : 0;
  return total;
}

size_t LlamaBatch::Add(std::unique_ptr<Attention> attention) {
  const size_t id =
      std::find_if(seqs_.begin(), seqs_.end(), [](const Sequence &s) { return !s.attn; }) -
      seqs_.begin();
  if (!attention)
    throw std::invalid_argument("LlamaBatch: sequence " + std::to_string(id) + " has no Attention");
  const LlamaConfig &c = model_.config();
  const AttentionShape &s = attention->shape();
  if (s.n_layers != c.n_layers || s.n_heads != c.n_heads || s.n_kv_heads != c.n_kv_heads ||
      s.head_dim != c.head_dim) {
    throw std::invalid_argument(
        "LlamaBatch: sequence " + std::to_string(id) + "'s Attention has " +
        std::to_string(s.n_layers) + " layers, " + std::to_string(s.n_heads) + "/" +
        std::to_string(s.n_kv_heads) + " heads of " + std::to_string(s.head_dim) +
        "; the model has " + std::to_string(c.n_layers) + ", " + std::to_string(c.n_heads) + "/" +
        std::to_string(c.n_kv_heads) + " of " + std::to_string(c.head_dim));
  }
  if (opts_.memory_budget) {
    const size_t used = ReservedAttentionBytes(), need = attention->ReservedBytes();
    if (used + need > opts_.memory_budget) {
      throw std::length_error("LlamaBatch: sequence " + std::to_string(id) + " needs " +
                              std::to_string(need >> 20) + " MiB; " + std::to_string(used >> 20) +
                              " of the " + std::to_string(opts_.memory_budget >> 20) +
                              " MiB budget are reserved by " + std::to_string(live_) +
                              (live_ == 1 ? " sequence" : " sequences"));
    }
  }
  if (id == seqs_.size())
    seqs_.emplace_back();
  Sequence &seq = seqs_[id];
  seq.capacity = s.capacity;
  seq.pos = 0;
  seq.attn = std::move(attention);
  ++live_;
  return id;
}

std::unique_ptr<Attention> LlamaBatch::Remove(size_t seq) {
  Sequence &s = At(seq);
  std::unique_ptr<Attention> a = std::move(s.attn);
  s = Sequence{};
  --live_;
  while (!seqs_.empty() && !seqs_.back().attn) // trailing free slots go
    seqs_.pop_back();
  return a;
}

const LlamaBatch::Sequence &LlamaBatch::At(size_t seq) const {
  if (!contains(seq)) {
    throw std::out_of_range("LlamaBatch: no sequence " + std::to_string(seq) + " (" +
                            std::to_string(live_) + " sequences in " +
                            std::to_string(seqs_.size()) + " slots)");
  }
  return seqs_[seq];
}

void LlamaBatch::SetPosition(size_t seq, size_t pos) {
  Sequence &s = At(seq);
  if (pos > s.capacity)
    throw std::runtime_error("sequence " + std::to_string(seq) + ": position " +
                             std::to_string(pos) + " beyond the capacity " +
                             std::to_string(s.capacity));
  s.pos = pos;
}

void LlamaBatch::Reset(size_t seq) {
  Sequence &s = At(seq);
  s.pos = 0;
  s.attn->Reset();
}

LlamaBatch::SequenceMemory LlamaBatch::Memory(size_t seq) const {
  const Attention &a = *At(seq).attn;
  const size_t kv = a.cache().MemoryBytes();
  return SequenceMemory{kv, a.MemoryBytes() - std::min(kv, a.MemoryBytes())};
}

size_t LlamaBatch::MemoryBytes() const {
  size_t total = fwd_.ScratchBytes();
  for (const Sequence &s : seqs_)
    total += s.attn ? s.attn->MemoryBytes() : 0;
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

void LlamaBatch::Run(const Work *work, size_t n_work) {
  if (n_work == 0)
    throw std::invalid_argument("LlamaBatch::Run: no work");
  named_.assign(seqs_.size(), 0);
  size_t rows = 0, with_logits = 0;
  for (size_t i = 0; i < n_work; ++i) {
    const Work &w = work[i];
    const Sequence &s = At(w.seq);
    if (w.n == 0 || !w.tokens)
      throw std::invalid_argument("LlamaBatch::Run: sequence " + std::to_string(w.seq) +
                                  " has no tokens");
    if (named_[w.seq])
      throw std::invalid_argument("LlamaBatch::Run: sequence " + std::to_string(w.seq) +
                                  " named twice");
    named_[w.seq] = 1;
    if (s.pos + w.n > s.capacity) {
      throw std::runtime_error("sequence " + std::to_string(w.seq) +
                               ": context full: " + std::to_string(s.pos + w.n) +
                               " tokens, capacity " + std::to_string(s.capacity));
    }
    fwd_.CheckTokens(w.tokens, w.n);
    rows += w.n;
    with_logits += w.logits != nullptr;
  }
  if (rows > fwd_.max_rows()) {
    throw std::invalid_argument("LlamaBatch::Run: " + std::to_string(rows) + " rows, at most " +
                                std::to_string(fwd_.max_rows()) + " per step (Options::max_rows)");
  }
  const size_t vocab = model_.config().vocab;
  spans_.resize(n_work);
  tokens_.resize(rows);
  logits_.resize(with_logits * vocab);
  for (size_t i = 0, row = 0; i < n_work; row += work[i].n, ++i) {
    const Work &w = work[i];
    Sequence &s = seqs_[w.seq];
    spans_[i] = LlamaForward::Span{s.attn.get(), s.pos, w.n, w.logits != nullptr};
    std::copy(w.tokens, w.tokens + w.n, tokens_.begin() + row);
  }
  fwd_.Run(tokens_.data(), spans_.data(), n_work, LlamaForward::Logits::kLastOfSpan,
           with_logits ? logits_.data() : nullptr);
  for (size_t i = 0, k = 0; i < n_work; ++i) {
    seqs_[work[i].seq].pos += work[i].n;
    if (work[i].logits) {
      std::copy(&logits_[k * vocab], &logits_[(k + 1) * vocab], work[i].logits);
      ++k;
    }
  }
}

void LlamaBatch::Step(const int32_t *tokens, const size_t *seqs, size_t m, float *logits) {
  if (m == 0)
    throw std::invalid_argument("LlamaBatch::Step: no sequences");
  const size_t vocab = model_.config().vocab;
  // Indexes a first decode step would build, each sequence's in one split over the threads.
  for (size_t i = 0; i < m; ++i)
    if (Attention &a = *At(seqs[i]).attn; a.DecodeUnitsPending() > 0)
      a.PrepareDecode(fwd_.pool(), ~size_t(0));
  work_.resize(m);
  for (size_t i = 0; i < m; ++i)
    work_[i] = Work{seqs[i], tokens + i, 1, logits ? logits + i * vocab : nullptr};
  Run(work_.data(), m);
}

} // namespace pig::runtime
