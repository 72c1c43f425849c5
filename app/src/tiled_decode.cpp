#include "pig/app/tiled_decode.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "pig/app/generate.h"
#include "pig/app/text.h"
#include "pig/runtime/ops.h"

namespace pig::app {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

std::string DefaultContextCacheDir() {
  if (const char *c = std::getenv("PIG_CACHE"); c && *c)
    return std::string(c) + "/context-kv";
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/pig/context-kv";
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/pig/context-kv";
}

KeptPrefill PrefillKept(const LlamaModel &model, const std::string &model_path, ThreadPool &pool,
                        const std::vector<int32_t> &tokens, lsh::DType dtype,
                        const std::string &dir) {
  const auto t0 = Clock::now();
  const LlamaConfig &c = model.config();
  const size_t n = tokens.size();
  KeptPrefill k;
  k.pool = std::make_shared<KvPool>(c.Shape(0), dtype, 0);
  // The rows depend on the model file, on the kernels that computed them (another target's
  // rounding differs) and on their element type: all three name the blocks (the files of an f32
  // prefill and of a bf16 one must not replace each other).
  std::uint64_t salt = FileHash(model_path) ^ (std::uint64_t(dtype) + 1) * 0x9e3779b97f4a7c15ull;
  for (const char *p = BestKernels().target; *p; ++p)
    salt = salt * 1099511628211ull ^ std::uint64_t(static_cast<unsigned char>(*p));
  k.cache = std::make_unique<PrefixCache>(k.pool, salt);
  if (!dir.empty())
    k.cache->SetDisk(dir, 0);
  AttentionSpec dense;
  dense.kv_dtype = dtype;
  k.session =
      std::make_unique<LlamaSession>(model, pool, n, MakeAttention(dense, c.Shape(n), k.pool));
  std::vector<std::int32_t> blocks;
  k.from_disk = dir.empty() ? 0 : k.cache->Lookup(tokens.data(), n, blocks);
  if (k.from_disk > 0) {
    k.session->attention().AttachPrefix(blocks.data(), blocks.size());
    k.session->SetPosition(k.from_disk);
  }
  double prefill_s = 0;
  Prefill(*k.session, c.vocab,
          std::vector<int32_t>(tokens.begin() + std::ptrdiff_t(k.from_disk), tokens.end()),
          prefill_s);
  if (!dir.empty())
    k.cache->Insert(tokens.data(), n, k.session->attention().cache().blocks());
  k.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return k;
}

LongContextOptions::LongContextOptions()
    : text(kDefaultTextPath), kv_cache_dir(DefaultContextCacheDir()) {}

std::string LongContextOptions::Describe(const KeptPrefill &pre, size_t n) const {
  return Format("%s: dense prefill of %zu tokens of %s in %.1f s (%zu read back from %s)",
                tile ? "TILED text (each context repeats the prefill)" : "distinct text", n,
                text.c_str(), pre.seconds, pre.from_disk,
                kv_cache_dir.empty() ? "nowhere" : kv_cache_dir.c_str());
}

std::vector<int32_t> LongText(const Tokenizer &tok, const std::string &text, size_t need,
                              bool tile) {
  std::vector<int32_t> tokens = tok.Encode(NormalizeText(ReadTextFile(text)));
  if (tokens.empty())
    throw std::runtime_error(text + " encodes to no tokens");
  if (tokens.size() < need && !tile)
    throw std::runtime_error(text + " holds " + std::to_string(tokens.size()) +
                             " tokens; the contexts and steps need " + std::to_string(need) +
                             " of distinct text (give a longer --text, or --tile to repeat it)");
  while (tokens.size() < need)
    tokens.insert(tokens.end(), tokens.begin(), tokens.end());
  return tokens;
}

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
    : logits_(model.config().vocab), pool_(pool) {
  const LlamaConfig &c = model.config();
  const AttentionShape shape = c.Shape(context + steps);
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
  const ThreadPool::WaitStats w0 = pool_.wait_stats();
  const auto t0 = Clock::now();
  session_->Forward(&token, 1, logits_.data());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (first_) {
    run_.first_step_s = s;
    after_first_ = timed_->stats();
    first_ = false;
  } else {
    const ThreadPool::WaitStats w1 = pool_.wait_stats();
    run_.waits.calls += w1.calls - w0.calls;
    run_.waits.waits += w1.waits - w0.waits;
    run_.waits.sleeps += w1.sleeps - w0.sleeps;
    run_.waits.seconds += w1.seconds - w0.seconds;
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
  r.steps = steps_;
  r.step_s = total_;
  r.attention_s = attention_;
  // The timed steps' counters: the totals less the first step's (its index build apart).
  r.timed = static_cast<const runtime::CostCounters &>(r.stats);
  r.timed -= after_first_;
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
