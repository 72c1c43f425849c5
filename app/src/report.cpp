#include "pig/app/report.h"

#include <sys/resource.h>

namespace pig::app {

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0; // Linux reports KiB
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
  const double kv_mib = double(kv.MemoryBytes()) / 1048576.0;
  std::fprintf(out, "memory: KV cache %.1f MiB (%s, %zu positions, %zu bytes/token)", kv_mib,
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
