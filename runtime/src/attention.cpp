#include "pig/runtime/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pig::runtime {

DenseAttention::DenseAttention(const AttentionShape &shape) : shape_(shape) {
  const size_t n = shape.n_layers * shape.n_kv_heads * shape.capacity * shape.head_dim;
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
}

void DenseAttention::Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                             const float *v, float *out, ThreadPool &pool, const Kernels &kern) {
  const size_t hd = shape_.head_dim, nh = shape_.n_heads, nkv = shape_.n_kv_heads;
  if (pos + n > shape_.capacity) {
    throw std::runtime_error("context full: " + std::to_string(pos + n) + " positions needed, " +
                             std::to_string(shape_.capacity) + " allocated");
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t h = 0; h < nkv; ++h) {
      std::memcpy(KeyRow(layer, h, pos + i), k + (i * nkv + h) * hd, hd * sizeof(float));
      std::memcpy(ValueRow(layer, h, pos + i), v + (i * nkv + h) * hd, hd * sizeof(float));
    }
  }
  const float scale = 1.0f / std::sqrt(float(hd));
  const size_t group = nh / nkv;
  // One work item per (head, block of queries): keeps items balanced for long prefills.
  const size_t qblock = 16;
  const size_t n_qblocks = (n + qblock - 1) / qblock;
  pool.ParallelFor(nh * n_qblocks, [&](size_t item, size_t) {
    const size_t h = item % nh, qb = item / nh;
    const size_t kvh = h / group;
    thread_local std::vector<float> scores;
    if (scores.size() < shape_.capacity)
      scores.resize(shape_.capacity);
    for (size_t i = qb * qblock; i < std::min(n, (qb + 1) * qblock); ++i) {
      kern.attend(q + (i * nh + h) * hd, KeyRow(layer, kvh, 0), ValueRow(layer, kvh, 0),
                  pos + i + 1, hd, scale, scores.data(), out + (i * nh + h) * hd);
    }
  });
}

} // namespace pig::runtime
