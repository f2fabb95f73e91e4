// HttpClient against the tests' FakeHttpServer on 127.0.0.1; redact and url_encode.
#include "trainpack/utils/http_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/fake_http_server.h"

namespace trainpack {
namespace http_client_test {

using testing::FakeHttpServer;
using testing::FakeResponse;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RecordedRequest;

HttpClientOptions short_timeouts() {
  return HttpClientOptions()
      .connect_timeout(std::chrono::seconds(2))
      .timeout(std::chrono::milliseconds(300));
}

TEST(HttpClient, PostArrivesExactlyAndTheAnswerIsReturned) {
  FakeHttpServer server([](const RecordedRequest&) {
    return FakeResponse{201, R"({"run_id": "abc"})", {{"X-Extra", "1"}}};
  });
  HttpClient http;
  const std::string body = R"({"name": "exp", "value": 0.5})";
  const HttpResponse r =
      http.send({"POST",
                 server.url() + "/api/2.0/mlflow/runs/create?x=1&y=a%20b",
                 {{"Content-Type", "application/json"}, {"Authorization", "Bearer tok"}},
                 body});
  EXPECT_EQ(r.status, 201);
  EXPECT_EQ(r.body, R"({"run_id": "abc"})");
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.retryable());
  EXPECT_EQ(r.error, "");
  EXPECT_FALSE(r.retry_after_seconds.has_value());
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const RecordedRequest& got = requests[0];
  EXPECT_EQ(got.method, "POST");
  EXPECT_EQ(got.target, "/api/2.0/mlflow/runs/create?x=1&y=a%20b");
  EXPECT_EQ(got.path, "/api/2.0/mlflow/runs/create");
  EXPECT_EQ(got.query.at("x"), "1");
  EXPECT_EQ(got.query.at("y"), "a b");
  EXPECT_EQ(got.headers.at("content-type"), "application/json");
  EXPECT_EQ(got.headers.at("authorization"), "Bearer tok");
  EXPECT_EQ(got.headers.at("content-length"), std::to_string(body.size()));
  EXPECT_EQ(got.headers.count("expect"), 0u);  // no 100-continue round trip
  EXPECT_EQ(got.body, body);
}

TEST(HttpClient, GetHasNoBody) {
  FakeHttpServer server([](const RecordedRequest&) { return FakeResponse{200, "{}"}; });
  HttpClient http;
  const HttpResponse r =
      http.send({"GET", server.url() + "/write/experiment/set-status?k=v", {}, ""});
  EXPECT_EQ(r.status, 200);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].target, "/write/experiment/set-status?k=v");
  EXPECT_EQ(requests[0].body, "");
}

TEST(HttpClient, LargeBodyArrivesWhole) {
  FakeHttpServer server([](const RecordedRequest& r) {
    return FakeResponse{200, std::to_string(r.body.size())};
  });
  HttpClient http;
  const std::string body(3 * 1024 * 1024 + 7, 'x');
  const HttpResponse r = http.send({"POST", server.url() + "/big", {}, body});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, std::to_string(body.size()));
  EXPECT_EQ(server.requests().at(0).body, body);
}

TEST(HttpClient, ErrorStatusIsAResponse) {
  FakeHttpServer server([](const RecordedRequest&) {
    return FakeResponse{401, R"({"error_code": "UNAUTHENTICATED"})"};
  });
  HttpClient http;
  const HttpResponse r = http.send({"GET", server.url() + "/x", {}, ""});
  EXPECT_EQ(r.status, 401);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.retryable());
  EXPECT_EQ(r.describe(), R"(HTTP 401: {"error_code": "UNAUTHENTICATED"})");
}

TEST(HttpClient, RetryAfterIsParsed) {
  FakeHttpServer server([](const RecordedRequest& r) {
    if (r.path == "/date") {
      return FakeResponse{429, "", {{"Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"}}};
    }
    return FakeResponse{429, "slow down", {{"retry-after", " 7 "}}};
  });
  HttpClient http;
  HttpResponse r = http.send({"POST", server.url() + "/x", {}, "{}"});
  EXPECT_EQ(r.status, 429);
  EXPECT_TRUE(r.retryable());
  ASSERT_TRUE(r.retry_after_seconds.has_value());
  EXPECT_EQ(*r.retry_after_seconds, 7.0);
  r = http.send({"POST", server.url() + "/date", {}, "{}"});  // the date form is not used
  EXPECT_EQ(r.status, 429);
  EXPECT_FALSE(r.retry_after_seconds.has_value());
  EXPECT_EQ(r.describe(), "HTTP 429");
}

