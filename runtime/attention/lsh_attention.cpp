#include "pig/runtime/lsh_attention.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "byte_hash.h"
#include "checked_size.h"
#include "part_timer.h"
#include "pig/runtime/index_share.h"

namespace pig::runtime {
namespace {
// Validates before any member is built from the spec (W and the log u table need a valid K, L).
// Windowed layers become dense ones (LocalLayersDense).
AttentionSpec Checked(const AttentionSpec &spec, const AttentionShape &shape) {
  spec.Validate(shape.n_layers);
  CheckSparseServes(spec, shape);
  if (shape.group() > size_t(lsh::kMaxGroup)) {
    throw std::invalid_argument("magicpig: a GQA group of " + std::to_string(shape.group()) +
                                " query heads exceeds the kernels' limit of " +
                                std::to_string(lsh::kMaxGroup));
  }
  return LocalLayersDense(spec, shape);
}

// The kernels of one (K, L) (throws std::invalid_argument when none can serve the head dim).
lsh::LshKernelSet Resolve(const AttentionSpec &spec, const AttentionShape &shape, int K, int L) {
  return lsh::KernelRegistry::global().resolve(
      lsh::KernelKey{K, L, int(shape.head_dim), spec.kv_dtype, lsh::Target::cpu, spec.schedule});
}

// Every sparse layer's tables over the whole capacity (IndexLayout).
size_t TableBytes(const AttentionSpec &spec, const AttentionShape &shape) {
  // Fitted hashing (lsh::FittedHash) adds, per (sparse layer, kv-head), its two d x m maps and a
  // float norm per indexed token: at most `capacity` of them.
  size_t fitted = 0;
  if (!spec.transform.identity()) {
    const size_t d = shape.head_dim, m = spec.transform.hashed_dim(d);
    fitted = detail::CheckedMul(
        4,
        detail::CheckedAdd(detail::CheckedMul(2 * d, m, "hash maps"), shape.capacity, "hash maps"),
        "hash maps");
  }
  size_t bytes = 0;
  for (const LayerLsh &c : spec.LayerChoices(shape.n_layers))
    if (!c.dense)
      bytes = detail::CheckedAdd(
          bytes,
          detail::CheckedMul(
              shape.n_kv_heads,
              detail::CheckedAdd(lsh::IndexLayout::of(shape.capacity, c.K, c.L).bytes(), fitted,
                                 "LSH index"),
              "LSH index"),
          "LSH index");
  return bytes;
}
} // namespace

size_t LshAttention::ReservedBytesOf(const AttentionSpec &spec, const AttentionShape &shape) {
  // The constructor's checks, in its order, without allocating.
  const AttentionSpec s = Checked(spec, shape);
  KvCache::Check(shape, s.kv_dtype);
  Resolve(s, shape, s.K, s.L);
  for (const LayerLsh &c : s.LayerChoices(shape.n_layers))
    if (!c.dense)
      Resolve(s, shape, c.K, c.L);
  // What ReservedBytes() returns before the first Forward (no index, no scratch yet).
  return detail::CheckedAdd(KvCache::BytesFor(shape, s.kv_dtype), TableBytes(s, shape), "magicpig");
}

LshLayers::LshLayers(const AttentionSpec &spec, size_t n_layers, size_t head_dim)
    : layer_cfg_(n_layers, nullptr) {
  const AttentionShape shape{n_layers, 1, 1, head_dim, 0};
  set_ = Resolve(spec, shape, spec.K, spec.L);
  const std::vector<LayerLsh> choices = spec.LayerChoices(n_layers);
  // One W for every configuration: the widest (K, L)'s, the others as its column prefixes.
  const LayerLsh *widest = nullptr;
  for (const LayerLsh &c : choices)
    if (!c.dense && (!widest || c.K * c.L > widest->K * widest->L))
      widest = &c;
  std::shared_ptr<const lsh::SimHash> wide;
  if (widest)
    wide = std::make_shared<const lsh::SimHash>(spec.seed, head_dim, widest->K, widest->L);
  for (size_t l = 0; l < choices.size(); ++l) {
    const LayerLsh &c = choices[l];
    if (c.dense)
      continue;
    const Config *found = nullptr;
    std::shared_ptr<const lsh::SimHash> w;
    for (const auto &cfg : configs_) {
      if (cfg->K == c.K && cfg->L == c.L) {
        w = cfg->W;
        if (cfg->t == c.t && cfg->r == c.r)
          found = cfg.get();
      }
    }
    if (!found) {
      const lsh::LshKernelSet set =
          c.K == spec.K && c.L == spec.L ? set_ : Resolve(spec, shape, c.K, c.L);
      if (!w)
        w = c.K == wide->K() && c.L == wide->L()
                ? wide
                : std::make_shared<const lsh::SimHash>(wide, c.K, c.L);
      configs_.push_back(std::unique_ptr<Config>(new Config{
          {c.K, c.L, c.t, c.r}, set, std::move(w), lsh::LogUTableData(c.K, c.L, c.t, c.r)}));
      found = configs_.back().get();
    }
    layer_cfg_[l] = found;
  }
}

std::shared_ptr<const LshLayers> LshLayers::Shared(const AttentionSpec &spec, size_t n_layers,
                                                   size_t head_dim) {
  // What the constructor reads of the spec: the kernel key's fields, W's seed, each layer's
  // choice.
  std::ostringstream key;
  key << head_dim << ' ' << n_layers << ' ' << lsh::to_string(spec.kv_dtype) << ' ' << spec.seed
      << ' ' << spec.K << ' ' << spec.L << " [" << spec.schedule.str() << "]";
  for (const LayerLsh &c : spec.LayerChoices(n_layers))
    key << ' ' << c.str();
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const LshLayers>> cache;
  std::lock_guard lock(mu);
  std::weak_ptr<const LshLayers> &slot = cache[key.str()];
  if (std::shared_ptr<const LshLayers> p = slot.lock())
    return p;
  for (auto it = cache.begin(); it != cache.end();) // forget the configurations no one holds
    it = it->second.expired() && it->first != key.str() ? cache.erase(it) : std::next(it);
  auto p = std::make_shared<const LshLayers>(spec, n_layers, head_dim);
  slot = p;
  return p;
}

std::string LshLayers::describe() const {
  std::string s = lsh::KernelRegistry::describe(set_);
  std::vector<std::pair<int, int>> seen{{set_.key.K, set_.key.L}};
  for (const auto &c : configs_) {
    if (std::find(seen.begin(), seen.end(), std::pair{c->K, c->L}) != seen.end())
      continue;
    seen.emplace_back(c->K, c->L);
    s.append("; ").append(lsh::KernelRegistry::describe(c->set));
  }
  return s;
}

LshAttention::LshAttention(const AttentionSpec &spec, const AttentionShape &shape,
                           std::shared_ptr<KvPool> pool)
    : spec_(Checked(spec, shape)), cache_(shape, spec.kv_dtype, std::move(pool)),
      layers_(LshLayers::Shared(spec_, shape.n_layers, shape.head_dim)), set_(layers_->dense_set()),
      index_(shape.n_layers * shape.n_kv_heads), cached_(shape.n_layers, 0),
      per_kvh_(shape.n_kv_heads) {
  // What makes two sequences' codes of one key agree besides the key: the index parameters.
  if (spec_.mean_window > 0 && spec_.transform.identity()) {
    std::ostringstream key;
    // (The window is the request's: IndexShare matches a base's mean to it.)
    key << spec_.seed << ' ' << shape.head_dim << ' ' << spec_.sink << ' ' << spec_.local;
    for (const LayerLsh &c : spec_.LayerChoices(shape.n_layers))
      key << ' ' << c.str();
    share_key_ = key.str();
  }
}

void LshAttention::Reset() {
  for (auto &ix : index_)
    ix.reset();
  std::fill(cached_.begin(), cached_.end(), 0);
  attached_ = 0;
  prefix_key_ = 0;
  total_ = {};
  decode_steps_ = 0;
}

void LshAttention::LoadPrefix(const KvCache &src, size_t n) {
  Reset();
  cache_.CopyPrefix(src, n);
  std::fill(cached_.begin(), cached_.end(), n);
}

void LshAttention::AttachPrefix(const std::int32_t *blocks, size_t n_blocks) {
  Reset();
  cache_.Attach(blocks, n_blocks);
  attached_ = n_blocks * cache_.pool().block_tokens();
  std::fill(cached_.begin(), cached_.end(), attached_);
}

size_t LshAttention::MeanWindow() const {
  if (spec_.mean_window != AttentionSpec::kMeanOfPrefix)
    return spec_.mean_window;
  return attached_ > spec_.sink ? attached_ - spec_.sink : 0; // no prefix: all the keys
}

size_t LshAttention::Indexable(size_t n_tokens) const {
  return n_tokens > spec_.sink + spec_.local ? n_tokens - spec_.sink - spec_.local : 0;
}

// The index of a sequence of n tokens, with the hash transform fitted to its keys (both kept as
// the index grows, like the centring mean). The slots built have Indexable(n + 1) >=
// kMinIndexed, so n has indexed tokens (the mean and the fit see at least kMinIndexed - 1 keys).
void LshAttention::BuildSlot(size_t layer, size_t kvh, size_t n) {
  const AttentionShape &sh = cache_.shape();
  const Config &cfg = *layers_->layer(layer);
  const size_t unit = layer * sh.n_kv_heads + kvh;
  auto &slot = index_[unit];
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  const lsh::StaticTokens st{spec_.sink, spec_.local, MeanWindow()};
  IndexShare::Share share;
  if (!share_key_.empty()) {
    const KvPool &pool = cache_.pool();
    const size_t bs = pool.block_tokens();
    const size_t nb = std::min(cache_.blocks().size(), n / bs);
    thread_local std::vector<std::uint64_t> stamps;
    thread_local std::vector<std::uint32_t> holders;
    stamps.resize(nb);
    IndexShare::Request r{
        share_key_, unit, index_.size(), cache_.blocks().data(), stamps.data(), nb, nb, bs, st, n};
    if (pool.external()) {
      // An engine's blocks (vLLM's prefix caching shares them, and reuses a freed one for other
      // tokens): a block's stamp is a fingerprint of the K rows this index reads, and each
      // (layer, kv-head) is a node of its own. Every full block may be shared: the engine decides.
      const std::uint8_t *base = pool.Base(layer, kvh, false);
      for (size_t b = 0; b < nb; ++b)
        stamps[b] = detail::HashBytes(0x6b726f7773ull,
                                      base + size_t(cache_.blocks()[b]) * pool.BlockBytes(),
                                      bs * pool.RowBytes()) |
                    1; // never 0, a free block's stamp
      r.key += " unit " + std::to_string(unit);
      r.unit = 0;
      r.units = 1;
    } else {
      // The full blocks of [0, n), their stamps, and how many lead that others hold too. A
      // prefix from a PrefixCache names its index on disk: a base over that prefix alone.
      holders.resize(nb);
      pool.Stamps(cache_.blocks().data(), nb, stamps.data(), holders.data());
      r.shared_blocks = 0;
      while (r.shared_blocks < nb && holders[r.shared_blocks] >= 2)
        ++r.shared_blocks;
      if (prefix_key_ != 0) {
        r.prefix_key = prefix_key_;
        r.shared_blocks = std::min(r.shared_blocks, attached_ / bs);
      }
    }
    share = pool.shared_indexes().Acquire(r);
  }
  if (share.build > 0) {
    std::shared_ptr<const lsh::LshIndex> base;
    try {
      base = lsh::LshIndex::freeze(lsh::LshIndex::build(
          cfg.set, rows.k, rows.dtype, rows.paged, st.sink + share.build + st.local, *cfg.W, st));
    } catch (...) {
      cache_.pool().shared_indexes().Abandon(share);
      throw;
    }
    cache_.pool().shared_indexes().Publish(share, base);
    share.base = std::move(base);
    share.limit = share.build;
  }
  // Room for the whole capacity, so that no step reallocates the tables; an engine's capacity
  // (PagedLshAttention: its longest sequence) is no measure of one sequence's, so there the
  // tables grow as they fill.
  const size_t capacity = cache_.pool().external() ? 0 : sh.capacity;
  if (share.base) {
    slot = lsh::LshIndex::on(std::move(share.base), share.limit);
    if (capacity > 0)
      slot->reserve(capacity);
    slot->extend(cfg.set, rows.k, rows.dtype, rows.paged, n, *cfg.W); // this sequence's own
  } else {
    slot = lsh::LshIndex::build(cfg.set, rows.k, rows.dtype, rows.paged, n, *cfg.W, st,
                                spec_.transform, {capacity, /*keep_codes=*/false});
  }
}

void LshAttention::PendingUnits(std::vector<size_t> &units) const {
  const AttentionShape &sh = cache_.shape();
  units.clear();
  for (size_t l = 0; l < sh.n_layers; ++l) {
    // What the next decode step of layer l (at position cached_[l]) builds: PrepareGroup's
    // condition with n_tokens = cached_[l] + 1. A full cache has no next step.
    if (!layers_->layer(l) || cached_[l] >= sh.capacity ||
        Indexable(cached_[l] + 1) < kMinIndexed || cached_[l] + 1 < spec_.dense_below)
      continue;
    for (size_t kvh = 0; kvh < sh.n_kv_heads; ++kvh)
      if (!index_[l * sh.n_kv_heads + kvh])
        units.push_back(l * sh.n_kv_heads + kvh);
  }
}

size_t LshAttention::DecodeUnitsPending() const {
  std::vector<size_t> units;
  PendingUnits(units);
  return units.size();
}

size_t LshAttention::PrepareDecode(ThreadPool &pool, size_t max_units) {
  std::vector<size_t> units;
  PendingUnits(units);
  const size_t todo = std::min(max_units, units.size()), H = cache_.shape().n_kv_heads;
  if (todo > 0)
    pool.ParallelFor(todo, [&](size_t i, size_t) {
      const size_t layer = units[i] / H;
      BuildSlot(layer, units[i] % H, cached_[layer]);
    });
  return units.size() - todo;
}

const lsh::LshIndex *LshAttention::index(size_t layer, size_t kvh) const {
  const auto &ix = index_.at(layer * cache_.shape().n_kv_heads + kvh);
  return ix ? &*ix : nullptr;
}

size_t LshAttention::MemoryBytes() const {
  size_t bytes = cache_.MemoryBytes();
  for (const auto &ix : index_)
    if (ix)
      bytes += ix->bytes() + (ix->fitted() ? ix->fitted()->bytes() : 0);
  for (const auto &t : threads_)
    if (t)
      bytes += t->scratch.capacity() * 2 + t->scratch.capacity() / 8 * lsh::kMaxGroup;
  return bytes;
}

size_t LshAttention::ReservedBytes() const {
  const size_t tables = TableBytes(spec_, cache_.shape());
  return std::max(detail::CheckedAdd(cache_.ReservedBytes(), tables, "magicpig"), MemoryBytes());
}

AttentionStats LshAttention::stats() const {
  AttentionStats s;
  static_cast<CostCounters &>(s) = total_;
  s.decode_steps = decode_steps_;
  std::vector<const lsh::LshIndex *> bases;
  for (const auto &ix : index_)
    if (ix) {
      s.index_bytes += ix->bytes();
      s.hash_bytes += ix->fitted() ? ix->fitted()->bytes() : 0;
      if (ix->base() && std::find(bases.begin(), bases.end(), ix->base()) == bases.end()) {
        bases.push_back(ix->base());
        s.shared_index_bytes += ix->base()->bytes();
      }
    }
  s.kernels = layers_->describe();
  return s;
}

bool LshAttention::DenseStep(size_t layer, size_t kvh, size_t n_tokens) const {
  // Without an index yet: too few tokens to index, or fewer than dense_below (sampling does not
  // pay yet). Once built, an index is used whatever the length.
  return !layers_->layer(layer) ||
         (!index_[layer * cache_.shape().n_kv_heads + kvh] &&
          (Indexable(n_tokens) < kMinIndexed || n_tokens < spec_.dense_below));
}

void LshAttention::DenseGroup(size_t layer, size_t kvh, size_t n_tokens, const float *q, float *out,
                              PerThread &pt) {
  const AttentionShape &sh = cache_.shape();
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  pt.lse.resize(sh.group());
  lsh::DenseAttentionArgs a;
  a.q = q;
  a.G = int(sh.group());
  a.d = sh.head_dim;
  a.scale = sh.Scale();
  a.k = rows.k;
  a.v = rows.v;
  a.paged = rows.paged;
  a.dtype = cache_.dtype();
  a.begin = sh.Begin(layer, n_tokens); // a local layer's window
  a.end = n_tokens;
  a.out = out;
  a.lse = pt.lse.data();
  set_.dense_attention(a);
}

namespace {

void Count(const lsh::StepStats &st, size_t G, size_t row_bytes, CostCounters &c) {
  c.indexed += double(st.indexed) * double(G);
  for (size_t h = 0; h < G; ++h)
    c.sampled += double(st.sampled_per_head[h]);
  c.gathered += double(st.sampled_union);
  c.index_bytes_read += st.index_bytes_read;
  c.kv_bytes_indexed += double(st.indexed) * 2.0 * double(row_bytes);
}
} // namespace

void LshAttention::PrepareGroup(size_t layer, size_t kvh, size_t n_tokens, const float *q,
                                float *out, PerThread &pt, Group &g, CostCounters &c) {
  const AttentionShape &sh = cache_.shape();
  g.sampled = false;
  if (DenseStep(layer, kvh, n_tokens)) {
    PartTimer t(pt.parts.dense);
    DenseGroup(layer, kvh, n_tokens, q, out, pt);
    return;
  }
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  auto &slot = index_[layer * sh.n_kv_heads + kvh];
  const Config *cfg = layers_->layer(layer);
  // The first decode step of this (layer, kv-head) builds the index over the positions cached
  // before it, unless PrepareDecode did so ahead; then every step, the first included, extends it
  // by its token. Built either way from the same positions, the index is the same.
  if (!slot) {
    PartTimer t(pt.parts.build);
    BuildSlot(layer, kvh, n_tokens - 1);
  }
  {
    PartTimer t(pt.parts.extend);
    slot->extend(cfg->set, rows.k, rows.dtype, rows.paged, n_tokens, *cfg->W);
  }
  lsh::StepStats st;
  const PartTimer retrieve(pt.parts.retrieve);
  g.n_union = lsh::retrieve_step(cfg->set, *slot, *cfg->W, {cfg->t, cfg->r}, pt.scratch, g.buf, q,
                                 int(sh.group()), &st);
  pt.parts.encode += st.encode_seconds; // the retrieve timer counts it too: taken off below
  pt.parts.retrieve -= st.encode_seconds;
  g.sampled = true;
  Count(st, sh.group(), cache_.RowBytes(), c);
}

bool LshAttention::PrepareRows(size_t layer, size_t kvh, size_t n_tokens, const float *q,
                               float *out, PerThread &pt, Group &g, HashBatch &hash) {
  const AttentionShape &sh = cache_.shape();
  g.sampled = false;
  if (DenseStep(layer, kvh, n_tokens)) {
    PartTimer t(pt.parts.dense);
    DenseGroup(layer, kvh, n_tokens, q, out, pt);
    return false;
  }
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  auto &slot = index_[layer * sh.n_kv_heads + kvh];
  const Config &cfg = *layers_->layer(layer);
  if (!slot) {
    PartTimer t(pt.parts.build);
    BuildSlot(layer, kvh, n_tokens - 1);
  }
  PartTimer t(pt.parts.extend);
  g.keys = slot->extend_rows(rows.k, rows.dtype, rows.paged, n_tokens, g.key_rows);
  const float *qrows = lsh::query_rows(*slot, q, int(sh.group()), g.buf);
  g.ticket = hash.Add(cfg.set, *cfg.W, g.key_rows.data(), g.keys, qrows, sh.group());
  g.sampled = true;
  return true;
}

void LshAttention::RetrieveEncoded(size_t layer, size_t kvh, size_t n_tokens, PerThread &pt,
                                   Group &g, const HashBatch &hash, CostCounters &c) {
  const AttentionShape &sh = cache_.shape();
  const Config &cfg = *layers_->layer(layer);
  const size_t G = sh.group(), L = size_t(cfg.L);
  lsh::LshIndex &index = *index_[layer * sh.n_kv_heads + kvh];
  const std::uint16_t *codes = hash.Codes(g.ticket);
  {
    PartTimer t(pt.parts.extend);
    index.extend_codes(cfg.set, n_tokens, codes);
  }
  PartTimer t(pt.parts.retrieve);
  g.buf.qcodes.assign(codes + g.keys * L, codes + (g.keys + G) * L);
  lsh::StepStats st;
  g.n_union = lsh::retrieve_encoded(cfg.set, index, {cfg.t, cfg.r}, pt.scratch, g.buf, int(G), &st);
  Count(st, G, cache_.RowBytes(), c);
}

void LshAttention::AttendGroup(size_t layer, size_t kvh, const float *q, float *out, PerThread &pt,
                               Group &g, size_t part, size_t parts) {
  PartTimer t(pt.parts.sampled);
  const AttentionShape &sh = cache_.shape();
  const size_t d = sh.head_dim, G = sh.group();
  const size_t begin = g.n_union * part / parts, end = g.n_union * (part + 1) / parts;
  // One part writes the group's output directly; several write partial results for the merge.
  float *o = parts == 1 ? out : g.out.data() + part * G * d;
  const Config &cfg = *layers_->layer(layer);
  const lsh::GroupQueries queries{q, int(G), sh.Scale(), o, g.lse.data() + part * G};
  const lsh::KvRows rows = cache_.Rows(layer, kvh);
  lsh::attend_step(cfg.set, *index_[layer * sh.n_kv_heads + kvh], cfg.log_u, g.buf, begin, end,
                   part == 0, queries, rows);
}

void LshAttention::Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                           const float *v, float *out, ThreadPool &pool) {
  if (n != 1) {
    cache_.Append(layer, pos, n, k, v);
    cached_.at(layer) = pos + n;
    CausalDense(cache_, set_, layer, pos, n, q, out, pool);
    return;
  }
  const DecodeItems w = BeginDecode(layer, pos, q, k, v, out, pool);
  pool.ParallelFor(w.count, w.run);
  w.finish();
}

