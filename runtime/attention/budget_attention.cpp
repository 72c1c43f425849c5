#include "pig/runtime/budget_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>

#include "part_timer.h"
#include "pig/reference/hybrid.h"
#include "pig/reference/kv_quant.h"
#include "pig/reference/lsh.h"
#include "pig/reference/random.h"
#include "pig/runtime/hybrid_rank.h"
#include "pig/runtime/hybrid_select.h"
#include "pig/runtime/lsh_index.h"
#include "pig/spec/hash.h"
#include "pig/spec/lsh_params.h"

namespace pig::runtime {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline float ToF32(float x) { return x; }
// bf16 -> f32 is exact: the bf16 bits are the top half of the f32.
inline float ToF32(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }

// The rows of one (layer, kv-head) of a cache, of element type E, read in place through its
// pages (KvCache::Rows): row i is at(i).
template <typename E> struct Rows {
  const std::uint8_t *base = nullptr;
  const std::int32_t *pages = nullptr;
  size_t page_stride = 0, row_bytes = 0, mask = 0;
  int shift = 0; // log2 of the rows per page (a KvPool's block: a power of two)

  Rows(const void *b, const lsh::PagedRows &p, lsh::DType dtype, size_t d)
      : base(static_cast<const std::uint8_t *>(b)), pages(p.pages), page_stride(p.page_stride),
        row_bytes(lsh::row_bytes(dtype, d)) {
    if (!pages || (p.page_rows & (p.page_rows - 1)) != 0)
      throw std::logic_error("budget attention: rows in pages of a power of two");
    while ((size_t(1) << shift) < p.page_rows)
      ++shift;
    mask = p.page_rows - 1;
  }
  const E *at(size_t i) const {
    return reinterpret_cast<const E *>(base + size_t(pages[i >> shift]) * page_stride +
                                       (i & mask) * row_bytes);
  }
};

// Row i as something indexable by j in [0, d): the row itself for f32 and bf16 (ToF32 per
// element), its dequantised copy in `tmp` for q8 (a q8 element's value needs its block's scale).
template <typename E>
const E *RowOf(const Rows<E> &rows, size_t i, size_t d, std::vector<float> &) {
  (void)d;
  return rows.at(i);
}
const float *RowOf(const Rows<lsh::Q8> &rows, size_t i, size_t d, std::vector<float> &tmp) {
  tmp.resize(d);
  ref::dequantize_q8(reinterpret_cast<const std::uint8_t *>(rows.at(i)), d, tmp.data());
  return tmp.data();
}

template <typename E>
void Logits4(const float *q, const Rows<E> &keys, size_t d, double scale, size_t begin, size_t end,
             double *z);

// Scaled logits scale * q.k_i of rows [begin, end) into z[0, end - begin). Each q.k is summed in
// double in index order, like pig::ref's dot (every product of two floats is exact in double),
// so the selections below see the reference's scores. Four rows at a time: four independent
// sums hide the latency of the sequential adds.
template <typename E>
void Logits(const float *q, const Rows<E> &keys, size_t d, double scale, size_t begin, size_t end,
            double *z) {
  size_t i = begin;
  if constexpr (std::is_same_v<E, lsh::Q8>) {
    thread_local std::vector<float> tmp;
    for (; i < end; ++i) {
      const float *k = RowOf(keys, i, d, tmp);
      double s = 0;
      for (size_t j = 0; j < d; ++j)
        s += double(q[j]) * double(k[j]);
      z[i - begin] = scale * s;
    }
  } else {
    Logits4(q, keys, d, scale, begin, end, z);
  }
}

// Logits for f32 and bf16 rows, read in place.
template <typename E>
void Logits4(const float *q, const Rows<E> &keys, size_t d, double scale, size_t begin, size_t end,
             double *z) {
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
    const E *k0 = keys.at(i), *k1 = keys.at(i + 1), *k2 = keys.at(i + 2), *k3 = keys.at(i + 3);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t j = 0; j < d; ++j) {
      const double qj = double(q[j]);
      s0 += qj * double(ToF32(k0[j]));
      s1 += qj * double(ToF32(k1[j]));
      s2 += qj * double(ToF32(k2[j]));
      s3 += qj * double(ToF32(k3[j]));
    }
    z[i - begin] = scale * s0;
    z[i - begin + 1] = scale * s1;
    z[i - begin + 2] = scale * s2;
    z[i - begin + 3] = scale * s3;
  }
  for (; i < end; ++i) {
    const E *k = keys.at(i);
    double s = 0;
    for (size_t j = 0; j < d; ++j)
      s += double(q[j]) * double(ToF32(k[j]));
    z[i - begin] = scale * s;
  }
}

// pig::ref's softmax_values over the listed tokens: weights relative to the largest non-NaN
// logit, summed in list order, values accumulated in double, the output rounded to float once.
// Returns the natural-log lse (-inf for an empty set; NaN, with a NaN output, if a logit is NaN
// or +inf).
template <typename E>
double SoftmaxValues(const double *z, const std::uint32_t *ids, size_t count, const Rows<E> &values,
                     size_t d, double *acc, float *out) {
  double m = -kInf;
  for (size_t i = 0; i < count; ++i)
    if (z[i] > m)
      m = z[i];
  if (m == -kInf) {
    double lse = -kInf;
    std::fill(out, out + d, 0.0f);
    for (size_t i = 0; i < count; ++i)
      if (std::isnan(z[i])) {
        lse = z[i];
        std::fill(out, out + d, std::numeric_limits<float>::quiet_NaN());
      }
    return lse;
  }
  double sum = 0;
  for (size_t i = 0; i < count; ++i)
    sum += std::exp(z[i] - m);
  std::fill(acc, acc + d, 0.0);
  for (size_t i = 0; i < count; ++i) {
    const double w = std::exp(z[i] - m) / sum;
    thread_local std::vector<float> tmp;
    const auto *v = RowOf(values, size_t(ids[i]), d, tmp);
    for (size_t j = 0; j < d; ++j)
      acc[j] += w * double(ToF32(v[j]));
  }
  for (size_t j = 0; j < d; ++j)
    out[j] = float(acc[j]);
  return m + std::log(sum);
}

