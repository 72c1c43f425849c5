#include "pig/runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
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

size_t KvCache::BytesFor(const AttentionShape &shape, DType dtype) {
  using detail::CheckedMul;
  Check(shape, dtype);
  const char *what = "KV cache";
  const size_t rows =
      CheckedMul(CheckedMul(shape.n_layers, shape.n_kv_heads, what), shape.capacity, what);
  return CheckedMul(2, CheckedMul(rows, lsh::row_bytes(dtype, shape.head_dim), what), what);
}

KvCache::KvCache(const AttentionShape &shape, DType dtype) : shape_(shape), dtype_(dtype) {
  const size_t bytes = BytesFor(shape, dtype) / 2; // K, then V: checked first, never wrapped
  k_.resize(bytes);
  v_.resize(bytes);
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
  const size_t hd = shape_.head_dim, nkv = shape_.n_kv_heads;
  for (size_t h = 0; h < nkv; ++h) {
    for (size_t i = 0; i < n; ++i) {
      FromF32(k + (i * nkv + h) * hd, dtype_, hd, Row(k_, layer, h, pos + i));
      FromF32(v + (i * nkv + h) * hd, dtype_, hd, Row(v_, layer, h, pos + i));
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
  const size_t d = shape_.head_dim;
  std::vector<float> row(d);
  for (size_t l = 0; l < shape_.n_layers; ++l) {
    for (size_t h = 0; h < shape_.n_kv_heads; ++h) {
      if (other.dtype_ == dtype_) {
        std::memcpy(Row(k_, l, h, to), other.Row(other.k_, l, h, from), m * RowBytes());
        std::memcpy(Row(v_, l, h, to), other.Row(other.v_, l, h, from), m * RowBytes());
        continue;
      }
      for (size_t i = 0; i < m; ++i) {
        lsh::row_to_f32(other.Row(other.k_, l, h, from + i), other.dtype_, 0, d, row.data());
        FromF32(row.data(), dtype_, d, Row(k_, l, h, to + i));
        lsh::row_to_f32(other.Row(other.v_, l, h, from + i), other.dtype_, 0, d, row.data());
        FromF32(row.data(), dtype_, d, Row(v_, l, h, to + i));
      }
    }
  }
}

void KvCache::CopyPrefix(const KvCache &other, size_t n) { CopyRows(other, 0, 0, n); }

void KvCache::Tile(const KvCache &other, size_t period, size_t n) {
  if (period == 0 || period > other.shape_.capacity)
    throw std::invalid_argument("KV cache: tile period outside the source");
  if (n > shape_.capacity)
    throw std::runtime_error("KV cache: tiling past the capacity");
  CopyRows(other, 0, 0, std::min(period, n));
  // The later copies repeat this cache's own first period (already in this element type).
  for (size_t done = period; done < n; done += period)
    CopyRows(*this, 0, done, std::min(period, n - done));
}

void KvCache::KeyRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  lsh::row_to_f32(Row(k_, layer, kvh, pos), dtype_, 0, shape_.head_dim, out);
}

void KvCache::ValueRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  lsh::row_to_f32(Row(v_, layer, kvh, pos), dtype_, 0, shape_.head_dim, out);
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
