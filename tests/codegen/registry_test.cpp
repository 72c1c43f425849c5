// The generated kernels (pig_generated_kernels, built from configs/kernels.txt by pig-opt and
// pig-translate) are what the registry serves for every manifest configuration, with the
// schedule its line gives (the default schedule for a line without knobs), and the generic
// kernels serve everything else. The specialised sets also compute what pig::ref does. q8 lines
// (8-bit keys and values) have CPU sets only: no CUDA instantiation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/reference/kv_quant.h"
#include "pig/reference/reference.h"
#include "pig/runtime/generated_kernels.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#ifdef PIG_HAVE_GENERATED_CUDA
#include "../cuda/gpu_expected.h"
#include "pig/cuda/generated_cuda_kernels.h"
#endif

namespace {
using pig::runtime::lsh::DType;
using pig::runtime::lsh::KernelKey;
using pig::runtime::lsh::KernelRegistry;
using pig::runtime::lsh::Schedule;
using pig::runtime::lsh::Target;

/// The manifest's lines, read independently of the build's CMake parser: `K=.. L=.. d=..
/// dtype`, then optional schedule knobs (read with the runtime's Schedule::parse; a line built
/// without knobs has the default schedule, unless PIG_KERNEL_RECORDS chose another).
std::vector<KernelKey> manifestKeys() {
  std::ifstream in(PIG_KERNEL_MANIFEST);
  EXPECT_TRUE(in) << "cannot read " << PIG_KERNEL_MANIFEST;
  std::vector<KernelKey> keys;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string k, l, d, dtype;
    if (!(words >> k >> l >> d >> dtype))
      continue;
    std::string knobs, knob;
    while (words >> knob)
      knobs += " " + knob;
    std::string error;
    const std::optional<Schedule> schedule = Schedule::parse(knobs, &error);
    EXPECT_TRUE(schedule) << line << ": " << error;
    DType type = DType::bf16;
    EXPECT_TRUE(pig::runtime::lsh::parse_dtype(dtype, type)) << line;
    keys.push_back({std::stoi(k.substr(2)), std::stoi(l.substr(2)), std::stoi(d.substr(2)), type,
                    Target::cpu, schedule.value_or(Schedule{})});
  }
  return keys;
}

/// The manifest's distinct (K, L, d, dtype) with CUDA kernels: the CUDA kernels have no
/// schedule, and none exist for q8 (its lines get no CUDA instantiation).
std::vector<KernelKey> manifestKeysWithoutSchedule() {
  std::vector<KernelKey> keys;
  for (KernelKey key : manifestKeys()) {
    if (key.dtype == DType::q8)
      continue;
    key.schedule = Schedule{};
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      keys.push_back(key);
  }
  return keys;
}

bool sameKeys(std::vector<KernelKey> a, std::vector<KernelKey> b) {
  auto less = [](const KernelKey &x, const KernelKey &y) {
    return x.str() + " " + x.schedule.str() < y.str() + " " + y.schedule.str();
  };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  return a == b;
}

TEST(GeneratedKernels, CoverExactlyTheManifest) {
  const std::vector<KernelKey> manifest = manifestKeys();
  ASSERT_GE(manifest.size(), 4u);
  EXPECT_EQ(pig_register_generated_kernels(), int(manifest.size()));
  EXPECT_TRUE(sameKeys(pig_generated_kernel_keys(), manifest));
}

TEST(GeneratedKernels, RegistryServesEveryManifestKeySpecialised) {
  pig_register_generated_kernels();
  const KernelRegistry &registry = KernelRegistry::global();
  for (const KernelKey &key : manifestKeys()) {
    EXPECT_TRUE(registry.has_specialised(key)) << key.str();
    const pig::runtime::lsh::LshKernelSet set = registry.resolve(key);
    EXPECT_TRUE(set.specialised) << KernelRegistry::describe(set);
    EXPECT_EQ(set.key, key) << KernelRegistry::describe(set);
    EXPECT_EQ(set.key.schedule, key.schedule) << key.schedule.str();
    EXPECT_FALSE(set.schedule_fallback) << KernelRegistry::describe(set);
    EXPECT_NE(set.encode, nullptr);
    EXPECT_NE(set.sampled_attention, nullptr);
  }
}

