// pig-bench-attention's benchmarks (main: pig_bench_attention.cpp): the LSH kernels measured the
// way a decode step sees memory.
//
// Every benchmark rotates over enough copies of its data (K/V, index) that the working set is
// at least twice the last-level cache the machine reports (and >= 96 MiB), so each step reads
// cold data like one layer after another would. The LLC size is printed first; on a machine
// that reports a large shared LLC (e.g. 260 MiB) this takes a few GiB of memory.
// PIG_BENCH_WORKING_SET_MIB=N sets the working set instead (N MiB, a positive integer).
// One iteration = one step of one kv-head group. Times are medians of repetitions with min and
// max (Google Benchmark aggregates); the ratio lines at the end are computed from the medians of
// this one run, side by side, so machine noise affects both sides.
//
//   build/bin/pig-bench-attention                       # full run (~3-5 minutes)
//   build/bin/pig-bench-attention --benchmark_filter=dense   # a subset
//
// Data: pig::ref::synthetic_problem (a sink, keys in a cone, log-normal tail), K and V in bf16;
// the heads of a GQA group use the synthetic query plus a per-head perturbation. Each pass over
// the copies takes the next of kQueries queries (the synthetic one, then perturbations of it),
// so what a step touches besides the streamed data, the sampled rows and the query's bucket
// lists, is cold too. With one query the same ~1-2 MB per copy stayed in the LLC from one
// rotation to the next, which a decode step never sees (its queries change, and every other
// layer and head runs between two visits of one): on the Xeon, in a harness on this data, the
// d = 64 fused pass took 69-75 us with one query against 88-103 us with 8-256 rotating ones,
// and the pairs below moved from 41-43x to 27-30x (d = 128), 23x to 16-18x (d = 64), and for
// retrieval from 1.55-1.71x to 2.71-2.74x (the public method's int32 lists are twice the bytes).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include "attention_benchmarks.h"
#include "pig/reference/hybrid.h"
#include "pig/reference/kv_quant.h"
#include "pig/reference/lsh.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"
#include "pig/runtime/hybrid_rank.h"
#include "pig/runtime/hybrid_select.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/lsh_step.h"
#include "pig/runtime/ops.h"
#include "schedule_variants.h"

namespace {

namespace lsh = pig::runtime::lsh;

// Bytes of the last-level cache as the C library reports it (0 when it does not).
std::size_t llc_bytes() {
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? std::size_t(v) : 0;
}

// PIG_BENCH_WORKING_SET_MIB overrides it (e.g. 1: two copies of everything, mostly cached, to
// separate a kernel's arithmetic from its memory stalls).
std::size_t working_set() {
  static const std::size_t bytes = [] {
    if (const char *mib = std::getenv("PIG_BENCH_WORKING_SET_MIB")) {
      char *end = nullptr;
      const unsigned long long v = std::strtoull(mib, &end, 10);
      if (end == mib || *end != '\0' || v == 0 || v > (1ull << 20)) {
        std::fprintf(stderr,
                     "pig-bench-attention: PIG_BENCH_WORKING_SET_MIB='%s' is not a size in MiB "
                     "(a positive integer up to 1048576)\n",
                     mib);
        std::exit(2);
      }
      return std::size_t(v) << 20;
    }
    return std::max<std::size_t>(96ull << 20, 2 * llc_bytes());
  }();
  return bytes;
}
constexpr int kK = 10, kL = 150, kT = 2;
constexpr std::uint64_t kSeed = 1;
constexpr std::size_t kVSkew = 1056; // elements (2112 bytes: 33 cache lines)
constexpr std::size_t kQueries = 16; // queries (groups of G) taken in turn, one per rotation

// Query q (of kQueries) of a group of G heads, G x d: query 0 is the synthetic query (head 0) and
// its per-head perturbations; query q > 0 perturbs the synthetic query first (seeded by q), then
// the heads the same way. Each head's sample set stays near 2 % (2.4-2.6 % at d = 64).
std::vector<float> group_query(const std::vector<float> &q0, int G, std::size_t query) {
  const std::size_t d = q0.size();
  std::vector<float> base = q0;
  if (query > 0) {
    pig::ref::Rng r(1000 + query);
    for (std::size_t j = 0; j < d; ++j)
      base[j] += float(0.5 * r.gaussian());
  }
  std::vector<float> out;
  pig::ref::Rng rng(3);
  for (int h = 0; h < G; ++h)
    for (std::size_t j = 0; j < d; ++j)
      out.push_back(base[j] + float(h == 0 ? 0.0 : 0.5 * rng.gaussian()));
  return out;
}

std::size_t copies_for(std::size_t bytes_per_copy) {
  return std::max<std::size_t>(2, (working_set() + bytes_per_copy - 1) / bytes_per_copy);
}

// ---- streaming read bandwidth ------------------------------------------------------------------

lsh::HugeVector<std::uint64_t> &stream_buffer() {
  // >= 256 MiB and at least the working set of the other benchmarks, so it streams from memory
  static lsh::HugeVector<std::uint64_t> buf(std::max<std::size_t>(256ull << 20, working_set()) / 8,
                                            1);
  return buf;
}

void BM_StreamRead(benchmark::State &state) {
  const lsh::HugeVector<std::uint64_t> &buf = stream_buffer();
  for (auto _ : state) {
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t i = 0; i < buf.size(); i += 4) {
      s0 += buf[i];
      s1 += buf[i + 1];
      s2 += buf[i + 2];
      s3 += buf[i + 3];
    }
    benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
  }
  state.SetBytesProcessed(std::int64_t(state.iterations()) *
                          std::int64_t(buf.size() * sizeof(std::uint64_t)));
}

// ---- one attention dataset: copies of K/V and of the index ------------------------------------

struct Dataset {
  std::size_t n = 0, d = 0;
  int G = 1;
  std::vector<lsh::HugeVector<std::uint16_t>> k, v; // per copy, n x d bf16 (huge pages)
  // The same rows in q8 (pig/reference/kv_quant.h) and the index of the q8 keys, per copy:
  // made for the q8 pairs only (q8_ready).
  std::vector<lsh::HugeVector<std::uint8_t>> k8, v8;
  std::vector<lsh::LshIndex> index8;
  bool q8_ready = false;
  const void *keys(lsh::DType t, std::size_t c) const {
    return t == lsh::DType::q8 ? static_cast<const void *>(k8[c].data()) : k[c].data();
  }
  // V starts kVSkew elements (bf16) or kVSkew / 2 rows' worth of bytes (q8) into its buffer.
  const void *values(lsh::DType t, std::size_t c) const;
  const lsh::LshIndex &idx(lsh::DType t, std::size_t c) const {
    return t == lsh::DType::q8 ? index8[c] : index[c];
  }
  std::vector<std::vector<float>> q; // kQueries x (G x d)
  std::unique_ptr<lsh::SimHash> W;
  std::vector<lsh::LshIndex> index; // per copy (same content, separate memory)
  std::unique_ptr<lsh::LogUTableData> lut;
  std::size_t copies = 0;
  // The query of the call-th call of a method rotating over the copies.
  const float *query(std::size_t call) const { return q[call / copies % kQueries].data(); }
};

std::unique_ptr<Dataset> g_data;

