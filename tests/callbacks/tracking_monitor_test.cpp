// TrackingMonitor, through a small subclass that talks to the tests' FakeHttpServer: the order of
// open / deliver / finish, when batches go, retries and back-off, the warnings, the bounded final
// flush, the run's status and the secret kept out of the log.
#include "trainpack/callbacks/tracking_monitor.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_http_server.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace tracking_monitor_test {

using testing::ActionCallback;
using ::testing::ElementsAre;
using testing::FakeHttpServer;
using testing::FakeResponse;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::RecordedRequest;

const char kKey[] = "SECRET-KEY-123";
// A second secret (as a Basic credential has: the password and the header's base64).
const char kSecondSecret[] = "U0VDUkVU";

// A monitor for a made-up service: POST /open, POST /batch (one line per record), POST /finish
// (the status), each with the key in its Authorization header.
class TestMonitor : public TrackingMonitor {
 public:
  TestMonitor(std::string url, TrackingOptions options)
      : TrackingMonitor("Test", std::move(options)), url_(std::move(url)) {
    set_secret(kKey);
    set_secret(kSecondSecret);
  }
  ~TestMonitor() override { stop(); }

  using TrackingMonitor::enqueue;

 protected:
  bool open() override { return send("/open", "{}", "open").ok(); }
  void deliver(std::vector<TrackingRecord>& batch) override {
    std::string body;
    for (const TrackingRecord& r : batch) {
      if (r.kind == TrackingRecord::Kind::kMetric) {
        body += fmt::format("metric {}={} step={} epoch={}\n", r.key, r.value, r.step, r.epoch);
      } else {
        body += fmt::format("param {}={} step={} epoch={}\n", r.key, r.text, r.step, r.epoch);
      }
    }
    send("/batch", body, "batch");
  }
  void finish(TrackingStatus status) override {
    send("/finish", tracking_status_name(status), "finish");
  }
  std::string credentials_hint() const override { return "TEST_API_KEY"; }

 private:
  HttpResponse send(const std::string& path, const std::string& body, const std::string& what) {
    return request(
        {"POST", url_ + path + "?key=" + std::string(kKey), {{"Authorization", kKey}}, body}, what);
  }
  std::string url_;
};

// Options for tests: tiny back-offs, nothing sent by time, a generous flush.
TrackingOptions fast() {
  return TrackingOptions()
      .send_interval(std::chrono::hours(1))
      .initial_backoff(std::chrono::milliseconds(1))
      .max_backoff(std::chrono::milliseconds(2))
      .flush_timeout(std::chrono::seconds(20))
      .http(HttpClientOptions().timeout(std::chrono::seconds(20)));
}

FakeResponse ok() { return FakeResponse{200, "{}"}; }

std::vector<std::string> paths(const FakeHttpServer& server) {
  std::vector<std::string> out;
  for (const RecordedRequest& r : server.requests()) out.push_back(r.path);
  return out;
}

std::vector<std::string> warnings(const LogCapture& log) {
  std::vector<std::string> out;
  for (const std::string& line : log.lines()) {
    if (line.rfind("WRN ", 0) == 0) out.push_back(line);
  }
  return out;
}

// Waits (at most 20 s) until the server has received `n` requests to `path`.
void wait_for_requests(const FakeHttpServer& server, const std::string& path, size_t n) {
  for (int i = 0; i < 4000; ++i) {
    size_t count = 0;
    for (const RecordedRequest& r : server.requests()) count += r.path == path ? 1 : 0;
    if (count >= n) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL() << "the server never received " << n << " requests to " << path;
}

// Puts "loss" = global_step after every step.
std::shared_ptr<ActionCallback> put_loss() {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& self) {
    self.trainer().monitors().put_scalar("loss", static_cast<double>(self.global_step()));
  };
  return cb;
}

void train(std::vector<CallbackPtr> callbacks, std::shared_ptr<TestMonitor> monitor, int64_t spe,
           int64_t epochs) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {monitor}, spe, 1, epochs);
}

