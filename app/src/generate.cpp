#include "pig/app/generate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "pig/app/progress.h"

namespace pig::app {
namespace {
using Clock = std::chrono::steady_clock;
} // namespace

size_t StepsNeeded(const GenerateOptions &o) {
  return std::max(size_t(std::max(o.max_new, 0L)), o.rate_steps + 1);
}

DecodeResult Decode(const ForwardStep &forward, const runtime::Tokenizer &tok,
                    std::vector<float> logits, const GenerateOptions &o, const OnPiece &on_piece) {
  const size_t vocab = logits.size();
  Generation gen(tok, {o.sampling, size_t(std::max(o.max_new, 0L)), {}, false});
  DecodeResult r;
  const auto show = [&](const std::string &piece) {
    r.text += piece;
    if (on_piece && !piece.empty())
      on_piece(piece);
  };
  while (!gen.done() || r.steps < o.rate_steps) {
    int32_t next = 0;
    if (!gen.done()) {
      const Generation::Token t = gen.Next(logits.data(), vocab);
      next = t.id;
      r.tokens.push_back(next);
      show(t.text);
      if (gen.done())
        show(gen.Finish());
    } else {
      next = gen.Sample(logits.data(), vocab); // a timed step past the answer
    }
    if (!gen.done() || r.steps < o.rate_steps) {
      const auto t = Clock::now();
      forward(next, logits.data());
      const double s = std::chrono::duration<double>(Clock::now() - t).count();
      (r.steps == 0 ? r.first_s : r.rest_s) += s;
      ++r.steps;
    }
  }
  return r;
}

DecodeResult Decode(runtime::LlamaSession &session, const runtime::Tokenizer &tok,
                    std::vector<float> logits, const GenerateOptions &o, const OnPiece &on_piece) {
  return Decode([&session](int32_t token, float *out) { session.Forward(&token, 1, out); }, tok,
                std::move(logits), o, on_piece);
}

std::vector<float> Prefill(runtime::LlamaSession &session, size_t vocab,
                           const std::vector<int32_t> &prompt, double &seconds) {
  std::vector<float> logits(vocab);
  std::optional<Progress> bar; // a long prompt on a terminal: the time left
  if (prompt.size() > 2 * runtime::LlamaSession::kChunk && isatty(2))
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

} // namespace pig::app
