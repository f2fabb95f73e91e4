#include "trainpack/utils/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace trainpack {

namespace {

// curl_global_init is not thread-safe and must run once per process, before any easy handle.
// It is never undone (curl_global_cleanup at exit could race with clients still alive in other
// static objects).
CURLcode global_init() {
  static std::once_flag once;
  static CURLcode code = CURLE_OK;
  std::call_once(once, [] { code = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return code;
}

size_t write_body(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// Retry-After in its delta-seconds form ("Retry-After: 3"); the HTTP-date form is ignored.
size_t read_header(char* data, size_t size, size_t count, void* user) {
  const size_t n = size * count;
  std::string_view line(data, n);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (size_t i = 0; i < kName.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) {
        match = false;
        break;
      }
    }
    if (match) {
      std::string value(line.substr(kName.size()));
      size_t b = value.find_first_not_of(" \t");
      size_t e = value.find_last_not_of(" \t\r\n");
      if (b != std::string::npos && e != std::string::npos && e >= b) {
        value = value.substr(b, e - b + 1);
        bool digits = !value.empty();
        for (char c : value) digits = digits && std::isdigit(static_cast<unsigned char>(c));
        if (digits && value.size() < 10) {
          static_cast<HttpResponse*>(user)->retry_after_seconds =
              std::strtod(value.c_str(), nullptr);
        }
      }
    }
  }
  return n;
}

int check_abort(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(user)->load() ? 1 : 0;
}

}  // namespace

std::string HttpResponse::describe() const {
  if (status == 0) return "no answer: " + (error.empty() ? std::string("unknown error") : error);
  if (body.empty()) return fmt::format("HTTP {}", status);
  return fmt::format("HTTP {}: {}", status, body.substr(0, 200));
}

// The easy handle runs inside a multi handle of its own, which keeps the connection cache between
// requests (keep-alive) and lets send() wake every few milliseconds to look at the abort flag: an
// abort ends a request that is waiting on a silent server at once, not at the next progress call.
struct HttpClient::Impl {
  CURL* curl = nullptr;
  CURLM* multi = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  ~Impl() {
    if (curl != nullptr) curl_easy_cleanup(curl);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }
};

namespace {
constexpr int kAbortPollMs = 20;  // how often a waiting send() looks at the abort flag
}  // namespace

HttpClient::HttpClient(HttpClientOptions options) : options_(options) {
  if (options_.connect_timeout().count() <= 0) {
    throw std::invalid_argument(
        fmt::format("HttpClient: connect_timeout must be > 0 ms, got {} ms; set "
                    "HttpClientOptions().connect_timeout(std::chrono::seconds(5))",
                    options_.connect_timeout().count()));
  }
  if (options_.timeout().count() <= 0) {
    throw std::invalid_argument(
        fmt::format("HttpClient: timeout must be > 0 ms, got {} ms; set "
                    "HttpClientOptions().timeout(std::chrono::seconds(15))",
                    options_.timeout().count()));
  }
  const CURLcode init = global_init();
  if (init != CURLE_OK) {
    throw std::runtime_error(
        fmt::format("HttpClient: libcurl could not be initialised: {}", curl_easy_strerror(init)));
  }
  impl_ = std::make_unique<Impl>();
  impl_->curl = curl_easy_init();
  impl_->multi = curl_multi_init();
  if (impl_->curl == nullptr || impl_->multi == nullptr) {
    throw std::runtime_error("HttpClient: libcurl could not create a handle (curl_easy_init)");
  }
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::send(const HttpRequest& request) {
  HttpResponse response;
  if (aborted_.load()) {
    response.error = "aborted";
    return response;
  }
  CURL* curl = impl_->curl;
  // Only the options go; the open connection stays in the multi handle's cache (keep-alive).
  curl_easy_reset(curl);
  impl_->error[0] = '\0';
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, impl_->error);
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  // Several threads: no SIGALRM-based DNS timeouts (libcurl would otherwise use signals).
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout().count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout().count()));
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!options_.ca_file().empty())
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file().c_str());
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, options_.verify_tls() ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, options_.verify_tls() ? 2L : 0L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &write_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &read_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &check_abort);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &aborted_);
  if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (!request.body.empty()) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    }
  }
  curl_slist* headers = nullptr;
  // No "Expect: 100-continue" round trip for larger bodies.
  headers = curl_slist_append(headers, "Expect:");
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  CURLcode code = CURLE_OK;
  CURLMcode mcode = curl_multi_add_handle(impl_->multi, curl);
  bool aborted = false;
  if (mcode == CURLM_OK) {
    int running = 1;
    while (true) {
      mcode = curl_multi_perform(impl_->multi, &running);
      if (mcode != CURLM_OK || running == 0) break;
      if (aborted_.load()) {
        aborted = true;
        break;
      }
      mcode = curl_multi_poll(impl_->multi, nullptr, 0, kAbortPollMs, nullptr);
      if (mcode != CURLM_OK) break;
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(impl_->multi, &left)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == curl) code = msg->data.result;
    }
    curl_multi_remove_handle(impl_->multi, curl);
  }
  if (mcode != CURLM_OK && code == CURLE_OK && !aborted) {
    response.error = curl_multi_strerror(mcode);
    code = CURLE_FAILED_INIT;
  }
  curl_slist_free_all(headers);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  if (aborted) {
    response = HttpResponse();
    response.error = "aborted";
  } else if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    if (response.status == 0) response.error = "no HTTP status in the answer";
  } else {
    response.status = 0;
    response.body.clear();
    response.retry_after_seconds.reset();
    if (code == CURLE_ABORTED_BY_CALLBACK || aborted_.load()) {
      response.error = "aborted";
    } else if (response.error.empty()) {
      // libcurl's messages name the host and port at most, never a header: "Couldn't connect to
      // server" inside "Failed to connect to 127.0.0.1 port 9 after 0 ms: Couldn't connect to
      // server", "Timeout was reached: Operation timed out after 200 milliseconds with 0 bytes
      // received".
      response.certificate_refused =
          code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE;
      const std::string what = curl_easy_strerror(code);
      const std::string detail = impl_->error;
      if (detail.empty()) {
        response.error = what;
      } else if (detail.find(what) != std::string::npos) {
        response.error = detail;
      } else {
        response.error = what + ": " + detail;
      }
    }
  }
  return response;
}

