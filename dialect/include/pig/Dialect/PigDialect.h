//===- PigDialect.h - the pig dialect, its attributes and types -*- C++ -*-===//

#ifndef PIG_DIALECT_PIGDIALECT_H
#define PIG_DIALECT_PIGDIALECT_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include <cstdint>

namespace mlir::pig {
/// Codes are uint16: K bits per table, 2^K buckets per table.
inline constexpr int64_t kMinBits = 1, kMaxBits = 16;
inline constexpr int64_t kMinTables = 1, kMaxTables = 1024;
/// The discardable attribute that pig-partition sets on every placed op.
inline constexpr llvm::StringLiteral kDeviceAttrName = "pig.device";
/// The attribute that pig-specialize sets on every specialised function.
inline constexpr llvm::StringLiteral kKernelAttrName = "pig.kernel";
/// The attribute that pig-schedule sets on every function it schedules (#pig.schedule).
inline constexpr llvm::StringLiteral kScheduleAttrName = "pig.schedule";

/// True for the element types pig ops accept for queries, keys and values.
bool isSupportedElementType(Type type);
} // namespace mlir::pig

#include "pig/Dialect/PigDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "pig/Dialect/PigAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "pig/Dialect/PigTypes.h.inc"

#endif // PIG_DIALECT_PIGDIALECT_H
