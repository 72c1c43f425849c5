#include "pig/runtime/paged_attention.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pig::runtime {
namespace {
const AttentionSpec &Checked(const AttentionSpec &spec, const AttentionShape &shape,
                             size_t block_size) {
  if (spec.method != spec::Method::dense && spec.method != spec::Method::magicpig)
    throw std::invalid_argument(std::string("paged attention serves dense and magicpig, not ") +
                                spec.method_name());
  if (spec.kv_dtype == lsh::DType::q8)
    throw std::invalid_argument("paged attention reads bf16 or f32 caches, not q8");
  if (shape.n_layers == 0)
    throw std::invalid_argument("paged attention: a model of 0 layers");
  spec.Validate(shape.n_layers);
  // 0 query heads would pass the divisibility check and reach the kernels as a group of 0 (an
  // assertion there, which aborts the process).
  if (shape.n_heads == 0 || shape.n_kv_heads == 0 || shape.n_heads % shape.n_kv_heads != 0)
    throw std::invalid_argument("paged attention: " + std::to_string(shape.n_heads) +
                                " query heads do not form groups of " +
                                std::to_string(shape.n_kv_heads) + " kv-heads");
  if (shape.group() > size_t(lsh::kMaxGroup))
    throw std::invalid_argument("paged attention: a GQA group of " + std::to_string(shape.group()) +
                                " query heads exceeds the kernels' limit of " +
                                std::to_string(lsh::kMaxGroup));
  KvCache::Check(shape, spec.kv_dtype); // an odd or zero head dim, heads not in whole groups
  if (block_size == 0 || shape.capacity == 0)
    throw std::invalid_argument("paged attention: block size and capacity must be positive");
  return spec;
}
} // namespace

struct PagedLshAttention::PerThread {
  lsh::RetrievalScratch scratch;
  std::vector<float> lse;
  explicit PerThread(size_t capacity) : scratch(capacity) {}
};

struct PagedLshAttention::Unit {
  bool sampled = false;              // false: attended densely by Prepare
  std::vector<float> key_rows;       // the keys joining the index (LshIndex::extend_rows)
  size_t keys = 0;                   // their count
  const float *query_rows = nullptr; // the G rows hashed for the queries (lsh::query_rows)
  size_t first_row = 0;              // where the unit's rows start in the call's batch
  lsh::StepBuffers buf;              // the queries' codes, the retrieved union
  CostCounters cost;
};

PagedLshAttention::PagedLshAttention(const AttentionSpec &spec, const AttentionShape &shape,
                                     size_t block_size)
    : spec_(Checked(spec, shape, block_size)), shape_(shape), block_size_(block_size),
      layers_(spec, shape.n_layers, shape.head_dim) {}

PagedLshAttention::~PagedLshAttention() = default;

size_t PagedLshAttention::Indexable(size_t n_tokens) const {
  return n_tokens > spec_.sink + spec_.local ? n_tokens - spec_.sink - spec_.local : 0;
}

