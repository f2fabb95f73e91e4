#include "support/fake_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace trainpack {
namespace testing {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else if (s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

bool send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

struct FakeHttpServer::Impl {
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread listener;

  mutable std::mutex mutex;  // guards what follows
  Handler handler;
  std::vector<RecordedRequest> requests;
  int connections = 0;
  std::vector<int> open_fds;
  std::vector<std::thread> connection_threads;

  std::mutex handler_mutex;  // serialises the handler's calls

  void listen_loop();
  void serve(int fd);
  void serve_requests(int fd);
  // Appends what arrives next on `fd` to `buf` (false: closed, failed or the server stopping).
  bool read_more(int fd, std::string& buf);
};

bool FakeHttpServer::Impl::read_more(int fd, std::string& buf) {
  while (!stopping.load()) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  }
  return false;
}

void FakeHttpServer::Impl::serve(int fd) {
  serve_requests(fd);
  // The client sees the end of the connection; the descriptor itself is closed by the destructor
  // (so that its number is not reused while it is still listed).
  ::shutdown(fd, SHUT_RDWR);
}

void FakeHttpServer::Impl::serve_requests(int fd) {
  std::string buf;
  while (!stopping.load()) {
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (!read_more(fd, buf)) return;
    }
    RecordedRequest req;
    const std::string head = buf.substr(0, head_end);
    buf.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string request_line = head.substr(0, line_end);
    const size_t sp1 = request_line.find(' ');
    const size_t sp2 = request_line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return;
    req.method = request_line.substr(0, sp1);
    req.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    const size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) {
      const std::string query = req.target.substr(q + 1);
      size_t start = 0;
      while (start <= query.size()) {
        size_t amp = query.find('&', start);
        if (amp == std::string::npos) amp = query.size();
        const std::string pair = query.substr(start, amp - start);
        if (!pair.empty()) {
          const size_t eq = pair.find('=');
          req.query[url_decode(pair.substr(0, eq))] =
              eq == std::string::npos ? "" : url_decode(pair.substr(eq + 1));
        }
        start = amp + 1;
      }
    }
    while (line_end != std::string::npos && line_end < head.size()) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(
          line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        req.headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
      }
      line_end = next;
    }
    FakeResponse response;
    bool close_after = false;
    auto it = req.headers.find("transfer-encoding");
    if (it != req.headers.end()) {
      response = FakeResponse{411, R"({"error": "chunked bodies are not supported"})", {}, false};
      close_after = true;
      std::lock_guard<std::mutex> lock(mutex);
      requests.push_back(req);
    } else {
      size_t length = 0;
      it = req.headers.find("content-length");
      if (it != req.headers.end()) length = std::stoul(it->second);
      while (buf.size() < length) {
        if (!read_more(fd, buf)) return;
      }
      req.body = buf.substr(0, length);
      buf.erase(0, length);
      Handler h;
      {
        std::lock_guard<std::mutex> lock(mutex);
        requests.push_back(req);
        h = handler;
      }
      {
        std::lock_guard<std::mutex> lock(handler_mutex);
        response = h ? h(req) : FakeResponse{404, R"({"error": "no handler"})", {}, false};
      }
    }
    it = req.headers.find("connection");
    if (it != req.headers.end() && lower(it->second) == "close") close_after = true;
    if (response.hang) {
      // Silent until the server is destroyed (the client's timeout or abort ends its side).
      while (!stopping.load()) {
        std::string ignored;
        if (!read_more(fd, ignored)) break;
      }
      return;
    }
    std::string out =
        "HTTP/1.1 " + std::to_string(response.status) + " " + reason(response.status) + "\r\n";
    out += "Content-Type: application/json\r\n";
    out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    if (close_after) out += "Connection: close\r\n";
    out += "\r\n" + response.body;
    if (!send_all(fd, out) || close_after) return;
  }
}

void FakeHttpServer::Impl::listen_loop() {
  while (!stopping.load()) {
    pollfd p{listen_fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 50);
    if (r <= 0) continue;
    const int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mutex);
    ++connections;
    open_fds.push_back(fd);
    connection_threads.emplace_back([this, fd] { serve(fd); });
  }
}

FakeHttpServer::FakeHttpServer(Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->handler = std::move(handler);
  impl_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl_->listen_fd < 0) {
    throw std::runtime_error(std::string("FakeHttpServer: socket: ") + std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(impl_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(impl_->listen_fd, 64) != 0) {
    const std::string err = std::strerror(errno);
    ::close(impl_->listen_fd);
    throw std::runtime_error("FakeHttpServer: bind/listen on 127.0.0.1: " + err);
  }
  socklen_t len = sizeof addr;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl_->port = ntohs(addr.sin_port);
  impl_->listener = std::thread([this] { impl_->listen_loop(); });
}

FakeHttpServer::~FakeHttpServer() {
  impl_->stopping.store(true);
  impl_->listener.join();
  ::close(impl_->listen_fd);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    threads.swap(impl_->connection_threads);
  }
  for (std::thread& t : threads) t.join();
  for (int fd : impl_->open_fds) ::close(fd);
}

int FakeHttpServer::port() const { return impl_->port; }

std::string FakeHttpServer::url() const { return "http://127.0.0.1:" + std::to_string(port()); }

void FakeHttpServer::set_handler(Handler handler) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->handler = std::move(handler);
}

std::vector<RecordedRequest> FakeHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->requests;
}

int FakeHttpServer::connections() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->connections;
}

std::string FakeHttpServer::unused_url() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw std::runtime_error(std::string("FakeHttpServer: socket: ") + std::strerror(errno));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("FakeHttpServer::unused_url: bind on 127.0.0.1: " + err);
  }
  // Bound but never listening, then closed: a connection to the port is refused.
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace testing
}  // namespace trainpack
