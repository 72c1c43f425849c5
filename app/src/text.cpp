#include "pig/app/text.h"

#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pig::app {

std::string Format(const char *format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0)
    std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

std::string MarkdownRow(const std::vector<std::string> &cells) {
  std::string r = "|";
  for (const std::string &cell : cells)
    r += " " + cell + " |";
  return r;
}

std::string MarkdownSeparator(std::size_t columns) {
  std::string sep = "|";
  for (std::size_t i = 0; i < columns; ++i)
    sep += "---|";
  return sep;
}

std::vector<std::string> Wrap(const std::string &text, std::size_t width) {
  std::vector<std::string> lines(1);
  for (char ch : text) {
    if (ch == '\n') {
      lines.emplace_back();
      continue;
    }
    if (lines.back().size() >= width) {
      const std::size_t sp = lines.back().rfind(' ');
      std::string rest;
      if (sp != std::string::npos && sp > width / 2) {
        rest = lines.back().substr(sp + 1);
        lines.back().resize(sp);
      }
      lines.push_back(rest);
    }
    lines.back() += ch == '\t' ? ' ' : ch;
  }
  return lines;
}

std::string DescribePoint(const std::string &source, const tune::OperatingPoint &p) {
  return Format("%s: layers %s (predicted attention error %.3f, cost2 %.1f %%%s%s)", source.c_str(),
                p.layers_str().c_str(), p.error, 100.0 * p.cost2,
                p.criterion.empty() ? "" : "; criterion ", p.criterion.c_str());
}

} // namespace pig::app
