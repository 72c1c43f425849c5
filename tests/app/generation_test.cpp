// pig::app::Generation, the end of a generation that pig-run, pig-run --batch, pig-serve's engine,
// Session.generate and pig-eval's tasks share, on a fake model: a tiny SentencePiece-style
// tokenizer (with byte tokens, so one character can span two tokens) and a forward pass that plays
// a script of next tokens. Each test runs the loop the callers run: Next, show, stop or forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pig/app/generation.h"

namespace {

using pig::app::Generation;
using pig::app::GenerationOptions;
using pig::app::StopReason;

// Ids: 0 <eos>, 1 "a", 2 "b", 3 "\n", 4 "User", 5 ":", 6 <0xC3>, 7 <0xA9> ("é" is C3 A9),
// 8 <ctl> (a control token), 9 "c".
constexpr int32_t kEos = 0, kA = 1, kB = 2, kNl = 3, kUser = 4, kColon = 5, kC3 = 6, kA9 = 7,
                  kCtl = 8, kC = 9;
constexpr size_t kVocab = 10;

const pig::runtime::Tokenizer &Tok() {
  static const pig::runtime::Tokenizer tok = [] {
    pig::runtime::TokenizerData d;
    d.model = "llama";
    d.tokens = {"<eos>", "a", "b", "\n", "User", ":", "<0xC3>", "<0xA9>", "<ctl>", "c"};
    d.token_types = {3, 1, 1, 1, 1, 1, 6, 6, 3, 1};
    d.scores.assign(d.tokens.size(), 0.0f);
    d.eos_id = kEos;
    return pig::runtime::Tokenizer(d);
  }();
  return tok;
}

std::vector<float> OneHot(int32_t token) {
  std::vector<float> l(kVocab, 0.0f);
  l[size_t(token)] = 10.0f;
  return l;
}

struct Played {
  std::vector<int32_t> tokens;    // every token taken
  std::vector<std::string> shown; // the text of each, then Finish's
  std::vector<int32_t> fed;       // what the fake model ran
  StopReason stop = StopReason::kNone;
  std::string Text() const {
    std::string s;
    for (const std::string &p : shown)
      s += p;
    return s;
  }
};

// Greedy over a model whose i-th pass (the prompt's is pass 0) makes script[i] the next token.
Played Play(const std::vector<int32_t> &script, GenerationOptions o) {
  Generation gen(Tok(), std::move(o));
  Played r;
  std::vector<float> logits = OneHot(script[0]);
  while (!gen.done()) {
    const Generation::Token t = gen.Next(logits.data(), logits.size());
    r.tokens.push_back(t.id);
    r.shown.push_back(t.text);
    if (gen.done())
      break;
    r.fed.push_back(t.id);
    logits = OneHot(script[std::min(r.fed.size(), script.size() - 1)]);
  }
  r.shown.push_back(gen.Finish());
  r.stop = gen.stop();
  return r;
}

GenerationOptions Limits(size_t max_tokens, std::vector<std::string> stop = {}) {
  GenerationOptions o;
  o.max_tokens = max_tokens;
  o.stop = std::move(stop);
  return o;
}

TEST(Generation, EndOfGenerationStopsAndShowsNothing) {
  const Played r = Play({kA, kB, kEos, kC}, Limits(10));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kB, kEos})); // the end token is taken
  EXPECT_EQ(r.shown, (std::vector<std::string>{"a", "b", "", ""}));
  EXPECT_EQ(r.fed, (std::vector<int32_t>{kA, kB})); // but never run
  EXPECT_EQ(r.stop, StopReason::kEndOfGeneration);
}

TEST(Generation, IgnoreEosGoesOnToTheLimit) {
  GenerationOptions o = Limits(4);
  o.ignore_eos = true;
  const Played r = Play({kA, kEos, kB}, o);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kEos, kB, kB}));
  EXPECT_EQ(r.Text(), "abb"); // a control token's text is never shown
  EXPECT_EQ(r.stop, StopReason::kMaxTokens);
}

TEST(Generation, ControlTokensCountButShowNothing) {
  const Played r = Play({kCtl, kA}, Limits(3));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kCtl, kA, kA}));
  EXPECT_EQ(r.shown, (std::vector<std::string>{"", "a", "a", ""}));
  EXPECT_EQ(r.stop, StopReason::kMaxTokens);
}

