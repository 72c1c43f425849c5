#include "pig/serve/http.h"

#include <chrono>
#include <cstdio>

#include "transport.h"

namespace pig::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);
constexpr size_t kMaxWarningsRemembered = 256;

bool SendJson(net::Exchange &ex, int status, const Json &j, const net::Headers &headers = {}) {
  return ex.Respond(status, "application/json", Dump(j), headers);
}

void SendError(net::Exchange &ex, const ApiError &e) {
  net::Headers headers;
  if (e.retry_after > 0)
    headers.emplace_back("Retry-After", std::to_string(e.retry_after));
  SendJson(ex, e.status(), ErrorBody(e.what(), e.type(), e.param()), headers);
}

} // namespace

std::string EscapeForLog(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else
      out += ch;
  }
  return out;
}

void HttpServer::Log(const std::string &line) const {
  if (!opts_.log_requests)
    return;
  const std::string out = "pig-serve: " + EscapeForLog(line) + "\n";
  std::fputs(out.c_str(), stderr);
}

HttpServer::HttpServer(HttpOptions o) : opts_(std::move(o)) {
  net::TransportOptions t;
  t.host = opts_.host;
  t.port = opts_.port;
  t.api_key = opts_.api_key;
  t.max_body = opts_.max_body;
  t.max_connections = opts_.max_connections;
  t.max_header_bytes = opts_.max_header_bytes;
  t.max_header_fields = opts_.max_header_fields;
  t.workers = opts_.threads ? opts_.threads : 64;
  t.idle_timeout_s = opts_.idle_timeout_s;
  t.header_timeout_s = opts_.header_timeout_s;
  t.body_timeout_s = opts_.body_timeout_s;
  t.write_timeout_s = opts_.write_timeout_s;
  t.error_body = [](int status, const std::string &message) {
    const char *type = status == 401   ? "authentication_error"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    return std::pair<std::string, std::string>("application/json",
                                               Dump(ErrorBody(message, type, {}, status)));
  };
  if (opts_.log_requests)
    t.log = [this](const std::string &line) { Log(line); };

  std::vector<net::Route> routes;
  routes.push_back({"GET", "/health", /*open=*/true, /*light=*/true, [this](net::Exchange &ex) {
                      if (!engine_.load())
                        SendJson(ex, 503, {{"status", "loading"}});
                      else if (draining_.load())
                        SendJson(ex, 503, {{"status", "shutting down"}});
                      else
                        SendJson(ex, 200, {{"status", "ok"}});
                    }});
  routes.push_back({"GET", "/metrics", true, true, [this](net::Exchange &ex) {
                      Engine *engine = engine_.load();
                      if (!engine) {
                        SendJson(ex, 503, ErrorBody("the model is loading", "server_error"));
                        return;
                      }
                      ex.Respond(200, "text/plain; version=0.0.4", engine->Metrics().Render());
                    }});
  routes.push_back({"GET", "/v1/models", false, true, [this](net::Exchange &ex) {
                      Json model = {{"id", opts_.model_id},
                                    {"object", "model"},
                                    {"owned_by", "pig"},
                                    {"created", 0}};
                      if (Engine *engine = engine_.load()) {
                        const runtime::LlamaConfig &c = engine->model().config();
                        model["max_model_len"] = engine->options().context;
                        model["meta"] = {{"arch", c.arch},
                                         {"n_layers", c.n_layers},
                                         {"n_heads", c.n_heads},
                                         {"n_kv_heads", c.n_kv_heads},
                                         {"head_dim", c.head_dim},
                                         {"vocab", c.vocab},
                                         {"context_length", c.context_length},
                                         {"attention", defaults_.attention.str(c.n_layers)}};
                      }
                      SendJson(ex, 200, {{"object", "list"}, {"data", Json::array({model})}});
                    }});
  routes.push_back({"POST", "/v1/completions", false, false,
                    [this](net::Exchange &ex) { Generate(ex, Endpoint::kCompletions); }});
  routes.push_back({"POST", "/v1/chat/completions", false, false,
                    [this](net::Exchange &ex) { Generate(ex, Endpoint::kChat); }});

  // The tokenizer endpoints: a loaded engine, a JSON body, an ApiError as its JSON answer.
  auto tokenizer_endpoint = [this](auto handle) {
    return [this, handle](net::Exchange &ex) {
      try {
        Engine *engine = engine_.load();
        if (!engine)
          throw ApiError(503, "the model is loading", "server_error");
        Json body = ParseJsonBody(ex.body());
        ex.DropBody();
        SendJson(ex, 200, handle(*engine, body));
      } catch (const ApiError &e) {
        Log(ex.method() + " " + ex.path() + " " + std::to_string(e.status()) + " " + e.what());
        SendError(ex, e);
      }
    };
  };
  routes.push_back(
      {"POST", "/tokenize", false, false,
       tokenizer_endpoint([this](Engine &engine, const Json &body) {
         const runtime::Tokenizer &tok = engine.model().tokenizer();
         if (!body.is_object())
           throw ApiError(400, "the request body must be a JSON object");
         std::vector<int32_t> ids;
         if (body.contains("messages")) {
           ids = ParseRequest(Json{{"messages", body["messages"]}}, Endpoint::kChat, tok, defaults_,
                              engine.model().config().n_layers, engine.options().context)
                     .params.prompt;
         } else {
           const char *key = body.contains("content") ? "content" : "prompt";
           const auto it = body.find(key);
           if (it == body.end() || !it->is_string())
             throw ApiError(400, "give \"content\" (or \"prompt\") as a string, or \"messages\"",
                            "invalid_request_error", key);
           bool special = false;
           if (const auto s = body.find("add_special"); s != body.end()) {
             if (!s->is_boolean())
               throw ApiError(400, "add_special must be a boolean", "invalid_request_error",
                              "add_special");
             special = s->get<bool>();
           }
           ids = tok.Encode(it->get<std::string>(), special);
         }
         Json j = {
             {"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine.options().context}};
         if (const auto wp = body.find("with_pieces");
             wp != body.end() && wp->is_boolean() && wp->get<bool>()) {
           Json pieces = Json::array();
           for (const int32_t id : ids)
             pieces.push_back({{"id", id}, {"piece", tok.Decode(id)}});
           j["tokens"] = pieces;
         }
         return j;
       })});
  routes.push_back({"POST", "/detokenize", false, false,
                    tokenizer_endpoint([](Engine &engine, const Json &body) {
                      const runtime::Tokenizer &tok = engine.model().tokenizer();
                      const auto it = body.is_object() ? body.find("tokens") : body.end();
                      if (it == body.end() || !it->is_array())
                        throw ApiError(400, "tokens must be an array of token ids",
                                       "invalid_request_error", "tokens");
                      std::vector<int32_t> ids;
                      for (const Json &t : *it) {
                        if (!t.is_number_integer() || t.get<long long>() < 0 ||
                            t.get<long long>() >= (long long)tok.vocab_size())
                          throw ApiError(400,
                                         "tokens: every id must be an integer in [0, " +
                                             std::to_string(tok.vocab_size()) + ")",
                                         "invalid_request_error", "tokens");
                        ids.push_back(int32_t(t.get<long long>()));
                      }
                      const std::string text = tok.Decode(ids);
                      return Json{{"content", text}, {"prompt", text}};
                    })});
  transport_ = std::make_unique<net::Transport>(std::move(t), std::move(routes));
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Bind() { transport_->Bind(); }
int HttpServer::Port() const { return transport_->Port(); }
void HttpServer::Start() { transport_->Start(); }

void HttpServer::BeginDrain() {
  draining_.store(true);
  transport_->Drain();
}

void HttpServer::Stop() {
  if (transport_)
    transport_->Stop();
}

void HttpServer::SetEngine(Engine *engine, Defaults defaults) {
  defaults_ = std::move(defaults);
  engine_.store(engine);
}

void HttpServer::Generate(net::Exchange &ex, Endpoint endpoint) {
  Engine *engine = engine_.load();
  const auto t0 = Clock::now();
  const std::string path = ex.path();
  std::shared_ptr<Request> req;
  ParsedRequest parsed;
  try {
    if (!engine)
      throw ApiError(503, "the model is loading", "server_error");
    if (draining_.load())
      throw ApiError(503, "the server is shutting down", "server_error");
    {
      const Json body = ParseJsonBody(ex.body());
      ex.DropBody();
      const runtime::LlamaModel &model = engine->model();
      parsed = ParseRequest(body, endpoint, model.tokenizer(), defaults_, model.config().n_layers,
                            engine->options().context);
    }
    for (const std::string &w : parsed.warnings) {
      std::lock_guard lock(warned_mu_);
      if (warned_.size() < kMaxWarningsRemembered && warned_.insert(w).second)
        Log("warning: " + w);
    }
    req = engine->Submit(parsed.params);
  } catch (const ApiError &e) {
    Log("POST " + path + " " + std::to_string(e.status()) + " " + e.what());
    SendError(ex, e);
    return;
  }
  const runtime::Tokenizer &tok = engine->model().tokenizer();
  ResponseWriter writer(endpoint, opts_.model_id, tok, parsed.params.top_logprobs >= 0,
                        parsed.params.top_logprobs > 0);
  auto log_done = [&](const char *how) {
    if (!opts_.log_requests)
      return;
    const RequestSummary s = req->summary();
    char buf[256];
    std::snprintf(buf, sizeof buf, ": %s, prompt %zu, generated %zu, ttft %.3f s, total %.3f s",
                  req->method().c_str(), s.prompt_tokens, s.completion_tokens, s.ttft_s,
                  std::chrono::duration<double>(Clock::now() - t0).count());
    Log("POST " + path + " " + how + buf);
  };
  auto gone = [&] {
    engine->Cancel(req);
    log_done("client gone");
  };

  if (!parsed.stream) {
    std::string text;
    std::vector<TokenLogprob> lps;
    for (;;) {
      RequestUpdate u = req->Take(kPoll);
      text += u.text;
      lps.insert(lps.end(), u.logprobs.begin(), u.logprobs.end());
      if (u.finish == Finish::kError) {
        SendJson(
            ex, u.error_status ? u.error_status : 500,
            ErrorBody(u.error, u.error_status >= 500 ? "server_error" : "invalid_request_error"));
        log_done("error");
        return;
      }
      if (u.finish == Finish::kCancelled) {
        SendJson(ex, 503, ErrorBody("the request was cancelled", "server_error"));
        log_done("cancelled");
        return;
      }
      if (u.finish != Finish::kNone) {
        SendJson(ex, 200, writer.Whole(text, lps, u.finish, req->summary()));
        log_done(FinishReason(u.finish));
        return;
      }
      if (ex.ClientGone())
        return gone();
    }
  }

  // Streaming: server-sent events. ": ping" is an SSE comment, which clients skip: the transport
  // writes it to tell a client that closed from one that half-closed.
  auto send = [&](const std::string &payload) { return ex.Write("data: " + payload + "\n\n"); };
  if (!ex.StartStream(200, "text/event-stream",
                      {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}, ": ping\n\n"))
    return gone();
  if (const Json start = writer.Start(); !start.is_null() && !send(Dump(start)))
    return gone();
  for (;;) {
    RequestUpdate u = req->Take(kPoll);
    if (u.finish == Finish::kError || u.finish == Finish::kCancelled) {
      const bool err = u.finish == Finish::kError;
      send(Dump(ErrorBody(err ? u.error : "the request was cancelled",
                          err && u.error_status < 500 ? "invalid_request_error" : "server_error")));
      send("[DONE]");
      ex.EndStream();
      log_done(err ? "error" : "cancelled");
      return;
    }
    if (const Json chunk = writer.Chunk(u, u.finish); !chunk.is_null() && !send(Dump(chunk)))
      return gone();
    if (u.finish != Finish::kNone) {
      if (parsed.include_usage)
        send(Dump(writer.UsageChunk(req->summary())));
      send("[DONE]");
      ex.EndStream();
      log_done(FinishReason(u.finish));
      return;
    }
    if (ex.ClientGone())
      return gone();
  }
}

} // namespace pig::serve
