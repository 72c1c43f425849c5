#include "pig/runtime/attention.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "pig/reference/lsh.h"
#include "pig/runtime/budget_attention.h"
#include "pig/runtime/lsh_attention.h"
#include "pig/runtime/lsh_index.h"

namespace pig::runtime {
namespace {

lsh::LshKernelSet DenseSet(const AttentionShape &shape, lsh::DType dtype) {
  // Dense attention uses only the head dim and dtype of the key; (10, 150) picks the
  // specialisation generated for the default configuration when there is one.
  return lsh::KernelRegistry::global().resolve(
      lsh::KernelKey{10, 150, int(shape.head_dim), dtype, lsh::Target::cpu});
}

} // namespace

void CausalDense(const KvCache &cache, const lsh::LshKernelSet &set, size_t layer, size_t pos,
                 size_t n, const float *q, float *out, ThreadPool &pool) {
  const size_t nkv = cache.shape().n_kv_heads;
  // One item per (query, kv-head): the G query heads of a group read K/V once.
  pool.ParallelFor(n * nkv, [&](size_t item, size_t) {
    CausalDenseItem(cache, set, layer, pos, item / nkv, item % nkv, q, out);
  });
}

// Soft-capped attention (AttentionShape::softcap, Gemma 2) of one query's group over [begin, end):
// the kernels have no soft-capping, so this runs scalar, on rows read back as f32, in double like
// pig::ref. Only the dense paths serve it (MakeAttention refuses the sparse methods).
void SoftcappedDense(const KvCache &cache, size_t layer, size_t kvh, size_t begin, size_t end,
                     const float *q, float *out) {
  const AttentionShape &sh = cache.shape();
  const size_t hd = sh.head_dim, G = sh.group(), n = end - begin;
  const double scale = sh.ScaleD(), cap = double(sh.softcap);
  thread_local std::vector<float> k, v;
  thread_local std::vector<double> s, acc;
  k.resize(n * hd);
  v.resize(n * hd);
  for (size_t j = 0; j < n; ++j) {
    cache.KeyRow(layer, kvh, begin + j, &k[j * hd]);
    cache.ValueRow(layer, kvh, begin + j, &v[j * hd]);
  }
  s.resize(n);
  acc.resize(hd);
  for (size_t h = 0; h < G; ++h) {
    const float *qh = q + (kvh * G + h) * hd;
    double mx = -INFINITY;
    for (size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (size_t e = 0; e < hd; ++e)
        dot += double(qh[e]) * double(k[j * hd + e]);
      s[j] = cap * std::tanh(dot * scale / cap);
      mx = std::max(mx, s[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0;
    for (size_t j = 0; j < n; ++j) {
      const double p = std::exp(s[j] - mx);
      sum += p;
      for (size_t e = 0; e < hd; ++e)
        acc[e] += p * double(v[j * hd + e]);
    }
    for (size_t e = 0; e < hd; ++e)
      out[(kvh * G + h) * hd + e] = float(acc[e] / sum);
  }
}

void CausalDenseItem(const KvCache &cache, const lsh::LshKernelSet &set, size_t layer, size_t pos,
                     size_t i, size_t kvh, const float *q, float *out) {
  const AttentionShape &sh = cache.shape();
  const size_t hd = sh.head_dim, nh = sh.n_heads, G = sh.group();
  const size_t end = pos + i + 1, begin = sh.Begin(layer, end);
  if (sh.softcap > 0) {
    SoftcappedDense(cache, layer, kvh, begin, end, q + i * nh * hd, out + i * nh * hd);
    return;
  }
  const float scale = sh.Scale();
  float lse[lsh::kMaxGroup];
  // Groups larger than the kernels' limit run as several calls (each reads K/V again).
  for (size_t h0 = 0; h0 < G; h0 += size_t(lsh::kMaxGroup)) {
    const size_t g = std::min(G - h0, size_t(lsh::kMaxGroup));
    lsh::DenseAttentionArgs a;
    a.q = q + (i * nh + kvh * G + h0) * hd;
    a.G = int(g);
    a.d = hd;
    a.scale = scale;
    const lsh::KvRows rows = cache.Rows(layer, kvh);
    a.k = rows.k;
    a.v = rows.v;
    a.paged = rows.paged;
    a.dtype = cache.dtype();
    a.begin = begin;
    a.end = end;
    a.out = out + (i * nh + kvh * G + h0) * hd;
    a.lse = lse;
    set.dense_attention(a);
  }
}

DecodeItems DenseDecodeSplit::Begin(const KvCache &cache, const lsh::LshKernelSet &set,
                                    size_t layer, size_t n_tokens, const float *q, float *out) {
  const AttentionShape &sh = cache.shape();
  // A window attends its last positions only: the parts split [begin, n_tokens).
  const size_t begin = sh.Begin(layer, n_tokens);
  const size_t H = sh.n_kv_heads, G = sh.group(), hd = sh.head_dim,
               P = sh.softcap > 0 ? 1 : Parts(n_tokens - begin);
  DecodeItems w;
  w.count = H * P;
  if (P == 1) { // CausalDense's item, bit for bit
    w.run = [&cache, &set, layer, n_tokens, q, out](size_t kvh, size_t) {
      CausalDenseItem(cache, set, layer, n_tokens - 1, 0, kvh, q, out);
    };
    w.finish = [] {};
    return w;
  }
  out_.resize(H * P * G * hd);
  lse_.resize(H * P * G);
  w.run = [this, &cache, &set, layer, begin, n_tokens, q, G, hd, P](size_t item, size_t) {
    const size_t kvh = item / P, part = item % P;
    const lsh::KvRows rows = cache.Rows(layer, kvh);
    for (size_t h0 = 0; h0 < G; h0 += size_t(lsh::kMaxGroup)) {
      const size_t g = std::min(G - h0, size_t(lsh::kMaxGroup));
      lsh::DenseAttentionArgs a;
      a.q = q + (kvh * G + h0) * hd;
      a.G = int(g);
      a.d = hd;
      a.scale = cache.shape().Scale();
      a.k = rows.k;
      a.v = rows.v;
      a.paged = rows.paged;
      a.dtype = cache.dtype();
      a.begin = begin + (n_tokens - begin) * part / P;
      a.end = begin + (n_tokens - begin) * (part + 1) / P;
      a.out = out_.data() + ((kvh * P + part) * G + h0) * hd;
      a.lse = lse_.data() + (kvh * P + part) * G + h0;
      set.dense_attention(a);
    }
  };
  w.finish = [this, &set, out, H, G, hd, P] {
    for (size_t kvh = 0; kvh < H; ++kvh)
      for (size_t p = 1; p < P; ++p) { // parts 1.. folded into part 0, the last into out
        lsh::MergeArgs m;
        m.out_a = out_.data() + kvh * P * G * hd;
        m.lse_a = lse_.data() + kvh * P * G;
        m.out_b = out_.data() + (kvh * P + p) * G * hd;
        m.lse_b = lse_.data() + (kvh * P + p) * G;
        m.heads = G;
        m.d = hd;
        m.out = p + 1 == P ? out + kvh * G * hd : out_.data() + kvh * P * G * hd;
        m.lse = lse_.data() + kvh * P * G;
        set.merge(m);
      }
  };
  return w;
}

HashBatch::Ticket HashBatch::Add(const lsh::LshKernelSet &set, const lsh::SimHash &W,
                                 const float *a, size_t na, const float *b, size_t nb) {
  const size_t d = W.d();
  std::lock_guard lock(mu_);
  size_t g = 0;
  while (g < used_ && groups_[g].W != &W)
    ++g;
  if (g == used_) {
    if (used_ == groups_.size())
      groups_.emplace_back();
    ++used_;
    groups_[g].W = &W;
    groups_[g].set = set;
    groups_[g].n = 0;
    groups_[g].rows.clear();
  }
  Group &grp = groups_[g];
  const Ticket t{g, grp.n};
  grp.rows.insert(grp.rows.end(), a, a + na * d);
  grp.rows.insert(grp.rows.end(), b, b + nb * d);
  grp.n += na + nb;
  return t;
}

void HashBatch::Encode(ThreadPool &pool) {
  // Blocks of 8 rows (the encode kernel's widest pass), as many per item as spreads every
  // group's rows over the threads.
  std::vector<std::pair<size_t, size_t>> chunks; // (group, first row)
  size_t total = 0;
  for (size_t g = 0; g < used_; ++g)
    total += groups_[g].n;
  if (total == 0)
    return;
  const size_t per = std::max<size_t>(8, (total + 8 * pool.size() - 1) / (8 * pool.size()) * 8);
  for (size_t g = 0; g < used_; ++g) {
    Group &grp = groups_[g];
    grp.codes.resize(grp.n * size_t(grp.W->L()));
    for (size_t r = 0; r < grp.n; r += per)
      chunks.emplace_back(g, r);
  }
  pool.ParallelFor(chunks.size(), [&](size_t c, size_t) {
    Group &grp = groups_[chunks[c].first];
    const size_t r = chunks[c].second, d = grp.W->d(), L = size_t(grp.W->L());
    lsh::EncodeArgs ea;
    ea.x = grp.rows.data() + r * d;
    ea.dtype = lsh::DType::f32;
    ea.rows = std::min(per, grp.n - r);
    ea.W = grp.W->view();
    ea.codes = grp.codes.data() + r * L;
    grp.set.encode(ea);
  });
}

const std::uint16_t *HashBatch::Codes(Ticket t) const {
  return groups_[t.group].codes.data() + t.row * size_t(groups_[t.group].W->L());
}

size_t HashBatch::rows() const {
  size_t n = 0;
  for (size_t g = 0; g < used_; ++g)
    n += groups_[g].n;
  return n;
}

void HashBatch::Clear() { used_ = 0; }

void BatchAttention::Run(size_t layer, const AttendSpan *spans, size_t n_spans, ThreadPool &pool,
                         bool batch_hash) {
  size_t split = 0;
  for (size_t s = 0; s < n_spans; ++s)
    split += spans[s].n == 1 && spans[s].attention->SplitsDecode();
  HashBatch *hash = batch_hash && split >= 2 ? &hash_ : nullptr;
  hash_.Clear();
  items_.clear();
  for (size_t s = 0; s < n_spans; ++s) {
    const AttendSpan &x = spans[s];
    if (x.n != 1 || !x.attention->SplitsDecode()) {
      x.attention->Forward(layer, x.pos, x.n, x.q, x.k, x.v, x.out, pool);
      continue;
    }
    items_.push_back(x.attention->BeginDecode(layer, x.pos, x.q, x.k, x.v, x.out, pool, hash));
  }
  if (items_.empty())
    return;
  // Stage 0: every item of a row without stages, the first stage of the others; stage 1: the
  // rest, after the encode. Within a row the items keep their order (an item may wait for an
  // earlier one of its row, never a later one).
  bool staged = false;
  for (int st = 0; st < 2; ++st) {
    first_[st].clear();
    row_[st].clear();
  }
  size_t total[2] = {0, 0};
  for (size_t r = 0; r < items_.size(); ++r) {
    const DecodeItems &w = items_[r];
    const size_t first = w.first_stage > 0 ? w.first_stage : w.count;
    staged |= w.first_stage > 0;
    first_[0].push_back(total[0]);
    row_[0].push_back(r);
    total[0] += first;
    if (w.first_stage > 0) {
      first_[1].push_back(total[1]);
      row_[1].push_back(r);
      total[1] += w.count - w.first_stage;
    }
  }
  auto run_stage = [&](int st) {
    if (total[st] == 0)
      return;
    if (first_[st].size() == 1) {
      const DecodeItems &w = items_[row_[st][0]];
      const size_t base = st == 0 ? 0 : w.first_stage;
      pool.ParallelFor(total[st], [&](size_t i, size_t thread) { w.run(base + i, thread); });
      return;
    }
    pool.ParallelFor(total[st], [&](size_t item, size_t thread) {
      const std::vector<size_t> &f = first_[st];
      const size_t k = size_t(std::upper_bound(f.begin(), f.end(), item) - f.begin()) - 1;
      const DecodeItems &w = items_[row_[st][k]];
      w.run((st == 0 ? 0 : w.first_stage) + item - f[k], thread);
    });
  };
  run_stage(0);
  if (staged) {
    hash_.Encode(pool);
    run_stage(1);
  }
  for (const DecodeItems &w : items_)
    w.finish();
}

DenseAttention::DenseAttention(const AttentionShape &shape, lsh::DType dtype,
                               std::shared_ptr<KvPool> pool)
    : cache_(shape, dtype, std::move(pool)), set_(DenseSet(shape, dtype)) {}

void DenseAttention::Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                             const float *v, float *out, ThreadPool &pool) {
  if (n == 1) {
    const DecodeItems w = BeginDecode(layer, pos, q, k, v, out, pool);
    pool.ParallelFor(w.count, w.run);
    w.finish();
    return;
  }
  cache_.Append(layer, pos, n, k, v);
  CausalDense(cache_, set_, layer, pos, n, q, out, pool);
}

DecodeItems DenseAttention::BeginDecode(size_t layer, size_t pos, const float *q, const float *k,
                                        const float *v, float *out, ThreadPool &, HashBatch *) {
  cache_.Append(layer, pos, 1, k, v);
  DecodeItems w = split_.Begin(cache_, set_, layer, pos + 1, q, out);
  w.finish = [this, layer, merge = std::move(w.finish)] {
    merge();
    if (layer == 0)
      ++decode_steps_;
  };
  return w;
}

AttentionStats DenseAttention::stats() const {
  AttentionStats s;
  s.decode_steps = decode_steps_;
  s.kernels = "dense kernel, " + lsh::KernelRegistry::describe(set_);
  return s;
}

std::string LayerLsh::str() const {
  if (dense)
    return "dense";
  std::string s = "K=";
  s.append(std::to_string(K)).append(" L=").append(std::to_string(L));
  s.append(" t=").append(std::to_string(t));
  if (r != 0)
    s.append(" r=").append(std::to_string(r));
  return s;
}

std::vector<LayerLsh> AttentionSpec::LayerChoices(size_t n_layers) const {
  if (!layers.empty())
    return layers;
  std::vector<LayerLsh> c(n_layers, LayerLsh{{K, L, t, r}});
  for (size_t l : DenseLayers(n_layers))
    if (l < n_layers)
      c[l].dense = true;
  return c;
}

std::vector<size_t> AttentionSpec::DenseLayers(size_t n_layers) const {
  if (!layers.empty()) {
    std::vector<size_t> d;
    for (size_t l = 0; l < layers.size(); ++l)
      if (layers[l].dense)
        d.push_back(l);
    return d;
  }
  if (dense_layers_set)
    return dense_layers;
  std::vector<size_t> d{0};
  if (n_layers / 2 != 0)
    d.push_back(n_layers / 2);
  return d;
}

void CheckServedTransform(const spec::TransformSpec &t) {
  if (t.identity())
    return;
  if (t.linear != spec::TransformSpec::Linear::whiten || t.mips > 0)
    throw std::invalid_argument("hash transform " + t.str() +
                                ": the runtime serves plain and whiten:a=A (pig-eval "
                                "attention-error --transforms evaluates the others)");
  t.validate(1);
}

spec::TransformSpec ParseServedTransform(std::string_view text) {
  const spec::TransformSpec t = spec::TransformSpec::parse(text);
  CheckServedTransform(t);
  return t;
}

void AttentionSpec::Validate(size_t n_layers) const {
  ref::LshConfig{K, L, t, seed, r}.validate();
  if (r != 0 && method == spec::Method::lsh_hybrid)
    throw std::invalid_argument("lsh-hybrid ranks by the codes' Hamming distance and has no "
                                "probe radius: r = " +
                                std::to_string(r) + " applies to magicpig only");
  if (!(budget > 0.0 && budget <= 1.0))
    throw std::invalid_argument("budget must be in (0, 1], got " + std::to_string(budget));
  if (quest_page == 0)
    throw std::invalid_argument("quest page size must be at least 1");
  if (const std::string e = schedule.validate(); !e.empty())
    throw std::invalid_argument(e);
  if (!layers.empty()) {
    if (layers.size() != n_layers) {
      throw std::invalid_argument("per-layer choices for " + std::to_string(layers.size()) +
                                  " layers, the model has " + std::to_string(n_layers));
    }
    if (dense_layers_set)
      throw std::invalid_argument("dense layers are given by the per-layer choices; not both");
    for (size_t l = 0; l < layers.size(); ++l) {
      if (layers[l].dense)
        continue;
      try {
        ref::LshConfig{layers[l], seed}.validate();
      } catch (const std::invalid_argument &e) {
        throw std::invalid_argument("layer " + std::to_string(l) + ": " + e.what());
      }
    }
  }
  CheckServedTransform(transform); // like K and L, ignored by the other methods
  if (method == spec::Method::lsh_hybrid) {
    spec::HybridConfig h = hybrid;
    h.budget = budget;
    h.validate();
    if (h.bits > K * L)
      throw std::invalid_argument("lsh-hybrid: bits=" + std::to_string(h.bits) +
                                  " but the codes have K L = " + std::to_string(K * L));
    if (h.rank == spec::HybridRank::lowrank)
      throw std::invalid_argument(
          "lsh-hybrid: rank=lowrank is in pig::ref only for now (pig-eval attention-error); the "
          "runtime ranks by hamming or collisions");
    if (h.prefilter > 0)
      throw std::invalid_argument(
          "lsh-hybrid: pre (the coarse-then-full cascade) is in pig::ref only for now (pig-eval "
          "attention-error); the runtime ranks every token with the whole sketch");
    if (h.reuse > 1)
      throw std::invalid_argument(
          "lsh-hybrid: reuse (a selection attended by later steps) is in pig::ref only "
          "(pig-eval attention-error): a one-step-old selection was measured worse than TopK's "
          "(docs/HYBRID.md)");
    if (h.rank == spec::HybridRank::quant && (h.effective_kbits() != 4 || h.candidates > 0))
      throw std::invalid_argument(
          "lsh-hybrid: rank=quant runs with int4 keys (kbits=4) and every token ranked (no cand) "
          "in the runtime; the other forms are in pig::ref only (pig-eval attention-error)");
    if (h.candidates > L)
      throw std::invalid_argument("lsh-hybrid: cand=" + std::to_string(h.candidates) +
                                  " but the codes have L = " + std::to_string(L) + " tables");
  }
  for (size_t l : DenseLayers(n_layers)) {
    if (l >= n_layers) {
      throw std::invalid_argument("dense layer " + std::to_string(l) + " outside the model's " +
                                  std::to_string(n_layers) + " layers");
    }
  }
}

std::string AttentionSpec::DenseBelowName() const {
  return dense_below == kDenseBelowMeasured ? "measured" : std::to_string(dense_below);
}

std::string AttentionSpec::MeanWindowName() const {
  return mean_window == kMeanOfPrefix ? "prefix" : std::to_string(mean_window);
}

std::string AttentionSpec::str(size_t n_layers) const {
  std::ostringstream s;
  s << method_name();
  if (method == spec::Method::magicpig && !layers.empty()) {
    // Runs of equal choices: "layers 0:dense 1-14:K=8 L=75 t=2 15:dense ..."
    s << " per-layer[";
    for (size_t b = 0; b < layers.size();) {
      size_t e = b + 1;
      while (e < layers.size() && layers[e] == layers[b])
        ++e;
      s << (b ? " " : "") << b;
      if (e - b > 1)
        s << "-" << e - 1;
      s << ":" << layers[b].str();
      b = e;
    }
    s << "]";
    if (!(schedule == lsh::Schedule{}))
      s << " schedule=[" << schedule.str() << "]";
  } else if (method == spec::Method::magicpig) {
    s << " K=" << K << " L=" << L << " t=" << t;
    if (r != 0)
      s << " r=" << r;
    if (!(schedule == lsh::Schedule{}))
      s << " schedule=[" << schedule.str() << "]";
  } else if (method != spec::Method::dense)
    s << " budget=" << budget;
  if (method == spec::Method::magicpig && !transform.identity())
    s << " transform=" << transform.str();
  if (method == spec::Method::magicpig && mean_window > 0)
    s << " mean-window=" << MeanWindowName();
  if (method == spec::Method::magicpig && dense_below > 0)
    s << " dense-below=" << DenseBelowName();
  if (method == spec::Method::quest)
    s << " page=" << quest_page;
  if (method == spec::Method::lsh_hybrid) {
    // the hybrid's own description without its budget ("b=2% "), then W's (K, L)
    const std::string h = hybrid.str();
    s << " " << h.substr(h.find(' ') + 1) << " K=" << K << " L=" << L;
  }
  if (method != spec::Method::dense)
    s << " sink=" << sink << " local=" << local;
  if (method != spec::Method::dense && !(method == spec::Method::magicpig && !layers.empty())) {
    s << " dense-layers={";
    const auto d = DenseLayers(n_layers);
    for (size_t i = 0; i < d.size(); ++i)
      s << (i ? "," : "") << d[i];
    s << "}";
  }
  s << " kv=" << lsh::to_string(kv_dtype);
  return s.str();
}

size_t ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape) {
  spec.Validate(shape.n_layers);
  if (spec.method == spec::Method::dense) {
    KvCache::Check(shape, spec.kv_dtype); // DenseAttention's checks, in its order
    DenseSet(shape, spec.kv_dtype);
    return KvCache::BytesFor(shape, spec.kv_dtype);
  }
  if (spec.method == spec::Method::magicpig)
    return LshAttention::ReservedBytesOf(spec, shape);
  return BudgetAttention::ReservedBytesOf(spec, shape);
}

void CheckSparseServes(const AttentionSpec &spec, const AttentionShape &shape) {
  const std::string method = spec::name(spec.method);
  if (shape.softcap > 0)
    throw std::invalid_argument(method +
                                " does not serve soft-capped attention logits yet (this model's "
                                "attn_logit_softcapping; Gemma 2): use --attention dense");
}

AttentionSpec LocalLayersDense(const AttentionSpec &spec, const AttentionShape &shape) {
  if (!shape.Windowed())
    return spec;
  AttentionSpec s = spec;
  if (!s.layers.empty()) {
    for (size_t l = 0; l < s.layers.size(); ++l)
      if (shape.Window(l))
        s.layers[l].dense = true;
    return s;
  }
  std::vector<size_t> dense = s.DenseLayers(shape.n_layers);
  for (size_t l = 0; l < shape.n_layers; ++l)
    if (shape.Window(l) && std::find(dense.begin(), dense.end(), l) == dense.end())
      dense.push_back(l);
  std::sort(dense.begin(), dense.end());
  s.dense_layers = dense;
  s.dense_layers_set = true;
  return s;
}

std::unique_ptr<Attention> MakeAttention(const AttentionSpec &spec, const AttentionShape &shape,
                                         std::shared_ptr<KvPool> pool) {
  spec.Validate(shape.n_layers);
  if (spec.method == spec::Method::dense)
    return std::make_unique<DenseAttention>(shape, spec.kv_dtype, std::move(pool));
  if (spec.method == spec::Method::magicpig &&
      spec.dense_below == AttentionSpec::kDenseBelowMeasured) {
    AttentionSpec s = spec;
    s.dense_below = MeasuredDenseCrossover(spec, shape);
    return std::make_unique<LshAttention>(s, shape, std::move(pool));
  }
  if (spec.method == spec::Method::magicpig)
    return std::make_unique<LshAttention>(spec, shape, std::move(pool));
  return MakeBudgetAttention(spec, shape, std::move(pool));
}

} // namespace pig::runtime
