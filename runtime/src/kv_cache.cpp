#include "pig/runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pig::runtime {

KvCache::KvCache(const AttentionShape &shape, DType dtype) : shape_(shape), dtype_(dtype) {
  if (shape.head_dim == 0 || shape.head_dim % 2 || shape.n_kv_heads == 0 ||
      shape.n_heads % shape.n_kv_heads != 0) {
    throw std::invalid_argument("KV cache: head dim " + std::to_string(shape.head_dim) + ", " +
                                std::to_string(shape.n_heads) + " heads, " +
                                std::to_string(shape.n_kv_heads) +
                                " kv-heads (need an even head dim and whole GQA groups)");
  }
  const size_t bytes =
      shape.n_layers * shape.n_kv_heads * shape.capacity * shape.head_dim * ElementBytes();
  k_.resize(bytes);
  v_.resize(bytes);
}

size_t KvCache::BytesPerToken() const {
  return 2 * shape_.n_layers * shape_.n_kv_heads * shape_.head_dim * ElementBytes();
}

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
      const float *ks = k + (i * nkv + h) * hd, *vs = v + (i * nkv + h) * hd;
      std::uint8_t *kd = Row(k_, layer, h, pos + i), *vd = Row(v_, layer, h, pos + i);
      if (dtype_ == DType::f32) {
        std::memcpy(kd, ks, hd * sizeof(float));
        std::memcpy(vd, vs, hd * sizeof(float));
      } else {
        lsh::convert_to_bf16(ks, reinterpret_cast<std::uint16_t *>(kd), hd);
        lsh::convert_to_bf16(vs, reinterpret_cast<std::uint16_t *>(vd), hd);
      }
    }
  }
}

void KvCache::CopyPrefix(const KvCache &other, size_t n) {
  const AttentionShape &o = other.shape_;
  if (o.n_layers != shape_.n_layers || o.n_kv_heads != shape_.n_kv_heads ||
      o.head_dim != shape_.head_dim || other.dtype_ != dtype_) {
    throw std::invalid_argument("KV cache: copying a prefix between caches of different shape or "
                                "element type");
  }
  if (n > shape_.capacity || n > o.capacity) {
    throw std::runtime_error("KV cache: prefix of " + std::to_string(n) +
                             " positions exceeds a capacity");
  }
  const size_t row = shape_.head_dim * ElementBytes();
  for (size_t l = 0; l < shape_.n_layers; ++l) {
    for (size_t h = 0; h < shape_.n_kv_heads; ++h) {
      std::memcpy(Row(k_, l, h, 0), other.Row(other.k_, l, h, 0), n * row);
      std::memcpy(Row(v_, l, h, 0), other.Row(other.v_, l, h, 0), n * row);
    }
  }
}

void KvCache::Tile(const KvCache &other, size_t period, size_t n) {
  if (period == 0 || period > other.shape_.capacity)
    throw std::invalid_argument("KV cache: tile period outside the source");
  for (size_t done = 0; done < n; done += period) {
    const size_t m = std::min(period, n - done);
    if (done == 0) {
      CopyPrefix(other, m);
      continue;
    }
    const size_t row = shape_.head_dim * ElementBytes();
    if (done + m > shape_.capacity)
      throw std::runtime_error("KV cache: tiling past the capacity");
    for (size_t l = 0; l < shape_.n_layers; ++l) {
      for (size_t h = 0; h < shape_.n_kv_heads; ++h) {
        std::memcpy(Row(k_, l, h, done), other.Row(other.k_, l, h, 0), m * row);
        std::memcpy(Row(v_, l, h, done), other.Row(other.v_, l, h, 0), m * row);
      }
    }
  }
}

namespace {
void ToF32(const std::uint8_t *src, lsh::DType dtype, size_t d, float *out) {
  if (dtype == lsh::DType::f32)
    std::memcpy(out, src, d * sizeof(float));
  else
    lsh::convert_from_bf16(reinterpret_cast<const std::uint16_t *>(src), out, d);
}
} // namespace

void KvCache::KeyRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  ToF32(Row(k_, layer, kvh, pos), dtype_, shape_.head_dim, out);
}

void KvCache::ValueRow(size_t layer, size_t kvh, size_t pos, float *out) const {
  ToF32(Row(v_, layer, kvh, pos), dtype_, shape_.head_dim, out);
}

} // namespace pig::runtime
