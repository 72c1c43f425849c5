// Every architecture the loader takes, against Hugging Face transformers:
// tests/models/make_models.py (ctest runs it first as runtime.arch.models) builds a small
// random-weight model of each from a transformers config, writes it as GGUF the way llama.cpp's
// converter does, and keeps transformers' logits for 40 random token ids. Here pig loads each GGUF
// file and computes the same logits twice: as one prompt (the prefill path, CausalDense) and token
// by token (the decode path, DenseDecodeSplit), both through dense attention over an f32 KV cache,
// the configuration whose arithmetic differs from transformers' only by rounding. 40 positions pass
// every sliding window of the generated models (16), so windows, local rotary tables and
// soft-capping all count.
//
// Skips as parity_test.cpp does: only where the reference may skip (PIG_PARITY=0, or the parity
// environment never installed and CI unset); with CI=true or the environment installed, missing
// files fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "parity_env.h"
#include "pig/runtime/model.h"

namespace pig::runtime {
namespace {

using testing::Env;

size_t ArgMax(const float *x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best])
      best = i;
  return best;
}

struct Reference {
  std::vector<int32_t> ids;
  std::vector<float> logits; // ids.size() x vocab
};

// The largest absolute difference of a logits row from transformers', relative to the row's
// largest logit; and whether the top-1 ids agree.
struct Agreement {
  double max_rel = 0, max_abs = 0;
  size_t top1_same = 0;
};

Agreement Compare(const std::vector<float> &want, const std::vector<float> &got, size_t rows,
                  size_t vocab) {
  Agreement a;
  for (size_t p = 0; p < rows; ++p) {
    const float *w = &want[p * vocab], *g = &got[p * vocab];
    double row_abs = 0, row_scale = 0;
    for (size_t i = 0; i < vocab; ++i) {
      const double d = std::abs(double(w[i]) - double(g[i]));
      row_abs = std::isnan(d) ? INFINITY : std::max(row_abs, d);
      row_scale = std::max(row_scale, double(std::abs(w[i])));
    }
    a.max_abs = std::max(a.max_abs, row_abs);
    a.max_rel = std::max(a.max_rel, row_abs / row_scale);
    a.top1_same += ArgMax(w, vocab) == ArgMax(g, vocab);
  }
  return a;
}

class ArchParity : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override { Open(GetParam(), GetParam()); }

  // The reference logits of generated model `ref_name`, and the model file of `file_name` loaded
  // with `overrides` (the same weights: make_models.py's qwen2 and qwen2_yarn).
  void Open(const std::string &file_name, const std::string &ref_name,
            const ModelOverrides &overrides = {}) {
    dir_ = Env("PIG_ARCH_DIR") + "/" + ref_name;
    if (Env("PIG_ARCH_DIR").empty() || !std::filesystem::exists(dir_ + "/logits.bin")) {
      const std::string required = testing::ParityRequiredBecause();
      if (!required.empty())
        FAIL() << "no generated model in " << dir_ << " (tests/models/make_models.py), and "
               << required << " (PIG_PARITY=0 skips the parity tests deliberately)";
      GTEST_SKIP() << "no generated model in " << dir_ << " (tests/models/make_models.py)";
    }
    model_ = LlamaModel::Load(Env("PIG_ARCH_DIR") + "/" + file_name + "/model.gguf", overrides);
    std::ifstream ids(dir_ + "/ids.txt");
    for (int32_t x; ids >> x;)
      ref_.ids.push_back(x);
    ASSERT_EQ(ref_.ids.size(), 40u);
    ref_.logits.resize(ref_.ids.size() * model_->config().vocab);
    std::ifstream bin(dir_ + "/logits.bin", std::ios::binary);
    bin.read(reinterpret_cast<char *>(ref_.logits.data()),
             std::streamsize(ref_.logits.size() * sizeof(float)));
    ASSERT_TRUE(bin) << dir_ << "/logits.bin is short";
  }
  // Measured on the generated models (Zen 5, AVX3_DL): largest difference relative to the row's
  // largest logit 1e-6 to 4e-6, prefill and decode alike (f32 everywhere; transformers multiplies
  // in another order and computes the rotary angles in f32, pig in double). 1e-4 leaves 25x for
  // other SIMD targets. A wrong rotary layout, norm, window or scale moves the logits by 1e-1 or
  // more (the models' weights make attention peaked: make_models.py).
  static constexpr double kMaxRelative = 1e-4;

  void Check(const std::vector<float> &got, const char *path) {
    const size_t n = ref_.ids.size(), vocab = model_->config().vocab;
    const Agreement a = Compare(ref_.logits, got, n, vocab);
    std::printf("%s, %s: largest difference %.3g (%.3g of the row's largest logit), top-1 "
                "identical at %zu/%zu positions\n",
                dir_.c_str(), path, a.max_abs, a.max_rel, a.top1_same, n);
    EXPECT_LE(a.max_rel, kMaxRelative) << path;
    EXPECT_EQ(a.top1_same, n) << path;
  }

  // Every position's logits of the reference ids, as one prompt.
  std::vector<float> Prefill() {
    ThreadPool pool;
    LlamaSession session(*model_, pool, ref_.ids.size());
    std::vector<float> got(ref_.logits.size());
    session.Forward(ref_.ids.data(), ref_.ids.size(), got.data(), /*all_logits=*/true);
    return got;
  }

  std::string dir_;
  std::unique_ptr<LlamaModel> model_;
  Reference ref_;
};

TEST_P(ArchParity, PrefillLogitsMatchTransformers) { Check(Prefill(), "prefill"); }

TEST_P(ArchParity, DecodeLogitsMatchTransformers) {
  ThreadPool pool;
  LlamaSession session(*model_, pool, ref_.ids.size());
  const size_t vocab = model_->config().vocab;
  std::vector<float> got(ref_.logits.size());
  for (size_t i = 0; i < ref_.ids.size(); ++i)
    session.Forward(&ref_.ids[i], 1, &got[i * vocab]);
  Check(got, "decode");
}

INSTANTIATE_TEST_SUITE_P(Generated, ArchParity,
                         ::testing::Values("llama3", "qwen2", "qwen2_yarn", "qwen3", "mistral",
                                           "gemma2", "gemma3", "phi3"),
                         [](const auto &info) { return std::string(info.param); });

// RoPE scaling set by flags (pig-run's --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32) on
// a file without it gives the logits transformers computes with that rope_scaling; and a file's
// scaling set to none by flags is the unscaled model's.
class RopeFlags : public ArchParity {
  void SetUp() override {}
};

TEST_F(RopeFlags, YarnByFlagsMatchesTransformers) {
  Open("qwen2", "qwen2_yarn", ModelOverrides{"yarn", 4.0f, 32});
  if (!model_)
    return;
  EXPECT_EQ(model_->config().rope_scaling, "yarn");
  EXPECT_EQ(model_->config().context_length, 4096u); // max(4096, 32 x 4)
  Check(Prefill(), "prefill, YaRN by flags");
}

TEST_F(RopeFlags, NoneByFlagsUndoesTheFilesScaling) {
  Open("qwen2_yarn", "qwen2", ModelOverrides{"none", 0.0f, 0});
  if (!model_)
    return;
  Check(Prefill(), "prefill, scaling none by flags");
}

} // namespace
} // namespace pig::runtime
