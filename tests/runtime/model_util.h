// Shared by the tests that need the real model: load the default model (./pig installs it), or
// return null so that the test can GTEST_SKIP with a message.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "pig/runtime/model.h"

namespace pig::runtime::testing {

inline std::unique_ptr<LlamaModel> LoadOrSkip() {
  const std::string path = DefaultModelPath();
  if (!std::filesystem::exists(path))
    return nullptr;
  return LlamaModel::Load(path);
}

} // namespace pig::runtime::testing