// pig::ref::merge of two parts over disjoint token sets (ALGORITHM.md 1.7); out may alias a.
void Merge(const float *a, double lse_a, const float *b, double lse_b, size_t d, float *out) {
  if (lse_a == -kInf) {
    std::copy(b, b + d, out);
    return;
  }
  if (lse_b == -kInf) {
    std::copy(a, a + d, out);
    return;
  }
  const double m = std::max(lse_a, lse_b);
  const double wa = std::exp(lse_a - m), wb = std::exp(lse_b - m);
  for (size_t j = 0; j < d; ++j)
    out[j] = float((wa * double(a[j]) + wb * double(b[j])) / (wa + wb));
}

// rank=quant with a cut (ref::HybridConfig::cut), the sparse path's listing: every indexed token
// scoring >= `need` (and maybe a few just below) in `pos` (pos's first `count` entries; pos keeps
// n entries, so that no call refills it), their scores in z exactly as lsh::hybrid_quant_scores
// computes them. Found by f32 passes over the products p_i = kscale_i acc_i
// (lsh::hybrid_quant_extent, hybrid_quant_above) instead of a score per token.
//
// Why every token scoring >= need is listed: a score is s_i = scale ((sq kscale_i) acc_i) =
// c P_i (1 + e) with c = scale sq, P_i the exact product and |e| <= 2^-52, and p_i = P_i (1 + e'),
// |e'| <= 2^-24. So s_i >= t implies p_i >= t / c - 2^-20 (|t / c| + max |p|): `Bound` below.
struct QuantListing {
  const float *acc = nullptr, *kscale = nullptr;
  size_t n = 0;
  double sq = 0, scale = 0, c = 0;
  float pmax = 0, pabs = 0;
  size_t count = 0;
  double need = 0;

  // False when no listing can be bounded: no positive finite scale, a product not finite.
  bool Init(const float *a, const float *k, size_t n_, double sq_, double scale_) {
    acc = a;
    kscale = k;
    n = n_;
    sq = sq_;
    scale = scale_;
    c = scale * sq;
    if (!(c > 0) || !std::isfinite(c))
      return false;
    lsh::hybrid_quant_extent(acc, kscale, n, &pmax, &pabs);
    return std::isfinite(pmax) && std::isfinite(pabs);
  }
  // The best score is at least pmax's token's, c pmax (1 - 2^-23).
  double BestLow() const { return c * double(pmax) - std::abs(c * double(pmax)) * 0x1p-20; }
  float Bound(double t) const {
    const double x = t / c, lo = x - 0x1p-20 * (std::abs(x) + double(pabs));
    float f = float(lo); // rounded down, so that no token above lo is missed
    if (double(f) > lo)
      f = std::nextafter(f, -std::numeric_limits<float>::infinity());
    return f;
  }
  // How many tokens List(t) would list.
  size_t Count(double t) const {
    return lsh::hybrid_quant_above(acc, kscale, n, Bound(t), nullptr);
  }
  // Lists from t (the indices only); returns the count.
  size_t List(double t, std::vector<std::uint32_t> &pos) {
    if (pos.size() < n)
      pos.resize(n);
    need = t;
    return count = lsh::hybrid_quant_above(acc, kscale, n, Bound(t), pos.data());
  }
  void Scores(const std::vector<std::uint32_t> &pos, std::vector<double> &z) const {
    z.resize(count);
    for (size_t k = 0; k < count; ++k) {
      const double x = scale * (sq * double(kscale[pos[k]]) * double(acc[pos[k]]));
      z[k] = std::isnan(x) ? -kInf : x;
    }
  }
};

spec::Method ParseMethod(spec::Method method) {
  if (spec::uses_budget(method))
    return method;
  throw std::invalid_argument(
      std::string("budget attention: method must be topk, oracle, quest or lsh-hybrid, got '") +
      spec::name(method) + "'");
}

// Validates before anything is allocated (the KV store may be large).
// Windowed layers become dense ones (LocalLayersDense).
AttentionSpec Checked(const AttentionSpec &spec, const AttentionShape &shape) {
  ParseMethod(spec.method);
  spec.Validate(shape.n_layers);
  CheckSparseServes(spec, shape);
  if (spec.quest_page == 0)
    throw std::invalid_argument("Quest page size must be >= 1, got 0");
  return LocalLayersDense(spec, shape);
}

} // namespace

size_t BudgetTokens(double budget, size_t n_indexed) {
  if (n_indexed == 0)
    return 0;
  const double x = budget * double(n_indexed);
  // x >= 1 is false for NaN: a NaN budget (rejected by Validate anyway) reads one token.
  const size_t m = x >= 1.0 ? size_t(std::llround(std::min(x, double(n_indexed)))) : 1;
  return std::min(m, n_indexed);
}

std::uint64_t OracleSeed(std::uint64_t sample_seed, size_t layer, size_t head, size_t pos) {
  using spec::mix64;
  std::uint64_t s = mix64(sample_seed + spec::kGoldenGamma * (std::uint64_t(layer) + 1));
  s = mix64(s ^ (0xc2b2ae3d27d4eb4fULL * (std::uint64_t(head) + 1)));
  return mix64(s ^ (0x165667b19e3779f9ULL * (std::uint64_t(pos) + 1)));
}

struct BudgetAttention::Scratch {
  std::vector<double> z;            // logits of the indexed tokens (oracle: then their CDF)
  std::vector<std::uint32_t> order; // indexed tokens or pages being ranked; oracle draws
  std::vector<std::uint32_t> ids;   // attended tokens, ascending
  std::vector<double> zs;           // their logits (lsh-hybrid: their biases)
  std::vector<double> lz;           // lsh-hybrid: their logits minus their biases
  std::vector<std::uint32_t> cand;  // lsh-hybrid with a cut: the listed tokens (rank=quant)
  std::vector<double> tmp;          // lsh-hybrid with a cut: a copy of their scores
  std::vector<double> acc;          // head_dim
  std::vector<float> part;          // head_dim: oracle's sampled part
  lsh::HybridSampler hybrid;        // lsh-hybrid's head and draw
};

namespace {
// The dense kernels (throws std::invalid_argument when none can serve the head dim).
lsh::LshKernelSet Resolve(const AttentionSpec &spec, const AttentionShape &shape) {
  return lsh::KernelRegistry::global().resolve(
      lsh::KernelKey{spec.K, spec.L, int(shape.head_dim), spec.kv_dtype});
}
} // namespace

