// Generating text from a prompt on one session: the prefill (with a progress bar on a terminal)
// and the decode loop (its answer ends where Generation decides; timed steps go on past the
// answer's end so that a rate does not rest on a short answer). pig-run's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pig/app/generation.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"
#include "pig/runtime/tokenizer.h"

namespace pig::app {

struct GenerateOptions {
  runtime::SamplingParams sampling;
  long max_new = 64;     ///< tokens of the answer at most (<= 0: no answer)
  size_t rate_steps = 0; ///< forward passes run (and timed) at least, past the answer's end
};

/// Decode steps a run needs room for in the KV cache: the answer's, or rate_steps + 1.
size_t StepsNeeded(const GenerateOptions &o);

struct DecodeResult {
  std::vector<int32_t> tokens; ///< the answer: up to the end of generation or max_new
  std::string text;            ///< its text (control tokens left out)
  size_t steps = 0;            ///< forward passes run (the last sampled token needs none)
  double first_s = 0;          ///< the first step (builds the LSH index of every sparse layer)
  double rest_s = 0;           ///< the other steps
  double TokensPerSecond() const { return steps > 1 ? double(steps - 1) / rest_s : 0.0; }
};

/// One forward pass of `token` at the next position; writes its logits (vocab floats).
using ForwardStep = std::function<void(int32_t token, float *logits)>;
/// Called with each piece of the answer's text as it can be shown (e.g. to stream it): never
/// empty, and a UTF-8 character a token ends inside comes whole with a later piece.
using OnPiece = std::function<void(const std::string &piece)>;

/// Samples from `logits` (the prompt's last position), then runs one forward pass per token.
/// The answer ends at the end-of-generation token or after max_new tokens; with rate_steps N
/// the decode goes on (timed, neither kept nor shown) until N forward passes have run.
DecodeResult Decode(const ForwardStep &forward, const runtime::Tokenizer &tok,
                    std::vector<float> logits, const GenerateOptions &o,
                    const OnPiece &on_piece = {});
/// The same, each step a session.Forward of one token.
DecodeResult Decode(runtime::LlamaSession &session, const runtime::Tokenizer &tok,
                    std::vector<float> logits, const GenerateOptions &o,
                    const OnPiece &on_piece = {});

/// Prefills `prompt`; returns the logits of its last position and its time in `seconds`. A long
/// prompt (more than two chunks) on a terminal draws a progress bar with the time left.
std::vector<float> Prefill(runtime::LlamaSession &session, size_t vocab,
                           const std::vector<int32_t> &prompt, double &seconds);

} // namespace pig::app
