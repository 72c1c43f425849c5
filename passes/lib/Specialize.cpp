//===- Specialize.cpp - fold (K, L, d, dtype) into the IR -----------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>

#include "pig/spec/kernel_key.h"
#include "pig/spec/kv_type.h"
#include "pig/spec/lsh_params.h"

namespace mlir::pig {
#define GEN_PASS_DEF_PIGSPECIALIZE
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

using namespace mlir;
using namespace mlir::pig;

namespace {
/// Head dims for which kernels are generated (tiles are specialised per head dim).
constexpr int64_t kKernelHeadDims[] = {64, 128};

/// One kernel configuration; 0 / empty means "not fixed". dtype is the dialect's name of the
/// keys' element type (pig/spec/kv_type.h's names, or f16, which has no kernel).
struct Config {
  int64_t k = 0, l = 0, d = 0;
  std::string dtype;

  /// "K=10 L=150 d=128 bf16": spec::KernelKey's spelling (also for incomplete configurations).
  std::string str() const {
    return "K=" + std::to_string(k) + " L=" + std::to_string(l) + " d=" + std::to_string(d) + " " +
           dtype;
  }
};

/// Reads manifest lines with pig::spec::parse_manifest_line (`K=10 L=150 d=128 bf16`, element
/// type f32, bf16 or q8, optionally followed by schedule knobs `gqa=union block=32`, checked
/// against pig/spec/schedule.h; pig-schedule attaches them); `#` starts a comment. Lines that
/// differ only in their schedule are one configuration here.
FailureOr<SmallVector<Config>> parseManifest(StringRef path, std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot read manifest '" + path.str() + "': " + buffer.getError().message();
    return failure();
  }
  SmallVector<Config> configs;
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (auto [number, rawLine] : llvm::enumerate(lines)) {
    ::pig::spec::ManifestError why;
    const std::optional<::pig::spec::ManifestLine> parsed =
        ::pig::spec::parse_manifest_line(std::string_view(rawLine.data(), rawLine.size()), &why);
    const std::string where = "manifest '" + path.str() + "' line " + std::to_string(number + 1);
    if (!parsed) {
      const std::string line = rawLine.split('#').first.trim().str();
      error =
          why.about_word ? where + ": " + why.message : where + " ('" + line + "'): " + why.message;
      return failure();
    }
    if (parsed->blank)
      continue;
    const ::pig::spec::KernelKey &key = parsed->key;
    Config config{key.K, key.L, key.d, ::pig::spec::name(key.dtype)};
    if (llvm::none_of(configs, [&](const Config &other) { return other.str() == config.str(); }))
      configs.push_back(config);
  }
  return configs;
}

/// The operand of `op` whose element type is the kernel's (the keys'; the input of an encode,
/// which may be keys or queries); null for ops without one.
Value kernelTypedOperand(Operation *op) {
  if (isa<CenterOp, EncodeOp>(op))
    return op->getOperand(0);
  if (isa<CollisionProbOp, WeightedSoftmaxOp, SampledSoftmaxFusedOp, DenseAttentionOp,
          SampledAttentionOp>(op))
    return op->getOperand(1);
  return {};
}

/// What a function already fixes: K, L and the hash transform of its `#pig.lsh`, head dim of
/// its operands and element type of its keys and values. Fails on disagreement. The transform
/// is not part of the kernel configuration (the kernels serve every transform): it is only
/// checked, never chosen. With q8 keys and values, queries are floating point: an encode of
/// floats (a query encode) then agrees with the q8 keys.
LogicalResult collectFromIR(func::FuncOp func, Config &fixed, std::string &transform) {
  LogicalResult result = success();
  auto fix = [&](Operation *op, int64_t &slot, int64_t value, StringRef what) {
    if (ShapedType::isDynamic(value) || value == 0)
      return;
    if (slot != 0 && slot != value) {
      op->emitOpError() << "uses " << what << " = " << value << " but the function already uses "
                        << what << " = " << slot << ": one kernel configuration per function";
      result = failure();
    }
    slot = value;
  };
  // Encodes hash keys or queries: their element type is checked once the keys' is known.
  SmallVector<std::pair<Operation *, std::string>> encodes;
  func.walk([&](Operation *op) {
    if (op->getDialect() == nullptr || !isa<PigDialect>(op->getDialect()))
      return;
    for (NamedAttribute attr : op->getAttrs())
      if (auto lsh = dyn_cast<LshAttr>(attr.getValue())) {
        fix(op, fixed.k, lsh.getK(), "K");
        fix(op, fixed.l, lsh.getL(), "L");
        if (!transform.empty() && transform != lsh.getTransform()) {
          op->emitOpError() << "uses hash transform \"" << lsh.getTransform()
                            << "\" but the function already uses \"" << transform
                            << "\": one transform per function";
          result = failure();
        }
        transform = lsh.getTransform().str();
      }
    if (isa<TransferOp, MergeOp, BuildIndexOp, QueryOp>(op) || op->getNumOperands() == 0)
      return;
    auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    if (!type || type.getRank() < 2)
      return;
    fix(op, fixed.d, type.getShape().back(), "d");
    Value typed = kernelTypedOperand(op);
    if (!typed)
      return;
    std::string dtype = elementTypeName(cast<ShapedType>(typed.getType()).getElementType());
    if (isa<EncodeOp>(op)) {
      encodes.emplace_back(op, dtype);
      return;
    }
    if (!fixed.dtype.empty() && fixed.dtype != dtype) {
      op->emitOpError() << "uses element type " << dtype << " but the function already uses "
                        << fixed.dtype;
      result = failure();
    }
    fixed.dtype = dtype;
  });
  for (auto &[op, dtype] : encodes) {
    if (fixed.dtype == "q8" && dtype != "q8")
      continue; // a query encode of a q8 step
    if (!fixed.dtype.empty() && fixed.dtype != dtype) {
      op->emitOpError() << "uses element type " << dtype << " but the function already uses "
                        << fixed.dtype;
      result = failure();
    }
    fixed.dtype = dtype;
  }
  return result;
}

bool agrees(int64_t want, int64_t have) { return want == 0 || have == 0 || want == have; }
bool agrees(const std::string &want, const std::string &have) {
  return want.empty() || have.empty() || want == have;
}
bool agrees(const Config &a, const Config &b) {
  return agrees(a.k, b.k) && agrees(a.l, b.l) && agrees(a.d, b.d) && agrees(a.dtype, b.dtype);
}
Config combine(const Config &a, const Config &b) {
  return {a.k ? a.k : b.k, a.l ? a.l : b.l, a.d ? a.d : b.d, a.dtype.empty() ? b.dtype : a.dtype};
}

/// Reasons no kernel can serve `config`; empty when one can.
std::string unservable(const Config &config, int64_t maxThreshold) {
  using ::pig::spec::kMaxK;
  using ::pig::spec::kMaxL;
  if (config.k == 0 || config.l == 0 || config.d == 0 || config.dtype.empty())
    return "the configuration is incomplete (" + config.str() +
           "): give k=, l=, d=, dtype= or a manifest";
  if (config.k < 1 || config.k > kMaxK)
    return "K=" + std::to_string(config.k) + " is outside [1, " + std::to_string(kMaxK) +
           "] (uint16 codes)";
  if (config.l < 1 || config.l > kMaxL)
    return "L=" + std::to_string(config.l) + " is outside [1, " + std::to_string(kMaxL) + "]";
  if (config.l < maxThreshold)
    return "L=" + std::to_string(config.l) +
           " is smaller than the collision threshold t=" + std::to_string(maxThreshold);
  const std::optional<::pig::spec::DType> dtype = ::pig::spec::parse_dtype(config.dtype);
  if (dtype == ::pig::spec::DType::q8 && !::pig::spec::supports_head_dim(*dtype, config.d))
    return std::string("q8 keys and values need a head dim that is a multiple of ") +
           std::to_string(::pig::spec::kQ8Block) +
           " (whole q8 blocks), not d=" + std::to_string(config.d);
  if (!llvm::is_contained(kKernelHeadDims, config.d))
    return "head dim d=" + std::to_string(config.d) + " has no kernel (kernels exist for 64, 128)";
  if (!dtype)
    return std::string("element type ") + config.dtype + " has no kernel (kernels exist for " +
           ::pig::spec::dtype_names() + ")";
  return {};
}

int64_t fold(int64_t value, int64_t config) {
  return ShapedType::isDynamic(value) ? config : value;
}

/// `type` with a `?` head dim replaced by d. In pig IR the last dim of every floating-point or
/// q8 tensor of rank >= 2 (queries, keys, values, outputs, means) is the head dim; the leading
/// dims (heads, tokens) stay as they are.
RankedTensorType withHeadDim(Type type, int64_t d) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.getRank() < 2 ||
      !(isa<FloatType>(tensor.getElementType()) || isQ8(tensor.getElementType())) ||
      !ShapedType::isDynamic(tensor.getShape().back()))
    return {};
  SmallVector<int64_t> shape(tensor.getShape());
  shape.back() = d;
  return RankedTensorType::get(shape, tensor.getElementType(), tensor.getEncoding());
}

