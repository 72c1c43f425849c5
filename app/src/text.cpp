#include "pig/app/text.h"

#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "pig/spec/files.h"

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

std::string NormalizeText(std::string_view raw) {
  std::string out, para;
  auto flush = [&]() {
    if (para.empty())
      return;
    if (!out.empty())
      out += "\n\n";
    out += para;
    para.clear();
  };
  std::size_t start = 0;
  while (start <= raw.size()) {
    std::size_t end = raw.find('\n', start);
    if (end == std::string_view::npos)
      end = raw.size();
    const std::string_view line = raw.substr(start, end - start);
    bool blank = true;
    for (char c : line) {
      if (c == ' ' || c == '\t' || c == '\r') {
        if (!para.empty() && para.back() != ' ')
          para.push_back(' ');
      } else {
        if (blank && !para.empty() && para.back() != ' ')
          para.push_back(' '); // the line break inside a paragraph is a space
        para.push_back(c);
        blank = false;
      }
    }
    if (!para.empty() && para.back() == ' ')
      para.pop_back();
    if (blank)
      flush();
    start = end + 1;
  }
  flush();
  return out;
}

std::string ReadTextFile(const std::string &path) {
  std::string data;
  if (path.size() > 3 && path.ends_with(".gz")) {
    // gzip is part of every Debian system (Essential: yes); no zlib dependency for one file.
    const std::string cmd = "gzip -dc '" + path + "' 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE *)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe)
      throw std::runtime_error("cannot run gzip for " + path);
    char buf[1 << 16];
    std::size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, pipe.get())) > 0)
      data.append(buf, got);
  } else {
    try {
      data = spec::ReadFile(path);
    } catch (const std::runtime_error &) { // empty: the message below
    }
  }
  if (data.empty())
    throw std::runtime_error("cannot read text " + path +
                             " (for the default, install the Debian package " +
                             kDefaultTextPackage + ")");
  return data;
}

} // namespace pig::app
