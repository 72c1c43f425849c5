//===- PigBuilder.h - the IR of one decode step for a model shape -*- C++ -*-===//
//
// The C++ entry point that codegen and the runtime use to describe a model's attention in the
// pig dialect: one function per layer, sampled (pig.sampled_attention) or dense.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_DIALECT_PIGBUILDER_H
#define PIG_DIALECT_PIGBUILDER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "pig/spec/lsh_params.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlir::pig {

/// The attention shape of a model.
struct ModelShape {
  int64_t heads = 32;                      ///< query heads H
  int64_t kvHeads = 8;                     ///< kv-heads Hkv (H must be a multiple)
  int64_t headDim = 128;                   ///< d
  int64_t layers = 32;                     ///< number of layers
  std::vector<int64_t> denseLayers{0, 16}; ///< layers attended densely
  /// f32, bf16, f16 or q8: the element type of keys and values and, except for q8 (8-bit keys
  /// and values, !pig.q8), of queries; q8 steps take f32 queries. q8 needs headDim % 32 == 0.
  std::string dtype = "bf16";
};

/// LSH configuration: (K, L, t) (the pig::spec::LshParams base; {K, L, t, seed} initialises);
/// K or L <= 0 leaves them generic (`?`) for pig-specialize to fold. `transform` is the hashing
/// space (a pig::spec::TransformSpec: "plain", "pca:r=R", "whiten:a=A", "mips:q=Q",
/// "whiten:a=A+mips:q=Q"), canonicalised into #pig.lsh and checked against the head dim.
struct LshConfig : ::pig::spec::LshParams {
  uint64_t seed = 0;
  std::string transform = "plain";
};

/// Static tokens: the attention sink and the local window.
struct StaticConfig {
  int64_t sink = 4, local = 64;
};

/// Appends the attention of one layer at `builder`'s insertion point: `q` is H x d, `k` and `v`
/// are Hkv x n x d. Returns the output (H x d, f32) and the log-sum-exps (H, f32).
std::pair<Value, Value> buildAttention(OpBuilder &builder, Location loc, Value q, Value k, Value v,
                                       bool dense, const LshConfig &lsh,
                                       const StaticConfig &staticTokens);

/// Appends `func.func @<name>(q, k, v) -> (output, lse)` for one layer to `module`.
func::FuncOp buildAttentionFunction(ModuleOp module, StringRef name, const ModelShape &shape,
                                    bool dense, const LshConfig &lsh,
                                    const StaticConfig &staticTokens);

/// A module with one function per layer, `@layer<i>`; sampled unless the layer is listed in
/// `shape.denseLayers`. Returns null and sets `error` when the shape or configuration is
/// invalid (the message says why).
OwningOpRef<ModuleOp> buildDecodeStep(MLIRContext &context, const ModelShape &shape,
                                      const LshConfig &lsh, const StaticConfig &staticTokens,
                                      std::string &error);

/// Loads the dialects the built IR uses (pig, func, tensor, arith).
void loadPigDialects(MLIRContext &context);

} // namespace mlir::pig

#endif // PIG_DIALECT_PIGBUILDER_H
