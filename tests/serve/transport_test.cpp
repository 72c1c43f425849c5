// pig-serve's HTTP transport alone (serve/src/transport.h), with routes of the test's own and raw
// sockets on loopback: every limit it states, checked from the client's side. No model: it runs in
// the sanitizer configuration too. tests/serve/test_hostile.py runs the same attacks against the
// real pig-serve binary.
#include "transport.h"

#include "pig/serve/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace pig::serve::net {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class Client {
public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
  }
  ~Client() {
    if (fd_ >= 0)
      close(fd_);
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  /// False once the server has closed or reset the connection.
  bool Send(const std::string &data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      off += size_t(n);
    }
    return true;
  }
  void HalfClose() { shutdown(fd_, SHUT_WR); }
  void Close() {
    close(fd_);
    fd_ = -1;
  }
  /// The status of the first final (non-1xx) response within `timeout`, or 0: none came (closed,
  /// reset or timed out). `body` gets its body when it has a Content-Length.
  int Status(std::chrono::milliseconds timeout = 5000ms, std::string *body = nullptr) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const size_t end = buf_.find("\r\n\r\n");
      if (end != std::string::npos && buf_.size() >= 12) {
        const int status = std::atoi(buf_.c_str() + 9);
        const std::string head = buf_.substr(0, end);
        if (status >= 100 && status < 200) {
          buf_.erase(0, end + 4);
          continue;
        }
        size_t length = 0;
        if (const size_t cl = head.find("Content-Length: "); cl != std::string::npos)
          length = std::strtoul(head.c_str() + cl + 16, nullptr, 10);
        if (buf_.size() >= end + 4 + length) {
          if (body)
            *body = buf_.substr(end + 4, length);
          buf_.erase(0, end + 4 + length);
          return status;
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        return 0;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0)
        return 0;
      char tmp[4096];
      const ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0)
        return 0;
      buf_.append(tmp, size_t(n));
    }
  }
  /// The server closed the connection within `timeout` (end of file or reset).
  bool ClosedByServer(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        char tmp[4096];
        const ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
        if (n <= 0)
          return true;
      }
    }
    return false;
  }

private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

std::string Post(const std::string &path, const std::string &body, const std::string &extra = {}) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra + "\r\n" + body;
}

class TransportTest : public ::testing::Test {
protected:
  void Start(TransportOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    std::vector<Route> routes;
    routes.push_back(
        {"GET", "/health", true, true, [](Exchange &ex) { ex.Respond(200, "text/plain", "ok"); }});
    routes.push_back({"POST", "/echo", false, false, [](Exchange &ex) {
                        ex.Respond(200, "text/plain", std::to_string(ex.body().size()));
                      }});
    // Waits up to 3 s for its client to go, polling as the generation handlers do.
    routes.push_back({"POST", "/wait", false, false, [this](Exchange &ex) {
                        ++waiting_;
                        const auto t0 = Clock::now();
                        while (Since(t0) < wait_s_) {
                          if (ex.ClientGone()) {
                            gone_seen_.store(true);
                            return;
                          }
                          std::this_thread::sleep_for(10ms);
                        }
                        ex.Respond(200, "text/plain", "waited");
                      }});
    routes.push_back({"POST", "/stream", false, false, [](Exchange &ex) {
                        ex.StartStream(200, "text/event-stream", {}, ": ping\n\n");
                        for (int i = 0; i < 3; ++i)
                          ex.Write("data: " + std::to_string(i) + "\n\n");
                        ex.EndStream();
                      }});
    t_ = std::make_unique<Transport>(std::move(o), std::move(routes));
    t_->Bind();
    t_->Start();
  }
  void TearDown() override {
    if (t_)
      t_->Stop();
  }
  int port() const { return t_->Port(); }

  std::unique_ptr<Transport> t_;
  double wait_s_ = 3;
  std::atomic<int> waiting_{0};
  std::atomic<bool> gone_seen_{false};
};

