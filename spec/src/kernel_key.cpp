#include "pig/spec/kernel_key.h"

#include <charconv>
#include <vector>

#include "pig/spec/lsh_params.h"

namespace pig::spec {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t p = 0;
  while (p < text.size()) {
    if (is_space(text[p])) {
      ++p;
      continue;
    }
    std::size_t e = p;
    while (e < text.size() && !is_space(text[e]))
      ++e;
    words.push_back(text.substr(p, e - p));
    p = e;
  }
  return words;
}

// `word` is "<prefix><decimal digits>" with a value that fits an int.
bool read_field(std::string_view word, std::string_view prefix, int &out) {
  if (word.substr(0, prefix.size()) != prefix)
    return false;
  const std::string_view v = word.substr(prefix.size());
  if (v.empty() || v.front() < '0' || v.front() > '9')
    return false;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), out);
  return r.ec == std::errc() && r.ptr == v.data() + v.size();
}

// GCC 12 reports a false -Wrestrict on "literal" + std::string at -O3: append instead.
std::string quoted(std::string_view x) {
  std::string s(1, '\'');
  s.append(x);
  s.push_back('\'');
  return s;
}

} // namespace

std::string KernelKey::str() const {
  std::string s = "K=";
  s.append(std::to_string(K)).append(" L=").append(std::to_string(L));
  s.append(" d=").append(std::to_string(d)).append(" ").append(name(dtype));
  return s;
}

std::string KernelKey::str_with_schedule() const {
  std::string s = str();
  s.append(" ").append(schedule.str());
  return s;
}

std::string KernelKey::symbol() const {
  std::string s = "k";
  s.append(std::to_string(K)).append("_l").append(std::to_string(L));
  s.append("_d").append(std::to_string(d)).append("_").append(name(dtype));
  return s;
}

std::string KernelKey::validate() const {
  std::string s;
  if (K < 1 || K > kMaxK)
    return s.append("K=")
        .append(std::to_string(K))
        .append(" is outside [1, ")
        .append(std::to_string(kMaxK))
        .append("] (uint16 codes)");
  if (L < 1 || L > kMaxL)
    return s.append("L=")
        .append(std::to_string(L))
        .append(" is outside [1, ")
        .append(std::to_string(kMaxL))
        .append("]");
  if (d < 2)
    return s.append("head dim ").append(std::to_string(d)).append(" is not even");
  if (std::string e = dtype_unsupported(dtype, std::size_t(d)); !e.empty())
    return e;
  return schedule.validate();
}

std::optional<KernelKey> KernelKey::parse(std::string_view text, std::string *error) {
  auto fail = [&](std::string m) -> std::optional<KernelKey> {
    if (error)
      *error = std::move(m);
    return std::nullopt;
  };
  const std::vector<std::string_view> w = words_of(text);
  KernelKey key;
  std::string m = quoted(text);
  m.append(" is not a kernel key 'K=.. L=.. d=.. ").append(dtype_names("|")).append("'");
  if (w.size() != 4 || !read_field(w[0], "K=", key.K) || !read_field(w[1], "L=", key.L) ||
      !read_field(w[2], "d=", key.d))
    return fail(m);
  const std::optional<DType> t = parse_dtype(w[3]);
  if (!t)
    return fail(m.append(": element type ")
                    .append(quoted(w[3]))
                    .append(" has no kernels (element types: ")
                    .append(dtype_names())
                    .append(")"));
  key.dtype = *t;
  return key;
}

std::optional<ManifestLine> parse_manifest_line(std::string_view text, ManifestError *error) {
  auto fail = [&](std::string m, bool about_word) -> std::optional<ManifestLine> {
    if (error)
      *error = {std::move(m), about_word};
    return std::nullopt;
  };
  if (const std::size_t hash = text.find('#'); hash != std::string_view::npos)
    text = text.substr(0, hash);
  const std::vector<std::string_view> w = words_of(text);
  ManifestLine line;
  if (w.empty())
    return line;
  line.blank = false;
  const char *const prefixes[] = {"K=", "L=", "d="};
  int *const fields[] = {&line.key.K, &line.key.L, &line.key.d};
  for (std::size_t i = 0; i < 4; ++i) {
    const bool ok = i < w.size() && (i < 3 ? read_field(w[i], prefixes[i], *fields[i])
                                           : w[i].find('=') == std::string_view::npos);
    if (!ok) {
      std::string m = "cannot read ";
      m.append(i < w.size() ? quoted(w[i]) : std::string("the end of the line"));
      return fail(m.append(" (expected K=.. L=.. d=.. ")
                      .append(dtype_names("|"))
                      .append(", then optional schedule knobs knob=value)"),
                  true);
    }
  }
  const std::optional<DType> t = parse_dtype(w[3]);
  if (!t) {
    std::string m = "element type ";
    return fail(m.append(quoted(w[3]))
                    .append(" has no kernels (element types: ")
                    .append(dtype_names())
                    .append(")"),
                false);
  }
  line.key.dtype = *t;
  std::string knobs;
  for (std::size_t i = 4; i < w.size(); ++i)
    knobs.append(" ").append(w[i]);
  if (!knobs.empty()) {
    std::string knob_error;
    const std::optional<Schedule> s = Schedule::parse(knobs, &knob_error);
    if (!s)
      return fail(knob_error, false);
    line.key.schedule = *s;
    line.has_knobs = true;
  }
  return line;
}

} // namespace pig::spec
