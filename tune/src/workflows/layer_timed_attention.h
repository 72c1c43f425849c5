// Forwards to an Attention and keeps the time of each layer's last call (pig-tune speed
// --per-layer). One of the tools' ForwardingAttention decorators (app/ is to hold them).
#pragma once

#include <memory>
#include <vector>

#include "common.h"
#include "pig/runtime/attention.h"

namespace pig::tune::workflow {

class LayerTimedAttention final : public runtime::ForwardingAttention {
public:
  explicit LayerTimedAttention(std::unique_ptr<runtime::Attention> inner)
      : ForwardingAttention(std::move(inner)), seconds(shape().n_layers, 0.0) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, runtime::ThreadPool &pool) override {
    const auto t0 = Clock::now();
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
    seconds[layer] = Since(t0);
  }
  std::vector<double> seconds; // [layer]: the last step's
};

} // namespace pig::tune::workflow
