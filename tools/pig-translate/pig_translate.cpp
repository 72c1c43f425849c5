//===- pig_translate.cpp - pig IR to C++ kernel sources -------------------===//
//
//   pig-translate --emit=cpu step.mlir -o pig_lsh_k10_l150_d128_bf16.cpp
//   pig-translate --emit=cpu-registry a.mlir b.mlir -o pig_register_generated_kernels.cpp
//   pig-translate --emit=cpu-plugin a.mlir b.mlir -o pig_kernel_plugin.cpp   (pig-kernel-tree)
//   pig-translate --emit=cuda a.mlir b.mlir -o pig_generated_cuda_kernels.cu
//
// Inputs are partitioned, fused pig IR (pig-opt --pig-decompose --pig-specialize=...
// --pig-partition=... --pig-fuse). Registers only the dialects pig IR uses.
//
//===----------------------------------------------------------------------===//

#include "pig/Codegen/Codegen.h"
#include "pig/Dialect/PigDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

namespace {
enum class Emit { Cpu, CpuRegistry, CpuPlugin, Cuda };

// Our options only in --help: the linked LLVM libraries register hundreds of their own.
llvm::cl::OptionCategory category("pig-translate options");
llvm::cl::list<std::string> inputs(llvm::cl::Positional, llvm::cl::desc("<input .mlir files>"),
                                   llvm::cl::cat(category));
llvm::cl::opt<std::string> output("o", llvm::cl::desc("output file (default: stdout)"),
                                  llvm::cl::value_desc("file"), llvm::cl::init("-"),
                                  llvm::cl::cat(category));
llvm::cl::opt<Emit>
    emit("emit", llvm::cl::desc("what to emit"), llvm::cl::Required, llvm::cl::cat(category),
         llvm::cl::values(
             clEnumValN(Emit::Cpu, "cpu", "the Highway TU of one configuration (one input)"),
             clEnumValN(Emit::CpuRegistry, "cpu-registry",
                        "pig_register_generated_kernels() for the configurations of all inputs"),
             clEnumValN(Emit::CpuPlugin, "cpu-plugin",
                        "pig_kernel_plugin(), a deployment kernel library's entry point, for "
                        "the configurations of all inputs (pig-kernel-tree)"),
             clEnumValN(Emit::Cuda, "cuda", "one CUDA TU for the GPU ops of all inputs")));
llvm::cl::opt<std::string>
    selfInclude("hwy-self-include",
                llvm::cl::desc("--emit=cpu: the name HWY_TARGET_INCLUDE gives the output file "
                               "(default pig_lsh_<key>.cpp)"),
                llvm::cl::init(""), llvm::cl::cat(category));
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(argc, argv, "pig-translate: pig IR to C++ kernel sources\n");
  if (inputs.empty())
    inputs.push_back("-");
  if (emit == Emit::Cpu && inputs.size() != 1) {
    llvm::errs() << "pig-translate: --emit=cpu takes exactly one input (one file per "
                    "configuration), got "
                 << inputs.size() << "\n";
    return 1;
  }

  DialectRegistry registry;
  registry.insert<mlir::pig::PigDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect>();
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false); // the message names the op; its dump would only be noise

  // One SourceMgr (and diagnostic handler) per input: the parser reads a SourceMgr's main file.
  std::vector<std::unique_ptr<llvm::SourceMgr>> sources;
  std::vector<std::unique_ptr<SourceMgrDiagnosticHandler>> handlers;
  std::vector<OwningOpRef<ModuleOp>> modules;
  std::vector<mlir::pig::KernelPlan> plans;
  for (const std::string &path : inputs) {
    std::string error;
    auto file = openInputFile(path, &error);
    if (!file) {
      llvm::errs() << "pig-translate: " << error << "\n";
      return 1;
    }
    sources.push_back(std::make_unique<llvm::SourceMgr>());
    sources.back()->AddNewSourceBuffer(std::move(file), llvm::SMLoc());
    handlers.push_back(std::make_unique<SourceMgrDiagnosticHandler>(*sources.back(), &context));
    OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(*sources.back(), &context);
    if (!module)
      return 1;
    FailureOr<mlir::pig::KernelPlan> plan = mlir::pig::planKernels(*module);
    if (failed(plan))
      return 1;
    plans.push_back(std::move(*plan));
    modules.push_back(std::move(module));
  }

  std::string text;
  llvm::raw_string_ostream os(text);
  LogicalResult emitted =
      emit == Emit::Cpu
          ? mlir::pig::emitCpuKernels(*modules.front(), plans.front(), os, {selfInclude})
      : emit == Emit::CpuRegistry ? mlir::pig::emitCpuRegistry(*modules.front(), plans, os)
      : emit == Emit::CpuPlugin   ? mlir::pig::emitCpuPlugin(*modules.front(), plans, os)
                                  : mlir::pig::emitCudaKernels(*modules.front(), plans, os);
  if (failed(emitted))
    return 1;

  // Written only on success: a failed run leaves no half-written source for the build. An
  // unchanged file is not rewritten, so its timestamp stays and the build (CMake's Ninja
  // custom commands restat their outputs) does not recompile it when only the tools changed.
  if (output != "-")
    if (auto existing = llvm::MemoryBuffer::getFile(output);
        existing && (*existing)->getBuffer() == os.str())
      return 0;
  std::string error;
  auto out = openOutputFile(output, &error);
  if (!out) {
    llvm::errs() << "pig-translate: " << error << "\n";
    return 1;
  }
  out->os() << os.str();
  out->keep();
  return 0;
}
