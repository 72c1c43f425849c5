#include "transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace pig::serve::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// After refusing a request whose body is still coming, the server reads and drops up to this
// much of it (as nginx's lingering close does), so that a client that sends its whole body before
// reading, as most do, reads the refusal instead of a reset. It costs no memory.
constexpr auto kLingerTime = std::chrono::seconds(5);
constexpr size_t kLingerBytes = size_t(64) << 20;

std::chrono::milliseconds Ms(double s) { return std::chrono::milliseconds((long long)(s * 1000)); }

// A fixed set of threads. TrySubmit refuses when every thread is taken and the short queue is
// full (the caller answers 503) instead of queueing without bound: a handler's thread is the one
// resource a flood of requests could otherwise take.
class WorkerPool {
public:
  /// `queue`: tasks that may wait for a thread beyond the idle ones (0: none wait).
  WorkerPool(size_t n, size_t queue) : n_(n), queue_max_(queue) {
    threads_.reserve(n);
    for (size_t i = 0; i < n; ++i)
      threads_.emplace_back([this] { Loop(); });
    // Every thread waiting before the first request: TrySubmit counts idle threads.
    std::unique_lock lock(mu_);
    started_.wait(lock, [&] { return idle_ == n_; });
  }
  ~WorkerPool() { Shutdown(); }

  bool TrySubmit(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (stop_ || queue_.size() >= idle_ + queue_max_)
        return false;
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
    return true;
  }

  /// Runs what is queued, then joins.
  void Shutdown() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread &t : threads_)
      if (t.joinable())
        t.join();
  }

private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        if (++idle_ == n_)
          started_.notify_all();
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        --idle_;
        if (queue_.empty())
          return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, started_;
  std::deque<std::function<void()>> queue_;
  const size_t n_, queue_max_;
  size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char &c : out)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// A response's status line and the headers every response has.
template <class Body>
void Head(http::response<Body> &res, unsigned version, int status, std::string_view type,
          const Headers &headers) {
  res.version(version);
  res.result(unsigned(status));
  res.set(http::field::server, "pig-serve");
  res.set(http::field::content_type, type);
  for (const auto &[k, v] : headers)
    res.set(k, v);
}

} // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer string is read whatever the contents, so the time tells the lengths
  // and nothing else.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

struct Transport::Impl {
  explicit Impl(TransportOptions o, std::vector<Route> r)
      : opts(std::move(o)), routes(std::move(r)), acceptor(ioc),
        max_inflight(std::max<size_t>(8 * opts.max_body, 64u << 20)) {}

  void Accept();
  void Admit(tcp::socket sock);
  bool Reserve(size_t n) {
    size_t cur = inflight.load();
    do {
      if (cur + n > max_inflight)
        return false;
    } while (!inflight.compare_exchange_weak(cur, cur + n));
    return true;
  }
  void Release(size_t n) { inflight.fetch_sub(n); }
  void Log(const std::string &line) const {
    if (opts.log)
      opts.log(line);
  }
  std::string ErrorResponse(int status, unsigned version, const std::string &message,
                            const Headers &extra) const;

  TransportOptions opts;
  std::vector<Route> routes;
  asio::io_context ioc{1};
  tcp::acceptor acceptor;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  asio::steady_timer accept_retry{ioc};
  std::thread io_thread;
  std::unique_ptr<WorkerPool> heavy, light;
  std::list<std::weak_ptr<Session>> sessions; // the I/O thread's only
  std::atomic<bool> draining{false}, stopping{false};
  std::atomic<size_t> inflight{0};
  const size_t max_inflight; ///< request body bytes being read or parsed, all connections
  int port = 0;
};

// One connection. Everything but the methods marked "worker" runs on the I/O thread.
class Session : public std::enable_shared_from_this<Session> {
public:
  enum class State { kIdle, kHeaders, kBody, kHandling, kLingering, kClosed };

  Session(Transport::Impl &t, tcp::socket sock)
      : t_(t), stream_(std::move(sock)), buffer_(64 << 10), fd_(stream_.socket().native_handle()) {}

  void Begin() {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    WaitRequest();
  }

