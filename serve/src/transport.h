// pig-serve's HTTP/1.1 transport (Boost.Beast over Asio): connections, limits and deadlines, with
// no knowledge of OpenAI's protocol. http.cpp puts the routes on it.
//
// Why Beast and not cpp-httplib 0.11 (Debian's, which pig-serve used until issue 47): httplib
// gives every connection a worker thread for its whole life, reads headers with no bound on their
// number or total size, checks --max-body only against a Content-Length and before decompressing,
// and reads a request's body before the route or the API key is looked at. Each is a way for one
// client to take the server's memory or threads. Beast parses with limits we set (header bytes,
// body bytes after chunked decoding), and its asynchronous reads cost no thread while a client is
// slow, so every bound below is ours to state. docs/SERVING.md ("Limits") has the comparison.
//
// The life of a connection, all on one I/O thread:
//   idle      waiting for a request's first byte (--idle-timeout; a new connection too)
//   headers   its headers must arrive within --header-timeout of that byte, in at most
//             max_header_bytes and max_header_fields (beyond: 431)
//   checks    route (404/405), API key (401), Content-Encoding (415: bodies are not decompressed),
//             a length (411), --max-body (413), the in-flight body budget (503): all before a
//             byte of the body is read, and a refused request closes the connection
//   body      within --body-timeout, at most --max-body bytes after chunked decoding
//   handling  the route's handler runs on a worker thread (none free: 503) and writes its
//             response through Exchange; each write must finish within --write-timeout. Meanwhile
//             the socket is watched: a client that closes is noticed (Exchange::ClientGone).
// then idle again (keep-alive) or closed. At --max-connections a new connection closes the one
// that has waited longest for its request (a slow or idle client); if every connection is running
// a request, the new one gets 503.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pig::serve::net {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string api_key; ///< non-empty: routes that are not open need "Authorization: Bearer KEY"
  size_t max_body = 4 << 20;
  size_t max_connections = 256;
  size_t max_header_bytes = 16 << 10; ///< request line + header fields
  size_t max_header_fields = 100;
  size_t workers = 64;      ///< threads for the handlers of routes that are not light
  size_t light_workers = 2; ///< threads for light routes (/health, /metrics): never starved
  double idle_timeout_s = 5;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double write_timeout_s = 30;
  /// The body of an error the transport answers itself (404, 413, ...): (content type, body).
  std::function<std::pair<std::string, std::string>(int status, const std::string &message)>
      error_body;
  /// One line about a request the transport refused; null: silent. The line may hold client
  /// bytes: the callee escapes what it prints.
  std::function<void(const std::string &line)> log;
};

class Session;

/// One request and its response, handed to a route's handler on a worker thread.
class Exchange {
public:
  explicit Exchange(std::shared_ptr<Session> s);
  ~Exchange();
  Exchange(const Exchange &) = delete;
  Exchange &operator=(const Exchange &) = delete;

  const std::string &method() const;
  const std::string &path() const; ///< the target without its query
  /// A header's value ("" if absent); the name is case-insensitive.
  std::string header(std::string_view name) const;
  const std::string &body() const;
  /// Frees the body and gives its bytes back to the in-flight budget (once it is parsed).
  void DropBody();

  /// A whole response. Returns false if it could not be written (client gone, write timeout).
  bool Respond(int status, std::string_view content_type, std::string body,
               const Headers &headers = {});
  /// A chunked response: the status and headers now, then Write each piece, then End. `probe`
  /// is a piece the client ignores (an SSE comment), written when its side of the connection
  /// closes, to tell a half-close (still reading) from a close.
  bool StartStream(int status, std::string_view content_type, const Headers &headers,
                   std::string probe);
  bool Write(std::string_view data);
  bool EndStream();
  /// The client closed the connection (not merely its sending side) or it failed.
  bool ClientGone() const;

private:
  std::shared_ptr<Session> s_;
};

struct Route {
  std::string method, path;
  bool open = false;  ///< served without the API key
  bool light = false; ///< cheap and never blocks: runs on the light workers
  std::function<void(Exchange &)> handler;
};

class Transport {
public:
  Transport(TransportOptions o, std::vector<Route> routes);
  ~Transport();
  /// Binds host:port (port 0: any free one); throws std::runtime_error naming them.
  void Bind();
  int Port() const;
  /// Serves on threads of its own; returns at once.
  void Start();
  /// Closes every connection that is not running a request, and from now on closes each after
  /// its response and gives new ones a short deadline: a drain is not held up by idle clients.
  void Drain();
  /// Stops accepting, closes idle connections, gives running handlers up to `wait_s` to finish
  /// their responses, then closes everything and joins every thread.
  void Stop(double wait_s = 2);

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

/// Equal strings, in time that depends on their lengths only (an API key check).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

} // namespace pig::serve::net