/// A schedule the manifest does not list for a key is served by that key's default-schedule
/// set when the manifest has one (else by the generic kernels), and says so.
TEST(GeneratedKernels, AnUnlistedScheduleFallsBackToTheDefaultSchedule) {
  pig_register_generated_kernels();
  const KernelRegistry &registry = KernelRegistry::global();
  const std::vector<KernelKey> manifest = manifestKeys();
  for (const KernelKey &listed : manifest) {
    KernelKey key = listed;
    key.schedule = Schedule{};
    key.schedule.parts = 7; // no manifest line asks for 7 parts
    if (std::find(manifest.begin(), manifest.end(), key) != manifest.end())
      continue;
    const pig::runtime::lsh::LshKernelSet set = registry.resolve(key);
    KernelKey byDefault = key;
    byDefault.schedule = Schedule{};
    const bool hasDefault =
        std::find(manifest.begin(), manifest.end(), byDefault) != manifest.end();
    EXPECT_EQ(set.specialised, hasDefault) << KernelRegistry::describe(set);
    EXPECT_TRUE(set.schedule_fallback) << KernelRegistry::describe(set);
    EXPECT_EQ(set.key.schedule, Schedule{}) << KernelRegistry::describe(set);
    EXPECT_EQ(set.requested_schedule, key.schedule);
  }
}

TEST(GeneratedKernels, AnythingElseIsServedByTheGenericKernels) {
  pig_register_generated_kernels();
  const KernelRegistry &registry = KernelRegistry::global();
  for (const KernelKey &key :
       {KernelKey{9, 120, 128, DType::bf16, Target::cpu}, KernelKey{10, 150, 128, DType::f32},
        KernelKey{10, 150, 96, DType::bf16}, KernelKey{8, 76, 64, DType::bf16},
        KernelKey{10, 150, 128, DType::q8}}) {
    EXPECT_FALSE(registry.has_specialised(key)) << key.str();
    const pig::runtime::lsh::LshKernelSet set = registry.resolve(key);
    EXPECT_FALSE(set.specialised) << KernelRegistry::describe(set);
    EXPECT_EQ(set.key, key);
  }
}

/// The generated set of every manifest key encodes exactly like pig::ref (and so like the
/// generic set): the constants reached the templates consistently.
TEST(GeneratedKernels, SpecialisedEncodeEqualsReference) {
  pig_register_generated_kernels();
  for (const KernelKey &key : manifestKeys()) {
    const pig::runtime::lsh::LshKernelSet set = KernelRegistry::global().resolve(key);
    ASSERT_TRUE(set.specialised);
    pig::ref::SyntheticConfig cfg;
    cfg.n = 300;
    cfg.d = std::size_t(key.d);
    const pig::ref::AttentionProblem p = pig::ref::synthetic_problem(cfg);
    const pig::runtime::lsh::SimHash W(0, std::size_t(key.d), key.K, key.L);
    const std::vector<float> mean = pig::ref::mean_of_rows(p.K, 0, cfg.n);

    // Keys as stored: bf16 bits for bf16 keys, q8 rows for q8 keys (the reference sees the
    // rounded or dequantised floats).
    std::vector<float> rounded = p.K.data;
    std::vector<std::uint8_t> q8(cfg.n * pig::ref::q8_row_bytes(cfg.d));
    if (key.dtype == DType::q8)
      for (std::size_t i = 0; i < cfg.n; ++i) {
        std::uint8_t *row = q8.data() + i * pig::ref::q8_row_bytes(cfg.d);
        pig::ref::quantize_q8(p.K.data.data() + i * cfg.d, cfg.d, row);
        pig::ref::dequantize_q8(row, cfg.d, rounded.data() + i * cfg.d);
      }
    std::vector<std::uint16_t> bits(rounded.size());
    for (std::size_t i = 0; i < rounded.size(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, &rounded[i], 4);
      u += 0x7fffu + ((u >> 16) & 1u);
      bits[i] = std::uint16_t(u >> 16);
      u = std::uint32_t(bits[i]) << 16;
      if (key.dtype == DType::bf16)
        std::memcpy(&rounded[i], &u, 4);
    }
    pig::runtime::lsh::EncodeArgs args;
    args.x = key.dtype == DType::bf16 ? static_cast<const void *>(bits.data())
             : key.dtype == DType::q8 ? static_cast<const void *>(q8.data())
                                      : static_cast<const void *>(p.K.data.data());
    args.dtype = key.dtype;
    args.rows = cfg.n;
    args.mean = mean.data();
    args.W = W.view();
    std::vector<std::uint16_t> codes(cfg.n * std::size_t(key.L));
    args.codes = codes.data();
    set.encode(args);

    pig::ref::OwnedMatrix centered(cfg.n, cfg.d);
    for (std::size_t i = 0; i < cfg.n; ++i)
      for (std::size_t j = 0; j < cfg.d; ++j)
        centered.at(i, j) = rounded[i * cfg.d + j] - mean[j];
    const pig::ref::OwnedMatrix Wref =
        pig::ref::simhash_matrix(0, std::size_t(key.d), key.K, key.L);
    EXPECT_EQ(codes, pig::ref::encode_rows(centered, Wref, {key.K, key.L, 2, 0})) << key.str();
  }
}

