#include "pig/app/tiled_decode.h"

#include <chrono>
#include <stdexcept>

namespace pig::app {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

std::unique_ptr<KvCache> TileCache(const KvCache &prefix, size_t prefill, size_t context,
                                   lsh::DType dtype) {
  AttentionShape shape = prefix.shape();
  shape.capacity = context;
  auto tiled = std::make_unique<KvCache>(shape, dtype);
  tiled->Tile(prefix, prefill, context);
  return tiled;
}

TiledDecoder::TiledDecoder(const LlamaModel &model, ThreadPool &pool, const AttentionSpec &spec,
                           const KvCache &tiled, size_t context, size_t steps)
    : logits_(model.config().vocab) {
  const LlamaConfig &c = model.config();
  const AttentionShape shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, context + steps};
  auto timed = std::make_unique<TimedAttention>(MakeAttention(spec, shape));
  timed_ = timed.get();
  timed_->LoadPrefix(tiled, context);
  session_ = std::make_unique<LlamaSession>(model, pool, shape.capacity, std::move(timed));
  session_->SetPosition(context);
}

double TiledDecoder::Step(int32_t token) {
  if (session_->position() >= session_->capacity())
    throw std::runtime_error("tiled decode: a session ran out of positions (raise the capacity)");
  const double attention0 = timed_->seconds;
  const auto t0 = Clock::now();
  session_->Forward(&token, 1, logits_.data());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (first_) {
    run_.first_step_s = s;
    first_ = false;
  } else {
    total_ += s;
    attention_ += timed_->seconds - attention0;
    ++steps_;
  }
  return s;
}

DecodeRun TiledDecoder::Result() const {
  DecodeRun r = run_;
  r.tokens_per_s = double(steps_) / total_;
  r.attention_share = attention_ / total_;
  r.stats = timed_->stats();
  r.memory = timed_->MemoryBytes();
  return r;
}

std::vector<DecodeRun> DecodeAlternated(const LlamaModel &model, ThreadPool &pool,
                                        const std::vector<AttentionSpec> &specs,
                                        const std::vector<std::unique_ptr<KvCache>> &tiled,
                                        size_t context, const std::vector<int32_t> &feed) {
  std::vector<std::unique_ptr<TiledDecoder>> decoders;
  for (const AttentionSpec &spec : specs) {
    const KvCache *src = nullptr;
    for (const auto &t : tiled)
      if (t->dtype() == spec.kv_dtype)
        src = t.get();
    if (!src)
      throw std::logic_error("DecodeAlternated: no tiled cache of the spec's KV type");
    decoders.push_back(
        std::make_unique<TiledDecoder>(model, pool, spec, *src, context, feed.size()));
  }
  for (int32_t token : feed)
    for (auto &d : decoders)
      d->Step(token);
  std::vector<DecodeRun> runs;
  for (const auto &d : decoders)
    runs.push_back(d->Result());
  return runs;
}

} // namespace pig::app