// The synthetic attention problem of n keys of dimension d (pig::ref::synthetic_problem), and
// its rows (keys or values) rounded to bf16.
pig::ref::AttentionProblem synthetic(std::size_t n, std::size_t d, std::uint64_t seed) {
  pig::ref::SyntheticConfig sc;
  sc.n = n;
  sc.d = d;
  sc.seed = seed;
  return pig::ref::synthetic_problem(sc);
}
std::vector<std::uint16_t> bf16_rows(const std::vector<float> &rows) {
  std::vector<std::uint16_t> out(rows.size());
  lsh::convert_to_bf16(rows.data(), out.data(), out.size());
  return out;
}

Dataset &dataset(std::size_t n, std::size_t d, int G, bool with_index) {
  if (g_data && g_data->n == n && g_data->d == d && g_data->G == G &&
      (!with_index || !g_data->index.empty()))
    return *g_data;
  g_data.reset(); // free the previous one first
  auto ds = std::make_unique<Dataset>();
  ds->n = n;
  ds->d = d;
  ds->G = G;
  const pig::ref::AttentionProblem p = synthetic(n, d, 7);
  const std::vector<std::uint16_t> kb = bf16_rows(p.K.data), vb = bf16_rows(p.V.data);
  for (std::size_t qi = 0; qi < kQueries; ++qi)
    ds->q.push_back(group_query(p.q, G, qi));
  ds->W = std::make_unique<lsh::SimHash>(kSeed, d, kK, kL);
  ds->lut = std::make_unique<lsh::LogUTableData>(kK, kL, kT);
  std::size_t per_copy = 2 * n * d * 2;
  lsh::LshIndex ix;
  if (with_index) {
    const lsh::LshKernelSet set =
        lsh::KernelRegistry::global().resolve({kK, kL, int(d), lsh::DType::bf16, lsh::Target::cpu});
    ix = lsh::LshIndex::build(set, kb.data(), lsh::DType::bf16, n, *ds->W);
    ix.drop_codes();
    per_copy += ix.layout().bytes();
  }
  ds->copies = copies_for(per_copy);
  for (std::size_t c = 0; c < ds->copies; ++c) {
    ds->k.emplace_back(kb.begin(), kb.end());
    // V starts kVSkew elements into its buffer: K row i and V row i at the same offset modulo
    // 2 MiB would contend for the same cache sets on every row of a dense pass.
    ds->v.emplace_back(kVSkew, 0);
    ds->v.back().insert(ds->v.back().end(), vb.begin(), vb.end());
    if (with_index)
      ds->index.push_back(ix);
  }
  g_data = std::move(ds);
  return *g_data;
}

constexpr std::size_t kVSkewBytes = 2112; // V's offset in its buffer (33 cache lines)

const void *Dataset::values(lsh::DType t, std::size_t c) const {
  return t == lsh::DType::q8 ? static_cast<const void *>(v8[c].data() + kVSkewBytes)
                             : static_cast<const void *>(v[c].data() + kVSkew);
}

// Adds the q8 copies (the bf16 rows quantised; the index of the q8 keys) to a dataset.
Dataset &with_q8(Dataset &ds) {
  if (ds.q8_ready)
    return ds;
  const std::size_t n = ds.n, d = ds.d, rb = lsh::row_bytes(lsh::DType::q8, d);
  std::vector<float> row(d);
  std::vector<std::uint8_t> k8(n * rb), v8(n * rb);
  for (std::size_t i = 0; i < n; ++i) {
    lsh::convert_from_bf16(ds.k[0].data() + i * d, row.data(), d);
    pig::ref::quantize_q8(row.data(), d, k8.data() + i * rb);
    lsh::convert_from_bf16(ds.v[0].data() + kVSkew + i * d, row.data(), d);
    pig::ref::quantize_q8(row.data(), d, v8.data() + i * rb);
  }
  const lsh::LshKernelSet set =
      lsh::KernelRegistry::global().resolve({kK, kL, int(d), lsh::DType::q8, lsh::Target::cpu});
  lsh::LshIndex ix = lsh::LshIndex::build(set, k8.data(), lsh::DType::q8, n, *ds.W);
  ix.drop_codes();
  for (std::size_t c = 0; c < ds.copies; ++c) {
    ds.k8.emplace_back(k8.begin(), k8.end());
    ds.v8.emplace_back(kVSkewBytes, 0);
    ds.v8.back().insert(ds.v8.back().end(), v8.begin(), v8.end());
    ds.index8.push_back(ix);
  }
  ds.q8_ready = true;
  return ds;
}

// Medians (ns per step) captured from the aggregates, for the ratio lines.
std::map<std::string, double> g_median, g_counter;

// One dense call on the dataset, rotating over its copies.
struct DenseCall {
  Dataset &ds;
  lsh::LshKernelSet set;
  std::vector<float> out, lse;
  std::size_t c = 0, calls = 0;
  lsh::DType dtype = lsh::DType::bf16;
  DenseCall(Dataset &d, bool generic, lsh::DType t = lsh::DType::bf16)
      : ds(d), set(resolve(d, generic, t)), out(std::size_t(d.G) * d.d), lse(std::size_t(d.G)),
        dtype(t) {}
  DenseCall(Dataset &d, const lsh::LshKernelSet &s)
      : ds(d), set(s), out(std::size_t(d.G) * d.d), lse(std::size_t(d.G)) {}
  static lsh::LshKernelSet resolve(const Dataset &d, bool generic,
                                   lsh::DType t = lsh::DType::bf16) {
    lsh::LshKernelSet s =
        lsh::KernelRegistry::global().resolve({kK, kL, int(d.d), t, lsh::Target::cpu});
    if (generic) {
      const lsh::KernelKey k = s.key;
      s = lsh::generic_kernel_set();
      s.key = k;
    }
    return s;
  }
  void operator()() {
    lsh::DenseAttentionArgs a;
    a.q = ds.query(calls);
    a.G = ds.G;
    a.d = ds.d;
    a.scale = float(1.0 / std::sqrt(double(ds.d)));
    a.k = ds.keys(dtype, c);
    a.v = ds.values(dtype, c);
    a.dtype = dtype;
    a.begin = 0;
    a.end = ds.n;
    a.out = out.data();
    a.lse = lse.data();
    set.dense_attention(a);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % ds.copies;
    ++calls;
  }
};

// One sampled step (query encode + retrieval + fused pass) on the dataset.
struct SampledCall {
  Dataset &ds;
  lsh::LshKernelSet set;
  lsh::RetrievalScratch scratch;
  lsh::StepBuffers buf;
  std::vector<float> out, lse;
  lsh::StepStats *stats = nullptr; // optional: the last call's statistics
  std::size_t c = 0, calls = 0;
  lsh::DType dtype = lsh::DType::bf16;
  SampledCall(Dataset &d, bool generic, lsh::DType t = lsh::DType::bf16)
      : ds(d), set(DenseCall::resolve(d, generic, t)), scratch(d.n), out(std::size_t(d.G) * d.d),
        lse(std::size_t(d.G)), dtype(t) {}
  SampledCall(Dataset &d, const lsh::LshKernelSet &s)
      : ds(d), set(s), scratch(d.n), out(std::size_t(d.G) * d.d), lse(std::size_t(d.G)) {}
  void operator()() {
    const lsh::GroupQueries queries{ds.query(calls), ds.G, float(1.0 / std::sqrt(double(ds.d))),
                                    out.data(), lse.data()};
    const lsh::KvRows rows{ds.keys(dtype, c), ds.values(dtype, c), dtype, ds.d, {}};
    lsh::sampled_step(set, ds.idx(dtype, c), *ds.W, *ds.lut, kT, scratch, buf, queries, rows,
                      stats);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % ds.copies;
    ++calls;
  }
};

