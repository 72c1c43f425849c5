// LSH sampling attention kernels (ALGORITHM.md section 1), per Highway target: query/key
// encoding, index build, retrieval, the fused sampled-attention pass, dense attention, merge.
//
// Every kernel is a template `template <int kK, int kL, int kD, typename T>` (or the subset of
// those parameters it uses) in which 0 means "taken from the run-time arguments" and T = void
// means "dtype taken from the arguments": MakeKernelSet<0, 0, 0, void> is the generic set, and a
// specialised set is an instantiation with constants, e.g. MakeKernelSet<10, 150, 64,
// hwy::bfloat16_t>. A specialised kernel checks (HWY_ASSERT) that the run-time arguments agree.
//
// ---- contract for generated code (pig-translate emits exactly this shape, one file per key) ---
//   #undef HWY_TARGET_INCLUDE
//   #define HWY_TARGET_INCLUDE "<path of this file, relative to an include dir>"
//   #include "hwy/foreach_target.h" // IWYU pragma: keep
//   #include "hwy/highway.h"
//   #include "runtime/kernels/lsh-inl.h"
//   HWY_BEFORE_NAMESPACE();
//   namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE {
//   pig::runtime::lsh::LshKernelSet Make() {
//     return pig::runtime::lsh::HWY_NAMESPACE::MakeKernelSet<10, 150, 64, hwy::bfloat16_t>();
//   }
//   } // namespace pig_lsh_k10_l150_d64_bf16::HWY_NAMESPACE
//   HWY_AFTER_NAMESPACE();
//   #if HWY_ONCE
//   namespace pig_lsh_k10_l150_d64_bf16 {
//   HWY_EXPORT(Make);
//   pig::runtime::lsh::LshKernelSet Factory() { return HWY_DYNAMIC_DISPATCH(Make)(); }
//   PIG_REGISTER_LSH_KERNELS(k10_l150_d64_bf16, 10, 150, 64, bf16, &Factory);
//   } // namespace pig_lsh_k10_l150_d64_bf16
//   #endif
// Rules: dtype is f32 (T = float), bf16 (T = hwy::bfloat16_t) or q8 (T = pig::runtime::lsh::Q8,
// d a multiple of 32); d must be even; K in [1, 16],
// L in [1, 1024]. The include path needs the project root (runtime/kernels/...) and
// runtime/include. The TU must be linked whole (its only reference is the static registrar):
// compile it into an OBJECT library or an executable, not a plain static archive.
// tests/kernels/generated_example.cpp is a compiled, tested instance of this contract.
// ------------------------------------------------------------------------------------------------
//
// The kernels live in one file per family, included below in this order:
//   lsh_common-inl.h    vector types, segment size, row element types, Pick
//   lsh_encode-inl.h    SimHash codes of queries and keys
//   lsh_build-inl.h     counting sort of the codes into the bucket tables
//   lsh_retrieve-inl.h  bucket walk, collision counting, union of the sample sets
//   lsh_attend-inl.h    sampled and dense passes (softmax blocks), merge
// and MakeKernelSet below puts one instantiation of each in an LshKernelSet.

#if defined(PIG_RUNTIME_KERNELS_LSH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_INL_H_
#endif

#include <type_traits>

#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/spec/lsh_params.h"
// The families in the order of a decode step (each includes what it needs).
// clang-format off
#include "runtime/kernels/lsh_common-inl.h"
#include "runtime/kernels/lsh_encode-inl.h"
#include "runtime/kernels/lsh_build-inl.h"
#include "runtime/kernels/lsh_retrieve-inl.h"
#include "runtime/kernels/lsh_attend-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

// The kernel set of this target for one configuration (all zeros and void: the generic set) and
// one schedule (pig/spec/schedule.h; the default unless given).
template <int kK, int kL, int kD, typename T, Schedule kS = Schedule{}>
LshKernelSet MakeKernelSet() {
  static_assert(kD % 2 == 0, "head dimension must be even");
  static_assert(!std::is_same_v<T, Q8> || kD % 32 == 0, "q8 rows need d a multiple of 32");
  static_assert(kK >= 0 && kK <= spec::kMaxK && kL >= 0 && kL <= spec::kMaxL,
                "K in [1, spec::kMaxK], L in [1, spec::kMaxL] (0: the generic set)");
  static_assert(kS.block == 16 || kS.block == 32 || kS.block == 64 || kS.block == 128,
                "schedule: block must be 16, 32, 64 or 128");
  static_assert(kS.prefetch >= 0 && kS.dense_prefetch >= 0 && kS.tables_ahead >= 0,
                "schedule: prefetch distances must be >= 0");
  LshKernelSet s;
  s.specialised = kK != 0 && kL != 0 && kD != 0 && !std::is_void_v<T>;
  if (s.specialised)
    s.key = KernelKey{kK, kL, kD, DTypeOf<T>(), Target::cpu};
  s.key.schedule = kS;
  s.simd_target = hwy::TargetName(HWY_TARGET);
  s.encode = &Encode<kK, kL, kD, T>;
  s.build_index = &BuildIndex<kK, kL>;
  s.retrieve = &Retrieve<kK, kL, kS.tables_ahead>;
  s.sampled_attention = &SampledAttention<kD, T, ForSampled(kS)>;
  s.dense_attention = &DenseAttention<kD, T, ForDense(kS)>;
  s.merge = &Merge<kD>;
  return s;
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_INL_H_ toggle
