#include "tiled_decoder.h"

#include <stdexcept>

namespace pig::tune::workflow {

using namespace pig::runtime;

TiledDecoder::TiledDecoder(const LlamaModel &model, ThreadPool &pool, const AttentionSpec &spec,
                           const KvCache &tiled, size_t context, size_t steps)
    : logits_(model.config().vocab) {
  const LlamaConfig &c = model.config();
  const AttentionShape shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, context + steps};
  auto attn = std::make_unique<LayerTimedAttention>(MakeAttention(spec, shape));
  attn->LoadPrefix(tiled, context);
  attn_ = attn.get();
  session_ = std::make_unique<LlamaSession>(model, pool, shape.capacity, std::move(attn));
  session_->SetPosition(context);
}

double TiledDecoder::Step(int32_t token) {
  if (session_->position() >= session_->capacity())
    throw std::runtime_error("speed: a session ran out of positions (raise the capacity)");
  const auto t0 = Clock::now();
  session_->Forward(&token, 1, logits_.data());
  return Since(t0);
}

} // namespace pig::tune::workflow
