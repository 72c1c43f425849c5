//===- PigBuilder.cpp - the IR of one decode step for a model shape -------===//

#include "pig/Dialect/PigBuilder.h"
#include "pig/Dialect/PigOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::pig;

namespace {
int64_t orDynamic(int64_t value) { return value > 0 ? value : ShapedType::kDynamic; }

/// The element type of keys and values ("f32", "bf16", "f16" or "q8").
Type elementType(MLIRContext *ctx, StringRef name) { return parseElementTypeName(ctx, name); }

/// The element type of queries: the keys' one, f32 when the keys are 8-bit (q8 is a storage
/// format of the KV cache, not of the activations).
Type queryElementType(MLIRContext *ctx, StringRef name) {
  Type type = elementType(ctx, name);
  return type && isQ8(type) ? Float32Type::get(ctx) : type;
}

/// Exact attention of each GQA group against its kv-head.
std::pair<Value, Value> buildDense(OpBuilder &b, Location loc, Value q, Value k, Value v) {
  auto qType = cast<RankedTensorType>(q.getType());
  auto kType = cast<RankedTensorType>(k.getType());
  auto vType = cast<RankedTensorType>(v.getType());
  const int64_t heads = qType.getDimSize(0), kvHeads = kType.getDimSize(0);
  const int64_t group = heads / kvHeads, d = qType.getDimSize(1);
  Type f32 = b.getF32Type();
  auto index = [&](int64_t i) -> OpFoldResult { return b.getIndexAttr(i); };
  OpFoldResult zero = index(0), one = index(1);
  Value output =
      b.create<tensor::EmptyOp>(loc, ArrayRef<OpFoldResult>{index(heads), index(d)}, f32);
  Value lse = b.create<tensor::EmptyOp>(loc, ArrayRef<OpFoldResult>{index(heads)}, f32);
  auto kvSlice = [&](Value source, RankedTensorType type, int64_t g) -> Value {
    auto sliceType =
        RankedTensorType::get({type.getDimSize(1), type.getDimSize(2)}, type.getElementType());
    return b.create<tensor::ExtractSliceOp>(
        loc, sliceType, source, ArrayRef<OpFoldResult>{index(g), zero, zero},
        ArrayRef<OpFoldResult>{one, tensor::getMixedSize(b, loc, source, 1), index(d)},
        ArrayRef<OpFoldResult>{one, one, one});
  };
  for (int64_t g = 0; g < kvHeads; ++g) {
    Value queries = b.create<tensor::ExtractSliceOp>(
        loc, RankedTensorType::get({group, d}, qType.getElementType()), q,
        ArrayRef<OpFoldResult>{index(g * group), zero},
        ArrayRef<OpFoldResult>{index(group), index(d)}, ArrayRef<OpFoldResult>{one, one});
    auto attention = b.create<DenseAttentionOp>(
        loc, RankedTensorType::get({group, d}, f32), RankedTensorType::get({group}, f32), queries,
        kvSlice(k, kType, g), kvSlice(v, vType, g), /*window=*/nullptr);
    output = b.create<tensor::InsertSliceOp>(
        loc, attention.getOutput(), output, ArrayRef<OpFoldResult>{index(g * group), zero},
        ArrayRef<OpFoldResult>{index(group), index(d)}, ArrayRef<OpFoldResult>{one, one});
    lse = b.create<tensor::InsertSliceOp>(
        loc, attention.getLse(), lse, ArrayRef<OpFoldResult>{index(g * group)},
        ArrayRef<OpFoldResult>{index(group)}, ArrayRef<OpFoldResult>{one});
  }
  return {output, lse};
}
} // namespace

void mlir::pig::loadPigDialects(MLIRContext &context) {
  context.loadDialect<PigDialect, func::FuncDialect, tensor::TensorDialect, arith::ArithDialect>();
}

