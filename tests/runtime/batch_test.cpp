// LlamaBatch on the real model (skipped when it is absent): sequences of different lengths
// decoded together, in batches of 1..64, beside other sequences' prompt chunks, coming and going,
// give the logits of decoding each alone with LlamaSession bit for bit; malformed batches and
// steps throw clear exceptions and change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_util.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"

namespace pig::runtime {
namespace {

using testing::LoadModel;

AttentionShape Shape(const LlamaModel &m, size_t capacity) {
  const LlamaConfig &c = m.config();
  return c.Shape(capacity);
}

std::vector<std::unique_ptr<Attention>> DenseAttentions(const LlamaModel &m, size_t n,
                                                        size_t capacity) {
  std::vector<std::unique_ptr<Attention>> a;
  for (size_t i = 0; i < n; ++i)
    a.push_back(std::make_unique<DenseAttention>(Shape(m, capacity)));
  return a;
}

// Greedy decode of one sequence alone: the tokens it picks and the logits of each step (the
// logits that chose token i are logits[i]; logits[0] come from the prompt).
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Trace DecodeAlone(const LlamaModel &m, ThreadPool &pool, const std::vector<int32_t> &prompt,
                  size_t n_new) {
  const size_t vocab = m.config().vocab;
  LlamaSession session(m, pool, prompt.size() + n_new,
                       std::make_unique<DenseAttention>(Shape(m, prompt.size() + n_new)));
  Trace t;
  std::vector<float> logits(vocab);
  session.Forward(prompt.data(), prompt.size(), logits.data());
  for (size_t i = 0; i < n_new; ++i) {
    t.logits.push_back(logits);
    t.tokens.push_back(ArgMax(logits.data(), vocab));
    if (i + 1 < n_new)
      session.Forward(&t.tokens.back(), 1, logits.data());
  }
  return t;
}

float MaxAbsDiff(const float *a, const float *b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; ++i)
    d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(Batch, DecodeTogetherMatchesDecodingAlone) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab;
  ThreadPool pool(2);
  // Four prompts of different lengths; the last is longer than a prefill chunk, so its prefill
  // runs in two passes.
  std::vector<std::vector<int32_t>> prompts = {
      m->tokenizer().Encode("The capital of France is"),
      m->tokenizer().Encode("def fibonacci(n):\n    "),
      m->tokenizer().Encode("Once upon a time, in a small village by the sea, there lived an old "
                            "fisherman who"),
      {},
  };
  for (size_t i = 0; i < LlamaSession::kChunk + 20; ++i)
    prompts[3].push_back(int32_t(100 + (i * 7919) % 20000));
  const std::vector<size_t> n_new = {12, 9, 6, 10}; // sequences finish at different steps
  const size_t b = prompts.size();

  std::vector<Trace> alone;
  for (size_t s = 0; s < b; ++s)
    alone.push_back(DecodeAlone(*m, pool, prompts[s], n_new[s]));

  std::vector<std::unique_ptr<Attention>> attn;
  for (size_t s = 0; s < b; ++s)
    attn.push_back(std::make_unique<DenseAttention>(Shape(*m, prompts[s].size() + n_new[s])));
  LlamaBatch batch(*m, pool, std::move(attn));
  ASSERT_EQ(batch.size(), b);

