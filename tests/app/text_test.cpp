#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

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

TEST(AppText, NormalizeJoinsWrappedLinesAndKeepsParagraphs) {
  const std::string raw = "  Title\n\n    First line of a\n    paragraph   here.\n\n\n  * item\n"
                          "    continued\n";
  EXPECT_EQ(pig::app::NormalizeText(raw),
            "Title\n\nFirst line of a paragraph here.\n\n* item continued");
  EXPECT_EQ(pig::app::NormalizeText(""), "");
}

TEST(AppText, ReadTextFileReadsGzipAndNamesTheFileItCannotRead) {
  const std::string dir = ::testing::TempDir();
  const std::string plain = dir + "pig_text_test.txt", gz = plain + ".gz";
  {
    std::FILE *f = std::fopen(plain.c_str(), "w");
    ASSERT_TRUE(f);
    std::fputs("first line\nsecond line\n", f);
    std::fclose(f);
  }
  ASSERT_EQ(std::system(("gzip -kf '" + plain + "'").c_str()), 0);
  EXPECT_EQ(ReadTextFile(plain), "first line\nsecond line\n");
  EXPECT_EQ(ReadTextFile(gz), "first line\nsecond line\n");
  try {
    ReadTextFile(dir + "pig_text_test_missing.txt.gz");
    FAIL() << "a missing file was read";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("pig_text_test_missing.txt.gz"), std::string::npos)
        << e.what();
  }
  std::remove(plain.c_str());
  std::remove(gz.c_str());
}

} // namespace
