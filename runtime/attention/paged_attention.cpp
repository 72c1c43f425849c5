#include "pig/runtime/paged_attention.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pig::runtime {
namespace {
const AttentionSpec &Checked(const AttentionSpec &spec, const AttentionShape &shape,
                             size_t block_size) {
  if (spec.kv_dtype == lsh::DType::q8)
    throw std::invalid_argument("paged attention reads the engine's bf16 or f32 rows; q8 is pig's "
                                "own row format (pig-run, pig-serve, pig.Session)");
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

PagedLshAttention::PagedLshAttention(const AttentionSpec &spec, const AttentionShape &shape,
                                     size_t block_size)
    : spec_(Checked(spec, shape, block_size)), shape_(shape), block_size_(block_size),
      pool_(KvPool::External(shape, spec.kv_dtype, block_size)) {
  // A request's attention, made once here: what MakeAttention refuses is refused now, not at
  // the first decode; and which kernels serve.
  kernels_ = MakeAttention(spec_, shape_, pool_)->stats().kernels;
  // With a fixed mean window, requests whose leading blocks hold the same keys (vLLM's prefix
  // caching gives them the same blocks) stand on one index over them (index_share.h); what
  // finished requests leave is bounded here, as nothing tells when the engine reuses a block.
  pool_->shared_indexes().set_max_bytes(kSharedIndexBytes);
}

IndexShare::Stats PagedLshAttention::SharedIndexStats() const {
  return pool_->shared_indexes().stats();
}

PagedLshAttention::~PagedLshAttention() = default;

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
  if (!cache.data)
    throw std::invalid_argument("paged attention: a cache without data");
  if (!(scale > 0) || (shape_.scale > 0 && scale != shape_.scale))
    throw std::invalid_argument(
        "paged attention: scale " + std::to_string(scale) +
        (shape_.scale > 0 ? ", the requests' attention was made for " + std::to_string(shape_.scale)
                          : std::string(" is not positive")));
  // Every check before any state changes.
  for (const PagedRow &r : rows) {
    if (r.n_tokens == 0 || r.n_tokens > shape_.capacity)
      throw std::invalid_argument("paged attention: request " + std::string(r.request) + " has " +
                                  std::to_string(r.n_tokens) + " tokens; 1 to " +
                                  std::to_string(shape_.capacity) + " are served");
    const size_t need = KvPool::BlocksFor(r.n_tokens, block_size_);
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
  shape_.scale = scale;
  pool_->SetLayer(layer, cache.data, cache.num_blocks);
  spans_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const PagedRow &r = rows[i];
    Request &req = requests_[std::string(r.request)];
    if (!req.attention) {
      req.attention = MakeAttention(spec_, shape_, pool_);
      req.n.assign(shape_.n_layers, 0);
    }
    // A sequence that went back (recomputed by the engine without a Free) starts over.
    if (r.n_tokens < req.n[layer]) {
      req.attention->Reset();
      std::fill(req.n.begin(), req.n.end(), 0);
    }
    req.n[layer] = r.n_tokens;
    req.attention->mutable_cache().Adopt(r.blocks.data(), r.blocks.size(), r.n_tokens);
    spans_[i] = {req.attention.get(), r.n_tokens - 1, 1, r.q, nullptr, nullptr, r.out};
  }
  batch_.Run(layer, spans_.data(), spans_.size(), pool);
}

void PagedLshAttention::Free(std::string_view request) {
  const auto it = requests_.find(std::string(request));
  if (it == requests_.end())
    return;
  const AttentionStats s = it->second.attention->stats();
  static_cast<CostCounters &>(freed_) += s;
  freed_.decode_steps += s.decode_steps;
  requests_.erase(it);
}

std::vector<std::string> PagedLshAttention::Requests() const {
  std::vector<std::string> out;
  for (const auto &[id, r] : requests_)
    out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

size_t PagedLshAttention::IndexBytes() const {
  const AttentionStats s = stats();
  return s.index_bytes + s.hash_bytes;
}

AttentionStats PagedLshAttention::stats() const {
  AttentionStats s = freed_;
  for (const auto &[id, r] : requests_) {
    const AttentionStats x = r.attention->stats();
    static_cast<CostCounters &>(s) += x;
    s.decode_steps += x.decode_steps;
    s.index_bytes += x.index_bytes;
    s.hash_bytes += x.hash_bytes;
  }
  s.kernels = kernels_;
  return s;
}

} // namespace pig::runtime
