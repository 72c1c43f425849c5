//===- Codegen.h - pig IR to Highway C++ / CUDA C++ ---------------------===//
//
// pig-translate's logic. A kernel plan is read from partitioned, fused pig IR (the output of
// `pig-opt --pig-decompose --pig-specialize=... --pig-partition=... --pig-fuse`): the one kernel
// configuration (K, L, d, dtype) of its functions, their schedule (pig.schedule, set by
// pig-schedule; the default schedule where a function has none), what pig-fuse decided, and which
// pig ops run on which device. The
// emitters turn plans into C++ that instantiates the hand-written kernel templates with those
// constants and registers them:
//   - emitCpuKernels: one Highway TU per configuration and schedule (the "contract for generated
//     code" of runtime/kernels/lsh-inl.h: MakeKernelSet<K, L, d, T, Schedule{...}>, registered
//     under the key with the schedule, plus an explicit Register() function);
//   - emitCpuRegistry: the TU defining pig_register_generated_kernels(), which calls every
//     Register() (so registration survives static linking);
//   - emitCudaKernels: one .cu TU for all configurations (nvcc compiles it for every
//     architecture: one TU keeps the build short) instantiating runtime/cuda's templates for
//     the ops placed on the GPU, with pig_register_generated_cuda_kernels(). The CUDA kernels
//     have no schedule knobs: plans differing only in their schedule share one instantiation.
//     There are no CUDA kernels for q8 keys and values: a q8 plan is an error there.
// Output depends only on the IR: the same IR gives the same bytes.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_CODEGEN_CODEGEN_H
#define PIG_CODEGEN_CODEGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include "pig/spec/kernel_key.h" // brings ::pig: write mlir::pig:: after using namespace mlir

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlir::pig {

/// What one module asks for: its kernel configuration and schedule, what pig-fuse decided, and
/// the pig ops per device.
struct KernelPlan {
  int64_t k = 0, l = 0, d = 0;
  std::string dtype; ///< "f32", "bf16" or "q8" (!pig.q8 keys and values; no CUDA kernels)
  /// The hash transform of the ops' #pig.lsh (canonical pig::spec::TransformSpec::str(), one per
  /// module). Data to the kernels (the key and query maps, stored key norms), not code: it is
  /// not part of the key, the symbols or the registry, and only the header comment names it.
  std::string transform = "plain";
  /// The functions' pig.schedule; the default schedule when they have none (scheduled = false).
  ::pig::spec::Schedule schedule{};
  bool scheduled = false;
  /// What pig-fuse decided, read from the IR: the encodes whose codes only pig.query reads
  /// (query encodes), the widest of them in rows (query heads hashed together: a GQA group
  /// when fused, 1 when each head is encoded alone), the queries they serve, and the sampled
  /// softmaxes fused with their collision probabilities.
  int queryEncodes = 0, queries = 0, fusedSoftmaxes = 0;
  int64_t queryHeadsPerEncode = 0;
  /// Names of the functions the plan was read from, in module order.
  std::vector<std::string> functions;
  /// Op name ("pig.encode") -> how many, per device. std::map: deterministic order.
  std::map<std::string, int> cpuOps, gpuOps;

  /// "k10_l150_d128_bf16_g0_b64_p8_dp64_ta8_pa0": the suffix of generated namespaces and file
  /// names (key and schedule: two schedules of one key give two TUs).
  std::string symbol() const;
  /// "k10_l150_d128_bf16": the key alone (the CUDA instantiations, which have no schedule).
  std::string keySymbol() const;
  /// The configuration and schedule as pig::spec::KernelKey (planKernels only makes plans whose
  /// configuration some kernel serves: dtype is one of pig/spec/kv_type.h's names).
  ::pig::spec::KernelKey key() const;
  /// "K=10 L=150 d=128 bf16" (the kernel key, as records name it).
  std::string str() const;
  /// "K=10 L=150 d=128 bf16 gqa=per_head block=64 ..." (a manifest line with every knob).
  std::string strWithSchedule() const;
};

/// Reads and checks the plan of a module. Reports every problem as an error diagnostic on the
/// op or function concerned (unspecialised K / L / d, an op with no kernel, a missing
/// pig.kernel or pig.device, several configurations or hash transforms in one module) and
/// fails.
FailureOr<KernelPlan> planKernels(ModuleOp module);

struct CpuEmitOptions {
  /// What the TU's HWY_TARGET_INCLUDE names (the generated file itself, relative to an include
  /// directory). Empty: "pig_lsh_<symbol>.cpp".
  std::string selfInclude;
};

/// The Highway TU of one plan. Fails (with a diagnostic on `module`) when no op runs on the CPU.
LogicalResult emitCpuKernels(ModuleOp module, const KernelPlan &plan, llvm::raw_ostream &os,
                             const CpuEmitOptions &options = {});
/// The registration TU of several plans (each configuration once).
LogicalResult emitCpuRegistry(ModuleOp anchor, llvm::ArrayRef<KernelPlan> plans,
                              llvm::raw_ostream &os);
/// The entry point of a deployment's kernel library (pig-kernel-tree): pig_kernel_plugin(), the
/// plans' keys and factories for lsh::LoadKernelPlugin (pig/runtime/kernel_plugin.h). Its TUs
/// are the plans' --emit=cpu TUs compiled with PIG_KERNEL_PLUGIN (no registration of their own).
LogicalResult emitCpuPlugin(ModuleOp anchor, llvm::ArrayRef<KernelPlan> plans,
                            llvm::raw_ostream &os);
/// The CUDA TU of several plans. Fails when a plan places nothing on the GPU or places an op
/// without a CUDA kernel there, or has an element type without CUDA kernels (q8).
LogicalResult emitCudaKernels(ModuleOp anchor, llvm::ArrayRef<KernelPlan> plans,
                              llvm::raw_ostream &os);

} // namespace mlir::pig

#endif // PIG_CODEGEN_CODEGEN_H