// The stop string "\nUser:" comes in three tokens: its start is held back until it completes, and
// then it is dropped with everything after it.
TEST(Generation, StopStringSplitOverTokens) {
  const Played r = Play({kA, kNl, kUser, kColon, kB}, Limits(10, {"\nUser:"}));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kNl, kUser, kColon}));
  EXPECT_EQ(r.shown, (std::vector<std::string>{"a", "", "", "", ""}));
  EXPECT_EQ(r.fed, (std::vector<int32_t>{kA, kNl, kUser}));
  EXPECT_EQ(r.stop, StopReason::kStopString);
}

// What was held back as a stop string's possible start is shown once it cannot be one.
TEST(Generation, HeldBackTextThatDoesNotStopIsShown) {
  const Played r = Play({kA, kNl, kUser, kB}, Limits(5, {"\nUser:"}));
  EXPECT_EQ(r.shown, (std::vector<std::string>{"a", "", "", "\nUserb", "b", ""}));
  EXPECT_EQ(r.stop, StopReason::kMaxTokens);
}

TEST(Generation, StopStringAtTheVeryStart) {
  const Played r = Play({kUser, kColon, kA}, Limits(10, {"User:"}));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kUser, kColon}));
  EXPECT_EQ(r.Text(), "");
  EXPECT_EQ(r.stop, StopReason::kStopString);
  // Inside the very first token.
  const Played one = Play({kUser, kA}, Limits(10, {"Us"}));
  EXPECT_EQ(one.tokens, (std::vector<int32_t>{kUser}));
  EXPECT_TRUE(one.fed.empty());
  EXPECT_EQ(one.Text(), "");
  EXPECT_EQ(one.stop, StopReason::kStopString);
}

TEST(Generation, MaxTokensFlushesWhatWasHeldBack) {
  const Played r = Play({kA, kB, kNl, kC}, Limits(3, {"\nUser:"}));
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{kA, kB, kNl}));
  EXPECT_EQ(r.shown, (std::vector<std::string>{"a", "b", "", "\n"}));
  EXPECT_EQ(r.fed, (std::vector<int32_t>{kA, kB})); // the last token is never run
  EXPECT_EQ(r.stop, StopReason::kMaxTokens);
}

TEST(Generation, ZeroMaxTokensIsDoneAtOnce) {
  Generation gen(Tok(), Limits(0));
  EXPECT_TRUE(gen.done());
  EXPECT_EQ(gen.stop(), StopReason::kMaxTokens);
  EXPECT_EQ(gen.generated(), 0u);
}

// "é" is two byte tokens: nothing is shown until its last byte came.
TEST(Generation, MultiByteCharacterSplitOverTokens) {
  const Played r = Play({kA, kC3, kA9, kB}, Limits(4));
  EXPECT_EQ(r.shown, (std::vector<std::string>{"a", "", "\xC3\xA9", "b", ""}));
  // Cut after its first byte: the byte comes out at the end, as it is.
  const Played cut = Play({kA, kC3, kA9}, Limits(2));
  EXPECT_EQ(cut.shown, (std::vector<std::string>{"a", "", "\xC3"}));
}

TEST(Generation, GreedyTakesTheLargestLogitFirstOnTies) {
  Generation gen(Tok(), Limits(2));
  std::vector<float> l(kVocab, 0.0f);
  l[size_t(kB)] = 3.0f;
  l[size_t(kC)] = 3.0f;
  EXPECT_EQ(gen.Next(l.data(), kVocab).id, kB);
  l[size_t(kC)] = 3.5f;
  EXPECT_EQ(gen.Next(l.data(), kVocab).id, kC);
}

// Every token but the end of generation equally likely: the seed decides the sequence, and the
// draws past the answer's end (Sample) go on with the same random stream.
TEST(Generation, SeededSamplingRepeats) {
  std::vector<float> flat(kVocab, 1.0f);
  flat[size_t(kEos)] = -1e9f;
  const auto draw = [&](uint64_t seed, size_t answer, size_t past) {
    GenerationOptions o = Limits(answer);
    o.sampling.temperature = 1.0f;
    o.sampling.seed = seed;
    Generation gen(Tok(), o);
    std::vector<int32_t> ids;
    while (!gen.done())
      ids.push_back(gen.Next(flat.data(), kVocab).id);
    for (size_t i = 0; i < past; ++i)
      ids.push_back(gen.Sample(flat.data(), kVocab));
    return ids;
  };
  const std::vector<int32_t> a = draw(7, 24, 0);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(draw(7, 24, 0), a);
  EXPECT_NE(draw(8, 24, 0), a); // 9^-24 to be equal by chance
  EXPECT_EQ(draw(7, 10, 14), a);
  EXPECT_NE(std::count(a.begin(), a.end(), a[0]), 24); // it samples, not argmax
}

} // namespace