size_t BudgetAttention::ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape) {
  // The constructor's checks, in its order, without allocating.
  Checked(spec, shape);
  KvCache::Check(shape, spec.kv_dtype);
  Resolve(spec, shape);
  return KvCache::BytesFor(shape, spec.kv_dtype); // Quest's pages: none yet
}

BudgetAttention::BudgetAttention(const AttentionSpec &spec, const AttentionShape &shape,
                                 std::shared_ptr<KvPool> pool)
    : spec_(Checked(spec, shape)), method_(ParseMethod(spec.method)),
      cache_(shape, spec.kv_dtype, std::move(pool)), set_(Resolve(spec, shape)),
      dense_layer_(shape.n_layers, false), qmin_(shape.n_layers * shape.n_kv_heads),
      qmax_(shape.n_layers * shape.n_kv_heads), quest_end_(shape.n_layers, spec.sink),
      head_count_(shape.n_heads) {
  for (size_t l : spec_.DenseLayers(shape.n_layers)) // local (windowed) layers among them
    dense_layer_[l] = true;
  if (method_ == Method::lsh_hybrid) {
    hybrid_.resize(shape.n_layers * shape.n_kv_heads);
    simhash_ = std::make_unique<lsh::SimHash>(spec.seed, shape.head_dim, spec.K, spec.L);
  }
  // By name, not by index: method_ is spec::Method now (dense and magicpig come first).
  std::string what = method_ == Method::topk ? "topk baseline (scalar f64 selection and softmax)"
                     : method_ == Method::oracle
                         ? "oracle sampling baseline (scalar f64 selection "
                           "and softmax)"
                         : "quest baseline (scalar f64 selection and softmax)";
  if (method_ == Method::lsh_hybrid) {
    // Which of its steps run as Highway kernels in this configuration (docs/HYBRID.md).
    const spec::HybridConfig &h = spec_.hybrid;
    what = std::string("lsh-hybrid (") +
           (h.rank == spec::HybridRank::quant ? "int4 keys; " : "encode kernel codes; ") +
           (h.rank == spec::HybridRank::quant     ? "Highway int4-key scan per kv-head, scores"
            : h.rank != spec::HybridRank::hamming ? "scalar collision-count scores"
            : h.candidates > 0 ? "Highway Hamming scan per kv-head, scalar scores (cand)"
                               : "Highway Hamming scan per kv-head and scores") +
           "; Highway selection, draw and f64 softmax" +
           (h.epsilon > 0 ? ", the tail grown by the error bound" : "") + ")";
  }
  stats_.kernels = what + "; dense: " + lsh::KernelRegistry::describe(set_);
}

BudgetAttention::~BudgetAttention() = default;

size_t BudgetAttention::IndexedEnd(size_t n) const {
  return n > spec_.sink + spec_.local ? n - spec_.local : spec_.sink;
}

void BudgetAttention::QuestTruncate(size_t layer, size_t pos) {
  if (pos >= quest_end_[layer])
    return;
  const size_t sink = spec_.sink, P = spec_.quest_page, d = shape().head_dim;
  const size_t end = pos <= sink ? sink : sink + (pos - sink) / P * P;
  for (size_t kvh = 0; kvh < shape().n_kv_heads; ++kvh) {
    qmin_[layer * shape().n_kv_heads + kvh].resize((end - sink) / P * d);
    qmax_[layer * shape().n_kv_heads + kvh].resize((end - sink) / P * d);
  }
  quest_end_[layer] = end;
}

void BudgetAttention::QuestFold(size_t layer, size_t end) {
  if (end <= quest_end_[layer])
    return;
  const size_t sink = spec_.sink, P = spec_.quest_page, d = shape().head_dim;
  std::vector<float> row(d);
  for (size_t kvh = 0; kvh < shape().n_kv_heads; ++kvh) {
    std::vector<float> &lo = qmin_[layer * shape().n_kv_heads + kvh];
    std::vector<float> &hi = qmax_[layer * shape().n_kv_heads + kvh];
    for (size_t t = quest_end_[layer]; t < end; ++t) {
      cache_.KeyRow(layer, kvh, t, row.data());
      const size_t page = (t - sink) / P;
      if ((t - sink) % P == 0) {
        lo.resize((page + 1) * d);
        hi.resize((page + 1) * d);
        std::copy(row.begin(), row.end(), lo.begin() + std::ptrdiff_t(page * d));
        std::copy(row.begin(), row.end(), hi.begin() + std::ptrdiff_t(page * d));
        continue;
      }
      // std::min / std::max exactly as pig::ref::page_bounds (a NaN key leaves a bound as is).
      for (size_t j = 0; j < d; ++j) {
        lo[page * d + j] = std::min(lo[page * d + j], row[j]);
        hi[page * d + j] = std::max(hi[page * d + j], row[j]);
      }
    }
  }
  quest_end_[layer] = end;
}

void BudgetAttention::Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                              const float *v, float *out, ThreadPool &pool) {
  cache_.Append(layer, pos, n, k, v); // validates layer and capacity
  if (n == 0)
    return;
  const size_t n_tok = pos + n;
  if (method_ == Method::quest && !dense_layer_[layer]) {
    // Positions from pos on are rewritten (normally: appended); and after a rewind the pages may
    // reach past the new indexed end, into what is now the local window.
    QuestTruncate(layer, std::min(pos, IndexedEnd(n_tok)));
    QuestFold(layer, IndexedEnd(n_tok));
  }
  if (method_ == Method::lsh_hybrid && !dense_layer_[layer]) {
    HybridTruncate(layer, std::min(pos, IndexedEnd(n_tok)));
    // Decode steps only: a prompt's keys are encoded at the first decode step after it (with the
    // mean of everything indexed then, as the reference builds its index).
    if (n == 1 && n_tok > spec_.sink + spec_.local)
      HybridFold(layer, IndexedEnd(n_tok), pool);
  }
  if (n > 1) {
    CausalDense(cache_, set_, layer, pos, n, q, out, pool);
    return;
  }
  if (layer == 0)
    ++stats_.decode_steps;
  if (dense_layer_[layer] || n_tok <= spec_.sink + spec_.local) {
    const PartTimer t(stats_.parts.dense, pool.size()); // the split keeps every thread busy
    DenseDecode(layer, n_tok, q, out, pool);
    return;
  }
  const size_t nh = shape().n_heads, d = shape().head_dim;
  while (scratch_.size() < pool.size())
    scratch_.push_back(std::make_unique<Scratch>());
  std::fill(head_count_.begin(), head_count_.end(), HeadCount{});
  if (method_ == Method::lsh_hybrid) {
    // The ranker's pass over every indexed token (retrieval's part); its chunks keep every
    // thread busy.
    const PartTimer t(stats_.parts.retrieve, pool.size());
    HybridRankGroups(layer, n_tok - spec_.local - spec_.sink, q, pool);
  }
  pool.ParallelFor(nh, [&](size_t h, size_t thread) {
    if (cache_.dtype() == lsh::DType::f32)
      SparseHead<float>(layer, h, pos, q + h * d, out + h * d, *scratch_[thread], head_count_[h]);
    else if (cache_.dtype() == lsh::DType::q8)
      SparseHead<lsh::Q8>(layer, h, pos, q + h * d, out + h * d, *scratch_[thread], head_count_[h]);
    else
      SparseHead<std::uint16_t>(layer, h, pos, q + h * d, out + h * d, *scratch_[thread],
                                head_count_[h]);
  });
  for (const HeadCount &c : head_count_)
    stats_ += c;
}

