// Small text helpers of the tools (files: pig/spec/files.h): numbers, markdown tables, wrapped
// columns, and the description of a tuned operating point.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "pig/tune/point.h"

namespace pig::app {

/// Reflows a plain-text document (the Debian FAQ: hard-wrapped, indented) into paragraphs of
/// single-spaced prose: lines of a paragraph are joined, runs of blanks collapse to one space,
/// paragraphs are separated by one blank line. Keeps the words and their order.
std::string NormalizeText(std::string_view raw);

/// Reads a text file; a name ending in ".gz" is decompressed with gzip -dc. Throws
/// std::runtime_error when it cannot be read.
std::string ReadTextFile(const std::string &path);

/// The default long text (perplexity, attention error, long contexts): the Debian FAQ in English
/// (Debian package debian-faq).
inline constexpr const char *kDefaultTextPath = "/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz";
inline constexpr const char *kDefaultTextPackage = "debian-faq";

/// printf into a std::string.
[[gnu::format(printf, 1, 2)]] std::string Format(const char *format, ...);

/// Bytes as MiB (2^20).
inline double MiB(std::size_t bytes) { return double(bytes) / 1048576.0; }

/// "| a | b |" and "|---|---|" (n columns): a markdown table's row and separator.
std::string MarkdownRow(const std::vector<std::string> &cells);
std::string MarkdownSeparator(std::size_t columns);

/// Splits text into lines of at most `width` characters (at spaces where possible; newlines
/// kept, tabs as spaces).
std::vector<std::string> Wrap(const std::string &text, std::size_t width);

/// "SOURCE: layers 0:dense 1-14:K=8 L=75 t=2 ... (predicted attention error 0.089, cost2 9.5 %;
/// criterion max-error 0.1)": what a tool prints about the point of --tuning.
std::string DescribePoint(const std::string &source, const tune::OperatingPoint &p);

} // namespace pig::app
