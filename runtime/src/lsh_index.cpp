#include "pig/runtime/lsh_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

#include "pig/reference/lsh.h"
#include "pig/reference/random.h"

namespace pig::runtime::lsh {

IndexLayout IndexLayout::of(std::size_t count, int K, int L) {
  IndexLayout lay;
  lay.count = count;
  lay.K = K;
  lay.L = L;
  lay.segments = (count + kSegmentTokens - 1) / kSegmentTokens;
  lay.offset_entries = lay.segments * std::size_t(L) * ((std::size_t(1) << K) + 1);
  lay.id_entries = count * std::size_t(L);
  return lay;
}

SimHash::SimHash(std::uint64_t seed, std::size_t d, int K, int L) : d_(d), K_(K), L_(L) {
  const ref::OwnedMatrix W = ref::simhash_matrix(seed, d, K, L);
  const std::size_t cols = std::size_t(K) * std::size_t(L);
  cols_ = (cols + 15) / 16 * 16;
  w_.assign(d * cols_, 0.0f);
  norm_.assign(cols, 0.0f);
  for (std::size_t r = 0; r < d; ++r)
    std::copy(W.row(r), W.row(r) + cols, w_.begin() + std::ptrdiff_t(r * cols_));
  for (std::size_t c = 0; c < cols; ++c) {
    double s = 0;
    for (std::size_t r = 0; r < d; ++r)
      s += double(W.at(r, c)) * double(W.at(r, c));
    // Rounded up: the norm bounds rounding errors, it must not be underestimated.
    norm_[c] = std::nextafter(float(std::sqrt(s)), std::numeric_limits<float>::infinity());
  }
}

SimHashView SimHash::view() const {
  return SimHashView{w_.data(), norm_.data(), d_, cols_, K_, L_};
}

LshIndex LshIndex::build(const LshKernelSet &set, const void *keys, DType dtype, std::size_t n,
                         const SimHash &W, StaticTokens st) {
  const std::size_t d = W.d();
  LshIndex ix;
  ix.n_ = n;
  const bool all_static = st.sink + st.local >= n;
  ix.begin_ = all_static ? n : st.sink;
  const std::size_t count = all_static ? 0 : n - st.sink - st.local;
  ix.layout_ = IndexLayout::of(count, W.K(), W.L());
  ix.mean_.assign(d, 0.0f);
  const std::size_t eb = element_bytes(dtype);
  const char *first = static_cast<const char *>(keys) + ix.begin_ * d * eb;
  if (count > 0) {
    std::vector<double> acc(d, 0.0);
    std::vector<float> row(d);
    for (std::size_t i = 0; i < count; ++i) {
      const void *src = first + i * d * eb;
      if (dtype == DType::f32)
        std::copy_n(static_cast<const float *>(src), d, row.begin());
      else
        convert_from_bf16(static_cast<const std::uint16_t *>(src), row.data(), d);
      for (std::size_t j = 0; j < d; ++j)
        acc[j] += double(row[j]);
    }
    for (std::size_t j = 0; j < d; ++j)
      ix.mean_[j] = float(acc[j] / double(count));
  }
  ix.codes_.assign(count * std::size_t(W.L()), 0);
  EncodeArgs ea;
  ea.x = first;
  ea.dtype = dtype;
  ea.rows = count;
  ea.mean = ix.mean_.data();
  ea.W = W.view();
  ea.codes = ix.codes_.data();
  if (count > 0)
    set.encode(ea);
  ix.offsets_.assign(ix.layout_.offset_entries, 0);
  ix.ids_.assign(ix.layout_.id_entries, 0);
  BuildIndexArgs ba;
  ba.codes = ix.codes_.data();
  ba.count = count;
  ba.K = W.K();
  ba.L = W.L();
  ba.offsets = ix.offsets_.data();
  ba.ids = ix.ids_.data();
  if (count > 0)
    set.build_index(ba);
  return ix;
}

IndexView LshIndex::view() const {
  return IndexView{layout_.K, layout_.L, begin_, layout_.count, offsets_.data(), ids_.data()};
}

RetrievalScratch::RetrievalScratch(std::size_t capacity)
    : counters_(capacity, 0), bits_(std::size_t(kMaxGroup) * ((capacity + 63) / 64 + 1), 0) {}

RetrievalState RetrievalScratch::state() {
  return RetrievalState{counters_.data(), bits_.data(), bits_.size() / std::size_t(kMaxGroup),
                        &epoch_};
}

LogUTableData::LogUTableData(int K, int L, int t, int size)
    : h_(std::size_t(size) + 1), size_(size), tk_(float(t) * float(K)) {
  ref::LshConfig{K, L, t, 0}.validate();
  // p -> 0: u ~ C(L, t) P^t, so h(0) = log C(L, t).
  h_[0] = float(std::lgamma(L + 1.0) - std::lgamma(t + 1.0) - std::lgamma(L - t + 1.0));
  for (int i = 1; i <= size; ++i) {
    const double p = double(i) / double(size);
    const double c = std::cos(std::numbers::pi * (1.0 - p));
    h_[std::size_t(i)] =
        float(ref::log_collision_probability(c, K, L, t) - double(t) * K * std::log(p));
  }
}

void sampled_step(const LshKernelSet &set, const LshIndex &index, const SimHash &W,
                  const LogUTableData &log_u, int t, RetrievalScratch &scratch, StepBuffers &buf,
                  const float *q, int G, const void *k, const void *v, DType dtype, float scale,
                  float *out, float *lse, StepStats *stats) {
  if (G < 1 || G > kMaxGroup)
    throw std::invalid_argument("sampled_step: group of " + std::to_string(G) + " heads");
  const std::size_t L = std::size_t(W.L()), count = index.layout().count;
  if (scratch.capacity() < count)
    throw std::invalid_argument("sampled_step: retrieval scratch too small");
  buf.qcodes.resize(std::size_t(G) * L);
  buf.tokens.resize(std::max<std::size_t>(count, 1));
  buf.masks.resize(std::max<std::size_t>(count, 1));
  std::size_t n_union = 0, per_head[kMaxGroup] = {};
  if (count > 0) {
    EncodeArgs ea;
    ea.x = q;
    ea.dtype = DType::f32;
    ea.rows = std::size_t(G);
    ea.W = W.view();
    ea.codes = buf.qcodes.data();
    set.encode(ea);
    RetrieveArgs ra;
    ra.index = index.view();
    ra.query_codes = buf.qcodes.data();
    ra.G = G;
    ra.t = t;
    ra.state = scratch.state();
    ra.tokens = buf.tokens.data();
    ra.masks = G > 1 ? buf.masks.data() : nullptr;
    ra.count = &n_union;
    ra.per_head = per_head;
    set.retrieve(ra);
  }
  SampledAttentionArgs sa;
  sa.q = q;
  sa.G = G;
  sa.d = W.d();
  sa.scale = scale;
  sa.k = k;
  sa.v = v;
  sa.dtype = dtype;
  sa.n = index.n();
  sa.sink_end = index.sink_end();
  sa.local_begin = index.local_begin();
  sa.mean = index.mean().data();
  sa.tokens = buf.tokens.data();
  sa.masks = G > 1 ? buf.masks.data() : nullptr;
  sa.count = n_union;
  sa.log_u = log_u.view();
  sa.out = out;
  sa.lse = lse;
  set.sampled_attention(sa);
  if (stats) {
    stats->sampled_union = n_union;
    std::copy(per_head, per_head + G, stats->sampled_per_head);
  }
}

} // namespace pig::runtime::lsh
