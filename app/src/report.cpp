#include "pig/app/report.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "pig/runtime/ops.h"

namespace pig::app {

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0; // Linux reports KiB
}

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
} // namespace

double MeasureReadBandwidth(runtime::ThreadPool &pool) {
  const runtime::Kernels &k = runtime::BestKernels();
  const size_t n = size_t(256) << 20 >> 2; // 256 MiB of floats
  std::vector<float> buf(n, 1.0f);
  const size_t chunk = size_t(1) << 20;
  const size_t n_chunks = n / chunk;
  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<float> partial(n_chunks);
    const auto t0 = Clock::now();
    pool.ParallelFor(n_chunks, [&](size_t c, size_t) {
      partial[c] = k.dot(&buf[c * chunk], &buf[c * chunk], chunk);
    });
    const double s = Since(t0);
    for (float p : partial)
      sink = sink + p;
    best = std::max(best, double(n) * sizeof(float) / s);
  }
  return best;
}

double MeasureWeightMacRate(runtime::ThreadPool &pool, runtime::MatMulPath path, size_t tokens) {
  using namespace pig::runtime;
  const size_t rows = 256, cols = 576, threads = pool.size();
  const GgmlType type = GgmlType::kQ4_1;
  const size_t row_bytes = GgmlRowBytes(type, cols);
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> w(threads, std::vector<uint8_t>(rows * row_bytes));
  for (auto &m : w) {
    for (auto &b : m)
      b = uint8_t(rng());
    const uint16_t d = F32ToF16(0.01f);
    for (size_t blk = 0; blk < rows * cols / 32; ++blk) { // finite scales and minima
      std::memcpy(&m[blk * sizeof(BlockQ4_1)], &d, 2);
      std::memcpy(&m[blk * sizeof(BlockQ4_1) + 2], &d, 2);
    }
  }
  const Kernels &k = BestKernels();
  std::vector<std::vector<uint8_t>> packed(threads); // as LlamaModel packs them
  if (k.packed_path)
    for (size_t t = 0; t < threads; ++t)
      packed[t] = PackRows16(WeightMatrix{type, w[t].data(), rows, cols, row_bytes});
  std::vector<float> x(tokens * cols, 0.5f);
  std::vector<int8_t> xq(2 * tokens * cols);
  std::vector<float> xs(tokens * cols / 32), xsum(tokens * cols / 32);
  for (size_t i = 0; i < tokens; ++i)
    k.quantize_i8(&x[i * cols], cols, &xq[2 * i * cols], &xs[i * cols / 32], &xsum[i * cols / 32]);
  std::vector<std::vector<float>> y(threads, std::vector<float>(tokens * rows));
  const size_t reps = std::max<size_t>(1, 64 / tokens);
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(threads, [&](size_t t, size_t) {
      WeightMatrix m{type, w[t].data(), rows, cols, row_bytes};
      if (path == MatMulPath::kInteger && !packed[t].empty())
        m.packed = packed[t].data();
      for (size_t r = 0; r < reps; ++r) {
        if (path == MatMulPath::kInteger)
          k.matmul_i8(m, xq.data(), xs.data(), xsum.data(), tokens, y[t].data(), rows, 0, rows);
        else
          k.matmul_rows(m, x.data(), cols, tokens, y[t].data(), rows, 0, rows);
      }
    });
    best = std::max(best, double(threads * reps * rows * cols * tokens) / Since(t0));
  }
  return best;
}

double MeasurePeakMacRate(runtime::ThreadPool &pool, uint64_t (*loop)(size_t iters)) {
  const size_t threads = pool.size(), iters = size_t(1) << 22;
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<uint64_t> macs(threads);
    const auto t0 = Clock::now();
    pool.ParallelFor(threads, [&](size_t t, size_t) { macs[t] = loop(iters); });
    const double s = Since(t0);
    uint64_t total = 0;
    for (uint64_t m : macs)
      total += m;
    best = std::max(best, double(total) / s);
  }
  return best;
}

double MeasureWeightMacRate(runtime::ThreadPool &pool) {
  return std::max(MeasureWeightMacRate(pool, runtime::MatMulPath::kFloat, 64),
                  MeasureWeightMacRate(pool, runtime::MatMulPath::kInteger, 16));
}

void PrintAttentionSummary(const runtime::Attention &attn, const runtime::LlamaConfig &cfg,
                           size_t positions, std::FILE *out) {
  const runtime::AttentionStats st = attn.stats();
  const runtime::KvCache &kv = attn.cache();
  std::fprintf(out, "kernels: %s\n", st.kernels.c_str());
  if (st.indexed > 0) {
    std::fprintf(out,
                 "cost2 (sampled fraction of indexed tokens): %.2f %%   cost1 (index traffic / "
                 "K+V bytes of indexed tokens): %.2f %%\n",
                 100.0 * st.cost2(), 100.0 * st.cost1());
    if (cfg.n_heads > cfg.n_kv_heads && st.gathered > 0)
      std::fprintf(out,
                   "GQA sample sets: the union of a group's %zu sets is %.1f %% of their summed "
                   "size (%.1f %%: identical sets, 100 %%: disjoint)\n",
                   size_t(cfg.n_heads / cfg.n_kv_heads), 100.0 * st.gather_ratio(),
                   100.0 * double(cfg.n_kv_heads) / double(cfg.n_heads));
  } else if (st.decode_steps > 0 && st.kernels.rfind("dense", 0) != 0) {
    std::fprintf(out, "cost: no token was indexed (the sequence is shorter than sink + local + "
                      "the minimum index size): every step was dense\n");
  }
  // In use: the blocks the sequence holds; of: what its capacity can take (KvCache).
  std::fprintf(out,
               "memory: KV cache %.1f MiB in use of %.1f MiB (%s, %zu positions, %zu bytes/token)",
               double(kv.MemoryBytes()) / 1048576.0, double(kv.ReservedBytes()) / 1048576.0,
               runtime::lsh::to_string(kv.dtype()), kv.shape().capacity, kv.BytesPerToken());
  if (st.index_bytes > 0) {
    // Per position of the sequence (the index covers the indexed part of the sparse layers).
    std::fprintf(out, ", index %.2f MiB (%.0f bytes/token)", double(st.index_bytes) / 1048576.0,
                 positions ? double(st.index_bytes) / double(positions) : 0.0);
  }
  if (st.hash_bytes > 0) { // fitted hashing: per-(layer, kv-head) folded W, maps, key norms
    std::fprintf(out, ", fitted hashing %.2f MiB", double(st.hash_bytes) / 1048576.0);
  }
  std::fprintf(out, "\n");
}

} // namespace pig::app
