// pig-run: decode a Llama-family GGUF model on the CPU, with dense attention or LSH sampling
// attention (MagicPIG) or one of the paper's baselines.
//   pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N
//           [--attention dense|magicpig|topk|quest|oracle] [--lsh K=10,L=150,t=2,transform=..]
//           [--sink 4 --local 64 --dense-layers 0,15] [--budget F] [--kv bf16|f32|q8]
//           [--temperature T --top-p P --seed S] [--chat] [--threads N] [--ctx N]
//           [--expect TEXT] [--rate-steps N] [--schedule KNOBS] [--tuning FILE [--max-error E]]
//   pig-run --demo [--demo-text FILE] [--demo-seed S] [--demo-bytes N]   (what ./pig run runs)
// Streams the generated text to stdout, then prints a summary to stderr: prefill and decode
// speed, the sampled fraction (cost2) and index traffic (cost1), KV and index memory, and which
// kernels served. Without --model it uses the default model that ./pig installs.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/progress.h"
#include "pig/app/text.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"
#include "pig/spec/method.h"
#include "pig/tune/tuning.h" // --tuning FILE

#include "demo.h"

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

struct Options {
  pig::app::ModelOptions model; // --model, --ctx, --long-context
  std::string prompt;
  bool have_prompt = false;
  long max_new = 64;
  SamplingParams sampling;
  bool chat = false;
  size_t threads = 0;
  bool print_ids = false;
  AttentionSpec attention;
  std::vector<std::string> compare; // --compare dense,magicpig
  size_t batch = 0;                 // --batch B
  std::string expect;               // --expect: the answer must contain this
  size_t rate_steps = 0;            // --rate-steps: decode steps timed, past the answer's end
  bool demo = false;                // --demo: the planted-fact prompt of demo.h
  pig::run::DemoOptions demo_opts;
  bool show_prompt = false; // --show-prompt: print the prompt (and expected answer), exit
  bool max_new_set = false, rate_steps_set = false;
  pig::app::TuningOptions tuning; // --tuning FILE [--max-error E]: pig-tune's operating point
  bool schedule_set = false;
};

constexpr const char *kAbout =
    "pig-run: decode a Llama-family GGUF model on the CPU, with dense attention, LSH sampling\n"
    "attention (magicpig) or one of the paper's baselines. Streams the text to stdout, then a\n"
    "summary to stderr (prefill and decode speed, cost2 and cost1, memory, the kernels).\n"
    "  pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N [options]\n"
    "  pig-run --demo [--demo-text FILE] [--demo-seed S] [--demo-bytes N]   (./pig run)\n"
    "\n"
    "--demo is the main job (./pig run): it takes the first 12000 bytes of a text\n"
    "(default: the GPL-3 as Debian ships it, ~2.7k tokens), plants the sentence\n"
    "\"The author of this text lives in <city>.\" at a paragraph break that --demo-seed\n"
    "chooses, and asks \"In which city does the author of this text live?\". One dense\n"
    "prefill; then dense and LSH sampling attention (magicpig) each answer from that\n"
    "KV cache, side by side, and the table says whether each answer names the city.\n"
    "Each method decodes 48 steps for its rate (steps past the answer are timed, not\n"
    "shown). On your own text: --demo --demo-text FILE; your own question:\n"
    "  pig-run --chat --compare dense,magicpig --prompt-file F --expect ANSWER\n"
    "\n"
    "--tuning FILE decodes with magicpig as an operating point of pig-tune gives it, per\n"
    "layer: dense or (K, L, t) (docs/TUNING.md). It replaces --lsh and --dense-layers; with\n"
    "--compare (and --demo) the magicpig column decodes with the point. A --schedule given\n"
    "wins over the point's.\n"
    "\n"
    "--lsh takes K=10,L=150,t=2 (any subset). Old spellings, accepted for one release with\n"
    "a warning: --lsh ...,transform=SPEC (now --transform SPEC), --lsh 10:150 and\n"
    "--lsh 10,150,2 (now --lsh K=10,L=150,t=2).";