void PagedLshAttention::Decode(size_t layer, const PagedCache &cache,
                               std::span<const PagedRow> rows, float scale, ThreadPool &pool) {
  if (layer >= shape_.n_layers)
    throw std::invalid_argument("paged attention: layer " + std::to_string(layer) +
                                " is outside the model's " + std::to_string(shape_.n_layers));
  if (cache.dtype != spec_.kv_dtype)
    throw std::invalid_argument(std::string("paged attention: the cache holds ") +
                                lsh::to_string(cache.dtype) + " rows, the spec says " +
                                lsh::to_string(spec_.kv_dtype));
  if (cache.block_size != block_size_)
    throw std::invalid_argument("paged attention: the cache has blocks of " +
                                std::to_string(cache.block_size) + " rows, not " +
                                std::to_string(block_size_));
  // Every check before any state changes.
  for (const PagedRow &r : rows) {
    if (r.n_tokens == 0 || r.n_tokens > shape_.capacity)
      throw std::invalid_argument("paged attention: request " + std::string(r.request) + " has " +
                                  std::to_string(r.n_tokens) + " tokens; 1 to " +
                                  std::to_string(shape_.capacity) + " are served");
    const size_t need = r.n_tokens / block_size_ + (r.n_tokens % block_size_ != 0); // no wrap
    if (r.blocks.size() < need)
      throw std::invalid_argument("paged attention: request " + std::string(r.request) + " has " +
                                  std::to_string(r.n_tokens) + " tokens in " +
                                  std::to_string(r.blocks.size()) + " blocks");
    for (size_t b = 0; b < need; ++b)
      if (r.blocks[b] < 0 || size_t(r.blocks[b]) >= cache.num_blocks)
        throw std::invalid_argument("paged attention: request " + std::string(r.request) +
                                    " names block " + std::to_string(r.blocks[b]) +
                                    " of a cache of " + std::to_string(cache.num_blocks));
    if (!r.q || !r.out)
      throw std::invalid_argument("paged attention: a row without query or output");
  }
  std::vector<std::string_view> ids;
  for (const PagedRow &r : rows)
    ids.push_back(r.request);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    throw std::invalid_argument("paged attention: a request has two rows in one call");
  const size_t H = shape_.n_kv_heads;
  std::vector<Request *> reqs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    Request &req = requests_[std::string(rows[i].request)];
    if (req.index.empty())
      req.index.resize(shape_.n_layers * H);
    reqs[i] = &req;
  }
  if (threads_.size() < pool.size())
    threads_.resize(pool.size());
  for (auto &t : threads_)
    if (!t)
      t = std::make_unique<PerThread>(shape_.capacity);
  const size_t U = rows.size() * H, G = shape_.group(), d = shape_.head_dim;
  if (units_.size() < U)
    units_.resize(U);
  // 1. Each unit attended densely, or its index built at first sight and its rows to hash given.
  pool.ParallelFor(U, [&](size_t u, size_t thread) {
    Prepare(layer, cache, rows[u / H], *reqs[u / H], u % H, scale, *threads_[thread], units_[u]);
  });
  // 2. One encode for the joining keys and the queries of every sampled unit: W (K L x d floats,
  // 384 KB at K L = 1500, d = 64) is read once per 8 rows, where hashing each unit's rows on
  // their own read it twice per unit (its one key, then its G queries).
  size_t total = 0;
  for (size_t u = 0; u < U; ++u)
    if (units_[u].sampled) {
      units_[u].first_row = total;
      total += units_[u].keys + G;
    }
  if (total > 0) {
    const LshLayers::Config &cfg = *layers_.layer(layer);
    const size_t L = size_t(cfg.L);
    batch_rows_.resize(total * d);
    batch_codes_.resize(total * L);
    for (size_t u = 0; u < U; ++u) {
      const Unit &x = units_[u];
      if (!x.sampled)
        continue;
      float *dst = batch_rows_.data() + x.first_row * d;
      std::copy_n(x.key_rows.data(), x.keys * d, dst);
      std::copy_n(x.query_rows, G * d, dst + x.keys * d);
    }
    // In blocks of 8 rows (the encode kernel's widest pass) over the threads.
    const size_t per = std::max<size_t>(8, (total + 8 * pool.size() - 1) / (8 * pool.size()) * 8);
    pool.ParallelFor((total + per - 1) / per, [&](size_t c, size_t) {
      lsh::EncodeArgs ea;
      ea.x = batch_rows_.data() + c * per * d;
      ea.dtype = lsh::DType::f32;
      ea.rows = std::min(per, total - c * per);
      ea.W = cfg.W->view();
      ea.codes = batch_codes_.data() + c * per * L;
      cfg.set.encode(ea);
    });
  }
  // 3. Each sampled unit: its index extended, its queries' union retrieved, the fused pass.
  pool.ParallelFor(U, [&](size_t u, size_t thread) {
    if (units_[u].sampled)
      Sample(layer, cache, rows[u / H], *reqs[u / H], u % H, scale, *threads_[thread], units_[u]);
  });
  for (size_t u = 0; u < U; ++u)
    total_ += units_[u].cost;
  if (layer == 0)
    decode_steps_ += rows.size();
}

namespace {
// A kv-head's rows of a request in vLLM's block: every kv-head's K rows then its V rows; a
// kv-head's pages are one block apart.
struct HeadRows {
  const char *k, *v;
  lsh::PagedRows paged;
  HeadRows(const PagedCache &cache, const PagedRow &row, size_t kvh, size_t H, size_t bs,
           size_t d) {
    const size_t rb = spec::row_bytes(cache.dtype, d);
    k = static_cast<const char *>(cache.data) + kvh * 2 * bs * rb;
    v = k + bs * rb;
    paged = lsh::PagedRows{row.blocks.data(), bs, H * 2 * bs * rb};
  }
};
} // namespace

