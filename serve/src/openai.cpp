#include "pig/serve/openai.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "pig/app/attention_fields.h"
#include "pig/spec/method.h"

namespace pig::serve {
namespace {

ApiError Bad(const std::string &param, const std::string &message) {
  return ApiError(400, message, "invalid_request_error", param);
}

const Json *Field(const Json &body, const char *name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool GetBool(const Json &body, const char *name, bool dflt) {
  const Json *v = Field(body, name);
  if (!v)
    return dflt;
  if (!v->is_boolean())
    throw Bad(name, std::string(name) + " must be a boolean");
  return v->get<bool>();
}

// An integer in [lo, hi] (JSON numbers that are whole: 3 and 3.0, not 3.5 or "3").
std::optional<long long> GetInt(const Json &body, const char *name, long long lo, long long hi) {
  const Json *v = Field(body, name);
  if (!v)
    return std::nullopt;
  long long x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<unsigned long long>() > (unsigned long long)hi)
      throw Bad(name, std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
    x = v->get<long long>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    x = (long long)v->get<double>();
  } else {
    throw Bad(name, std::string(name) + " must be an integer");
  }
  if (x < lo || x > hi)
    throw Bad(name, std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

std::optional<double> GetNumber(const Json &body, const char *name, double lo, double hi,
                                bool lo_open = false) {
  const Json *v = Field(body, name);
  if (!v)
    return std::nullopt;
  if (!v->is_number())
    throw Bad(name, std::string(name) + " must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s must be a number in %s%g, %g], got %g", name,
                  lo_open ? "(" : "[", lo, hi, x);
    throw Bad(name, buf);
  }
  return x;
}

// Fields OpenAI defines that pig does not implement: refused when they would change the answer,
// rather than ignored (unknown fields are ignored).
void RefuseUnsupported(const Json &body) {
  if (const Json *n = Field(body, "n"))
    if (!n->is_number_integer() || n->get<long long>() != 1)
      throw Bad("n", "n must be 1: pig-serve generates one choice per request");
  if (GetBool(body, "echo", false))
    throw Bad("echo", "echo is not supported");
  if (const Json *b = Field(body, "best_of"))
    if (!b->is_number_integer() || b->get<long long>() != 1)
      throw Bad("best_of", "best_of must be 1");
  if (const Json *s = Field(body, "suffix"))
    if (!s->is_string() || !s->get<std::string>().empty())
      throw Bad("suffix", "suffix is not supported");
  if (const Json *lb = Field(body, "logit_bias"))
    if (!lb->is_object() || !lb->empty())
      throw Bad("logit_bias", "logit_bias is not supported");
  for (const char *pen : {"presence_penalty", "frequency_penalty"}) {
    const std::optional<double> v = GetNumber(body, pen, -2, 2);
    if (v && *v != 0)
      throw Bad(pen, std::string(pen) + " is not supported (only 0)");
  }
  for (const char *f : {"tools", "functions", "tool_choice", "function_call"})
    if (const Json *v = Field(body, f))
      if (!(v->is_array() && v->empty()) && !(v->is_string() && v->get<std::string>() == "none"))
        throw Bad(f, std::string(f) + " is not supported");
  if (const Json *rf = Field(body, "response_format")) {
    const Json *t = rf->is_object() ? Field(*rf, "type") : nullptr;
    if (!t || !t->is_string() || t->get<std::string>() != "text")
      throw Bad("response_format", "response_format: only {\"type\": \"text\"} is supported");
  }
}

std::vector<int32_t> TokenArray(const Json &a, const char *param) {
  std::vector<int32_t> out;
  for (const Json &t : a) {
    if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() > INT32_MAX)
      throw Bad(param, std::string(param) + ": a token id must be a non-negative integer");
    out.push_back(int32_t(t.get<long long>()));
  }
  return out;
}

// A prompt past the context, refused as the engine refuses it but as soon as its ids pass the
// context: a long text is never encoded whole to be counted.
ApiError PromptPastContext(size_t context) {
  const std::string c = std::to_string(context);
  return Bad("prompt",
             "the prompt (more than " + c + " tokens) exceeds the context of " + c + " tokens");
}

std::vector<int32_t> CompletionPrompt(const Json &body, const runtime::Tokenizer &tok,
                                      size_t context) {
  const Json *p = Field(body, "prompt");
  if (!p)
    throw Bad("prompt", "prompt is required");
  const Json *one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1)
      throw Bad("prompt", "one prompt per request (pig-serve generates one choice)");
    one = &p->front();
  }
  if (one->is_string()) {
    const std::string &text = one->get_ref<const std::string &>();
    if (text.empty())
      throw Bad("prompt", "the prompt is empty");
    try {
      return tok.Encode(text, true, context);
    } catch (const runtime::TokenLimitExceeded &) {
      throw PromptPastContext(context);
    }
  }
  if (one->is_array()) {
    if (one->empty())
      throw Bad("prompt", "the prompt is empty");
    return TokenArray(*one, "prompt");
  }
  throw Bad("prompt", "prompt must be a string, an array of token ids, or an array of one of them");
}

