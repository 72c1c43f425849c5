// The attention interface of the runtime. The forward pass hands each layer's projected,
// rotated queries, keys and values to an Attention; the implementation owns the KV store.
// DenseAttention (exact softmax over every cached position) is the baseline; the LSH sampling
// path implements the same interface.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "pig/runtime/ops.h"
#include "pig/runtime/thread_pool.h"

namespace pig::runtime {

struct AttentionShape {
  size_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t capacity = 0; // positions the cache can hold
};

class Attention {
public:
  virtual ~Attention() = default;
  // Appends the keys and values of positions [pos, pos + n) of `layer`, then writes the causal
  // attention output of the n queries: out[i] attends to positions [0, pos + i].
  // q/out: n x (n_heads * head_dim); k/v: n x (n_kv_heads * head_dim), row-major.
  virtual void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                       const float *v, float *out, ThreadPool &pool, const Kernels &kern) = 0;
  // Forgets every cached position.
  virtual void Reset() = 0;
  virtual const AttentionShape &shape() const = 0;
  virtual size_t MemoryBytes() const = 0;
};

class DenseAttention final : public Attention {
public:
  explicit DenseAttention(const AttentionShape &shape);
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool, const Kernels &kern) override;
  void Reset() override {}
  const AttentionShape &shape() const override { return shape_; }
  size_t MemoryBytes() const override { return (k_.size() + v_.size()) * sizeof(float); }

private:
  float *KeyRow(size_t layer, size_t kvh, size_t pos) {
    return &k_[((layer * shape_.n_kv_heads + kvh) * shape_.capacity + pos) * shape_.head_dim];
  }
  float *ValueRow(size_t layer, size_t kvh, size_t pos) {
    return &v_[((layer * shape_.n_kv_heads + kvh) * shape_.capacity + pos) * shape_.head_dim];
  }

  AttentionShape shape_;
  std::vector<float> k_, v_; // [layer][kv_head][position][head_dim]
};

} // namespace pig::runtime
