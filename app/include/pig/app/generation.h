// The end of a generation, decided in one place: one sequence's sampler, its end-of-generation
// token, its stop strings, its token limit and the text each token shows (TextStream: UTF-8 whole,
// stop strings held back). Every front end (pig-run, pig-run --batch, pig-serve's engine, the
// Python Session.generate, pig-eval's tasks) feeds it the logits of each step and runs the
// forward passes itself: they batch differently, so Generation owns no model.
//
//   app::Generation gen(tok, {sampling, max_tokens, stop, ignore_eos});
//   for (;;) {
//     const app::Generation::Token t = gen.Next(logits, vocab);
//     show(t.text);
//     if (gen.done()) break;    // gen.stop() says why
//     forward(t.id, logits); // the last token is never run
//   }
//   show(gen.Finish());         // what was held back
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pig/app/text_stream.h"
#include "pig/runtime/sampler.h"
#include "pig/runtime/tokenizer.h"

namespace pig::app {

struct GenerationOptions {
  runtime::SamplingParams sampling;
  size_t max_tokens = 16;        ///< tokens at most (the end-of-generation token counts); 0: none
  std::vector<std::string> stop; ///< stop strings (empty ones ignored)
  bool ignore_eos = false;       ///< go on past the end-of-generation token (benchmarks)
};

/// Why a generation ended. kEndOfGeneration and kStopString are OpenAI's finish_reason "stop",
/// kMaxTokens its "length".
enum class StopReason { kNone, kEndOfGeneration, kStopString, kMaxTokens };

class Generation {
public:
  /// `tok` outlives the generation. With max_tokens 0 it is done at once (stop(): kMaxTokens).
  Generation(const runtime::Tokenizer &tok, GenerationOptions o);

  struct Token {
    int32_t id = 0;
    std::string text; ///< what may be shown now (possibly ""; never a control token's text)
  };

  /// Samples the next token from `logits` (vocab floats) and takes it (Accept). Not after done().
  Token Next(const float *logits, size_t vocab);
  /// Takes a token chosen elsewhere: counts it, decides whether the generation ends with it.
  Token Accept(int32_t token);
  /// A token from the sequence's sampler that is not part of the answer (pig-run's timed steps
  /// past its end draw from the same random stream as the answer did).
  int32_t Sample(const float *logits, size_t vocab) { return sampler_.Sample(logits, vocab); }
  /// Once done(): the text held back (an incomplete UTF-8 character, a possible stop string's
  /// start); "" after a stop string.
  std::string Finish() { return text_.Finish(); }

  bool done() const { return stop_ != StopReason::kNone; }
  StopReason stop() const { return stop_; }
  size_t generated() const { return generated_; } ///< tokens taken (control tokens too)

private:
  const runtime::Tokenizer *tok_;
  size_t max_tokens_;
  bool ignore_eos_;
  runtime::Sampler sampler_;
  TextStream text_;
  size_t generated_ = 0;
  StopReason stop_ = StopReason::kNone;
};

} // namespace pig::app
