// A gate for the io hooks of the file writers (JSONWriterOptions / TFEventWriterOptions /
// EventFileWriterOptions io_hook): the writer's thread waits in the hook until the test opens
// the gate, so that a test can show what the training thread does without waiting for the disk.
// A wait gives up after `limit` (recorded as timed_out), so that a hook called on the training
// thread itself makes the test fail instead of hanging it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trainpack::testing {

class Gate {
 public:
  struct Call {
    std::string what;
    std::thread::id thread;
    bool before_open;  // the call came while the gate was closed
  };

  // `blocks(what)`: whether a call of that kind waits (e.g. only "fdatasync").
  explicit Gate(std::function<bool(const std::string&)> blocks = nullptr,
                std::chrono::milliseconds limit = std::chrono::seconds(5))
      : blocks_(std::move(blocks)), limit_(limit) {}

  // The io hook: records the call, then waits while the gate is closed (at most `limit`).
  void pass(const char* what) {
    std::unique_lock<std::mutex> lk(mu_);
    calls_.push_back(Call{what, std::this_thread::get_id(), !open_});
    cv_.notify_all();  // wait_for_call
    if (blocks_ && !blocks_(what)) return;
    if (!cv_.wait_for(lk, limit_, [&] { return open_; })) timed_out_ = true;
  }
  std::function<void(const char*)> hook() {
    return [this](const char* what) { pass(what); };
  }

  // Waits (at most `limit`) until a call of kind `what` came; whether one did.
  bool wait_for_call(const std::string& what) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, limit_, [&] {
      for (const Call& c : calls_) {
        if (c.what == what) return true;
      }
      return false;
    });
  }

  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lk(mu_);
    return calls_;
  }
  bool timed_out() const {
    std::lock_guard<std::mutex> lk(mu_);
    return timed_out_;
  }

 private:
  const std::function<bool(const std::string&)> blocks_;
  const std::chrono::milliseconds limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool timed_out_ = false;
  std::vector<Call> calls_;
};

}  // namespace trainpack::testing