std::string MessageText(const Json &content, size_t i) {
  const std::string param = "messages[" + std::to_string(i) + "].content";
  if (content.is_string())
    return content.get<std::string>();
  if (content.is_array()) { // [{"type": "text", "text": ...}, ...]
    std::string out;
    for (const Json &part : content) {
      const Json *type = part.is_object() ? Field(part, "type") : nullptr;
      const Json *text = part.is_object() ? Field(part, "text") : nullptr;
      if (!type || !type->is_string() || type->get<std::string>() != "text" || !text ||
          !text->is_string())
        throw Bad(param, param + ": only text parts ({\"type\": \"text\", \"text\": ...}) are "
                                 "supported");
      out += text->get<std::string>();
    }
    return out;
  }
  throw Bad(param, param + " must be a string or an array of text parts");
}

std::vector<int32_t> ChatPrompt(const Json &body, const runtime::Tokenizer &tok, size_t context) {
  const Json *m = Field(body, "messages");
  if (!m)
    throw Bad("messages", "messages is required");
  if (!m->is_array() || m->empty())
    throw Bad("messages", "messages must be a non-empty array");
  std::vector<runtime::ChatMessage> msgs;
  for (size_t i = 0; i < m->size(); ++i) {
    const Json &msg = (*m)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object())
      throw Bad(param, param + " must be an object");
    const Json *role = Field(msg, "role");
    if (!role || !role->is_string())
      throw Bad(param + ".role", param + ".role must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer")
      r = "system"; // OpenAI's newer name for the system message
    if (r != "system" && r != "user" && r != "assistant")
      throw Bad(param + ".role",
                param + ".role must be system, user or assistant, got '" + r + "'");
    const Json *content = Field(msg, "content");
    if (!content)
      throw Bad(param + ".content", param + ".content is required");
    msgs.push_back({r, MessageText(*content, i)});
  }
  try {
    return tok.EncodeChat(msgs, true, context);
  } catch (const runtime::TokenLimitExceeded &) {
    throw PromptPastContext(context);
  } catch (const std::invalid_argument &e) {
    throw Bad("messages", std::string("messages: ") + e.what());
  } catch (const std::runtime_error &e) {
    throw Bad("messages", std::string("messages: ") + e.what());
  }
}

