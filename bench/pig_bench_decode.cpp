// pig-bench-decode: end-to-end speed of the runtime on a GGUF model, beside the machine's
// streaming read bandwidth measured in the same process.
//   decode tokens/s at a 1-token and a 512-token context, prefill tokens/s at 2048 tokens,
//   weight bytes read per decoded token, and the fraction of bandwidth decode achieves.
// Usage: pig-bench-decode [--model FILE] [--threads N] [--prefill N] [--decode N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pig/runtime/model.h"
#include "pig/runtime/ops.h"

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Streaming read bandwidth: every thread reads its share of a buffer much larger than the
// caches (dot of a row with itself reads each byte once); best of several passes.
double MeasureReadBandwidth(ThreadPool &pool, const Kernels &k) {
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
    const double s = Seconds(t0);
    for (float p : partial)
      sink = sink + p;
    best = std::max(best, double(n) * sizeof(float) / s);
  }
  return best;
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

} // namespace

int main(int argc, char **argv) {
  std::string model_path = DefaultModelPath();
  size_t threads = 0, prefill_tokens = 2048, decode_steps = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: pig-bench-decode [--model F] [--threads N] [--prefill N] "
                           "[--decode N]\n");
      return 2;
    }
    if (a == "--model") {
      model_path = argv[++i];
    } else if (a == "--threads") {
      threads = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--prefill") {
      prefill_tokens = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--decode") {
      decode_steps = std::strtoul(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    ThreadPool pool(threads);
    const Kernels &k = BestKernels();
    const double bw = MeasureReadBandwidth(pool, k);
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
    std::printf("threads           %zu, kernels %s\n", pool.size(), k.target);
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
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-bench-decode: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
