// Forward pass checks on the real model (skipped when it is absent): batched prefill and
// token-by-token decode agree, the session reports a full context clearly, sampling is seeded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model_util.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"

namespace pig::runtime {
namespace {

using testing::LoadModel;

TEST(Model, ConfigFromMetadata) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const LlamaConfig &c = m->config();
  EXPECT_EQ(c.n_layers, 30u);
  EXPECT_EQ(c.dim, 576u);
  EXPECT_EQ(c.n_heads, 9u);
  EXPECT_EQ(c.n_kv_heads, 3u);
  EXPECT_EQ(c.head_dim, 64u);
  EXPECT_EQ(c.ffn_dim, 1536u);
  EXPECT_EQ(c.vocab, 49152u);
  EXPECT_EQ(c.rope_base, 100000.0f);
  EXPECT_EQ(m->output().data, m->token_embedding().data); // tied embeddings
  EXPECT_GT(m->WeightBytesPerToken(), 50u << 20);
}

TEST(Model, PrefillMatchesTokenByTokenDecode) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const std::vector<int32_t> ids = m->tokenizer().Encode("The quick brown fox jumps over");
  ThreadPool pool(2);
  const size_t vocab = m->config().vocab;
  LlamaSession batched(*m, pool, 16), stepped(*m, pool, 16);
  std::vector<float> a(ids.size() * vocab), b(vocab);
  batched.Forward(ids.data(), ids.size(), a.data(), true);
  // Decode quantises activations to int16 per 32-block (Q4/Q8 integer dots) where prefill
  // runs f32 micro-kernels: the two agree to ~1e-3 of the logit scale and on the top token.
  for (size_t i = 0; i < ids.size(); ++i) {
    stepped.Forward(&ids[i], 1, b.data());
    double max_diff = 0, scale = 0;
    for (size_t j = 0; j < vocab; ++j) {
      max_diff = std::max(max_diff, double(std::abs(a[i * vocab + j] - b[j])));
      scale = std::max(scale, double(std::abs(a[i * vocab + j])));
    }
    EXPECT_LT(max_diff / scale, 2e-3) << "position " << i;
    EXPECT_EQ(ArgMax(&a[i * vocab], vocab), ArgMax(b.data(), vocab)) << "position " << i;
  }
  EXPECT_EQ(batched.position(), ids.size());
  const std::vector<int32_t> too_many(16, ids[0]);
  EXPECT_THROW(batched.Forward(too_many.data(), too_many.size(), b.data()), std::runtime_error);
  const int32_t bad = int32_t(vocab);
  EXPECT_THROW(stepped.Forward(&bad, 1, b.data()), std::out_of_range);
}

// Prompt chunks never leave one token behind: a chunk of one row runs as a decode row.
TEST(PrefillChunk, NeverLeavesOneTokenBehind) {
  EXPECT_EQ(PrefillChunk(0, 128), 0u);
  EXPECT_EQ(PrefillChunk(1, 128), 1u); // a one-token prompt: unavoidable
  EXPECT_EQ(PrefillChunk(2, 128), 2u);
  EXPECT_EQ(PrefillChunk(128, 128), 128u);
  EXPECT_EQ(PrefillChunk(129, 128), 127u); // leaves 2, not 1
  EXPECT_EQ(PrefillChunk(130, 128), 128u);
  EXPECT_EQ(PrefillChunk(1000, 128), 128u);
  EXPECT_EQ(PrefillChunk(4, 3), 2u);
  EXPECT_EQ(PrefillChunk(3, 2), 2u); // max_rows < 3: no split avoids a one-row chunk
  EXPECT_EQ(PrefillChunk(5, 1), 1u);
  // Every prompt of 2..600 tokens, chunks of 3..70: chunks of 2..max_rows rows that add up.
  for (size_t max_rows = 3; max_rows <= 70; ++max_rows)
    for (size_t n = 2; n <= 600; ++n) {
      size_t done = 0;
      while (done < n) {
        const size_t c = PrefillChunk(n - done, max_rows);
        ASSERT_GE(c, 2u) << n << " tokens, max_rows " << max_rows << ", at " << done;
        ASSERT_LE(c, max_rows);
        done += c;
      }
      ASSERT_EQ(done, n);
    }
}

AttentionShape ShapeOf(const LlamaModel &m, size_t capacity) {
  const LlamaConfig &c = m.config();
  return c.Shape(capacity);
}

// A prompt's logits (every position's) through LlamaForward::RunSequence in chunks of at most
// max_rows, into a fresh Attention of `spec`.
std::vector<float> PrefillLogits(const LlamaModel &m, ThreadPool &pool, const AttentionSpec &spec,
                                 const std::vector<int32_t> &prompt, size_t max_rows) {
  auto attn = MakeAttention(spec, ShapeOf(m, prompt.size()));
  LlamaForward fwd(m, pool, max_rows);
  std::vector<float> logits(prompt.size() * m.config().vocab);
  fwd.RunSequence(*attn, 0, prompt.data(), prompt.size(), logits.data(), true, nullptr);
  EXPECT_EQ(attn->stats().decode_steps, 0u) << "a prompt token ran as a decode step";
  return logits;
}

