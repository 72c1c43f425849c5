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
};

namespace {

// Address space a pool without a limit reserves: 1 TiB, or less where the system refuses it.
constexpr size_t kUnlimitedBytes = size_t(1) << 40;

} // namespace

KvPool::KvPool(const AttentionShape &shape, DType dtype, size_t max_blocks, size_t block_tokens)
    : shape_(shape), dtype_(dtype), block_tokens_(block_tokens),
      row_bytes_(lsh::row_bytes(dtype, shape.head_dim)), max_blocks_(max_blocks),
      state_(std::make_unique<State>()) {
  if (block_tokens == 0)
    throw std::invalid_argument("KV pool: a block of 0 positions");
  shape_.capacity = 0;
  block_bytes_ = BlockBytesFor(shape_, dtype, block_tokens);
  if (max_blocks > size_t(std::numeric_limits<std::int32_t>::max()))
    throw std::length_error("KV pool: " + std::to_string(max_blocks) + " blocks exceed a block id");
  size_t want = max_blocks ? detail::CheckedMul(max_blocks, block_bytes_, "KV pool")
                           : std::max(kUnlimitedBytes / block_bytes_, size_t(1)) * block_bytes_;
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
}

KvPool::~KvPool() {
  if (region_)
    munmap(region_, mapped_bytes_);
}

void KvPool::Reserve(size_t n) {
  std::lock_guard lock(state_->mu);
  const size_t limit = max_blocks_ ? max_blocks_ : mapped_blocks_;
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
  std::lock_guard lock(state_->mu);
  State &s = *state_;
  if (s.taken >= s.reserved)
    throw std::logic_error("KV pool: a block taken without a reservation");
  ++s.taken;
  if (!s.free.empty()) {
    const std::int32_t b = s.free.top();
    s.free.pop();
    return b;
  }
  return std::int32_t(s.high++);
}

void KvPool::Give(std::int32_t block) {
  std::lock_guard lock(state_->mu);
  state_->free.push(block);
  --state_->taken;
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
  const size_t blocks = KvPool::BlocksFor(shape.capacity, pool_->block_tokens());
  pool_->Reserve(blocks);
  reserved_ = blocks;
  table_.reserve(blocks); // never reallocated: a Rows() view stays valid while it grows
}

KvCache::~KvCache() {
  Clear();
  pool_->Unreserve(reserved_);
}

void KvCache::Clear() {
  for (std::int32_t b : table_)
    pool_->Give(b);
  table_.clear();
}

void KvCache::Hold(size_t n) {
  const size_t need = KvPool::BlocksFor(n, pool_->block_tokens());
  while (table_.size() < need)
    table_.push_back(pool_->Take());
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
  Hold(pos + n);
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
