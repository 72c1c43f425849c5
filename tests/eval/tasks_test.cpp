#include "pig/eval/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace pig::eval {
namespace {

std::size_t Count(const std::string &text, const std::string &needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++n;
  return n;
}

TEST(Needle, OneNeedleAtTheAskedDepthAndTheAnswerIsItsNumber) {
  const TaskInstance t = MakeNeedle(100, 0.5, 7);
  ASSERT_EQ(t.expected.size(), 1u);
  EXPECT_EQ(t.expected[0].size(), 7u);
  const std::string sentence = "The special magic number is " + t.expected[0] + ".";
  EXPECT_EQ(Count(t.prompt, sentence), 1u);
  // Depth 0.5 of 100 filler sentences: 50 before the needle.
  const std::string before = t.prompt.substr(0, t.prompt.find(sentence));
  std::size_t filler = 0;
  for (const char *f : {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                        "Here we go.", "There and back again."})
    filler += Count(before, f);
  EXPECT_EQ(filler, 50u);
  EXPECT_EQ(ScoreAnswer(" " + t.expected[0] + ".", t.expected), 1.0);
}

TEST(Needle, SeedsAreReproducibleAndDistinct) {
  EXPECT_EQ(MakeNeedle(40, 0.3, 1).prompt, MakeNeedle(40, 0.3, 1).prompt);
  EXPECT_NE(MakeNeedle(40, 0.3, 1).expected, MakeNeedle(40, 0.3, 2).expected);
  // Depth 0 and 1: first and last sentence of the haystack.
  EXPECT_NE(MakeNeedle(10, 0.0, 3).prompt.find("afterwards.\nThe special magic number"),
            std::string::npos);
  EXPECT_NE(MakeNeedle(10, 1.0, 3).prompt.find(". \nWhat is the special"), std::string::npos);
}

TEST(MultiKeyNeedle, EveryKeyOnceAndTheAnswerIsTheAskedKeysNumber) {
  for (std::uint64_t seed : {1, 2, 3, 4}) {
    const TaskInstance t = MakeMultiKeyNeedle(120, 4, seed);
    EXPECT_EQ(t.name, "multikey");
    ASSERT_EQ(t.expected.size(), 1u);
    EXPECT_EQ(Count(t.prompt, "One of the special magic numbers for "), 4u);
    // The asked word is named in the question and its needle carries the expected number.
    const std::string q = "What is the special magic number for ";
    const std::size_t at = t.prompt.find(q);
    ASSERT_NE(at, std::string::npos);
    const std::string word =
        t.prompt.substr(at + q.size(), t.prompt.find(' ', at + q.size()) - (at + q.size()));
    EXPECT_EQ(Count(t.prompt,
                    "One of the special magic numbers for " + word + " is: " + t.expected[0] + "."),
              1u);
    EXPECT_NE(t.answer_prefix.find(word), std::string::npos);
    // The four numbers differ: the distractors cannot score.
    std::set<std::string> numbers;
    for (std::size_t p = t.prompt.find(" is: "); p != std::string::npos;
         p = t.prompt.find(" is: ", p + 1))
      numbers.insert(t.prompt.substr(p + 5, 7));
    EXPECT_EQ(numbers.size(), 4u);
    EXPECT_EQ(ScoreAnswer(" " + t.expected[0] + ".", t.expected), 1.0);
  }
  EXPECT_EQ(MakeMultiKeyNeedle(60, 4, 9).prompt, MakeMultiKeyNeedle(60, 4, 9).prompt);
  EXPECT_NE(MakeMultiKeyNeedle(60, 4, 9).prompt, MakeMultiKeyNeedle(60, 4, 10).prompt);
  EXPECT_THROW(MakeMultiKeyNeedle(60, 0, 1), std::invalid_argument);
}

TEST(VariableTracking, TheChainIsInOrderBesideADistractorChain) {
  for (std::uint64_t seed : {1, 2, 3, 4}) {
    const TaskInstance t = MakeVariableTracking(150, 4, seed);
    EXPECT_EQ(t.name, "vt");
    ASSERT_EQ(t.expected.size(), 5u);
    // The question's value starts the chain: VAR X0 = value, then VAR Xh = VAR X(h-1), in
    // order of appearance.
    const std::string q = "assigned the value ";
    const std::size_t at = t.prompt.find(q);
    ASSERT_NE(at, std::string::npos);
    const std::string value = t.prompt.substr(at + q.size(), 5);
    std::size_t last = t.prompt.find("VAR " + t.expected[0] + " = " + value + ".");
    ASSERT_NE(last, std::string::npos);
    for (std::size_t h = 1; h < 5; ++h) {
      const std::size_t p =
          t.prompt.find("VAR " + t.expected[h] + " = VAR " + t.expected[h - 1] + ".");
      ASSERT_NE(p, std::string::npos) << "hop " << h;
      EXPECT_GT(p, last) << "hop " << h;
      last = p;
    }
    // Ten assignments in all, the chain and a distractor chain of another value: per chain one
    // "VAR X = value." and four "VAR Y = VAR X.", 9 "VAR " each.
    EXPECT_EQ(Count(t.prompt, "VAR "), 2u * (1 + 2 * 4));
    EXPECT_EQ(Count(t.prompt, " = " + value + "."), 1u);
    std::string answer;
    for (const std::string &n : t.expected)
      answer += " " + n + ",";
    EXPECT_EQ(ScoreAnswer(answer, t.expected), 1.0);
    EXPECT_EQ(ScoreAnswer(" " + t.expected[0] + ", " + t.expected[1], t.expected), 0.4);
  }
  EXPECT_EQ(MakeVariableTracking(60, 4, 9).prompt, MakeVariableTracking(60, 4, 9).prompt);
  EXPECT_THROW(MakeVariableTracking(60, 0, 1), std::invalid_argument);
}

TEST(Counting, TheMarkerAppearsTheExpectedNumberOfTimes) {
  std::set<std::string> counts;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const TaskInstance t = MakeCounting(100, 2, 9, seed);
    EXPECT_EQ(t.name, "count");
    ASSERT_EQ(t.expected.size(), 1u);
    const int n = std::stoi(t.expected[0]);
    EXPECT_GE(n, 2);
    EXPECT_LE(n, 9);
    counts.insert(t.expected[0]);
    // The marker is quoted once in the question, and appears n times in the haystack before it.
    const std::string q = "How many times does the sentence \"";
    const std::size_t at = t.prompt.find(q);
    ASSERT_NE(at, std::string::npos);
    const std::string marker =
        t.prompt.substr(at + q.size(), t.prompt.find('"', at + q.size()) - (at + q.size()));
    EXPECT_EQ(marker.rfind("The red fox jumped over the ", 0), 0u) << marker;
    EXPECT_EQ(Count(t.prompt.substr(0, at), marker), std::size_t(n)) << "seed " << seed;
    EXPECT_EQ(ScoreFirstNumber(" " + t.expected[0] + " times.", t.expected[0]), 1.0);
  }
  // 40 seeds over 8 values: every count is drawn (a count stuck at one value would fail).
  EXPECT_EQ(counts.size(), 8u);
  EXPECT_EQ(MakeCounting(60, 2, 9, 9).prompt, MakeCounting(60, 2, 9, 9).prompt);
  EXPECT_NE(MakeCounting(60, 2, 9, 9).prompt, MakeCounting(60, 2, 9, 10).prompt);
  EXPECT_EQ(MakeCounting(60, 5, 5, 3).expected, std::vector<std::string>{"5"});
  EXPECT_THROW(MakeCounting(60, 0, 3, 1), std::invalid_argument);
  EXPECT_THROW(MakeCounting(60, 4, 3, 1), std::invalid_argument);
  EXPECT_THROW(MakeCounting(60, 2, 100, 1), std::invalid_argument);
}