TEST_F(TransportTest, ServesKeepAliveRequestsAndStreams) {
  Start();
  Client c(port());
  ASSERT_TRUE(c.connected());
  std::string body;
  ASSERT_TRUE(c.Send(Post("/echo", "hello")));
  EXPECT_EQ(c.Status(5000ms, &body), 200);
  EXPECT_EQ(body, "5");
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(c.Status(5000ms, &body), 200);
  EXPECT_EQ(body, "ok");
  // A chunked body is decoded.
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  EXPECT_EQ(c.Status(5000ms, &body), 200);
  EXPECT_EQ(body, "5");
  Client s(port());
  ASSERT_TRUE(s.Send(Post("/stream", "")));
  std::string all;
  char tmp[4096];
  const auto t0 = Clock::now();
  while (all.find("0\r\n\r\n") == std::string::npos && Since(t0) < 5) {
    const ssize_t n = recv(s.fd(), tmp, sizeof tmp, 0);
    if (n <= 0)
      break;
    all.append(tmp, size_t(n));
  }
  EXPECT_NE(all.find("Transfer-Encoding: chunked"), std::string::npos) << all;
  EXPECT_NE(all.find("data: 2\n\n"), std::string::npos) << all;
}

TEST_F(TransportTest, RefusesBodiesPastTheLimitWhateverTheirFraming) {
  TransportOptions o;
  o.max_body = 1000;
  Start(o);
  { // chunked: counted after decoding
    Client c(port());
    std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 4; ++i)
      req += "190\r\n" + std::string(400, 'x') + "\r\n";
    c.Send(req);
    EXPECT_EQ(c.Status(), 413);
    EXPECT_TRUE(c.ClosedByServer(3000ms));
  }
  { // a Content-Length past the limit: answered before the body is sent
    Client c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n");
    EXPECT_EQ(c.Status(2000ms), 413);
  }
  { // compressed: never decompressed
    Client c(port());
    c.Send(Post("/echo", "abc", "Content-Encoding: gzip\r\n"));
    EXPECT_EQ(c.Status(), 415);
  }
  { // no length at all
    Client c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.Status(), 411);
  }
  { // exactly the limit is fine
    Client c(port());
    std::string body;
    c.Send(Post("/echo", std::string(1000, 'y')));
    EXPECT_EQ(c.Status(5000ms, &body), 200);
    EXPECT_EQ(body, "1000");
  }
}

TEST_F(TransportTest, RoutesAndKeysAreCheckedBeforeTheBodyIsRead) {
  TransportOptions o;
  o.api_key = "sekrit";
  Start(o);
  const std::string huge = "Content-Length: 1073741824\r\n";
  { // no such route: answered at once, the gigabyte never sent
    Client c(port());
    c.Send("POST /nowhere HTTP/1.1\r\nHost: x\r\n" + huge + "\r\n");
    EXPECT_EQ(c.Status(2000ms), 404);
  }
  { // a route for another method (the POST /metrics)
    Client c(port());
    c.Send("POST /health HTTP/1.1\r\nHost: x\r\n" + huge + "\r\n");
    EXPECT_EQ(c.Status(2000ms), 405);
  }
  { // no key
    Client c(port());
    c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
    EXPECT_EQ(c.Status(2000ms), 401);
  }
  { // the right key
    Client c(port());
    c.Send(Post("/echo", "ab", "Authorization: Bearer sekrit\r\n"));
    EXPECT_EQ(c.Status(), 200);
  }
  { // an open route needs none
    Client c(port());
    c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.Status(), 200);
  }
}

