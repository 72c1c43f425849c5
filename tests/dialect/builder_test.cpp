// The builder API: the IR of one decode step for a model shape.
#include "pig/Dialect/PigBuilder.h"
#include "pig/Dialect/PigOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;
using namespace mlir::pig;

namespace {
template <typename OpTy> int count(Operation *root) {
  int n = 0;
  root->walk([&](OpTy) { ++n; });
  return n;
}

// SmolLM2-135M: 9 query heads, 3 kv-heads, head dim 64, 30 layers.
ModelShape smollm2() { return {9, 3, 64, 30, {0, 15}, "bf16"}; }

TEST(BuilderTest, OneFunctionPerLayerDenseWhereAsked) {
  MLIRContext context;
  std::string error;
  auto module = buildDecodeStep(context, smollm2(), {}, {}, error);
  ASSERT_TRUE(module) << error;
  EXPECT_EQ(count<func::FuncOp>(*module), 30);
  EXPECT_EQ(count<SampledAttentionOp>(*module), 28);
  EXPECT_EQ(count<DenseAttentionOp>(*module), 2 * 3); // one per kv-head group
  auto layer0 = module->lookupSymbol<func::FuncOp>("layer0");
  ASSERT_TRUE(layer0);
  EXPECT_EQ(count<SampledAttentionOp>(layer0), 0);
  auto layer1 = module->lookupSymbol<func::FuncOp>("layer1");
  ASSERT_TRUE(layer1);
  auto qType = cast<RankedTensorType>(layer1.getArgumentTypes()[0]);
  EXPECT_EQ(qType.getShape(), ArrayRef<int64_t>({9, 64}));
  EXPECT_TRUE(qType.getElementType().isBF16());
  auto kType = cast<RankedTensorType>(layer1.getArgumentTypes()[1]);
  EXPECT_TRUE(ShapedType::isDynamic(kType.getDimSize(1)));
  SampledAttentionOp op;
  layer1.walk([&](SampledAttentionOp found) { op = found; });
  ASSERT_TRUE(op);
  EXPECT_EQ(op.getLsh().getK(), 10);
  EXPECT_EQ(op.getLsh().getL(), 150);
  EXPECT_EQ(op.getStaticTokens().getSink(), 4);
  EXPECT_EQ(op.getStaticTokens().getLocal(), 64);
}

TEST(BuilderTest, GenericLshLeavesKAndLOpen) {
  MLIRContext context;
  std::string error;
  auto module = buildDecodeStep(context, {4, 2, 128, 2, {}, "f32"}, {0, 0, 2, 1}, {}, error);
  ASSERT_TRUE(module) << error;
  int generic = 0;
  module->walk([&](SampledAttentionOp op) { generic += !op.getLsh().isStatic(); });
  EXPECT_EQ(generic, 2);
}

// q8: 8-bit keys and values (!pig.q8), f32 queries; the head dim must be whole q8 blocks.
TEST(BuilderTest, Q8KeysAndValuesTakeF32Queries) {
  MLIRContext context;
  std::string error;
  ModelShape shape = smollm2();
  shape.dtype = "q8";
  auto module = buildDecodeStep(context, shape, {}, {}, error);
  ASSERT_TRUE(module) << error;
  for (const char *name : {"layer0", "layer1"}) {
    auto layer = module->lookupSymbol<func::FuncOp>(name);
    ASSERT_TRUE(layer) << name;
    EXPECT_TRUE(cast<RankedTensorType>(layer.getArgumentTypes()[0]).getElementType().isF32());
    for (int i : {1, 2})
      EXPECT_TRUE(
          isa<Q8Type>(cast<RankedTensorType>(layer.getArgumentTypes()[i]).getElementType()));
  }
  shape.headDim = 80;
  EXPECT_FALSE(buildDecodeStep(context, shape, {}, {}, error));
  EXPECT_NE(error.find("multiple of 32"), std::string::npos) << error;
}

TEST(BuilderTest, RejectsGqaGroupsThatDoNotDivide) {
  MLIRContext context;
  std::string error;
  auto module = buildDecodeStep(context, {9, 2, 64, 1, {}, "bf16"}, {}, {}, error);
  EXPECT_FALSE(module);
  EXPECT_NE(error.find("GQA"), std::string::npos) << error;
}

TEST(BuilderTest, RejectsBadConfigurations) {
  MLIRContext context;
  std::string error;
  EXPECT_FALSE(buildDecodeStep(context, {4, 2, 64, 1, {}, "f64"}, {}, {}, error));
  EXPECT_NE(error.find("element type"), std::string::npos) << error;
  EXPECT_FALSE(buildDecodeStep(context, {4, 2, 64, 4, {4}, "bf16"}, {}, {}, error));
  EXPECT_NE(error.find("dense layer 4"), std::string::npos) << error;
  EXPECT_FALSE(buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, {10, 1, 2, 0}, {}, error));
  EXPECT_NE(error.find("smaller than the collision threshold"), std::string::npos) << error;
}
TEST(BuilderTest, HashTransformIsCanonicalisedIntoTheLshAttr) {
  MLIRContext context;
  std::string error;
  LshConfig lsh;
  EXPECT_EQ(lsh.transform, "plain");
  lsh.transform = "whiten";
  auto module = buildDecodeStep(context, {4, 2, 64, 2, {}, "bf16"}, lsh, {}, error);
  ASSERT_TRUE(module) << error;
  int whitened = 0;
  module->walk([&](SampledAttentionOp op) {
    whitened += op.getLsh().getTransform() == "whiten:a=0.5" && !op.getLsh().isPlain();
  });
  EXPECT_EQ(whitened, 2);

  // The default (and "none") is plain, which the printer leaves out.
  auto plain = buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, {}, {}, error);
  ASSERT_TRUE(plain) << error;
  plain->walk([&](SampledAttentionOp op) { EXPECT_TRUE(op.getLsh().isPlain()); });
  EXPECT_EQ(LshAttr::get(&context, 10, 150, 2, 0, "none"), LshAttr::get(&context, 10, 150, 2, 0));
  EXPECT_EQ(LshAttr::get(&context, 10, 150, 2, 0, "pca:r=16+mips").getTransform(),
            "pca:r=16+mips:q=1");
}

TEST(BuilderTest, RejectsBadHashTransforms) {
  MLIRContext context;
  std::string error;
  LshConfig lsh;
  lsh.transform = "rotate";
  EXPECT_FALSE(buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, lsh, {}, error));
  EXPECT_NE(error.find("unknown transform 'rotate'"), std::string::npos) << error;
  // Parses, but keeps more principal directions than the head has.
  lsh.transform = "pca:r=65";
  EXPECT_FALSE(buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, lsh, {}, error));
  EXPECT_NE(error.find("hash transform \"pca:r=65\" is invalid for head dim d = 64"),
            std::string::npos)
      << error;
  lsh.transform = "pca:r=64";
  EXPECT_TRUE(buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, lsh, {}, error)) << error;
}
} // namespace
