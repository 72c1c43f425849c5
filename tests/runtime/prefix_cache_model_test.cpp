// A request that attaches a cached prompt prefix (prefix_cache.h; its hit ending on a block
// boundary, or rounded down from inside a block) gives the logits and greedy tokens of the same
// request with no cache, bit for bit, for dense, magicpig and lsh-hybrid over bf16 and dense over
// q8, on the model (skipped when it is absent); every block comes back once both requests end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model_util.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"

namespace pig::runtime {
namespace {

using lsh::DType;

// On the model: a document prefilled once by sequence A, then B (the document and another
// question) with the cache, against B prefilled whole with no cache.
TEST(PrefixCache, AHitGivesTheLogitsOfPrefillingTheWholePrompt) {
  PIG_REQUIRE_MODEL();
  auto m = testing::LoadModel();
  const LlamaConfig &c = m->config();
  const size_t vocab = c.vocab, n_new = 4;
  ThreadPool pool(2);
  std::vector<int32_t> doc;
  for (size_t i = 0; i < 150; ++i)
    doc.push_back(int32_t(200 + (i * 7919) % 20000));
  std::vector<int32_t> qa = doc, qb = doc;
  for (int32_t t : {11, 12, 13, 14, 15})
    qa.push_back(t);
  for (int32_t t : {21, 22, 23})
    qb.push_back(t);
  struct Case {
    spec::Method method;
    DType dtype;
    size_t cut; // where A's prompt ends: on a block boundary (128) or inside one
  };
  for (const Case k :
       {Case{spec::Method::dense, DType::bf16, 155}, Case{spec::Method::magicpig, DType::bf16, 128},
        Case{spec::Method::magicpig, DType::bf16, 155},
        Case{spec::Method::lsh_hybrid, DType::bf16, 155},
        Case{spec::Method::dense, DType::q8, 155}}) {
    AttentionSpec spec;
    spec.method = k.method;
    spec.kv_dtype = k.dtype;
    spec.local = 16;
    const std::string what = std::string(spec.method_name()) + " " + lsh::to_string(k.dtype) +
                             ", A's prompt " + std::to_string(k.cut);
    const size_t cap = qb.size() + n_new;
    const AttentionShape shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, cap};
    auto run = [&](LlamaBatch &batch, size_t seq, const std::vector<int32_t> &prompt, size_t from) {
      std::vector<std::vector<float>> out;
      std::vector<float> logits(vocab);
      batch.Prefill(seq, prompt.data() + from, prompt.size() - from, logits.data());
      for (size_t i = 0; i < n_new; ++i) {
        out.push_back(logits);
        const int32_t t = ArgMax(logits.data(), vocab);
        batch.Step(&t, &seq, 1, logits.data());
      }
      return out;
    };
    // Without the cache.
    LlamaBatch plain(*m, pool, LlamaBatch::Options{});
    const size_t pb = plain.Add(MakeAttention(spec, shape, plain.KvPoolOf(k.dtype)));
    const auto want = run(plain, pb, qb, 0);
    // With it: A prefills its prompt (qa cut at k.cut) and caches it, then B attaches.
    LlamaBatch::Options o;
    o.prefix_cache = true;
    LlamaBatch batch(*m, pool, o);
    const std::vector<int32_t> a_prompt(qa.begin(), qa.begin() + std::ptrdiff_t(k.cut));
    const size_t a = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(k.dtype)));
    EXPECT_EQ(batch.AttachCachedPrefix(a, a_prompt.data(), a_prompt.size()), 0u) << what;
    batch.Prefill(a, a_prompt.data(), a_prompt.size(), nullptr);
    batch.CachePrompt(a, a_prompt.data(), a_prompt.size());
    const size_t b = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(k.dtype)));
    const size_t hit = batch.AttachCachedPrefix(b, qb.data(), qb.size());
    EXPECT_EQ(hit, 128u) << what; // two blocks of 64: the rest of the document recomputed
    EXPECT_EQ(batch.position(b), hit);
    const auto got = run(batch, b, qb, hit);
    for (size_t i = 0; i < n_new; ++i)
      ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), vocab * sizeof(float)), 0)
          << what << ", token " << i;
    // A still holds the shared blocks; once both end the cache alone holds them.
    EXPECT_EQ(batch.PrefixStats().blocks, 2u) << what;
    batch.Remove(a);
    batch.Remove(b);
    EXPECT_EQ(batch.KvPoolOf(k.dtype)->taken_blocks(), 2u) << what;
    batch.ClearPrefixCache();
    EXPECT_EQ(batch.KvPoolOf(k.dtype)->taken_blocks(), 0u) << what;
    EXPECT_EQ(batch.KvPoolOf(k.dtype)->reserved_blocks(), 0u) << what;
  }
}

} // namespace
} // namespace pig::runtime
