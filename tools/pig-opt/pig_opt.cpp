//===- pig_opt.cpp - the pig optimizer driver -----------------------------===//
//
// Registers only what pig's IR uses (never InitAllDialects.h: it costs minutes to build).
//
//===----------------------------------------------------------------------===//

#include "pig/Dialect/PigDialect.h"
#include "pig/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::pig::PigDialect, mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
  mlir::pig::registerPigPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "pig optimizer: the pig dialect and its passes\n", registry));
}
