// pig::app's run report: the attention summary's lines (kernels, memory) for an attention that
// has not decoded, and the peak RSS.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pig/app/report.h"

namespace {

using namespace pig::runtime;

std::string Summary(const Attention &attn, const LlamaConfig &cfg, size_t positions) {
  char *buf = nullptr;
  size_t size = 0;
  std::FILE *f = open_memstream(&buf, &size);
  pig::app::PrintAttentionSummary(attn, cfg, positions, f);
  std::fclose(f);
  std::string s(buf, size);
  std::free(buf);
  return s;
}

LlamaConfig Config() {
  LlamaConfig c;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.head_dim = 64;
  return c;
}

TEST(PrintAttentionSummary, DenseKernelsAndMemory) {
  const LlamaConfig c = Config();
  AttentionSpec spec; // dense, bf16
  const auto attn = MakeAttention(spec, c.Shape(1024));
  const std::string s = Summary(*attn, c, 0);
  EXPECT_EQ(s.rfind("kernels: " + attn->stats().kernels + "\n", 0), 0u) << s;
  // 2 layers x 1 kv-head x (K + V) x 64 x 2 bytes = 512 bytes a position; 1024 positions.
  const size_t bytes = attn->cache().BytesPerToken();
  EXPECT_EQ(bytes, 512u);
  // Nothing stored yet: no block held, the capacity's 16 blocks of 64 positions reserved.
  EXPECT_NE(s.find("memory: KV cache 0.0 MiB in use of 0.5 MiB (bf16, 1024 positions, 512 "
                   "bytes/token)\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("cost"), std::string::npos) << s; // nothing decoded, nothing indexed
  EXPECT_EQ(s.find("index"), std::string::npos) << s;
}

TEST(PrintAttentionSummary, KvElementType) {
  const LlamaConfig c = Config();
  AttentionSpec spec;
  spec.kv_dtype = lsh::DType::f32;
  const auto attn = MakeAttention(spec, c.Shape(16));
  EXPECT_NE(Summary(*attn, c, 0).find("(f32, 16 positions, 1024 bytes/token)\n"),
            std::string::npos);
}

TEST(PeakRssMiB, Positive) {
  const double mib = pig::app::PeakRssMiB();
  EXPECT_GT(mib, 0.1);
  EXPECT_LT(mib, 1 << 20);
}

} // namespace
