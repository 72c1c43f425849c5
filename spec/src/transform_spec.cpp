#include "pig/spec/transform_spec.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pig::spec {

namespace {

// GCC 12 reports a false -Wrestrict on "literal" + std::string; append instead.
std::string quoted(std::string_view x) {
  std::string s(1, '\'');
  s.append(x);
  s.push_back('\'');
  return s;
}

[[noreturn]] void bad_spec(std::string_view text, const std::string &why) {
  throw std::invalid_argument("hash transform " + quoted(text) + ": " + why +
                              " (accepted: plain, pca:r=R, whiten[:a=A], mips[:q=Q], and one "
                              "linear map followed by mips, e.g. whiten:a=0.25+mips:q=0.9)");
}

double parse_number(std::string_view text, std::string_view value) {
  double x = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    bad_spec(text, quoted(value) + " is not a number");
  return x;
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

} // namespace

std::size_t TransformSpec::hashed_dim(std::size_t d) const {
  return (linear == Linear::pca ? rank : d) + (mips > 0 ? 1 : 0);
}

void TransformSpec::validate(std::size_t d) const {
  if (d == 0)
    throw std::invalid_argument("hash transform: head dim 0");
  if (linear == Linear::pca && (rank < 1 || rank > d))
    throw std::invalid_argument("hash transform pca: r must be in [1, " + std::to_string(d) +
                                "] (the head dim), got " + std::to_string(rank));
  if (linear == Linear::whiten && !(alpha > 0 && alpha <= 1))
    throw std::invalid_argument("hash transform whiten: a must be in (0, 1], got " + fmt(alpha));
  if (!(mips >= 0 && mips <= 1))
    throw std::invalid_argument("hash transform mips: q must be in (0, 1], got " + fmt(mips));
}

std::string TransformSpec::str() const {
  std::string s;
  if (linear == Linear::pca)
    s = "pca:r=" + std::to_string(rank);
  else if (linear == Linear::whiten)
    s = "whiten:a=" + fmt(alpha);
  if (mips > 0) {
    if (!s.empty())
      s.push_back('+');
    s.append("mips:q=").append(fmt(mips));
  }
  return s.empty() ? std::string("plain") : s;
}

TransformSpec TransformSpec::parse(std::string_view text) {
  TransformSpec spec;
  if (text == "plain" || text == "none")
    return spec;
  if (text.empty())
    bad_spec(text, "empty");
  std::string_view rest = text;
  bool linear_seen = false;
  while (!rest.empty()) {
    const std::size_t plus = rest.find('+');
    const std::string_view part = rest.substr(0, plus);
    rest = plus == std::string_view::npos ? std::string_view{} : rest.substr(plus + 1);
    if (plus != std::string_view::npos && rest.empty())
      bad_spec(text, "nothing after '+'");
    const std::size_t colon = part.find(':');
    const std::string_view name = part.substr(0, colon);
    std::string_view key, value;
    if (colon != std::string_view::npos) {
      const std::string_view arg = part.substr(colon + 1);
      const std::size_t eq = arg.find('=');
      if (eq == std::string_view::npos)
        bad_spec(text, quoted(arg) + " is not name=value");
      key = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (spec.mips > 0)
      bad_spec(text, "mips must come last");
    if (name == "pca" || name == "whiten") {
      if (linear_seen)
        bad_spec(text, "at most one linear map");
      linear_seen = true;
      if (name == "pca") {
        if (key != "r")
          bad_spec(text, "pca needs r=R");
        const double r = parse_number(text, value);
        if (r != std::floor(r) || r < 1)
          bad_spec(text, "r must be a positive integer");
        spec.linear = Linear::pca;
        spec.rank = std::size_t(r);
      } else {
        spec.linear = Linear::whiten;
        if (!key.empty() && key != "a")
          bad_spec(text, "whiten takes a=A");
        if (!key.empty())
          spec.alpha = parse_number(text, value);
      }
    } else if (name == "mips") {
      if (!key.empty() && key != "q")
        bad_spec(text, "mips takes q=Q");
      spec.mips = key.empty() ? 1.0 : parse_number(text, value);
      if (!(spec.mips > 0 && spec.mips <= 1))
        bad_spec(text, "q must be in (0, 1]");
    } else {
      bad_spec(text, "unknown transform " + quoted(name));
    }
  }
  if (spec.linear == Linear::whiten && !(spec.alpha > 0 && spec.alpha <= 1))
    bad_spec(text, "a must be in (0, 1]");
  return spec;
}

} // namespace pig::spec