  // Decode rows are quantised and multiplied each on its own, exactly as a single-sequence step
  // does, and attention is per sequence: the logits are bit-identical, so the tolerance is 0.
  std::vector<std::vector<int32_t>> got(b);
  std::vector<float> logits(b * vocab);
  for (size_t s = 0; s < b; ++s) {
    batch.Prefill(s, prompts[s].data(), prompts[s].size(), logits.data());
    EXPECT_EQ(MaxAbsDiff(logits.data(), alone[s].logits[0].data(), vocab), 0.0f)
        << "prefill of sequence " << s;
    got[s].push_back(ArgMax(logits.data(), vocab));
    EXPECT_EQ(batch.position(s), prompts[s].size());
  }
  // Steps over the unfinished sequences, in reversed order every other step, and once with a
  // single sequence, so rows meet different neighbours and row counts (4, 3, 2, 1).
  for (size_t step = 0;; ++step) {
    std::vector<size_t> seqs;
    for (size_t s = 0; s < b; ++s) {
      if (got[s].size() < n_new[s])
        seqs.push_back(s);
    }
    if (seqs.empty())
      break;
    if (step % 2)
      std::reverse(seqs.begin(), seqs.end());
    if (step == 3)
      seqs.erase(seqs.begin() + 1, seqs.end());
    std::vector<int32_t> tokens;
    for (size_t s : seqs)
      tokens.push_back(got[s].back());
    batch.Step(tokens.data(), seqs.data(), seqs.size(), logits.data());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const size_t s = seqs[i], k = got[s].size();
      EXPECT_EQ(MaxAbsDiff(&logits[i * vocab], alone[s].logits[k].data(), vocab), 0.0f)
          << "sequence " << s << ", token " << k << ", step of " << seqs.size();
      got[s].push_back(ArgMax(&logits[i * vocab], vocab));
    }
  }
  for (size_t s = 0; s < b; ++s) {
    EXPECT_EQ(got[s], alone[s].tokens) << "sequence " << s;
    EXPECT_EQ(batch.position(s), prompts[s].size() + n_new[s] - 1);
  }
  EXPECT_GT(batch.MemoryBytes(), batch.attention(0).MemoryBytes());

  // A reset sequence decodes from scratch again, its neighbours untouched.
  batch.Reset(1);
  EXPECT_EQ(batch.position(1), 0u);
  batch.Prefill(1, prompts[1].data(), prompts[1].size(), logits.data());
  EXPECT_EQ(MaxAbsDiff(logits.data(), alone[1].logits[0].data(), vocab), 0.0f);
  EXPECT_EQ(batch.position(0), prompts[0].size() + n_new[0] - 1);
}

// Wide steps: B = 1..64 sequences of different lengths, all stepping together, fed the tokens each
// chose alone; every row's logits are bit-identical to decoding alone (the 4-row groups of the
// integer kernel, their tails and the 16-row tiles all meet real activations).
TEST(Batch, WideStepsAreBitIdenticalToDecodingAlone) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab, n_new = 3;
  ThreadPool pool(2);
  const size_t max_b = 64;
  std::vector<std::vector<int32_t>> prompts(max_b);
  std::vector<Trace> alone;
  for (size_t s = 0; s < max_b; ++s) {
    for (size_t i = 0; i < 1 + (s * 7) % 23; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
    alone.push_back(DecodeAlone(*m, pool, prompts[s], n_new));
  }
  for (size_t b : {2u, 5u, 16u, 17u, 64u}) {
    LlamaBatch batch(*m, pool, LlamaBatch::Options{});
    std::vector<size_t> seqs;
    for (size_t s = 0; s < b; ++s) {
      seqs.push_back(batch.Add(std::make_unique<DenseAttention>(Shape(*m, 32))));
      batch.Prefill(seqs.back(), prompts[s].data(), prompts[s].size(), nullptr);
    }
    std::vector<float> logits(b * vocab);
    for (size_t k = 1; k < n_new; ++k) {
      std::vector<int32_t> tokens(b);
      for (size_t s = 0; s < b; ++s)
        tokens[s] = alone[s].tokens[k - 1];
      batch.Step(tokens.data(), seqs.data(), b, logits.data());
      for (size_t s = 0; s < b; ++s) {
        ASSERT_EQ(MaxAbsDiff(&logits[s * vocab], alone[s].logits[k].data(), vocab), 0.0f)
            << "B " << b << ", sequence " << s << ", token " << k;
      }
    }
  }
}