TEST(TrackingMonitor, OpensDeliversEachEpochAndFinishesInOrder) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  // Epoch 2 starts only once epoch 1's batch arrived: each batch is exactly one epoch's records.
  auto wait_for_epoch_1 = std::make_shared<ActionCallback>();
  wait_for_epoch_1->before_epoch_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) wait_for_requests(server, "/batch", 1);
  };
  LogCapture log;
  train({put_loss(), wait_for_epoch_1}, monitor, 3, 2);
  const auto requests = server.requests();
  ASSERT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/finish"));
  EXPECT_EQ(requests[1].body,
            "metric loss=1 step=1 epoch=1\nmetric loss=2 step=2 epoch=1\n"
            "metric loss=3 step=3 epoch=1\n");
  EXPECT_EQ(requests[2].body,
            "metric loss=4 step=4 epoch=2\nmetric loss=5 step=5 epoch=2\n"
            "metric loss=6 step=6 epoch=2\n");
  EXPECT_EQ(requests[3].body, "FINISHED");
  for (const RecordedRequest& r : requests) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.headers.at("authorization"), kKey);
  }
  EXPECT_EQ(server.connections(), 1);  // keep-alive
  EXPECT_EQ(monitor->records_queued(), 6);
  EXPECT_EQ(monitor->records_dropped(), 0);
  EXPECT_EQ(monitor->requests_sent(), 4);
  EXPECT_EQ(monitor->requests_failed(), 0);
  EXPECT_EQ(monitor->status(), TrackingStatus::kFinished);
  EXPECT_THAT(warnings(log), ElementsAre());
}

TEST(TrackingMonitor, DeliversWhenTheQueueHoldsABatch) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast().batch_size(2));
  auto wait_for_batch = std::make_shared<ActionCallback>();
  wait_for_batch->trigger_step_fn = [&](ActionCallback& self) {
    if (self.global_step() == 2) wait_for_requests(server, "/batch", 1);
  };
  train({put_loss(), wait_for_batch}, monitor, 3, 1);
  const auto requests = server.requests();
  ASSERT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/finish"));
  EXPECT_EQ(requests[1].body, "metric loss=1 step=1 epoch=1\nmetric loss=2 step=2 epoch=1\n");
  EXPECT_EQ(requests[2].body, "metric loss=3 step=3 epoch=1\n");
}

TEST(TrackingMonitor, SendsTheHyperParametersAtBeforeTrain) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  double lr = 0.5, wd = 0;
  auto lr_param = std::make_shared<ObjAttrParam>([&] { return lr; }, [&](double v) { lr = v; },
                                                 "learning_rate");
  auto wd_param =
      std::make_shared<ObjAttrParam>([&] { return wd; }, [&](double v) { wd = v; }, "weight_decay");
  auto lr_setter = std::make_shared<ScheduledHyperParamSetter>(
      lr_param, ScheduledHyperParamSetter::Schedule{{0, 0.1}, {5, 0.01}});
  auto wd_setter = std::make_shared<ScheduledHyperParamSetter>(
      wd_param, ScheduledHyperParamSetter::Schedule{{0, 1e-05}});
  train({lr_setter, wd_setter}, monitor, 2, 1);
  const auto requests = server.requests();
  ASSERT_THAT(paths(server), ElementsAre("/open", "/batch", "/finish"));
  EXPECT_EQ(requests[1].body,
            "param learning_rate=0.1 step=0 epoch=0\nparam weight_decay=1e-05 step=0 epoch=0\n");
}

TEST(TrackingMonitor, FindsAHyperParamSetterInsideWrappers) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  double lr = 0.5;
  auto lr_param = std::make_shared<ObjAttrParam>([&] { return lr; }, [&](double v) { lr = v; },
                                                 "learning_rate");
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      lr_param, ScheduledHyperParamSetter::Schedule{{0, 0.25}});
  auto wrapped = std::make_shared<PeriodicTrigger>(
      std::make_shared<PeriodicTrigger>(setter, PeriodicTriggerOptions().every_k_epochs(1)),
      PeriodicTriggerOptions().every_k_epochs(1));
  train({wrapped}, monitor, 2, 1);
  ASSERT_THAT(paths(server), ElementsAre("/open", "/batch", "/finish"));
  EXPECT_EQ(server.requests()[1].body, "param learning_rate=0.25 step=0 epoch=0\n");
}

TEST(TrackingMonitor, RetriesA500UntilItWorks) {
  int batch_answers = 0;
  FakeHttpServer server([&](const RecordedRequest& r) {
    if (r.path == "/batch" && batch_answers++ < 2) return FakeResponse{500, "oops"};
    return ok();
  });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast().max_attempts(3));
  LogCapture log;
  train({put_loss()}, monitor, 2, 1);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/batch", "/finish"));
  EXPECT_EQ(monitor->requests_sent(), 5);
  EXPECT_EQ(monitor->requests_failed(), 0);
  EXPECT_THAT(warnings(log), ElementsAre());
}

