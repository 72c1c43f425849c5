#include "pig/app/text_stream.h"

#include <gtest/gtest.h>

#include <random>

namespace pig::app {
namespace {

// Pushes pieces, returns what was shown (joined) and checks that the shown text only grows.
std::string Feed(TextStream &ts, const std::vector<std::string> &pieces, bool finish = true) {
  std::string shown;
  for (const std::string &p : pieces)
    shown += ts.Push(p);
  if (finish)
    shown += ts.Finish();
  EXPECT_EQ(ts.shown(), shown.size());
  return shown;
}

TEST(TextStream, WithoutStopsEverythingIsShownAtOnce) {
  TextStream ts;
  EXPECT_EQ(ts.Push("Hello"), "Hello");
  EXPECT_EQ(ts.Push(" world"), " world");
  EXPECT_EQ(ts.Finish(), "");
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, AStopStringSpanningTokensEndsTheTextBeforeIt) {
  TextStream ts({"\n\nUser:"});
  EXPECT_EQ(ts.Push("The answer is 4."), "The answer is 4.");
  EXPECT_EQ(ts.Push("\n"), "");   // could start the stop string: held back
  EXPECT_EQ(ts.Push("\nUs"), ""); // still could
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.Push("er: next"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.Push("more"), "");
  EXPECT_EQ(ts.Finish(), "");
  EXPECT_EQ(ts.shown(), std::string("The answer is 4.").size());
}

TEST(TextStream, HeldBackTextThatDoesNotStopIsShownLater) {
  TextStream ts({"STOP"});
  EXPECT_EQ(ts.Push("a ST"), "a ");
  EXPECT_EQ(ts.Push("OP"), ""); // completes the stop string
  EXPECT_TRUE(ts.stopped());
  TextStream t2({"STOP"});
  EXPECT_EQ(t2.Push("a ST"), "a ");
  EXPECT_EQ(t2.Push("ART"), "START");
  EXPECT_EQ(t2.Push("S"), "");
  EXPECT_EQ(t2.Finish(), "S"); // the end of generation shows what was held back
  EXPECT_FALSE(t2.stopped());
}

TEST(TextStream, TheEarliestOfSeveralStopsWins) {
  TextStream ts({"world", "lo w"});
  EXPECT_EQ(Feed(ts, {"hello world"}), "hel");
  EXPECT_TRUE(ts.stopped());
  TextStream t2({"", "x"}); // an empty stop string is ignored
  EXPECT_EQ(Feed(t2, {"abc"}), "abc");
  EXPECT_FALSE(t2.stopped());
}

TEST(TextStream, AStopInsideOneTokenCutsThatToken) {
  TextStream ts({"."});
  EXPECT_EQ(Feed(ts, {"Paris", ". It is"}), "Paris");
}

TEST(TextStream, IncompleteUtf8IsHeldUntilItsLastByte) {
  const std::string euro = "\xE2\x82\xAC"; // U+20AC, three bytes
  TextStream ts;
  EXPECT_EQ(ts.Push("5 " + euro.substr(0, 1)), "5 ");
  EXPECT_EQ(ts.Push(euro.substr(1, 1)), "");
  EXPECT_EQ(ts.Push(euro.substr(2)), euro);
  EXPECT_EQ(IncompleteUtf8Tail("ab\xF0\x9F\x98"), 3u); // 4-byte character missing one
  EXPECT_EQ(IncompleteUtf8Tail("ab\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\x80\x80"), 0u); // stray continuation bytes: nothing to wait for
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  TextStream t2;
  EXPECT_EQ(t2.Push("x\xC3"), "x");
  EXPECT_EQ(t2.Finish(), "\xC3"); // invalid at the end: shown as it is (JSON replaces it)
}

// Against a direct oracle of the streaming semantics (vLLM's too): after each token, the first stop
// string wholly inside the text so far ends it, at the earliest start among those found then; for
// random texts over a small alphabet cut into random tokens (many near-matches and overlaps).
TEST(TextStream, RandomSplitsMatchCuttingTheWholeText) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int len = int(rng() % 30);
    for (int i = 0; i < len; ++i)
      text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    for (int s = int(rng() % 3); s > 0; --s) {
      std::string stop;
      for (int i = 1 + int(rng() % 4); i > 0; --i)
        stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    size_t cut = text.size(), upto = 0;
    for (const std::string &p : pieces) {
      upto += p.size();
      const std::string sofar = text.substr(0, upto);
      for (const std::string &st : stops)
        cut = std::min(cut, sofar.find(st) == std::string::npos ? text.size() : sofar.find(st));
      if (cut < text.size())
        break;
    }
    TextStream ts(stops);
    std::string shown;
    for (const std::string &p : pieces) {
      shown += ts.Push(p);
      ASSERT_EQ(text.compare(0, shown.size(), shown), 0) << "shown text is not a prefix";
    }
    shown += ts.Finish();
    std::string why = "text '" + text + "', stops";
    for (const std::string &st : stops)
      why += " '" + st + "'";
    why += ", pieces";
    for (const std::string &p : pieces)
      why += " '" + p + "'";
    ASSERT_EQ(shown, text.substr(0, cut)) << why;
    ASSERT_EQ(ts.stopped(), cut < text.size());
  }
}

} // namespace
} // namespace pig::app
