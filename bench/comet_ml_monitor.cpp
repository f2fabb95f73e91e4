// trainpack_bench_comet_ml_monitor: what CometMLMonitor costs the training thread, and how many
// requests it sends per epoch.
//
// A NoOpTrainer (no model) puts one scalar per step, in three forms:
//   (a) no monitor;
//   (b) JSONWriter (an entry appended to stats.json every step, in a scratch logger directory);
//   (c) CometMLMonitor, sending to a local stand-in for Comet's REST API on 127.0.0.1 (this file:
//       it answers every request at once, 200 with a JSON body, on keep-alive connections).
// A form's figure is the time from before_train to the last step's trigger_step divided by the
// steps: what the training thread spends, not the monitor's thread (whose final flush is in
// after_train and reported apart as `flush ms`). Each form runs `--reps` times, interleaved;
// medians are printed. The last lines are `requests_per_epoch` (CometMLMonitor's requests,
// creation and end included, divided by the epochs) and `comet_over_jsonwriter` (ns/step ratio).
//
//   trainpack_bench_comet_ml_monitor [--steps N (100000)] [--epochs E (10)] [--reps R (5)]
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/comet_ml_monitor.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

// Answers every HTTP/1.1 request on 127.0.0.1 with 200 and a JSON body (an experiment for
// .../create), one thread per connection. Counts the requests.
class StandIn {
 public:
  StandIn() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("stand-in server");
      std::exit(1);
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~StandIn() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (auto& t : connections_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/api/rest/v2"; }
  int64_t requests() const { return requests_.load(); }

 private:
  void accept_loop() {
    while (true) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(fd);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    std::string in;
    char buf[65536];
    while (true) {
      size_t header_end;
      while ((header_end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      size_t length = 0;
      const size_t cl = in.find("Content-Length: ");
      if (cl != std::string::npos && cl < header_end)
        length = std::strtoul(&in[cl + 16], nullptr, 10);
      while (in.size() < header_end + 4 + length) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      const bool create = in.compare(0, 5, "POST ") == 0 &&
                          in.substr(0, in.find("\r\n")).find("/create ") != std::string::npos;
      in.erase(0, header_end + 4 + length);
      ++requests_;
      const std::string body =
          create ? R"({"experimentKey": "0123456789abcdef0123456789abcdef", "link": "x"})"
                 : R"({"msg": "Saved", "isAliveBeatDurationMillis": 10000})";
      const std::string answer =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      if (::write(fd, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size())) return;
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int64_t> requests_{0};
  std::mutex mutex_;
  std::vector<int> fds_;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

// Puts one scalar per step; records the time of before_train and of the last trigger_step.
class PutEveryStep : public trainpack::Callback {
 public:
  Clock::time_point t0, t1;

 protected:
  void _before_train() override { t0 = Clock::now(); }
  void _trigger_step() override {
    trainer().monitors().put_scalar("cost", static_cast<double>(global_step() % 1000) * 1e-3);
    t1 = Clock::now();
  }
};

struct Result {
  double ns_per_step;
  double flush_ms;  // from the last step to the end of train()
};

Result run(std::vector<trainpack::MonitorPtr> monitors, int64_t spe, int64_t epochs) {
  trainpack::NoOpTrainer trainer;
  auto putter = std::make_shared<PutEveryStep>();
  trainer.train({putter}, monitors, spe, 1, epochs);
  const auto end = Clock::now();
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  const std::chrono::duration<double, std::nano> steps = putter->t1 - putter->t0;
  const std::chrono::duration<double, std::milli> flush = end - putter->t1;
  return {steps.count() / static_cast<double>(spe * epochs), flush.count()};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 100000, epochs = 10, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--epochs" || arg == "--reps") && i + 1 < argc) {
      const int64_t v = parse_positive(arg.c_str(), argv[++i]);
      (arg == "--steps" ? steps : arg == "--epochs" ? epochs : reps) = v;
    } else {
      std::fprintf(stderr, "usage: %s [--steps N (100000)] [--epochs E (10)] [--reps R (5)]\n",
                   argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  const int64_t spe = std::max<int64_t>(steps / epochs, 1);
  std::printf(
      "comet_ml_monitor benchmark: %lld steps (%lld epochs x %lld), one scalar per step, "
      "%lld reps\n",
      static_cast<long long>(spe * epochs), static_cast<long long>(epochs),
      static_cast<long long>(spe), static_cast<long long>(reps));

  std::vector<double> none, json, comet, comet_flush;
  int64_t requests = 0;
  for (int64_t r = 0; r < reps; ++r) {
    none.push_back(run({}, spe, epochs).ns_per_step);
    {
      trainpack::bench::ScratchLoggerDir dir("trainpack_bench_comet_ml_monitor");
      json.push_back(run({trainpack::JSONWriter::create()}, spe, epochs).ns_per_step);
    }
    StandIn server;
    auto monitor = std::make_shared<trainpack::CometMLMonitor>(
        trainpack::CometMLMonitorOptions()
            .api_key("bench-key")
            .workspace("bench")
            .project_name("bench")
            .url(server.url())
            .tracking(trainpack::TrackingOptions().flush_timeout(std::chrono::minutes(10))));
    const Result c = run({monitor}, spe, epochs);
    comet.push_back(c.ns_per_step);
    comet_flush.push_back(c.flush_ms);
    monitor.reset();  // closes the connection before the server goes
    requests = server.requests();
  }
  std::printf("(a) no monitor       %8.1f ns/step (median)\n", median(none));
  std::printf("(b) JSONWriter       %8.1f ns/step (median)\n", median(json));
  std::printf("(c) CometMLMonitor   %8.1f ns/step (median); flush %.0f ms after the last step\n",
              median(comet), median(comet_flush));
  std::printf("requests_per_epoch=%.1f\n",
              static_cast<double>(requests) / static_cast<double>(epochs));
  std::printf("comet_over_jsonwriter=%.2f\n", median(comet) / median(json));
  return 0;
}
