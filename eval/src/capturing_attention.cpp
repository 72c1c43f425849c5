#include "pig/eval/capturing_attention.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace pig::eval {

using namespace pig::runtime;

CapturingAttention::CapturingAttention(const AttentionShape &shape, lsh::DType dtype,
                                       std::vector<size_t> layers)
    : ForwardingAttention(std::make_unique<DenseAttention>(shape, dtype)),
      layers_(std::move(layers)), q_(shape.n_layers) {}

void CapturingAttention::Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k,
                                 const float *v, float *out, ThreadPool &pool) {
  if (armed_ && n == 1 && std::find(layers_.begin(), layers_.end(), layer) != layers_.end())
    q_[layer].assign(q, q + shape().n_heads * shape().head_dim);
  ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
}

} // namespace pig::eval