// With the float decode path (LlamaBatchOptions::decode_path) a sequence's logits are the same in
// a batch of any size (its B = 1 run is the reference), and differ from the integer path's by
// rounding only.
TEST(Batch, FloatDecodePathIsBitIdenticalAcrossBatchSizes) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab;
  ThreadPool pool(2);
  const size_t max_b = 17;
  std::vector<std::vector<int32_t>> prompts(max_b);
  for (size_t s = 0; s < max_b; ++s)
    for (size_t i = 0; i < 2 + (s * 5) % 13; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
  // Logits of one decode step of the first b sequences (token 42 after each prompt).
  auto step = [&](size_t b, MatMulPath path) {
    LlamaBatchOptions opts;
    opts.decode_path = path;
    LlamaBatch batch(*m, pool, opts);
    std::vector<size_t> seqs;
    for (size_t s = 0; s < b; ++s) {
      seqs.push_back(batch.Add(std::make_unique<DenseAttention>(Shape(*m, 32))));
      batch.Prefill(seqs.back(), prompts[s].data(), prompts[s].size(), nullptr);
    }
    std::vector<int32_t> tokens(b, 42);
    std::vector<float> logits(b * vocab);
    batch.Step(tokens.data(), seqs.data(), b, logits.data());
    return logits;
  };
  std::vector<std::vector<float>> alone;
  for (size_t s = 0; s < max_b; ++s) {
    // Sequence s alone: a batch holding it as its only sequence.
    LlamaBatchOptions opts;
    opts.decode_path = MatMulPath::kFloat;
    LlamaBatch batch(*m, pool, opts);
    const size_t id = batch.Add(std::make_unique<DenseAttention>(Shape(*m, 32)));
    batch.Prefill(id, prompts[s].data(), prompts[s].size(), nullptr);
    const int32_t t = 42;
    std::vector<float> l(vocab);
    batch.Step(&t, &id, 1, l.data());
    alone.push_back(l);
  }
  for (size_t b : {3u, 17u}) {
    const std::vector<float> f = step(b, MatMulPath::kFloat), i = step(b, MatMulPath::kInteger);
    for (size_t s = 0; s < b; ++s) {
      EXPECT_EQ(MaxAbsDiff(&f[s * vocab], alone[s].data(), vocab), 0.0f) << "B " << b << " " << s;
      float scale = 0;
      for (size_t j = 0; j < vocab; ++j)
        scale = std::max(scale, std::abs(alone[s][j]));
      const float diff = MaxAbsDiff(&i[s * vocab], alone[s].data(), vocab);
      EXPECT_GT(diff, 0.0f) << "the two paths gave the same bits: is the float path taken?";
      EXPECT_LT(diff / scale, 3e-3f) << "B " << b << " " << s;
    }
  }
  LlamaBatchOptions bad;
  bad.decode_path = MatMulPath::kAuto;
  EXPECT_THROW(LlamaBatch(*m, pool, bad), std::invalid_argument);
}