TEST(Counting, OnlyTheFirstNumberScores) {
  EXPECT_EQ(ScoreFirstNumber(" 7.", "7"), 1.0);
  EXPECT_EQ(ScoreFirstNumber("It appears 7 times", "7"), 1.0);
  EXPECT_EQ(ScoreFirstNumber(" 3, 5, 7", "7"), 0.0); // listing numbers does not score
  EXPECT_EQ(ScoreFirstNumber(" 17", "7"), 0.0);      // the whole run of digits is compared
  EXPECT_EQ(ScoreFirstNumber(" seven", "7"), 0.0);
  EXPECT_EQ(ScoreFirstNumber("", "7"), 0.0);
}

// A seed names the same instance in every build: the generators' splitmix64 (pig::spec's) and
// their use of it are pinned by answers the generators gave before they shared spec's copy.
TEST(Tasks, SeedsNameTheSameInstancesAsBefore) {
  EXPECT_EQ(MakeNeedle(50, 0.5, 1).expected, (std::vector<std::string>{"6822465"}));
  EXPECT_EQ(MakeCommonWords(60, 3, 10, 3, 2).expected,
            (std::vector<std::string>{"engine", "falcon", "orange"}));
  EXPECT_EQ(MakeFrequentWords(300, 2.0, 3).expected,
            (std::vector<std::string>{"dbhi", "mgwkaj", "dwc"}));
}

