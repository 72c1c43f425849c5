// Configure-time probe (cmake/PigNativeTargets.cmake): prints the Highway macro of the best SIMD
// target this machine runs among those the build compiles (HWY_DISABLED_TARGETS as the build's),
// e.g. "HWY_AVX3_DL"; "HWY_SCALAR" when it runs none.
#include <cstdint>
#include <cstdio>

#include <hwy/highway.h>
#include <hwy/targets.h>

int main() {
  const int64_t runnable = hwy::SupportedTargets() & HWY_TARGETS & ~int64_t(HWY_SCALAR);
  const int64_t best = runnable & -runnable; // lower bits are better targets
  std::printf("HWY_%s", best ? hwy::TargetName(best) : "SCALAR");
  return 0;
}
