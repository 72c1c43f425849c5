#include "pig/serve/http.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace pig::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);

void SendJson(httplib::Response &res, int status, const Json &j) {
  res.status = status;
  res.set_content(Dump(j), "application/json");
}

void SendError(httplib::Response &res, const ApiError &e) {
  if (e.retry_after > 0)
    res.set_header("Retry-After", std::to_string(e.retry_after));
  SendJson(res, e.status(), ErrorBody(e.what(), e.type(), e.param()));
}

// The connection's socket: cpp-httplib 0.11 does not hand it to handlers. It is the socket whose
// peer and local address are the request's; it stays open until the handler (and a content
// provider) returns, so the descriptor cannot be reused while we hold it.
int FindSocket(const httplib::Request &req) {
  DIR *dir = opendir("/proc/self/fd");
  if (!dir)
    return -1;
  int found = -1;
  while (const dirent *e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    struct stat st;
    if (e->d_name[0] == '.' || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr *>(&local), &ll) != 0)
      continue;
    char host[NI_MAXHOST], port[NI_MAXSERV], lport[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr *>(&peer), pl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0 ||
        getnameinfo(reinterpret_cast<sockaddr *>(&local), ll, nullptr, 0, lport, sizeof lport,
                    NI_NUMERICSERV) != 0)
      continue;
    if (req.remote_addr == host && req.remote_port == std::atoi(port) &&
        req.local_port == std::atoi(lport)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// The client closed its side (or the connection broke): a peek reads end-of-file or an error.
// Bytes waiting (a pipelined request) mean it is alive.
bool PeerGone(int fd) {
  if (fd < 0)
    return false;
  char c;
  const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

Json ParseBody(const httplib::Request &req) {
  try {
    return Json::parse(req.body);
  } catch (const Json::parse_error &e) {
    throw ApiError(400, std::string("invalid JSON: ") + e.what());
  }
}

void Log(bool on, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void Log(bool on, const char *fmt, ...) {
  if (!on)
    return;
  va_list ap;
  va_start(ap, fmt);
  std::string line = "pig-serve: ";
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  line += buf;
  line += '\n';
  std::fputs(line.c_str(), stderr);
}

} // namespace

HttpServer::HttpServer(HttpOptions o) : opts_(std::move(o)), svr_(new httplib::Server) {
  const size_t threads = opts_.threads ? opts_.threads : 64;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_->set_payload_max_length(opts_.max_body);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_keep_alive_timeout(5);
  svr_->set_read_timeout(30);
  svr_->set_write_timeout(30);
  Routes();
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Bind() {
  if (opts_.port == 0) {
    port_ = svr_->bind_to_any_port(opts_.host);
    if (port_ <= 0)
      throw std::runtime_error("cannot bind " + opts_.host + " to a free port");
  } else {
    if (!svr_->bind_to_port(opts_.host, opts_.port))
      throw std::runtime_error("cannot bind " + opts_.host + ":" + std::to_string(opts_.port) +
                               " (in use, or not a local address?)");
    port_ = opts_.port;
  }
}

void HttpServer::Start() {
  thread_ = std::thread([this] {
    svr_->listen_after_bind();
    listen_returned_.store(true);
  });
  // httplib's stop() does nothing until the listen loop runs (is_running()): a Stop() that came
  // first (a model that fails to load at once) would leave the loop accepting forever. So Start
  // returns only once the loop runs, or has returned on its own.
  while (!svr_->is_running() && !listen_returned_.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::Stop() {
  if (svr_)
    svr_->stop();
  if (thread_.joinable())
    thread_.join();
}

void HttpServer::SetEngine(Engine *engine, Defaults defaults) {
  defaults_ = std::move(defaults);
  engine_.store(engine);
}

bool HttpServer::Authorized(const void *r, void *s) const {
  const auto &req = *static_cast<const httplib::Request *>(r);
  auto &res = *static_cast<httplib::Response *>(s);
  if (opts_.api_key.empty())
    return true;
  if (req.get_header_value("Authorization") == "Bearer " + opts_.api_key)
    return true;
  res.set_header("WWW-Authenticate", "Bearer");
  SendJson(res, 401,
           ErrorBody("missing or wrong API key (Authorization: Bearer KEY)", "authentication_error",
                     {}, 401));
  return false;
}

void HttpServer::Routes() {
  httplib::Server &svr = *svr_;
  svr.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    const bool open = req.path == "/health" || req.path == "/metrics";
    if (!open && !Authorized(&req, &res))
      return httplib::Server::HandlerResponse::Handled;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    if (!res.body.empty())
      return;
    std::string msg = "error " + std::to_string(res.status);
    if (res.status == 404)
      msg = "no such endpoint: " + req.method + " " + req.path;
    else if (res.status == 413)
      msg = "the request body is too large (--max-body)";
    else if (res.status == 400)
      msg = "malformed HTTP request";
    else if (res.status == 405)
      msg = "method not allowed: " + req.method + " " + req.path;
    res.set_content(Dump(ErrorBody(msg, "invalid_request_error", {}, res.status)),
                    "application/json");
  });
  svr.set_exception_handler(
      [](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception &e) {
          what = e.what();
        } catch (...) {
        }
        SendJson(res, 500, ErrorBody("internal error: " + what, "server_error"));
      });

  svr.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    if (!engine_.load())
      SendJson(res, 503, {{"status", "loading"}});
    else if (draining_.load())
      SendJson(res, 503, {{"status", "shutting down"}});
    else
      SendJson(res, 200, {{"status", "ok"}});
  });
  svr.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
    Engine *engine = engine_.load();
    if (!engine) {
      SendJson(res, 503, ErrorBody("the model is loading", "server_error"));
      return;
    }
    res.set_content(engine->Metrics().Render(), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
    Json model = {{"id", opts_.model_id}, {"object", "model"}, {"owned_by", "pig"}, {"created", 0}};
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
    SendJson(res, 200, {{"object", "list"}, {"data", Json::array({model})}});
  });

  auto generate = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request &http, httplib::Response &res) {
      Engine *engine = engine_.load();
      const auto t0 = Clock::now();
      std::shared_ptr<Request> req;
      ParsedRequest parsed;
      try {
        if (!engine)
          throw ApiError(503, "the model is loading", "server_error");
        if (draining_.load())
          throw ApiError(503, "the server is shutting down", "server_error");
        const Json body = ParseBody(http);
        const runtime::LlamaModel &model = engine->model();
        parsed = ParseRequest(body, endpoint, model.tokenizer(), defaults_, model.config().n_layers,
                              engine->options().context);
        req = engine->Submit(parsed.params);
      } catch (const ApiError &e) {
        Log(opts_.log_requests, "%s %s %d %s", http.method.c_str(), http.path.c_str(), e.status(),
            e.what());
        SendError(res, e);
        return;
      }
      const int fd = FindSocket(http);
      const runtime::Tokenizer &tok = engine->model().tokenizer();
      auto writer = std::make_shared<ResponseWriter>(endpoint, opts_.model_id, tok,
                                                     parsed.params.top_logprobs >= 0,
                                                     parsed.params.top_logprobs > 0);
      const bool log = opts_.log_requests;
      const std::string path = http.path;
      auto log_done = [log, path, t0](const Request &r, const char *how) {
        const RequestSummary s = r.summary();
        Log(log, "POST %s %s: %s, prompt %zu, generated %zu, ttft %.3f s, total %.3f s",
            path.c_str(), how, r.method().c_str(), s.prompt_tokens, s.completion_tokens, s.ttft_s,
            std::chrono::duration<double>(Clock::now() - t0).count());
      };
      if (!parsed.stream) {
        std::string text;
        std::vector<TokenLogprob> lps;
        for (;;) {
          RequestUpdate u = req->Take(kPoll);
          text += u.text;
          lps.insert(lps.end(), u.logprobs.begin(), u.logprobs.end());
          if (u.finish == Finish::kError) {
            SendJson(res, u.error_status ? u.error_status : 500,
                     ErrorBody(u.error,
                               u.error_status >= 500 ? "server_error" : "invalid_request_error"));
            log_done(*req, "error");
            return;
          }
          if (u.finish == Finish::kCancelled) {
            SendJson(res, 503, ErrorBody("the request was cancelled", "server_error"));
            log_done(*req, "cancelled");
            return;
          }
          if (u.finish != Finish::kNone) {
            SendJson(res, 200, writer->Whole(text, lps, u.finish, req->summary()));
            log_done(*req, FinishReason(u.finish));
            return;
          }
          if (PeerGone(fd)) {
            req->Cancel();
            log_done(*req, "client gone");
            return;
          }
        }
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      const bool usage = parsed.include_usage;
      res.set_chunked_content_provider(
          "text/event-stream",
          [req, writer, fd, usage, log_done](size_t, httplib::DataSink &sink) {
            auto send = [&](const std::string &payload) {
              const std::string event = "data: " + payload + "\n\n";
              return sink.write(event.data(), event.size());
            };
            const Json start = writer->Start();
            if (!start.is_null() && !send(Dump(start))) {
              req->Cancel();
              return false;
            }
            for (;;) {
              RequestUpdate u = req->Take(kPoll);
              if (u.finish == Finish::kError || u.finish == Finish::kCancelled) {
                const bool err = u.finish == Finish::kError;
                send(Dump(ErrorBody(err ? u.error : "the request was cancelled",
                                    err && u.error_status < 500 ? "invalid_request_error"
                                                                : "server_error")));
                send("[DONE]");
                sink.done();
                log_done(*req, err ? "error" : "cancelled");
                return true;
              }
              const Json chunk = writer->Chunk(u, u.finish);
              if (!chunk.is_null() && !send(Dump(chunk))) {
                req->Cancel();
                log_done(*req, "client gone");
                return false;
              }
              if (u.finish != Finish::kNone) {
                if (usage)
                  send(Dump(writer->UsageChunk(req->summary())));
                send("[DONE]");
                sink.done();
                log_done(*req, FinishReason(u.finish));
                return true;
              }
              if (PeerGone(fd) || !sink.is_writable()) {
                req->Cancel();
                log_done(*req, "client gone");
                return false;
              }
            }
          },
          [req](bool success) {
            if (!success)
              req->Cancel();
          });
    };
  };
  svr.Post("/v1/completions", generate(Endpoint::kCompletions));
  svr.Post("/v1/chat/completions", generate(Endpoint::kChat));

  // The tokenizer endpoints: a loaded engine, a JSON body, an ApiError as its JSON answer.
  auto tokenizer_endpoint = [this](auto handle) {
    return [this, handle](const httplib::Request &http, httplib::Response &res) {
      try {
        Engine *engine = engine_.load();
        if (!engine)
          throw ApiError(503, "the model is loading", "server_error");
        SendJson(res, 200, handle(*engine, ParseBody(http)));
      } catch (const ApiError &e) {
        SendError(res, e);
      }
    };
  };
  svr.Post(
      "/tokenize", tokenizer_endpoint([this](Engine &engine, const Json &body) {
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
      }));
  svr.Post("/detokenize", tokenizer_endpoint([](Engine &engine, const Json &body) {
             const runtime::Tokenizer &tok = engine.model().tokenizer();
             const auto it = body.is_object() ? body.find("tokens") : body.end();
             if (it == body.end() || !it->is_array())
               throw ApiError(400, "tokens must be an array of token ids", "invalid_request_error",
                              "tokens");
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
           }));
}

} // namespace pig::serve