void BM_Dense(benchmark::State &state, std::size_t n, std::size_t d, int G, bool generic) {
  DenseCall dense(dataset(n, d, G, true), generic);
  for (auto _ : state)
    dense();
  state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(2 * n * d * 2));
}

void BM_Sampled(benchmark::State &state, std::size_t n, std::size_t d, int G, bool generic) {
  Dataset &ds = dataset(n, d, G, true);
  SampledCall sampled(ds, generic);
  lsh::StepStats stats;
  sampled.stats = &stats;
  double per_head = 0, uni = 0, steps = 0;
  for (auto _ : state) {
    sampled();
    for (int h = 0; h < G; ++h)
      per_head += double(stats.sampled_per_head[h]);
    uni += double(stats.sampled_union);
    steps += 1;
  }
  const double indexed = double(ds.index[0].layout().count);
  state.counters["frac"] = per_head / (steps * G) / indexed;
  state.counters["union_frac"] = uni / steps / indexed;
  state.counters["index_B_per_tok"] = ds.index[0].layout().bytes_per_token();
  state.SetLabel(lsh::KernelRegistry::describe(sampled.set));
}

// ---- retrieval: ours vs the public implementation's method ------------------------------------

// The public implementation's index and walk, written from its description: int32 token ids per
// table sorted by bucket with int32 start/end offsets, a byte counter per token cleared (memset)
// before every step, and a branch that appends a token when its counter reaches t.
struct PublicIndex {
  std::size_t count = 0, begin = 0;
  lsh::HugeVector<std::int32_t> ids;   // L x count (huge pages, like ours)
  lsh::HugeVector<std::int32_t> start; // L x 2^K
  lsh::HugeVector<std::int32_t> end;   // L x 2^K
};

PublicIndex public_index(const std::vector<std::uint16_t> &codes, std::size_t count,
                         std::size_t begin) {
  PublicIndex p;
  p.count = count;
  p.begin = begin;
  const std::size_t B = std::size_t(1) << kK;
  p.ids.resize(std::size_t(kL) * count);
  p.start.resize(std::size_t(kL) * B);
  p.end.resize(std::size_t(kL) * B);
  std::vector<std::int32_t> cnt(B + 1);
  for (std::size_t l = 0; l < std::size_t(kL); ++l) {
    std::fill(cnt.begin(), cnt.end(), 0);
    for (std::size_t i = 0; i < count; ++i)
      ++cnt[codes[i * kL + l] + 1];
    for (std::size_t b = 0; b < B; ++b) {
      cnt[b + 1] += cnt[b];
      p.start[l * B + b] = cnt[b];
      p.end[l * B + b] = cnt[b + 1];
    }
    for (std::size_t i = 0; i < count; ++i)
      p.ids[l * count + std::size_t(cnt[codes[i * kL + l]]++)] = std::int32_t(i);
  }
  return p;
}

__attribute__((noinline)) void public_retrieve(const PublicIndex &p, const std::uint16_t *qc,
                                               std::vector<std::uint8_t> &mask,
                                               std::vector<std::int32_t> &out) {
  std::memset(mask.data(), 0, p.count);
  out.clear();
  const std::size_t B = std::size_t(1) << kK;
  for (std::size_t l = 0; l < std::size_t(kL); ++l) {
    const std::int32_t *ids = p.ids.data() + l * p.count;
    for (std::int32_t j = p.start[l * B + qc[l]]; j < p.end[l * B + qc[l]]; ++j) {
      const std::int32_t id = ids[j];
      if (mask[std::size_t(id)] < kT && ++mask[std::size_t(id)] == kT)
        out.push_back(id + std::int32_t(p.begin));
    }
  }
}

// One retrieval of one query by our kernel; returns the sample set's size.
std::size_t retrieve_ours(const lsh::LshKernelSet &set, const lsh::IndexView &ix,
                          const std::uint16_t *qc, lsh::RetrievalScratch &scratch,
                          std::uint32_t *tokens) {
  std::size_t count = 0;
  lsh::RetrieveArgs a;
  a.index = ix;
  a.query_codes = qc;
  a.G = 1;
  a.t = kT;
  a.state = scratch.state();
  a.tokens = tokens;
  a.count = &count;
  set.retrieve(a);
  return count;
}

struct RetrievalData {
  std::size_t n = 0, d = 0;
  std::vector<lsh::LshIndex> ours;
  std::vector<PublicIndex> pub;
  std::vector<std::vector<std::uint16_t>> qcodes; // kQueries x L
  std::string disagree; // empty when both methods retrieve the same set for every query
  // The query codes of the call-th call of a method rotating over the copies.
  const std::uint16_t *codes(std::size_t call) const {
    return qcodes[call / ours.size() % kQueries].data();
  }
};
std::unique_ptr<RetrievalData> g_ret;

RetrievalData &retrieval_data(std::size_t n, std::size_t d) {
  if (g_ret && g_ret->n == n && g_ret->d == d)
    return *g_ret;
  g_ret.reset();
  g_data.reset();
  auto r = std::make_unique<RetrievalData>();
  r->n = n;
  r->d = d;
  const pig::ref::AttentionProblem p = synthetic(n, d, 7);
  const std::vector<std::uint16_t> kb = bf16_rows(p.K.data);
  const lsh::SimHash W(kSeed, d, kK, kL);
  const lsh::LshKernelSet set = lsh::generic_kernel_set();
  lsh::LshIndex ix = lsh::LshIndex::build(set, kb.data(), lsh::DType::bf16, n, W);
  const PublicIndex pub = public_index(ix.codes(), ix.layout().count, ix.sink_end());
  ix.drop_codes();
  for (std::size_t qi = 0; qi < kQueries; ++qi) {
    const std::vector<float> q = group_query(p.q, 1, qi);
    r->qcodes.emplace_back(kL);
    lsh::EncodeArgs ea;
    ea.x = q.data();
    ea.dtype = lsh::DType::f32;
    ea.rows = 1;
    ea.W = W.view();
    ea.codes = r->qcodes.back().data();
    set.encode(ea);
  }
  // Both methods must retrieve the same set for every query (ours sorted, the public unsorted).
  {
    const lsh::LshKernelSet spec =
        lsh::KernelRegistry::global().resolve({kK, kL, int(d), lsh::DType::bf16, lsh::Target::cpu});
    lsh::RetrievalScratch scratch(n);
    std::vector<std::uint32_t> tokens(n);
    std::vector<std::uint8_t> mask(n);
    std::vector<std::int32_t> out;
    for (std::size_t qi = 0; qi < kQueries && r->disagree.empty(); ++qi) {
      const std::size_t count =
          retrieve_ours(spec, ix.view(), r->qcodes[qi].data(), scratch, tokens.data());
      public_retrieve(pub, r->qcodes[qi].data(), mask, out);
      std::sort(out.begin(), out.end());
      if (out.size() != count || !std::equal(out.begin(), out.end(), tokens.begin()))
        r->disagree = "query " + std::to_string(qi) + ": ours retrieves " + std::to_string(count) +
                      " tokens, the public method " + std::to_string(out.size()) +
                      " (or other tokens)";
    }
  }
  const std::size_t copies = copies_for(std::min(ix.layout().bytes(), pub.ids.size() * 4));
  for (std::size_t c = 0; c < copies; ++c) {
    r->ours.push_back(ix);
    r->pub.push_back(pub);
  }
  g_ret = std::move(r);
  return *g_ret;
}