// Prefill gives every position the same logits, bit for bit, whatever the chunk size (as long as
// no chunk has one row, which PrefillChunk sees to): a server may cut prompts as its steps
// allow. A prompt of max_rows + 1 tokens (which used to end in a one-row chunk: the integer
// weight path, and for magicpig a sparse decode step) equals one unchunked run. Dense and
// magicpig (past sink + local + 16 tokens, where a one-row chunk would sample).
TEST(Model, PrefillLogitsDoNotDependOnTheChunkSize) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  ThreadPool pool(2);
  const size_t vocab = m->config().vocab;
  std::vector<int32_t> prompt;
  for (size_t i = 0; i < 257; ++i)
    prompt.push_back(int32_t(100 + (i * 7919) % 20000));
  for (const char *method : {"dense", "magicpig"}) {
    AttentionSpec spec;
    spec.method = *pig::spec::parse_method(method);
    const std::vector<float> whole = PrefillLogits(*m, pool, spec, prompt, 512);
    for (size_t max_rows : {16, 64, 256}) {
      const std::vector<float> chunked = PrefillLogits(*m, pool, spec, prompt, max_rows);
      for (size_t i = 0; i < prompt.size(); ++i) {
        const float *a = &chunked[i * vocab], *b = &whole[i * vocab];
        ASSERT_TRUE(std::equal(a, a + vocab, b))
            << method << ", chunks of " << max_rows << ": position " << i << " differs";
      }
    }
  }
}

// The distribution Sample draws from, derived from its definition: softmax(logits / T), then
// the nucleus (the smallest set of most likely tokens whose probability reaches top_p),
// renormalised. Zero outside the nucleus.
std::vector<double> NucleusDistribution(const std::vector<float> &logits, double T, double top_p) {
  const size_t n = logits.size();
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += p[i] = std::exp(double(logits[i]) / T);
  for (double &x : p)
    x /= sum;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<double> q(n, 0.0);
  double kept = 0;
  for (size_t k = 0; k < n && (k == 0 || kept < top_p); ++k)
    kept += q[order[k]] = p[order[k]];
  for (double &x : q)
    x /= kept;
  return q;
}

// Draws kDraws tokens and compares each token's count with its expectation: |z| < 5 with the
// binomial standard deviation sqrt(N p (1 - p)) for every token of the nucleus (a false alarm
// has probability < 1e-5 for the whole test, and the seed is fixed), and no draw at all outside
// it. With N = 20000 a frequency off by 0.02 at p ~ 0.4 is z ~ 6: uniform sampling inside the
// nucleus, an ignored temperature or a nucleus one token too small or too large all fail.
void ExpectSamplesFollow(const std::vector<float> &logits, float T, float top_p,
                         const std::vector<size_t> &nucleus) {
  constexpr int kDraws = 20000;
  SamplingParams params;
  params.temperature = T;
  params.top_p = top_p;
  params.seed = 42;
  Sampler sampler(params);
  std::vector<int> counts(logits.size());
  for (int i = 0; i < kDraws; ++i)
    ++counts.at(size_t(sampler.Sample(logits.data(), logits.size())));
  const std::vector<double> want = NucleusDistribution(logits, T, top_p);
  std::vector<size_t> in_nucleus;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] > 0)
      in_nucleus.push_back(i);
  ASSERT_EQ(in_nucleus, nucleus) << "the test's own derivation of the nucleus";
  for (size_t i = 0; i < logits.size(); ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the nucleus (T " << T << ", top_p "
                              << top_p << ")";
      continue;
    }
    const double mean = kDraws * want[i], sd = std::sqrt(kDraws * want[i] * (1 - want[i]));
    const double z = (counts[i] - mean) / sd;
    EXPECT_LT(std::abs(z), 5.0) << "token " << i << ": " << counts[i] << " of " << kDraws
                                << " draws, expected " << mean << " +- " << sd << " (T " << T
                                << ", top_p " << top_p << ")";
  }
}

TEST(Sampling, TemperatureAndNucleusFrequencies) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f, 0.0f, 2.0f, 1.5f, -0.5f};
  // T = 0.7: probabilities sorted 0.442 (token 1), 0.383 (2), 0.106 (5), 0.052 (6), ...;
  // cumulative 0.442, 0.825, 0.931: the nucleus of 0.9 is {1, 2, 5}, renormalised to
  // 0.475, 0.412, 0.114. (At T = 1 it would be {1, 2, 5, 6}.)
  ExpectSamplesFollow(logits, 0.7f, 0.9f, {1, 2, 5});
  // T = 1.5, top_p = 1: every token, flattened: 0.306 (token 1) down to 0.021 (token 3).
  ExpectSamplesFollow(logits, 1.5f, 1.0f, {0, 1, 2, 3, 4, 5, 6, 7});
}

TEST(Sampling, GreedySeededAndTinyNucleus) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f, 0.0f};
  EXPECT_EQ(Sampler({}).Sample(logits.data(), logits.size()), 1); // temperature 0: argmax
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler s1(p), s2(p);
  p.seed = 43;
  Sampler other(p);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t a = s1.Sample(logits.data(), logits.size());
    EXPECT_EQ(a, s2.Sample(logits.data(), logits.size())); // same seed, same stream
    differ += a != other.Sample(logits.data(), logits.size());
  }
  EXPECT_GT(differ, 20); // another seed, another stream (P(same token) = 0.44 per draw)
  p.top_p = 0.01f;       // the nucleus is the most likely token alone
  Sampler s3(p);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(s3.Sample(logits.data(), logits.size()), 1);
}

} // namespace
} // namespace pig::runtime