// Mixed steps: decode rows of some sequences and prompt chunks of others in one Run give every
// row the logits of running its span alone; the chunk's sequence then decodes as if prefilled
// alone.
TEST(Batch, MixedStepsMatchRunningEachSpanAlone) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab;
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts(4);
  for (size_t s = 0; s < 4; ++s)
    for (size_t i = 0; i < 5 + 9 * s; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
  // Alone: sequence s prefilled whole, then decoded greedily.
  std::vector<Trace> alone;
  for (size_t s = 0; s < 4; ++s)
    alone.push_back(DecodeAlone(*m, pool, prompts[s], 4));

  LlamaBatch batch(*m, pool, LlamaBatch::Options{});
  for (size_t s = 0; s < 4; ++s)
    ASSERT_EQ(batch.Add(std::make_unique<DenseAttention>(Shape(*m, 64))), s);
  std::vector<float> logits(4 * vocab);
  // Sequences 0 and 1 prefilled alone; 2 and 3 come in while 0 and 1 decode.
  batch.Prefill(0, prompts[0].data(), prompts[0].size(), &logits[0]);
  batch.Prefill(1, prompts[1].data(), prompts[1].size(), &logits[vocab]);
  std::vector<int32_t> next = {ArgMax(&logits[0], vocab), ArgMax(&logits[vocab], vocab)};
  // Step A: decode 0, prompt of 2 whole (with logits), decode 1 (spans in that order).
  {
    std::vector<float> l0(vocab), l1(vocab), l2(vocab);
    const LlamaBatch::Work w[] = {{0, &next[0], 1, l0.data()},
                                  {2, prompts[2].data(), prompts[2].size(), l2.data()},
                                  {1, &next[1], 1, l1.data()}};
    batch.Run(w, 3);
    EXPECT_EQ(MaxAbsDiff(l0.data(), alone[0].logits[1].data(), vocab), 0.0f);
    EXPECT_EQ(MaxAbsDiff(l1.data(), alone[1].logits[1].data(), vocab), 0.0f);
    EXPECT_EQ(MaxAbsDiff(l2.data(), alone[2].logits[0].data(), vocab), 0.0f);
    next = {ArgMax(l0.data(), vocab), ArgMax(l1.data(), vocab), ArgMax(l2.data(), vocab)};
  }
  // Step B: sequence 3's prompt in two chunks, the first without logits, beside decode rows.
  const size_t half = prompts[3].size() / 2;
  {
    std::vector<float> l0(vocab), l2(vocab);
    const LlamaBatch::Work w[] = {{3, prompts[3].data(), half, nullptr},
                                  {2, &next[2], 1, l2.data()},
                                  {0, &next[0], 1, l0.data()}};
    batch.Run(w, 3);
    EXPECT_EQ(MaxAbsDiff(l0.data(), alone[0].logits[2].data(), vocab), 0.0f);
    EXPECT_EQ(MaxAbsDiff(l2.data(), alone[2].logits[1].data(), vocab), 0.0f);
    EXPECT_EQ(batch.position(3), half);
  }
  {
    std::vector<float> l1(vocab), l3(vocab);
    const LlamaBatch::Work w[] = {
        {1, &next[1], 1, l1.data()},
        {3, prompts[3].data() + half, prompts[3].size() - half, l3.data()}};
    batch.Run(w, 2);
    EXPECT_EQ(MaxAbsDiff(l1.data(), alone[1].logits[2].data(), vocab), 0.0f);
    // A prompt in two chunks attends the same keys as in one; the chunk's rows are its own, so
    // the last row's logits equal a chunked prefill alone (RunSequence chunks likewise).
    LlamaSession chunked(*m, pool, 64, std::make_unique<DenseAttention>(Shape(*m, 64)));
    std::vector<float> want(vocab);
    chunked.Forward(prompts[3].data(), half, nullptr);
    chunked.Forward(prompts[3].data() + half, prompts[3].size() - half, want.data());
    EXPECT_EQ(MaxAbsDiff(l3.data(), want.data(), vocab), 0.0f);
    EXPECT_EQ(ArgMax(l3.data(), vocab), alone[3].tokens[0]);
  }
  EXPECT_EQ(batch.position(0), prompts[0].size() + 2);
  EXPECT_EQ(batch.position(3), prompts[3].size());
}

