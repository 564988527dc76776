// deltafin serve's connection loop and request heads, without a model: heads parse strictly
// (oversized Content-Length, Transfer-Encoding, folded or malformed lines refused with their
// status); slow clients neither block a complete request nor outlive their deadline (408); the
// caps per address (429) and in all (503) refuse at once, the cap on bytes being read too (503);
// keep-alive and pipelined requests are answered in order; Expect: 100-continue is answered; a
// second server on a used port fails naming it; stop() ends the loop in bounded time with slow
// clients and a handler still writing.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve/api_error.hpp"
#include "serve/connection_loop.hpp"
#include "serve/http_request_head.hpp"
#include "util/error.hpp"

using namespace deltafin;
using namespace deltafin::serve;
using Clock = std::chrono::steady_clock;

namespace {

int head_refusal(const std::string& head, uint64_t max_body = 1000) {
  try {
    parse_request_head(head, max_body);
  } catch (const ApiError& e) {
    return e.status;
  }
  return 0;
}

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

void send_text(int fd, const std::string& text) { REQUIRE(send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size())); }

// What the server sends within seconds, until it closes or until `until` is in it.
std::string receive(int fd, double seconds, const std::string& until = "") {
  std::string got;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < deadline && (until.empty() || got.find(until) == std::string::npos)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// A loop on a free port, run on a thread; the handler answers "ok <path>" (or sleeps first for
// /slow, writing until the client stops reading for /flood).
struct TestLoop {
  explicit TestLoop(ConnectionLimits limits)
      : loop(limits) {
    port = loop.bind("127.0.0.1", 0);
    thread = std::thread([this] {
      loop.run(
          [](const HttpRequest& request, ResponseWriter& writer) {
            if (request.head.path == "/flood") {
              writer.start_stream(200, "text/plain");
              while (writer.write_chunk(std::string(65536, 'x'))) {
              }
              return;
            }
            writer.send(200, "text/plain", "ok " + request.head.path + " " + request.body);
          },
          nullptr);
    });
  }
  ~TestLoop() {
    if (thread.joinable()) {
      loop.stop();
      thread.join();
    }
  }
  ConnectionLoop loop;
  int port = 0;
  std::thread thread;
};

const std::string kGet = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";

}  // namespace

TEST_CASE("serve request heads: strict parsing, refusals with their status", "[serve]") {
  const RequestHead h = parse_request_head("POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 12\r\nAuthorization:  Bearer k \r\n"
                                           "Connection: keep-alive, Close\r\nExpect: 100-Continue\r\n\r\n", 100);
  CHECK(h.method == "POST");
  CHECK(h.path == "/v1/completions");
  CHECK(h.content_length == 12);
  CHECK(h.header("authorization") == "Bearer k");
  CHECK_FALSE(h.keep_alive);
  CHECK(h.expect_continue);
  CHECK(parse_request_head("GET / HTTP/1.0\r\n\r\n", 0).keep_alive == false);
  CHECK(parse_request_head("GET / HTTP/1.1\r\n\r\n", 0).keep_alive == true);

  CHECK(head_refusal("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n") == 413);
  CHECK(head_refusal("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n") == 400);  // past 64 bits
  CHECK(head_refusal("POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n") == 413);
  CHECK(head_refusal("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n") == 400);
  CHECK(head_refusal("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") == 400);
  CHECK(head_refusal("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") == 411);
  CHECK(head_refusal("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n") == 400);
  CHECK(head_refusal("GET / HTTP/1.1\r\nA : b\r\n\r\n") == 400);
  CHECK(head_refusal("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n") == 400);
  CHECK(head_refusal("GET http://x/ HTTP/1.1\r\n\r\n") == 400);
  CHECK(head_refusal("GET / HTTP/2.0\r\n\r\n") == 505);
  CHECK(head_refusal("GET /\r\n\r\n") == 400);
  CHECK(head_refusal("GET / HTTP/1.1\r\nExpect: magic\r\n\r\n") == 417);
  CHECK(find_head_end("GET / HTTP/1.1\r\nA: b\r\n") == std::string::npos);
  CHECK(find_head_end("GET / HTTP/1.1\r\n\r\nbody") == 18);
}

