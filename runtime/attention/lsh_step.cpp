#include "pig/runtime/lsh_step.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace pig::runtime::lsh {

const float *query_rows(const LshIndex &index, const float *q, int G, StepBuffers &buf) {
  const FittedHash *f = index.fitted();
  if (!f)
    return q;
  const std::size_t d = index.mean().size();
  buf.qmapped.resize(std::size_t(G) * d);
  buf.qnorms.resize(std::size_t(G));
  for (int h = 0; h < G; ++h)
    buf.qnorms[std::size_t(h)] =
        f->map_query(q + std::size_t(h) * d, buf.qmapped.data() + std::size_t(h) * d);
  return buf.qmapped.data();
}

std::size_t retrieve_step(const LshKernelSet &set, const LshIndex &index, const SimHash &W,
                          SampleRule rule, RetrievalScratch &scratch, StepBuffers &buf,
                          const float *q, int G, StepStats *stats) {
  if (G < 1 || G > kMaxGroup)
    throw std::invalid_argument("retrieve_step: group of " + std::to_string(G) + " heads");
  buf.qcodes.resize(std::size_t(G) * std::size_t(W.L()));
  if (index.count() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    EncodeArgs ea; // the queries hashed as they are, or in the fitted space
    ea.x = query_rows(index, q, G, buf);
    ea.dtype = DType::f32;
    ea.rows = std::size_t(G);
    ea.W = W.view();
    ea.codes = buf.qcodes.data();
    set.encode(ea);
    if (stats)
      stats->encode_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return retrieve_encoded(set, index, rule, scratch, buf, G, stats);
}

namespace {

// set.retrieve of one sorted view, its tokens appended at buf[n, ...): returns the new n and adds
// each head's hits to per_head.
std::size_t RetrieveView(const LshKernelSet &set, const IndexView &view, int G, SampleRule rule,
                         RetrievalScratch &scratch, StepBuffers &buf, std::uint8_t *masks,
                         std::size_t n, std::size_t *per_head) {
  if (view.count == 0)
    return n;
  if (scratch.capacity() < view.count)
    throw std::invalid_argument("retrieve_step: retrieval scratch too small");
  std::size_t found = 0, heads[kMaxGroup] = {};
  RetrieveArgs ra;
  ra.index = view;
  ra.query_codes = buf.qcodes.data();
  ra.G = G;
  ra.t = rule.t;
  ra.r = rule.r;
  ra.state = scratch.state();
  ra.tokens = buf.tokens.data() + n;
  ra.masks = masks ? masks + n : nullptr;
  ra.count = &found;
  ra.per_head = heads;
  set.retrieve(ra);
  for (int h = 0; h < G; ++h)
    per_head[h] += heads[h];
  return n + found;
}

// Index traffic of walking one sorted view: per head, table and probe (probe_masks), the two
// offsets and the ids of the probed bucket in every segment.
double WalkBytes(const IndexView &ix, const std::uint16_t *qcodes, int G,
                 const std::vector<std::uint16_t> &probes) {
  const std::size_t L = std::size_t(ix.L), stride = (std::size_t(1) << ix.K) + 1;
  double bytes = 0;
  for (std::size_t s0 = 0, s = 0; s0 < ix.count; s0 += kSegmentTokens, ++s) {
    const std::uint16_t *off = ix.offsets + s * L * stride;
    for (int h = 0; h < G; ++h) {
      const std::uint16_t *qc = qcodes + std::size_t(h) * L;
      for (std::size_t l = 0; l < L; ++l)
        for (std::uint16_t m : probes) {
          const std::uint16_t *o = off + l * stride + (qc[l] ^ m);
          bytes += 4.0 + 2.0 * double(o[1] - o[0]);
        }
    }
  }
  return bytes;
}

} // namespace

std::size_t retrieve_encoded(const LshKernelSet &set, const LshIndex &index, SampleRule rule,
                             RetrievalScratch &scratch, StepBuffers &buf, int G, StepStats *stats) {
  if (G < 1 || G > kMaxGroup)
    throw std::invalid_argument("retrieve_step: group of " + std::to_string(G) + " heads");
  // (K, L, t, r) as spec states them legal: the kernels assert what this refuses.
  if (const std::string e = spec::LshParams{{index.K(), index.L()}, rule.t, rule.r}.validate();
      !e.empty())
    throw std::invalid_argument("retrieve_step: " + e);
  const std::size_t L = std::size_t(index.L());
  const LshIndex *base = index.base();
  if (buf.qcodes.size() < std::size_t(G) * L)
    throw std::invalid_argument("retrieve_step: no query codes");
  // A base's walk returns its tokens past base_count() too, before they are dropped.
  const std::size_t room = index.count() + (base ? base->count() - index.base_count() : 0);
  buf.tokens.resize(std::max<std::size_t>(room, 1));
  buf.masks.resize(std::max<std::size_t>(room, 1));
  std::size_t n_union = 0, per_head[kMaxGroup] = {};
  std::uint8_t *masks = G > 1 ? buf.masks.data() : nullptr;
  if (base) {
    // Sorted ascending: the tokens of the base that are not this sequence's are the last ones.
    n_union = RetrieveView(set, base->view(), G, rule, scratch, buf, masks, 0, per_head);
    const std::uint32_t bound = std::uint32_t(index.sink_end() + index.base_count());
    const std::size_t kept =
        std::size_t(std::lower_bound(buf.tokens.data(), buf.tokens.data() + n_union, bound) -
                    buf.tokens.data());
    for (std::size_t i = kept; i < n_union; ++i)
      for (int h = 0; h < G; ++h)
        per_head[h] -= masks ? (masks[i] >> h) & 1u : 1u;
    n_union = kept;
  }
  n_union = RetrieveView(set, index.view(), G, rule, scratch, buf, masks, n_union, per_head);
  if (index.tail_count() > 0) {
    RetrieveTailArgs ta;
    ta.codes = index.tail_codes();
    ta.count = index.tail_count();
    ta.first = index.tail_begin();
    ta.L = int(L);
    ta.query_codes = buf.qcodes.data();
    ta.G = G;
    ta.t = rule.t;
    ta.r = rule.r;
    ta.tokens = buf.tokens.data();
    ta.masks = masks;
    ta.n = n_union;
    ta.per_head = per_head;
    n_union = retrieve_tail(ta);
  }
  if (stats) {
    stats->sampled_union = n_union;
    std::copy(per_head, per_head + G, stats->sampled_per_head);
    stats->indexed = index.count();
    // The tail's codes are read once for the group.
    double bytes = 2.0 * double(index.tail_count() * L);
    const std::vector<std::uint16_t> probes = probe_masks(index.K(), rule.r);
    if (base)
      bytes += WalkBytes(base->view(), buf.qcodes.data(), G, probes);
    stats->index_bytes_read = bytes + WalkBytes(index.view(), buf.qcodes.data(), G, probes);
  }
  return n_union;
}

void attend_step(const LshKernelSet &set, const LshIndex &index, const LogUTableData &log_u,
                 const StepBuffers &buf, std::size_t begin, std::size_t end, bool with_static,
                 const GroupQueries &queries, const KvRows &rows) {
  const int G = queries.G;
  if (G < 1 || G > kMaxGroup)
    throw std::invalid_argument("attend_step: group of " + std::to_string(G) + " heads");
  if (begin > end || (end > begin && end > buf.tokens.size()))
    throw std::invalid_argument("attend_step: token range outside the retrieved tokens");
  SampledAttentionArgs sa;
  sa.q = queries.q;
  sa.G = G;
  sa.d = rows.d;
  sa.scale = queries.scale;
  sa.k = rows.k;
  sa.v = rows.v;
  sa.paged = rows.paged;
  sa.dtype = rows.dtype;
  // Without the static tokens: an empty sink and a local window that starts at n.
  sa.n = index.n();
  sa.sink_end = with_static ? index.sink_end() : 0;
  sa.local_begin = with_static ? index.local_begin() : index.n();
  sa.mean = index.mean().data();
  sa.tokens = buf.tokens.data() + begin;
  sa.masks = G > 1 ? buf.masks.data() + begin : nullptr;
  sa.count = end - begin;
  sa.log_u = log_u.view();
  sa.out = queries.out;
  sa.lse = queries.lse;
  if (const FittedHash *f = index.fitted()) {
    if (buf.qnorms.size() < std::size_t(G) || f->norm_count() != index.count())
      throw std::logic_error("attend_step: fitted hashing without the query norms of "
                             "retrieve_step or with stale key norms");
    sa.query_norms = buf.qnorms.data();
    sa.key_norms = f->key_norms();
    sa.key_norms_begin = index.sink_end();
  }
  set.sampled_attention(sa);
}

void sampled_step(const LshKernelSet &set, const LshIndex &index, const SimHash &W,
                  const LogUTableData &log_u, SampleRule rule, RetrievalScratch &scratch,
                  StepBuffers &buf, const GroupQueries &queries, const KvRows &rows,
                  StepStats *stats) {
  if (rows.d != W.d())
    throw std::invalid_argument("sampled_step: rows of " + std::to_string(rows.d) +
                                " elements, W of " + std::to_string(W.d()));
  const std::size_t n_union =
      retrieve_step(set, index, W, rule, scratch, buf, queries.q, queries.G, stats);
  attend_step(set, index, log_u, buf, 0, n_union, true, queries, rows);
}

} // namespace pig::runtime::lsh
