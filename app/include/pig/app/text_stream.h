// The text a client sees of a request's generated tokens: token bytes joined, shown as soon as they
// can no longer change. Two things hold bytes back: an incomplete UTF-8 character at the end (a
// token may end inside one), and a suffix that could still grow into a stop string. When a stop
// string completes, the text before it is the last shown and the rest (the stop string included)
// is dropped, as OpenAI's servers do.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pig::app {

class TextStream {
public:
  /// Empty stop strings are ignored.
  explicit TextStream(std::vector<std::string> stops = {});

  /// Appends one token's bytes; returns the text that may be shown now (possibly empty). After a
  /// stop string completes, stopped() is true and every later Push returns "".
  std::string Push(std::string_view bytes);
  /// The end of generation: returns what was held back (an incomplete UTF-8 character is shown as
  /// it is; the JSON writer replaces invalid bytes by U+FFFD). "" after a stop.
  std::string Finish();

  bool stopped() const { return stopped_; }
  /// Bytes shown so far (the text's offset of the next piece: completions' text_offset).
  size_t shown() const { return shown_; }

private:
  std::vector<std::string> stops_;
  std::string pending_; // received, not yet shown
  size_t shown_ = 0;
  bool stopped_ = false;
};

/// Bytes at the end of `s` that start a UTF-8 character not yet complete (0..3).
size_t IncompleteUtf8Tail(std::string_view s);

} // namespace pig::app
