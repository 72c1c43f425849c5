// Shared by the tests that need the real model (./pig installs it): PIG_REQUIRE_MODEL() at the
// top of a test skips it with a message when the model file is missing, or fails it when CI=true
// (CI installs the model, so there a missing one is an error, not a reason to skip).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "pig/runtime/model.h"

namespace pig::runtime::testing {

// CI=true (or 1), as CI services and .ci/run set it.
inline bool InCi() {
  const char *ci = std::getenv("CI");
  if (!ci)
    return false;
  const std::string v = ci;
  return v == "true" || v == "TRUE" || v == "True" || v == "1";
}

inline bool ModelExists() {
  std::error_code ec;
  return std::filesystem::file_size(DefaultModelPath(), ec) > 0 && !ec;
}

inline std::unique_ptr<LlamaModel> LoadModel() { return LlamaModel::Load(DefaultModelPath()); }

} // namespace pig::runtime::testing

// In a test body (or a void helper): skip without the model, fail instead when CI=true.
#define PIG_REQUIRE_MODEL()                                                                        \
  do {                                                                                             \
    if (!::pig::runtime::testing::ModelExists()) {                                                 \
      if (::pig::runtime::testing::InCi())                                                         \
        FAIL() << "model not found: " << ::pig::runtime::DefaultModelPath()                        \
               << " (CI=true: the model tests must run, not skip; ./pig setup installs it)";       \
      GTEST_SKIP() << "model not found: " << ::pig::runtime::DefaultModelPath()                    \
                   << " (./pig setup installs it; with CI=true this fails)";                       \
    }                                                                                              \
  } while (0)
