// Included first by the Highway translation units only tests and benchmarks use (their
// CMakeLists call pig_native_targets_only, cmake/PigNativeTargets.cmake): with
// PIG_HWY_ONLY_TARGET set, foreach_target compiles that target and the scalar fallback instead of
// every target of the build's HWY_DISABLED_TARGETS. Dispatch on another CPU then takes the scalar
// code, which computes the same results.
#ifndef PIG_TESTS_NATIVE_TARGETS_H
#define PIG_TESTS_NATIVE_TARGETS_H
#ifdef PIG_HWY_ONLY_TARGET
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (~(PIG_HWY_ONLY_TARGET | HWY_SCALAR | HWY_EMU128))
#endif
#endif // PIG_TESTS_NATIVE_TARGETS_H