// One retrieval with our kernel, rotating over the copies of the index.
struct RetrieveCall {
  RetrievalData &r;
  lsh::LshKernelSet set;
  lsh::RetrievalScratch scratch;
  std::vector<std::uint32_t> tokens;
  std::size_t count = 0, c = 0, calls = 0;
  double retrieved = 0; // summed over calls
  RetrieveCall(RetrievalData &data)
      : r(data), set(lsh::KernelRegistry::global().resolve(
                     {kK, kL, int(data.d), lsh::DType::bf16, lsh::Target::cpu})),
        scratch(data.n), tokens(data.n) {}
  void operator()() {
    count = retrieve_ours(set, r.ours[c].view(), r.codes(calls), scratch, tokens.data());
    benchmark::DoNotOptimize(tokens.data());
    c = (c + 1) % r.ours.size();
    ++calls;
    retrieved += double(count);
  }
};

// One retrieval by the public method, rotating over its copies of the index like RetrieveCall.
struct PublicCall {
  RetrievalData &r;
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> out;
  std::size_t c = 0, calls = 0;
  double retrieved = 0; // summed over calls
  PublicCall(RetrievalData &data) : r(data), mask(data.n) { out.reserve(data.n); }
  void operator()() {
    public_retrieve(r.pub[c], r.codes(calls), mask, out);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % r.pub.size();
    ++calls;
    retrieved += double(out.size());
  }
};

// The retrieval data for (n, d), or null with the benchmark stopped when the two methods
// disagreed on some query's sample set (checked when the data was built).
RetrievalData *checked_retrieval_data(benchmark::State &state, std::size_t n, std::size_t d) {
  RetrievalData &r = retrieval_data(n, d);
  if (r.disagree.empty())
    return &r;
  state.SkipWithError(r.disagree.c_str());
  return nullptr;
}

void BM_RetrieveOurs(benchmark::State &state, std::size_t n, std::size_t d) {
  RetrievalData *rp = checked_retrieval_data(state, n, d);
  if (!rp)
    return;
  RetrievalData &r = *rp;
  RetrieveCall ours(r);
  for (auto _ : state)
    ours();
  state.counters["sampled"] = ours.retrieved / double(std::max<std::size_t>(ours.calls, 1));
  state.counters["index_B_per_tok"] = r.ours[0].layout().bytes_per_token();
  // Index entries the query's L buckets hold, mean over the queries: the work of any bucket walk.
  const lsh::IndexView ix = r.ours[0].view();
  const std::size_t stride = (std::size_t(1) << kK) + 1;
  double entries = 0;
  for (const std::vector<std::uint16_t> &qc : r.qcodes)
    for (std::size_t s = 0; s * lsh::kSegmentTokens < ix.count; ++s)
      for (std::size_t l = 0; l < std::size_t(kL); ++l) {
        const std::uint16_t *o = ix.offsets + (s * kL + l) * stride + qc[l];
        entries += double(o[1] - o[0]);
      }
  state.counters["entries"] = entries / double(r.qcodes.size());
}

void BM_RetrievePublic(benchmark::State &state, std::size_t n, std::size_t d) {
  RetrievalData *rp = checked_retrieval_data(state, n, d);
  if (!rp)
    return;
  RetrievalData &r = *rp;
  PublicCall pub(r);
  for (auto _ : state)
    pub();
  state.counters["sampled"] = pub.retrieved / double(std::max<std::size_t>(pub.calls, 1));
  const PublicIndex &p = r.pub[0];
  state.counters["index_B_per_tok"] =
      double((p.ids.size() + p.start.size() + p.end.size()) * 4) / double(p.count);
}

std::string key(const char *what, std::size_t d, int G, std::size_t n);

// ---- interleaved pairs
// ---------------------------------------------------------------------------
//
// The ratios the targets are about are measured as pairs: one benchmark alternates between A and
// B on the same data in blocks of about 20 ms (at least 3 calls), records every call's time but
// the first of each block, and takes the ratio of the two medians. On a shared machine memory
// bandwidth drifts by 30 % and more between the separate time windows of two ordinary
// benchmarks (the stream read measured 8.8-11.3 GB/s within one hour); drift that slow affects
// both members of a pair alike. Blocks rather than single calls, and the first call of a block
// dropped: a dense call streams 32-64 MiB and would otherwise evict the small state a sampled
// call keeps warm from one kv-head to the next in a decode step (retrieval counters, SimHash
// matrix, log u table).

struct PairResult {
  double a = 0, b = 0; // median ns per call
  double a_min = 0, a_max = 0, b_min = 0, b_max = 0;
  std::size_t calls = 0;
};
std::map<std::string, PairResult> g_pair;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class F> void timed_block(F &&f, std::vector<double> &times) {
  using clock = std::chrono::steady_clock;
  constexpr double kBlockNs = 20e6;
  double spent = 0;
  for (int call = 0; call < 3 || spent < kBlockNs; ++call) {
    const auto t0 = clock::now();
    f();
    const double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
    spent += ns;
    if (call > 0)
      times.push_back(ns);
  }
}

template <class A, class B>
void run_pair(benchmark::State &state, const std::string &name, A &&fa, B &&fb) {
  std::vector<double> ta, tb;
  for (auto _ : state) {
    timed_block(fa, ta);
    timed_block(fb, tb);
  }
  PairResult r;
  r.a = median_of(ta);
  r.b = median_of(tb);
  r.a_min = *std::min_element(ta.begin(), ta.end());
  r.a_max = *std::max_element(ta.begin(), ta.end());
  r.b_min = *std::min_element(tb.begin(), tb.end());
  r.b_max = *std::max_element(tb.begin(), tb.end());
  r.calls = std::min(ta.size(), tb.size());
  g_pair[name] = r;
  state.counters["A_us"] = r.a / 1e3;
  state.counters["B_us"] = r.b / 1e3;
  state.counters["B_over_A"] = r.b / r.a;
}

// A: the f32 FMA peak loop (pig::runtime::Kernels::f32_peak_loop, register-only) doing as many
// multiply-adds as B; B: the specialised encode of n bf16 keys centred by a mean (the index
// build's projection onto K L columns of W and the sign checks). A / B = the encode's share of the
// machine's f32 peak, on one thread.
void BM_PairIndexEncode(benchmark::State &state, std::size_t n, std::size_t d) {
  const pig::ref::AttentionProblem p = synthetic(n, d, 11);
  const std::vector<std::uint16_t> keys = bf16_rows(p.K.data);
  const std::vector<float> mean = pig::ref::mean_of_rows(p.K, 0, n);
  const lsh::SimHash W(kSeed, d, kK, kL);
  const lsh::LshKernelSet set =
      lsh::KernelRegistry::global().resolve({kK, kL, int(d), lsh::DType::bf16, lsh::Target::cpu});
  std::vector<std::uint16_t> codes(n * std::size_t(kL));
  lsh::EncodeArgs ea;
  ea.x = keys.data();
  ea.dtype = lsh::DType::bf16;
  ea.rows = n;
  ea.mean = mean.data();
  ea.W = W.view();
  ea.codes = codes.data();
  const pig::runtime::Kernels &k = pig::runtime::BestKernels();
  const double macs = double(n) * double(d) * kK * kL;
  const std::uint64_t per_iter = k.f32_peak_loop(1);
  const std::size_t iters = std::size_t(macs / double(per_iter));
  std::uint64_t sink = 0;
  run_pair(
      state, key("pair_index_encode", d, 1, n), [&] { sink += k.f32_peak_loop(iters); },
      [&] { set.encode(ea); });
  benchmark::DoNotOptimize(sink);
  state.counters["encode_GMAC_s"] = macs / g_pair[key("pair_index_encode", d, 1, n)].b;
}