TEST(TrackingMonitor, GivesUpAfterMaxAttemptsWithOneWarningAndTheSecretRedacted) {
  FakeHttpServer server([](const RecordedRequest& r) {
    if (r.path == "/batch") {
      return FakeResponse{
          503, std::string(R"({"error": "busy; your key )") + kKey + " " + kSecondSecret + "\"}"};
    }
    return ok();
  });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast().max_attempts(3));
  auto wait_for_epoch_1 = std::make_shared<ActionCallback>();
  wait_for_epoch_1->before_epoch_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) wait_for_requests(server, "/batch", 3);
  };
  LogCapture log;
  train({put_loss(), wait_for_epoch_1}, monitor, 2, 2);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/batch", "/batch", "/batch",
                                         "/batch", "/finish"));
  EXPECT_EQ(monitor->requests_sent(), 8);
  EXPECT_EQ(monitor->requests_failed(), 2);
  const auto w = warnings(log);
  ASSERT_EQ(w.size(), 2u);  // the first failure, then the summary with the count
  EXPECT_EQ(
      w[0],
      "WRN Test: batch (POST http://127.0.0.1:" + std::to_string(server.port()) +
          "/batch) failed after 3 attempts: HTTP 503: {\"error\": \"busy; your key "
          "<redacted> <redacted>\"}; training goes on (later failures are counted and the count is "
          "logged when training ends)");
  EXPECT_EQ(w[1],
            "WRN Test: 2 of 8 requests failed, 0 of 4 records were dropped; training was "
            "not affected");
  EXPECT_FALSE(log.contains(kKey));
  EXPECT_FALSE(log.contains(kSecondSecret));
}

TEST(TrackingMonitor, Honours429RetryAfter) {
  // Back-offs of a minute: only the answer's Retry-After: 0 lets the retry come before the
  // flush timeout (else the batch would not be sent and the run not finished).
  int batch_answers = 0;
  FakeHttpServer server([&](const RecordedRequest& r) {
    if (r.path == "/batch" && batch_answers++ == 0) {
      return FakeResponse{429, "", {{"Retry-After", "0"}}};
    }
    return ok();
  });
  auto monitor =
      std::make_shared<TestMonitor>(server.url(), fast()
                                                      .initial_backoff(std::chrono::minutes(1))
                                                      .max_backoff(std::chrono::minutes(1))
                                                      .flush_timeout(std::chrono::seconds(20)));
  LogCapture log;
  train({put_loss()}, monitor, 2, 1);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/finish"));
  EXPECT_EQ(monitor->requests_failed(), 0);
  EXPECT_THAT(warnings(log), ElementsAre());
}

TEST(TrackingMonitor, RetryAfterIsCappedByMaxBackoff) {
  int batch_answers = 0;
  FakeHttpServer server([&](const RecordedRequest& r) {
    if (r.path == "/batch" && batch_answers++ == 0) {
      return FakeResponse{429, "", {{"Retry-After", "3600"}}};
    }
    return ok();
  });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());  // max_backoff 2 ms
  train({put_loss()}, monitor, 2, 1);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch", "/batch", "/finish"));
}

TEST(TrackingMonitor, RefusedKeyWarnsOnceSendsNothingMoreAndDropsTheRecords) {
  FakeHttpServer server([](const RecordedRequest&) {
    return FakeResponse{401, std::string(R"({"msg": "invalid key )") + kKey + "\"}"};
  });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  LogCapture log;
  train({put_loss()}, monitor, 3, 2);
  EXPECT_THAT(paths(server), ElementsAre("/open"));
  EXPECT_EQ(monitor->records_dropped(), 6);
  EXPECT_EQ(monitor->requests_sent(), 1);
  EXPECT_EQ(monitor->requests_failed(), 1);
  const auto w = warnings(log);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], HasSubstr("WRN Test: the Test server refused the API key (HTTP 401); check "
                              "TEST_API_KEY. open (POST http://127.0.0.1:"));
  EXPECT_THAT(w[0], HasSubstr("/open) answered: HTTP 401: {\"msg\": \"invalid key <redacted>\"}. "
                              "Nothing more is sent to Test in this run; training goes on"));
  EXPECT_EQ(w[1],
            "WRN Test: 1 of 1 requests failed, 6 of 6 records were dropped (the server "
            "refused the API key); training was not affected");
  EXPECT_FALSE(log.contains(kKey));
}

