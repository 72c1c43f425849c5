//===- PigOps.h - pig operations --------------------------------*- C++ -*-===//

#ifndef PIG_DIALECT_PIGOPS_H
#define PIG_DIALECT_PIGOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "pig/Dialect/PigDialect.h"

#define GET_OP_CLASSES
#include "pig/Dialect/PigOps.h.inc"

#endif // PIG_DIALECT_PIGOPS_H
