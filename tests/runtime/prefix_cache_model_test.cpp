// A request that attaches a cached prompt prefix (prefix_cache.h; its hit ending on a block
// boundary, or rounded down from inside a block) gives the logits and greedy tokens of the same
// request with no cache, bit for bit, for dense, magicpig and lsh-hybrid over bf16 and dense over
// q8, on the model (skipped when it is absent); every block comes back once both requests end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "model_util.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/index_share.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"

namespace pig::runtime {
namespace {

using lsh::DType;

// n tokens of a synthetic document, from `first` on.
std::vector<int32_t> Document(size_t n, int32_t first) {
  std::vector<int32_t> doc;
  for (size_t i = 0; i < n; ++i)
    doc.push_back(first + int32_t((i * 7919) % 20000));
  return doc;
}

// The document followed by a question.
std::vector<int32_t> Ask(const std::vector<int32_t> &doc, std::initializer_list<int32_t> q) {
  std::vector<int32_t> p = doc;
  p.insert(p.end(), q);
  return p;
}

// Prefills p[from, end) of sequence seq, then n_new greedy steps: the logits before each step.
std::vector<std::vector<float>> Greedy(LlamaBatch &batch, size_t seq, const std::vector<int32_t> &p,
                                       size_t from, size_t n_new, size_t vocab) {
  std::vector<std::vector<float>> out;
  std::vector<float> logits(vocab);
  batch.Prefill(seq, p.data() + from, p.size() - from, logits.data());
  for (size_t i = 0; i < n_new; ++i) {
    out.push_back(logits);
    const int32_t t = ArgMax(logits.data(), vocab);
    batch.Step(&t, &seq, 1, logits.data());
  }
  return out;
}

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
    const AttentionShape shape = c.Shape(cap);
    auto run = [&](LlamaBatch &batch, size_t seq, const std::vector<int32_t> &prompt, size_t from) {
      return Greedy(batch, seq, prompt, from, n_new, vocab);
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

// MagicPIG with a mean window (index_share.h): A's first decode step builds the index over the
// document's cached blocks once and publishes it; B and C, which attach the document and decode
// together in one step, stand on it and index only their own positions. Their logits are those
// of the same requests without the cache, bit for bit; the document's index exists once.
TEST(PrefixCache, SequencesOnOneDocumentShareItsLshIndex) {
  PIG_REQUIRE_MODEL();
  auto m = testing::LoadModel();
  const LlamaConfig &c = m->config();
  const size_t vocab = c.vocab, n_new = 5;
  ThreadPool pool(2);
  const std::vector<int32_t> doc = Document(300, 300);
  auto ask = [&](std::initializer_list<int32_t> q) { return Ask(doc, q); };
  const std::vector<int32_t> qa = ask({11, 12, 13, 14, 15}), qb = ask({21, 22, 23}),
                             qc = ask({31, 32, 33, 34, 35, 36, 37});
  for (const size_t window : {size_t(32), AttentionSpec::kMeanOfPrefix}) {
    AttentionSpec spec;
    spec.method = spec::Method::magicpig;
    spec.local = 16;
    spec.mean_window = window;
    // mean_window = prefix: B and C centre on the mean of the prefix they attached (256 positions),
    // as the same requests do without the cache when told that window.
    AttentionSpec plain_spec = spec;
    if (window == AttentionSpec::kMeanOfPrefix) {
      spec.local = 64; // B's 47 own positions are fewer: the window reaches into the local window
      plain_spec.local = 64;
      plain_spec.mean_window = 256 - spec.sink;
    }
    const std::string what = "mean window " + spec.MeanWindowName();
    const size_t cap = 320;
    const AttentionShape shape = c.Shape(cap);
    // Greedy decoding of several sequences stepped together; logits of every step.
    auto decode = [&](LlamaBatch &batch, std::vector<size_t> seqs,
                      std::vector<std::vector<float>> first) {
      std::vector<std::vector<std::vector<float>>> out(seqs.size());
      std::vector<int32_t> tok(seqs.size());
      std::vector<float> logits(seqs.size() * vocab);
      for (size_t i = 0; i < n_new; ++i) {
        for (size_t s = 0; s < seqs.size(); ++s) {
          out[s].push_back(first[s]);
          tok[s] = ArgMax(first[s].data(), vocab);
        }
        batch.Step(tok.data(), seqs.data(), seqs.size(), logits.data());
        for (size_t s = 0; s < seqs.size(); ++s)
          first[s].assign(logits.begin() + std::ptrdiff_t(s * vocab),
                          logits.begin() + std::ptrdiff_t((s + 1) * vocab));
      }
      return out;
    };
    auto prefill = [&](LlamaBatch &batch, size_t seq, const std::vector<int32_t> &p, size_t from) {
      std::vector<float> logits(vocab);
      batch.Prefill(seq, p.data() + from, p.size() - from, logits.data());
      return logits;
    };
    // Without the cache: B and C alone.
    std::vector<std::vector<std::vector<float>>> want;
    for (const auto *p : {&qb, &qc}) {
      LlamaBatch plain(*m, pool, LlamaBatch::Options{});
      const size_t s = plain.Add(MakeAttention(plain_spec, shape, plain.KvPoolOf(DType::bf16)));
      want.push_back(decode(plain, {s}, {prefill(plain, s, *p, 0)})[0]);
      EXPECT_EQ(plain.SharedIndexStats().nodes, 0u); // no cache, nothing shared
    }
    LlamaBatch::Options o;
    o.prefix_cache = true;
    LlamaBatch batch(*m, pool, o);
    const size_t a = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
    const auto la = prefill(batch, a, qa, 0);
    batch.CachePrompt(a, qa.data(), qa.size());
    // A's first step builds the document's index and publishes it (a fixed window); with the
    // prefix's mean A, which attached nothing, centres on all its keys and keeps its index.
    decode(batch, {a}, {la});
    const IndexShare::Stats after_a = batch.SharedIndexStats();
    const bool a_shares = window != AttentionSpec::kMeanOfPrefix;
    EXPECT_EQ(after_a.nodes, a_shares ? 1u : 0u) << what;
    const size_t b = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
    const size_t cc = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
    ASSERT_EQ(batch.AttachCachedPrefix(b, qb.data(), qb.size()), 256u);
    ASSERT_EQ(batch.AttachCachedPrefix(cc, qc.data(), qc.size()), 256u);
    const auto lb = prefill(batch, b, qb, 256), lc = prefill(batch, cc, qc, 256);
    const auto got = decode(batch, {b, cc}, {lb, lc});
    for (size_t s = 0; s < 2; ++s)
      for (size_t i = 0; i < n_new; ++i)
        ASSERT_EQ(std::memcmp(got[s][i].data(), want[s][i].data(), vocab * sizeof(float)), 0)
            << what << ", " << (s ? "C" : "B") << ", token " << i;
    // B and C stood on one index over the document (A's, or the one B built): each holds only its
    // own positions' tables.
    const IndexShare::Stats after = batch.SharedIndexStats();
    EXPECT_EQ(after.nodes, 1u) << what;
    EXPECT_GT(after.bytes, 0u) << what;
    const size_t units = after.builds; // one base per sparse (layer, kv-head)
    EXPECT_GT(units, 0u) << what;
    EXPECT_EQ(after.hits, a_shares ? 2 * units : units) << what;
    for (size_t s : a_shares ? std::vector<size_t>{a, b, cc} : std::vector<size_t>{b, cc}) {
      const AttentionStats st = batch.attention(s).stats();
      EXPECT_EQ(st.shared_index_bytes, after.bytes) << what << " " << s;
      EXPECT_LT(st.index_bytes, after.bytes / 4) << what << " " << s;
    }
    if (!a_shares) {
      EXPECT_EQ(batch.attention(a).stats().shared_index_bytes, 0u) << what;
    }
    batch.Remove(a);
    batch.Remove(b);
    batch.Remove(cc);
    batch.ClearPrefixCache();
    EXPECT_EQ(batch.SharedIndexStats().nodes, 0u) << what;
    EXPECT_EQ(batch.KvPoolOf(DType::bf16)->taken_blocks(), 0u) << what;
  }
}

// The shared index on disk (IndexShare::SetDisk, under --cache-dir): B's index over the cached
// document is written; after a restart C reads the document's KV and its index back instead of
// prefilling and building them, and gives the logits of C with no cache at the same window.
TEST(PrefixCache, TheSharedIndexIsReadBackAfterARestart) {
  PIG_REQUIRE_MODEL();
  auto m = testing::LoadModel();
  const LlamaConfig &c = m->config();
  const size_t vocab = c.vocab, n_new = 4;
  ThreadPool pool(2);
  const std::vector<int32_t> doc = Document(300, 500);
  auto ask = [&](std::initializer_list<int32_t> q) { return Ask(doc, q); };
  const std::vector<int32_t> qa = ask({11, 12, 13}), qb = ask({21, 22, 23, 24}),
                             qc = ask({31, 32, 33, 34, 35});
  AttentionSpec spec;
  spec.method = spec::Method::magicpig;
  spec.local = 16;
  spec.mean_window = AttentionSpec::kMeanOfPrefix;
  const AttentionShape shape = c.Shape(320);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pig-index-model-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto run = [&](LlamaBatch &batch, size_t seq, const std::vector<int32_t> &p, size_t from) {
    return Greedy(batch, seq, p, from, n_new, vocab);
  };
  AttentionSpec plain_spec = spec;
  plain_spec.mean_window = 256 - spec.sink;
  LlamaBatch plain(*m, pool, LlamaBatch::Options{});
  const auto want =
      run(plain, plain.Add(MakeAttention(plain_spec, shape, plain.KvPoolOf(DType::bf16))), qc, 0);
  LlamaBatch::Options o;
  o.prefix_cache = true;
  o.prefix_cache_dir = dir.string();
  size_t units = 0;
  {
    LlamaBatch batch(*m, pool, o);
    const size_t a = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
    run(batch, a, qa, 0);
    batch.CachePrompt(a, qa.data(), qa.size());
    const size_t b = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
    ASSERT_EQ(batch.AttachCachedPrefix(b, qb.data(), qb.size()), 256u);
    run(batch, b, qb, 256);
    const IndexShare::Stats st = batch.SharedIndexStats();
    units = st.builds;
    EXPECT_GT(units, 0u);
    EXPECT_EQ(st.disk_writes, units);
  }
  LlamaBatch batch(*m, pool, o); // a restart over the same directory
  const size_t cc = batch.Add(MakeAttention(spec, shape, batch.KvPoolOf(DType::bf16)));
  ASSERT_EQ(batch.AttachCachedPrefix(cc, qc.data(), qc.size()), 256u);
  EXPECT_GT(batch.PrefixStats().disk_reads, 0u);
  const auto got = run(batch, cc, qc, 256);
  const IndexShare::Stats st = batch.SharedIndexStats();
  EXPECT_EQ(st.disk_reads, units);
  EXPECT_EQ(st.builds, 0u);
  EXPECT_EQ(st.disk_rejected, 0u);
  EXPECT_GT(batch.attention(cc).stats().shared_index_bytes, 0u);
  for (size_t i = 0; i < n_new; ++i)
    ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), vocab * sizeof(float)), 0)
        << "token " << i;
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace pig::runtime
