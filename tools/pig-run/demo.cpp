#include "demo.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace pig::run {
namespace {

// Cities the 135M model names reliably once it has read them (all one or two BPE tokens); the
// question gives no list, so a guess is unlikely to hit the planted one.
constexpr std::array<const char *, 12> kCities = {
    "Lisbon", "Oslo",    "Nairobi",   "Montreal",  "Kyoto",    "Valparaiso",
    "Dublin", "Tallinn", "Reykjavik", "Marrakesh", "Helsinki", "Auckland"};

// Byte offsets where `sep` starts, each the start of a break the fact can be planted at.
std::vector<size_t> Breaks(const std::string &text, const std::string &sep) {
  std::vector<size_t> at;
  for (size_t p = text.find(sep); p != std::string::npos; p = text.find(sep, p + sep.size()))
    at.push_back(p);
  return at;
}

} // namespace

DemoPrompt MakeDemoPrompt(const DemoOptions &o) {
  std::ifstream in(o.text_file, std::ios::binary);
  if (!in)
    throw std::runtime_error("--demo-text " + o.text_file + ": cannot be read");
  std::string text(o.max_bytes, '\0');
  in.read(text.data(), std::streamsize(o.max_bytes));
  text.resize(size_t(in.gcount()));
  if (text.find('\0') != std::string::npos)
    throw std::runtime_error("--demo-text " + o.text_file + ": not text (it contains a NUL byte)");
  if (!in.eof() && text.size() == o.max_bytes) {
    // Cut below the limit at a paragraph break, else a line break, else before a UTF-8
    // continuation byte.
    size_t cut = text.rfind("\n\n");
    if (cut == std::string::npos || cut < text.size() / 2)
      cut = text.rfind('\n');
    if (cut == std::string::npos || cut < text.size() / 2) {
      cut = text.size();
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
        --cut;
    }
    text.resize(cut);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::runtime_error("--demo-text " + o.text_file + ": no text in its first " +
                             std::to_string(o.max_bytes) + " bytes");

  // Breaks in the text's first 90 %: the fact must stand well before the local window of exact
  // attention at the end of the prompt, or no sampling would be needed to answer.
  const std::string sep(text.find("\n\n") != std::string::npos ? 2 : 1, '\n');
  std::vector<size_t> at = Breaks(text, sep);
  std::erase_if(at, [&](size_t p) { return p > text.size() * 9 / 10; });
  if (at.empty())
    at.push_back(0); // one paragraph: the fact goes first
  std::mt19937_64 rng(o.seed);
  const std::string city = kCities[rng() % kCities.size()];
  const size_t where = at[rng() % at.size()];

  DemoPrompt d;
  d.expected = city;
  d.text_bytes = text.size();
  d.depth = double(where) / double(text.size());
  std::string planted = text.substr(0, where);
  if (where > 0)
    planted.append(sep);
  planted.append("The author of this text lives in ").append(city).append(".");
  if (where == 0)
    planted.append(sep);
  planted.append(text, where, std::string::npos);
  text = std::move(planted);
  d.prompt = "Read this text, then answer the question after it.\n\n" + text +
             "\n\nQuestion: In which city does the author of this text live?";
  return d;
}

bool AnswerContains(const std::string &answer, const std::string &expected) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return s;
  };
  return !expected.empty() && lower(answer).find(lower(expected)) != std::string::npos;
}

} // namespace pig::run