TEST(CommonWords, CommonWordsAppearExactlyCommonFreqTimesAndOthersFewer) {
  const TaskInstance t = MakeCommonWords(120, 3, 12, 2, 11);
  ASSERT_EQ(t.expected.size(), 3u);
  const std::size_t list_begin = t.prompt.find("\n1. ");
  const std::size_t list_end = t.prompt.find("Question:");
  ASSERT_NE(list_begin, std::string::npos);
  const auto counts = WordCounts(t.prompt.substr(list_begin, list_end - list_begin));
  std::map<std::string, std::size_t> c(counts.begin(), counts.end());
  std::size_t total = 0;
  for (const auto &[w, n] : c)
    total += n;
  EXPECT_EQ(total, 120u);
  for (const std::string &w : t.expected)
    EXPECT_EQ(c[w], 12u) << w;
  for (const auto &[w, n] : c) {
    if (std::find(t.expected.begin(), t.expected.end(), w) == t.expected.end()) {
      EXPECT_LE(n, 2u) << w;
    }
  }
  EXPECT_NE(t.prompt.find("120. "), std::string::npos);
  EXPECT_EQ(t.prompt.find("121. "), std::string::npos);
}

TEST(CommonWords, RejectsImpossibleSizes) {
  EXPECT_THROW(MakeCommonWords(10, 3, 12, 2, 1), std::invalid_argument);
  EXPECT_THROW(MakeCommonWords(100, 3, 2, 2, 1), std::invalid_argument);
  EXPECT_THROW(MakeCommonWords(5000, 3, 4, 1, 1), std::invalid_argument); // word pool too small
}

TEST(FrequentWords, ExpectedAreTheThreeMostFrequentWithoutTies) {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const TaskInstance t = MakeFrequentWords(300, 2.0, seed);
    const std::size_t b = t.prompt.find(".\n") + 2, e = t.prompt.find("\nQuestion:");
    auto counts = WordCounts(t.prompt.substr(b, e - b));
    std::sort(counts.begin(), counts.end(),
              [](const auto &x, const auto &y) { return x.second > y.second; });
    std::size_t total = 0;
    for (const auto &[w, n] : counts)
      total += n;
    EXPECT_EQ(total, 300u);
    ASSERT_GE(counts.size(), 4u);
    EXPECT_GT(counts[2].second, counts[3].second);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(t.expected[std::size_t(i)], counts[std::size_t(i)].first);
  }
}

TEST(Score, CountsEachExpectedWordOnceCaseAndPunctuationInsensitive) {
  const std::vector<std::string> want = {"apple", "river", "tiger"};
  EXPECT_DOUBLE_EQ(ScoreAnswer("1. Apple, 2. RIVER; apple apple", want), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(ScoreAnswer("tiger river apple", want), 1.0);
  EXPECT_DOUBLE_EQ(ScoreAnswer("", want), 0.0);
  EXPECT_DOUBLE_EQ(ScoreAnswer("pineapple rivers", want), 0.0); // whole words only
  EXPECT_DOUBLE_EQ(ScoreAnswer("anything", {}), 1.0);
  EXPECT_DOUBLE_EQ(ScoreAnswer("is 1234567.", {"1234567"}), 1.0);
  EXPECT_DOUBLE_EQ(ScoreAnswer("is 12345678.", {"1234567"}), 0.0);
}

TEST(Words, SplitsOnNonAlphanumerics) {
  EXPECT_EQ(AnswerWords("Hello, World! 42x"), (std::vector<std::string>{"hello", "world", "42x"}));
  EXPECT_EQ(AnswerWords("caf\xc3\xa9 ok"), (std::vector<std::string>{"caf", "ok"}));
}

} // namespace
} // namespace pig::eval
