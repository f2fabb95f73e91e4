// A small HTTP/1.1 server on 127.0.0.1 for the tests of the tracking monitors: it records every
// request and answers with what a handler returns (the fake Comet and MLflow services are
// handlers: tests/support/fake_comet.h, tests/support/fake_mlflow.h). It serves keep-alive
// connections, one thread per connection, bodies by Content-Length (chunked bodies are refused
// with 411: the client never sends them).
//
//   trainpack::testing::FakeHttpServer server([](const RecordedRequest& r) {
//     return FakeResponse{200, R"({"ok": true})"};
//   });
//   http.send({"GET", server.url() + "/x"});
//   EXPECT_EQ(server.requests().size(), 1u);
//
// Faults: a response with `hang` set is never sent (the connection stays open, silent, until the
// server is destroyed); unused_url() is an address where nothing listens (a server that is down).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trainpack {
namespace testing {

struct RecordedRequest {
  std::string method;  // "GET", "POST"
  std::string target;  // path and query, as sent: "/api/2.0/mlflow/runs/get?run_id=abc"
  std::string path;    // target without the query
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

struct FakeResponse {
  // FakeResponse{429, "", {{"Retry-After", "1"}}}, FakeResponse{200, "", {}, true} (a constructor
  // rather than an aggregate: -Wextra warns about the omitted members of a braced aggregate).
  FakeResponse(int status_ = 200, std::string body_ = "",
               std::vector<std::pair<std::string, std::string>> headers_ = {}, bool hang_ = false)
      : status(status_), body(std::move(body_)), headers(std::move(headers_)), hang(hang_) {}
  int status = 200;
  std::string body;  // sent with Content-Type: application/json
  std::vector<std::pair<std::string, std::string>> headers;  // extra, e.g. {"Retry-After", "1"}
  bool hang = false;                                         // never answer this request
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeResponse(const RecordedRequest&)>;

  // Listens on 127.0.0.1 on a free port and serves on its own threads. The handler runs on a
  // connection's thread, one request at a time (calls are serialised).
  explicit FakeHttpServer(Handler handler);
  ~FakeHttpServer();  // closes the listening socket and every connection, hung ones included
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:<port>"

  void set_handler(Handler handler);
  // Every request received so far, in arrival order (also the hung ones).
  std::vector<RecordedRequest> requests() const;
  // Connections accepted so far.
  int connections() const;

  // "http://127.0.0.1:<port>" for a port that was free a moment ago and has nothing listening.
  static std::string unused_url();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace testing
}  // namespace trainpack
