//===- PigDialect.h - the pig dialect, its attributes and types -*- C++ -*-===//

#ifndef PIG_DIALECT_PIGDIALECT_H
#define PIG_DIALECT_PIGDIALECT_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include <cstdint>
#include <optional>
#include <string>

#include "pig/spec/kv_type.h"
#include "pig/spec/lsh_params.h"

namespace mlir::pig {
/// Codes are uint16: K bits per table, 2^K buckets per table (limits: pig/spec/lsh_params.h).
inline constexpr int64_t kMinBits = 1, kMaxBits = ::pig::spec::kMaxK;
inline constexpr int64_t kMinTables = 1, kMaxTables = ::pig::spec::kMaxL;
/// The discardable attribute that pig-partition sets on every placed op.
inline constexpr llvm::StringLiteral kDeviceAttrName = "pig.device";
/// The attribute that pig-specialize sets on every specialised function.
inline constexpr llvm::StringLiteral kKernelAttrName = "pig.kernel";
/// The attribute that pig-schedule sets on every function it schedules (#pig.schedule).
inline constexpr llvm::StringLiteral kScheduleAttrName = "pig.schedule";

/// Elements per block of a q8 row (!pig.q8; pig/spec/kv_type.h): the head dim of q8 keys and
/// values must be a multiple of it.
inline constexpr int64_t kQ8BlockElements = ::pig::spec::kQ8Block;

/// True for the floating-point element types pig ops accept for queries, keys and values
/// (f32, bf16, f16).
bool isSupportedElementType(Type type);
/// True for the element types of keys and values: the floating-point ones and !pig.q8.
bool isKvElementType(Type type);
/// True for !pig.q8.
bool isQ8(Type type);
/// The name kernel keys and manifests use for an element type: "f32", "bf16", "f16", "q8"
/// (!pig.q8); any other type as MLIR prints it.
std::string elementTypeName(Type type);
/// The element type a kernel key or manifest names ("f32", "bf16", "f16", "q8"); null for any
/// other name.
Type parseElementTypeName(MLIRContext *context, StringRef name);
/// The KV element type (pig/spec/kv_type.h) of f32, bf16 or !pig.q8; nullopt for any other type
/// (f16 included: no kernel stores it).
std::optional<::pig::spec::DType> kvDType(Type type);
} // namespace mlir::pig

#include "pig/Dialect/PigDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "pig/Dialect/PigAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "pig/Dialect/PigTypes.h.inc"

#endif // PIG_DIALECT_PIGDIALECT_H