// Slots: sequences come and go at any step; a freed slot is reused; the others decode on, bit for
// bit as alone; the memory budget refuses a sequence that does not fit and changes nothing.
TEST(Batch, AddAndRemoveNeverDisturbTheOthers) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab, n_new = 6;
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts(3);
  std::vector<Trace> alone;
  for (size_t s = 0; s < 3; ++s) {
    for (size_t i = 0; i < 4 + 6 * s; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
    alone.push_back(DecodeAlone(*m, pool, prompts[s], n_new));
  }
  const size_t per_seq = DenseAttention(Shape(*m, 32)).ReservedBytes();
  LlamaBatch batch(*m, pool, LlamaBatch::Options{256, 2 * per_seq});
  // Sequences over the batch's shared KV pool: a freed sequence's blocks go to the next one.
  auto make = [&] {
    return std::make_unique<DenseAttention>(Shape(*m, 32), lsh::DType::bf16,
                                            batch.KvPoolOf(lsh::DType::bf16));
  };
  const size_t a = batch.Add(make());
  const size_t b = batch.Add(make());
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 1u);
  // A third does not fit the budget: refused, with a message naming it; nothing changes.
  const size_t reserved = batch.KvPoolOf(lsh::DType::bf16)->reserved_blocks();
  try {
    batch.Add(make());
    ADD_FAILURE() << "a sequence over the memory budget was accepted";
  } catch (const std::length_error &e) {
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch.KvPoolOf(lsh::DType::bf16)->reserved_blocks(), reserved);
  EXPECT_EQ(batch.Memory(a).kv, 0u); // blocks are taken as positions are stored
  EXPECT_EQ(batch.attention(a).ReservedBytes(), per_seq);
  EXPECT_EQ(batch.Memory(a).index, 0u);

  std::vector<float> logits(vocab);
  std::vector<int32_t> got_a, got_b, got_c;
  batch.Prefill(a, prompts[0].data(), prompts[0].size(), logits.data());
  got_a.push_back(ArgMax(logits.data(), vocab));
  batch.Prefill(b, prompts[1].data(), prompts[1].size(), logits.data());
  got_b.push_back(ArgMax(logits.data(), vocab));
  auto step = [&](std::vector<std::pair<size_t, std::vector<int32_t> *>> live) {
    std::vector<int32_t> tokens;
    std::vector<size_t> seqs;
    for (auto &[seq, got] : live) {
      seqs.push_back(seq);
      tokens.push_back(got->back());
    }
    std::vector<float> rows(live.size() * vocab);
    batch.Step(tokens.data(), seqs.data(), seqs.size(), rows.data());
    for (size_t i = 0; i < live.size(); ++i)
      live[i].second->push_back(ArgMax(&rows[i * vocab], vocab));
  };
  step({{a, &got_a}, {b, &got_b}});
  // Sequence a leaves; its slot (0) goes to a new sequence c, prefilled while b decodes.
  EXPECT_NE(batch.Remove(a), nullptr);
  EXPECT_FALSE(batch.contains(a));
  EXPECT_THROW(batch.position(a), std::out_of_range);
  const size_t c = batch.Add(make());
  EXPECT_EQ(c, 0u);
  EXPECT_EQ(batch.position(c), 0u);
  {
    std::vector<float> lb(vocab), lc(vocab);
    const int32_t tb = got_b.back();
    const LlamaBatch::Work w[] = {{b, &tb, 1, lb.data()},
                                  {c, prompts[2].data(), prompts[2].size(), lc.data()}};
    batch.Run(w, 2);
    got_b.push_back(ArgMax(lb.data(), vocab));
    got_c.push_back(ArgMax(lc.data(), vocab));
  }
  while (got_b.size() < n_new)
    step({{b, &got_b}, {c, &got_c}});
  while (got_c.size() < n_new)
    step({{c, &got_c}});
  EXPECT_EQ(std::vector<int32_t>(got_a.begin(), got_a.end()),
            std::vector<int32_t>(alone[0].tokens.begin(), alone[0].tokens.begin() + 2));
  EXPECT_EQ(got_b, alone[1].tokens);
  EXPECT_EQ(got_c, alone[2].tokens);
  EXPECT_EQ(batch.Memory(b).kv, KvPool::BlockBytesFor(Shape(*m, 0), lsh::DType::bf16));
  batch.Remove(b);
  batch.Remove(c);
  EXPECT_EQ(batch.size(), 0u);
  EXPECT_EQ(batch.slots(), 0u);
  EXPECT_EQ(batch.KvPoolOf(lsh::DType::bf16)->taken_blocks(), 0u); // every block returned
  // a, b and c held one block each, never more than two at once: a's went to c.
  EXPECT_EQ(batch.KvResidentBytes(), 2 * KvPool::BlockBytesFor(Shape(*m, 0), lsh::DType::bf16));
}

