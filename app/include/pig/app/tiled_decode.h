// Decoding from a long context made by tiling a prompt's KV cache (pig-bench-context, pig-tune
// speed): one dense prefill of real text, its keys and values repeated up to each context length.
// Speed depends on the number of rows read, not on their positions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pig/app/decorators.h"
#include "pig/runtime/model.h"

namespace pig::app {

/// A KV cache of `context` positions of type `dtype`, the first `prefill` positions of `prefix`
/// repeated (KvCache::Tile).
std::unique_ptr<runtime::KvCache> TileCache(const runtime::KvCache &prefix, size_t prefill,
                                            size_t context, runtime::lsh::DType dtype);

/// What one method measured decoding from a tiled cache.
struct DecodeRun {
  double tokens_per_s = 0, attention_share = 0, first_step_s = 0;
  runtime::AttentionStats stats;
  size_t memory = 0;
};

/// One method's session decoding from a tiled cache, one timed step at a time; its attention is
/// a TimedAttention (the time spent in attention, per layer too).
class TiledDecoder {
public:
  /// Loads the first `context` positions of `tiled`; room for `steps` more.
  TiledDecoder(const runtime::LlamaModel &model, runtime::ThreadPool &pool,
               const runtime::AttentionSpec &spec, const runtime::KvCache &tiled, size_t context,
               size_t steps);
  /// Decodes one token; returns the step's seconds. After the first step (which builds the LSH
  /// index), steps and attention time are accumulated into Result(). Throws when the session
  /// has no position left.
  double Step(int32_t token);
  DecodeRun Result() const;
  const TimedAttention &attention() const { return *timed_; }

private:
  std::vector<float> logits_;
  TimedAttention *timed_ = nullptr;
  std::unique_ptr<runtime::LlamaSession> session_;
  DecodeRun run_;
  bool first_ = true;
  double total_ = 0, attention_ = 0;
  size_t steps_ = 0;
};

/// The methods decode the same tokens from the same cache, their steps alternated (one step of
/// each in turn) so that the machine's drift affects them alike. Each spec loads its prefix from
/// the cache in `tiled` of its KV element type.
std::vector<DecodeRun> DecodeAlternated(const runtime::LlamaModel &model, runtime::ThreadPool &pool,
                                        const std::vector<runtime::AttentionSpec> &specs,
                                        const std::vector<std::unique_ptr<runtime::KvCache>> &tiled,
                                        size_t context, const std::vector<int32_t> &feed);

} // namespace pig::app
