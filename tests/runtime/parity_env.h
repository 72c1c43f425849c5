// What the parity tests (parity_test.cpp, arch_parity_test.cpp) share: when a missing reference
// from transformers is a failure rather than a skip. PIG_PARITY_STAMP is the file ./pig writes
// once the parity environment is installed (tests/runtime/CMakeLists.txt defines it).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace pig::runtime::testing {

inline std::string Env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

/// Why a missing reference is a failure here, or "" where it may skip: never with PIG_PARITY=0;
/// always with CI=true or once the parity environment is installed.
inline std::string ParityRequiredBecause() {
  if (Env("PIG_PARITY") == "0")
    return "";
  const std::string ci = Env("CI");
  if (ci == "true" || ci == "TRUE" || ci == "True" || ci == "1")
    return "CI=true";
  if (std::filesystem::exists(PIG_PARITY_STAMP))
    return std::string("the parity environment is installed (") + PIG_PARITY_STAMP + ")";
  return "";
}

} // namespace pig::runtime::testing
