// The eval library's workflows' errors: exceptions the tool maps to its exit status, never an
// exit (the query-capturing decorator they use is app's: tests/app/decorators_test.cpp).
#include <gtest/gtest.h>

#include <stdexcept>

#include "../runtime/model_util.h" // PIG_REQUIRE_MODEL
#include "pig/eval/run.h"

namespace {

using namespace pig::runtime;

// A model that cannot be read is an exception from every workflow (pig-eval: exit 1), not an
// exit of the process.
TEST(EvalRun, MissingModelThrows) {
  pig::eval::EvalOptions e;
  e.model = "/nonexistent.gguf";
  e.out = ::testing::TempDir() + "/pig-eval-missing-model";
  EXPECT_THROW(pig::eval::RunAttentionError(e, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunDownstream(e, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunAll(e, {}, {}), std::runtime_error);
  EXPECT_THROW(pig::eval::RunKvFormats(e, {}), std::runtime_error);
}

// What only the loaded model refuses is a UsageError (pig-eval: exit 2 with the usage).
TEST(EvalRun, LayerOutsideTheModelIsAUsageError) {
  PIG_REQUIRE_MODEL();
  pig::eval::EvalOptions e;
  e.out = ::testing::TempDir() + "/pig-eval-usage";
  e.layers = {99};
  try {
    pig::eval::RunDownstream(e, {});
    FAIL() << "no exception";
  } catch (const pig::eval::UsageError &err) {
    EXPECT_STREQ(err.what(), "--layers: layer 99 outside the model's 30");
  }
}

} // namespace
