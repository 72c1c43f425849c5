//===- Fuse.cpp - fuse what streams the same data -------------------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/Sequence.h"

namespace mlir::pig {
#define GEN_PASS_DEF_PIGFUSE
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

using namespace mlir;
using namespace mlir::pig;

namespace {
Attribute placementOf(Operation *op) { return op ? op->getAttr(kDeviceAttrName) : Attribute(); }

/// Looks through transfers: the op that really produced `value`.
Value throughTransfers(Value value) {
  while (auto transfer = value.getDefiningOp<TransferOp>())
    value = transfer.getInput();
  return value;
}

/// collision_prob(q, center(k).centered, ids) + weighted_softmax(q, k, v, ids, u)
///   -> sampled_softmax_fused(q, k, v, center(k).mean, ids)
struct FuseSampledSoftmax : OpRewritePattern<WeightedSoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(WeightedSoftmaxOp op, PatternRewriter &rewriter) const override {
    auto prob = op.getProb().getDefiningOp<CollisionProbOp>();
    if (!prob || !prob->hasOneUse() || prob.getQuery() != op.getQuery() ||
        prob.getIds() != op.getIds() || placementOf(prob) != placementOf(op))
      return rewriter.notifyMatchFailure(op, "no collision_prob over the same sample set");
    Value centered = prob.getKeys();
    auto center = throughTransfers(centered).getDefiningOp<CenterOp>();
    if (!center || throughTransfers(center.getKeys()) != throughTransfers(op.getKeys()))
      return rewriter.notifyMatchFailure(op, "keys are not centered by pig.center");

    // The mean must live where the fused op runs: move it the way the centered keys moved.
    Value mean = center.getMean();
    if (auto transfer = centered.getDefiningOp<TransferOp>()) {
      auto existing = llvm::find_if(mean.getUsers(), [&](Operation *user) {
        auto other = dyn_cast<TransferOp>(user);
        return other && other.getTo() == transfer.getTo();
      });
      if (existing != mean.getUsers().end()) {
        mean = (*existing)->getResult(0);
      } else {
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPointAfter(center);
        mean = rewriter.create<TransferOp>(transfer.getLoc(), mean.getType(), mean,
                                           transfer.getFrom(), transfer.getTo());
      }
    }
    auto fused = rewriter.create<SampledSoftmaxFusedOp>(
        op.getLoc(), op.getOutput().getType(), op.getLse().getType(), op.getQuery(), op.getKeys(),
        op.getValues(), mean, op.getIds(), prob.getLsh(), op.getStaticTokensAttr());
    if (Attribute device = placementOf(op))
      fused->setAttr(kDeviceAttrName, device);
    rewriter.replaceOp(op, fused->getResults());
    rewriter.eraseOp(prob);
    return success();
  }
};

/// The row `query` was sliced from, when it is one static row of a 2-D block.
std::optional<int64_t> sliceRow(tensor::ExtractSliceOp slice) {
  auto source = cast<RankedTensorType>(slice.getSourceType());
  if (source.getRank() != 2 || slice.getType().getRank() != 2 || slice.getStaticSizes()[0] != 1 ||
      slice.getStaticOffsets()[1] != 0 || ShapedType::isDynamic(slice.getStaticOffsets()[0]) ||
      !slice.hasUnitStride() || slice.getStaticSizes()[1] != source.getDimSize(1))
    return std::nullopt;
  return slice.getStaticOffsets()[0];
}

/// All uses of `codes` are pig.query ops, directly or through transfers.
bool onlyQueried(Value codes) {
  return llvm::all_of(codes.getUsers(), [](Operation *user) {
    if (auto transfer = dyn_cast<TransferOp>(user))
      return onlyQueried(transfer.getOutput());
    return isa<QueryOp>(user);
  });
}

/// Rewrites the queries of `codes` to read `row` of `wide` (moving `wide` like `codes` moved).
void redirectQueries(OpBuilder &builder, Value codes, Value wide, int64_t row,
                     DenseMap<std::pair<Value, Attribute>, Value> &movedWide) {
  for (Operation *user : llvm::make_early_inc_range(codes.getUsers())) {
    if (auto query = dyn_cast<QueryOp>(user)) {
      query.getCodesMutable().assign(wide);
      query.setRow(query.getRow() + row);
      continue;
    }
    auto transfer = cast<TransferOp>(user);
    Value &moved = movedWide[{wide, transfer.getTo()}];
    if (!moved) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointAfterValue(wide);
      moved = builder.create<TransferOp>(transfer.getLoc(), wide.getType(), wide,
                                         transfer.getFrom(), transfer.getTo());
    }
    redirectQueries(builder, transfer.getOutput(), moved, row, movedWide);
  }
}

/// One encode for all query heads of a GQA group: the one-row encodes of rows 0..G-1 of the
/// same block become one encode of the block.
void fuseGroupEncodes(func::FuncOp func) {
  using Key = std::tuple<Value, Attribute, Attribute>;
  llvm::MapVector<Key, SmallVector<std::pair<EncodeOp, int64_t>>> groups;
  func.walk([&](EncodeOp encode) {
    auto slice = encode.getInput().getDefiningOp<tensor::ExtractSliceOp>();
    if (!slice || !onlyQueried(encode.getCodes()))
      return;
    if (std::optional<int64_t> row = sliceRow(slice))
      groups[{slice.getSource(), encode.getLsh(), placementOf(encode)}].push_back({encode, *row});
  });
  OpBuilder builder(func.getContext());
  for (auto &[key, members] : groups) {
    Value block = std::get<0>(key);
    int64_t rows = cast<RankedTensorType>(block.getType()).getDimSize(0);
    if (members.size() < 2 || static_cast<int64_t>(members.size()) != rows)
      continue;
    Block *where = members.front().first->getBlock();
    if (llvm::any_of(members, [&](auto &member) { return member.first->getBlock() != where; }))
      continue;
    SmallVector<int64_t> covered;
    for (auto &member : members)
      covered.push_back(member.second);
    llvm::sort(covered);
    if (!llvm::equal(covered, llvm::seq<int64_t>(0, rows)))
      continue;
    EncodeOp first = members.front().first;
    builder.setInsertionPoint(first);
    CodesType oneRow = first.getCodes().getType();
    auto wideType = CodesType::get(func.getContext(), rows, oneRow.getTables(), oneRow.getBits());
    auto wide = builder.create<EncodeOp>(first.getLoc(), wideType, block, first.getLsh());
    if (Attribute device = std::get<2>(key))
      wide->setAttr(kDeviceAttrName, device);
    DenseMap<std::pair<Value, Attribute>, Value> movedWide;
    for (auto &[encode, row] : members) {
      redirectQueries(builder, encode.getCodes(), wide.getCodes(), row, movedWide);
      // The old codes and their transfers are now unused.
      SmallVector<Operation *> dead{encode};
      for (size_t i = 0; i < dead.size(); ++i)
        for (Operation *user : dead[i]->getUsers())
          dead.push_back(user);
      for (Operation *op : llvm::reverse(dead))
        op->erase();
    }
  }
}

struct PigFuse : mlir::pig::impl::PigFuseBase<PigFuse> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) { fuseGroupEncodes(func); });
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSampledSoftmax>(&getContext());
    GreedyRewriteConfig config;
    config.enableRegionSimplification = GreedySimplifyRegionLevel::Disabled;
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};
} // namespace
