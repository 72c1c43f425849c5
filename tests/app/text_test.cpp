#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>

#include "pig/app/progress.h"
#include "pig/app/text.h"

namespace {

using namespace pig::app;

TEST(AppText, FormatAndTables) {
  EXPECT_EQ(Format("%.2f x %s", 1.5, "y"), "1.50 x y");
  EXPECT_EQ(Format("%s", std::string(300, 'a').c_str()).size(), 300u); // beyond any small buffer
  EXPECT_EQ(MarkdownRow({"a", "b"}), "| a | b |");
  EXPECT_EQ(MarkdownSeparator(3), "|---|---|---|");
  EXPECT_DOUBLE_EQ(MiB(3 << 20), 3.0);
}

TEST(AppText, WrapBreaksAtSpacesAndKeepsNewlines) {
  EXPECT_EQ(Wrap("aaaa bbbb cc", 6), (std::vector<std::string>{"aaaa", "bbbb", "cc"}));
  EXPECT_EQ(Wrap("ab\ncd", 10), (std::vector<std::string>{"ab", "cd"}));
  EXPECT_EQ(Wrap("abcdefgh", 3), (std::vector<std::string>{"abc", "def", "gh"}));
}

TEST(AppProgress, DurationsAndTheBar) {
  EXPECT_EQ(FormatDuration(42), "42s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(7500), "2h05m");
  EXPECT_EQ(FormatDuration(-1), "?");
  const Progress p("work", 10, 0);
  const std::string line = p.Line(4, "ctx 1024");
  EXPECT_EQ(line.substr(0, 50), "work [############..................]  40% 0s elap") << line;
  EXPECT_NE(line.find("left ctx 1024"), std::string::npos) << line;
  EXPECT_NE(Progress("w", 10, 0).Line(0).find("? left"), std::string::npos); // nothing done yet
}

} // namespace
