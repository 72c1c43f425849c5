// pig-serve's HTTP front (cpp-httplib): OpenAI's endpoints over the Engine, plus /health,
// /metrics (Prometheus), /v1/models, /tokenize and /detokenize. The HTTP threads only parse,
// queue, stream and cancel; the engine's thread owns the model.
//
// The server binds before the model loads: /health answers 503 {"status": "loading"} until
// SetEngine, and 503 {"status": "shutting down"} once Drain began. A client that goes away is
// noticed between chunks (a failed write) and, for streaming and non-streaming requests alike, by
// peeking at its socket while waiting (cpp-httplib 0.11 has no is_connection_closed): its request
// is cancelled, and the engine frees its slot at its next step.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "pig/serve/engine.h"
#include "pig/serve/openai.h"

namespace httplib {
class Server;
}

namespace pig::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           ///< 0: any free port (Port() tells which)
  std::string api_key;       ///< non-empty: /v1/*, /tokenize, /detokenize need "Bearer KEY"
  size_t max_body = 4 << 20; ///< request bodies beyond: 413
  size_t threads = 0;        ///< HTTP worker threads (0: slots + queue + 8)
  std::string model_id;      ///< /v1/models' id and every response's "model"
  bool log_requests = true;  ///< one line per request on stderr
};

class HttpServer {
public:
  explicit HttpServer(HttpOptions o);
  ~HttpServer();
  /// Binds host:port; throws std::runtime_error naming them when it cannot.
  void Bind();
  int Port() const { return port_; }
  /// Serves in a thread of its own until Stop; returns once the server accepts connections.
  void Start();
  /// The model is loaded: requests go to `engine` with `defaults`.
  void SetEngine(Engine *engine, Defaults defaults);
  /// New generation requests get 503; /health says so.
  void BeginDrain() { draining_.store(true); }
  void Stop();

private:
  void Routes();
  bool Authorized(const void *req, void *res) const;

  HttpOptions opts_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
  std::atomic<Engine *> engine_{nullptr};
  Defaults defaults_;
  std::atomic<bool> draining_{false};
};

} // namespace pig::serve
