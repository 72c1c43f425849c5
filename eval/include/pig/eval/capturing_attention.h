// Dense attention that also keeps the queries of single-token steps (decode) of chosen layers:
// the query of a real decode step, next to the cache it attends to, is what attention-error and
// kv-formats measure on. One of the tools' ForwardingAttention decorators (pig-eval's).
#pragma once

#include <cstddef>
#include <vector>

#include "pig/runtime/attention.h"

namespace pig::eval {

class CapturingAttention final : public runtime::ForwardingAttention {
public:
  CapturingAttention(const runtime::AttentionShape &shape, runtime::lsh::DType dtype,
                     std::vector<std::size_t> layers);
  /// Forwards to dense attention; when armed, a single-token step of a chosen layer also keeps
  /// its n_heads x head_dim queries (replacing the layer's previous ones).
  void Forward(std::size_t layer, std::size_t pos, std::size_t n, const float *q, const float *k,
               const float *v, float *out, runtime::ThreadPool &pool) override;

  void Arm(bool on) { armed_ = on; }
  /// The last captured queries of `layer` (empty before any).
  const std::vector<float> &query(std::size_t layer) const { return q_[layer]; }

private:
  std::vector<std::size_t> layers_;
  std::vector<std::vector<float>> q_;
  bool armed_ = false;
};

} // namespace pig::eval