// Every method and KV type over the batch's shared pool: two sequences whose prompts are
// prefilled by turns (their blocks interleave in the pool), then decoded together, give the logits
// of decoding each alone over a pool of its own, bit for bit.
TEST(Batch, ScatteredBlocksGiveEveryMethodTheLogitsOfDecodingAlone) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab, n_new = 4, chunk = 40;
  ThreadPool pool(2);
  std::vector<std::vector<int32_t>> prompts(2);
  for (size_t s = 0; s < 2; ++s)
    for (size_t i = 0; i < 150 + 17 * s; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
  struct Case {
    spec::Method method;
    lsh::DType dtype;
  };
  // A few methods on the model (kv_pool_test holds every method and type on synthetic rows).
  for (const Case c :
       {Case{spec::Method::dense, lsh::DType::q8}, Case{spec::Method::magicpig, lsh::DType::bf16},
        Case{spec::Method::topk, lsh::DType::f32},
        Case{spec::Method::lsh_hybrid, lsh::DType::bf16}}) {
    AttentionSpec spec;
    spec.method = c.method;
    spec.kv_dtype = c.dtype;
    spec.local = 16;
    const std::string what = std::string(spec.method_name()) + " " + lsh::to_string(c.dtype);
    const size_t cap = 200;
    // Alone: a session over a pool of its own, prompt in one call, then greedy steps.
    std::vector<Trace> alone(2);
    for (size_t s = 0; s < 2; ++s) {
      LlamaSession session(*m, pool, cap, MakeAttention(spec, Shape(*m, cap)));
      std::vector<float> logits(vocab);
      session.Forward(prompts[s].data(), prompts[s].size(), logits.data());
      for (size_t i = 0; i < n_new; ++i) {
        alone[s].logits.push_back(logits);
        alone[s].tokens.push_back(ArgMax(logits.data(), vocab));
        session.Forward(&alone[s].tokens.back(), 1, logits.data());
      }
    }
    LlamaBatch batch(*m, pool, LlamaBatch::Options{});
    std::vector<size_t> seqs;
    for (size_t s = 0; s < 2; ++s)
      seqs.push_back(batch.Add(MakeAttention(spec, Shape(*m, cap), batch.KvPoolOf(c.dtype))));
    std::vector<std::vector<float>> last(2, std::vector<float>(vocab));
    for (size_t done = 0; done < prompts[1].size(); done += chunk) {
      std::vector<LlamaBatch::Work> w;
      for (size_t s = 0; s < 2; ++s) {
        if (done >= prompts[s].size())
          continue;
        const size_t n = std::min(chunk, prompts[s].size() - done);
        w.push_back({seqs[s], prompts[s].data() + done, n,
                     done + n == prompts[s].size() ? last[s].data() : nullptr});
      }
      batch.Run(w.data(), w.size());
    }
    const std::vector<std::int32_t> &table = batch.attention(seqs[0]).cache().blocks();
    ASSERT_GE(table.size(), 2u);
    EXPECT_NE(table[1], table[0] + 1) << what << ": the test meant the blocks to interleave";
    for (size_t s = 0; s < 2; ++s)
      EXPECT_EQ(MaxAbsDiff(last[s].data(), alone[s].logits[0].data(), vocab), 0.0f) << what;
    std::vector<float> rows(2 * vocab);
    for (size_t k = 1; k < n_new; ++k) {
      const int32_t tokens[] = {alone[0].tokens[k - 1], alone[1].tokens[k - 1]};
      batch.Step(tokens, seqs.data(), 2, rows.data());
      for (size_t s = 0; s < 2; ++s)
        EXPECT_EQ(MaxAbsDiff(&rows[s * vocab], alone[s].logits[k].data(), vocab), 0.0f)
            << what << ", sequence " << s << ", token " << k;
    }
    if (c.method != spec::Method::dense) {
      EXPECT_GT(batch.attention(seqs[0]).stats().sampled, 0.0) << what << ": no sparse step";
    }
  }
}