// A: streaming read of as many bytes as one dense call reads (K and V), from the stream buffer
// at a rotating offset; B: the dense call. B / A = stream bandwidth / dense bandwidth.
void BM_PairDenseStream(benchmark::State &state, std::size_t n, std::size_t d, int G) {
  Dataset &ds = dataset(n, d, G, true);
  DenseCall dense(ds, false);
  const lsh::HugeVector<std::uint64_t> &buf = stream_buffer();
  const std::size_t words = 2 * n * d * 2 / 8;
  std::size_t off = 0;
  run_pair(
      state, key("pair_stream_dense", d, G, n),
      [&] {
        if (off + words > buf.size())
          off = 0;
        std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (std::size_t i = off; i < off + words; i += 4) {
          s0 += buf[i];
          s1 += buf[i + 1];
          s2 += buf[i + 2];
          s3 += buf[i + 3];
        }
        benchmark::DoNotOptimize(s0 + s1 + s2 + s3);
        off += words;
      },
      dense);
}

// A: sampled step, B: dense (same data). B / A = the speedup of sampling.
void BM_PairSampledDense(benchmark::State &state, std::size_t n, std::size_t d, int G) {
  Dataset &ds = dataset(n, d, G, true);
  SampledCall sampled(ds, false);
  DenseCall dense(ds, false);
  run_pair(state, key("pair_sampled_dense", d, G, n), sampled, dense);
}

// lsh-hybrid's ranker (hybrid_rank.h) against MagicPIG's whole step: A: the sampled step, B: the
// Hamming scan of every token's packed (10, 150) sketch (1500 bits, 24 words) for the G heads.
// B / A is what ranking every token costs before lsh-hybrid attends to anything: lsh-hybrid at
// MagicPIG's cost2 runs at most A / (A + B) of its speed. The sketches are random bits (the scan's
// time does not depend on them), one copy per dataset copy like the rows.
// Random packed sketches of `bits` SimHash columns for the hybrid pairs: one per token of every
// dataset copy (like the rows), and the G heads' query sketches.
struct RandomSketches {
  std::size_t words;
  std::vector<lsh::HugeVector<std::uint64_t>> tokens; // per copy, n x words
  std::vector<std::uint64_t> queries;                 // G x words
  RandomSketches(const Dataset &ds, int bits) : words(lsh::hybrid_sketch_words(bits)) {
    pig::ref::Rng rng(7);
    tokens.resize(ds.copies);
    for (auto &s : tokens) {
      s.resize(ds.n * words);
      for (auto &w : s)
        w = rng.next_u64();
    }
    queries.resize(std::size_t(ds.G) * words);
    for (auto &w : queries)
      w = rng.next_u64();
  }
};

void BM_PairHybridScanSampled(benchmark::State &state, std::size_t n, std::size_t d, int G) {
  Dataset &ds = dataset(n, d, G, true);
  SampledCall sampled(ds, false);
  const RandomSketches sk(ds, 1500);
  std::vector<std::uint16_t> H(std::size_t(G) * n);
  std::size_t c = 0;
  run_pair(state, key("pair_hybrid_scan_sampled", d, G, n), sampled, [&] {
    lsh::hybrid_hamming_scan(sk.tokens[c].data(), sk.words, n, sk.queries.data(), G, H.data());
    benchmark::DoNotOptimize(H.data());
    c = (c + 1) % sk.tokens.size();
  });
}

// lsh-hybrid's whole step for one kv-head group against MagicPIG's: A: the sampled step; B: the
// Hamming scan of the G heads' sketches, then for each head the scores (hybrid_hamming_scores),
// the head and the draw (HybridSampler, at MagicPIG's cost2 measured on these rows, head share
// 0.25, floor 0.1) and the weighted softmax over the head's rows and the drawn ones
// (hybrid_attend). B / A is lsh-hybrid's step in MagicPIG steps at equal cost2. The sketches are
// random bits as in pair_hybrid_scan_sampled (the scores then rank at random, which costs the
// selection what real ones do: every pass visits every token); the norms and rows are the
// dataset's. quant: the ranker is rank=quant's instead (docs/HYBRID.md): the int4-key scan of
// random packed keys (hybrid_quant_scan) and its scores (hybrid_quant_scores), the rest the same;
// pair_hybrid_quant_step_sampled.
void BM_PairHybridStepSampled(benchmark::State &state, std::size_t n, std::size_t d, int G,
                              bool quant) {
  Dataset &ds = dataset(n, d, G, true);
  SampledCall sampled(ds, false);
  lsh::StepStats st;
  sampled.stats = &st;
  sampled();
  sampled.stats = nullptr;
  double cost2 = 0; // the group's mean sampled fraction per head
  for (int g = 0; g < G; ++g)
    cost2 += double(st.sampled_per_head[g]) / double(n) / double(G);
  const int bits = 1500;
  const RandomSketches sk(ds, bits);
  // |k_i| of the bf16 rows (the same in every copy), and cos(pi h / bits) for h in [0, bits].
  std::vector<double> norms(n), cos_of(bits + 1);
  for (std::size_t i = 0; i < n; ++i) {
    double s2 = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const double x = std::bit_cast<float>(std::uint32_t(ds.k[0][i * d + j]) << 16);
      s2 += x * x;
    }
    norms[i] = std::sqrt(s2);
  }
  for (int h = 0; h <= bits; ++h)
    cos_of[std::size_t(h)] = pig::ref::hamming_cosine(h, bits);
  std::vector<std::uint16_t> H(std::size_t(G) * n);
  // rank=quant: random int4 keys (nibbles 1..15) per copy, their scales, int8 queries.
  std::vector<std::vector<std::uint8_t>> qkeys(quant ? ds.copies : 0);
  std::vector<float> kscale(quant ? n : 0),
      q8(quant ? std::size_t(G) * 2 * lsh::hybrid_quant_bytes(d) : 0),
      acc(quant ? std::size_t(G) * n : 0);
  if (quant) {
    pig::ref::Rng rng(9);
    for (auto &k : qkeys) {
      k.resize(lsh::hybrid_quant_size(n, d));
      for (auto &b : k)
        b = std::uint8_t(1 + rng.below(15) + 16 * (1 + rng.below(15)));
    }
    for (auto &x : kscale)
      x = float(0.01 + rng.uniform());
    for (std::size_t i = 0; i < q8.size(); ++i)
      q8[i] = i % (2 * lsh::hybrid_quant_bytes(d)) < d ? float(int(rng.below(255)) - 127) : 0.0f;
  }
  std::vector<double> z, bias;
  std::vector<std::uint32_t> ids;
  std::vector<float> out(d);
  lsh::HybridSampler sampler;
  const double scale = 1.0 / std::sqrt(double(d)), target = cost2 * double(n);
  const std::size_t head = std::size_t(std::llround(0.25 * target));
  std::size_t c = 0, calls = 0;
  const char *name = quant ? "pair_hybrid_quant_step_sampled" : "pair_hybrid_step_sampled";
  run_pair(state, key(name, d, G, n), sampled, [&] {
    const float *q = ds.query(calls);
    if (quant)
      lsh::hybrid_quant_scan(qkeys[c].data(), d, n, q8.data(), G, acc.data());
    else
      lsh::hybrid_hamming_scan(sk.tokens[c].data(), sk.words, n, sk.queries.data(), G, H.data());
    for (int g = 0; g < G; ++g) {
      const float *qg = q + std::size_t(g) * d;
      double qn = 0;
      for (std::size_t j = 0; j < d; ++j)
        qn += double(qg[j]) * double(qg[j]);
      z.resize(n);
      if (quant)
        lsh::hybrid_quant_scores(acc.data() + std::size_t(g) * n, kscale.data(), nullptr, n, 0.01,
                                 scale, z.data());
      else
        lsh::hybrid_hamming_scores(H.data() + std::size_t(g) * n, norms.data(), nullptr, n,
                                   cos_of.data(), scale * std::sqrt(qn), z.data());
      sampler.Rank(z, head, 0x5eed + std::uint64_t(calls * 8 + std::size_t(g)), 0);
      sampler.Draw(std::max(0.0, target - double(head)), 0.1);
      ids.assign(sampler.head().begin(), sampler.head().end());
      bias.assign(ids.size(), 0.0);
      for (std::size_t j = 0; j < sampler.tail().size(); ++j) {
        ids.push_back(sampler.tail()[j]);
        bias.push_back(std::log(sampler.pi()[j]));
      }
      lsh::hybrid_attend(qg, ds.k[c].data(), ds.values(lsh::DType::bf16, c), lsh::DType::bf16, d,
                         scale, ids.data(), bias.data(), ids.size(), out.data());
    }
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % ds.copies;
    ++calls;
  });
  state.counters["cost2"] = cost2;
}

