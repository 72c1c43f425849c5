// pig::app::Decode on a fake model: a tiny tokenizer and a forward step that plays a script of
// next tokens. The answer stops at the end-of-generation token or at max_new; with rate_steps the
// forward passes go on (timed, not kept) until that many ran; the first step's time is apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "pig/app/generate.h"

namespace {

using pig::app::Decode;
using pig::app::DecodeResult;
using pig::app::GenerateOptions;

// Ids: 0 <eos> (end of generation), 1 "a", 2 "b", 3 "c", 4 <ctl> (a control token).
constexpr int32_t kEos = 0, kA = 1, kB = 2, kC = 3, kCtl = 4;
constexpr size_t kVocab = 5;

pig::runtime::Tokenizer FakeTokenizer() {
  pig::runtime::TokenizerData d;
  d.tokens = {"<eos>", "a", "b", "c", "<ctl>"};
  d.token_types = {3, 1, 1, 1, 3};
  d.eos_id = kEos;
  return pig::runtime::Tokenizer(d);
}

// Logits that make `token` the greedy choice.
std::vector<float> OneHot(int32_t token) {
  std::vector<float> l(kVocab, 0.0f);
  l[size_t(token)] = 10.0f;
  return l;
}

// A model whose i-th forward pass makes script[i] (the last entry once past the end) the next
// token; it records the tokens it is fed.
struct FakeModel {
  explicit FakeModel(std::vector<int32_t> s) : script(std::move(s)) {}
  std::vector<int32_t> script;
  std::vector<int32_t> fed;
  double sleep_first_s = 0, sleep_rest_s = 0;
  pig::app::ForwardStep Step() {
    return [this](int32_t token, float *logits) {
      const double s = fed.empty() ? sleep_first_s : sleep_rest_s;
      if (s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
      const size_t i = fed.size();
      fed.push_back(token);
      const std::vector<float> l = OneHot(script[std::min(i, script.size() - 1)]);
      std::copy(l.begin(), l.end(), logits);
    };
  }
};

GenerateOptions Greedy(long max_new, size_t rate_steps = 0) {
  GenerateOptions o;
  o.max_new = max_new;
  o.rate_steps = rate_steps;
  return o;
}

TEST(Decode, StopsAtMaxNew) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB, kC, kA, kB, kC});
  std::vector<std::string> pieces;
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(3),
                                [&](const std::string &p) { pieces.push_back(p); });
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kB, kC}));
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b", "c"}));
  // The last sampled token needs no forward pass.
  EXPECT_EQ(r.steps, 2u);
  EXPECT_EQ(m.fed, (std::vector<int32_t>{kA, kB}));
}

TEST(Decode, StopsAtEndOfGeneration) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB, kEos, kC});
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(10));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kB, kEos})); // the end token is kept
  EXPECT_EQ(r.text, "ab");                                   // but not shown
  EXPECT_EQ(r.steps, 2u);
  EXPECT_EQ(m.fed, (std::vector<int32_t>{kA, kB}));
}

TEST(Decode, ControlTokensAreKeptNotShown) {
  const auto tok = FakeTokenizer();
  FakeModel m({kCtl, kB});
  std::vector<std::string> pieces;
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(3),
                                [&](const std::string &p) { pieces.push_back(p); });
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kCtl, kB}));
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b"}));
}

// --rate-steps: the answer stops at max_new, the forward passes go on to rate_steps; what they
// sample past the answer is fed back, neither kept nor shown.
TEST(Decode, RateStepsGoOnPastTheAnswer) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB, kC});
  std::vector<std::string> pieces;
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(2, 10),
                                [&](const std::string &p) { pieces.push_back(p); });
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kB}));
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(pieces.size(), 2u);
  EXPECT_EQ(r.steps, 10u);
  ASSERT_EQ(m.fed.size(), 10u);
  EXPECT_EQ(m.fed[0], kA);
  EXPECT_EQ(m.fed[1], kB);
  EXPECT_EQ(m.fed[2], kC);
}

// Past the end of generation too (a short answer's rate would rest on few steps).
TEST(Decode, RateStepsGoOnPastTheEndOfGeneration) {
  const auto tok = FakeTokenizer();
  FakeModel m({kEos, kB});
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(24, 6));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kEos}));
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.steps, 6u);
}

// More steps of the answer than rate_steps: the answer decides.
TEST(Decode, AnswerLongerThanRateSteps) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB});
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(8, 3));
  EXPECT_EQ(r.tokens.size(), 8u);
  EXPECT_EQ(r.steps, 7u);
}

TEST(Decode, NothingAsked) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB});
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(0));
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.steps, 0u);
  EXPECT_TRUE(m.fed.empty());
  EXPECT_EQ(r.TokensPerSecond(), 0.0);
  // max_new 0 with rate_steps: only the timed steps, no answer.
  FakeModel m2({kB});
  const DecodeResult r2 = Decode(m2.Step(), tok, OneHot(kA), Greedy(0, 4));
  EXPECT_TRUE(r2.tokens.empty());
  EXPECT_TRUE(r2.text.empty());
  EXPECT_EQ(r2.steps, 4u);
}

// The first step (which builds the LSH index) is timed apart from the others, which make the rate.
TEST(Decode, FirstStepTimedApart) {
  const auto tok = FakeTokenizer();
  FakeModel m({kB});
  m.sleep_first_s = 0.2;
  m.sleep_rest_s = 0.005;
  const DecodeResult r = Decode(m.Step(), tok, OneHot(kA), Greedy(2, 4));
  ASSERT_EQ(r.steps, 4u);
  EXPECT_GE(r.first_s, 0.2);
  EXPECT_GE(r.rest_s, 3 * 0.005);
  EXPECT_LT(r.rest_s, 0.2); // the first step is not in it
  EXPECT_NEAR(r.TokensPerSecond(), 3.0 / r.rest_s, 1e-9);
}

// Seeded sampling: the same seed gives the same tokens.
TEST(Decode, SeededSamplingRepeats) {
  const auto tok = FakeTokenizer();
  GenerateOptions o = Greedy(6);
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 7;
  // Every token but the end of generation equally likely, at every step.
  std::vector<float> s0(kVocab, 1.0f);
  s0[size_t(kEos)] = -1e9f;
  const auto flat = [&s0](int32_t, float *l) { std::copy(s0.begin(), s0.end(), l); };
  const DecodeResult a = Decode(flat, tok, s0, o), b = Decode(flat, tok, s0, o);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 6u);
}

TEST(StepsNeeded, AnswerOrRateSteps) {
  EXPECT_EQ(pig::app::StepsNeeded(Greedy(24, 48)), 49u);
  EXPECT_EQ(pig::app::StepsNeeded(Greedy(64, 0)), 64u);
  EXPECT_EQ(pig::app::StepsNeeded(Greedy(-5, 0)), 1u);
  EXPECT_EQ(pig::app::StepsNeeded(Greedy(10, 9)), 10u);
}

} // namespace