TEST_CASE("serve connections: keep-alive, pipelining, 100-continue, a used port", "[serve]") {
  TestLoop t(ConnectionLimits{});
  const int fd = connect_to(t.port);
  send_text(fd, kGet + "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz");  // two requests in one write
  const std::string both = receive(fd, 5, "ok /b xyz");
  CHECK(both.find("ok /a ") < both.find("ok /b xyz"));
  send_text(fd, "POST /c HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  CHECK(receive(fd, 5, "100 Continue").find("HTTP/1.1 100 Continue\r\n") == 0);
  send_text(fd, "hi");
  CHECK(receive(fd, 5, "ok /c hi").find("ok /c hi") != std::string::npos);
  close(fd);

  ConnectionLoop second{ConnectionLimits{}};
  try {
    second.bind("127.0.0.1", t.port);
    FAIL("a second server bound the same port");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(std::to_string(t.port)) != std::string::npos);
    CHECK(std::string(e.what()).find("in use") != std::string::npos);
  }
}

TEST_CASE("serve connections: slow clients hold no worker and meet their deadline", "[serve]") {
  ConnectionLimits limits;
  limits.head_seconds = 1.0;
  limits.max_per_address = 1000;
  limits.max_handlers = 2;  // every slow client would take one, were they given workers
  TestLoop t(limits);
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    slow.push_back(connect_to(t.port));
    send_text(slow.back(), "GET /slow HTTP/1.1\r\n");  // a head that never ends
  }
  const int quick = connect_to(t.port);
  const auto t0 = Clock::now();
  send_text(quick, kGet);
  CHECK(receive(quick, 2, "ok /a").find("ok /a") != std::string::npos);
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(500));
  close(quick);
  for (int fd : slow) send_text(fd, "X-Slow: 1\r\n");
  const std::string timed_out = receive(slow[0], 3, "\r\n\r\n");  // past the 1 s deadline
  CHECK(timed_out.find("HTTP/1.1 408 ") == 0);
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(2500));
  for (int fd : slow) close(fd);
}

TEST_CASE("serve connections: caps per address and in all refuse at once", "[serve]") {
  // `open` connections are held; the next one is answered `status` at once.
  const auto next_refused = [](const ConnectionLimits& limits, int open, const std::string& status) {
    TestLoop t(limits);
    std::vector<int> held;
    for (int i = 0; i < open; ++i) held.push_back(connect_to(t.port));
    const int extra = connect_to(t.port);
    CHECK(receive(extra, 2, "\r\n\r\n").find("HTTP/1.1 " + status + " ") == 0);
    close(extra);
    for (int fd : held) close(fd);
  };
  ConnectionLimits limits;
  limits.max_per_address = 3;
  limits.max_connections = 5;
  next_refused(limits, 3, "429");
  limits.max_per_address = 100;
  next_refused(limits, 5, "503");
}

TEST_CASE("serve connections: the bytes of requests being read are capped in all", "[serve]") {
  ConnectionLimits limits;
  limits.max_buffered_bytes = 4096;
  TestLoop t(limits);
  const std::string head = "POST /big HTTP/1.1\r\nContent-Length: 3000\r\n\r\n";
  const int first = connect_to(t.port), second = connect_to(t.port);
  send_text(first, head + std::string(2000, 'a'));  // a body still arriving
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send_text(second, head + std::string(2500, 'b'));  // past the cap together
  CHECK(receive(second, 2, "\r\n\r\n").find("HTTP/1.1 503 ") == 0);
  send_text(first, std::string(1000, 'a'));  // the first is still read whole
  CHECK(receive(first, 2, "aaa").find("HTTP/1.1 200 ") == 0);
  close(first);
  close(second);
  const int third = connect_to(t.port);  // the refused bytes were given back
  send_text(third, head + std::string(3000, 'c'));
  CHECK(receive(third, 2, "ccc").find("HTTP/1.1 200 ") == 0);
  close(third);
}

TEST_CASE("serve connections: stop() ends the loop in bounded time with slow clients and a stuck reader", "[serve]") {
  ConnectionLimits limits;
  limits.max_per_address = 1000;
  limits.stop_grace_seconds = 0.5;
  auto t = std::make_unique<TestLoop>(limits);
  std::vector<int> slow;
  for (int i = 0; i < 100; ++i) {
    slow.push_back(connect_to(t->port));
    send_text(slow.back(), "GET /slow HTTP/1.1\r\n");
  }
  const int stuck = connect_to(t->port);  // asks for an endless response and never reads it
  send_text(stuck, "GET /flood HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  t->loop.stop();
  t->thread.join();
  CHECK(Clock::now() - t0 < std::chrono::seconds(3));
  char byte;
  CHECK(recv(slow[0], &byte, 1, 0) == 0);  // closed by the server
  for (int fd : slow) close(fd);
  close(stuck);
}