std::string redact(std::string text, const std::string& secret) {
  if (secret.empty()) return text;
  static const std::string kRedacted = "<redacted>";
  size_t pos = 0;
  while ((pos = text.find(secret, pos)) != std::string::npos) {
    text.replace(pos, secret.size(), kRedacted);
    pos += kRedacted.size();
  }
  return text;
}

std::string url_encode(const std::string& value) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (unsigned char c : value) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string percent_decode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

namespace {

// Where the host part of `url` starts: after "scheme://" (RFC 3986's scheme: a letter, then
// letters, digits, '+', '-', '.'), else at 0. `scheme` gets the scheme in lower case, or "".
size_t host_start(const std::string& url, std::string* scheme) {
  const size_t sep = url.find("://");
  if (sep == std::string::npos || sep == 0 || !std::isalpha(static_cast<unsigned char>(url[0]))) {
    return 0;
  }
  std::string lower;
  for (size_t i = 0; i < sep; ++i) {
    const auto c = static_cast<unsigned char>(url[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return 0;
    lower += static_cast<char>(std::tolower(c));
  }
  if (scheme != nullptr) *scheme = lower;
  return sep + 3;
}

}  // namespace

UrlParts split_url(const std::string& url) {
  UrlParts parts;
  const size_t start = host_start(url, &parts.scheme);
  size_t host_end = url.find_first_of("/?#", start);
  if (host_end == std::string::npos) host_end = url.size();
  const size_t at = host_end > start ? url.rfind('@', host_end - 1) : std::string::npos;
  if (at != std::string::npos && at >= start) {
    parts.has_userinfo = true;
    const std::string userinfo = url.substr(start, at - start);
    const size_t colon = userinfo.find(':');
    parts.user = percent_decode(userinfo.substr(0, colon));
    if (colon != std::string::npos) parts.password = percent_decode(userinfo.substr(colon + 1));
    parts.rest = url.substr(at + 1);
  } else {
    parts.rest = url.substr(start);
  }
  parts.at_after_host = url.find('@', host_end) != std::string::npos;
  return parts;
}

std::string url_for_display(const std::string& url) {
  const size_t start = host_start(url, nullptr);
  const size_t at = url.rfind('@');
  if (at == std::string::npos || at < start) return url;
  return url.substr(0, start) + "***@" + url.substr(at + 1);
}

}  // namespace trainpack