/// A pig op (or the return) reading a `tensor.cast` reads the cast's source instead: pig ops
/// accept any compatible shape, so the static type the canonicalizer found reaches the pig op,
/// and the function's result types follow (foldConfig rebuilds them from the return).
struct AbsorbCastIntoPigOp : RewritePattern {
  explicit AbsorbCastIntoPigOp(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (!isa<func::ReturnOp>(op) && (!op->getDialect() || !isa<PigDialect>(op->getDialect())))
      return failure();
    bool changed = false;
    for (OpOperand &operand : op->getOpOperands()) {
      auto cast = operand.get().getDefiningOp<tensor::CastOp>();
      if (!cast || !isa<RankedTensorType>(cast.getSource().getType()))
        continue;
      rewriter.modifyOpInPlace(op, [&] { operand.set(cast.getSource()); });
      changed = true;
    }
    return success(changed);
  }
};

/// Pig op results whose head dim is `?` while their operands fix it get the static type.
/// Returns whether any type changed.
bool retypePigResults(func::FuncOp func, int64_t d) {
  bool changed = false;
  func.walk([&](Operation *op) {
    if (!op->getDialect() || !isa<PigDialect>(op->getDialect()))
      return;
    for (Value result : op->getResults())
      if (RankedTensorType type = withHeadDim(result.getType(), d)) {
        result.setType(type);
        changed = true;
      }
  });
  return changed;
}