// q8 rows against bf16 rows (the same values quantised): A: q8, B: bf16; B / A = q8's speed-up.
// `sampled`: the sampled step of each (its own index: of the q8 keys for q8), else dense.
void BM_PairQ8(benchmark::State &state, std::size_t n, std::size_t d, int G, bool sampled) {
  Dataset &ds = with_q8(dataset(n, d, G, true));
  const std::string name = key(sampled ? "pair_q8_bf16_sampled" : "pair_q8_bf16_dense", d, G, n);
  if (sampled) {
    SampledCall q8(ds, false, lsh::DType::q8), bf(ds, false);
    run_pair(state, name, q8, bf);
  } else {
    DenseCall q8(ds, false, lsh::DType::q8), bf(ds, false);
    run_pair(state, name, q8, bf);
  }
}

// A: sampled step, B: dense, both on q8 rows.
void BM_PairSampledDenseQ8(benchmark::State &state, std::size_t n, std::size_t d, int G) {
  Dataset &ds = with_q8(dataset(n, d, G, true));
  SampledCall sampled(ds, false, lsh::DType::q8);
  DenseCall dense(ds, false, lsh::DType::q8);
  run_pair(state, key("pair_sampled_dense_q8", d, G, n), sampled, dense);
}

// A: specialised, B: generic kernel of the same configuration.
void BM_PairSpecGeneric(benchmark::State &state, std::size_t n, std::size_t d, int G,
                        bool sampled) {
  Dataset &ds = dataset(n, d, G, true);
  const std::string name =
      key(sampled ? "pair_spec_generic_sampled" : "pair_spec_generic_dense", d, G, n);
  if (sampled) {
    SampledCall spec(ds, false), gen(ds, true);
    run_pair(state, name, spec, gen);
  } else {
    DenseCall spec(ds, false), gen(ds, true);
    run_pair(state, name, spec, gen);
  }
}

// A: our retrieval, B: the public implementation's method (same index contents).
void BM_PairRetrieval(benchmark::State &state, std::size_t n, std::size_t d) {
  RetrievalData *r = checked_retrieval_data(state, n, d);
  if (!r)
    return;
  RetrieveCall ours(*r);
  PublicCall pub(*r);
  run_pair(state, key("pair_retrieval", d, 1, n), ours, pub);
}

// A: the default schedule, B: one knob changed (generic bf16 sets both; schedule_variants.cpp).
// B / A > 1: the variant is slower; the knob table prints A / B, the variant's speed-up.
void BM_PairKnob(benchmark::State &state, const std::string &name, std::size_t n, std::size_t d,
                 int G, std::size_t variant, bool dense) {
  Dataset &ds = dataset(n, d, G, true);
  const lsh::LshKernelSet base = pig::bench::default_schedule_set();
  const lsh::LshKernelSet var = pig::bench::schedule_variant_sets()[variant];
  if (dense) {
    DenseCall a(ds, base), b(ds, var);
    run_pair(state, name, a, b);
  } else {
    SampledCall a(ds, base), b(ds, var);
    run_pair(state, name, a, b);
  }
  state.SetLabel(var.key.schedule.str());
}

// The knob pairs of this run: name -> (variant's schedule, pass, shape).
struct KnobPair {
  std::string schedule, pass, shape;
};
std::map<std::string, KnobPair> g_knob_pairs;

// ---- reporting ----------------------------------------------------------------------------------

double to_ns(benchmark::TimeUnit u) {
  switch (u) {
  case benchmark::kNanosecond:
    return 1.0;
  case benchmark::kMicrosecond:
    return 1e3;
  case benchmark::kMillisecond:
    return 1e6;
  default:
    return 1e9;
  }
}