void BudgetAttention::DenseDecode(size_t layer, size_t n_tok, const float *q, float *out,
                                  ThreadPool &pool) {
  const size_t d = shape().head_dim, G = shape().group();
  // The dense kernel takes at most kMaxGroup heads per call.
  const size_t chunks = (G + lsh::kMaxGroup - 1) / lsh::kMaxGroup;
  pool.ParallelFor(shape().n_kv_heads * chunks, [&](size_t item, size_t) {
    const size_t kvh = item / chunks, g0 = (item % chunks) * lsh::kMaxGroup;
    const size_t g = std::min<size_t>(lsh::kMaxGroup, G - g0);
    float lse[lsh::kMaxGroup];
    lsh::DenseAttentionArgs a;
    a.q = q + (kvh * G + g0) * d;
    a.G = int(g);
    a.d = d;
    a.scale = float(shape().ScaleD());
    const lsh::KvRows rows = cache_.Rows(layer, kvh);
    a.k = rows.k;
    a.v = rows.v;
    a.paged = rows.paged;
    a.dtype = cache_.dtype();
    a.begin = shape().Begin(layer, n_tok); // a local layer's window
    a.end = n_tok;
    a.out = out + (kvh * G + g0) * d;
    a.lse = lse;
    set_.dense_attention(a);
  });
}

