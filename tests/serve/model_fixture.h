// The fixture of the serve tests that need the model: loaded once per suite, skipped without it
// (failed with CI=true), as the runtime's PIG_REQUIRE_MODEL rule says.
#pragma once

#include <gtest/gtest.h>

#include "../runtime/model_util.h"

namespace pig::serve::testing {

class ModelTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    if (runtime::testing::ModelExists())
      model_ = runtime::testing::LoadModel().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { PIG_REQUIRE_MODEL(); }
  static inline runtime::LlamaModel *model_ = nullptr;
};

} // namespace pig::serve::testing