class CapturingReporter : public benchmark::ConsoleReporter {
public:
  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &r : runs) {
      if (r.aggregate_name == "median") {
        const std::string name = r.run_name.function_name;
        g_median[name] = r.GetAdjustedRealTime() * to_ns(r.time_unit);
        for (const auto &[k, v] : r.counters)
          g_counter[name + "." + k] = v.value;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

double stream_bytes_per_ns() {
  auto it = g_median.find("stream_read");
  if (it == g_median.end())
    return 0;
  return double(stream_buffer().size() * 8) / it->second;
}

// One line per (variant, pass): the variant's speed-up over the default schedule per shape.
void print_knob_table() {
  if (g_knob_pairs.empty())
    return;
  std::printf("\n==== schedule knobs: default time / variant time (interleaved pairs; > 1: the "
              "variant is faster) ====\n");
  std::map<std::string, std::map<std::string, double>> rows; // "schedule | pass" -> shape -> x
  std::map<std::string, bool> shapes;
  for (const auto &[name, kp] : g_knob_pairs) {
    auto it = g_pair.find(name);
    if (it == g_pair.end() || it->second.b <= 0)
      continue;
    rows[kp.schedule + " | " + kp.pass][kp.shape] = it->second.a / it->second.b;
    shapes[kp.shape] = true;
  }
  std::printf("%-72s", "variant | pass");
  for (const auto &[sh, _] : shapes)
    std::printf(" %14s", sh.c_str());
  std::printf("\n");
  for (const auto &[row, cells] : rows) {
    std::printf("%-72s", row.c_str());
    for (const auto &[sh, _] : shapes) {
      auto c = cells.find(sh);
      if (c == cells.end())
        std::printf(" %14s", "-");
      else
        std::printf(" %13.3fx", c->second);
    }
    std::printf("\n");
  }
}

void print_ratios() {
  std::printf("\n==== ratios (medians of this run; time unit ns per kv-head step) ====\n");
  const double bw = stream_bytes_per_ns();
  if (bw > 0)
    std::printf("stream read bandwidth: %.2f GB/s\n", bw);
  for (const auto &[name, t] : g_median) {
    if (name.rfind("dense/", 0) != 0 || bw == 0)
      continue;
    std::size_t d = 0, n = 0;
    int G = 0;
    std::sscanf(name.c_str(), "dense/d:%zu/G:%d/n:%zu", &d, &G, &n);
    const double bytes = 2.0 * double(n) * double(d) * 2.0;
    std::printf("dense d=%-3zu G=%d n=%-6zu : %.2f GB/s = %5.1f %% of stream bandwidth%s\n", d, G,
                n, bytes / t, 100.0 * bytes / t / bw, n >= 65536 ? "  (target >= 85 %)" : "");
  }
  for (const auto &[name, t] : g_median) {
    if (name.rfind("sampled/", 0) != 0 || name.find("generic") != std::string::npos)
      continue;
    std::size_t d = 0, n = 0;
    int G = 0;
    std::sscanf(name.c_str(), "sampled/d:%zu/G:%d/n:%zu", &d, &G, &n);
    char dense[96];
    std::snprintf(dense, sizeof dense, "dense/d:%zu/G:%d/n:%zu", d, G, n);
    if (!g_median.count(dense))
      continue;
    const char *target = "";
    if (n == 131072)
      target = G == 3 ? "  (target >= 12x)" : d == 128 ? "  (target >= 12x)" : "  (target >= 6x)";
    std::printf("sampled vs dense d=%-3zu G=%d n=%-6zu : %6.2fx  sampled fraction %.4f per head, "
                "%.4f union; index %.1f B/token/kv-head%s\n",
                d, G, n, g_median[dense] / t, g_counter[name + ".frac"],
                g_counter[name + ".union_frac"], g_counter[name + ".index_B_per_tok"], target);
  }
  for (const auto &[name, t] : g_median) {
    if (name.rfind("retrieve_ours/", 0) != 0)
      continue;
    const std::string pub = "retrieve_public/" + name.substr(std::strlen("retrieve_ours/"));
    if (g_median.count(pub))
      std::printf("retrieval ours vs public %s : %.2fx (target >= 2x); index %.1f vs %.1f "
                  "B/token/kv-head\n",
                  name.c_str() + std::strlen("retrieve_ours/"), g_median[pub] / t,
                  g_counter[name + ".index_B_per_tok"], g_counter[pub + ".index_B_per_tok"]);
  }
  for (const char *what : {"sampled", "dense"}) {
    const std::string gen = std::string(what) + "_generic/";
    for (const auto &[name, t] : g_median) {
      if (name.rfind(gen, 0) != 0)
        continue;
      const std::string spec = std::string(what) + "/" + name.substr(gen.size());
      if (g_median.count(spec))
        std::printf("specialised vs generic %s %s : %.2fx (target >= 1.3x)\n", what,
                    name.c_str() + gen.size(), t / g_median[spec]);
    }
  }
  if (!g_pair.empty())
    std::printf(
        "\n==== interleaved pairs (A and B alternately in ~20 ms blocks on the same data; medians "
        "of all calls, [min-max]) ====\n");
  for (const auto &[name, r] : g_pair) {
    std::size_t d = 0, n = 0;
    int G = 0;
    const std::size_t slash = name.find("/d:");
    std::sscanf(name.c_str() + slash, "/d:%zu/G:%d/n:%zu", &d, &G, &n);
    const std::string what = name.substr(0, slash);
    char shape[64];
    std::snprintf(shape, sizeof shape, "d=%-3zu G=%d n=%-6zu", d, G, n);
    const auto us = [](double ns) { return ns / 1e3; };
    if (what == "pair_stream_dense") {
      std::printf(
          "dense vs stream read  %s : %5.1f %% of the bandwidth (dense %.0f us [%.0f-%.0f], "
          "stream %.0f us [%.0f-%.0f], %zu calls)  (target >= 85 %%)\n",
          shape, 100.0 * r.a / r.b, us(r.b), us(r.b_min), us(r.b_max), us(r.a), us(r.a_min),
          us(r.a_max), r.calls);
    } else if (what == "pair_sampled_dense") {
      const char *target = G == 3 ? "12x" : d == 128 ? "12x" : "6x";
      std::printf("sampled vs dense      %s : %6.2fx (sampled %.0f us [%.0f-%.0f], dense %.0f us "
                  "[%.0f-%.0f], %zu calls)  (target >= %s)\n",
                  shape, r.b / r.a, us(r.a), us(r.a_min), us(r.a_max), us(r.b), us(r.b_min),
                  us(r.b_max), r.calls, target);
    } else if (what == "pair_q8_bf16_dense" || what == "pair_q8_bf16_sampled") {
      const bool dense = what == "pair_q8_bf16_dense";
      std::printf("q8 vs bf16 %s    %s : %5.2fx (q8 %.0f us [%.0f-%.0f], bf16 %.0f us "
                  "[%.0f-%.0f], %zu calls)  (target >= %s)\n",
                  dense ? "dense  " : "sampled", shape, r.b / r.a, us(r.a), us(r.a_min),
                  us(r.a_max), us(r.b), us(r.b_min), us(r.b_max), r.calls, dense ? "1.6x" : "1.2x");
    } else if (what == "pair_sampled_dense_q8") {
      std::printf("sampled vs dense q8   %s : %6.2fx (sampled %.0f us [%.0f-%.0f], dense %.0f us "
                  "[%.0f-%.0f], %zu calls)\n",
                  shape, r.b / r.a, us(r.a), us(r.a_min), us(r.a_max), us(r.b), us(r.b_min),
                  us(r.b_max), r.calls);
    } else if (what == "pair_hybrid_scan_sampled") {
      std::printf("hybrid ranker scan vs sampled step %s : scan = %.2fx the step (scan %.0f us "
                  "[%.0f-%.0f], sampled %.0f us [%.0f-%.0f], %zu calls): lsh-hybrid <= %.2fx "
                  "magicpig's speed (target >= 0.9x)\n",
                  shape, r.b / r.a, us(r.b), us(r.b_min), us(r.b_max), us(r.a), us(r.a_min),
                  us(r.a_max), r.calls, r.a / (r.a + r.b));
    } else if (what == "pair_hybrid_step_sampled" || what == "pair_hybrid_quant_step_sampled") {
      std::printf(
          "hybrid%s whole step vs sampled step %s : hybrid = %.2fx the step (hybrid %.0f us "
          "[%.0f-%.0f], sampled %.0f us [%.0f-%.0f], %zu calls): lsh-hybrid's attention "
          "at %.2fx magicpig's speed (target >= 0.9x)\n",
          what == "pair_hybrid_quant_step_sampled" ? " (rank=quant)" : "", shape, r.b / r.a,
          us(r.b), us(r.b_min), us(r.b_max), us(r.a), us(r.a_min), us(r.a_max), r.calls, r.a / r.b);
    } else if (what == "pair_index_encode") {
      const double macs = double(n) * double(d) * kK * kL;
      std::printf("index encode vs f32 FMA peak %s : %5.1f %% of the peak, one thread (encode %.0f "
                  "us [%.0f-%.0f] = %.1f GMAC/s, peak loop %.0f us, %zu calls; K=%d L=%d, bf16 "
                  "keys)\n",
                  shape, 100.0 * r.a / r.b, us(r.b), us(r.b_min), us(r.b_max), macs / r.b, us(r.a),
                  r.calls, kK, kL);
    } else if (what == "pair_retrieval") {
      std::printf("retrieval ours vs public %s : %5.2fx (ours %.1f us [%.1f-%.1f], public %.1f us "
                  "[%.1f-%.1f], %zu calls)  (target >= 2x)\n",
                  shape, r.b / r.a, us(r.a), us(r.a_min), us(r.a_max), us(r.b), us(r.b_min),
                  us(r.b_max), r.calls);
    } else {
      std::printf("specialised vs generic %s %s : %5.2fx (specialised %.0f us, generic %.0f us, "
                  "%zu calls)  (target >= 1.3x)\n",
                  what == "pair_spec_generic_sampled" ? "sampled" : "dense  ", shape, r.b / r.a,
                  us(r.a), us(r.b), r.calls);
    }
  }
}

template <class F> void add(const std::string &name, F f) {
  benchmark::RegisterBenchmark(name.c_str(), f)
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime()
      ->MinTime(0.05)
      ->Repetitions(7)
      ->ReportAggregatesOnly(true)
      ->ComputeStatistics(
          "min", [](const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); })
      ->ComputeStatistics("max", [](const std::vector<double> &v) {
        return *std::max_element(v.begin(), v.end());
      });
}

std::string key(const char *what, std::size_t d, int G, std::size_t n) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s/d:%zu/G:%d/n:%zu", what, d, G, n);
  return buf;
}

} // namespace

