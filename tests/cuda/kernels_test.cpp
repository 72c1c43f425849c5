// Whole CUDA kernels against pig::ref. Built when nvcc exists; every test skips with a message
// where no GPU is usable (device_count() == 0), so CI without a GPU still compiles and links it,
// and fails instead where a GPU is expected (gpu_expected.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <vector>

#include "cuda_test_util.h"
#include "gpu_expected.h"
#include "pig/cuda/lsh_cuda.h"
#include "pig/reference/reference.h"

namespace pig::cuda {
namespace {

using testing::Shape;

// device_count() finds the GPU where one is expected (a count of 0 there would silently skip
// every other test), reports none where none is, and answers the same when asked again (the
// error a failed cudaGetDeviceCount leaves must not stick).
TEST(CudaKernels, DeviceCountFindsTheExpectedGpu) {
  const int n = device_count();
  const std::string expected = testing::GpuExpectedBecause();
  if (!expected.empty()) {
    EXPECT_GE(n, 1) << "a GPU is expected here (" << expected << ")";
  }
  EXPECT_GE(n, 0);
  EXPECT_EQ(device_count(), n);
  if (expected.empty() && n == 0)
    GTEST_SKIP() << "no GPU here and none expected (no /dev/nvidia0, PIG_EXPECT_GPU unset)";
}

struct Case {
  Shape shape;
  DType dtype;
};

void PrintTo(const Case &c, std::ostream *os) {
  *os << "K=" << c.shape.K << " L=" << c.shape.L << " d=" << c.shape.d
      << (c.dtype == DType::f32 ? " f32" : " bf16");
}

class CudaKernelsP : public ::testing::TestWithParam<Case> {
protected:
  CudaKernelKey key() const {
    const Case c = GetParam();
    return {c.shape.K, c.shape.L, c.shape.d, c.dtype};
  }
  /// The problem's K/V/q in the key's storage type (bf16 rounds the floats in place).
  static std::vector<std::uint8_t> store(std::vector<float> &values, DType dtype) {
    if (dtype == DType::f32)
      return {reinterpret_cast<const std::uint8_t *>(values.data()),
              reinterpret_cast<const std::uint8_t *>(values.data() + values.size())};
    const std::vector<bf16> bits = testing::round_to_bf16(values);
    return {reinterpret_cast<const std::uint8_t *>(bits.data()),
            reinterpret_cast<const std::uint8_t *>(bits.data() + bits.size())};
  }
};

TEST_P(CudaKernelsP, CenterEncodeAndIndexEqualReference) {
  PIG_REQUIRE_GPU();
  const CudaKernelKey k = key();
  testing::Problem p = testing::make_problem(2, 1, 3000, k.d, 31);
  const std::vector<std::uint8_t> keys = store(p.k, k.dtype);
  const std::vector<std::uint8_t> queries = store(p.q, k.dtype);
  const ref::LshConfig cfg{k.K, k.L, 2, 0};
  const ref::OwnedMatrix W = ref::simhash_matrix(0, std::size_t(k.d), k.K, k.L);
  const ref::LshIndex index =
      ref::build_index(testing::head_matrix(p.k, 0, p.n, k.d), W, cfg, {4, 64});
  const std::int64_t begin = std::int64_t(index.split.indexed_begin);
  const std::int64_t count = std::int64_t(index.split.indexed());

  // Centering: double sums in blocks, so at most one float rounding apart from the reference.
  const std::vector<float> mean =
      host::center_mean(k, keys.data(), std::int64_t(p.n), begin, begin + count);
  for (int c = 0; c < k.d; ++c)
    EXPECT_NEAR(mean[std::size_t(c)], index.mean[std::size_t(c)],
                std::abs(index.mean[std::size_t(c)]) * 1.2e-7f)
        << c;

  // Key codes from the reference mean: bit-identical to pig::ref.
  const std::size_t bytes = k.dtype == DType::f32 ? 4 : 2;
  const std::vector<std::uint16_t> codes =
      host::encode(k, keys.data() + std::size_t(begin) * std::size_t(k.d) * bytes, count,
                   index.mean.data(), W.data.data(), std::int64_t(W.cols));
  ASSERT_EQ(codes, index.codes);

  // Query codes (not centered), both query heads.
  const std::vector<std::uint16_t> qcodes =
      host::encode(k, queries.data(), 2, nullptr, W.data.data(), std::int64_t(W.cols));
  ASSERT_EQ(qcodes, ref::encode_rows(ref::Matrix{p.q.data(), 2, std::size_t(k.d)}, W, cfg));

  // The bucket index: the stable counting sort, so the reference's sample sets follow.
  const host::BucketIndex built = host::build_index(k, codes.data(), count, std::int32_t(begin));
  const testing::HostIndex expected =
      testing::host_index(index.codes, std::size_t(count), k.K, k.L, std::int32_t(begin));
  EXPECT_EQ(built.offsets, expected.offsets);
  EXPECT_EQ(built.ids, expected.ids);
}

TEST_P(CudaKernelsP, StaticAttentionEqualsReference) {
  PIG_REQUIRE_GPU();
  const CudaKernelKey k = key();
  const int heads = 4, kv_heads = 2;
  for (std::size_t n : {std::size_t(50), std::size_t(5000)}) {
    testing::Problem p = testing::make_problem(heads, kv_heads, n, k.d, 41);
    const std::vector<std::uint8_t> q = store(p.q, k.dtype), keys = store(p.k, k.dtype),
                                    values = store(p.v, k.dtype);
    for (bool windowed : {true, false}) {
      const host::Attention got =
          host::dense_attention(k, q.data(), keys.data(), values.data(), heads, kv_heads,
                                std::int64_t(n), 4, 64, windowed);
      for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        const ref::Matrix K = testing::head_matrix(p.k, kvh, n, k.d);
        const ref::Matrix V = testing::head_matrix(p.v, kvh, n, k.d);
        const std::span<const float> qh(p.q.data() + std::size_t(h) * std::size_t(k.d),
                                        std::size_t(k.d));
        const ref::Attention want =
            windowed ? ref::static_attention(qh, K, V, ref::split_tokens(n, {4, 64}))
                     : ref::dense_attention(qh, K, V);
        EXPECT_NEAR(got.lse[std::size_t(h)], want.lse, 2e-5 * std::max(1.0, std::abs(want.lse)))
            << "head " << h << " n " << n << " windowed " << windowed;
        for (int c = 0; c < k.d; ++c)
          ASSERT_NEAR(got.out[std::size_t(h) * std::size_t(k.d) + std::size_t(c)],
                      want.out[std::size_t(c)], 2e-5)
              << "head " << h << " dim " << c << " n " << n << " windowed " << windowed;
      }
    }
  }
}

TEST_P(CudaKernelsP, MergeEqualsReference) {
  PIG_REQUIRE_GPU();
  const CudaKernelKey k = key();
  ref::Rng rng(5);
  host::Attention a, b;
  std::vector<ref::Attention> ra, rb;
  for (int h = 0; h < 3; ++h) {
    ref::Attention x{std::vector<float>(std::size_t(k.d)), rng.gaussian()};
    ref::Attention y{std::vector<float>(std::size_t(k.d)), h == 2 ? -INFINITY : rng.gaussian()};
    for (int c = 0; c < k.d; ++c) {
      x.out[std::size_t(c)] = float(rng.gaussian());
      y.out[std::size_t(c)] = h == 2 ? 0.0f : float(rng.gaussian());
    }
    a.out.insert(a.out.end(), x.out.begin(), x.out.end());
    a.lse.push_back(float(x.lse));
    b.out.insert(b.out.end(), y.out.begin(), y.out.end());
    b.lse.push_back(float(y.lse));
    x.lse = a.lse.back(); // the reference merges what the kernel sees (f32 LSEs)
    y.lse = b.lse.back();
    ra.push_back(x);
    rb.push_back(y);
  }
  const host::Attention got = host::merge(k, a, b);
  for (std::size_t h = 0; h < 3; ++h) {
    const ref::Attention want = ref::merge(ra[h], rb[h]);
    EXPECT_NEAR(got.lse[h], want.lse, 1e-5);
    for (std::size_t c = 0; c < std::size_t(k.d); ++c)
      ASSERT_NEAR(got.out[h * std::size_t(k.d) + c], want.out[c], 1e-5) << h << " " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaKernelsP,
    ::testing::Values(Case{{10, 150, 128}, DType::bf16}, Case{{8, 75, 64}, DType::bf16},
                      Case{{10, 150, 64}, DType::f32}, Case{{16, 4, 128}, DType::f32}),
    [](const auto &info) {
      std::ostringstream name; // not "K" + std::to_string(): GCC 12 -Wrestrict false positive
      name << "K" << info.param.shape.K << "L" << info.param.shape.L << "d" << info.param.shape.d
           << (info.param.dtype == DType::f32 ? "f32" : "bf16");
      return name.str();
    });

/// Whether the generated CUDA kernels (pig_generated_cuda_kernels, when linked) are served for
/// the manifest's keys and the generic ones for anything else.
TEST(CudaKernels, UnregisteredKeysResolveToTheGenericSet) {
  EXPECT_FALSE(resolve_cuda_kernels({3, 7, 64, DType::f32}).specialised);
  EXPECT_NE(resolve_cuda_kernels({3, 7, 64, DType::bf16}).encode, nullptr);
}

} // namespace
} // namespace pig::cuda
