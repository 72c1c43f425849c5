// pig-bench-decode: end-to-end speed of the runtime on a GGUF model, beside the machine's
// streaming read bandwidth measured in the same process.
//   decode tokens/s at a 1-token and a 512-token context, prefill tokens/s at 2048 tokens,
//   weight bytes read per decoded token, and the fraction of bandwidth decode achieves;
//   then batched decode (LlamaBatch, dense attention): B = 1, 2, 4, ... up to --batch-max
//   sequences of different lengths step together, tokens/s of all of them and per sequence.
// Usage: pig-bench-decode [--model FILE] [--threads N] [--prefill N] [--decode N]
//                         [--batch-max N (16; 0: no batch table)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/report.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/ops.h"

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double DecodeRate(LlamaSession &session, size_t context, size_t steps, size_t vocab) {
  std::vector<int32_t> prompt(context);
  for (size_t i = 0; i < context; ++i)
    prompt[i] = int32_t(100 + (i * 7919) % 20000);
  std::vector<float> logits(vocab);
  session.Reset();
  session.Forward(prompt.data(), prompt.size(), logits.data());
  int32_t next = prompt.back();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < steps; ++i) {
    session.Forward(&next, 1, logits.data());
    next = int32_t(100 + (next * 31) % 20000);
  }
  return double(steps) / Seconds(t0);
}

// Prompt lengths of a batch of b sequences: the midpoints of b equal bins of [64, 512], so every
// B decodes at the same mean context (288) and the rows differ only in how many share a step.
std::vector<size_t> BatchLengths(size_t b) {
  std::vector<size_t> len(b);
  for (size_t i = 0; i < b; ++i)
    len[i] = 64 + (448 * (2 * i + 1)) / (2 * b);
  return len;
}

// Prefills b sequences (BatchLengths) and returns decode steps/s with all b stepping together
// (best of three rounds of steps / 3).
double BatchStepRate(const LlamaModel &model, ThreadPool &pool, size_t b, size_t steps) {
  const LlamaConfig &c = model.config();
  const std::vector<size_t> len = BatchLengths(b);
  const size_t per_round = std::max<size_t>(1, steps / 3);
  std::vector<std::unique_ptr<Attention>> attn;
  for (size_t i = 0; i < b; ++i) {
    attn.push_back(std::make_unique<DenseAttention>(c.Shape(len[i] + 3 * per_round)));
  }
  LlamaBatch batch(model, pool, std::move(attn));
  std::vector<int32_t> next(b);
  std::vector<size_t> seqs(b);
  for (size_t i = 0; i < b; ++i) {
    std::vector<int32_t> prompt(len[i]);
    for (size_t j = 0; j < len[i]; ++j)
      prompt[j] = int32_t(100 + (j * 7919 + i * 104729) % 20000);
    batch.Prefill(i, prompt.data(), prompt.size(), nullptr);
    next[i] = prompt.back();
    seqs[i] = i;
  }
  // Best of three rounds: the development machine is shared, and a round that another job
  // interrupted says nothing about the batch.
  std::vector<float> logits(b * c.vocab);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (size_t s = 0; s < per_round; ++s) {
      batch.Step(next.data(), seqs.data(), b, logits.data());
      for (auto &t : next)
        t = int32_t(100 + (t * 31) % 20000);
    }
    best = std::max(best, double(per_round) / Seconds(t0));
  }
  return best;
}

} // namespace