  State state() const { return state_; }
  /// Whether a drain may close this connection now: it is idle between requests on a kept-alive
  /// connection (or lingering after its last response). A connection that is reading a request,
  /// or was accepted and has not yet received its first one, may carry a request the client has
  /// already sent: it is answered (503 for generation while draining) and then closed.
  bool IdleAfterAResponse() const {
    return state_ == State::kLingering ||
           (state_ == State::kIdle && served_ && buffer_.size() == 0);
  }
  Clock::time_point waiting_since() const { return waiting_since_; }
  std::list<std::weak_ptr<Session>>::iterator self;

  void Close() {
    if (state_ == State::kClosed)
      return;
    state_ = State::kClosed;
    closed_.store(true);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    ReleaseBody();
    for (Pending &p : writes_)
      if (p.done)
        p.done(false);
    writes_.clear();
    t_.sessions.erase(self);
  }

  // --- the handler's side (worker threads) ------------------------------------------------------

  const std::string &method() const { return method_; }
  const std::string &path() const { return path_; }
  std::string header(std::string_view name) const { return std::string(req_[name]); }
  const std::string &body() const { return req_.body(); }
  void DropBody() {
    std::string().swap(req_.body());
    ReleaseBody();
  }

  bool Respond(int status, std::string_view type, std::string body, const Headers &headers) {
    http::response<http::string_body> res;
    Head(res, version_, status, type, headers);
    res.keep_alive(keep_alive_ && !t_.draining.load());
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    return Send(std::move(os).str(), Kind::kWhole);
  }

  bool StartStream(int status, std::string_view type, const Headers &headers, std::string probe) {
    http::response<http::empty_body> res;
    Head(res, version_, status, type, headers);
    if (version_ >= 11) {
      res.chunked(true);
      res.keep_alive(keep_alive_ && !t_.draining.load());
    } else { // HTTP/1.0 has no chunks: the body ends with the connection
      res.keep_alive(false);
    }
    std::ostringstream os;
    os << res.base();
    return Send(std::move(os).str(), Kind::kHead, std::move(probe));
  }

  bool Write(std::string_view data) {
    if (data.empty())
      return !ClientGone();
    return Send(version_ >= 11 ? Chunk(data) : std::string(data), Kind::kChunk);
  }

  bool EndStream() { return Send(version_ >= 11 ? "0\r\n\r\n" : "", Kind::kLast); }

  bool ClientGone() const {
    if (closed_.load() || gone_.load())
      return true;
    if (!eof_.load() || !probe_written_.load())
      return false;
    // Its sending side closed and a probe went out: a peer that closed its socket answers the
    // probe with a reset, which moves ours to CLOSE; a half-closed peer takes the probe.
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
      return true;
    return info.tcpi_state == TCP_CLOSE;
  }

  /// The handler returned (worker; its Exchange is gone).
  void HandlerDone() {
    asio::post(t_.ioc, [self = shared_from_this()] {
      self->handler_done_ = true;
      // Not handling any more: closed, or a refusal (a 503 from Dispatch) already moved on.
      if (self->state_ != State::kHandling)
        return;
      if (!self->response_started_) {
        self->close_after_ = true;
        self->QueueError(500, "the server gave no response");
      } else if (self->stream_started_ && !self->response_done_) {
        self->close_after_ = true; // a stream left open cannot be framed: the client sees it end
      }
      if (!self->writing_ && self->writes_.empty())
        self->Next();
    });
  }

private:
  enum class Kind { kWhole, kHead, kChunk, kLast, kRaw };
  struct Pending {
    std::shared_ptr<std::string> data;
    std::function<void(bool)> done;
    bool probe = false;
  };

  static std::string Chunk(std::string_view data) {
    char size[32];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string out(size, size_t(n));
    out.append(data);
    out += "\r\n";
    return out;
  }

  // Worker: queue bytes on the I/O thread and wait until they are written (or fail).
  bool Send(std::string bytes, Kind kind, std::string probe = {}) {
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> result = done->get_future();
    asio::post(t_.ioc, [self = shared_from_this(), bytes = std::move(bytes), kind, done,
                        probe = std::move(probe)]() mutable {
      if (self->state_ == State::kClosed) {
        done->set_value(false);
        return;
      }
      if (kind == Kind::kWhole || kind == Kind::kHead)
        self->response_started_ = true;
      if (kind == Kind::kHead) {
        self->stream_started_ = true;
        self->probe_ = std::move(probe);
      }
      if (kind == Kind::kWhole || kind == Kind::kLast) {
        self->response_done_ = true;
        if (kind == Kind::kLast && self->version_ < 11)
          self->close_after_ = true;
      }
      if (bytes.empty()) {
        done->set_value(true);
        return;
      }
      self->Queue(std::move(bytes), [done](bool ok) { done->set_value(ok); });
    });
    return result.get();
  }