namespace pig::bench {

void RegisterAttentionBenchmarks(const std::optional<lsh::Schedule> &only) {
  benchmark::RegisterBenchmark("stream_read", BM_StreamRead)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Repetitions(5)
      ->ReportAggregatesOnly(true)
      ->ComputeStatistics(
          "min", [](const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); })
      ->ComputeStatistics("max", [](const std::vector<double> &v) {
        return *std::max_element(v.begin(), v.end());
      });
  // Grouped by dataset so each is generated once.
  struct Shape {
    std::size_t d;
    int G;
  };
  for (const Shape s : {Shape{128, 1}, Shape{64, 1}, Shape{64, 3}})
    for (std::size_t n : {16384, 65536, 131072}) {
      add(key("dense", s.d, s.G, n),
          [=](benchmark::State &st) { BM_Dense(st, n, s.d, s.G, false); });
      if (n == 131072 && s.G == 1)
        add(key("dense_generic", s.d, s.G, n),
            [=](benchmark::State &st) { BM_Dense(st, n, s.d, s.G, true); });
      add(key("sampled", s.d, s.G, n),
          [=](benchmark::State &st) { BM_Sampled(st, n, s.d, s.G, false); });
      if (n == 131072 && s.G == 1)
        add(key("sampled_generic", s.d, s.G, n),
            [=](benchmark::State &st) { BM_Sampled(st, n, s.d, s.G, true); });
    }
  for (std::size_t d : {128}) {
    add(key("retrieve_ours", d, 1, 131072),
        [=](benchmark::State &st) { BM_RetrieveOurs(st, 131072, d); });
    add(key("retrieve_public", d, 1, 131072),
        [=](benchmark::State &st) { BM_RetrievePublic(st, 131072, d); });
  }
  // Interleaved pairs for the targets (n = 128k), grouped by dataset like the above.
  for (const Shape s : {Shape{128, 1}, Shape{64, 1}, Shape{64, 3}}) {
    const std::size_t n = 131072;
    auto reg = [](const std::string &name, auto f) {
      benchmark::RegisterBenchmark(name.c_str(), f)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->MinTime(1.5);
    };
    reg(key("pair_stream_dense", s.d, s.G, n),
        [=](benchmark::State &st) { BM_PairDenseStream(st, n, s.d, s.G); });
    reg(key("pair_sampled_dense", s.d, s.G, n),
        [=](benchmark::State &st) { BM_PairSampledDense(st, n, s.d, s.G); });
    // The 8-bit KV cache (q8) against bf16, and sampled vs dense on q8 rows.
    reg(key("pair_q8_bf16_dense", s.d, s.G, n),
        [=](benchmark::State &st) { BM_PairQ8(st, n, s.d, s.G, false); });
    reg(key("pair_q8_bf16_sampled", s.d, s.G, n),
        [=](benchmark::State &st) { BM_PairQ8(st, n, s.d, s.G, true); });
    reg(key("pair_sampled_dense_q8", s.d, s.G, n),
        [=](benchmark::State &st) { BM_PairSampledDenseQ8(st, n, s.d, s.G); });
    if (s.d == 64) {
      reg(key("pair_hybrid_scan_sampled", s.d, s.G, n),
          [=](benchmark::State &st) { BM_PairHybridScanSampled(st, n, s.d, s.G); });
      reg(key("pair_hybrid_step_sampled", s.d, s.G, n),
          [=](benchmark::State &st) { BM_PairHybridStepSampled(st, n, s.d, s.G, false); });
      reg(key("pair_hybrid_quant_step_sampled", s.d, s.G, n),
          [=](benchmark::State &st) { BM_PairHybridStepSampled(st, n, s.d, s.G, true); });
    }
    if (s.G == 1) {
      reg(key("pair_spec_generic_dense", s.d, s.G, n),
          [=](benchmark::State &st) { BM_PairSpecGeneric(st, n, s.d, s.G, false); });
      reg(key("pair_spec_generic_sampled", s.d, s.G, n),
          [=](benchmark::State &st) { BM_PairSpecGeneric(st, n, s.d, s.G, true); });
    }
  }
  for (std::size_t d : {64, 128})
    benchmark::RegisterBenchmark(key("pair_index_encode", d, 1, 16384).c_str(),
                                 [d](benchmark::State &st) { BM_PairIndexEncode(st, 16384, d); })
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->MinTime(0.2);
  benchmark::RegisterBenchmark(key("pair_retrieval", 128, 1, 131072).c_str(),
                               [](benchmark::State &st) { BM_PairRetrieval(st, 131072, 128); })
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime()
      ->MinTime(1.0);
  // Knob pairs: every variant against the default, per shape (one head and a group of 3, d = 64
  // and 128; n = 16k, 32k, 128k), grouped by dataset. The sampled step for every knob (gqa only
  // for groups), the dense pass for the knobs it uses (block, dense_prefetch).
  {
    const std::vector<lsh::LshKernelSet> variants = pig::bench::schedule_variant_sets();
    struct Shape {
      std::size_t d;
      int G;
    };
    for (const Shape s : {Shape{64, 1}, Shape{128, 1}, Shape{64, 3}, Shape{128, 3}})
      for (std::size_t n : {16384, 32768, 131072})
        for (std::size_t vi = 0; vi < variants.size(); ++vi) {
          const lsh::Schedule &vs = variants[vi].key.schedule;
          if (only && !(vs == *only))
            continue;
          const lsh::Schedule def{};
          const bool gqa = vs.gqa != def.gqa,
                     dense_knob = vs.block != def.block || vs.dense_prefetch != def.dense_prefetch;
          for (bool dense : {false, true}) {
            if ((gqa && s.G == 1) || (dense && !dense_knob))
              continue;
            char buf[160];
            std::snprintf(buf, sizeof buf, "d%zu/G%d/%zuk", s.d, s.G, n / 1024);
            const std::string shape = buf;
            std::snprintf(buf, sizeof buf, "pair_knob/%s/%s/d:%zu/G:%d/n:%zu", vs.symbol().c_str(),
                          dense ? "dense" : "sampled", s.d, s.G, n);
            const std::string name = buf;
            g_knob_pairs[name] = {vs.str(), dense ? "dense" : "sampled", shape};
            benchmark::RegisterBenchmark(
                name.c_str(),
                [=](benchmark::State &st) { BM_PairKnob(st, name, n, s.d, s.G, vi, dense); })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime()
                ->MinTime(1.0);
          }
        }
  }
}

void RunAttentionBenchmarks() {
  std::printf("last-level cache %.0f MiB (as reported); working set per benchmark %.0f MiB\n",
              double(llc_bytes()) / double(1 << 20), double(working_set()) / double(1 << 20));
  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios();
  print_knob_table();
}

} // namespace pig::bench