#ifdef PIG_HAVE_GENERATED_CUDA
TEST(GeneratedCudaKernels, RegistryServesEveryManifestKeySpecialised) {
  const std::vector<KernelKey> manifest = manifestKeysWithoutSchedule();
  EXPECT_EQ(pig_register_generated_cuda_kernels(), int(manifest.size()));
  for (const KernelKey &key : manifest) {
    const pig::cuda::CudaKernelKey cuda{key.K, key.L, key.d,
                                        key.dtype == DType::f32 ? pig::cuda::DType::f32
                                                                : pig::cuda::DType::bf16};
    EXPECT_TRUE(pig::cuda::resolve_cuda_kernels(cuda).specialised) << cuda.str();
  }
  EXPECT_FALSE(pig::cuda::resolve_cuda_kernels({9, 120, 128, pig::cuda::DType::bf16}).specialised);
}

/// pig::cuda's element type is pig::spec's, which has q8; there are no q8 CUDA kernels, so a q8
/// key is refused rather than served bf16 kernels.
TEST(GeneratedCudaKernels, ResolveRefusesQ8) {
  EXPECT_THROW(pig::cuda::resolve_cuda_kernels({10, 150, 128, pig::cuda::DType::q8}),
               std::invalid_argument);
}

/// The specialised CUDA encode of every manifest key equals pig::ref (run where a GPU is).
TEST(GeneratedCudaKernels, SpecialisedEncodeEqualsReference) {
  PIG_REQUIRE_GPU(); // skips without a GPU, fails where one is expected (tests/cuda)
  pig_register_generated_cuda_kernels();
  for (const KernelKey &key : manifestKeysWithoutSchedule()) {
    const pig::cuda::CudaKernelKey cuda{key.K, key.L, key.d,
                                        key.dtype == DType::f32 ? pig::cuda::DType::f32
                                                                : pig::cuda::DType::bf16};
    ASSERT_TRUE(pig::cuda::resolve_cuda_kernels(cuda).specialised);
    pig::ref::SyntheticConfig cfg;
    cfg.n = 500;
    cfg.d = std::size_t(key.d);
    pig::ref::AttentionProblem p = pig::ref::synthetic_problem(cfg);
    std::vector<std::uint16_t> bits(p.K.data.size());
    for (std::size_t i = 0; i < bits.size(); ++i) { // bf16, round to nearest even
      std::uint32_t u;
      std::memcpy(&u, &p.K.data[i], 4);
      u += 0x7fffu + ((u >> 16) & 1u);
      bits[i] = std::uint16_t(u >> 16);
      u = std::uint32_t(bits[i]) << 16;
      if (key.dtype == DType::bf16)
        std::memcpy(&p.K.data[i], &u, 4);
    }
    const pig::ref::OwnedMatrix W = pig::ref::simhash_matrix(0, cfg.d, key.K, key.L);
    const std::vector<float> mean = pig::ref::mean_of_rows(p.K, 0, cfg.n);
    const std::vector<std::uint16_t> codes = pig::cuda::host::encode(
        cuda,
        key.dtype == DType::bf16 ? static_cast<const void *>(bits.data())
                                 : static_cast<const void *>(p.K.data.data()),
        std::int64_t(cfg.n), mean.data(), W.data.data(), std::int64_t(W.cols));
    const pig::ref::Centered centered = pig::ref::center(p.K, 0, cfg.n);
    EXPECT_EQ(codes, pig::ref::encode_rows(centered.keys, W, {key.K, key.L, 2, 0})) << cuda.str();
  }
}
#endif

} // namespace