Options Parse(int argc, char **argv) {
  Options o;
  CLI::App app{kAbout, "pig-run"};
  pig::app::Init(app);
  pig::app::AddModelOptions(app, o.model, true);
  pig::app::AddThreadsOption(app, o.threads);
  const pig::app::AttentionFlags af = pig::app::AddAttentionOptions(app, o.attention);
  pig::app::AddKvOption(app, o.attention.kv_dtype);
  pig::app::AddTuningOptions(app, o.tuning);
  const char *kRun = "Run";
  app.add_option_function<std::string>(
         "--prompt",
         [&o](const std::string &p) {
           o.prompt = p;
           o.have_prompt = true;
         },
         "the prompt")
      ->group(kRun);
  app.add_option_function<std::string>(
         "--prompt-file",
         [&o](const std::string &path) {
           try {
             o.prompt = pig::app::ReadFile(path);
           } catch (const std::runtime_error &) {
             throw CLI::ValidationError("--prompt-file", "cannot read prompt file " + path);
           }
           o.have_prompt = true;
         },
         "the prompt, from a file")
      ->type_name("F")
      ->group(kRun);
  CLI::Option *max_new = app.add_option("--max-new", o.max_new, "tokens generated at most")
                             ->check(pig::app::Integer(0, size_t(1) << 24))
                             ->capture_default_str()
                             ->group(kRun);
  app.add_option("--temperature", o.sampling.temperature, "sampling temperature (0: greedy)")
      ->check(pig::app::Number(0, 1e6))
      ->capture_default_str()
      ->group(kRun);
  app.add_option("--top-p", o.sampling.top_p, "nucleus sampling mass")
      ->check(pig::app::Number(0, 1, true))
      ->capture_default_str()
      ->group(kRun);
  app.add_option("--seed", o.sampling.seed, "sampling seed")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str()
      ->group(kRun);
  app.add_flag("--chat", o.chat, "apply the model's chat template")->group(kRun);
  app.add_option_function<std::string>(
         "--compare",
         [&o](const std::string &v) {
           o.compare.clear();
           std::stringstream ss(v);
           for (std::string m; std::getline(ss, m, ',');)
             o.compare.push_back(m);
         },
         "one prefill, then each method decodes from it, side by side (e.g. dense,magicpig)")
      ->check(CLI::Validator(
          [](std::string &v) -> std::string {
            std::stringstream ss(v);
            size_t n = 0;
            for (std::string m; std::getline(ss, m, ','); ++n)
              if (!pig::spec::parse_method(m))
                return "expects methods of " + pig::spec::method_names() +
                       " separated by commas, got '" + m + "'";
            return n ? "" : "expects methods, e.g. dense,magicpig";
          },
          ""))
      ->type_name("METHODS")
      ->group(kRun);
  app.add_option("--batch", o.batch, "B sequences of different lengths, decoded together")
      ->check(pig::app::Integer(0, size_t(1) << 20))
      ->group(kRun);
  app.add_option("--expect", o.expect, "is each answer correct: does it contain TEXT")
      ->type_name("TEXT")
      ->group(kRun);
  CLI::Option *rate =
      app.add_option("--rate-steps", o.rate_steps, "time N decode steps, past the answer's end")
          ->check(pig::app::Integer(0, size_t(1) << 24))
          ->group(kRun);
  app.add_flag("--print-ids", o.print_ids, "print the prompt's and the answer's token ids")
      ->group(kRun);
  const char *kDemo = "Demo (./pig run)";
  app.add_flag("--demo", o.demo, "the planted-fact question (see above)")->group(kDemo);
  app.add_option("--demo-text", o.demo_opts.text_file, "the text the fact is planted in")
      ->capture_default_str()
      ->group(kDemo);
  app.add_option("--demo-seed", o.demo_opts.seed, "chooses the city and where it is planted")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str()
      ->group(kDemo);
  app.add_option("--demo-bytes", o.demo_opts.max_bytes, "bytes of the text taken")
      ->check(pig::app::Integer(0, size_t(1) << 30))
      ->capture_default_str()
      ->group(kDemo);
  app.add_flag("--show-prompt", o.show_prompt, "print the prompt and the expected answer; exit")
      ->group(kDemo);
  pig::app::Parse(app, argc, argv);
  auto usage = [&](const std::string &m) { pig::app::UsageError(app, m); };
  o.max_new_set = max_new->count() > 0;
  o.rate_steps_set = rate->count() > 0;
  o.schedule_set = af.schedule->count() > 0;
  if (app.count("--batch") && (o.batch == 0 || o.batch > LlamaBatch::kMaxSequences))
    usage("--batch must be in [1, " + std::to_string(LlamaBatch::kMaxSequences) + "]");
  if (app.count("--expect") && o.expect.empty())
    usage("--expect needs a non-empty answer");
  if (o.demo_opts.max_bytes == 0)
    usage("--demo-bytes must be positive");
  pig::app::CheckTuningOptions(app, o.tuning);
  if (!o.tuning.file.empty()) {
    if (af.lsh->count())
      usage("--tuning and --lsh conflict: the operating point gives each layer's K, L, t");
    if (o.attention.dense_layers_set)
      usage("--tuning and --dense-layers conflict: the operating point gives the dense layers");
    if (af.attention->count() && o.attention.method != pig::spec::Method::magicpig)
      usage(std::string("--tuning decodes with magicpig: it conflicts with --attention ") +
            o.attention.method_name());
    o.attention.method = pig::spec::Method::magicpig;
  }
  if (o.demo) {
    if (o.have_prompt)
      usage("--demo makes its own prompt: give --demo-text FILE instead of --prompt/--prompt-file");
    if (o.batch)
      usage("--demo and --batch do not combine");
    const pig::run::DemoPrompt d = pig::run::MakeDemoPrompt(o.demo_opts);
    o.prompt = d.prompt;
    o.have_prompt = true;
    o.chat = true;
    if (o.expect.empty())
      o.expect = d.expected;
    if (o.compare.empty())
      o.compare = {"dense", "magicpig"};
    if (!o.max_new_set)
      o.max_new = 24; // the answer is one sentence
    if (!o.rate_steps_set)
      o.rate_steps = 48;
    std::fprintf(stderr,
                 "pig-run: demo: %zu bytes of %s; the fact (the author lives in %s) stands at "
                 "%.0f %% of the text (--demo-seed %llu)\n",
                 d.text_bytes, o.demo_opts.text_file.c_str(), d.expected.c_str(), 100 * d.depth,
                 static_cast<unsigned long long>(o.demo_opts.seed));
  }
  if (!o.tuning.file.empty() && !o.compare.empty() &&
      std::find(o.compare.begin(), o.compare.end(), "magicpig") == o.compare.end())
    usage("--tuning applies to magicpig, which --compare does not list");
  if (!o.have_prompt)
    usage("give --prompt TEXT or --prompt-file F (or --demo)");
  if (!o.compare.empty() && o.batch)
    usage("--compare and --batch do not combine");
  return o;
}

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0; // Linux reports KiB
}