std::pair<Value, Value> mlir::pig::buildAttention(OpBuilder &builder, Location loc, Value q,
                                                  Value k, Value v, bool dense,
                                                  const LshConfig &lsh,
                                                  const StaticConfig &staticTokens) {
  if (dense)
    return buildDense(builder, loc, q, k, v);
  MLIRContext *ctx = builder.getContext();
  auto qType = cast<RankedTensorType>(q.getType());
  Type f32 = builder.getF32Type();
  auto op = builder.create<SampledAttentionOp>(
      loc, RankedTensorType::get(qType.getShape(), f32),
      RankedTensorType::get({qType.getDimSize(0)}, f32), q, k, v,
      LshAttr::get(ctx, orDynamic(lsh.K), orDynamic(lsh.L), int64_t(lsh.t), lsh.seed,
                   StringRef(lsh.transform)),
      StaticTokensAttr::get(ctx, staticTokens.sink, staticTokens.local));
  return {op.getOutput(), op.getLse()};
}

func::FuncOp mlir::pig::buildAttentionFunction(ModuleOp module, StringRef name,
                                               const ModelShape &shape, bool dense,
                                               const LshConfig &lsh,
                                               const StaticConfig &staticTokens) {
  MLIRContext *ctx = module.getContext();
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  Location loc = NameLoc::get(builder.getStringAttr(name));
  Type element = elementType(ctx, shape.dtype);
  Type f32 = builder.getF32Type();
  auto qType =
      RankedTensorType::get({shape.heads, shape.headDim}, queryElementType(ctx, shape.dtype));
  auto kvType =
      RankedTensorType::get({shape.kvHeads, ShapedType::kDynamic, shape.headDim}, element);
  auto outType = RankedTensorType::get({shape.heads, shape.headDim}, f32);
  auto lseType = RankedTensorType::get({shape.heads}, f32);
  auto func = builder.create<func::FuncOp>(
      loc, name, builder.getFunctionType({qType, kvType, kvType}, {outType, lseType}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToStart(body);
  auto [output, lse] = buildAttention(builder, loc, body->getArgument(0), body->getArgument(1),
                                      body->getArgument(2), dense, lsh, staticTokens);
  builder.create<func::ReturnOp>(loc, ValueRange{output, lse});
  return func;
}

OwningOpRef<ModuleOp> mlir::pig::buildDecodeStep(MLIRContext &context, const ModelShape &shape,
                                                 const LshConfig &lsh,
                                                 const StaticConfig &staticTokens,
                                                 std::string &error) {
  loadPigDialects(context);
  if (!elementType(&context, shape.dtype)) {
    error = "unsupported element type '" + shape.dtype + "' (expected f32, bf16, f16 or q8)";
    return {};
  }
  if (shape.heads < 1 || shape.kvHeads < 1 || shape.headDim < 1 || shape.layers < 1) {
    error = "heads, kv-heads, head dim and layers must be positive";
    return {};
  }
  if (shape.heads % shape.kvHeads != 0) {
    error = "GQA: " + std::to_string(shape.heads) + " query heads cannot be grouped over " +
            std::to_string(shape.kvHeads) + " kv-heads (the group size must divide)";
    return {};
  }
  {
    // Attributes are checked before any is created (LshAttr::get asserts on bad values).
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      error = diag.str();
      return success();
    });
    auto emit = [&] { return emitError(UnknownLoc::get(&context)); };
    if (!LshAttr::getChecked(emit, &context, orDynamic(lsh.K), orDynamic(lsh.L), int64_t(lsh.t),
                             lsh.seed, StringRef(lsh.transform)) ||
        !StaticTokensAttr::getChecked(emit, &context, staticTokens.sink, staticTokens.local))
      return {};
  }
  for (int64_t layer : shape.denseLayers)
    if (layer < 0 || layer >= shape.layers) {
      error = "dense layer " + std::to_string(layer) + " is outside [0, " +
              std::to_string(shape.layers) + ")";
      return {};
    }

  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  for (int64_t layer = 0; layer < shape.layers; ++layer)
    buildAttentionFunction(*module, "layer" + std::to_string(layer), shape,
                           llvm::is_contained(shape.denseLayers, layer), lsh, staticTokens);

  // The verifiers own the rules (GQA divisibility, K/L/t ranges...): report their message.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diagnostics.empty())
      diagnostics = diag.str();
    return success();
  });
  if (failed(verify(*module))) {
    error = diagnostics.empty() ? "the built module does not verify" : diagnostics;
    return {};
  }
  return module;
}
