// The engine on the real model: continuous batching changes no request's tokens (every request
// equals its solo run with LlamaSession, bit for bit, while others join and leave, prefill in small
// chunks beside decode rows and build their LSH indexes in slices), admission by memory, the
// bounded queue, cancellation that frees memory, and draining.
#include "pig/serve/engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "model_fixture.h"
#include "pig/spec/method.h"

namespace pig::serve {
namespace {

using runtime::AttentionSpec;
using namespace std::chrono_literals;

class EngineTest : public testing::ModelTest {
protected:
  // A prompt of about n tokens, different for each `which`.
  static std::vector<int32_t> Prompt(size_t n, int which) {
    std::string text;
    const char *words[] = {"river ", "stone ", "the ",   "quiet ",
                           "seven ", "of ",    "north ", "lamp "};
    for (size_t i = 0; text.size() < 5 * n; ++i)
      text += words[(i * (which + 3) + i / 7) % 8];
    std::vector<int32_t> ids = model_->tokenizer().Encode(text);
    ids.resize(std::min(ids.size(), n));
    return ids;
  }

  // What LlamaSession gives alone: sampled tokens until max_tokens or the end of generation.
  static std::vector<int32_t> Solo(const GenerationParams &p) {
    const runtime::LlamaConfig &c = model_->config();
    runtime::ThreadPool pool(2);
    const size_t cap = p.prompt.size() + p.max_tokens;
    runtime::LlamaSession s(*model_, pool, cap, runtime::MakeAttention(p.attention, c.Shape(cap)));
    std::vector<float> logits(c.vocab);
    s.Forward(p.prompt.data(), p.prompt.size(), logits.data());
    runtime::Sampler sampler(p.sampling);
    std::vector<int32_t> out;
    for (;;) {
      const int32_t t = sampler.Sample(logits.data(), c.vocab);
      out.push_back(t);
      if (model_->tokenizer().IsEndOfGeneration(t) || out.size() >= p.max_tokens)
        return out;
      s.Forward(&t, 1, logits.data());
    }
  }

  static std::vector<int32_t> Collect(Request &r, Finish *finish = nullptr) {
    std::vector<int32_t> out;
    for (;;) {
      RequestUpdate u = r.Take(100ms);
      out.insert(out.end(), u.tokens.begin(), u.tokens.end());
      if (u.finish != Finish::kNone) {
        if (finish)
          *finish = u.finish;
        return out;
      }
    }
  }