template <typename E>
void BudgetAttention::SparseHead(size_t layer, size_t head, size_t pos, const float *q, float *out,
                                 Scratch &s, HeadCount &count) const {
  const size_t d = shape().head_dim, kvh = head / shape().group();
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  const Rows<E> K(rows.k, rows.paged, rows.dtype, d), V(rows.v, rows.paged, rows.dtype, d);
  const size_t n_tok = pos + 1, b = spec_.sink, e = n_tok - spec_.local, n_idx = e - b;
  const size_t m = BudgetTokens(spec_.budget, n_idx);
  const double scale = shape().ScaleD();
  s.acc.resize(d);
  count.indexed = double(n_idx);
  count.kv_bytes_indexed = double(2 * n_idx * cache_.RowBytes());

  // Ranking in the reference's order: highest first, ties to the lower index, NaN above all (it
  // is kept, so it propagates); a strict weak order even with NaN.
  auto select = [&s](size_t total, size_t keep, const double *score) {
    s.order.resize(total);
    std::iota(s.order.begin(), s.order.end(), std::uint32_t{0});
    auto rank = [score](std::uint32_t i) { return std::isnan(score[i]) ? kInf : score[i]; };
    auto better = [&rank](std::uint32_t x, std::uint32_t y) {
      return rank(x) != rank(y) ? rank(x) > rank(y) : x < y;
    };
    if (keep < total)
      std::nth_element(s.order.begin(), s.order.begin() + std::ptrdiff_t(keep), s.order.end(),
                       better);
    s.order.resize(keep);
    std::sort(s.order.begin(), s.order.end());
  };
  // Appends tokens [from, to) and their logits to the attended list.
  auto attend_range = [&](size_t from, size_t to) {
    const size_t at = s.ids.size();
    s.ids.resize(at + (to - from));
    s.zs.resize(at + (to - from));
    for (size_t i = from; i < to; ++i)
      s.ids[at + i - from] = std::uint32_t(i);
    Logits(q, K, d, scale, from, to, s.zs.data() + at);
  };
  s.ids.clear();
  s.zs.clear();

  if (method_ == Method::lsh_hybrid) {
    HybridHead<E>(layer, head, pos, q, out, s, count);
    return;
  }

  if (method_ == Method::topk) {
    s.z.resize(n_idx);
    Logits(q, K, d, scale, b, e, s.z.data());
    select(n_idx, m, s.z.data());
    attend_range(0, b);
    for (std::uint32_t i : s.order) {
      s.ids.push_back(std::uint32_t(b + i));
      s.zs.push_back(s.z[i]);
    }
    attend_range(e, n_tok);
    SoftmaxValues(s.zs.data(), s.ids.data(), s.ids.size(), V, d, s.acc.data(), out);
    count.sampled = double(m);
    count.index_bytes_read = double(n_idx * cache_.RowBytes());
    return;
  }

  if (method_ == Method::quest) {
    const size_t P = spec_.quest_page, pages = (n_idx + P - 1) / P;
    const size_t keep = std::min(pages, (m + P - 1) / P);
    const float *lo = qmin_[layer * shape().n_kv_heads + kvh].data();
    const float *hi = qmax_[layer * shape().n_kv_heads + kvh].data();
    // Upper bound of q.k over the page, in double like pig::ref::quest_page_scores (unscaled).
    s.z.assign(pages, 0.0);
    for (size_t p = 0; p < pages; ++p)
      for (size_t j = 0; j < d; ++j)
        s.z[p] +=
            std::max(double(q[j]) * double(lo[p * d + j]), double(q[j]) * double(hi[p * d + j]));
    select(pages, keep, s.z.data());
    attend_range(0, b);
    size_t read = 0;
    for (std::uint32_t p : s.order) {
      const size_t from = b + p * P, to = std::min(e, from + P);
      attend_range(from, to);
      read += to - from;
    }
    attend_range(e, n_tok);
    SoftmaxValues(s.zs.data(), s.ids.data(), s.ids.size(), V, d, s.acc.data(), out);
    count.sampled = double(read);
    count.index_bytes_read = double(pages * 2 * d * sizeof(float));
    return;
  }

  // Oracle sampling. The static part, exactly:
  attend_range(0, b);
  attend_range(e, n_tok);
  const double lse_static =
      SoftmaxValues(s.zs.data(), s.ids.data(), s.ids.size(), V, d, s.acc.data(), out);
  // The indexed part: its exact lse (the oracle knows every score), then B = m i.i.d. draws from
  // its softmax, as pig::ref::oracle_sampling.
  count.index_bytes_read = double(n_idx * cache_.RowBytes());
  s.z.resize(n_idx);
  Logits(q, K, d, scale, b, e, s.z.data());
  double mx = -kInf;
  bool nan = false;
  for (double x : s.z) {
    nan |= std::isnan(x);
    if (x > mx)
      mx = x;
  }
  if (nan || mx == kInf) { // a NaN or +inf logit: the reference's result is NaN throughout
    std::fill(out, out + d, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  if (mx == -kInf) // no mass in the indexed part (only with infinite inputs): static part only
    return;
  double sum = 0;
  for (double x : s.z)
    sum += std::exp(x - mx);
  const double lse_indexed = mx + std::log(sum);
  // Inverse-CDF sampling on the cumulative weights (in place of the logits).
  double cdf = 0;
  for (double &x : s.z)
    x = (cdf += std::exp(x - mx) / sum);
  ref::Rng rng(OracleSeed(spec_.sample_seed, layer, head, pos));
  s.order.resize(m);
  for (size_t i = 0; i < m; ++i) {
    const double x = rng.uniform() * s.z.back();
    const auto it = std::upper_bound(s.z.begin(), s.z.end(), x);
    s.order[i] = std::uint32_t(std::min<size_t>(size_t(it - s.z.begin()), n_idx - 1));
  }
  // Mean of the drawn values, unique tokens in ascending order like the reference's loop.
  std::sort(s.order.begin(), s.order.end());
  std::fill(s.acc.begin(), s.acc.end(), 0.0);
  size_t unique = 0;
  for (size_t i = 0; i < m;) {
    size_t j = i;
    while (j < m && s.order[j] == s.order[i])
      ++j;
    const double f = double(j - i) / double(m);
    thread_local std::vector<float> tmp;
    const auto *row = RowOf(V, b + s.order[i], d, tmp);
    for (size_t c = 0; c < d; ++c)
      s.acc[c] += f * double(ToF32(row[c]));
    ++unique;
    i = j;
  }
  s.part.resize(d);
  for (size_t c = 0; c < d; ++c)
    s.part[c] = float(s.acc[c]);
  Merge(out, lse_static, s.part.data(), lse_indexed, d, out);
  count.sampled = double(unique);
}

void BudgetAttention::HybridTruncate(size_t layer, size_t pos) {
  const size_t L = size_t(spec_.L);
  for (size_t kvh = 0; kvh < hybrid_.size() / shape().n_layers; ++kvh) {
    HybridIndex &h = hybrid_[layer * shape().n_kv_heads + kvh];
    if (pos >= h.end)
      continue;
    if (pos <= spec_.sink) { // nothing indexed is left: the mean goes too
      h = HybridIndex{};
      continue;
    }
    if (!h.codes.empty())
      h.codes.resize((pos - spec_.sink) * L);
    if (!h.sketch.empty())
      h.sketch.resize((pos - spec_.sink) * lsh::hybrid_sketch_words(RankerBits()));
    if (!h.norms.empty())
      h.norms.resize(pos - spec_.sink);
    if (!h.kscale.empty()) {
      h.qkeys.resize(lsh::hybrid_quant_size(pos - spec_.sink, shape().head_dim));
      h.kscale.resize(pos - spec_.sink);
    }
    if (!h.log_vnorms.empty())
      h.log_vnorms.resize(pos - spec_.sink);
    h.end = pos;
  }
}

void BudgetAttention::HybridFold(size_t layer, size_t end, ThreadPool &pool) {
  const size_t d = shape().head_dim, L = size_t(spec_.L), b = spec_.sink;
  // Each kv-head's index is its own: a fold of many tokens (a prompt's, at its first decode step)
  // runs the kv-heads on the pool; a step's one token stays on this thread.
  size_t most = 0;
  for (size_t kvh = 0; kvh < shape().n_kv_heads; ++kvh)
    most = std::max(
        most, end - std::min(end, std::max(hybrid_[layer * shape().n_kv_heads + kvh].end, b)));
  auto fold = [&](size_t kvh) {
    std::vector<float> row(d);
    HybridIndex &h = hybrid_[layer * shape().n_kv_heads + kvh];
    if (end <= std::max(h.end, b))
      return;
    if (h.mean.empty()) {
      // ref::build_index's mean: ref::mean_of_rows over the f32 rows of [sink, end).
      ref::OwnedMatrix keys(end - b, d);
      for (size_t t = b; t < end; ++t)
        cache_.KeyRow(layer, kvh, t, keys.row(t - b));
      h.mean = ref::mean_of_rows(keys, 0, end - b);
      h.end = b;
    }
    const size_t from = h.end;
    if (!Quant()) // rank=quant reads no norms
      h.norms.resize(end - b);
    if (spec_.hybrid.value_norm)
      h.log_vnorms.resize(end - b);
    thread_local std::vector<std::uint16_t> codes;
    // rank=quant reads no codes (the runtime refuses it with cand).
    if (!Quant()) {
      codes.resize((end - from) * L);
      lsh::EncodeArgs a;
      const lsh::KvRows rows = cache_.Rows(layer, kvh);
      a.x = rows.k;
      a.paged = rows.paged;
      a.dtype = cache_.dtype();
      a.rows = end - from;
      a.first = from;
      a.mean = h.mean.data();
      a.W = simhash_->view();
      a.codes = codes.data();
      set_.encode(a);
    }
    // The codes themselves for counting collisions; packed for the Hamming scan.
    if (spec_.hybrid.rank == spec::HybridRank::collisions || spec_.hybrid.candidates > 0)
      h.codes.insert(h.codes.end(), codes.begin(), codes.end());
    if (spec_.hybrid.rank == spec::HybridRank::hamming) {
      const size_t words = lsh::hybrid_sketch_words(RankerBits());
      h.sketch.resize((end - b) * words);
      lsh::hybrid_pack(codes.data(), end - from, spec_.K, spec_.L, RankerBits(),
                       h.sketch.data() + (from - b) * words);
    }
    if (Quant()) {
      h.qkeys.resize(lsh::hybrid_quant_size(end - b, d));
      h.kscale.resize(end - b);
    }
    std::vector<float> centred(d);
    for (size_t t = from; t < end; ++t) {
      cache_.KeyRow(layer, kvh, t, row.data());
      double n2 = 0;
      for (size_t j = 0; j < d; ++j) {
        const float c = row[j] - h.mean[j]; // in f32, as ref::build_index centres
        centred[j] = c;
        n2 += double(c) * double(c);
      }
      if (Quant()) // ref::HybridLowRank::round_key(centred, 4), packed
        h.kscale[t - b] = lsh::hybrid_quant_pack(centred.data(), d, t - b, h.qkeys.data());
      else
        h.norms[t - b] = std::sqrt(n2);
      if (spec_.hybrid.value_norm) { // log |v| as ref::hybrid_scores, once per token
        cache_.ValueRow(layer, kvh, t, row.data());
        double v2 = 0;
        for (size_t j = 0; j < d; ++j)
          v2 += double(row[j]) * double(row[j]);
        h.log_vnorms[t - b] = std::log(std::sqrt(v2));
      }
    }
    h.end = end;
  };
  // StepParts: a prompt's fold is the build, on the pool; a step's the extension, on this thread.
  if (most >= 256) {
    const PartTimer t(stats_.parts.build, pool.size());
    pool.ParallelFor(shape().n_kv_heads, [&](size_t kvh, size_t) { fold(kvh); });
  } else {
    const PartTimer t(stats_.parts.extend);
    for (size_t kvh = 0; kvh < shape().n_kv_heads; ++kvh)
      fold(kvh);
  }
}

void BudgetAttention::ScanInChunks(size_t n_idx, size_t granule, ThreadPool &pool,
                                   const std::function<void(size_t, size_t, size_t)> &scan) {
  // Chunks of tokens (multiples of `granule`), several per thread, so that the kv-heads (3 on
  // SmolLM2) do not leave a thread idle: each chunk writes its own columns of the group's result.
  const size_t want = std::max<size_t>(1024, (n_idx * shape().n_kv_heads) / (4 * pool.size()));
  const size_t chunk = (want + granule - 1) / granule * granule;
  const size_t chunks = (n_idx + chunk - 1) / chunk;
  pool.ParallelFor(shape().n_kv_heads * chunks, [&](size_t item, size_t) {
    const size_t kvh = item / chunks, from = (item % chunks) * chunk;
    scan(kvh, from, std::min(n_idx, from + chunk));
  });
}

void BudgetAttention::HybridRankGroups(size_t layer, size_t n_idx, const float *q,
                                       ThreadPool &pool) {
  const size_t G = shape().group(), d = shape().head_dim, L = size_t(spec_.L);
  const bool hamming = spec_.hybrid.rank == spec::HybridRank::hamming;
  hybrid_qcodes_.resize(shape().n_kv_heads);
  hybrid_H_.resize(shape().n_kv_heads);
  const int B = RankerBits();
  const size_t words = lsh::hybrid_sketch_words(B);
  hybrid_qsketch_.resize(shape().n_kv_heads);
  if (Quant()) {
    // ref::HybridLowRank::query8 of each query, then one scan of the group's int4 keys per
    // chunk of tokens (the integer dot products), as the Hamming scan below.
    const size_t qb = lsh::hybrid_quant_bytes(d);
    hybrid_q8_.resize(shape().n_kv_heads);
    hybrid_qscale_.resize(shape().n_kv_heads);
    hybrid_acc_.resize(shape().n_kv_heads);
    for (size_t kvh = 0; kvh < shape().n_kv_heads; ++kvh) {
      hybrid_q8_[kvh].assign(G * 2 * qb, 0.0f);
      hybrid_qscale_[kvh].resize(G);
      hybrid_acc_[kvh].resize(G * n_idx);
      for (size_t g = 0; g < G; ++g) {
        const float *qg = q + (kvh * G + g) * d;
        const ref::HybridLowRank::Key k8 =
            ref::HybridLowRank::query8(std::span<const float>(qg, d));
        hybrid_qscale_[kvh][g] = k8.scale;
        for (size_t j = 0; j < d; ++j) // component j at j (the scan reads 2p and 2p + 1)
          hybrid_q8_[kvh][g * 2 * qb + j] = float(k8.x[j]);
      }
    }
    if (n_idx == 0)
      return;
    ScanInChunks(n_idx, lsh::kQuantBlock, pool, [&](size_t kvh, size_t from, size_t to) {
      const HybridIndex &h = hybrid_[layer * shape().n_kv_heads + kvh];
      lsh::hybrid_quant_scan(h.qkeys.data() + lsh::hybrid_quant_size(from, d), d, to - from,
                             hybrid_q8_[kvh].data(), int(G), hybrid_acc_[kvh].data() + from, n_idx);
    });
    return;
  }
  pool.ParallelFor(shape().n_kv_heads, [&](size_t kvh, size_t) {
    // The queries hashed as they are, like ref::sample_tokens.
    std::vector<std::uint16_t> &qc = hybrid_qcodes_[kvh];
    qc.resize(G * L);
    lsh::EncodeArgs a;
    a.x = q + kvh * G * d;
    a.dtype = lsh::DType::f32;
    a.rows = G;
    a.W = simhash_->view();
    a.codes = qc.data();
    set_.encode(a);
    if (!hamming)
      return;
    hybrid_qsketch_[kvh].resize(G * words);
    lsh::hybrid_pack(qc.data(), G, spec_.K, spec_.L, B, hybrid_qsketch_[kvh].data());
    hybrid_H_[kvh].resize(G * n_idx);
  });
  if (!hamming || n_idx == 0)
    return;
  ScanInChunks(n_idx, 1, pool, [&](size_t kvh, size_t from, size_t to) {
    const HybridIndex &h = hybrid_[layer * shape().n_kv_heads + kvh];
    lsh::hybrid_hamming_scan(h.sketch.data() + from * words, words, to - from,
                             hybrid_qsketch_[kvh].data(), int(G), hybrid_H_[kvh].data() + from,
                             n_idx);
  });
}

template <typename E>
void BudgetAttention::HybridHead(size_t layer, size_t head, size_t pos, const float *q, float *out,
                                 Scratch &s, HeadCount &count) const {
  const size_t d = shape().head_dim, kvh = head / shape().group(), L = size_t(spec_.L);
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  const Rows<E> K(rows.k, rows.paged, rows.dtype, d), V(rows.v, rows.paged, rows.dtype, d);
  const size_t n_tok = pos + 1, b = spec_.sink, e = n_tok - spec_.local, n_idx = e - b;
  const double scale = shape().ScaleD();
  const HybridIndex &h = hybrid_[layer * shape().n_kv_heads + kvh];
  spec::HybridConfig cfg = spec_.hybrid;
  cfg.budget = spec_.budget;
  cfg.seed = OracleSeed(spec_.sample_seed, layer, head, pos);

  // 1. The ranker: the query's codes and H from HybridRankGroups, then each token's estimated
  // logit exactly as ref::hybrid_scores computes it.
  // Scores, head and tail selection: retrieval's part; the attention over them: the sampled
  // pass's (StepParts, this head's thread).
  std::optional<PartTimer> select(std::in_place, count.parts.retrieve);
  const size_t g = head % shape().group();
  const std::uint16_t *qc = Quant() ? nullptr : hybrid_qcodes_[kvh].data() + g * L;
  double qn = 0;
  for (size_t j = 0; j < d; ++j)
    qn += double(q[j]) * double(q[j]);
  const double sq = scale * std::sqrt(qn);
  thread_local std::vector<float> tmp;
  // hamming: cos(pi H / B) tabulated for every H in [0, B] (ref::hamming_cosine: the same
  // doubles), built once per thread and B.
  const int B = RankerBits();
  const bool hamming = cfg.rank == spec::HybridRank::hamming;
  thread_local std::vector<double> cos_of;
  if (hamming && cos_of.size() != size_t(B) + 1) {
    cos_of.resize(size_t(B) + 1);
    for (int x = 0; x <= B; ++x)
      cos_of[size_t(x)] = ref::hamming_cosine(x, B);
  }
  const int cand = cfg.candidates;
  // hamming: ref::hybrid_hamming's integers, from the group's scan.
  const std::uint16_t *H = hamming ? hybrid_H_[kvh].data() + g * n_idx : nullptr;
  // The head's size (steps 2-4 below).
  const double target = cfg.budget * double(n_idx);
  const size_t head_n = std::min<size_t>(n_idx, size_t(std::llround(cfg.head_share * target)));
  // rank=quant with a cut: the sparse path scores only the tokens that can be in the head or
  // within the cut of the tail's best (HYBRID.md "The cut"). The tail's best is the (head + 1)-th
  // best score, some logits below the best: a bisection on counts of the products finds a lower
  // bound of it within cut / 16 (between the best and 16 cuts below it; a wider gap: every token
  // is scored), and the tokens from that bound - cut on are listed.
  QuantListing ql;
  size_t listed = 0;
  if (Quant() && cfg.cut > 0 && !cfg.value_norm && head_n < n_idx &&
      ql.Init(hybrid_acc_[kvh].data() + g * n_idx, h.kscale.data(), n_idx,
              double(hybrid_qscale_[kvh][g]), scale)) {
    const double best = ql.BestLow();
    double lo = best - 16 * cfg.cut, hi = best; // count(lo) > head, unknown at hi
    if (ql.Count(lo) > head_n) {
      while (hi - lo > cfg.cut / 16) {
        const double mid = 0.5 * (lo + hi);
        (ql.Count(mid) > head_n ? lo : hi) = mid;
      }
      listed = ql.List(lo - cfg.cut, s.cand);
      ql.Scores(s.cand, s.z);
    }
  }
  if (!listed)
    s.z.resize(n_idx);
  if (listed) {
    // s.z holds the listed tokens' scores
  } else if (Quant()) {
    // ref::hybrid_scores for rank=quant: scale * dot8, dot8 = (s_q s_k) * the integer sum.
    lsh::hybrid_quant_scores(hybrid_acc_[kvh].data() + g * n_idx, h.kscale.data(),
                             cfg.value_norm ? h.log_vnorms.data() : nullptr, n_idx,
                             double(hybrid_qscale_[kvh][g]), scale, s.z.data());
  } else if (hamming && cand == 0) {
    lsh::hybrid_hamming_scores(H, h.norms.data(), cfg.value_norm ? h.log_vnorms.data() : nullptr,
                               n_idx, cos_of.data(), sq, s.z.data());
  } else {
    for (size_t i = 0; i < n_idx; ++i) {
      const std::uint16_t *c = h.codes.empty() ? nullptr : &h.codes[i * L];
      if (cand > 0 && ref::hybrid_collisions(spec_.L, c, qc) < cand) {
        s.z[i] = -kInf; // not a candidate: unscored, as ref::hybrid_scores
        continue;
      }
      const double cos_hat =
          hamming ? cos_of[H[i]] : ref::hybrid_cosine(cfg.rank, cfg.bits, spec_.K, spec_.L, c, qc);
      double x = sq * h.norms[i] * cos_hat;
      if (cfg.value_norm)
        x += h.log_vnorms[i];
      s.z[i] = std::isnan(x) ? -kInf : x;
    }
  }

  // What the ranker read per token: this head's share of the group's one pass over the
  // packed sketches (hamming) or its own pass over the codes, and the norm.
  const double ranker = double(lsh::hybrid_ranker_bytes(cfg.rank, B, spec_.L, d)) /
                        (Quant() || hamming ? double(shape().group()) : 1.0);
  count.indexed = double(n_idx);
  count.kv_bytes_indexed = double(2 * n_idx * cache_.RowBytes());
  count.index_bytes_read = double(n_idx) * (ranker + (Quant() ? 0.0 : 8.0)); // + the norm
  count.ranked = double(n_idx); // the sparse path's count is set below

  // 2-4. HybridSampler's head and draw (ref::hybrid_estimate's, see hybrid_select.h), then one
  // softmax over the sink and local tokens, the head (bias 0) and the tail (bias log pi: weight
  // 1 / pi). With epsilon > 0 the tail budget doubles from its start until the estimated relative
  // error is at most epsilon or the cap is reached (step 4, the reference's rule).
  if (listed) {
    s.hybrid.RankSubset(s.z, std::span<const std::uint32_t>(s.cand.data(), listed), n_idx, head_n,
                        cfg.seed, b, cfg.cut);
    // Every token scoring >= need is listed, so the sampler's tail best (>= need: more than the
    // head is listed) is the true one; and if it is at least need + cut, every tail token within
    // the cut of it is listed too. Else list again from it - cut, which lists them all.
    const double best = s.hybrid.tail_best();
    if (best - cfg.cut < ql.need) {
      listed = ql.List(best - cfg.cut, s.cand);
      ql.Scores(s.cand, s.z);
      s.hybrid.RankSubset(s.z, std::span<const std::uint32_t>(s.cand.data(), listed), n_idx, head_n,
                          cfg.seed, b, cfg.cut);
    }
    count.ranked = double(listed);
  } else
    s.hybrid.Rank(s.z, head_n, cfg.seed, b, cfg.cut);
  const double cap =
      std::max(0.0, std::max(cfg.max_budget, cfg.budget) * double(n_idx) - double(head_n));
  double T = std::max(0.0, target - double(head_n));
  if (cfg.epsilon > 0)
    T = std::min(T, cap);
  const double zq = cfg.epsilon > 0 ? ref::hybrid_error_quantile(cfg.delta) : 0.0;
  for (;;) {
    s.hybrid.Draw(T, cfg.floor);
    const auto head_ids = s.hybrid.head(), tail_ids = s.hybrid.tail();
    const auto pi = s.hybrid.pi();
    const size_t total = b + (n_tok - e) + head_ids.size() + tail_ids.size();
    // The attended tokens and their biases (s.zs): 0 for the static tokens and the head, log pi
    // for the tail, which comes last. s.lz: each one's logit minus its bias.
    s.ids.resize(total);
    s.zs.resize(total);
    s.lz.resize(total);
    size_t at = 0;
    auto put = [&](size_t token, double bias) {
      s.ids[at] = std::uint32_t(token);
      s.zs[at++] = bias;
    };
    for (size_t i = 0; i < b; ++i)
      put(i, 0.0);
    for (size_t i = e; i < n_tok; ++i)
      put(i, 0.0);
    for (std::uint32_t i : head_ids)
      put(b + i, 0.0);
    for (size_t j = 0; j < tail_ids.size(); ++j)
      put(b + tail_ids[j], std::log(pi[j]));
    select.reset();
    PartTimer attend(count.parts.sampled);
    const double lse = lsh::hybrid_attend(q, rows.k, rows.v, cache_.dtype(), d, scale, s.ids.data(),
                                          s.zs.data(), total, out, s.lz.data(), rows.paged);
    count.sampled = double(head_ids.size() + tail_ids.size());
    if (cfg.epsilon <= 0)
      return;
    // V^ = sum_tail (1 - pi)/pi^2 a_i^2 |v_i - o^|^2 with a_i = e^{l_i - lse}, as the reference;
    // the relative error bound is zq sqrt(V^) / |o^|.
    double var = 0, onorm = 0;
    for (size_t j = 0; j < d; ++j)
      onorm += double(out[j]) * double(out[j]);
    onorm = std::sqrt(onorm);
    const size_t t0 = total - tail_ids.size();
    for (size_t j = 0; j < tail_ids.size(); ++j) {
      const double a = std::exp(s.lz[t0 + j] + s.zs[t0 + j] - lse);
      const auto *v = RowOf(V, b + tail_ids[j], d, tmp);
      double dv = 0;
      for (size_t c = 0; c < d; ++c) {
        const double x = double(ToF32(v[c])) - double(out[c]);
        dv += x * x;
      }
      var += (1.0 - pi[j]) / (pi[j] * pi[j]) * a * a * dv;
    }
    const double err = tail_ids.empty() ? 0.0 : zq * std::sqrt(var) / onorm;
    if (!(err > cfg.epsilon) || T >= cap || tail_ids.size() + head_n >= n_idx)
      return;
    T = std::min(cap, std::max(2.0 * T, 1.0));
    select.emplace(count.parts.retrieve); // the next draw
  }
}

void BudgetAttention::Reset() {
  for (size_t l = 0; l < shape().n_layers; ++l) {
    QuestTruncate(l, 0);
    HybridTruncate(l, 0);
  }
}

void BudgetAttention::LoadPrefix(const KvCache &src, size_t n) {
  cache_.CopyPrefix(src, n);
  Loaded(n);
}

void BudgetAttention::AttachPrefix(const std::int32_t *blocks, size_t n_blocks) {
  cache_.Attach(blocks, n_blocks);
  Loaded(n_blocks * cache_.pool().block_tokens());
}

void BudgetAttention::Loaded(size_t n) {
  for (size_t l = 0; l < shape().n_layers; ++l) {
    QuestTruncate(l, 0);
    HybridTruncate(l, 0); // encoded again at the next decode step
    if (method_ == Method::quest && !dense_layer_[l])
      QuestFold(l, IndexedEnd(n));
  }
}

size_t BudgetAttention::MemoryBytes() const {
  size_t bytes = cache_.MemoryBytes();
  for (size_t i = 0; i < qmin_.size(); ++i)
    bytes += (qmin_[i].capacity() + qmax_[i].capacity()) * sizeof(float);
  for (const HybridIndex &h : hybrid_)
    bytes += h.mean.capacity() * sizeof(float) + h.codes.capacity() * sizeof(std::uint16_t) +
             h.sketch.capacity() * sizeof(std::uint64_t) + h.qkeys.capacity() +
             h.kscale.capacity() * sizeof(float) +
             (h.norms.capacity() + h.log_vnorms.capacity()) * sizeof(double);
  return bytes;
}

AttentionStats BudgetAttention::stats() const {
  AttentionStats s = stats_;
  s.index_bytes = 0;
  for (size_t i = 0; i < qmin_.size(); ++i)
    s.index_bytes += (qmin_[i].size() + qmax_[i].size()) * sizeof(float);
  for (const HybridIndex &h : hybrid_)
    s.index_bytes += h.codes.size() * sizeof(std::uint16_t) +
                     h.sketch.size() * sizeof(std::uint64_t) + h.qkeys.size() +
                     h.kscale.size() * sizeof(float) +
                     (h.norms.size() + h.log_vnorms.size()) * sizeof(double);
  return s;
}

std::unique_ptr<Attention> MakeBudgetAttention(const AttentionSpec &spec,
                                               const AttentionShape &shape,
                                               std::shared_ptr<KvPool> pool) {
  return std::make_unique<BudgetAttention>(spec, shape, std::move(pool));
}

} // namespace pig::runtime
