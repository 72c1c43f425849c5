#include "pig/runtime/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <string>
#include <vector>

#include "checked_size.h"
#include "pig/reference/kv_quant.h"
#include "pig/runtime/index_share.h"

namespace pig::runtime {

void KvCache::Check(const AttentionShape &shape, DType dtype) {
  if (shape.head_dim == 0 || shape.head_dim % 2 || shape.n_kv_heads == 0 ||
      shape.n_heads % shape.n_kv_heads != 0) {
    throw std::invalid_argument("KV cache: head dim " + std::to_string(shape.head_dim) + ", " +
                                std::to_string(shape.n_heads) + " heads, " +
                                std::to_string(shape.n_kv_heads) +
                                " kv-heads (need an even head dim and whole GQA groups)");
  }
  if (const std::string e = lsh::dtype_unsupported(dtype, shape.head_dim); !e.empty())
    throw std::invalid_argument(std::string("KV cache: ") + e);
}

size_t KvPool::BlockBytesFor(const AttentionShape &shape, DType dtype, size_t block_tokens) {
  using detail::CheckedMul;
  KvCache::Check(shape, dtype);
  const char *what = "KV cache";
  const size_t rows = CheckedMul(CheckedMul(shape.n_layers, shape.n_kv_heads, what),
                                 CheckedMul(2, block_tokens, what), what);
  return CheckedMul(rows, lsh::row_bytes(dtype, shape.head_dim), what);
}

size_t KvCache::BytesFor(const AttentionShape &shape, DType dtype) {
  return detail::CheckedMul(KvPool::BlocksFor(shape.capacity), KvPool::BlockBytesFor(shape, dtype),
                            "KV cache");
}

// The free blocks (lowest id first: a pool's committed memory stays compact) and the counts.
struct KvPool::State {
  std::mutex mu;
  std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>> free;
  size_t reserved = 0, taken = 0, high = 0; // high: blocks ever handed out (ids [0, high))
  std::vector<std::uint32_t> refs;          // [block]: holders of a taken block
  std::vector<std::uint64_t> stamps;        // [block]: Stamp() while taken
  std::uint64_t next_stamp = 1;
  std::function<size_t(size_t)> evictor; // SetEvictor's
};

namespace {

// Address space a pool without a limit reserves: 1 TiB, or less where the system refuses it.
constexpr size_t kUnlimitedBytes = size_t(1) << 40;

} // namespace

KvPool::KvPool(const AttentionShape &shape, DType dtype, size_t max_blocks, size_t block_tokens)
    : shape_(shape), dtype_(dtype), block_tokens_(block_tokens),
      row_bytes_(lsh::row_bytes(dtype, shape.head_dim)), max_blocks_(max_blocks),
      state_(std::make_unique<State>()), shared_indexes_(std::make_unique<IndexShare>()) {
  if (block_tokens == 0)
    throw std::invalid_argument("KV pool: a block of 0 positions");
  shape_.capacity = 0;
  block_bytes_ = BlockBytesFor(shape_, dtype, block_tokens);
  if (max_blocks > size_t(std::numeric_limits<std::int32_t>::max()))
    throw std::length_error("KV pool: " + std::to_string(max_blocks) + " blocks exceed a block id");
  size_t want = max_blocks ? detail::CheckedMul(max_blocks, block_bytes_, "KV pool")
                           : std::max(kUnlimitedBytes / block_bytes_, size_t(1)) * block_bytes_;
  const size_t layer_bytes = block_bytes_ / std::max<size_t>(shape_.n_layers, 1);
  layer_base_.assign(shape_.n_layers, nullptr);
  if (want == 0)
    return; // a cache of capacity 0: no block, no mapping
  // Reserved, not committed: pages are touched when a block is first written.
  for (;;) {
    void *p = mmap(nullptr, want, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      region_ = static_cast<std::uint8_t *>(p);
      mapped_bytes_ = want;
      break;
    }
    if (max_blocks || want <= 64 * block_bytes_)
      throw std::bad_alloc();
    want = want / 2 / block_bytes_ * block_bytes_; // the system refuses 1 TiB: ask for less
  }
  // Block ids are int32 (a block table's entries): an unlimited pool of tiny blocks stops there.
  mapped_blocks_ =
      std::min(mapped_bytes_ / block_bytes_, size_t(std::numeric_limits<std::int32_t>::max()));
#if defined(MADV_HUGEPAGE)
  madvise(region_, mapped_bytes_, MADV_HUGEPAGE); // advisory, like lsh::HugePageAllocator
#endif
  for (size_t l = 0; l < shape_.n_layers; ++l)
    layer_base_[l] = region_ + l * layer_bytes;
}

std::shared_ptr<KvPool> KvPool::External(const AttentionShape &shape, DType dtype,
                                         size_t block_tokens) {
  // A pool of one layer's blocks and no limit would map address space: built with max_blocks
  // 0 bytes to map (capacity-0 path), then turned into a view.
  AttentionShape one = shape;
  one.n_layers = 1;
  KvCache::Check(one, dtype);
  if (block_tokens == 0)
    throw std::invalid_argument("KV pool: a block of 0 positions");
  std::shared_ptr<KvPool> p(new KvPool(shape, dtype, /*max_blocks=*/0, block_tokens, true));
  return p;
}

KvPool::KvPool(const AttentionShape &shape, DType dtype, size_t max_blocks, size_t block_tokens,
               bool external)
    : shape_(shape), dtype_(dtype), block_tokens_(block_tokens),
      row_bytes_(lsh::row_bytes(dtype, shape.head_dim)), max_blocks_(max_blocks),
      external_(external), state_(std::make_unique<State>()),
      shared_indexes_(std::make_unique<IndexShare>()) {
  shape_.capacity = 0;
  AttentionShape one = shape_;
  one.n_layers = 1;
  block_bytes_ = BlockBytesFor(one, dtype, block_tokens); // a block of one layer
  layer_base_.assign(shape_.n_layers, nullptr);
  layer_blocks_.assign(shape_.n_layers, 0);
}

void KvPool::SetLayer(size_t layer, const void *base, size_t num_blocks) {
  if (!external_)
    throw std::invalid_argument("KV pool: SetLayer names an engine's blocks; this pool owns its");
  if (layer >= shape_.n_layers || !base)
    throw std::invalid_argument("KV pool: layer " + std::to_string(layer) + " of " +
                                std::to_string(shape_.n_layers) +
                                (base ? "" : " without a region"));
  layer_base_[layer] = static_cast<const std::uint8_t *>(base);
  layer_blocks_[layer] = num_blocks;
}

KvPool::~KvPool() {
  if (region_)
    munmap(region_, mapped_bytes_);
}

void KvPool::Reserve(size_t n) {
  if (external_) {
    if (n == 0)
      return;
    throw std::logic_error("KV pool: an engine's blocks are not reserved here");
  }
  const size_t limit = max_blocks_ ? max_blocks_ : mapped_blocks_;
  std::function<size_t(size_t)> evictor;
  {
    std::lock_guard lock(state_->mu);
    if (n <= limit - state_->reserved) {
      state_->reserved += n;
      return;
    }
    evictor = state_->evictor;
  }
  // Short: what a prefix cache holds and no sequence uses is given back first (it calls Give and
  // Unreserve, so not under the lock).
  if (evictor) {
    const size_t short_by = n - (limit - reserved_blocks());
    if (evictor(short_by) > 0)
      shared_indexes_->Collect(*this); // the indexes over what was evicted go with it
  }
  std::lock_guard lock(state_->mu);
  if (n > limit - state_->reserved) {
    throw std::length_error("KV pool: " + std::to_string(n) + " blocks of " +
                            std::to_string(block_tokens_) + " positions needed, " +
                            std::to_string(limit - state_->reserved) + " of " +
                            std::to_string(limit) + " free");
  }
  state_->reserved += n;
}

void KvPool::Unreserve(size_t n) {
  std::lock_guard lock(state_->mu);
  state_->reserved -= std::min(n, state_->reserved);
}

std::int32_t KvPool::Take() {
  if (external_)
    throw std::logic_error("KV pool: an engine's blocks are not taken here");
  std::lock_guard lock(state_->mu);
  State &s = *state_;
  if (s.taken >= s.reserved)
    throw std::logic_error("KV pool: a block taken without a reservation");
  ++s.taken;
  std::int32_t b;
  if (!s.free.empty()) {
    b = s.free.top();
    s.free.pop();
  } else {
    b = std::int32_t(s.high++);
    if (s.refs.size() < s.high) {
      s.refs.resize(std::max<size_t>(s.high, 2 * s.refs.size()));
      s.stamps.resize(s.refs.size());
    }
  }
  s.refs[size_t(b)] = 1;
  s.stamps[size_t(b)] = s.next_stamp++;
  return b;
}

void KvPool::Stamps(const std::int32_t *blocks, size_t n, std::uint64_t *out,
                    std::uint32_t *holders) const {
  std::lock_guard lock(state_->mu);
  const State &s = *state_;
  for (size_t i = 0; i < n; ++i) {
    const std::int32_t b = blocks[i];
    const std::uint32_t refs = b >= 0 && size_t(b) < s.high ? s.refs[size_t(b)] : 0;
    out[i] = refs > 0 ? s.stamps[size_t(b)] : 0;
    if (holders)
      holders[i] = refs;
  }
}

void KvPool::Give(std::int32_t block) {
  std::lock_guard lock(state_->mu);
  State &s = *state_;
  if (block < 0 || size_t(block) >= s.high || s.refs[size_t(block)] == 0)
    throw std::logic_error("KV pool: block " + std::to_string(block) + " given back untaken");
  if (--s.refs[size_t(block)] > 0)
    return; // another holder keeps it
  s.free.push(block);
  --s.taken;
}

void KvPool::Share(std::int32_t block) {
  std::lock_guard lock(state_->mu);
  State &s = *state_;
  if (block < 0 || size_t(block) >= s.high || s.refs[size_t(block)] == 0)
    throw std::logic_error("KV pool: block " + std::to_string(block) + " shared untaken");
  ++s.refs[size_t(block)];
}

std::uint32_t KvPool::Holders(std::int32_t block) const {
  std::lock_guard lock(state_->mu);
  const State &s = *state_;
  return block >= 0 && size_t(block) < s.high ? s.refs[size_t(block)] : 0;
}

void KvPool::SetEvictor(std::function<size_t(size_t)> evictor) {
  std::lock_guard lock(state_->mu);
  state_->evictor = std::move(evictor);
}

size_t KvPool::reserved_blocks() const {
  std::lock_guard lock(state_->mu);
  return state_->reserved;
}

size_t KvPool::taken_blocks() const {
  std::lock_guard lock(state_->mu);
  return state_->taken;
}

size_t KvPool::ResidentBytes() const {
  std::lock_guard lock(state_->mu);
  return state_->high * block_bytes_;
}

namespace {

std::shared_ptr<KvPool> PoolFor(const AttentionShape &shape, lsh::DType dtype,
                                std::shared_ptr<KvPool> pool) {
  if (!pool)
    return std::make_shared<KvPool>(shape, dtype, KvPool::BlocksFor(shape.capacity));
  const AttentionShape &p = pool->shape();
  if (p.n_layers != shape.n_layers || p.n_kv_heads != shape.n_kv_heads ||
      p.head_dim != shape.head_dim || pool->dtype() != dtype) {
    throw std::invalid_argument("KV cache: a pool of " + std::to_string(p.n_layers) + " layers x " +
                                std::to_string(p.n_kv_heads) + " kv-heads x " +
                                std::to_string(p.head_dim) + " " + lsh::to_string(pool->dtype()) +
                                " for a cache of " + std::to_string(shape.n_layers) + " x " +
                                std::to_string(shape.n_kv_heads) + " x " +
                                std::to_string(shape.head_dim) + " " + lsh::to_string(dtype));
  }
  return pool;
}

} // namespace

KvCache::KvCache(const AttentionShape &shape, DType dtype, std::shared_ptr<KvPool> pool)
    : shape_(shape), dtype_(dtype) {
  Check(shape, dtype);
  pool_ = PoolFor(shape, dtype, std::move(pool));
  if (pool_->external())
    return; // the engine's blocks: adopted, never reserved or taken
  const size_t blocks = KvPool::BlocksFor(shape.capacity, pool_->block_tokens());
  pool_->Reserve(blocks);
  reserved_ = blocks;
  table_.reserve(blocks); // never reallocated: a Rows() view stays valid while it grows
}

KvCache::~KvCache() {
  if (!pool_->external())
    for (std::int32_t b : table_)
      pool_->Give(b);
  pool_->Unreserve(reserved_);
}

void KvCache::Clear() {
  size_t borrowed = 0;
  for (std::uint8_t b : borrowed_)
    borrowed += b;
  if (borrowed > 0) { // the attached blocks were another's: the capacity's own come back
    pool_->Reserve(borrowed);
    reserved_ += borrowed;
  }
  if (!pool_->external())
    for (std::int32_t b : table_)
      pool_->Give(b);
  table_.clear();
  borrowed_.clear();
}

void KvCache::Attach(const std::int32_t *blocks, size_t n_blocks) {
  if (pool_->external())
    throw std::invalid_argument("KV cache: an engine's blocks are adopted, not attached");
  if (!table_.empty())
    throw std::logic_error("KV cache: a prefix is attached to an empty cache only");
  if (n_blocks > KvPool::BlocksFor(shape_.capacity, pool_->block_tokens()) ||
      n_blocks * pool_->block_tokens() > shape_.capacity)
    throw std::invalid_argument("KV cache: a prefix of " + std::to_string(n_blocks) +
                                " blocks past the capacity of " + std::to_string(shape_.capacity));
  for (size_t i = 0; i < n_blocks; ++i) {
    pool_->Share(blocks[i]);
    table_.push_back(blocks[i]);
    borrowed_.push_back(1);
  }
  pool_->Unreserve(n_blocks); // held by another; this cache needs that many fewer of its own
  reserved_ -= n_blocks;
}

void KvCache::Unshare(size_t pos, size_t n) {
  if (pool_->external() || n == 0)
    return;
  const size_t bt = pool_->block_tokens();
  const size_t end = std::min(table_.size(), KvPool::BlocksFor(pos + n, bt));
  for (size_t i = pos / bt; i < end; ++i) {
    const std::int32_t old = table_[i];
    if (pool_->Holders(old) <= 1)
      continue;
    if (borrowed_[i]) { // a block of our own from now on
      pool_->Reserve(1);
      ++reserved_;
      borrowed_[i] = 0;
    }
    const std::int32_t copy = pool_->Take();
    std::memcpy(pool_->Row(copy, 0, 0, false, 0), pool_->Row(old, 0, 0, false, 0),
                pool_->BlockBytes());
    table_[i] = copy;
    pool_->Give(old);
  }
}

void KvCache::Adopt(const std::int32_t *blocks, size_t n_blocks, size_t n) {
  if (!pool_->external())
    throw std::invalid_argument("KV cache: only a cache over an engine's blocks adopts a table");
  if (n > shape_.capacity)
    throw std::invalid_argument("KV cache: " + std::to_string(n) + " positions, " +
                                std::to_string(shape_.capacity) + " allocated");
  const size_t need = KvPool::BlocksFor(n, pool_->block_tokens());
  if (n_blocks < need || (need > 0 && !blocks))
    throw std::invalid_argument("KV cache: " + std::to_string(n) + " positions in " +
                                std::to_string(n_blocks) + " blocks of " +
                                std::to_string(pool_->block_tokens()));
  size_t limit = SIZE_MAX; // the smallest region named so far (SetLayer)
  for (size_t l = 0; l < shape_.n_layers; ++l)
    if (pool_->layer_blocks(l) > 0)
      limit = std::min(limit, pool_->layer_blocks(l));
  for (size_t b = 0; b < need; ++b)
    if (blocks[b] < 0 || size_t(blocks[b]) >= limit)
      throw std::invalid_argument("KV cache: block " + std::to_string(blocks[b]) +
                                  " outside a cache of " + std::to_string(limit) + " blocks");
  table_.assign(blocks, blocks + need);
}

void KvCache::Hold(size_t n) {
  const size_t need = KvPool::BlocksFor(n, pool_->block_tokens());
  if (pool_->external()) {
    if (table_.size() < need)
      throw std::runtime_error("KV cache: position " + std::to_string(n - 1) +
                               " is past the engine's block table (" +
                               std::to_string(table_.size()) + " blocks)");
    return;
  }
  while (table_.size() < need) {
    table_.push_back(pool_->Take());
    borrowed_.push_back(0);
  }
}

size_t KvCache::BytesPerToken() const {
  return 2 * shape_.n_layers * shape_.n_kv_heads * RowBytes();
}

namespace {

// One row of d elements: f32 -> dtype (round to nearest even for bf16, pig::ref::quantize_q8 for
// q8); lsh::row_to_f32 is the way back.
void FromF32(const float *x, lsh::DType dtype, size_t d, std::uint8_t *dst) {
  if (dtype == lsh::DType::f32)
    std::memcpy(dst, x, d * sizeof(float));
  else if (dtype == lsh::DType::q8)
    ref::quantize_q8(x, d, dst);
  else
    lsh::convert_to_bf16(x, reinterpret_cast<std::uint16_t *>(dst), d);
}

} // namespace

void KvCache::Append(size_t layer, size_t pos, size_t n, const float *k, const float *v) {
  if (layer >= shape_.n_layers)
    throw std::out_of_range("KV cache: layer " + std::to_string(layer));
  if (pos + n > shape_.capacity) {
    throw std::runtime_error("context full: " + std::to_string(pos + n) + " positions needed, " +
                             std::to_string(shape_.capacity) + " allocated");
  }
  if ((k == nullptr) != (v == nullptr) || (!k && !pool_->external()))
    throw std::invalid_argument("KV cache: rows to append without keys or values");
  if (k && pool_->external())
    throw std::invalid_argument("KV cache: an engine's blocks are written by the engine");
  Unshare(pos, n);
  Hold(pos + n);
  if (!k)
    return; // the engine stored them
  const size_t hd = shape_.head_dim, nkv = shape_.n_kv_heads;
  for (size_t h = 0; h < nkv; ++h) {
    for (size_t i = 0; i < n; ++i) {
      FromF32(k + (i * nkv + h) * hd, dtype_, hd,
              static_cast<std::uint8_t *>(At(layer, h, false, pos + i)));
      FromF32(v + (i * nkv + h) * hd, dtype_, hd,
              static_cast<std::uint8_t *>(At(layer, h, true, pos + i)));
    }
  }
}

void KvCache::CopyRows(const KvCache &other, size_t from, size_t to, size_t m) {
  if (pool_->external())
    throw std::invalid_argument("KV cache: an engine's blocks are written by the engine");
  const AttentionShape &o = other.shape_;
  if (o.n_layers != shape_.n_layers || o.n_kv_heads != shape_.n_kv_heads ||
      o.head_dim != shape_.head_dim) {
    throw std::invalid_argument("KV cache: copying rows between caches of different shape");
  }
  if (from + m > o.capacity || to + m > shape_.capacity) {
    throw std::runtime_error("KV cache: " + std::to_string(m) + " positions from " +
                             std::to_string(from) + " to " + std::to_string(to) +
                             " exceed a capacity");
  }
  if (KvPool::BlocksFor(from + m, other.pool_->block_tokens()) > other.table_.size())
    throw std::runtime_error("KV cache: copying positions the source never stored");
  Unshare(to, m);
  Hold(to + m);
  const size_t d = shape_.head_dim, rb = RowBytes();
  std::vector<float> row(d);
  for (size_t l = 0; l < shape_.n_layers; ++l) {
    for (size_t h = 0; h < shape_.n_kv_heads; ++h) {
      for (const bool values : {false, true}) {
        for (size_t i = 0; i < m; ++i) {
          const void *src = other.At(l, h, values, from + i);
          void *dst = At(l, h, values, to + i);
          if (other.dtype_ == dtype_) {
            std::memcpy(dst, src, rb);
          } else {
            lsh::row_to_f32(src, other.dtype_, 0, d, row.data());
            FromF32(row.data(), dtype_, d, static_cast<std::uint8_t *>(dst));
          }
        }
      }
    }
  }
}

void KvCache::CopyPrefix(const KvCache &other, size_t n) { CopyRows(other, 0, 0, n); }

void KvCache::Tile(const KvCache &other, size_t period, size_t n) {
  if (period == 0 || period > other.shape_.capacity ||
      KvPool::BlocksFor(period, other.pool_->block_tokens()) > other.table_.size())
    throw std::invalid_argument("KV cache: tile period outside the source");
  if (n > shape_.capacity)
    throw std::runtime_error("KV cache: tiling past the capacity");
  CopyRows(other, 0, 0, std::min(period, n));
  // The later copies repeat this cache's own first period (already in this element type).
  for (size_t done = period; done < n; done += period)
    CopyRows(*this, 0, done, std::min(period, n - done));
}

void KvCache::KeyRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  lsh::row_to_f32(KeyAt(layer, kvh, pos), dtype_, 0, shape_.head_dim, out);
}

void KvCache::ValueRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  lsh::row_to_f32(ValueAt(layer, kvh, pos), dtype_, 0, shape_.head_dim, out);
}

void KvCache::ReadRows(size_t layer, size_t kvh, size_t n, float *keys, float *values) const {
  const size_t d = shape_.head_dim;
  for (size_t i = 0; i < n; ++i) {
    if (keys)
      KeyRow(layer, kvh, i, keys + i * d);
    if (values)
      ValueRow(layer, kvh, i, values + i * d);
  }
}

} // namespace pig::runtime
