// The main job's prompt (pig-run --demo): a fact planted in real text, a question whose answer
// is checkable. One seeded choice of (fact, depth); the same seed gives the same prompt on every
// machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pig::run {

struct DemoOptions {
  std::string text_file = "/usr/share/common-licenses/GPL-3"; // Debian's base-files
  size_t max_bytes = 12000; // of the text (cut at a paragraph break below it)
  uint64_t seed = 1;        // chooses the city and the paragraph break it is planted at
};

struct DemoPrompt {
  std::string prompt;   // the user's message (pig-run applies the chat template)
  std::string expected; // the answer: an answer is correct when it contains this
  double depth = 0;     // where the fact stands, as a fraction of the text's bytes
  size_t text_bytes = 0;
};

// Reads the first max_bytes of the text (cut at the last paragraph break, else line break,
// before the limit, never inside a UTF-8 sequence) and plants "The author of this text lives in
// <city>." at one of its paragraph breaks (line breaks when it has none). Throws
// std::runtime_error naming the file and the problem when it cannot be read, is empty, or is
// not text (a NUL byte).
DemoPrompt MakeDemoPrompt(const DemoOptions &o);

// True when `answer` contains `expected`, ignoring ASCII case.
bool AnswerContains(const std::string &answer, const std::string &expected);

} // namespace pig::run
