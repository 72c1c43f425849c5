// pig's dequantisation of every weight type against an independent implementation: the gguf
// package's NumPy dequantisers (python/dequant_oracle.py writes seeded random blocks and gguf's
// values; ctest runs it first as runtime.dequant_oracle.reference). The scalar decoder and every
// compiled Highway target must reproduce gguf's float32 values bit for bit: both compute the same
// products in the same order in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pig/runtime/ops.h"

namespace pig::runtime {
namespace {

std::vector<uint8_t> ReadFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class DequantOracle : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantOracle, MatchesTheGgufPackage) {
  const char *dir = std::getenv("PIG_DEQUANT_ORACLE_DIR");
  if (!dir)
    GTEST_SKIP() << "PIG_DEQUANT_ORACLE_DIR is not set: configured without PIG_PYTHON, so ctest "
                    "does not run python/dequant_oracle.py";
  const GgmlType t = GetParam();
  const std::string base = std::string(dir) + "/" + GgmlTypeName(t);
  const std::vector<uint8_t> blocks = ReadFile(base + ".blocks"), values = ReadFile(base + ".f32");
  const GgmlTypeInfo info = GgmlInfo(t);
  ASSERT_FALSE(blocks.empty()) << base << ".blocks is missing or empty (python/dequant_oracle.py)";
  ASSERT_EQ(blocks.size() % info.block_bytes, 0u);
  const size_t n = blocks.size() / info.block_bytes * info.block_elems;
  ASSERT_EQ(values.size(), n * sizeof(float)) << base << ".f32";
  std::vector<float> want(n);
  std::memcpy(want.data(), values.data(), values.size());

  std::vector<float> got(n, std::nanf(""));
  DequantizeRowScalar(t, blocks.data(), got.data(), n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[i], want[i]) << "scalar, element " << i << " (block " << i / info.block_elems
                               << ")";
  for (const Kernels &k : AllKernels()) {
    std::fill(got.begin(), got.end(), std::nanf(""));
    k.dequant_row(t, blocks.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], want[i]) << k.target << ", element " << i << " (block "
                                 << i / info.block_elems << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, DequantOracle,
                         ::testing::Values(GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                                           GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                           GgmlType::kQ6_K),
                         [](const ::testing::TestParamInfo<GgmlType> &info) {
                           return std::string(GgmlTypeName(info.param));
                         });

} // namespace
} // namespace pig::runtime
