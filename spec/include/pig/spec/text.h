// Building messages by appending: GCC 12 reports a false -Wrestrict (an error under -Werror) on
// `"literal" + std::string` at -O3 in some inlining contexts; cat("a", s, "b") never does.
#pragma once

#include <string>
#include <string_view>

namespace pig::spec {

/// The concatenation of its arguments (anything std::string::append takes one of).
template <typename... A> std::string cat(const A &...a) {
  std::string s;
  (s.append(a), ...);
  return s;
}

} // namespace pig::spec