TEST(TrackingMonitor, RefusedKeyOnABatchStopsEverything) {
  FakeHttpServer server([](const RecordedRequest& r) {
    return r.path == "/batch" ? FakeResponse{403, "forbidden"} : ok();
  });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  auto wait_for_epoch_1 = std::make_shared<ActionCallback>();
  wait_for_epoch_1->before_epoch_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) wait_for_requests(server, "/batch", 1);
  };
  LogCapture log;
  train({put_loss(), wait_for_epoch_1}, monitor, 3, 2);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch"));  // no more batch, no finish
  EXPECT_EQ(monitor->records_dropped(), 6);  // the refused batch and epoch 2's records
  EXPECT_EQ(warnings(log).size(), 2u);
  EXPECT_TRUE(log.contains("the Test server refused the API key (HTTP 403); check TEST_API_KEY"));
}

TEST(TrackingMonitor, DownServerWarnsOnceAndTrainingCompletes) {
  auto monitor = std::make_shared<TestMonitor>(
      FakeHttpServer::unused_url(),
      fast().max_attempts(2).flush_timeout(std::chrono::milliseconds(200)));
  LogCapture log;
  train({put_loss()}, monitor, 3, 2);
  EXPECT_GE(monitor->requests_failed(), 1);
  const auto w = warnings(log);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], HasSubstr("WRN Test: open (POST http://127.0.0.1:"));
  EXPECT_THAT(w[0], HasSubstr("/open) failed after 2 attempts: no answer: Failed to connect"));
  // libcurl's own words: "Couldn't connect" up to 8.x, "Could not connect" in newer releases.
  EXPECT_THAT(w[0], ::testing::AnyOf(HasSubstr("Couldn't connect to server; training goes on"),
                                     HasSubstr("Could not connect to server; training goes on")));
  EXPECT_THAT(w[1], HasSubstr("requests failed, 0 of 6 records were dropped, 6 records were not "
                              "sent within the flush timeout (200 ms; "
                              "TrackingOptions::flush_timeout) and the run's end (FINISHED) was "
                              "not sent; training was not affected"));
  EXPECT_FALSE(log.contains(kKey));
}

TEST(TrackingMonitor, FullQueueDropsAndCounts) {
  // The service never answers the open: every record stays queued.
  FakeHttpServer server([](const RecordedRequest&) { return FakeResponse{200, "", {}, true}; });
  auto monitor = std::make_shared<TestMonitor>(
      server.url(), fast().queue_capacity(3).flush_timeout(std::chrono::milliseconds(100)));
  LogCapture log;
  train({put_loss()}, monitor, 5, 1);
  EXPECT_EQ(monitor->records_queued(), 3);
  EXPECT_EQ(monitor->records_dropped(), 2);
  const auto w = warnings(log);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0],
            "WRN Test: the queue of records to send is full (3 records; "
            "TrackingOptions::queue_capacity): new records are dropped until it drains; training "
            "goes on (the count is logged when training ends)");
  EXPECT_EQ(w[1],
            "WRN Test: 0 of 0 requests failed, 2 of 5 records were dropped, 3 records were not "
            "sent within the flush timeout (100 ms; TrackingOptions::flush_timeout) and the "
            "run's end (FINISHED) was not sent; training was not affected");
}

TEST(TrackingMonitor, HangingServerDoesNotHoldAfterTrainBeyondTheFlushTimeout) {
  FakeHttpServer server([](const RecordedRequest& r) {
    return r.path == "/batch" ? FakeResponse{200, "", {}, true} : ok();
  });
  // Without the flush timeout, after_train would wait for the request's own timeout (an hour).
  auto monitor = std::make_shared<TestMonitor>(
      server.url(), fast()
                        .flush_timeout(std::chrono::milliseconds(100))
                        .http(HttpClientOptions().timeout(std::chrono::hours(1))));
  LogCapture log;
  train({put_loss()}, monitor, 3, 1);
  EXPECT_THAT(paths(server), ElementsAre("/open", "/batch"));
  EXPECT_TRUE(log.contains("3 records were not sent within the flush timeout (100 ms"));
  EXPECT_EQ(monitor->requests_failed(), 0);  // an aborted request is no failure of the service
}

std::string finish_body(const FakeHttpServer& server) {
  const auto requests = server.requests();
  return requests.empty() || requests.back().path != "/finish" ? "(no finish)"
                                                               : requests.back().body;
}

