// pig-serve's HTTP front: OpenAI's endpoints over the Engine, plus /health, /metrics
// (Prometheus), /v1/models, /tokenize and /detokenize, on the transport of serve/src/transport.h
// (Boost.Beast), which bounds every connection's headers, body, time and count before a route
// sees a byte of the body. The HTTP threads only parse, queue, stream and cancel; the engine's
// thread owns the model.
//
// The server binds before the model loads: /health answers 503 {"status": "loading"} until
// SetEngine, and 503 {"status": "shutting down"} once BeginDrain was called. A client that closes
// its connection is noticed within ~20 ms while its request waits or runs, and is cancelled: a
// queued request leaves the queue at once. One that only half-closes (shuts down its sending
// side) still gets its answer.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "pig/serve/engine.h"
#include "pig/serve/openai.h"

namespace pig::serve::net {
class Transport;
class Exchange;
} // namespace pig::serve::net

namespace pig::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              ///< 0: any free port (Port() tells which)
  std::string api_key;          ///< non-empty: /v1/*, /tokenize, /detokenize need "Bearer KEY"
  size_t max_body = 4 << 20;    ///< request body bytes (after chunked decoding) beyond: 413
  size_t threads = 0;           ///< workers for the generation and tokenizer routes (0: 64)
  size_t max_connections = 256; ///< open connections at most (transport.h: who yields)
  size_t max_header_bytes = 16 << 10; ///< request line and headers; beyond: 431
  size_t max_header_fields = 100;     ///< header fields; beyond: 431
  double idle_timeout_s = 5;          ///< a connection waiting for its next request
  double header_timeout_s = 10;       ///< a request's headers, from its first byte
  double body_timeout_s = 30;         ///< its body, after its headers
  double write_timeout_s = 30;        ///< each write of a response
  std::string model_id;               ///< /v1/models' id and every response's "model"
  bool log_requests = true;           ///< one line per request on stderr
};

class HttpServer {
public:
  explicit HttpServer(HttpOptions o);
  ~HttpServer();
  /// Binds host:port; throws std::runtime_error naming them when it cannot.
  void Bind();
  int Port() const;
  /// Serves on threads of its own until Stop; returns at once.
  void Start();
  /// The model is loaded: requests go to `engine` with `defaults`.
  void SetEngine(Engine *engine, Defaults defaults);
  /// New generation requests get 503; /health says so; idle and slow connections are closed.
  void BeginDrain();
  /// Stops accepting, gives running responses a moment, closes every connection, joins.
  void Stop();

private:
  void Generate(net::Exchange &ex, Endpoint endpoint);
  void Log(const std::string &line) const;

  HttpOptions opts_;
  std::unique_ptr<net::Transport> transport_;
  std::atomic<Engine *> engine_{nullptr};
  Defaults defaults_;
  std::atomic<bool> draining_{false};
  mutable std::mutex warned_mu_;
  mutable std::set<std::string> warned_; ///< request warnings already logged (once each)
};

/// `text` with every control byte (a newline, an escape sequence) written as \n, \t, \r or
/// \xNN, and the backslash as \\: what a log line prints of a request cannot forge lines.
std::string EscapeForLog(std::string_view text);

} // namespace pig::serve
