//===- Decompose.cpp - pig.sampled_attention -> primitive ops -------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::pig {
#define GEN_PASS_DEF_PIGDECOMPOSE
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

using namespace mlir;
using namespace mlir::pig;

namespace {
struct DecomposeSampledAttention : OpRewritePattern<SampledAttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SampledAttentionOp op, PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Value q = op.getQuery(), k = op.getKeys(), v = op.getValues();
    auto qType = cast<RankedTensorType>(q.getType());
    auto kType = cast<RankedTensorType>(k.getType());
    auto vType = cast<RankedTensorType>(v.getType());
    LshAttr lsh = op.getLsh();
    StaticTokensAttr staticTokens = op.getStaticTokens();
    const int64_t heads = qType.getDimSize(0), kvHeads = kType.getDimSize(0);
    const int64_t group = heads / kvHeads, d = qType.getDimSize(1);
    Type f32 = rewriter.getF32Type();

    auto index = [&](int64_t i) -> OpFoldResult { return rewriter.getIndexAttr(i); };
    OpFoldResult one = index(1), zero = index(0);
    OpFoldResult headDim = tensor::getMixedSize(rewriter, loc, q, 1);
    OpFoldResult kTokens = tensor::getMixedSize(rewriter, loc, k, 1);
    OpFoldResult vTokens = tensor::getMixedSize(rewriter, loc, v, 1);

    Value output =
        rewriter.create<tensor::EmptyOp>(loc, ArrayRef<OpFoldResult>{index(heads), headDim}, f32);
    Value lse = rewriter.create<tensor::EmptyOp>(loc, ArrayRef<OpFoldResult>{index(heads)}, f32);

    auto rowType = RankedTensorType::get({1, d}, qType.getElementType());
    auto groupType = RankedTensorType::get({group, d}, qType.getElementType());
    auto keysType =
        RankedTensorType::get({kType.getDimSize(1), kType.getDimSize(2)}, kType.getElementType());
    auto valuesType =
        RankedTensorType::get({vType.getDimSize(1), vType.getDimSize(2)}, vType.getElementType());
    auto meanType = RankedTensorType::get({1, kType.getDimSize(2)}, f32);
    auto outType = RankedTensorType::get({1, d}, f32);
    auto lseType = RankedTensorType::get({1}, f32);
    auto idsType = RankedTensorType::get({ShapedType::kDynamic}, rewriter.getI32Type());
    auto probType = RankedTensorType::get({ShapedType::kDynamic}, f32);
    auto keyCodesType = CodesType::get(ctx, kType.getDimSize(1), lsh.getL(), lsh.getK());
    auto queryCodesType = CodesType::get(ctx, 1, lsh.getL(), lsh.getK());
    auto indexType = BucketIndexType::get(ctx, lsh.getL(), lsh.getK());

    for (int64_t g = 0; g < kvHeads; ++g) {
      // Index side, once per kv-head.
      Value keys = rewriter.create<tensor::ExtractSliceOp>(
          loc, keysType, k, ArrayRef<OpFoldResult>{index(g), zero, zero},
          ArrayRef<OpFoldResult>{one, kTokens, tensor::getMixedSize(rewriter, loc, k, 2)},
          ArrayRef<OpFoldResult>{one, one, one});
      Value values = rewriter.create<tensor::ExtractSliceOp>(
          loc, valuesType, v, ArrayRef<OpFoldResult>{index(g), zero, zero},
          ArrayRef<OpFoldResult>{one, vTokens, tensor::getMixedSize(rewriter, loc, v, 2)},
          ArrayRef<OpFoldResult>{one, one, one});
      auto center = rewriter.create<CenterOp>(loc, keysType, meanType, keys);
      Value keyCodes = rewriter.create<EncodeOp>(loc, keyCodesType, center.getCentered(), lsh);
      Value bucketIndex = rewriter.create<BuildIndexOp>(loc, indexType, keyCodes, staticTokens);

      // Query side, per query head of the group.
      Value queries = rewriter.create<tensor::ExtractSliceOp>(
          loc, groupType, q, ArrayRef<OpFoldResult>{index(g * group), zero},
          ArrayRef<OpFoldResult>{index(group), headDim}, ArrayRef<OpFoldResult>{one, one});
      for (int64_t j = 0; j < group; ++j) {
        const int64_t head = g * group + j;
        Value query = rewriter.create<tensor::ExtractSliceOp>(
            loc, rowType, queries, ArrayRef<OpFoldResult>{index(j), zero},
            ArrayRef<OpFoldResult>{one, headDim}, ArrayRef<OpFoldResult>{one, one});
        Value queryCodes = rewriter.create<EncodeOp>(loc, queryCodesType, query, lsh);
        Value ids = rewriter.create<QueryOp>(loc, idsType, bucketIndex, queryCodes,
                                             rewriter.getI64IntegerAttr(0),
                                             rewriter.getI64IntegerAttr(lsh.getT()));
        Value prob =
            rewriter.create<CollisionProbOp>(loc, probType, query, center.getCentered(), ids, lsh);
        auto sampled = rewriter.create<WeightedSoftmaxOp>(loc, outType, lseType, query, keys,
                                                          values, ids, prob,
                                                          /*static_tokens=*/nullptr);
        auto exact = rewriter.create<DenseAttentionOp>(loc, outType, lseType, query, keys, values,
                                                       staticTokens);
        auto merged = rewriter.create<MergeOp>(loc, outType, lseType, sampled.getOutput(),
                                               sampled.getLse(), exact.getOutput(), exact.getLse());
        output = rewriter.create<tensor::InsertSliceOp>(
            loc, merged.getOutput(), output, ArrayRef<OpFoldResult>{index(head), zero},
            ArrayRef<OpFoldResult>{one, headDim}, ArrayRef<OpFoldResult>{one, one});
        lse = rewriter.create<tensor::InsertSliceOp>(
            loc, merged.getLse(), lse, ArrayRef<OpFoldResult>{index(head)},
            ArrayRef<OpFoldResult>{one}, ArrayRef<OpFoldResult>{one});
      }
    }

    // The op may spell a static dim as dynamic; keep its result types.
    auto castTo = [&](Value value, Type type) -> Value {
      if (value.getType() == type)
        return value;
      return rewriter.create<tensor::CastOp>(loc, type, value);
    };
    rewriter.replaceOp(
        op, {castTo(output, op.getOutput().getType()), castTo(lse, op.getLse().getType())});
    return success();
  }
};

struct PigDecompose : mlir::pig::impl::PigDecomposeBase<PigDecompose> {
  void runOnOperation() override {
    ConversionTarget target(getContext());
    target.addLegalDialect<PigDialect, tensor::TensorDialect, arith::ArithDialect,
                           func::FuncDialect>();
    target.addIllegalOp<SampledAttentionOp>();
    RewritePatternSet patterns(&getContext());
    patterns.add<DecomposeSampledAttention>(&getContext());
    if (failed(applyPartialConversion(getOperation(), target, std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