TEST(HttpClient, HangingServerTimesOut) {
  FakeHttpServer server([](const RecordedRequest&) { return FakeResponse{200, "", {}, true}; });
  HttpClient http(short_timeouts());
  const HttpResponse r = http.send({"POST", server.url() + "/x", {}, "{}"});
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.retryable());
  EXPECT_THAT(r.error, HasSubstr("Timeout was reached"));
  EXPECT_EQ(r.describe(), "no answer: " + r.error);
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(HttpClient, DownServerCannotConnect) {
  HttpClient http(short_timeouts());
  const std::string url = FakeHttpServer::unused_url();
  const HttpResponse r = http.send({"GET", url + "/x", {{"Authorization", "KEY123"}}, ""});
  EXPECT_EQ(r.status, 0);
  // libcurl's own words: "Couldn't connect" up to 8.x, "Could not connect" in newer releases.
  EXPECT_THAT(r.error,
              ::testing::AnyOf(HasSubstr("Couldn't connect"), HasSubstr("Could not connect")));
  EXPECT_THAT(r.describe(), Not(HasSubstr("KEY123")));
}

TEST(HttpClient, AbortFromAnotherThreadEndsAHungRequest) {
  FakeHttpServer server([](const RecordedRequest&) { return FakeResponse{200, "", {}, true}; });
  HttpClient http(HttpClientOptions().timeout(std::chrono::seconds(120)));
  auto result = std::async(std::launch::async, [&] {
    return http.send({"POST", server.url() + "/x", {}, "{}"});
  });
  while (server.requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http.abort();
  const HttpResponse r = result.get();  // would wait 120 s without the abort
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "aborted");
  EXPECT_TRUE(http.aborted());
  // Every later send is aborted too, until reset_abort().
  server.set_handler([](const RecordedRequest&) { return FakeResponse{200, "{}"}; });
  EXPECT_EQ(http.send({"GET", server.url() + "/y", {}, ""}).error, "aborted");
  EXPECT_EQ(server.requests().size(), 1u);
  http.reset_abort();
  EXPECT_EQ(http.send({"GET", server.url() + "/y", {}, ""}).status, 200);
}

TEST(HttpClient, KeepAliveReusesOneConnection) {
  FakeHttpServer server([](const RecordedRequest&) { return FakeResponse{200, "{}"}; });
  HttpClient http;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(http.send({i % 2 ? "GET" : "POST", server.url() + "/x", {}, "{}"}).status, 200);
  }
  EXPECT_EQ(server.requests().size(), 5u);
  EXPECT_EQ(server.connections(), 1);
}

TEST(HttpClient, BadOptionsNameTheOption) {
  try {
    HttpClient http(HttpClientOptions().timeout(std::chrono::milliseconds(0)));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("HttpClient"));
    EXPECT_THAT(e.what(), HasSubstr("timeout must be > 0"));
  }
  try {
    HttpClient http(HttpClientOptions().connect_timeout(std::chrono::milliseconds(-1)));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("HttpClient: connect_timeout must be > 0"));
  }
}

TEST(Redact, ReplacesEveryOccurrence) {
  EXPECT_EQ(redact("key=abc, again abc.", "abc"), "key=<redacted>, again <redacted>.");
  EXPECT_EQ(redact("nothing here", "abc"), "nothing here");
  EXPECT_EQ(redact("abc", ""), "abc");
  EXPECT_EQ(redact("aaaa", "aa"), "<redacted><redacted>");
}

TEST(UrlEncode, KeepsUnreservedAndEncodesTheRest) {
  EXPECT_EQ(url_encode("AZaz09-_.~"), "AZaz09-_.~");
  EXPECT_EQ(url_encode("a b/c?d=e&f+g"), "a%20b%2Fc%3Fd%3De%26f%2Bg");
  EXPECT_EQ(url_encode("\xc3\xa9"), "%C3%A9");
  EXPECT_EQ(url_encode(""), "");
}

}  // namespace http_client_test
}  // namespace trainpack
