// pig-run --batch B: sequences of different lengths decoded together (LlamaBatch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pig/app/generation.h"
#include "pig/app/report.h"

#include "run.h"

namespace pig::run {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

// --batch B: sequence i is the prompt without its first i * len / (2 B) tokens (B different
// lengths), each prefilled alone, then all decoded together, one forward pass per step.
int RunBatch(const Options &o) {
  Prepared p = Prepare(o);
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  ThreadPool pool(o.threads);
  const size_t B = o.batch, len = p.prompt.size();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<Attention>> attns;
  for (size_t i = 0; i < B; ++i) {
    const size_t drop = std::min(len - 1, i * len / (2 * B));
    prompts.emplace_back(p.prompt.begin() + std::ptrdiff_t(drop), p.prompt.end());
    const size_t cap = prompts.back().size() + size_t(o.generate.max_new);
    attns.push_back(MakeAttention(p.attention, cfg.Shape(cap)));
  }
  LlamaBatch batch(*p.model, pool, std::move(attns));
  if (p.tuning)
    PrintTuning(*p.tuning);
  std::fprintf(stderr, "pig-run: batch of %zu sequences (%zu to %zu prompt tokens), attention %s\n",
               B, prompts.back().size(), prompts.front().size(),
               p.attention.str(cfg.n_layers).c_str());
  std::vector<float> logits(B * cfg.vocab);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < B; ++i)
    batch.Prefill(i, prompts[i].data(), prompts[i].size(), &logits[i * cfg.vocab]);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<pig::app::Generation> gens;
  for (size_t i = 0; i < B; ++i) {
    pig::app::GenerationOptions g{
        o.generate.sampling, size_t(std::max(o.generate.max_new, 0L)), {}, false};
    g.sampling.seed += i;
    gens.emplace_back(tok, std::move(g));
  }
  std::vector<std::string> texts(B);
  size_t steps = 0;
  double first_s = 0, rest_s = 0;
  size_t rest_tokens = 0;
  for (;;) {
    std::vector<int32_t> next;
    std::vector<size_t> seqs;
    for (size_t i = 0; i < B; ++i) {
      if (gens[i].done())
        continue;
      const pig::app::Generation::Token t = gens[i].Next(&logits[i * cfg.vocab], cfg.vocab);
      texts[i] += t.text;
      if (gens[i].done()) {
        texts[i] += gens[i].Finish();
        continue; // the last token is never run
      }
      next.push_back(t.id);
      seqs.push_back(i);
    }
    if (seqs.empty())
      break;
    std::vector<float> rows(seqs.size() * cfg.vocab);
    const auto t = Clock::now();
    batch.Step(next.data(), seqs.data(), seqs.size(), rows.data());
    const double s = std::chrono::duration<double>(Clock::now() - t).count();
    if (steps++ == 0) {
      first_s = s;
    } else {
      rest_s += s;
      rest_tokens += seqs.size();
    }
    for (size_t r = 0; r < seqs.size(); ++r)
      std::copy_n(&rows[r * cfg.vocab], cfg.vocab, &logits[seqs[r] * cfg.vocab]);
  }
  for (size_t i = 0; i < B; ++i) {
    std::string line = texts[i].substr(0, 100);
    std::replace(line.begin(), line.end(), '\n', ' ');
    std::printf("[%zu] (%zu prompt tokens) %s\n", i, prompts[i].size(), line.c_str());
  }
  std::fflush(stdout);
  std::fprintf(stderr, "summary:\n");
  std::fprintf(stderr, "prefill: %.3f s for %zu sequences\n", prefill_s, B);
  if (rest_tokens > 0) {
    std::fprintf(stderr,
                 "decode: %zu steps, %zu tokens in %.3f s = %.1f tokens/s over the batch, %.1f per "
                 "sequence (after the first step, %.3f s)\n",
                 steps - 1, rest_tokens, rest_s, double(rest_tokens) / rest_s,
                 double(rest_tokens) / rest_s / double(B), first_s);
  }
  AttentionStats total;
  size_t kv = 0;
  for (size_t i = 0; i < B; ++i) {
    const AttentionStats st = batch.attention(i).stats();
    total += st;
    total.index_bytes += st.index_bytes;
    total.kernels = st.kernels;
    kv += batch.attention(i).cache().MemoryBytes();
  }
  std::fprintf(stderr, "kernels: %s\n", total.kernels.c_str());
  if (total.indexed > 0)
    std::fprintf(stderr, "cost2: %.2f %%   cost1: %.2f %%\n", 100 * total.cost2(),
                 100 * total.cost1());
  std::fprintf(stderr, "memory: KV caches %.1f MiB, indexes %.2f MiB\n", double(kv) / 1048576.0,
               double(total.index_bytes) / 1048576.0);
  std::fprintf(stderr, "peak memory: %.1f MiB (RSS; weights are memory-mapped)\n",
               pig::app::PeakRssMiB());
  return 0;
}

} // namespace pig::run
