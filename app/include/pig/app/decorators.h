// The attention decorators of the tools: ForwardingAttention wrappers that time or capture the
// Forward calls of the Attention they wrap (pig-bench-context, pig-tune's speed, pig-eval's and
// pig-tune's query capture).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "pig/runtime/attention.h"

namespace pig::app {

/// Forwards to an Attention and times each call: the total over every call and each layer's
/// last call.
class TimedAttention final : public runtime::ForwardingAttention {
public:
  explicit TimedAttention(std::unique_ptr<runtime::Attention> inner)
      : ForwardingAttention(std::move(inner)), layer_seconds(shape().n_layers, 0.0) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, runtime::ThreadPool &pool) override {
    const auto t0 = std::chrono::steady_clock::now();
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    layer_seconds[layer] = s;
  }
  double seconds = 0;                ///< every call's
  std::vector<double> layer_seconds; ///< [layer]: its last call's
};

/// Forwards to an Attention (dense, typically) and keeps the queries of single-token (decode)
/// calls of the chosen layers (every layer when `layers` is empty), while armed (from the start
/// unless Arm(false)): the query of a real decode step, next to the cache it attends to, is what
/// the estimators are measured on.
class CapturingAttention final : public runtime::ForwardingAttention {
public:
  struct Query {
    size_t pos;
    std::vector<float> q; ///< n_heads x head_dim
  };
  explicit CapturingAttention(std::unique_ptr<runtime::Attention> inner,
                              std::vector<size_t> layers = {})
      : ForwardingAttention(std::move(inner)), layers_(std::move(layers)),
        queries_(shape().n_layers) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, runtime::ThreadPool &pool) override {
    if (armed_ && n == 1 && Captures(layer))
      queries_[layer].push_back(
          {pos, std::vector<float>(q, q + shape().n_heads * shape().head_dim)});
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool);
  }
  void Arm(bool on) { armed_ = on; }
  /// Every captured query of `layer`, in call order.
  const std::vector<Query> &queries(size_t layer) const { return queries_[layer]; }
  /// The last captured query of `layer` (empty when none).
  const std::vector<float> &query(size_t layer) const {
    static const std::vector<float> none;
    return queries_[layer].empty() ? none : queries_[layer].back().q;
  }
  /// The last captured query of `layer` (with `pos`: the last one at that position) of each head
  /// of kv-head kvh's group, head_dim floats each (none when nothing was captured).
  std::vector<std::vector<float>> group_queries(size_t layer, size_t kvh,
                                                std::optional<size_t> pos = {}) const {
    std::vector<std::vector<float>> qs;
    static const std::vector<float> none;
    const std::vector<float> *found = &query(layer);
    if (pos) {
      found = &none;
      for (const Query &c : queries_[layer])
        if (c.pos == *pos)
          found = &c.q;
    }
    const std::vector<float> &q = *found;
    const size_t d = shape().head_dim, G = shape().group();
    if (q.empty())
      return qs;
    for (size_t h = kvh * G; h < (kvh + 1) * G; ++h)
      qs.emplace_back(q.begin() + std::ptrdiff_t(h * d), q.begin() + std::ptrdiff_t((h + 1) * d));
    return qs;
  }

private:
  bool Captures(size_t layer) const {
    if (layers_.empty())
      return true;
    for (size_t l : layers_)
      if (l == layer)
        return true;
    return false;
  }
  std::vector<size_t> layers_;
  std::vector<std::vector<Query>> queries_;
  bool armed_ = true;
};

} // namespace pig::app
