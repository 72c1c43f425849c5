//===- Partition.cpp - place pig ops on the cpu or the gpu ----------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::pig {
#define GEN_PASS_DEF_PIGPARTITION
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

using namespace mlir;
using namespace mlir::pig;

namespace {
/// The paper's partition: hashing and the exact attention over the static tokens (whose KV
/// stays in GPU memory) on the GPU; the index, retrieval and sampled attention next to the
/// full KV cache in CPU memory.
bool runsOnGpu(Operation *op) { return isa<CenterOp, EncodeOp, DenseAttentionOp, MergeOp>(op); }

DeviceAttr placementOf(Operation *op) {
  return op ? op->getAttrOfType<DeviceAttr>(kDeviceAttrName) : DeviceAttr();
}

struct PigPartition : mlir::pig::impl::PigPartitionBase<PigPartition> {
  using PigPartitionBase::PigPartitionBase;

  void runOnOperation() override {
    bool hasGpu;
    if (target == "cpu") {
      hasGpu = false;
    } else if (target == "gpu" || target == "cpu+gpu" || target == "gpu+cpu") {
      hasGpu = true;
    } else {
      getOperation().emitError() << "pig-partition: unknown target '" << target
                                 << "' (expected cpu or cpu+gpu)";
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    DeviceAttr cpu = DeviceAttr::get(ctx, "cpu"), gpu = DeviceAttr::get(ctx, "gpu");

    getOperation().walk([&](func::FuncOp func) {
      // Place.
      func.walk([&](Operation *op) {
        if (!op->getDialect() || !isa<PigDialect>(op->getDialect()) || isa<TransferOp>(op))
          return;
        op->setAttr(kDeviceAttrName, hasGpu && runsOnGpu(op) ? gpu : cpu);
      });
      // Transfer, once per (value, destination), right after the producer.
      DenseMap<std::pair<Value, Attribute>, Value> transfers;
      func.walk([&](Operation *user) {
        DeviceAttr to = placementOf(user);
        if (!to || isa<TransferOp>(user))
          return;
        for (OpOperand &operand : user->getOpOperands()) {
          Value value = operand.get();
          DeviceAttr from = placementOf(value.getDefiningOp());
          if (!from || from == to)
            continue;
          Value &moved = transfers[{value, to}];
          if (!moved) {
            OpBuilder builder(ctx);
            builder.setInsertionPointAfterValue(value);
            moved = builder.create<TransferOp>(value.getLoc(), value.getType(), value, from, to);
          }
          operand.set(moved);
        }
      });
    });
  }
};
} // namespace
