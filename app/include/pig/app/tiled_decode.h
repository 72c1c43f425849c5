// Decoding from a long context (pig-bench-context, pig-bench-batch, pig-tune speed): one dense
// prefill of real text, kept on disk so that a 32k-token context is prefilled once, not per run;
// or, with tiling, a short prefill whose keys and values repeat up to each context length.
//
// Tiled text is not long text: each key appears context/prefill times, which changes bucket
// sizes, collisions and so the work of every sparse method. Speed depends on the rows read, not on
// their positions, but what a sparse method reads depends on the keys: measure on distinct text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pig/app/decorators.h"
#include "pig/runtime/model.h"
#include "pig/runtime/prefix_cache.h"

namespace pig::app {

/// Where the prefilled KV caches of long contexts are kept: $PIG_CACHE/context-kv, else
/// $XDG_CACHE_HOME/pig/context-kv, else $HOME/.cache/pig/context-kv (./pig's model cache).
std::string DefaultContextCacheDir();

/// A dense prefill of `tokens` whose KV rows are kept on disk: the prefix cache's disk tier in
/// `dir` (the files pig-serve's --cache-dir writes: versioned, checksummed, written atomically;
/// a bad file is a logged miss), named by the model file's hash, the kernels' target and the
/// tokens. A later run on the same tokens reads the blocks back and prefills only what is left
/// (at least the last two tokens). dir empty: nothing is kept.
struct KeptPrefill {
  std::shared_ptr<runtime::KvPool> pool;
  std::unique_ptr<runtime::PrefixCache> cache;
  std::unique_ptr<runtime::LlamaSession> session; ///< its attention's cache holds the rows
  size_t from_disk = 0;                           ///< positions read back
  double seconds = 0;                             ///< the whole call (reads and prefill)
  const runtime::KvCache &kv() const { return session->attention().cache(); }
};
KeptPrefill PrefillKept(const runtime::LlamaModel &model, const std::string &model_path,
                        runtime::ThreadPool &pool, const std::vector<int32_t> &tokens,
                        runtime::lsh::DType dtype, const std::string &dir);

/// Where a long-context benchmark's contexts come from (pig-bench-context, pig-bench-batch; their
/// flags: AddLongContextOptions): `text` prefilled up to the longest context, its rows kept in
/// kv_cache_dir (PrefillKept), each context its first tokens; or with `tile` a `prefill` of it
/// repeated up to each context.
struct LongContextOptions {
  std::string text;
  bool tile = false;
  size_t prefill = 2048;
  std::string kv_cache_dir; ///< empty: nothing kept
  LongContextOptions();
  /// Tokens prefilled for contexts up to `longest`.
  size_t Prefilled(size_t longest) const { return tile ? prefill : longest; }
  /// The first token a context's decode steps feed: the text after the context, or after the
  /// tiled prefill.
  size_t FeedStart(size_t context) const { return tile ? prefill : context; }
  /// "distinct text: dense prefill of N tokens of TEXT in S s (M read back from DIR)", or TILED.
  std::string Describe(const KeptPrefill &pre, size_t n) const;
};

/// The tokens of a long-context benchmark: `text` (.gz allowed, NormalizeText'ed), which must
/// hold `need` tokens; with `tile` a short text is repeated instead. Throws
/// std::runtime_error naming the text and both counts when it is too short and not tiled.
std::vector<int32_t> LongText(const runtime::Tokenizer &tok, const std::string &text, size_t need,
                              bool tile);

/// A KV cache of `context` positions of type `dtype`, the first `prefill` positions of `prefix`
/// repeated (KvCache::Tile).
std::unique_ptr<runtime::KvCache> TileCache(const runtime::KvCache &prefix, size_t prefill,
                                            size_t context, runtime::lsh::DType dtype);

/// What one method measured decoding from a tiled cache.
struct DecodeRun {
  double tokens_per_s = 0, attention_share = 0, first_step_s = 0;
  runtime::AttentionStats stats;
  size_t memory = 0;
  // The timed steps (all but the first): how many, their seconds, the part in attention, the
  // attention's counters and step parts, and the pool's waits, over those steps only.
  size_t steps = 0;
  double step_s = 0, attention_s = 0;
  runtime::CostCounters timed;
  runtime::ThreadPool::WaitStats waits;
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
  runtime::ThreadPool &pool_;
  DecodeRun run_;
  runtime::CostCounters after_first_; // the attention's counters after the first step
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