/// Folds a `?` head dim into static shapes (issue 3 folded only K and L): the function's
/// arguments get the configured d, then tensor.dim / extract_slice / insert_slice / empty are
/// canonicalized to static sizes and pig op results follow. The element type needs no folding
/// (MLIR element types are never dynamic); collectFromIR already checked it against the
/// configuration.
LogicalResult foldHeadDim(func::FuncOp func, int64_t d) {
  if (func.isExternal())
    return success();
  bool dynamic = false;
  for (BlockArgument arg : func.front().getArguments())
    if (RankedTensorType type = withHeadDim(arg.getType(), d)) {
      arg.setType(type);
      dynamic = true;
    }
  if (!dynamic)
    return success();
  MLIRContext *ctx = func.getContext();
  RewritePatternSet patterns(ctx);
  tensor::DimOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::ExtractSliceOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::InsertSliceOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::EmptyOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::CastOp::getCanonicalizationPatterns(patterns, ctx);
  patterns.add<AbsorbCastIntoPigOp>(ctx);
  FrozenRewritePatternSet frozen(std::move(patterns));
  // Each round makes more operands static; pig results follow their operands. Two rounds
  // suffice for the decomposed step (slices, then the merged outputs); bound it anyway.
  for (int round = 0; round < 8; ++round) {
    if (failed(applyPatternsAndFoldGreedily(func, frozen)))
      return func.emitError() << "pig-specialize: could not fold head dim d = " << d;
    if (!retypePigResults(func, d))
      break;
  }
  return success();
}