void PrintSummary(const Attention &attn, const LlamaConfig &cfg, size_t positions) {
  const AttentionStats st = attn.stats();
  const KvCache &kv = attn.cache();
  std::fprintf(stderr, "kernels: %s\n", st.kernels.c_str());
  if (st.indexed > 0) {
    std::fprintf(stderr,
                 "cost2 (sampled fraction of indexed tokens): %.2f %%   cost1 (index traffic / "
                 "K+V bytes of indexed tokens): %.2f %%\n",
                 100.0 * st.cost2(), 100.0 * st.cost1());
    if (cfg.n_heads > cfg.n_kv_heads && st.gathered > 0)
      std::fprintf(stderr,
                   "GQA sample sets: the union of a group's %zu sets is %.1f %% of their summed "
                   "size (%.1f %%: identical sets, 100 %%: disjoint)\n",
                   size_t(cfg.n_heads / cfg.n_kv_heads), 100.0 * st.gather_ratio(),
                   100.0 * double(cfg.n_kv_heads) / double(cfg.n_heads));
  } else if (attn.stats().decode_steps > 0 && st.kernels.rfind("dense", 0) != 0) {
    std::fprintf(stderr, "cost: no token was indexed (the sequence is shorter than sink + local + "
                         "the minimum index size): every step was dense\n");
  }
  const double kv_mib = double(kv.MemoryBytes()) / 1048576.0;
  std::fprintf(stderr, "memory: KV cache %.1f MiB (%s, %zu positions, %zu bytes/token)", kv_mib,
               pig::runtime::lsh::to_string(kv.dtype()), kv.shape().capacity, kv.BytesPerToken());
  if (st.index_bytes > 0) {
    // Per position of the sequence (the index covers the indexed part of the sparse layers).
    std::fprintf(stderr, ", index %.2f MiB (%.0f bytes/token)", double(st.index_bytes) / 1048576.0,
                 positions ? double(st.index_bytes) / double(positions) : 0.0);
  }
  if (st.hash_bytes > 0) { // fitted hashing: per-(layer, kv-head) folded W, maps, key norms
    std::fprintf(stderr, ", fitted hashing %.2f MiB", double(st.hash_bytes) / 1048576.0);
  }
  std::fprintf(stderr, "\n");
  (void)cfg;
}

