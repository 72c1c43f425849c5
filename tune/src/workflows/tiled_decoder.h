// One candidate's session decoding from a tiled cache (a dense prefill tiled up to the context,
// as pig-bench-context does), each step timed, each layer's attention timed. pig-tune speed's;
// app/ is to hold the one tiled-context decoder of the tools.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "layer_timed_attention.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

namespace pig::tune::workflow {

class TiledDecoder {
public:
  /// A session of model with spec's attention, at position `context` of `tiled` (its first
  /// `context` rows), with room for `steps` more tokens.
  TiledDecoder(const runtime::LlamaModel &model, runtime::ThreadPool &pool,
               const runtime::AttentionSpec &spec, const runtime::KvCache &tiled, size_t context,
               size_t steps);
  /// Decodes one token; its wall time in seconds.
  double Step(int32_t token);
  runtime::AttentionStats Stats() const { return attn_->stats(); }
  /// The last step's attention time of each layer.
  const std::vector<double> &LayerSeconds() const { return attn_->seconds; }

private:
  std::vector<float> logits_;
  LayerTimedAttention *attn_ = nullptr;
  std::unique_ptr<runtime::LlamaSession> session_;
};

} // namespace pig::tune::workflow