DecodeItems LshAttention::BeginDecode(size_t layer, size_t pos, const float *q, const float *k,
                                      const float *v, float *out, ThreadPool &pool,
                                      HashBatch *hash) {
  cache_.Append(layer, pos, 1, k, v);
  cached_.at(layer) = pos + 1;
  const AttentionShape &sh = cache_.shape();
  if (threads_.size() < pool.size())
    threads_.resize(pool.size());
  for (auto &t : threads_)
    if (!t)
      t = std::make_unique<PerThread>(sh.capacity);
  for (auto &c : per_kvh_)
    c = {};
  // A dense layer, or one whose every group decodes densely this step (no index yet and too few
  // tokens, or fewer than dense_below): DenseAttention's split items, balanced over the threads.
  bool all_dense = true;
  for (size_t kvh = 0; kvh < sh.n_kv_heads && all_dense; ++kvh)
    all_dense = DenseStep(layer, kvh, pos + 1);
  if (all_dense) {
    DecodeItems w = dense_split_.Begin(cache_, set_, layer, pos + 1, q, out);
    w.run = [this, run = std::move(w.run)](size_t item, size_t thread) {
      PartTimer t(threads_[thread]->parts.dense);
      run(item, thread);
    };
    w.finish = [this, layer, merge = std::move(w.finish)] {
      {
        PartTimer t(total_.parts.dense);
        merge();
      }
      EndStep(layer);
    };
    return w;
  }
  const size_t hd = sh.head_dim, G = sh.group(), H = sh.n_kv_heads;
  // Two phases per group: its index update and retrieval (PrepareGroup), then its sampled pass
  // (AttendGroup), split in `parts` ranges of the retrieved tokens when the kv-heads do not
  // divide among the threads (3 groups on 2 threads left one idle for a third of the step); the
  // parts are merged exactly (LSE). All of it is one parallel loop: the pool claims items in
  // order, the H prepares first, so a thread that claims a pass whose group is still being
  // prepared waits for a thread that is running it (no barrier between the phases, and no
  // deadlock: an item only waits for an earlier one). Measured on the Xeon (3 kv-heads x
  // G = 3, d = 64, 2 threads, variants alternated step by step in one process): split passes
  // took 6-9 % less time per layer than whole ones with a barrier between the phases, and
  // dropping the barrier another 8-17 % (16k: 196-216 against 222-246 us, 32k: 298-453 against
  // 322-530 us). A batch runs these items beside other sequences' (DecodeItems): the order, and
  // so the rule, holds within each sequence's items.
  // The schedule's parts knob (0: this rule). It changes no compiled code, so the spec's value
  // holds even when the registry served another schedule's kernels.
  const size_t auto_parts = pool.size() > 1 && H % pool.size() != 0 ? 2 : 1;
  const int sched_parts = spec_.schedule.parts ? spec_.schedule.parts : set_.key.schedule.parts;
  const size_t parts = sched_parts > 0 ? size_t(sched_parts) : auto_parts;
  groups_.resize(H);
  if (!prepared_ || prepared_size_ < H) {
    prepared_ = std::make_unique<std::atomic<bool>[]>(H);
    prepared_size_ = H;
  }
  for (size_t kvh = 0; kvh < H; ++kvh) {
    Group &g = groups_[kvh];
    g.out.resize(parts > 1 ? parts * G * hd : 0);
    g.lse.resize(parts * G);
    prepared_[kvh].store(false, std::memory_order_relaxed);
  }
  DecodeItems w;
  // With a batch's encode between the stages (hash): H items give their rows to hash (or attend
  // densely), then H retrieve once the codes are there, then the sampled passes.
  const size_t first = hash ? H : 0;
  w.count = first + H + H * parts;
  w.first_stage = first;
  w.run = [this, layer, pos, q, out, H, G, hd, parts, hash, first](size_t item, size_t thread) {
    if (item < first) {
      PrepareRows(layer, item, pos + 1, q + item * G * hd, out + item * G * hd, *threads_[thread],
                  groups_[item], *hash);
      return;
    }
    item -= first;
    if (item < H && hash) {
      struct Done {
        std::atomic<bool> &flag;
        ~Done() { flag.store(true, std::memory_order_release); }
      } done{prepared_[item]};
      if (groups_[item].sampled)
        RetrieveEncoded(layer, item, pos + 1, *threads_[thread], groups_[item], *hash,
                        per_kvh_[item]);
      return;
    }
    if (item < H) {
      struct Done { // also when PrepareGroup throws: a waiting pass must not spin forever
        std::atomic<bool> &flag;
        ~Done() { flag.store(true, std::memory_order_release); }
      } done{prepared_[item]};
      PrepareGroup(layer, item, pos + 1, q + item * G * hd, out + item * G * hd, *threads_[thread],
                   groups_[item], per_kvh_[item]);
      return;
    }
    const size_t kvh = (item - H) / parts;
    PerThread &pt = *threads_[thread];
    if (!prepared_[kvh].load(std::memory_order_acquire)) {
      PartTimer t(pt.parts.stall);
      while (!prepared_[kvh].load(std::memory_order_acquire))
        std::this_thread::yield();
    }
    if (groups_[kvh].sampled)
      AttendGroup(layer, kvh, q + kvh * G * hd, out + kvh * G * hd, pt, groups_[kvh],
                  (item - H) % parts, parts);
  };
  w.finish = [this, layer, out, H, G, hd, parts] {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t kvh = 0; kvh < H; ++kvh) {
      Group &g = groups_[kvh];
      if (!g.sampled || parts == 1)
        continue;
      // Parts 1, 2, ... folded into part 0 by LSE, the last merge writing the group's output.
      for (size_t p = 1; p < parts; ++p) {
        lsh::MergeArgs m;
        m.out_a = g.out.data();
        m.lse_a = g.lse.data();
        m.out_b = g.out.data() + p * G * hd;
        m.lse_b = g.lse.data() + p * G;
        m.heads = G;
        m.d = hd;
        m.out = p + 1 == parts ? out + kvh * G * hd : g.out.data(); // in place: out may alias
        m.lse = g.lse.data();                                       // out_a, so lse may lse_a
        set_.merge(m);
      }
    }
    total_.parts.sampled +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); // merges
    for (const auto &c : per_kvh_)
      total_ += c;
    EndStep(layer);
  };
  return w;
}

void LshAttention::EndStep(size_t layer) {
  for (const auto &t : threads_) {
    total_.parts += t->parts;
    t->parts = {};
  }
  if (layer == 0)
    ++decode_steps_;
}

} // namespace pig::runtime
