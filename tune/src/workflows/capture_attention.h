// Dense attention that keeps the queries of single-token (decode) steps: the query of a real
// decode step, next to the cache it attends to, is what pig-tune accuracy measures the
// estimators on. One of the tools' ForwardingAttention decorators (app/ is to hold them).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "pig/runtime/attention.h"

namespace pig::tune::workflow {

class CaptureAttention final : public runtime::ForwardingAttention {
public:
  CaptureAttention(const runtime::AttentionShape &shape, runtime::lsh::DType dt)
      : ForwardingAttention(std::make_unique<runtime::DenseAttention>(shape, dt)) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, runtime::ThreadPool &pool) override {
    if (n == 1) {
      const size_t w = shape().n_heads * shape().head_dim;
      queries[layer].push_back({pos, std::vector<float>(q, q + w)});
    }
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
  }
  struct Query {
    size_t pos;
    std::vector<float> q; // n_heads x d
  };
  std::map<size_t, std::vector<Query>> queries; // [layer]
};

} // namespace pig::tune::workflow
