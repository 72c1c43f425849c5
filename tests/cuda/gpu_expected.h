// Whether this machine should have a usable GPU, decided without CUDA: the CUDA tests skip where
// pig::cuda::device_count() is 0, so a device_count() that wrongly said 0 (or a broken driver
// install) would turn them all into skips. Where a GPU is expected they fail instead.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "pig/cuda/lsh_cuda.h"

namespace pig::cuda::testing {

/// Why a GPU is expected here ("" where it is not): PIG_EXPECT_GPU=1, or an NVIDIA device node
/// (/dev/nvidia0) while CUDA_VISIBLE_DEVICES does not hide every device.
inline std::string GpuExpectedBecause() {
  if (const char *e = std::getenv("PIG_EXPECT_GPU"); e && std::string(e) == "1")
    return "PIG_EXPECT_GPU=1";
  if (const char *v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string s = v;
    if (s.empty() || s == "-1" || s == "NoDevFiles")
      return "";
  }
  std::error_code ec;
  if (std::filesystem::exists("/dev/nvidia0", ec))
    return "/dev/nvidia0 exists";
  return "";
}

} // namespace pig::cuda::testing

/// In a test body: skip where no GPU is usable, fail where one is expected (GpuExpectedBecause).
#define PIG_REQUIRE_GPU()                                                                          \
  do {                                                                                             \
    if (::pig::cuda::device_count() == 0) {                                                        \
      const std::string pig_expected_ = ::pig::cuda::testing::GpuExpectedBecause();                \
      if (!pig_expected_.empty())                                                                  \
        FAIL() << "device_count() is 0 although a GPU is expected (" << pig_expected_ << ")";      \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or found none): "                 \
                      "the kernels are compiled but not run here";                                 \
    }                                                                                              \
  } while (0)
