// OpenAI's HTTP API over the engine: request bodies of /v1/completions and /v1/chat/completions
// parsed into GenerationParams (every field type- and range-checked: a wrong one is an ApiError
// 400 naming it), and the responses rendered in OpenAI's shapes: a whole response, streaming chunks
// (Server-Sent Events), the final usage chunk and errors.
//
// pig's extension: a request may carry "pig": {"attention": "magicpig", "lsh": "K=10,L=150,t=2",
// "kv": "q8", "sink": 4, "local": 64, "dense_layers": "0,15", "budget": 0.03, "transform":
// "whiten:a=0.15", "schedule": "gqa=union"}: the fields of pig-run's attention options, spelled,
// checked and parsed by the same table (pig/app/attention_fields.h), over the server's defaults
// from its own command line; an error names the field as pig.<field>.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/tokenizer.h"
#include "pig/serve/engine.h"

namespace pig::serve {

using Json = nlohmann::json;

/// What the server's command line says a request gets when it says nothing.
struct Defaults {
  runtime::AttentionSpec attention; ///< --attention, --lsh, --kv, ... (pig-run's)
  /// magicpig with --tuning's operating point; used by a magicpig request that gives neither lsh
  /// nor dense_layers (which replace the point, as pig-run's --lsh would conflict with it).
  std::optional<runtime::AttentionSpec> tuned;
  size_t completion_max_tokens = 16; ///< OpenAI's default for /v1/completions
};

enum class Endpoint { kCompletions, kChat };

struct ParsedRequest {
  GenerationParams params;
  bool stream = false, include_usage = false;
  bool max_tokens_given = false;
  std::vector<std::string> warnings; ///< what the request's fields made us warn about
};

/// The attention a request's "pig" object asks for (null, absent or {}: the defaults). Throws
/// ApiError 400 naming pig.<field>. Warnings (a deprecated spelling) go to `warnings` if given.
runtime::AttentionSpec ParsePigExtension(const Json *pig, const Defaults &d, size_t n_layers,
                                         std::vector<std::string> *warnings = nullptr);

/// JSON nesting a request body may have: deeper bodies are refused before they are built.
inline constexpr int kMaxJsonDepth = 64;

/// Parses a request body as JSON: ApiError 400 for malformed JSON, nesting past kMaxJsonDepth
/// (refused while parsing, before the deep value exists) or a number out of range (naming the
/// field it was in).
Json ParseJsonBody(std::string_view body);

/// Parses a request body. `context` bounds the default max_tokens of a chat request (the rest
/// of the context). Throws ApiError 400 for a malformed or unsupported request.
ParsedRequest ParseRequest(const Json &body, Endpoint e, const runtime::Tokenizer &tok,
                           const Defaults &d, size_t n_layers, size_t context);

/// {"error": {"message", "type", "param", "code"}}
Json ErrorBody(const std::string &message, const std::string &type, const std::string &param = {},
               int code = 0);

/// Renders one request's responses (one choice: n = 1).
class ResponseWriter {
public:
  ResponseWriter(Endpoint e, std::string model, const runtime::Tokenizer &tok, bool logprobs,
                 bool chat_top_logprobs);
  /// The first chunk of a chat stream (the assistant's role); null for completions.
  Json Start() const;
  /// A chunk carrying an update's text and log-probabilities; null when it has neither text nor
  /// tokens. `finish` set: the chunk carries finish_reason.
  Json Chunk(const RequestUpdate &u, Finish finish);
  /// The final usage chunk (stream_options.include_usage).
  Json UsageChunk(const RequestSummary &s) const;
  /// The whole response of a non-streaming request from every update it got.
  Json Whole(const std::string &text, const std::vector<TokenLogprob> &logprobs, Finish finish,
             const RequestSummary &s);
  /// pig's account of a request: attention, cost2, times.
  static Json PigInfo(const RequestSummary &s);
  static Json Usage(const RequestSummary &s);
  const std::string &id() const { return id_; }

private:
  Json LogprobsJson(const std::vector<TokenLogprob> &lps);
  Json Choice(const std::string &text, const std::vector<TokenLogprob> &lps, Finish finish,
              bool delta);
  Json Envelope(bool chunk) const;

  Endpoint endpoint_;
  std::string model_, id_;
  long long created_;
  const runtime::Tokenizer &tok_;
  bool logprobs_, chat_top_;
  size_t text_offset_ = 0; // completions' text_offset of the next token
};

/// nlohmann's dump with invalid UTF-8 (a token's partial character) replaced by U+FFFD.
std::string Dump(const Json &j);

} // namespace pig::serve
