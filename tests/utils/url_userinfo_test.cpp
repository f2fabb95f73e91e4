// URLs with user information ("user:password@" before the host), in every form: split_url takes
// them apart and url_for_display quotes them without it (utils/http_client.h); CometMLMonitor,
// which authenticates with its API key, refuses such a URL without quoting its password and takes
// a scheme in any case.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "trainpack/callbacks/comet_ml_monitor.h"
#include "trainpack/utils/http_client.h"

namespace trainpack {
namespace url_userinfo_test {

using ::testing::HasSubstr;

TEST(SplitUrl, TakesTheUserInformationOutOfEveryForm) {
  struct Case {
    std::string url, scheme, user, password, rest;
    bool has_userinfo, at_after_host;
  };
  const std::vector<Case> cases = {
      {"http://h:5000/p", "http", "", "", "h:5000/p", false, false},
      {"http://alice:pw@h:5000/p", "http", "alice", "pw", "h:5000/p", true, false},
      {"HTTPS://alice:pw@h", "https", "alice", "pw", "h", true, false},
      {"hTtP://alice@h", "http", "alice", "", "h", true, false},
      {"http://bob:p%40ss%3Aw%2Fd@h?q", "http", "bob", "p@ss:w/d", "h?q", true, false},
      {"http://a:b@c@h", "http", "a", "b@c", "h", true, false},  // the last '@' ends it
      {"alice:pw@h:5999", "", "alice", "pw", "h:5999", true, false},
      {"h:5999", "", "", "", "h:5999", false, false},
      {"http://alice:S3/cret@h", "http", "", "", "alice:S3/cret@h", false, true},
      {"http://alice:S3?cret@h", "http", "", "", "alice:S3?cret@h", false, true},
      {"http://h/pre@fix", "http", "", "", "h/pre@fix", false, true},
      {"/tmp/a@b", "", "", "", "/tmp/a@b", false, true},
      // Not a scheme (a digit first): the host part ends at the first '/', and the '@' is after.
      {"1http://a:b@h", "", "", "", "1http://a:b@h", false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    const UrlParts p = split_url(c.url);
    EXPECT_EQ(p.scheme, c.scheme);
    EXPECT_EQ(p.user, c.user);
    EXPECT_EQ(p.password, c.password);
    EXPECT_EQ(p.rest, c.rest);
    EXPECT_EQ(p.has_userinfo, c.has_userinfo);
    EXPECT_EQ(p.at_after_host, c.at_after_host);
  }
}

TEST(UrlForDisplay, NeverHoldsWhatPrecedesTheLastAt) {
  const std::map<std::string, std::string> cases = {
      {"http://h:5000/p", "http://h:5000/p"},
      {"http://alice:pw@h:5000/p", "http://***@h:5000/p"},
      {"HTTPS://alice:pw@h", "HTTPS://***@h"},
      {"alice:S3cret@h:5999", "***@h:5999"},
      {"http://alice:S3/cret@h:5999", "http://***@h:5999"},
      {"http://alice:S3?c#r@et@h/x", "http://***@h/x"},
      {"mlruns", "mlruns"},
      {"", ""},
  };
  for (const auto& [url, shown] : cases) EXPECT_EQ(url_for_display(url), shown) << url;
}

TEST(PercentDecode, DecodesTwoHexDigitsAndKeepsTheRest) {
  EXPECT_EQ(percent_decode("a%2Fb%40c%3a"), "a/b@c:");
  EXPECT_EQ(percent_decode("100%"), "100%");
  EXPECT_EQ(percent_decode("%4"), "%4");
  EXPECT_EQ(percent_decode("%zz%41"), "%zzA");
}

// The COMET_* variables are cleared for each test and put back after it.
class CometUrl : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

  static CometMLMonitorOptions options(const std::string& url) {
    return CometMLMonitorOptions().api_key("key-0123").workspace("w").project_name("p").url(url);
  }

  // The message of the construction's std::invalid_argument, or "no error".
  static std::string error(const CometMLMonitorOptions& o) {
    try {
      CometMLMonitor monitor(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  }

  static constexpr const char* kNames[] = {"COMET_API_KEY", "COMET_WORKSPACE", "COMET_PROJECT_NAME",
                                           "COMET_URL_OVERRIDE"};
  std::map<std::string, std::string> saved_;
};

TEST_F(CometUrl, AUrlWithCredentialsIsRefusedWithoutQuotingThem) {
  for (const std::string url :
       {"https://alice:S3cret-1@comet.example.com/api/rest/v2",
        "HTTPS://alice:S3cret-2@comet.example.com/api/rest/v2",
        "https://alice:S3/cret-3@comet.example.com/api/rest/v2",
        "https://tok3n@comet.example.com/api/rest/v2",
        "ftp://alice:S3cret-4@comet.example.com/api/rest/v2", "alice:S3cret-5@comet.example.com"}) {
    const std::string e = error(options(url));
    EXPECT_THAT(e, HasSubstr("CometMLMonitor: url")) << url;
    EXPECT_THAT(e, HasSubstr("***@comet.example.com")) << url;
    EXPECT_EQ(e.find("cret-"), std::string::npos) << e;
    EXPECT_EQ(e.find("tok3n"), std::string::npos) << e;
    EXPECT_EQ(e.find("key-0123"), std::string::npos) << e;
  }
  EXPECT_THAT(error(options("https://alice:S3cret-1@comet.example.com/api/rest/v2")),
              HasSubstr("Comet authenticates with the API key alone"));
  ::setenv("COMET_URL_OVERRIDE", "https://alice:S3cret-6@comet.example.com/clientlib/", 1);
  const std::string e = error(options(""));
  EXPECT_THAT(e, HasSubstr("COMET_URL_OVERRIDE ('https://***@comet.example.com/clientlib/')"));
  EXPECT_EQ(e.find("cret-"), std::string::npos) << e;
}

TEST_F(CometUrl, TheSchemeIsTakenInAnyCase) {
  EXPECT_EQ(CometMLMonitor(options("HTTPS://comet.example.com/api/rest/v2/")).rest_url(),
            "https://comet.example.com/api/rest/v2");
  ::setenv("COMET_URL_OVERRIDE", "Http://comet.lan:8080/clientlib/", 1);
  EXPECT_EQ(CometMLMonitor(options("")).rest_url(), "http://comet.lan:8080/api/rest/v2");
}

}  // namespace url_userinfo_test
}  // namespace trainpack
