//===- Passes.h - pig passes ------------------------------------*- C++ -*-===//

#ifndef PIG_PASSES_PASSES_H
#define PIG_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>
#include <string>

namespace mlir::pig {
#define GEN_PASS_DECL
#include "pig/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

#endif // PIG_PASSES_PASSES_H
