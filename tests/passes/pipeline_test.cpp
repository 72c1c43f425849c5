// The passes on IR from the builder API: decompose, specialize, partition, fuse.
#include "pig/Dialect/PigBuilder.h"
#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

using namespace mlir;
using namespace mlir::pig;

namespace {
template <typename OpTy> int count(Operation *root) {
  int n = 0;
  root->walk([&](OpTy) { ++n; });
  return n;
}

/// A layer with 4 query heads over 2 kv-heads (GQA groups of 2), head dim 64, bf16, with K and
/// L left generic for pig-specialize.
OwningOpRef<ModuleOp> oneLayer(MLIRContext &context) {
  std::string error;
  auto module = buildDecodeStep(context, {4, 2, 64, 1, {}, "bf16"}, {0, 0, 2, 0}, {}, error);
  EXPECT_TRUE(module) << error;
  return module;
}

struct Pipeline {
  std::string target = "cpu";
  bool specialize = true, partition = true, fuse = true;
  PigSpecializeOptions config{10, 150, 64, "bf16", ""};
};

LogicalResult run(ModuleOp module, const Pipeline &pipeline, std::string *errors = nullptr) {
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &diag) {
    if (errors)
      *errors += diag.str() + "\n";
    return success();
  });
  PassManager pm(module.getContext());
  pm.addPass(createPigDecompose());
  if (pipeline.specialize)
    pm.addPass(createPigSpecialize(pipeline.config));
  if (pipeline.partition)
    pm.addPass(createPigPartition(PigPartitionOptions{pipeline.target}));
  if (pipeline.fuse)
    pm.addPass(createPigFuse());
  return pm.run(module);
}

std::string deviceOf(Operation *op) {
  auto device = op->getAttrOfType<DeviceAttr>(kDeviceAttrName);
  return device ? device.getKind().str() : "";
}

TEST(PipelineTest, DecomposeExpandsEveryHead) {
  MLIRContext context;
  auto module = oneLayer(context);
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(run(*module, {"cpu", false, false, false})));
  EXPECT_EQ(count<SampledAttentionOp>(*module), 0);
  EXPECT_EQ(count<CenterOp>(*module), 2);
  EXPECT_EQ(count<BuildIndexOp>(*module), 2);
  EXPECT_EQ(count<EncodeOp>(*module), 2 + 4);
  EXPECT_EQ(count<QueryOp>(*module), 4);
  EXPECT_EQ(count<CollisionProbOp>(*module), 4);
  EXPECT_EQ(count<WeightedSoftmaxOp>(*module), 4);
  EXPECT_EQ(count<DenseAttentionOp>(*module), 4);
  EXPECT_EQ(count<MergeOp>(*module), 4);
}

TEST(PipelineTest, CpuTargetFusesEverythingOnTheCpu) {
  MLIRContext context;
  auto module = oneLayer(context);
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(run(*module, {})));
  EXPECT_EQ(count<TransferOp>(*module), 0);
  EXPECT_EQ(count<SampledSoftmaxFusedOp>(*module), 4);
  EXPECT_EQ(count<WeightedSoftmaxOp>(*module), 0);
  EXPECT_EQ(count<CollisionProbOp>(*module), 0);
  EXPECT_EQ(count<EncodeOp>(*module), 2 + 2); // keys per kv-head, queries per GQA group
  module->walk([&](Operation *op) {
    if (isa<PigDialect>(op->getDialect())) {
      EXPECT_EQ(deviceOf(op), "cpu") << op->getName().getStringRef().str();
    }
  });
  auto func = module->lookupSymbol<func::FuncOp>("layer0");
  auto kernel = func->getAttrOfType<KernelAttr>(kKernelAttrName);
  ASSERT_TRUE(kernel);
  EXPECT_EQ(kernel.getK(), 10);
  EXPECT_EQ(kernel.getL(), 150);
  EXPECT_EQ(kernel.getD(), 64);
  module->walk([&](EncodeOp op) { EXPECT_TRUE(op.getLsh().isStatic()); });
}