// One attention call per layer for a whole batch (BatchAttention): B = 3 and 24 sequences of
// five specs (magicpig plain, fitted and per layer: two W configurations hashed in one encode;
// quest, which runs its own Forward; dense over q8), half of them decoding while the other half's
// prompts arrive in chunks in the same steps, give every sequence the logits of decoding alone,
// bit for bit.
TEST(Batch, OneAttentionCallServesMixedMethodsSpansAndWidths) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab, n_new = 4, chunk = 16, max_b = 24;
  ThreadPool pool(2);
  std::vector<AttentionSpec> specs(5);
  for (AttentionSpec &sp : specs) {
    sp.method = spec::Method::magicpig;
    sp.local = 8; // sink + local + 16 = 28: every prompt below is indexed at its first step
    sp.K = 8;
    sp.L = 75;
  }
  specs[1].transform = ParseServedTransform("whiten:a=0.15");
  specs[2].layers.assign(m->config().n_layers, LayerLsh{{10, 150, 2}});
  specs[2].layers[0].dense = true;
  specs[3].method = spec::Method::quest;
  specs[4].method = spec::Method::dense;
  specs[4].kv_dtype = lsh::DType::q8;
  std::vector<std::vector<int32_t>> prompts(max_b);
  std::vector<Trace> alone(max_b);
  for (size_t s = 0; s < max_b; ++s) {
    for (size_t i = 0; i < 40 + (s * 13) % 25; ++i)
      prompts[s].push_back(int32_t(100 + (i * 7919 + s * 104729) % 20000));
    const size_t cap = prompts[s].size() + n_new;
    LlamaSession session(*m, pool, cap, MakeAttention(specs[s % 5], Shape(*m, cap)));
    std::vector<float> logits(vocab);
    session.Forward(prompts[s].data(), prompts[s].size(), logits.data());
    for (size_t i = 0; i < n_new; ++i) {
      alone[s].logits.push_back(logits);
      alone[s].tokens.push_back(ArgMax(logits.data(), vocab));
      session.Forward(&alone[s].tokens.back(), 1, logits.data());
    }
  }
  for (size_t b : {size_t(3), max_b}) {
    LlamaBatch batch(*m, pool, LlamaBatch::Options{});
    std::vector<size_t> seqs, done(b, 0), k(b, 0);
    for (size_t s = 0; s < b; ++s) {
      const AttentionSpec &sp = specs[s % 5];
      seqs.push_back(batch.Add(
          MakeAttention(sp, Shape(*m, prompts[s].size() + n_new), batch.KvPoolOf(sp.kv_dtype))));
    }
    std::vector<std::vector<float>> out(b, std::vector<float>(vocab));
    for (size_t round = 0;; ++round) {
      std::vector<LlamaBatch::Work> w;
      std::vector<size_t> who;
      size_t rows = 0;
      for (size_t s = 0; s < b; ++s) {
        const bool late = s >= b / 2; // the second half's prompts arrive from round 1 on
        if (done[s] < prompts[s].size()) {
          if (late && round == 0)
            continue;
          const size_t rest = prompts[s].size() - done[s];
          // A span of one row is a decode step (sparse), not a prefill chunk: none is left over.
          const size_t n = !late ? rest : rest <= chunk + 1 ? rest : chunk;
          if (rows + n > 200) // LlamaBatch takes 256 rows a step (decode rows too): next round
            continue;
          rows += n;
          const bool last = done[s] + n == prompts[s].size();
          w.push_back({seqs[s], prompts[s].data() + done[s], n, last ? out[s].data() : nullptr});
          done[s] += n;
          if (last)
            who.push_back(s);
        } else if (++k[s] < n_new) {
          w.push_back({seqs[s], &alone[s].tokens[k[s] - 1], 1, out[s].data()});
          who.push_back(s);
        }
      }
      if (w.empty())
        break;
      batch.Run(w.data(), w.size());
      for (size_t s : who) {
        const size_t step = done[s] == prompts[s].size() && k[s] > 0 ? k[s] : 0;
        ASSERT_EQ(MaxAbsDiff(out[s].data(), alone[s].logits[step].data(), vocab), 0.0f)
            << "B " << b << ", sequence " << s << " (" << specs[s % 5].method_name() << "), step "
            << step << ", round " << round;
      }
    }
    for (size_t s = 0; s < b; ++s) {
      if (specs[s % 5].method != spec::Method::dense) {
        EXPECT_GT(batch.attention(seqs[s]).stats().sampled, 0.0) << "B " << b << ", " << s;
      }
    }
  }
}