  void Queue(std::string bytes, std::function<void(bool)> done, bool probe = false) {
    writes_.push_back({std::make_shared<std::string>(std::move(bytes)), std::move(done), probe});
    if (!writing_)
      DoWrite();
  }

  void DoWrite() {
    writing_ = true;
    stream_.expires_after(Ms(t_.opts.write_timeout_s));
    asio::async_write(
        stream_, asio::buffer(*writes_.front().data),
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    writing_ = false;
    if (state_ == State::kClosed)
      return;
    Pending p = std::move(writes_.front());
    writes_.pop_front();
    if (ec) {
      gone_.store(true);
      if (p.done)
        p.done(false);
      Close();
      return;
    }
    if (p.probe)
      probe_written_.store(true);
    if (p.done)
      p.done(true);
    if (!writes_.empty())
      DoWrite();
    else if (handler_done_)
      Next();
  }

  void QueueError(int status, const std::string &message, const Headers &extra = {}) {
    response_started_ = response_done_ = true;
    Queue(t_.ErrorResponse(status, version_, message, extra), nullptr);
  }

  /// Answers a request the transport refuses, then closes (its body, if any, is unread).
  void Refuse(int status, const std::string &message, const Headers &extra = {}) {
    t_.Log(method_ + " " + path_ + " " + std::to_string(status) + " " + message);
    state_ = State::kHandling;
    handler_done_ = true;
    close_after_ = true;
    QueueError(status, message, extra);
  }

  /// After a response: the next request on this connection, or the end of it.
  void Next() {
    ReleaseBody();
    served_ = true;
    if (close_after_ || !keep_alive_ || t_.draining.load() || t_.stopping.load()) {
      LingeringClose();
      return;
    }
    WaitRequest();
  }

  // Close our sending side, then read (and drop) what the client still sends for a moment
  // before closing: closing a socket with unread bytes resets the connection, and a reset can
  // destroy the response the client has not read yet (a 413 to a body still being sent).
  void LingeringClose() {
    state_ = State::kLingering; // evicted first, like an idle connection
    waiting_since_ = Clock::now() - std::chrono::hours(1);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) {
      Close();
      return;
    }
    lingered_ = 0;
    stream_.expires_after(kLingerTime);
    Linger();
  }