  static EngineOptions Small() {
    EngineOptions o;
    o.threads = 2;
    o.max_running = 3;
    o.prefill_chunk = 24; // many chunks beside decode rows
    o.prefill_chunk_alone = 40;
    o.prefill_share = 0.05; // small chunks, the index build in many slices
    return o;
  }
};

TEST_F(EngineTest, ConcurrentRequestsGetTheTokensOfTheirSoloRuns) {
  AttentionSpec dense;
  dense.method = spec::Method::dense;
  AttentionSpec lsh;
  lsh.method = spec::Method::magicpig;
  lsh.local = 16;
  lsh.K = 8;
  lsh.L = 40;
  AttentionSpec q8 = lsh;
  q8.kv_dtype = runtime::lsh::DType::q8;
  AttentionSpec topk = dense;
  topk.method = spec::Method::topk;
  topk.local = 16;
  topk.budget = 0.2;
  const AttentionSpec specs[] = {lsh, dense, q8, lsh, topk, lsh};
  std::vector<GenerationParams> ps;
  for (int i = 0; i < 6; ++i) {
    GenerationParams p;
    p.prompt = Prompt(90 + 37 * size_t(i), i);
    p.max_tokens = 6 + size_t(i) * 3;
    p.attention = specs[i];
    p.ignore_eos = false;
    if (i == 3) { // a seeded sampled one
      p.sampling.temperature = 0.8f;
      p.sampling.seed = 11;
    }
    ps.push_back(p);
  }
  std::vector<std::vector<int32_t>> want;
  for (const GenerationParams &p : ps)
    want.push_back(Solo(p));
  Engine engine(*model_, Small());
  std::vector<std::shared_ptr<Request>> reqs;
  for (size_t i = 0; i < ps.size(); ++i) {
    reqs.push_back(engine.Submit(ps[i]));
    if (i == 2)
      std::this_thread::sleep_for(50ms); // later arrivals join a running batch
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Finish f = Finish::kNone;
    EXPECT_EQ(Collect(*reqs[i], &f), want[i]) << "request " << i;
    EXPECT_TRUE(f == Finish::kStop || f == Finish::kLength);
    const RequestSummary s = reqs[i]->summary();
    EXPECT_EQ(s.completion_tokens, want[i].size());
    EXPECT_EQ(s.prompt_tokens, ps[i].prompt.size());
    if (ps[i].attention.method == spec::Method::magicpig) {
      EXPECT_GT(s.stats.indexed, 0) << "request " << i << " never sampled";
    }
  }
  const ServerMetrics m = engine.Metrics();
  EXPECT_EQ(m.memory_reserved, 0u);
  EXPECT_EQ(m.methods.at("magicpig").running, 0u);
  EXPECT_EQ(m.methods.at("magicpig").finished.size() > 0, true);
}

// Prefix caching: a document asked about twice is prefilled once; the second request attaches
// the cached blocks (usage's cached_tokens), gets its solo run's tokens all the same, and once
// every request ended (one of them cancelled mid-decode) the running requests hold no KV and the
// cache holds the document's blocks, once.
TEST_F(EngineTest, ADocumentAskedTwiceIsPrefilledOnce) {
  AttentionSpec lsh;
  lsh.method = spec::Method::magicpig;
  lsh.local = 16;
  lsh.K = 8;
  lsh.L = 40;
  AttentionSpec dense;
  dense.method = spec::Method::dense;
  const std::vector<int32_t> doc = Prompt(300, 5);
  for (const AttentionSpec &spec : {lsh, dense}) {
    const std::string what = spec.method_name();
    std::vector<GenerationParams> ps(3);
    for (int i = 0; i < 3; ++i) {
      ps[size_t(i)].prompt = doc;
      const std::vector<int32_t> q = Prompt(10 + size_t(i), i);
      ps[size_t(i)].prompt.insert(ps[size_t(i)].prompt.end(), q.begin(), q.end());
      ps[size_t(i)].max_tokens = i == 2 ? 200 : 8;
      ps[size_t(i)].ignore_eos = true;
      ps[size_t(i)].attention = spec;
    }
    const std::vector<int32_t> want = Solo(ps[1]);
    size_t held[2] = {0, 0}; // the third's reservation while it runs, without / with the cache
    for (const bool cached : {true, false}) {
      EngineOptions o = Small();
      o.prefix_cache = cached;
      Engine engine(*model_, o);
      Collect(*engine.Submit(ps[0]));
      const std::shared_ptr<Request> second = engine.Submit(ps[1]);
      EXPECT_EQ(Collect(*second), want) << what << (cached ? ", cached" : "");
      EXPECT_EQ(second->summary().cached_tokens, cached ? 256u : 0u) << what; // 4 blocks of 64
      // A third asks too and is cancelled after its first tokens.
      const std::shared_ptr<Request> third = engine.Submit(ps[2]);
      while (third->Take(100ms).tokens.empty()) {
      }
      held[cached] = engine.Metrics().memory_reserved;
      engine.Cancel(third);
      Finish f = Finish::kNone;
      Collect(*third, &f);
      EXPECT_EQ(f, Finish::kCancelled) << what;
      const ServerMetrics m = engine.Metrics();
      EXPECT_EQ(m.memory_reserved, 0u) << what;
      EXPECT_EQ(m.methods.at(what).kv_bytes, 0u) << what;
      EXPECT_EQ(m.prefix_lookups, cached ? 3u : 0u) << what;
      EXPECT_EQ(m.prefix_hits, cached ? 2u : 0u) << what;
      EXPECT_EQ(m.prefix_hit_tokens, cached ? 512u : 0u) << what;
      // The document's 4 full blocks (each question ends inside the fifth: not cached).
      EXPECT_EQ(m.prefix_bytes > 0, cached) << what;
    }
    // The blocks the third attached count in the cache's bytes, not again in its reservation.
    const runtime::LlamaConfig &c = model_->config();
    const runtime::AttentionShape shape = c.Shape(0);
    EXPECT_EQ(held[0] - held[1], 4 * runtime::KvPool::BlockBytesFor(shape, spec.kv_dtype)) << what;
  }
}

// Requests on one document that arrive together: each looks the cache up when its own prefill
// starts, after the one before it has prefilled (and cached) the document, so the document is
// prefilled once; every request still gets its solo tokens.
TEST_F(EngineTest, RequestsOnOneDocumentArrivingTogetherPrefillItOnce) {
  AttentionSpec lsh;
  lsh.method = spec::Method::magicpig;
  lsh.local = 16;
  lsh.K = 8;
  lsh.L = 40;
  const std::vector<int32_t> doc = Prompt(300, 6);
  std::vector<GenerationParams> ps(3);
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].prompt = doc;
    const std::vector<int32_t> q = Prompt(9 + i, int(i));
    ps[i].prompt.insert(ps[i].prompt.end(), q.begin(), q.end());
    ps[i].max_tokens = 6;
    ps[i].ignore_eos = true;
    ps[i].attention = lsh;
    want.push_back(Solo(ps[i]));
  }
  Engine engine(*model_, Small());
  std::vector<std::shared_ptr<Request>> reqs;
  for (const GenerationParams &p : ps)
    reqs.push_back(engine.Submit(p));
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(Collect(*reqs[i]), want[i]) << "request " << i;
    EXPECT_EQ(reqs[i]->summary().cached_tokens, i == 0 ? 0u : 256u) << "request " << i;
  }
  EXPECT_EQ(engine.Metrics().prefix_hit_tokens, 512u);
}

