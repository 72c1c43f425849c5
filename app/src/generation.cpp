#include "pig/app/generation.h"

#include <utility>

namespace pig::app {

Generation::Generation(const runtime::Tokenizer &tok, GenerationOptions o)
    : tok_(&tok), max_tokens_(o.max_tokens), ignore_eos_(o.ignore_eos), sampler_(o.sampling),
      text_(std::move(o.stop)) {
  if (max_tokens_ == 0)
    stop_ = StopReason::kMaxTokens;
}

Generation::Token Generation::Next(const float *logits, size_t vocab) {
  return Accept(sampler_.Sample(logits, vocab));
}

Generation::Token Generation::Accept(int32_t token) {
  ++generated_;
  // The end-of-generation token shows nothing even when it is not a control token; with
  // ignore_eos it is an ordinary token (usually a control one: still nothing shown).
  const bool end = !ignore_eos_ && tok_->IsEndOfGeneration(token);
  const std::string piece = end || tok_->IsControl(token) ? std::string() : tok_->Decode(token);
  Token t{token, text_.Push(piece)};
  if (end)
    stop_ = StopReason::kEndOfGeneration;
  else if (text_.stopped())
    stop_ = StopReason::kStopString;
  else if (generated_ >= max_tokens_)
    stop_ = StopReason::kMaxTokens;
  return t;
}

} // namespace pig::app