struct DecodeResult {
  std::vector<int32_t> tokens; // the answer: up to the end of generation or --max-new
  std::string text;
  size_t steps = 0;   // forward passes run (the last sampled token needs none)
  double first_s = 0; // the first step (builds the LSH index of every sparse layer)
  double rest_s = 0;  // the other steps
  double TokensPerSecond() const { return steps > 1 ? double(steps - 1) / rest_s : 0.0; }
};

// Decode steps a run needs room for in the KV cache: the answer's, or --rate-steps.
size_t StepsNeeded(const Options &o) {
  return std::max(size_t(std::max(o.max_new, 0L)), o.rate_steps + 1);
}

// Samples from `logits` (the prompt's last position), then runs one forward pass per token.
// The answer ends at the end-of-generation token or after --max-new tokens; with --rate-steps N
// the decode goes on (timed, neither kept nor shown) until N forward passes have run, so that the
// rate does not rest on a short answer's few steps.
DecodeResult Decode(LlamaSession &session, const Tokenizer &tok, std::vector<float> logits,
                    const Options &o, bool stream) {
  const size_t vocab = logits.size();
  Sampler sampler(o.sampling);
  DecodeResult r;
  bool answering = o.max_new > 0;
  for (long i = 0; answering || r.steps < o.rate_steps; ++i) {
    const int32_t next = sampler.Sample(logits.data(), vocab);
    if (answering) {
      r.tokens.push_back(next);
      if (tok.IsEndOfGeneration(next)) {
        answering = false;
      } else if (!tok.IsControl(next)) {
        const std::string piece = tok.Decode(next);
        r.text += piece;
        if (stream) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
      }
      if (i + 1 >= o.max_new)
        answering = false;
    }
    if (answering || r.steps < o.rate_steps) {
      const auto t = Clock::now();
      session.Forward(&next, 1, logits.data());
      const double s = std::chrono::duration<double>(Clock::now() - t).count();
      (r.steps == 0 ? r.first_s : r.rest_s) += s;
      ++r.steps;
    }
  }
  return r;
}

struct Prepared {
  std::unique_ptr<LlamaModel> model;
  std::vector<int32_t> prompt;
  size_t ctx = 0;
  AttentionSpec attention;                  // o.attention, with --tuning's point applied
  std::optional<pig::tools::Tuning> tuning; // --tuning
  // The spec of one --compare method: magicpig takes the point, the others ignore it.
  AttentionSpec ForMethod(const Options &o, const std::string &method) const {
    const pig::spec::Method m = *pig::spec::parse_method(method); // --compare checked the names
    AttentionSpec spec = m == pig::spec::Method::magicpig ? attention : o.attention;
    spec.method = m;
    return spec;
  }
};