TEST_F(TransportTest, HeaderFloodsAre431) {
  Start();
  {
    Client c(port());
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 4000; ++i) // ~100 KiB of header lines, more than 16 KiB
      req += "X-Flood-" + std::to_string(i) + ": aaaaaaaaaaaaaaaa\r\n";
    c.Send(req); // the server may close while we send: that is the point
    EXPECT_EQ(c.Status(), 431);
  }
  {
    Client c(port());
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 150; ++i)
      req += "X-" + std::to_string(i) + ": a\r\n";
    c.Send(req + "\r\n");
    EXPECT_EQ(c.Status(), 431);
  }
}

TEST_F(TransportTest, SlowClientsHoldNoThreadAndYieldTheirPlace) {
  TransportOptions o;
  o.max_connections = 8;
  o.header_timeout_s = 1;
  Start(o);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 20; ++i) { // more than the cap, each with half a request line
    slow.push_back(std::make_unique<Client>(port()));
    slow.back()->Send("GET /hea");
  }
  for (int i = 0; i < 5; ++i) {
    Client c(port());
    const auto t0 = Clock::now();
    c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.Status(2000ms), 200) << "probe " << i;
    EXPECT_LT(Since(t0), 1.0);
  }
  // The ones still open are closed by --header-timeout.
  const auto t0 = Clock::now();
  for (auto &c : slow)
    EXPECT_TRUE(c->ClosedByServer(3000ms));
  EXPECT_LT(Since(t0), 3.0);
}

TEST_F(TransportTest, AClosedClientIsNoticedAndAHalfClosedOneIsAnswered) {
  wait_s_ = 0.5;
  Start();
  {
    Client c(port());
    c.Send(Post("/wait", "x"));
    c.HalfClose(); // still reading
    std::string body;
    EXPECT_EQ(c.Status(5000ms, &body), 200);
    EXPECT_EQ(body, "waited");
    EXPECT_FALSE(gone_seen_.load());
  }
  wait_s_ = 5;
  {
    Client c(port());
    c.Send(Post("/wait", "x"));
    const auto t0 = Clock::now();
    while (waiting_.load() < 2 && Since(t0) < 5)
      std::this_thread::sleep_for(5ms);
    c.Close();
    const auto t1 = Clock::now();
    while (!gone_seen_.load() && Since(t1) < 3)
      std::this_thread::sleep_for(5ms);
    EXPECT_TRUE(gone_seen_.load());
    EXPECT_LT(Since(t1), 1.0);
  }
}

TEST_F(TransportTest, EveryWorkerTakenIsA503NotAQueue) {
  TransportOptions o;
  o.workers = 1;
  wait_s_ = 2;
  Start(o);
  Client busy(port());
  busy.Send(Post("/wait", "x"));
  const auto t0 = Clock::now();
  while (waiting_.load() < 1 && Since(t0) < 5)
    std::this_thread::sleep_for(5ms);
  Client c(port());
  c.Send(Post("/echo", "x"));
  EXPECT_EQ(c.Status(2000ms), 503);
  Client h(port()); // the light workers still answer
  h.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(h.Status(2000ms), 200);
}

TEST_F(TransportTest, StopClosesSlowClientsAtOnce) {
  Start();
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Client>(port()));
    slow.back()->Send("GET /health HTTP/1.1\r\nX-Slow: a");
  }
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  t_->Drain();
  t_->Stop();
  EXPECT_LT(Since(t0), 1.5);
  for (auto &c : slow)
    EXPECT_TRUE(c->ClosedByServer(500ms));
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer abd"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer ab", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer ab"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(EscapeForLog, NoRequestCanForgeALogLine) {
  EXPECT_EQ(EscapeForLog("a\npig-serve: ready: FORGED"), "a\\npig-serve: ready: FORGED");
  EXPECT_EQ(EscapeForLog("tab\tcr\r\x1b[31m\x7f\\"), "tab\\tcr\\r\\x1b[31m\\x7f\\\\");
  EXPECT_EQ(EscapeForLog("plain text, UTF-8 \xc3\xa9"), "plain text, UTF-8 \xc3\xa9");
}

} // namespace
} // namespace pig::serve::net
