// HttpSink: the smallest HTTP/1.1 server that the tracking-monitor benchmark needs: it listens on
// 127.0.0.1, answers every request at once with 200 and one JSON body that holds what Comet's and
// MLflow's create calls return (an experiment key and link, an experiment id, a run id), keeps
// connections alive, and counts the requests. It checks nothing: the tests' fake services do that.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trainpack::bench {

class HttpSink {
 public:
  HttpSink() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("HttpSink: cannot listen on 127.0.0.1");
      std::exit(1);
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~HttpSink() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : workers_) t.join();
    for (int fd : connections_) ::close(fd);
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int64_t requests() const { return requests_.load(); }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.push_back(fd);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // Reads requests (headers, then Content-Length bytes of body) and answers each one.
  void serve(int fd) {
    static const std::string body =
        R"({"experimentKey": "bench", "link": "http://127.0.0.1/bench", )"
        R"("experiment_id": "1", "experiment": {"experiment_id": "1", "name": "bench"}, )"
        R"("run": {"info": {"run_id": "bench", "experiment_id": "1", "status": "RUNNING"}}})";
    const std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 "Content-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body;
    std::string buffer;
    char chunk[65536];
    for (;;) {
      const size_t header_end = buffer.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        size_t length = 0;
        const size_t at = lower(buffer.substr(0, header_end)).find("content-length:");
        if (at != std::string::npos) length = std::strtoull(buffer.c_str() + at + 15, nullptr, 10);
        if (buffer.size() >= header_end + 4 + length) {
          buffer.erase(0, header_end + 4 + length);
          ++requests_;
          if (::send(fd, response.data(), response.size(), MSG_NOSIGNAL) < 0) return;
          continue;
        }
      }
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
    }
  }

  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return s;
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> requests_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> connections_;
  std::vector<std::thread> workers_;
};

}  // namespace trainpack::bench