  void Linger() {
    stream_.async_read_some(asio::buffer(drain_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kLingerBytes)
                                self->Close();
                              else
                                self->Linger();
                            });
  }

  void WaitRequest() {
    state_ = State::kIdle;
    waiting_since_ = Clock::now();
    handler_done_ = response_started_ = stream_started_ = response_done_ = false;
    close_after_ = false;
    if (buffer_.size() > 0) { // a pipelined request is here already
      ReadHeader();
      return;
    }
    const double idle =
        t_.draining.load() ? std::min(1.0, t_.opts.idle_timeout_s) : t_.opts.idle_timeout_s;
    stream_.expires_after(Ms(idle));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec || self->state_ == State::kClosed) {
                                self->Close();
                                return;
                              }
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  void ReadHeader() {
    state_ = State::kHeaders;
    method_.clear();
    path_.clear();
    parser_.emplace();
    parser_->header_limit(std::uint32_t(t_.opts.max_header_bytes));
    // No body limit yet: a Content-Length past it must not fail the header before the route
    // and the key are checked (OnHeader refuses it then, and sets the limit for the body).
    // (Beast 1.74 compares the length with the optional limit, and an empty one is below every
    // length: "no limit" is the largest value, not none.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    const double limit =
        t_.draining.load() ? std::min(1.0, t_.opts.header_timeout_s) : t_.opts.header_timeout_s;
    stream_.expires_after(Ms(limit));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (state_ == State::kClosed)
      return;
    const auto &opts = t_.opts;
    if (ec == http::error::header_limit)
      return Refuse(431, "the request's headers exceed " + std::to_string(opts.max_header_bytes) +
                             " bytes");
    if (ec == http::error::body_limit)
      return Refuse(413, "the request body is too large: more than --max-body (" +
                             std::to_string(opts.max_body) + " bytes)");
    if (ec == beast::error::timeout) { // the stream closed the socket: nothing can be said
      t_.Log("(connection) closed: its request's headers did not arrive within --header-timeout");
      Close();
      return;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
      Close();
      return;
    }
    if (ec)
      return Refuse(400, "malformed HTTP request: " + ec.message());
    const auto &req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    method_ = std::string(req.method_string());
    const std::string_view target = req.target();
    path_ = std::string(target.substr(0, target.find('?')));
    if (size_t(std::distance(req.begin(), req.end())) > opts.max_header_fields)
      return Refuse(431, "the request has more than " + std::to_string(opts.max_header_fields) +
                             " header fields");
    route_ = nullptr;
    bool path_known = false;
    for (const Route &r : t_.routes)
      if (r.path == path_) {
        path_known = true;
        if (r.method == method_)
          route_ = &r;
      }
    if (!route_) {
      if (!path_known)
        return Refuse(404, "no such endpoint: " + method_ + " " + path_);
      std::string allow;
      for (const Route &r : t_.routes)
        if (r.path == path_)
          allow += (allow.empty() ? "" : ", ") + r.method;
      return Refuse(405, "method not allowed: " + method_ + " " + path_, {{"Allow", allow}});
    }
    if (!route_->open && !opts.api_key.empty() &&
        !ConstantTimeEquals(req[http::field::authorization], "Bearer " + opts.api_key))
      return Refuse(401, "missing or wrong API key (Authorization: Bearer KEY)",
                    {{"WWW-Authenticate", "Bearer"}});
    if (const std::string_view enc = Trim(req[http::field::content_encoding]);
        !enc.empty() && Lower(enc) != "identity")
      return Refuse(415, "Content-Encoding '" + std::string(enc) +
                             "' is not accepted: send the body uncompressed");
    const bool chunked = parser_->chunked();
    const boost::optional<std::uint64_t> length = parser_->content_length();
    if (method_ == "POST" && !chunked && !length)
      return Refuse(411, "a POST needs a Content-Length or Transfer-Encoding: chunked");
    if (length && *length > opts.max_body)
      return Refuse(413, "the request body is too large: more than --max-body (" +
                             std::to_string(opts.max_body) + " bytes)");
    const size_t want = chunked ? opts.max_body : size_t(length.value_or(0));
    if (want && !t_.Reserve(want))
      return Refuse(503, "too many request bodies are being read; retry", {{"Retry-After", "1"}});
    reserved_.store(want);
    parser_->body_limit(std::uint64_t(opts.max_body));
    if (parser_->is_done()) {
      Dispatch();
      return;
    }
    if (Lower(Trim(req[http::field::expect])) == "100-continue" && version_ >= 11) {
      Queue("HTTP/1.1 100 Continue\r\n\r\n", nullptr);
    }
    ReadBody();
  }

  void ReadBody() {
    state_ = State::kBody;
    stream_.expires_after(Ms(t_.opts.body_timeout_s));
    http::async_read(
        stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
          if (self->state_ == State::kClosed)
            return;
          if (ec == http::error::body_limit)
            return self->Refuse(413, "the request body is too large: more than --max-body (" +
                                         std::to_string(self->t_.opts.max_body) + " bytes)");
          if (ec == beast::error::timeout) {
            self->t_.Log(self->method_ + " " + self->path_ +
                         " closed: the body did not arrive within --body-timeout");
            self->Close();
            return;
          }
          if (ec == http::error::end_of_stream || ec == asio::error::eof ||
              ec == asio::error::connection_reset) {
            self->Close();
            return;
          }
          if (ec)
            return self->Refuse(400, "malformed HTTP request body: " + ec.message());
          self->Dispatch();
        });
  }

  void Dispatch();

  void Watch() {
    if (state_ != State::kHandling || eof_.load())
      return;
    const unsigned gen = ++watch_gen_;
    stream_.socket().async_wait(
        tcp::socket::wait_read,
        [self = shared_from_this(), gen](beast::error_code ec) { self->OnWatch(ec, gen); });
  }

  void OnWatch(beast::error_code ec, unsigned gen) {
    if (gen != watch_gen_ || state_ != State::kHandling || handler_done_)
      return;
    if (ec) {
      if (ec != asio::error::operation_aborted)
        gone_.store(true);
      return;
    }
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
      return; // the client's next (pipelined) request: it is there; read it after this one
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        Watch();
      else
        gone_.store(true);
      return;
    }
    // End of file: the client closed its sending side, or its socket. Only a write tells which:
    // an interim "100 Continue" (a client must accept 1xx before the final response) before the
    // response has begun, or the stream's probe (an SSE comment) after.
    eof_.store(true);
    if (version_ < 11) {
      gone_.store(true); // HTTP/1.0 has no interim responses: take the close as the end
    } else if (!response_started_) {
      Queue("HTTP/1.1 100 Continue\r\n\r\n", nullptr, /*probe=*/true);
    } else if (stream_started_ && !response_done_ && !probe_.empty()) {
      Queue(Chunk(probe_), nullptr, /*probe=*/true);
    }
  }

  void ReleaseBody() {
    if (const size_t n = reserved_.exchange(0))
      t_.Release(n);
  }

  Transport::Impl &t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const int fd_;
  State state_ = State::kIdle;
  Clock::time_point waiting_since_ = Clock::now();

  // The request being handled: set on the I/O thread before the handler starts, read by it.
  http::request<http::string_body> req_;
  std::string method_, path_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  const Route *route_ = nullptr;
  std::atomic<size_t> reserved_{0};

  // The response (I/O thread).
  std::deque<Pending> writes_;
  bool writing_ = false, handler_done_ = false, response_started_ = false, stream_started_ = false,
       response_done_ = false, close_after_ = false;
  bool served_ = false; ///< a response has been sent on this connection
  std::string probe_;
  unsigned watch_gen_ = 0;
  size_t lingered_ = 0;
  char drain_[4096];

  // Read by the handler's thread.
  std::atomic<bool> closed_{false}, gone_{false}, eof_{false}, probe_written_{false};
};