// --tuning: what the point is and where it came from, and each warning of the loader.
void PrintTuning(const pig::tools::Tuning &t) {
  for (const std::string &w : t.warnings)
    std::fprintf(stderr, "pig-run: warning: %s\n", w.c_str());
  std::fprintf(stderr, "tuning: %s\n", pig::app::DescribePoint(t.source, t.point).c_str());
}

Prepared Prepare(const Options &o) {
  pig::app::RegisterKernels();
  Prepared p;
  p.model = LlamaModel::Load(o.model.path);
  p.attention = o.attention;
  if (!o.tuning.file.empty()) {
    p.tuning =
        pig::tools::LoadTuning(o.tuning.file, o.tuning.max_error, p.model->config().n_layers);
    p.attention = pig::tools::ApplyTuning(o.attention, p.tuning->point);
    if (o.schedule_set)
      p.attention.schedule = o.attention.schedule;
  }
  // Every method's parameters are checked before the (long) prefill.
  p.attention.Validate(p.model->config().n_layers);
  for (const std::string &m : o.compare)
    p.ForMethod(o, m).Validate(p.model->config().n_layers);
  const Tokenizer &tok = p.model->tokenizer();
  const LlamaConfig &cfg = p.model->config();
  const std::string text = o.chat ? tok.ApplyChatTemplate(o.prompt) : o.prompt;
  p.prompt = tok.Encode(text);
  if (p.prompt.empty())
    throw std::runtime_error("the prompt encodes to no tokens");
  const size_t steps = StepsNeeded(o);
  const std::string steps_flag = size_t(std::max(o.max_new, 0L)) >= steps
                                     ? "--max-new " + std::to_string(o.max_new)
                                     : "--rate-steps " + std::to_string(o.rate_steps) + " + 1";
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

std::vector<float> Prefill(LlamaSession &session, size_t vocab, const std::vector<int32_t> &prompt,
                           double &seconds) {
  std::vector<float> logits(vocab);
  std::optional<pig::app::Progress> bar; // a long prompt on a terminal: the time left
  if (prompt.size() > 2 * LlamaSession::kChunk && isatty(2))
    bar.emplace("prefill", double(prompt.size()));
  const auto t0 = Clock::now();
  session.Forward(prompt.data(), prompt.size(), logits.data(), false, [&](size_t done, size_t n) {
    if (!bar)
      return;
    bar->Update(double(done), std::to_string(done) + "/" + std::to_string(n) + " tokens");
    if (done == n)
      bar->Done();
  });
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return logits;
}

int Run(const Options &o) {
  Prepared p = Prepare(o);
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  ThreadPool pool(o.threads);
  const AttentionShape shape{cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, p.ctx};
  LlamaSession session(*p.model, pool, p.ctx, MakeAttention(p.attention, shape));
  std::fprintf(stderr, "pig-run: %s (%s), %zu layers, dim %zu, %zu threads, %s kernels\n",
               o.model.path.c_str(), p.model->WeightTypesSummary().c_str(), cfg.n_layers, cfg.dim,
               pool.size(), session.kernels().target);
  if (p.tuning)
    PrintTuning(*p.tuning);
  std::fprintf(stderr, "pig-run: attention %s\n", p.attention.str(cfg.n_layers).c_str());
  std::fprintf(stderr, "pig-run: prompt %zu tokens\n", p.prompt.size());

  double prefill_s = 0;
  std::vector<float> logits = Prefill(session, cfg.vocab, p.prompt, prefill_s);
  const DecodeResult r = Decode(session, tok, std::move(logits), o, true);
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
  PrintSummary(session.attention(), cfg, session.position());
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
                 pig::run::AnswerContains(r.text, o.expect) ? "correct" : "WRONG",
                 o.expect.c_str());
  std::fprintf(stderr, "peak memory: %.1f MiB (RSS; weights are memory-mapped)\n", PeakRssMiB());
  return 0;
}

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
    const size_t cap = prompts.back().size() + size_t(o.max_new);
    attns.push_back(MakeAttention(
        p.attention, AttentionShape{cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cap}));
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
  std::vector<Sampler> samplers;
  for (size_t i = 0; i < B; ++i) {
    SamplingParams sp = o.sampling;
    sp.seed += i;
    samplers.emplace_back(sp);
  }
  std::vector<std::string> texts(B);
  std::vector<bool> done(B, false);
  size_t generated = 0, steps = 0;
  double first_s = 0, rest_s = 0;
  size_t rest_tokens = 0;
  for (long step = 0; step < o.max_new; ++step) {
    std::vector<int32_t> next;
    std::vector<size_t> seqs;
    for (size_t i = 0; i < B; ++i) {
      if (done[i])
        continue;
      const int32_t t = samplers[i].Sample(&logits[i * cfg.vocab], cfg.vocab);
      ++generated;
      if (tok.IsEndOfGeneration(t)) {
        done[i] = true;
        continue;
      }
      if (!tok.IsControl(t))
        texts[i] += tok.Decode(t);
      next.push_back(t);
      seqs.push_back(i);
    }
    if (seqs.empty() || step + 1 == o.max_new)
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
  (void)generated;
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
  std::fprintf(stderr, "peak memory: %.1f MiB (RSS; weights are memory-mapped)\n", PeakRssMiB());
  return 0;
}