int main(int argc, char **argv) {
  pig::app::ModelOptions model_opts;
  size_t threads = 0, prefill_tokens = 2048, decode_steps = 32, batch_max = 16;
  CLI::App app{"End-to-end speed of the runtime on a GGUF model, beside the machine's streaming "
               "read bandwidth measured in the same process.",
               "pig-bench-decode"};
  pig::app::Init(app);
  pig::app::AddModelOptions(app, model_opts);
  pig::app::AddThreadsOption(app, threads);
  app.add_option("--prefill", prefill_tokens, "tokens of the prefill measurement")
      ->check(pig::app::Integer(1, size_t(1) << 20))
      ->capture_default_str();
  app.add_option("--decode", decode_steps, "decode steps per measurement")
      ->check(pig::app::Integer(1, size_t(1) << 20))
      ->capture_default_str();
  app.add_option("--batch-max", batch_max, "largest batch of the batched table (0: no table)")
      ->check(pig::app::Integer(0, LlamaBatch::Options{}.max_rows))
      ->capture_default_str();
  pig::app::Parse(app, argc, argv);
  const std::string &model_path = model_opts.path;
  try {
    ThreadPool pool(threads);
    const Kernels &k = BestKernels();
    const double bw = pig::app::MeasureReadBandwidth(pool);
    pig::app::RegisterKernels();
    auto model = LlamaModel::Load(model_path);
    const size_t vocab = model->config().vocab;
    const double bytes_per_token = double(model->WeightBytesPerToken());
    LlamaSession session(*model, pool, std::max<size_t>(prefill_tokens, 512 + decode_steps) + 1);

    // Warm-up: fault the mapped weights in so that the first measurement is not a disk read.
    DecodeRate(session, 1, 2, vocab);
    const double d1 = DecodeRate(session, 1, decode_steps, vocab);
    const double d512 = DecodeRate(session, 512, decode_steps, vocab);

    std::vector<int32_t> prompt(prefill_tokens);
    for (size_t i = 0; i < prefill_tokens; ++i)
      prompt[i] = int32_t(100 + (i * 7919) % 20000);
    std::vector<float> logits(vocab);
    session.Reset();
    const auto t0 = Clock::now();
    session.Forward(prompt.data(), prompt.size(), logits.data());
    const double prefill = double(prefill_tokens) / Seconds(t0);

    const double gb = 1e9;
    std::printf("model             %s (%s)\n", model_path.c_str(),
                model->WeightTypesSummary().c_str());
    std::printf("threads           %zu, kernels %s, weights by %s\n", pool.size(), k.target,
                k.int8_instruction);
    std::printf("read bandwidth    %.2f GB/s (streaming, measured here)\n", bw / gb);
    std::printf("weights/token     %.1f MB read per decoded token\n", bytes_per_token / 1e6);
    std::printf("%-28s %10s %14s %12s\n", "measurement", "tokens/s", "weight GB/s", "of bandwidth");
    auto row = [&](const char *name, double rate) {
      const double used = rate * bytes_per_token;
      std::printf("%-28s %10.1f %14.2f %11.0f%%\n", name, rate, used / gb, 100.0 * used / bw);
    };
    row("decode, 1-token context", d1);
    row("decode, 512-token context", d512);
    std::printf("%-28s %10.1f\n",
                ("prefill, " + std::to_string(prefill_tokens) + " tokens").c_str(), prefill);
    std::printf("target: decode >= 60%% of bandwidth\n");

    if (batch_max > 0) {
      std::printf("\nbatched decode, dense attention, prompts of 64..512 tokens (mean 288), "
                  "best of 3 x %zu steps\n",
                  std::max<size_t>(1, decode_steps / 3));
      std::printf("%-6s %-24s %14s %14s %10s\n", "B", "prompt lengths", "tokens/s (all)",
                  "per sequence", "vs B=1");
      double base = 0;
      for (size_t b = 1; b <= batch_max; b *= 2) {
        const double steps_per_s = BatchStepRate(*model, pool, b, decode_steps);
        const double total = steps_per_s * double(b);
        if (b == 1)
          base = total;
        const std::vector<size_t> len = BatchLengths(b);
        std::string lengths = std::to_string(len.front());
        if (b > 1)
          lengths += ".." + std::to_string(len.back());
        std::printf("%-6zu %-24s %14.1f %14.1f %9.2fx\n", b, lengths.c_str(), total, steps_per_s,
                    total / base);
      }
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-bench-decode: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
