// The dialect's C++ surface: parsing and printing, attribute and type range checks.
#include "pig/Dialect/PigBuilder.h"
#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;
using namespace mlir::pig;

namespace {
class DialectTest : public ::testing::Test {
protected:
  DialectTest() { loadPigDialects(context); }

  /// Parses `source`, returning the printed module or "" (with the error in `errors`).
  std::string roundTrip(const std::string &source) {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      errors += diag.str() + "\n";
      return success();
    });
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
    if (!module)
      return "";
    std::string printed;
    llvm::raw_string_ostream os(printed);
    module->print(os);
    return printed;
  }

  MLIRContext context;
  std::string errors;
};

TEST_F(DialectTest, LshAttrRanges) {
  auto lsh = [&](int64_t k, int64_t l, int64_t t) {
    return LshAttr::getChecked([&] { return emitError(UnknownLoc::get(&context)); }, &context, k, l,
                               t, uint64_t{0});
  };
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  EXPECT_TRUE(lsh(10, 150, 2));
  EXPECT_TRUE(lsh(1, 1, 1));
  EXPECT_TRUE(lsh(16, 1024, 1024));
  EXPECT_FALSE(lsh(17, 150, 2));  // K > 16: uint16 codes
  EXPECT_FALSE(lsh(0, 150, 2));   // K < 1
  EXPECT_FALSE(lsh(10, 1025, 2)); // L > 1024
  EXPECT_FALSE(lsh(10, 1, 2));    // L < t
  EXPECT_FALSE(lsh(10, 150, 0));  // t < 1
  EXPECT_TRUE(lsh(ShapedType::kDynamic, ShapedType::kDynamic, 2));
}

/// #pig.schedule <-> pig::spec's Schedule, and the check only the C++ API can reach (the
/// parser always gives one value per knob).
TEST_F(DialectTest, ScheduleAttrAndTheRuntimesSchedule) {
  ::pig::spec::Schedule schedule;
  schedule.gqa = ::pig::spec::GqaStrategy::union_rows;
  schedule.block = 32;
  schedule.parts = 3;
  ScheduleAttr attr = getScheduleAttr(&context, schedule);
  EXPECT_EQ(attr.getValues().size(), ::pig::spec::kScheduleKnobs.size());
  EXPECT_EQ(toSchedule(attr), schedule);
  EXPECT_EQ(toSchedule(getScheduleAttr(&context, {})), ::pig::spec::Schedule{});

  std::string message;
  ScopedDiagnosticHandler capture(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  auto emit = [&] { return emitError(UnknownLoc::get(&context)); };
  EXPECT_FALSE(ScheduleAttr::getChecked(emit, &context, ArrayRef<int64_t>{0, 64, 8}));
  EXPECT_EQ(message, "a schedule has 6 knobs (gqa, block, prefetch, dense_prefetch, "
                     "tables_ahead, parts), got 3 values");
  EXPECT_FALSE(ScheduleAttr::getChecked(emit, &context, ArrayRef<int64_t>{0, 64, 8, 64, 8, 9}));
  EXPECT_EQ(message, ::pig::spec::Schedule::check_knob(5, 9));
}

TEST_F(DialectTest, CodesAndIndexTypes) {
  auto emit = [&] { return emitError(UnknownLoc::get(&context)); };
  ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
  EXPECT_TRUE(
      CodesType::getChecked(emit, &context, ShapedType::kDynamic, int64_t{150}, int64_t{10}));
  EXPECT_FALSE(CodesType::getChecked(emit, &context, int64_t{1}, int64_t{150}, int64_t{17}));
  EXPECT_TRUE(BucketIndexType::getChecked(emit, &context, int64_t{150}, int64_t{16}));
  EXPECT_FALSE(BucketIndexType::getChecked(emit, &context, int64_t{0}, int64_t{10}));
}

TEST_F(DialectTest, RoundTripPrintsTheSameText) {
  const std::string source = R"mlir(
func.func @f(%q: tensor<1x64xbf16>, %index: !pig.index<150x10>) -> tensor<?xi32> {
  %codes = pig.encode %q {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 3>} : tensor<1x64xbf16> -> !pig.codes<1x150x10>
  %ids = pig.query %index, %codes[0] threshold 2 : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  return %ids : tensor<?xi32>
}
)mlir";
  std::string once = roundTrip(source);
  ASSERT_FALSE(once.empty()) << errors;
  EXPECT_EQ(once, roundTrip(once));
  EXPECT_NE(once.find("#pig.lsh<k = 10, l = 150, t = 2, seed = 3>"), std::string::npos);
  EXPECT_NE(once.find("!pig.codes<1x150x10>"), std::string::npos);
}

TEST_F(DialectTest, VerifierRejectsDisagreeingHeadDims) {
  const std::string source = R"mlir(
func.func @f(%q: tensor<1x64xbf16>, %k: tensor<?x128xbf16>, %v: tensor<?x128xbf16>) {
  %o, %l = pig.dense_attention %q, %k, %v : (tensor<1x64xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}
)mlir";
  EXPECT_TRUE(roundTrip(source).empty());
  EXPECT_NE(errors.find("head dims disagree"), std::string::npos) << errors;
}
} // namespace