TEST(PipelineTest, GpuTargetEncodesOnTheGpuAndSamplesOnTheCpu) {
  MLIRContext context;
  auto module = oneLayer(context);
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(run(*module, {"cpu+gpu"})));
  module->walk([&](EncodeOp op) { EXPECT_EQ(deviceOf(op), "gpu"); });
  module->walk([&](CenterOp op) { EXPECT_EQ(deviceOf(op), "gpu"); });
  module->walk([&](QueryOp op) { EXPECT_EQ(deviceOf(op), "cpu"); });
  module->walk([&](BuildIndexOp op) { EXPECT_EQ(deviceOf(op), "cpu"); });
  module->walk([&](SampledSoftmaxFusedOp op) { EXPECT_EQ(deviceOf(op), "cpu"); });
  module->walk([&](MergeOp op) { EXPECT_EQ(deviceOf(op), "gpu"); });
  // The walks above hold for no op at all: the ops must all be there.
  EXPECT_EQ(count<CenterOp>(*module), 2);
  EXPECT_EQ(count<EncodeOp>(*module), 2 + 2);
  EXPECT_EQ(count<BuildIndexOp>(*module), 2);
  EXPECT_EQ(count<QueryOp>(*module), 4);
  EXPECT_EQ(count<SampledSoftmaxFusedOp>(*module), 4);
  EXPECT_EQ(count<MergeOp>(*module), 4);
  // Per kv-head: the centering mean, the key codes and the group's query codes to the CPU; per
  // query head: the sampled output and its log-sum-exp back to the GPU.
  EXPECT_EQ(count<TransferOp>(*module), 2 * 3 + 4 * 2);
  // Every operand of a placed op lives on its device.
  module->walk([&](Operation *op) {
    if (!isa<PigDialect>(op->getDialect()) || isa<TransferOp>(op))
      return;
    for (Value operand : op->getOperands()) {
      Operation *producer = operand.getDefiningOp();
      if (!producer || !isa<PigDialect>(producer->getDialect()))
        continue;
      std::string where = isa<TransferOp>(producer)
                              ? cast<TransferOp>(producer).getTo().getKind().str()
                              : deviceOf(producer);
      EXPECT_EQ(where, deviceOf(op)) << op->getName().getStringRef().str();
    }
  });
}

TEST(PipelineTest, SpecializeRejectsHeadDimsWithoutKernels) {
  MLIRContext context;
  std::string error;
  auto module = buildDecodeStep(context, {4, 2, 96, 1, {}, "bf16"}, {10, 150, 2, 0}, {}, error);
  ASSERT_TRUE(module) << error;
  std::string errors;
  Pipeline pipeline;
  pipeline.config = {0, 0, 0, "", ""};
  EXPECT_TRUE(failed(run(*module, pipeline, &errors)));
  EXPECT_NE(errors.find("d=96 has no kernel"), std::string::npos) << errors;
}

TEST(PipelineTest, SpecializeFromAManifest) {
  std::string path = ::testing::TempDir() + "pig_manifest.txt";
  {
    std::ofstream manifest(path);
    manifest << "# kernels\nK=10 L=150 d=128 bf16\nK=8 L=75 d=64 bf16\n";
  }
  MLIRContext context;
  auto module = oneLayer(context);
  ASSERT_TRUE(module);
  Pipeline pipeline;
  pipeline.config = {0, 0, 0, "", path};
  std::string errors;
  ASSERT_TRUE(succeeded(run(*module, pipeline, &errors))) << errors;
  module->walk([&](EncodeOp op) {
    EXPECT_EQ(op.getLsh().getK(), 8);
    EXPECT_EQ(op.getCodes().getType().getTables(), 75);
  });
  std::remove(path.c_str());
}
/// pig-schedule from C++: an explicit schedule is attached as #pig.schedule and reads back as
/// pig::spec's Schedule; without options the default heuristic gives the defaults.
TEST(PipelineTest, ScheduleAttachesTheSchedule) {
  for (const std::string &knobs :
       {std::string("gqa=union,block=32,tables_ahead=4"), std::string()}) {
    MLIRContext context;
    auto module = oneLayer(context);
    ASSERT_TRUE(module);
    std::string errors;
    ASSERT_TRUE(succeeded(run(*module, Pipeline{}, &errors))) << errors;
    PassManager pm(module->getContext());
    pm.addPass(createPigSchedule(PigScheduleOptions{"", knobs, ""}));
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      errors += diag.str() + "\n";
      return success();
    });
    ASSERT_TRUE(succeeded(pm.run(*module))) << errors;
    ::pig::spec::Schedule expected;
    if (!knobs.empty()) {
      expected.gqa = ::pig::spec::GqaStrategy::union_rows;
      expected.block = 32;
      expected.tables_ahead = 4;
    }
    int functions = 0;
    module->walk([&](func::FuncOp func) {
      auto attr = func->getAttrOfType<ScheduleAttr>(kScheduleAttrName);
      ASSERT_TRUE(attr);
      EXPECT_EQ(toSchedule(attr), expected) << toSchedule(attr).str();
      ++functions;
    });
    EXPECT_EQ(functions, 1);
    EXPECT_NE(errors.find(knobs.empty() ? "from the default heuristic (d=64, group of 2)"
                                        : "from the schedule option"),
              std::string::npos)
        << errors;
  }
}
} // namespace