TEST(Batch, RejectsMalformedBatches) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  ThreadPool pool(2);
  auto make = [&](std::vector<std::unique_ptr<Attention>> attn) {
    return LlamaBatch(*m, pool, std::move(attn)).size();
  };
  EXPECT_THROW(make({}), std::invalid_argument);
  EXPECT_EQ(make(DenseAttentions(*m, 100, 4)), 100u); // not capped at 16 any more
  auto with_null = DenseAttentions(*m, 2, 4);
  with_null[1].reset();
  EXPECT_THROW(make(std::move(with_null)), std::invalid_argument);
  AttentionShape wrong = Shape(*m, 4);
  wrong.n_layers -= 1;
  std::vector<std::unique_ptr<Attention>> mismatched;
  mismatched.push_back(std::make_unique<DenseAttention>(wrong));
  try {
    LlamaBatch batch(*m, pool, std::move(mismatched));
    ADD_FAILURE() << "an Attention of the wrong shape was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("layers"), std::string::npos) << e.what();
  }
}

TEST(Batch, StepErrorsThrowAndChangeNothing) {
  PIG_REQUIRE_MODEL();
  auto m = LoadModel();
  const size_t vocab = m->config().vocab;
  ThreadPool pool(2);
  std::vector<std::unique_ptr<Attention>> attn;
  attn.push_back(std::make_unique<DenseAttention>(Shape(*m, 3)));
  attn.push_back(std::make_unique<DenseAttention>(Shape(*m, 8)));
  LlamaBatch batch(*m, pool, std::move(attn));
  const std::vector<int32_t> prompt = {9690, 2223};
  std::vector<float> logits(2 * vocab);
  batch.Prefill(0, prompt.data(), 2, logits.data());
  batch.Prefill(1, prompt.data(), 2, logits.data());

  const int32_t tok[2] = {prompt[0], prompt[1]};
  const size_t unknown[2] = {0, 2}, twice[2] = {1, 1}, both[2] = {0, 1};
  EXPECT_THROW(batch.Step(tok, unknown, 2, logits.data()), std::out_of_range);
  EXPECT_THROW(batch.Step(tok, twice, 2, logits.data()), std::invalid_argument);
  EXPECT_THROW(batch.Step(tok, both, 0, logits.data()), std::invalid_argument);
  {
    LlamaBatch small(*m, pool, LlamaBatch::Options{2, 0});
    small.Add(std::make_unique<DenseAttention>(Shape(*m, 8)));
    const LlamaBatch::Work three{0, prompt.data(), 3, nullptr}, none{0, prompt.data(), 0, nullptr};
    EXPECT_THROW(small.Run(&three, 1), std::invalid_argument); // 3 rows > max_rows 2
    EXPECT_THROW(small.Run(&none, 1), std::invalid_argument);
    EXPECT_THROW(small.Run(&three, 0), std::invalid_argument);
    EXPECT_EQ(small.position(0), 0u);
  }
  const int32_t bad[2] = {prompt[0], int32_t(vocab)}, negative[2] = {-1, prompt[0]};
  EXPECT_THROW(batch.Step(bad, both, 2, logits.data()), std::out_of_range);
  EXPECT_THROW(batch.Step(negative, both, 2, logits.data()), std::out_of_range);
  EXPECT_THROW(batch.Prefill(2, prompt.data(), 2, logits.data()), std::out_of_range);
  EXPECT_THROW(batch.Prefill(0, bad, 2, logits.data()), std::out_of_range);
  EXPECT_THROW(batch.Prefill(0, prompt.data(), 2, logits.data()), std::runtime_error); // 4 > 3
  EXPECT_THROW(batch.position(5), std::out_of_range);
  EXPECT_EQ(batch.position(0), 2u);
  EXPECT_EQ(batch.position(1), 2u);

  // Sequence 0 fills its last position; then a step naming it fails as a whole (sequence 1,
  // which has room, does not advance either) and says which sequence is full.
  batch.Step(tok, both, 2, logits.data());
  EXPECT_EQ(batch.position(0), 3u);
  EXPECT_EQ(batch.position(1), 3u);
  try {
    batch.Step(tok, both, 2, logits.data());
    ADD_FAILURE() << "a step past a sequence's capacity was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("sequence 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(batch.position(0), 3u);
  EXPECT_EQ(batch.position(1), 3u);
  const size_t only1 = 1;
  batch.Step(tok, &only1, 1, logits.data());
  EXPECT_EQ(batch.position(1), 4u);
}

} // namespace
} // namespace pig::runtime