void Session::Dispatch() {
  state_ = State::kHandling;
  stream_.expires_never();
  req_ = parser_->release();
  parser_.reset();
  eof_.store(false);
  gone_.store(false);
  probe_written_.store(false);
  auto ex = std::make_shared<Exchange>(shared_from_this());
  WorkerPool &pool = route_->light ? *t_.light : *t_.heavy;
  const Route *route = route_;
  if (!pool.TrySubmit([ex, route] { route->handler(*ex); })) {
    ex->DropBody();
    return Refuse(503, "the server is busy: every HTTP worker is taken; retry",
                  {{"Retry-After", "1"}});
  }
  Watch();
}

std::string Transport::Impl::ErrorResponse(int status, unsigned version, const std::string &message,
                                           const Headers &extra) const {
  http::response<http::string_body> res;
  auto [type, body] = opts.error_body
                          ? opts.error_body(status, message)
                          : std::pair<std::string, std::string>("text/plain", message + "\n");
  Head(res, version, status, type, extra);
  res.body() = std::move(body);
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream os;
  os << res;
  return std::move(os).str();
}

void Transport::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open())
        return;
      // Out of descriptors (or a transient error): try again shortly instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e && acceptor.is_open())
          Accept();
      });
      return;
    }
    Admit(std::move(sock));
    Accept();
  });
}

