#include "pig/app/text_stream.h"

#include <algorithm>

namespace pig::app {

size_t IncompleteUtf8Tail(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte; the character is incomplete when
  // the lead byte announces more bytes than follow it.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80)
      continue; // a continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return need > back ? back : 0;
  }
  return 0; // only continuation bytes (invalid UTF-8): nothing to wait for
}

TextStream::TextStream(std::vector<std::string> stops) {
  for (std::string &s : stops)
    if (!s.empty())
      stops_.push_back(std::move(s));
}

std::string TextStream::Push(std::string_view bytes) {
  if (stopped_)
    return {};
  pending_.append(bytes);
  // A stop string can only start in the pending bytes: any earlier start would have been held
  // back as a possible prefix. The earliest match wins.
  size_t stop_at = std::string::npos;
  for (const std::string &s : stops_)
    stop_at = std::min(stop_at, pending_.find(s));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, stop_at);
    pending_.clear();
    shown_ += out.size();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string, and an incomplete
  // UTF-8 character.
  size_t hold = IncompleteUtf8Tail(pending_);
  for (const std::string &s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, out.size());
  shown_ += out.size();
  return out;
}

std::string TextStream::Finish() {
  if (stopped_)
    return {};
  std::string out;
  out.swap(pending_);
  shown_ += out.size();
  return out;
}

} // namespace pig::app
