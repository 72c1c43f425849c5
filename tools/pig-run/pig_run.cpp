// pig-run: decode a Llama-family GGUF model on the CPU.
//   pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N
//           [--temperature T --top-p P --seed S] [--chat] [--threads N] [--ctx N]
// Streams the generated text to stdout, then prints prefill and decode speed and peak memory
// to stderr. Without --model it uses the default model that ./pig installs.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = DefaultModelPath();
  std::string prompt;
  bool have_prompt = false;
  long max_new = 64;
  SamplingParams sampling;
  bool chat = false;
  size_t threads = 0;
  size_t ctx = 0;
  bool print_ids = false;
};

[[noreturn]] void Usage(const std::string &error) {
  if (!error.empty())
    std::fprintf(stderr, "pig-run: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N\n"
               "               [--temperature T] [--top-p P] [--seed S] [--chat]\n"
               "               [--threads N] [--ctx N] [--print-ids]\n"
               "default model: %s\n",
               DefaultModelPath());
  std::exit(error.empty() ? 0 : 2);
}

double ParseNumber(const std::string &flag, const char *s) {
  char *end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0')
    Usage(flag + " expects a number, got '" + s + "'");
  return v;
}

Options Parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") {
      o.model = value();
    } else if (a == "--prompt") {
      o.prompt = value();
      o.have_prompt = true;
    } else if (a == "--prompt-file") {
      const std::string path = value();
      std::ifstream in(path, std::ios::binary);
      if (!in)
        Usage("cannot read prompt file " + path);
      std::stringstream ss;
      ss << in.rdbuf();
      o.prompt = ss.str();
      o.have_prompt = true;
    } else if (a == "--max-new") {
      o.max_new = long(ParseNumber(a, value()));
    } else if (a == "--temperature") {
      o.sampling.temperature = float(ParseNumber(a, value()));
    } else if (a == "--top-p") {
      o.sampling.top_p = float(ParseNumber(a, value()));
    } else if (a == "--seed") {
      o.sampling.seed = uint64_t(ParseNumber(a, value()));
    } else if (a == "--chat") {
      o.chat = true;
    } else if (a == "--threads") {
      o.threads = size_t(ParseNumber(a, value()));
    } else if (a == "--ctx") {
      o.ctx = size_t(ParseNumber(a, value()));
    } else if (a == "--print-ids") {
      o.print_ids = true;
    } else if (a == "-h" || a == "--help") {
      Usage("");
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  if (!o.have_prompt)
    Usage("give --prompt TEXT or --prompt-file F");
  if (o.max_new < 0)
    Usage("--max-new must be >= 0");
  if (o.sampling.top_p <= 0 || o.sampling.top_p > 1)
    Usage("--top-p must be in (0, 1]");
  return o;
}

double PeakRssMiB() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0; // Linux reports KiB
}

int Run(const Options &o) {
  auto model = LlamaModel::Load(o.model);
  const Tokenizer &tok = model->tokenizer();
  const LlamaConfig &cfg = model->config();
  const std::string text = o.chat ? tok.ApplyChatTemplate(o.prompt) : o.prompt;
  const std::vector<int32_t> prompt = tok.Encode(text);
  if (prompt.empty())
    throw std::runtime_error("the prompt encodes to no tokens");
  size_t ctx = o.ctx ? o.ctx : prompt.size() + size_t(o.max_new);
  ctx = std::min(ctx, cfg.context_length);
  if (prompt.size() + size_t(o.max_new) > ctx) {
    throw std::runtime_error("prompt (" + std::to_string(prompt.size()) + " tokens) + --max-new " +
                             std::to_string(o.max_new) + " exceeds the context of " +
                             std::to_string(ctx) + " tokens");
  }
  ThreadPool pool(o.threads);
  LlamaSession session(*model, pool, ctx);
  std::fprintf(stderr, "pig-run: %s (%s), %zu layers, dim %zu, %zu threads, %s kernels\n",
               o.model.c_str(), model->WeightTypesSummary().c_str(), cfg.n_layers, cfg.dim,
               pool.size(), session.kernels().target);
  std::fprintf(stderr, "pig-run: prompt %zu tokens\n", prompt.size());

  std::vector<float> logits(cfg.vocab);
  const bool show_bar = prompt.size() > 2 * LlamaSession::kChunk;
  const auto t0 = Clock::now();
  session.Forward(prompt.data(), prompt.size(), logits.data(), false, [&](size_t done, size_t n) {
    if (!show_bar)
      return;
    const int width = 40, filled = int(width * done / n);
    std::fprintf(stderr, "\rprefill [%.*s%*s] %zu/%zu", filled,
                 "########################################", width - filled, "", done, n);
    if (done == n)
      std::fprintf(stderr, "\n");
  });
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

  Sampler sampler(o.sampling);
  std::vector<int32_t> generated;
  const auto t1 = Clock::now();
  for (long i = 0; i < o.max_new; ++i) {
    const int32_t next = sampler.Sample(logits.data(), cfg.vocab);
    generated.push_back(next);
    if (tok.IsEndOfGeneration(next))
      break;
    if (!tok.IsControl(next)) {
      const std::string piece = tok.Decode(next);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 < o.max_new)
      session.Forward(&next, 1, logits.data());
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf("\n");
  std::fflush(stdout); // the statistics go to stderr: keep them after the text
  if (o.print_ids) {
    std::printf("prompt ids:");
    for (int32_t id : prompt)
      std::printf(" %d", id);
    std::printf("\ngenerated ids:");
    for (int32_t id : generated)
      std::printf(" %d", id);
    std::printf("\n");
  }
  // Decode speed counts the forward passes actually run (the last sampled token needs none).
  const size_t decode_steps = generated.empty() ? 0 : generated.size() - 1;
  std::fprintf(stderr, "prefill: %zu tokens in %.3f s = %.1f tokens/s\n", prompt.size(), prefill_s,
               double(prompt.size()) / prefill_s);
  if (decode_steps > 0) {
    std::fprintf(stderr, "decode: %zu tokens in %.3f s = %.1f tokens/s\n", decode_steps, decode_s,
                 double(decode_steps) / decode_s);
  } else {
    std::fprintf(stderr, "decode: no decode steps\n");
  }
  std::fprintf(stderr, "peak memory: %.1f MiB (RSS; weights are memory-mapped)\n", PeakRssMiB());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = Parse(argc, argv);
  try {
    return Run(o);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-run: error: %s\n", e.what());
    return 1;
  }
}
