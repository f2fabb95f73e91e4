// HttpClient: HTTP requests over libcurl for the monitors that talk to a tracking service
// (CometMLMonitor, MLflowMonitor). One client keeps one connection open between requests
// (keep-alive) and is used by one thread at a time; abort() may be called from any thread.
// send() never throws for what the network or the server does: a refused connection, a timeout
// or an answer of 401 or 500 are all a response (status 0 and `error` for no answer). Plain http
// and https (libcurl's OpenSSL build, the system's CA certificates).
//
// Secrets: no response or error message holds the request's headers (where an API key goes);
// callers redact the key from bodies they log (redact), take a URL's user information out before
// they send to it or quote it (split_url), and quote a URL they refuse through url_for_display.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

namespace trainpack {

struct HttpRequest {
  std::string method = "GET";  // "GET" or "POST"
  std::string url;             // absolute: http://host:port/path?query
  // Sent as they are, e.g. {"Authorization", "<key>"}, {"Content-Type", "application/json"}.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // POST only
};

struct HttpResponse {
  // The HTTP status, or 0 when no answer arrived (then `error` says why).
  long status = 0;
  std::string body;
  // Retry-After of the answer, in seconds, when it had one in the delta-seconds form.
  std::optional<double> retry_after_seconds;
  // Why no answer arrived (libcurl's message: "Couldn't connect to server", "Timeout was
  // reached", ...) or "aborted"; "" when the server answered.
  std::string error;
  // No answer because the server's TLS certificate was refused (not signed by a CA this client
  // trusts, expired, or for another host): sending again cannot help.
  bool certificate_refused = false;

  bool ok() const { return status >= 200 && status < 300; }
  // Worth sending again: no answer (but a refused certificate), 429 or 5xx.
  bool retryable() const {
    return (status == 0 && !certificate_refused) || status == 429 || status >= 500;
  }
  // "HTTP 401: <first 200 characters of the body>" ("HTTP 401" for an empty body) or
  // "no answer: <error>".
  std::string describe() const;
};

struct HttpClientOptions {
  // Time to connect (TCP and TLS). > 0.
  TORCH_ARG(std::chrono::milliseconds, connect_timeout) = std::chrono::seconds(5);
  // Time for the whole request, connection included. > 0.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(15);
  // https: a PEM file of the CA certificates to trust instead of the system's (a server whose
  // certificate a private CA signed). "": the system's store (/etc/ssl/certs).
  TORCH_ARG(std::string, ca_file);
  // https: false skips checking the server's certificate and name (a test server; never where
  // the traffic matters).
  TORCH_ARG(bool, verify_tls) = true;
};

class HttpClient {
 public:
  // Throws std::invalid_argument naming HttpClient and the option for a timeout <= 0, and
  // std::runtime_error when libcurl cannot be initialised.
  explicit HttpClient(HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` and waits for the whole answer (at most options().timeout()).
  HttpResponse send(const HttpRequest& request);

  // Makes the send in progress (on another thread) return at once with error "aborted", and every
  // later send too, until reset_abort(). Thread-safe; never blocks.
  void abort() { aborted_.store(true); }
  void reset_abort() { aborted_.store(false); }
  bool aborted() const { return aborted_.load(); }

  const HttpClientOptions& options() const { return options_; }

 private:
  struct Impl;
  HttpClientOptions options_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Impl> impl_;
};

// `text` with every occurrence of `secret` replaced by "<redacted>" (unchanged when `secret` is
// empty). Used on every message that might quote a request or an answer.
std::string redact(std::string text, const std::string& secret);

// `value` percent-encoded for a URL's query (RFC 3986's unreserved characters are kept).
std::string url_encode(const std::string& value);

// `text` with every "%XX" (two hex digits) replaced by its byte; a '%' without two hex digits
// after it is kept.
std::string percent_decode(const std::string& text);

// A URL taken apart for its user information ("user:password@" before the host), which must
// leave the URL before anything quotes it. The URL's forms: "scheme://[userinfo@]host[:port]..."
// with a scheme in any case, or "[userinfo@]host[:port]..." without one.
struct UrlParts {
  // The scheme in lower case ("http"), "" when the URL has no "scheme://".
  std::string scheme;
  // Whether there is an '@' in the host part (user information, perhaps empty).
  bool has_userinfo = false;
  // Percent-decoded; "" when absent.
  std::string user;
  std::string password;
  // What follows the user information: "host[:port][/path][?query][#fragment]".
  std::string rest;
  // Whether an '@' follows the host part (in the path, query or fragment): ambiguous, mostly a
  // password holding an unencoded '/', '?' or '#'. A caller refuses it, quoting url_for_display.
  bool at_after_host = false;
};
UrlParts split_url(const std::string& url);

// `url` safe to quote in a message, whatever its form: from the host part's start up to the last
// '@' of the whole URL is replaced by "***@" ("http://alice:pw@h:5000/x" -> "http://***@h:5000/x",
// "alice:pw@h" -> "***@h"). A URL without '@' is returned as it is.
std::string url_for_display(const std::string& url);

}  // namespace trainpack