// --compare: one dense prefill, then each method decodes from the same KV prefix; the texts and
// the figures are printed side by side.
int RunCompare(const Options &o) {
  Prepared p = Prepare(o);
  const LlamaConfig &cfg = p.model->config();
  const Tokenizer &tok = p.model->tokenizer();
  ThreadPool pool(o.threads);
  const AttentionShape shape{cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, p.ctx};
  AttentionSpec dense_spec = o.attention;
  dense_spec.method = pig::spec::Method::dense;
  LlamaSession prefill(*p.model, pool, p.ctx, MakeAttention(dense_spec, shape));
  std::fprintf(stderr, "pig-run: %s, %zu threads; prompt %zu tokens, prefilled once (dense)\n",
               o.model.path.c_str(), pool.size(), p.prompt.size());
  if (p.tuning)
    PrintTuning(*p.tuning);
  double prefill_s = 0;
  const std::vector<float> logits = Prefill(prefill, cfg.vocab, p.prompt, prefill_s);
  std::fprintf(stderr, "prefill: %.1f s = %.1f tokens/s\n", prefill_s,
               double(p.prompt.size()) / prefill_s);

  struct Column {
    std::string name;
    DecodeResult r;
    AttentionStats st;
    size_t kv_bytes = 0;
  };
  std::vector<Column> cols;
  for (const std::string &method : o.compare) {
    const AttentionSpec spec = p.ForMethod(o, method);
    std::unique_ptr<Attention> attn = MakeAttention(spec, shape);
    attn->LoadPrefix(prefill.attention().cache(), p.prompt.size());
    LlamaSession s(*p.model, pool, p.ctx, std::move(attn));
    s.SetPosition(p.prompt.size());
    std::fprintf(stderr, "decoding with %s\n", spec.str(cfg.n_layers).c_str());
    Column c;
    c.name = method != "magicpig" ? method
             : p.tuning           ? "magicpig (tuned, per layer)"
                        : "magicpig K=" + std::to_string(spec.K) + " L=" + std::to_string(spec.L);
    if (method == "magicpig" && !spec.transform.identity())
      c.name.append(" ").append(spec.transform.str());
    c.r = Decode(s, tok, logits, o, false);
    c.st = s.attention().stats();
    c.kv_bytes = s.attention().cache().MemoryBytes();
    cols.push_back(std::move(c));
  }

  const int w = 40;
  auto row = [&](const char *label, auto cell) {
    std::printf("%-24s", label);
    for (const Column &c : cols)
      std::printf(" | %-*s", w, cell(c).c_str());
    std::printf("\n");
  };
  auto fmt = [](const char *f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return std::string(b);
  };
  std::printf("\n");
  row("", [](const Column &c) { return c.name; });
  row("decode tokens/s", [&](const Column &c) {
    return fmt("%.1f", c.r.TokensPerSecond()) + " (" + std::to_string(c.r.steps) + " steps)";
  });
  row("first step (s)", [&](const Column &c) { return fmt("%.3f", c.r.first_s); });
  row("cost2 (sampled)", [&](const Column &c) {
    return c.st.indexed > 0 ? fmt("%.2f %%", 100 * c.st.cost2()) : std::string("-");
  });
  row("cost1 (index traffic)", [&](const Column &c) {
    return c.st.index_bytes_read > 0 ? fmt("%.2f %%", 100 * c.st.cost1()) : std::string("-");
  });
  row("GQA union / sum of sets", [&](const Column &c) {
    return c.st.gathered > 0 ? fmt("%.1f %%", 100 * c.st.gather_ratio()) : std::string("-");
  });
  row("KV cache MiB", [&](const Column &c) { return fmt("%.1f", double(c.kv_bytes) / 1048576); });
  row("index MiB", [&](const Column &c) {
    return c.st.index_bytes ? fmt("%.1f", double(c.st.index_bytes) / 1048576) : std::string("-");
  });
  if (std::any_of(cols.begin(), cols.end(), [](const Column &c) { return c.st.hash_bytes > 0; }))
    row("fitted hashing MiB", [&](const Column &c) {
      return c.st.hash_bytes ? fmt("%.1f", double(c.st.hash_bytes) / 1048576) : std::string("-");
    });
  if (!o.expect.empty()) {
    const std::string label = "answer has \"" + o.expect + "\"";
    row(label.size() <= 24 ? label.c_str() : "answer correct", [&](const Column &c) {
      return std::string(pig::run::AnswerContains(c.r.text, o.expect) ? "yes" : "NO");
    });
  }
  row("same tokens as first", [&](const Column &c) {
    size_t same = 0;
    while (same < c.r.tokens.size() && same < cols[0].r.tokens.size() &&
           c.r.tokens[same] == cols[0].r.tokens[same])
      ++same;
    return std::to_string(same) + " of " + std::to_string(c.r.tokens.size());
  });
  std::printf("\n");
  std::vector<std::vector<std::string>> wrapped;
  size_t lines = 0;
  for (const Column &c : cols) {
    wrapped.push_back(pig::app::Wrap(c.r.text, size_t(w)));
    lines = std::max(lines, wrapped.back().size());
  }
  for (size_t i = 0; i < lines; ++i) {
    std::printf("%-24s", i == 0 ? "generated text" : "");
    for (const auto &col : wrapped)
      std::printf(" | %-*s", w, i < col.size() ? col[i].c_str() : "");
    std::printf("\n");
  }
  if (o.rate_steps > 0)
    std::printf("\ndecode rates are over %zu steps per method: past the end of an answer the "
                "decode goes on, timed but not shown (--rate-steps)\n",
                o.rate_steps);
  if (o.demo)
    std::printf("the rates are at %zu tokens of context, where attention is a small part of a "
                "step; LSH sampling's speed-up grows with the context: build/bin/pig-bench-context "
                "measures it at 2k-32k\n",
                p.prompt.size());
  std::printf("\nkernels:\n");
  for (const Column &c : cols)
    std::printf("  %s: %s\n", c.name.c_str(), c.st.kernels.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    const Options o = Parse(argc, argv);
    if (o.show_prompt) {
      std::printf("%s\n", o.prompt.c_str());
      if (!o.expect.empty())
        std::printf("\nexpected answer: %s\n", o.expect.c_str());
      return 0;
    }
    return o.batch ? RunBatch(o) : o.compare.empty() ? Run(o) : RunCompare(o);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-run: error: %s\n", e.what());
    return 1;
  }
}