TEST_F(EngineTest, StopStringsEndTheTextAndTheRequest) {
  GenerationParams p;
  p.prompt = model_->tokenizer().Encode("Count: one, two, three, four, five, six,");
  p.max_tokens = 24;
  const std::vector<int32_t> full = Solo(p);
  std::string text;
  for (int32_t t : full)
    if (!model_->tokenizer().IsControl(t))
      text += model_->tokenizer().Decode(t);
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(3, 2); // somewhere inside the answer
  p.stop = {stop};
  Engine engine(*model_, Small());
  auto r = engine.Submit(p);
  std::string got;
  Finish f = Finish::kNone;
  for (;;) {
    RequestUpdate u = r->Take(100ms);
    got += u.text;
    if (u.finish != Finish::kNone) {
      f = u.finish;
      break;
    }
  }
  EXPECT_EQ(f, Finish::kStop);
  EXPECT_EQ(got, text.substr(0, text.find(stop)));
  EXPECT_LT(r->summary().completion_tokens, full.size());
}

TEST_F(EngineTest, AdmissionRefusesWhatCanNeverFitAndQueuesTheRest) {
  EngineOptions o = Small();
  o.max_running = 1;
  o.max_queue = 1;
  GenerationParams p;
  p.prompt = Prompt(40, 1);
  p.max_tokens = 400;
  Engine sizing(*model_, o);
  const size_t one = sizing.ReservedBytes(p);
  o.memory_budget = one + one / 2; // one request fits, two do not
  Engine engine(*model_, o);
  GenerationParams huge = p;
  huge.max_tokens = 8000;
  try {
    engine.Submit(huge);
    ADD_FAILURE() << "a request over the whole budget was queued";
  } catch (const ApiError &e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
  }
  GenerationParams past = p;
  past.max_tokens = 9000;
  EXPECT_THROW(engine.Submit(past), ApiError); // past the context
  GenerationParams empty = p;
  empty.prompt.clear();
  EXPECT_THROW(engine.Submit(empty), ApiError);
  GenerationParams bad_token = p;
  bad_token.prompt[0] = 1 << 30;
  EXPECT_THROW(engine.Submit(bad_token), ApiError);

  auto a = engine.Submit(p); // runs
  auto running = [&](uint64_t n, uint64_t waiting) {
    for (int i = 0; i < 500; ++i) {
      const ServerMetrics m = engine.Metrics();
      const auto it = m.methods.find("dense");
      if (it != m.methods.end() && it->second.running == n && it->second.waiting == waiting)
        return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  ASSERT_TRUE(running(1, 0));
  auto b = engine.Submit(p); // waits: one slot
  ASSERT_TRUE(running(1, 1));
  try {
    engine.Submit(p);
    ADD_FAILURE() << "the queue of one took a second request";
  } catch (const ApiError &e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_EQ(e.retry_after, 1);
  }
  a->Cancel();
  Finish fa = Finish::kNone;
  Collect(*a, &fa);
  EXPECT_EQ(fa, Finish::kCancelled);
  // b now runs; cancel it once it has produced a token, and every byte is given back.
  for (;;) {
    RequestUpdate u = b->Take(100ms);
    if (!u.tokens.empty())
      break;
  }
  b->Cancel();
  Finish fb = Finish::kNone;
  Collect(*b, &fb);
  EXPECT_EQ(fb, Finish::kCancelled);
  const ServerMetrics m = engine.Metrics();
  EXPECT_EQ(m.memory_reserved, 0u);
  EXPECT_EQ(m.methods.at("dense").running, 0u);
  EXPECT_EQ(m.methods.at("dense").waiting, 0u);
  EXPECT_EQ(m.methods.at("dense").kv_bytes, 0u);
  EXPECT_EQ(m.methods.at("dense").finished.at("cancelled"), 2u);
  EXPECT_EQ(m.rejected.at("queue_full"), 1u);
}

TEST_F(EngineTest, DrainFinishesWithinTheGraceOrCancels) {
  EngineOptions o = Small();
  GenerationParams quick;
  quick.prompt = Prompt(30, 2);
  quick.max_tokens = 3;
  GenerationParams slow = quick;
  slow.max_tokens = 4000;
  slow.ignore_eos = true;
  Engine engine(*model_, o);
  auto q = engine.Submit(quick);
  auto s = engine.Submit(slow);
  engine.Drain(2000ms); // the quick one finishes; the slow one is cancelled at the deadline
  Finish fq = Finish::kNone, fs = Finish::kNone;
  Collect(*q, &fq);
  Collect(*s, &fs);
  EXPECT_TRUE(fq == Finish::kLength || fq == Finish::kStop);
  EXPECT_EQ(fs, Finish::kCancelled);
  try {
    engine.Submit(quick);
    ADD_FAILURE() << "a draining engine took a request";
  } catch (const ApiError &e) {
    EXPECT_EQ(e.status(), 503);
  }
}

} // namespace
} // namespace pig::serve
