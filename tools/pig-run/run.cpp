// pig-run's preparation (the model, the prompt, --tuning) and its single-sequence run.
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "pig/app/generate.h"
#include "pig/app/kernels.h"
#include "pig/app/report.h"
#include "pig/app/text.h"
#include "pig/runtime/prefix_cache.h"

#include "run.h"

namespace pig::run {

using namespace pig::runtime;

AttentionSpec Prepared::ForMethod(const Options &o, pig::spec::Method method) const {
  AttentionSpec spec = method == pig::spec::Method::magicpig ? attention : o.attention;
  spec.method = method;
  return spec;
}

void PrintTuning(const pig::app::Tuning &t) {
  for (const std::string &w : t.warnings)
    std::fprintf(stderr, "pig-run: warning: %s\n", w.c_str());
  std::fprintf(stderr, "tuning: %s\n", pig::app::DescribePoint(t.source, t.point).c_str());
}

Prepared Prepare(const Options &o) {
  pig::app::RegisterKernels();
  Prepared p;
  p.model = LlamaModel::Load(o.model.path, o.model.overrides);
  p.attention = o.attention;
  if (!o.tuning.file.empty()) {
    p.tuning = pig::app::LoadTuning(
        o.tuning.file, o.tuning.max_error,
        pig::app::TuningTargetOf(o.tuning, o.model.path, p.model->config(), o.attention.kv_dtype));
    p.attention = pig::app::ApplyTuning(o.attention, p.tuning->point);
    if (o.schedule_set)
      p.attention.schedule = o.attention.schedule;
  }
  // Every method's parameters are checked before the (long) prefill.
  p.attention.Validate(p.model->config().n_layers);
  for (const pig::spec::Method m : o.compare)
    p.ForMethod(o, m).Validate(p.model->config().n_layers);
  const Tokenizer &tok = p.model->tokenizer();
  const LlamaConfig &cfg = p.model->config();
  // --chat: the prompt is a message's content, never markup (EncodeChat).
  p.prompt = o.chat ? tok.EncodeChat({{"user", o.prompt}}) : tok.Encode(o.prompt);
  if (p.prompt.empty())
    throw std::runtime_error("the prompt encodes to no tokens");
  const size_t steps = pig::app::StepsNeeded(o.generate);
  const std::string steps_flag =
      size_t(std::max(o.generate.max_new, 0L)) >= steps
          ? "--max-new " + std::to_string(o.generate.max_new)
          : "--rate-steps " + std::to_string(o.generate.rate_steps) + " + 1";
  p.ctx = o.model.ctx ? o.model.ctx : p.prompt.size() + steps;
  if (p.ctx > cfg.context_length && !o.model.long_context) {
    throw std::runtime_error("a context of " + std::to_string(p.ctx) + " tokens (prompt " +
                             std::to_string(p.prompt.size()) + " + " + steps_flag +
                             ") exceeds the model's trained context of " +
                             std::to_string(cfg.context_length) +
                             " tokens (--long-context runs it anyway; quality degrades)");
  }
  if (p.prompt.size() + steps > p.ctx) {
    throw std::runtime_error("prompt (" + std::to_string(p.prompt.size()) + " tokens) + " +
                             steps_flag + " exceeds the context of " + std::to_string(p.ctx) +
                             " tokens");
  }
  return p;
}

int Run(const Options &o) {
  Prepared p = Prepare(o);
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  ThreadPool pool(o.threads);
  const AttentionShape shape = cfg.Shape(p.ctx);
  LlamaSession session(*p.model, pool, p.ctx, MakeAttention(p.attention, shape));
  std::fprintf(stderr,
               "pig-run: %s (%s), %zu layers, dim %zu, %zu threads, %s kernels, weights by %s\n",
               o.model.path.c_str(), p.model->WeightTypesSummary().c_str(), cfg.n_layers, cfg.dim,
               pool.size(), session.kernels().target, session.kernels().int8_instruction);
  if (p.tuning)
    PrintTuning(*p.tuning);
  std::fprintf(stderr, "pig-run: attention %s\n", p.attention.str(cfg.n_layers).c_str());
  std::fprintf(stderr, "pig-run: prompt %zu tokens\n", p.prompt.size());

  double prefill_s = 0;
  std::vector<float> logits = pig::app::Prefill(session, cfg.vocab, p.prompt, prefill_s);
  const pig::app::DecodeResult r =
      pig::app::Decode(session, tok, std::move(logits), o.generate, [](const std::string &piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  std::printf("\n");
  std::fflush(stdout); // the statistics go to stderr: keep them after the text
  if (o.print_ids) {
    std::printf("prompt ids:");
    for (int32_t id : p.prompt)
      std::printf(" %d", id);
    std::printf("\ngenerated ids:");
    for (int32_t id : r.tokens)
      std::printf(" %d", id);
    std::printf("\n");
  }
  std::fprintf(stderr, "summary:\n");
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s = %.1f tokens/s\n", p.prompt.size(),
               prefill_s, double(p.prompt.size()) / prefill_s);
  if (r.steps > 1) {
    std::fprintf(stderr,
                 "decode: %zu tokens in %.3f s = %.1f tokens/s (after the first step, which "
                 "took %.3f s%s)\n",
                 r.steps - 1, r.rest_s, r.TokensPerSecond(), r.first_s,
                 p.attention.method == pig::spec::Method::magicpig ? " and built the LSH index"
                                                                   : "");
  } else {
    std::fprintf(stderr, "decode: %zu steps (too few to measure a rate)\n", r.steps);
  }
  pig::app::PrintAttentionSummary(session.attention(), cfg, session.position());
  if (p.tuning) {
    const AttentionStats st = session.attention().stats();
    char measured[64] = "- (nothing indexed)";
    if (st.indexed > 0)
      std::snprintf(measured, sizeof measured, "%.2f %%", 100.0 * st.cost2());
    std::fprintf(stderr, "tuning: per layer %s; cost2 %s (the point predicts %.1f %%)\n",
                 p.tuning->point.layers_str().c_str(), measured, 100.0 * p.tuning->point.cost2);
  }
  if (!o.expect.empty())
    std::fprintf(stderr, "answer: %s (expected it to contain \"%s\")\n",
                 AnswerContains(r.text, o.expect) ? "correct" : "WRONG", o.expect.c_str());
  std::fprintf(stderr, "peak memory: %.1f MiB (RSS; weights are memory-mapped)\n",
               pig::app::PeakRssMiB());
  return 0;
}

int RunThen(const Options &o) {
  Prepared p = Prepare(o); // the first prompt, the model, the attention
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  std::vector<std::vector<int32_t>> prompts{p.prompt};
  const size_t steps = pig::app::StepsNeeded(o.generate);
  for (const std::string &text : o.then) {
    prompts.push_back(o.chat ? tok.EncodeChat({{"user", text}}) : tok.Encode(text));
    const size_t n = prompts.back().size(), ctx = o.model.ctx ? o.model.ctx : n + steps;
    if (n == 0)
      throw std::runtime_error("a --then prompt encodes to no tokens");
    if ((ctx > cfg.context_length && !o.model.long_context) || n + steps > ctx)
      throw std::runtime_error("--then prompt " + std::to_string(prompts.size()) + " (" +
                               std::to_string(n) + " tokens) + " + std::to_string(steps) +
                               " steps exceeds the context of " +
                               std::to_string(std::min(ctx, cfg.context_length)) + " tokens");
  }
  ThreadPool pool(o.threads);
  // One KV pool for the prompts' sequences and a prefix cache over it.
  const AttentionShape shape0 = cfg.Shape(0);
  auto kv = std::make_shared<KvPool>(shape0, p.attention.kv_dtype, 0);
  PrefixCache cache(kv, 0x7069672d72756eull);
  std::fprintf(stderr,
               "pig-run: %s (%s), %zu threads; attention %s; %zu prompts sharing their "
               "prefixes\n",
               o.model.path.c_str(), p.model->WeightTypesSummary().c_str(), pool.size(),
               p.attention.str(cfg.n_layers).c_str(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> &prompt = prompts[i];
    const size_t ctx = o.model.ctx ? o.model.ctx : prompt.size() + steps;
    LlamaSession session(*p.model, pool, ctx, MakeAttention(p.attention, cfg.Shape(ctx), kv));
    std::vector<std::int32_t> blocks;
    const size_t hit = cache.Lookup(prompt.data(), prompt.size(), blocks);
    if (hit > 0) {
      session.attention().AttachPrefix(blocks.data(), blocks.size());
      session.SetPosition(hit);
    }
    double prefill_s = 0;
    std::vector<float> logits = pig::app::Prefill(
        session, cfg.vocab,
        std::vector<int32_t>(prompt.begin() + std::ptrdiff_t(hit), prompt.end()), prefill_s);
    cache.Insert(prompt.data(), prompt.size(), session.attention().cache().blocks());
    std::printf("--- prompt %zu\n", i + 1);
    const pig::app::DecodeResult r =
        pig::app::Decode(session, tok, std::move(logits), o.generate, [](const std::string &piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        });
    std::printf("\n");
    std::fflush(stdout);
    if (o.print_ids) {
      std::printf("generated ids:");
      for (int32_t id : r.tokens)
        std::printf(" %d", id);
      std::printf("\n");
    }
    std::fprintf(stderr,
                 "prompt %zu: %zu tokens, %zu from the prefix cache; prefill %.3f s; %zu tokens "
                 "generated\n",
                 i + 1, prompt.size(), hit, prefill_s, r.tokens.size());
  }
  const PrefixCache::Stats st = cache.stats();
  std::fprintf(stderr, "prefix cache: %llu of %zu prompts hit, %llu tokens not prefilled again\n",
               static_cast<unsigned long long>(st.hits), prompts.size(),
               static_cast<unsigned long long>(st.hit_tokens));
  return 0;
}

} // namespace pig::run