/// Replaces every `?` K and L in the function's attributes and codes / index types.
void foldConfig(func::FuncOp func, const Config &config) {
  MLIRContext *ctx = func.getContext();
  auto retype = [&](Value value) {
    if (auto codes = dyn_cast<CodesType>(value.getType()))
      value.setType(CodesType::get(ctx, codes.getRows(), fold(codes.getTables(), config.l),
                                   fold(codes.getBits(), config.k)));
    else if (auto index = dyn_cast<BucketIndexType>(value.getType()))
      value.setType(BucketIndexType::get(ctx, fold(index.getTables(), config.l),
                                         fold(index.getBits(), config.k)));
  };
  func.walk([&](Operation *op) {
    for (NamedAttribute attr : op->getAttrs())
      if (auto lsh = dyn_cast<LshAttr>(attr.getValue()))
        op->setAttr(attr.getName(),
                    LshAttr::get(ctx, fold(lsh.getK(), config.k), fold(lsh.getL(), config.l),
                                 lsh.getT(), lsh.getSeed(), lsh.getTransform()));
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          retype(arg);
    for (Value result : op->getResults())
      retype(result);
  });
  SmallVector<Type> results;
  func.walk([&](func::ReturnOp ret) {
    results.assign(ret.getOperandTypes().begin(), ret.getOperandTypes().end());
  });
  func.setType(FunctionType::get(ctx, func.front().getArgumentTypes(), results));
  Type dtype = parseElementTypeName(ctx, config.dtype); // unservable() checked the name
  func->setAttr(kKernelAttrName, KernelAttr::get(ctx, config.k, config.l, config.d, dtype));
}

struct PigSpecialize : mlir::pig::impl::PigSpecializeBase<PigSpecialize> {
  using PigSpecializeBase::PigSpecializeBase;

  void runOnOperation() override {
    Config requested{k, l, d, dtype};
    SmallVector<Config> candidates{requested};
    if (!manifest.empty()) {
      std::string error;
      auto listed = parseManifest(manifest, error);
      if (failed(listed)) {
        getOperation().emitError() << error;
        return signalPassFailure();
      }
      candidates.clear();
      for (const Config &entry : *listed)
        if (agrees(requested, entry))
          candidates.push_back(combine(requested, entry));
    }

    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      bool usesPig = false;
      int64_t maxThreshold = 1;
      func.walk([&](Operation *op) {
        if (op->getDialect() && isa<PigDialect>(op->getDialect()))
          usesPig = true;
        for (NamedAttribute attr : op->getAttrs())
          if (auto lsh = dyn_cast<LshAttr>(attr.getValue()))
            maxThreshold = std::max(maxThreshold, lsh.getT());
        if (auto query = dyn_cast<QueryOp>(op))
          maxThreshold = std::max<int64_t>(maxThreshold, query.getThreshold());
      });
      if (!usesPig)
        continue;
      Config fixed;
      std::string transform;
      if (failed(collectFromIR(func, fixed, transform)))
        return signalPassFailure();

      SmallVector<Config> matching;
      for (const Config &candidate : candidates)
        if (agrees(candidate, fixed))
          matching.push_back(combine(candidate, fixed));
      if (matching.empty()) {
        func.emitError() << "no kernel configuration serves this function (it fixes " << fixed.str()
                         << ")" << (manifest.empty() ? "" : "; the manifest has no matching entry");
        return signalPassFailure();
      }
      if (matching.size() > 1) {
        func.emitError() << matching.size() << " manifest entries match this function ("
                         << fixed.str() << "); choose one with k=, l=, d=, dtype=";
        return signalPassFailure();
      }
      if (std::string reason = unservable(matching.front(), maxThreshold); !reason.empty()) {
        func.emitError() << "no kernel can serve this function: " << reason;
        return signalPassFailure();
      }
      // The transform must suit the head dim the function is specialised to (pca:r=R needs
      // R <= d); with a static d the op verifiers have checked it already.
      std::string why = transform.empty() ? std::string()
                                          : LshAttr::checkTransform(transform, matching.front().d);
      if (!why.empty()) {
        func.emitError() << "hash transform \"" << transform
                         << "\" is invalid for head dim d = " << matching.front().d << ": " << why;
        return signalPassFailure();
      }
      if (failed(foldHeadDim(func, matching.front().d)))
        return signalPassFailure();
      foldConfig(func, matching.front());
    }
  }
};
} // namespace