TEST(TrackingMonitor, AFailedTrainingEndsTheRunFailed) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  auto thrower = std::make_shared<ActionCallback>();
  thrower->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) throw std::runtime_error("boom");
  };
  // A monitor whose after_train runs after another callback's after_train threw still sees the
  // training's exception.
  auto failing_after_train = std::make_shared<ActionCallback>();
  failing_after_train->after_train_fn = [](ActionCallback&) {
    throw std::runtime_error("after_train fails too");
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  EXPECT_THROW(trainer.train({put_loss(), thrower, failing_after_train}, {monitor}, 3, 1, 2),
               std::exception);
  EXPECT_EQ(finish_body(server), "FAILED");
  EXPECT_EQ(monitor->status(), TrackingStatus::kFailed);
}

TEST(TrackingMonitor, ASignalEndsTheRunKilled) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) std::raise(SIGTERM);
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(true);
  trainer.train({put_loss(), raiser}, {monitor}, 3, 1, 2);
  EXPECT_EQ(trainer.received_signal(), SIGTERM);
  EXPECT_EQ(finish_body(server), "KILLED");
  EXPECT_EQ(monitor->status(), TrackingStatus::kKilled);
}

// After a stop signal, a scheduler's grace period is short: a server that hangs holds after_train
// for flush_timeout_after_signal, not for the long flush_timeout.
TEST(TrackingMonitor, AfterAStopSignalTheFlushTimeoutIsShort) {
  FakeHttpServer server([](const RecordedRequest& r) {
    return r.path == "/batch" ? FakeResponse{200, "", {}, true} : ok();
  });
  auto monitor = std::make_shared<TestMonitor>(
      server.url(), fast()
                        .flush_timeout(std::chrono::seconds(60))
                        .flush_timeout_after_signal(std::chrono::milliseconds(150))
                        .http(HttpClientOptions().timeout(std::chrono::hours(1))));
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) std::raise(SIGTERM);
  };
  LogCapture log;
  NoOpTrainer trainer;
  trainer.set_handle_signals(true);
  trainer.train({put_loss(), raiser}, {monitor}, 3, 1, 2);
  EXPECT_EQ(trainer.received_signal(), SIGTERM);
  EXPECT_TRUE(
      log.contains("within the flush timeout (150 ms; "
                   "TrackingOptions::flush_timeout_after_signal) and the run's end "
                   "(KILLED) was not sent"));
}

TEST(TrackingMonitor, ANegativeFlushTimeoutAfterSignalIsRefused) {
  EXPECT_THROW(TestMonitor("http://127.0.0.1:1",
                           fast().flush_timeout_after_signal(std::chrono::milliseconds(-1))),
               std::invalid_argument);
}

TEST(TrackingMonitor, AStopRequestEndsTheRunFinished) {
  FakeHttpServer server([](const RecordedRequest&) { return ok(); });
  auto monitor = std::make_shared<TestMonitor>(server.url(), fast());
  auto stopper = std::make_shared<ActionCallback>();
  stopper->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) self.trainer().request_stop();
  };
  train({put_loss(), stopper}, monitor, 3, 2);
  EXPECT_EQ(finish_body(server), "FINISHED");
}

TEST(TrackingMonitor, BadOptionsNameTheOption) {
  auto make = [](TrackingOptions o) { return TestMonitor("http://127.0.0.1:9", std::move(o)); };
  try {
    make(TrackingOptions().queue_capacity(0));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "TrackingMonitor (Test): TrackingOptions::queue_capacity must be > 0, got 0; "
                 "e.g. TrackingOptions().queue_capacity(100000)");
  }
  EXPECT_THROW(make(TrackingOptions().batch_size(0)), std::invalid_argument);
  EXPECT_THROW(make(TrackingOptions().max_attempts(0)), std::invalid_argument);
  EXPECT_THROW(make(TrackingOptions().send_interval(std::chrono::milliseconds(0))),
               std::invalid_argument);
  EXPECT_THROW(make(TrackingOptions().initial_backoff(std::chrono::milliseconds(-1))),
               std::invalid_argument);
  EXPECT_THROW(make(TrackingOptions().flush_timeout(std::chrono::milliseconds(-1))),
               std::invalid_argument);
  try {
    make(TrackingOptions().http(HttpClientOptions().timeout(std::chrono::milliseconds(0))));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("HttpClient: timeout must be > 0"));
  }
}

}  // namespace tracking_monitor_test
}  // namespace trainpack
