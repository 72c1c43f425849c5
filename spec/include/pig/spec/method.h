// The attention methods pig runs, as an enum with one name table (AttentionSpec::method, every
// tool's --attention and --compare, pig-eval's rows, pig-tune's records).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pig::spec {

enum class Method : std::uint8_t {
  dense,      ///< every cached position, exactly
  magicpig,   ///< LSH sampling (the paper's method)
  topk,       ///< the exact top-k keys by logit (an oracle baseline)
  quest,      ///< Quest's page selection by upper bounds
  oracle,     ///< sampling from the exact softmax (an oracle baseline)
  lsh_hybrid, ///< LSH as the ranker: an exact head and a Horvitz-Thompson tail (docs/HYBRID.md)
};

struct MethodInfo {
  Method method;
  const char *name;
};

inline constexpr std::array<MethodInfo, 6> kMethods = {{
    {Method::dense, "dense"},
    {Method::magicpig, "magicpig"},
    {Method::topk, "topk"},
    {Method::quest, "quest"},
    {Method::oracle, "oracle"},
    {Method::lsh_hybrid, "lsh-hybrid"},
}};

inline const char *name(Method m) {
  for (const MethodInfo &i : kMethods)
    if (i.method == m)
      return i.name;
  return "?";
}

/// "dense, magicpig, topk, quest, oracle, lsh-hybrid": for messages and --help.
inline std::string method_names() {
  std::string s;
  for (const MethodInfo &i : kMethods) {
    if (!s.empty())
      s += ", ";
    s += i.name;
  }
  return s;
}

/// The method named `text`, or nullopt.
inline std::optional<Method> parse_method(std::string_view text) {
  for (const MethodInfo &i : kMethods)
    if (text == i.name)
      return i.method;
  return std::nullopt;
}

/// Methods that read a budget fraction of the indexed tokens (--budget).
inline bool uses_budget(Method m) {
  return m == Method::topk || m == Method::quest || m == Method::oracle || m == Method::lsh_hybrid;
}

} // namespace pig::spec