void Transport::Impl::Admit(tcp::socket sock) {
  if (sessions.size() >= opts.max_connections) {
    // Make room by closing the connection that has waited longest for a request: a slow or idle
    // client loses its place, a running request never does.
    std::shared_ptr<Session> victim;
    for (const std::weak_ptr<Session> &w : sessions) {
      std::shared_ptr<Session> s = w.lock();
      if (s &&
          (s->state() == Session::State::kIdle || s->state() == Session::State::kHeaders ||
           s->state() == Session::State::kLingering) &&
          (!victim || s->waiting_since() < victim->waiting_since()))
        victim = s;
    }
    if (!victim) {
      const std::string busy = ErrorResponse(
          503, 11, "too many connections (--max-connections); retry", {{"Retry-After", "1"}});
      ::send(sock.native_handle(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      beast::error_code ec;
      sock.close(ec);
      return;
    }
    victim->Close();
  }
  auto s = std::make_shared<Session>(*this, std::move(sock));
  sessions.push_front(s);
  s->self = sessions.begin();
  s->Begin();
}

// --- Exchange ------------------------------------------------------------------------------------

Exchange::Exchange(std::shared_ptr<Session> s) : s_(std::move(s)) {}
Exchange::~Exchange() { s_->HandlerDone(); }
const std::string &Exchange::method() const { return s_->method(); }
const std::string &Exchange::path() const { return s_->path(); }
std::string Exchange::header(std::string_view name) const { return s_->header(name); }
const std::string &Exchange::body() const { return s_->body(); }
void Exchange::DropBody() { s_->DropBody(); }
bool Exchange::Respond(int status, std::string_view type, std::string body,
                       const Headers &headers) {
  return s_->Respond(status, type, std::move(body), headers);
}
bool Exchange::StartStream(int status, std::string_view type, const Headers &headers,
                           std::string probe) {
  return s_->StartStream(status, type, headers, std::move(probe));
}
bool Exchange::Write(std::string_view data) { return s_->Write(data); }
bool Exchange::EndStream() { return s_->EndStream(); }
bool Exchange::ClientGone() const { return s_->ClientGone(); }

// --- Transport -----------------------------------------------------------------------------------

Transport::Transport(TransportOptions o, std::vector<Route> routes)
    : impl_(std::make_unique<Impl>(std::move(o), std::move(routes))) {}

Transport::~Transport() { Stop(0); }

void Transport::Bind() {
  Impl &t = *impl_;
  const std::string where = t.opts.host + ":" + std::to_string(t.opts.port);
  try {
    const std::string host = t.opts.host == "localhost" ? "127.0.0.1" : t.opts.host;
    const tcp::endpoint ep(asio::ip::make_address(host), static_cast<unsigned short>(t.opts.port));
    t.acceptor.open(ep.protocol());
    t.acceptor.set_option(asio::socket_base::reuse_address(true));
    t.acceptor.bind(ep);
    t.acceptor.listen(asio::socket_base::max_listen_connections);
    t.port = t.acceptor.local_endpoint().port();
  } catch (const std::exception &e) {
    throw std::runtime_error("cannot bind " + where +
                             " (in use, or not a local address?): " + e.what());
  }
}

int Transport::Port() const { return impl_->port; }

void Transport::Start() {
  Impl &t = *impl_;
  // A generation request waits for nothing but a thread of its own (the engine has the queue);
  // a light one (/health, /metrics) takes milliseconds, so a few may wait for the two threads.
  t.heavy = std::make_unique<WorkerPool>(std::max<size_t>(1, t.opts.workers), 0);
  t.light = std::make_unique<WorkerPool>(std::max<size_t>(1, t.opts.light_workers), 64);
  t.work.emplace(t.ioc.get_executor());
  t.Accept();
  t.io_thread = std::thread([&t] {
    for (;;) {
      try {
        t.ioc.run();
        return;
      } catch (const std::exception &e) {
        t.Log(std::string("internal error on the I/O thread: ") + e.what());
      }
    }
  });
}

void Transport::Drain() {
  Impl &t = *impl_;
  t.draining.store(true);
  asio::post(t.ioc, [&t] {
    std::vector<std::shared_ptr<Session>> idle;
    for (const std::weak_ptr<Session> &w : t.sessions)
      if (auto s = w.lock(); s && s->IdleAfterAResponse())
        idle.push_back(s);
    for (const auto &s : idle)
      s->Close();
  });
}

void Transport::Stop(double wait_s) {
  Impl &t = *impl_;
  if (!t.io_thread.joinable() || t.stopping.exchange(true))
    return;
  t.draining.store(true);
  // Runs `fn` on the I/O thread and waits for it.
  auto on_io = [&t](auto fn) {
    std::promise<void> done;
    asio::post(t.ioc, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  };
  auto close_if = [&t](auto pred) {
    std::vector<std::shared_ptr<Session>> victims;
    for (const std::weak_ptr<Session> &w : t.sessions)
      if (auto s = w.lock(); s && pred(*s))
        victims.push_back(s);
    for (const auto &s : victims)
      s->Close();
    return t.sessions.size();
  };
  on_io([&] {
    beast::error_code ec;
    t.acceptor.close(ec);
    t.accept_retry.cancel();
    close_if([](const Session &s) { return s.state() != Session::State::kHandling; });
  });
  const auto deadline = Clock::now() + Ms(wait_s);
  for (;;) {
    size_t left = 0;
    on_io([&] { left = t.sessions.size(); });
    if (left == 0 || Clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  on_io([&] { close_if([](const Session &) { return true; }); });
  // Handlers now see their client gone and their writes fail: they return, and the pools join.
  t.heavy->Shutdown();
  t.light->Shutdown();
  t.work.reset();
  t.ioc.stop();
  t.io_thread.join();
}

} // namespace pig::serve::net