void PagedLshAttention::Prepare(size_t layer, const PagedCache &cache, const PagedRow &row,
                                Request &req, size_t kvh, float scale, PerThread &pt, Unit &u) {
  const size_t d = shape_.head_dim, G = shape_.group(), n = row.n_tokens;
  const HeadRows hr(cache, row, kvh, shape_.n_kv_heads, block_size_, d);
  const float *q = row.q + kvh * G * d;
  u.sampled = false;
  u.cost = {};
  auto &slot = req.index[layer * shape_.n_kv_heads + kvh];
  const LshLayers::Config *cfg =
      spec_.method == spec::Method::magicpig ? layers_.layer(layer) : nullptr;
  // A sequence that went back (recomputed by the engine without a Free) starts over.
  if (slot && slot->n() > n)
    slot.reset();
  if (!cfg || (!slot && Indexable(n) < LshAttention::kMinIndexed)) {
    pt.lse.resize(G);
    lsh::DenseAttentionArgs a;
    a.q = q;
    a.G = int(G);
    a.d = d;
    a.scale = scale;
    a.k = hr.k;
    a.v = hr.v;
    a.dtype = cache.dtype;
    a.paged = hr.paged;
    a.begin = 0;
    a.end = n;
    a.out = row.out + kvh * G * d;
    a.lse = pt.lse.data();
    layers_.dense_set().dense_attention(a);
    return;
  }
  // First sight: the index of the positions before this step (as pig-run builds it at its first
  // decode step), then every step extends it by its token.
  if (!slot) {
    slot = lsh::LshIndex::build(cfg->set, hr.k, cache.dtype, hr.paged, n - 1, *cfg->W,
                                lsh::StaticTokens{spec_.sink, spec_.local}, spec_.transform);
    slot->drop_codes();
  }
  u.keys = slot->extend_rows(hr.k, cache.dtype, hr.paged, n, u.key_rows);
  u.query_rows = lsh::query_rows(*slot, q, int(G), u.buf);
  u.sampled = true;
}

void PagedLshAttention::Sample(size_t layer, const PagedCache &cache, const PagedRow &row,
                               Request &req, size_t kvh, float scale, PerThread &pt, Unit &u) {
  const LshLayers::Config &cfg = *layers_.layer(layer);
  const size_t d = shape_.head_dim, G = shape_.group(), L = size_t(cfg.L); // the layer's own L
  const HeadRows hr(cache, row, kvh, shape_.n_kv_heads, block_size_, d);
  lsh::LshIndex &index = *req.index[layer * shape_.n_kv_heads + kvh];
  const std::uint16_t *codes = batch_codes_.data() + u.first_row * L;
  index.extend_codes(cfg.set, row.n_tokens, codes);
  u.buf.qcodes.assign(codes + u.keys * L, codes + (u.keys + G) * L);
  lsh::StepStats st;
  const size_t n_union =
      lsh::retrieve_encoded(cfg.set, index, cfg.t, pt.scratch, u.buf, int(G), &st);
  pt.lse.resize(G);
  lsh::attend_step(cfg.set, index, cfg.log_u, u.buf, 0, n_union, true,
                   {row.q + kvh * G * d, int(G), scale, row.out + kvh * G * d, pt.lse.data()},
                   {hr.k, hr.v, cache.dtype, d, hr.paged});
  CostCounters &c = u.cost;
  c.indexed += double(st.indexed) * double(G);
  for (size_t h = 0; h < G; ++h)
    c.sampled += double(st.sampled_per_head[h]);
  c.gathered += double(st.sampled_union);
  c.index_bytes_read += st.index_bytes_read;
  c.kv_bytes_indexed += double(st.indexed) * 2.0 * double(spec::row_bytes(cache.dtype, d));
}

void PagedLshAttention::Free(std::string_view request) { requests_.erase(std::string(request)); }

std::vector<std::string> PagedLshAttention::Requests() const {
  std::vector<std::string> out;
  for (const auto &[id, r] : requests_)
    out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

size_t PagedLshAttention::IndexBytes() const {
  size_t bytes = 0;
  for (const auto &[id, r] : requests_)
    for (const auto &ix : r.index)
      if (ix)
        bytes += ix->bytes() + (ix->fitted() ? ix->fitted()->bytes() : 0);
  return bytes;
}

AttentionStats PagedLshAttention::stats() const {
  AttentionStats s;
  static_cast<CostCounters &>(s) = total_;
  s.decode_steps = decode_steps_;
  for (const auto &[id, r] : requests_)
    for (const auto &ix : r.index)
      if (ix) {
        s.index_bytes += ix->bytes();
        s.hash_bytes += ix->fitted() ? ix->fitted()->bytes() : 0;
      }
  s.kernels = layers_.describe();
  return s;
}

} // namespace pig::runtime