std::vector<std::string> Stops(const Json &body) {
  const Json *s = Field(body, "stop");
  if (!s)
    return {};
  if (s->is_string())
    return {s->get<std::string>()};
  if (s->is_array()) {
    if (s->size() > 16)
      throw Bad("stop", "stop takes at most 16 strings");
    std::vector<std::string> out;
    for (const Json &x : *s) {
      if (!x.is_string())
        throw Bad("stop", "stop must be a string or an array of strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }
  throw Bad("stop", "stop must be a string or an array of strings");
}

std::string NewId(const char *prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx%06llx", prefix, (unsigned long long)salt,
                (unsigned long long)(counter.fetch_add(1) & 0xffffff));
  return buf;
}

Json TokenBytes(const std::string &s) {
  Json b = Json::array();
  for (unsigned char c : s)
    b.push_back(int(c));
  return b;
}

} // namespace

std::string Dump(const Json &j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json ErrorBody(const std::string &message, const std::string &type, const std::string &param,
               int code) {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty())
    e["param"] = param;
  if (code)
    e["code"] = code;
  return Json{{"error", e}};
}

Json ParseJsonBody(std::string_view body) {
  std::string key; // the last object key read: names the field of a number that overflows
  const Json::parser_callback_t check = [&key](int depth, Json::parse_event_t ev, Json &parsed) {
    if ((ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw ApiError(400, "invalid JSON: nested deeper than " + std::to_string(kMaxJsonDepth) +
                              " levels");
    if (ev == Json::parse_event_t::key && parsed.is_string())
      key = parsed.get<std::string>();
    return true;
  };
  try {
    return Json::parse(body, check);
  } catch (const Json::out_of_range &e) { // "number overflow parsing '1e400'"
    if (key.empty())
      throw ApiError(400, std::string("invalid JSON: ") + e.what());
    throw ApiError(400, "invalid JSON in field '" + key + "': " + e.what(), "invalid_request_error",
                   key);
  } catch (const Json::exception &e) {
    throw ApiError(400, std::string("invalid JSON: ") + e.what());
  }
}

runtime::AttentionSpec ParsePigExtension(const Json *pig, const Defaults &d, size_t n_layers,
                                         std::vector<std::string> *warnings) {
  if (!pig || pig->is_null() || (pig->is_object() && pig->empty()))
    return d.tuned && d.attention.method == spec::Method::magicpig ? *d.tuned : d.attention;
  if (!pig->is_object())
    throw Bad("pig", "pig must be an object");
  // The table's fields (pig-run's attention options): the same parsers and the same checks. A
  // JSON value is given as its text: a string as it is, a number as written (dump() spells
  // unsigned 64-bit values as they were given), dense layers as a list too.
  std::vector<std::pair<std::string, app::FieldValue>> values;
  bool replaces_point = false;
  for (const auto &[key, value] : pig->items()) {
    if (!app::FieldOf(app::Front::kRequest, key)) {
      std::string names;
      for (const app::AttentionField &f : app::AttentionFields())
        if (app::Takes(f, app::Front::kRequest))
          names += (names.empty() ? "" : ", ") + std::string(f.name);
      throw Bad("pig", "pig: unknown field '" + key + "' (known: " + names + ")");
    }
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_number()) {
      text = value.dump();
    } else if (value.is_array() && key == "dense_layers") {
      for (const Json &l : value) {
        if (!l.is_number_integer())
          throw Bad("pig", "pig.dense_layers must be a list of layer numbers or \"none\"");
        if (!text.empty())
          text += ',';
        text += std::to_string(l.get<long long>());
      }
      if (text.empty())
        text = "none";
    } else {
      throw Bad("pig", "pig." + key + " must be a string or a number");
    }
    if (key == "lsh" || key == "dense_layers")
      replaces_point = true;
    values.emplace_back(key, std::move(text));
  }
  runtime::AttentionSpec spec = d.attention;
  std::vector<std::string> said;
  try {
    app::ApplyFields(spec, app::Front::kRequest, values, warnings ? warnings : &said);
  } catch (const std::invalid_argument &e) {
    throw Bad("pig", e.what());
  }
  for (const std::string &w : said)
    std::fprintf(stderr, "pig: warning: %s\n", w.c_str());
  // A magicpig request that names no (K, L, t) or dense layers of its own gets the tuned point.
  if (d.tuned && spec.method == spec::Method::magicpig && !replaces_point) {
    runtime::AttentionSpec tuned = *d.tuned;
    tuned.kv_dtype = spec.kv_dtype;
    tuned.sink = spec.sink;
    tuned.local = spec.local;
    tuned.transform = spec.transform;
    tuned.schedule = spec.schedule;
    spec = tuned;
  } else if (replaces_point) {
    spec.layers.clear();
  }
  try {
    spec.Validate(n_layers);
  } catch (const std::invalid_argument &e) {
    throw Bad("pig", std::string("pig: ") + e.what());
  }
  return spec;
}

ParsedRequest ParseRequest(const Json &body, Endpoint e, const runtime::Tokenizer &tok,
                           const Defaults &d, size_t n_layers, size_t context) {
  if (!body.is_object())
    throw Bad("", "the request body must be a JSON object");
  RefuseUnsupported(body);
  ParsedRequest r;
  GenerationParams &p = r.params;
  if (const Json *m = Field(body, "model"); m && !m->is_string())
    throw Bad("model", "model must be a string");
  p.prompt =
      e == Endpoint::kChat ? ChatPrompt(body, tok, context) : CompletionPrompt(body, tok, context);
  if (p.prompt.empty())
    throw Bad(e == Endpoint::kChat ? "messages" : "prompt", "the prompt encodes to no tokens");
  std::optional<long long> max_tokens = GetInt(body, "max_tokens", LLONG_MIN, LLONG_MAX);
  if (e == Endpoint::kChat && !max_tokens)
    max_tokens = GetInt(body, "max_completion_tokens", LLONG_MIN, LLONG_MAX);
  if (max_tokens && *max_tokens <= 0)
    throw Bad("max_tokens", "max_tokens must be at least 1, got " + std::to_string(*max_tokens));
  r.max_tokens_given = max_tokens.has_value();
  if (max_tokens)
    p.max_tokens = size_t(*max_tokens);
  else if (e == Endpoint::kCompletions)
    p.max_tokens = d.completion_max_tokens;
  else // a chat answer may take the rest of the context, as OpenAI's and vLLM's do
    p.max_tokens = p.prompt.size() < context ? context - p.prompt.size() : 1;
  p.sampling.temperature = float(GetNumber(body, "temperature", 0, 100).value_or(1.0));
  p.sampling.top_p = float(GetNumber(body, "top_p", 0, 1, true).value_or(1.0));
  if (const Json *s = Field(body, "seed")) {
    if (!s->is_number_integer())
      throw Bad("seed", "seed must be an integer");
    p.sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
  } else {
    p.sampling.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  }
  p.stop = Stops(body);
  p.ignore_eos = GetBool(body, "ignore_eos", false);
  if (e == Endpoint::kCompletions) {
    if (const Json *lp = Field(body, "logprobs")) {
      if (lp->is_boolean())
        throw Bad("logprobs", "logprobs of /v1/completions is an integer (0 to 20)");
      p.top_logprobs = int(*GetInt(body, "logprobs", 0, 20));
    }
  } else {
    const bool lp = GetBool(body, "logprobs", false);
    const std::optional<long long> top = GetInt(body, "top_logprobs", 0, 20);
    if (top && !lp)
      throw Bad("top_logprobs", "top_logprobs needs logprobs: true");
    if (lp)
      p.top_logprobs = int(top.value_or(0));
  }
  r.stream = GetBool(body, "stream", false);
  if (const Json *so = Field(body, "stream_options")) {
    if (!so->is_object())
      throw Bad("stream_options", "stream_options must be an object");
    if (!r.stream)
      throw Bad("stream_options", "stream_options needs stream: true");
    r.include_usage = GetBool(*so, "include_usage", false);
  }
  p.attention = ParsePigExtension(Field(body, "pig"), d, n_layers, &r.warnings);
  return r;
}

// --- responses -----------------------------------------------------------------------------------

ResponseWriter::ResponseWriter(Endpoint e, std::string model, const runtime::Tokenizer &tok,
                               bool logprobs, bool chat_top_logprobs)
    : endpoint_(e), model_(std::move(model)),
      id_(NewId(e == Endpoint::kChat ? "chatcmpl" : "cmpl")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      tok_(tok), logprobs_(logprobs), chat_top_(chat_top_logprobs) {}

Json ResponseWriter::Envelope(bool chunk) const {
  const char *object = endpoint_ == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return Json{{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

Json ResponseWriter::LogprobsJson(const std::vector<TokenLogprob> &lps) {
  if (endpoint_ == Endpoint::kChat) {
    Json content = Json::array();
    for (const TokenLogprob &lp : lps) {
      const std::string s = tok_.Decode(lp.id);
      Json top = Json::array();
      for (const auto &[id, l] : lp.top) {
        const std::string t = tok_.Decode(id);
        top.push_back({{"token", t}, {"logprob", l}, {"bytes", TokenBytes(t)}});
      }
      content.push_back(
          {{"token", s}, {"logprob", lp.logprob}, {"bytes", TokenBytes(s)}, {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (const TokenLogprob &lp : lps) {
    const std::string s = tok_.Decode(lp.id);
    tokens.push_back(s);
    token_lps.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto &[id, l] : lp.top)
      top[tok_.Decode(id)] = l;
    tops.push_back(top);
    offsets.push_back(text_offset_);
    text_offset_ += s.size();
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", token_lps},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

Json ResponseWriter::Choice(const std::string &text, const std::vector<TokenLogprob> &lps,
                            Finish finish, bool delta) {
  Json c = {{"index", 0}};
  if (endpoint_ == Endpoint::kChat) {
    if (delta)
      c["delta"] =
          text.empty() && finish != Finish::kNone ? Json::object() : Json{{"content", text}};
    else
      c["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    c["text"] = text;
  }
  c["logprobs"] = logprobs_ ? LogprobsJson(lps) : Json(nullptr);
  c["finish_reason"] = finish == Finish::kNone ? Json(nullptr) : Json(FinishReason(finish));
  return c;
}

Json ResponseWriter::Start() const {
  if (endpoint_ != Endpoint::kChat)
    return nullptr;
  Json j = Envelope(true);
  j["choices"] = Json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return j;
}

Json ResponseWriter::Chunk(const RequestUpdate &u, Finish finish) {
  if (u.text.empty() && u.tokens.empty() && finish == Finish::kNone)
    return nullptr;
  Json j = Envelope(true);
  j["choices"] = Json::array({Choice(u.text, u.logprobs, finish, true)});
  return j;
}

Json ResponseWriter::Usage(const RequestSummary &s) {
  return Json{{"prompt_tokens", s.prompt_tokens},
              {"completion_tokens", s.completion_tokens},
              {"total_tokens", s.prompt_tokens + s.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

Json ResponseWriter::PigInfo(const RequestSummary &s) {
  Json j = {{"attention", s.attention},
            {"queue_s", s.queue_s},
            {"ttft_s", s.ttft_s},
            {"decode_s", s.decode_s}};
  if (s.completion_tokens > 1 && s.decode_s > 0)
    j["decode_tokens_per_s"] = double(s.completion_tokens - 1) / s.decode_s;
  if (s.stats.indexed > 0)
    j["cost2"] = s.stats.cost2();
  return j;
}

Json ResponseWriter::UsageChunk(const RequestSummary &s) const {
  Json j = Envelope(true);
  j["choices"] = Json::array();
  j["usage"] = Usage(s);
  j["pig"] = PigInfo(s);
  return j;
}

Json ResponseWriter::Whole(const std::string &text, const std::vector<TokenLogprob> &logprobs,
                           Finish finish, const RequestSummary &s) {
  Json j = Envelope(false);
  j["choices"] = Json::array({Choice(text, logprobs, finish, false)});
  j["usage"] = Usage(s);
  j["pig"] = PigInfo(s);
  return j;
}

} // namespace pig::serve
