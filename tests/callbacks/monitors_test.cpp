// Monitors (core/monitor_base.h): the history of put_scalar and get_latest; put_scalar /
// put_image / put_summary / put_event: what every monitor receives, in which order, and the shape
// and tag rules; the validators.
#include <ATen/ATen.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/callbacks/monitor.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace monitors_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const char* kind_name(SummaryValue::Kind kind) {
  switch (kind) {
    case SummaryValue::Kind::kScalar:
      return "scalar";
    case SummaryValue::Kind::kImage:
      return "image";
    case SummaryValue::Kind::kHistogram:
      return "histogram";
    case SummaryValue::Kind::kText:
      return "text";
  }
  return "?";
}

// Records every call as one line in a log shared by several recorders, prefixed by its tag.
class Recorder : public MonitorBase {
 public:
  Recorder(std::shared_ptr<std::vector<std::string>> log, std::string tag)
      : log_(std::move(log)), tag_(std::move(tag)) {}

  void process_scalar(const std::string& name, double value) override {
    log_->push_back(fmt::format("{} scalar {}={}", tag_, name, value));
  }
  void process_image(const std::string& name, const at::Tensor& image) override {
    images.push_back(image);
    log_->push_back(fmt::format("{} image {} [{}]", tag_, name,
                                fmt::join(image.sizes().begin(), image.sizes().end(), ", ")));
  }
  void process_summary(const Summary& summary) override {
    summaries.push_back(summary);
    std::vector<std::string> parts;
    for (const auto& v : summary.values) {
      parts.push_back(fmt::format("{}:{}", kind_name(v.kind), v.tag));
    }
    log_->push_back(fmt::format("{} summary {}", tag_, fmt::join(parts, " ")));
  }
  void process_event(const Event& event) override {
    events.push_back(event);
    log_->push_back(fmt::format("{} event step={}", tag_, event.step));
  }

  std::vector<at::Tensor> images;
  std::vector<Summary> summaries;
  std::vector<Event> events;

 private:
  std::shared_ptr<std::vector<std::string>> log_;
  std::string tag_;
};

struct Fixture {
  std::shared_ptr<std::vector<std::string>> log = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<Recorder> a = std::make_shared<Recorder>(log, "A");
  std::shared_ptr<Recorder> b = std::make_shared<Recorder>(log, "B");
  Monitors monitors{{a, b}};
};

std::vector<int64_t> shape_of(const at::Tensor& t) { return t.sizes().vec(); }

// ---- history, get_latest, construction ----

// Records every scalar it receives.
class ScalarRecorder : public MonitorBase {
 public:
  std::vector<std::pair<std::string, double>> seen;
  void process_scalar(const std::string& name, double value) override {
    seen.emplace_back(name, value);
  }
};

// Puts "loss" = 1 / global_step after every step.
class PutsEveryStep : public Callback {
 protected:
  void _trigger_step() override {
    trainer().monitors().put_scalar("loss", 1.0 / static_cast<double>(global_step()));
  }
};

TEST(Monitors, RecordHistoryWithTheGlobalStepAtPutTime) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto rec = std::make_shared<ScalarRecorder>();
  trainer.train({std::make_shared<PutsEveryStep>()}, {rec}, 2, 1, 2);
  const Monitors::History expected = {{1, 1.0}, {2, 0.5}, {3, 1.0 / 3}, {4, 0.25}};
  EXPECT_EQ(trainer.monitors().get_history("loss"), expected);
  EXPECT_DOUBLE_EQ(trainer.monitors().get_latest("loss"), 0.25);
  EXPECT_EQ(rec->seen.size(), 4u);
  EXPECT_EQ(rec->seen.front(), (std::pair<std::string, double>{"loss", 1.0}));
}

TEST(Monitors, UnknownNamesHaveAnEmptyHistoryAndNoLatest) {
  Monitors monitors({});
  EXPECT_TRUE(monitors.get_history("nothing").empty());
  try {
    monitors.get_latest("nothing");
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "No available data for the key: nothing; the names with data: none yet");
  }
}

TEST(Monitors, TheErrorForAMisspeltNameListsTheNamesWithData) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto validation = std::make_shared<testing::ActionCallback>();
  validation->trigger_epoch_fn = [](testing::ActionCallback& cb) {
    cb.trainer().monitors().put_scalar("val-mae", 0.5);
  };
  trainer.train({std::make_shared<PutsEveryStep>(), validation}, {}, 2, 1, 1);
  try {
    trainer.monitors().get_latest("val-mea");
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(),
                 "No available data for the key: val-mea; the names with data: loss, val-mae");
  }
}

TEST(Monitors, AreNotChiefOnly) {
  EXPECT_FALSE(Monitors({}).chief_only());
  EXPECT_FALSE(ScalarRecorder().chief_only());
  EXPECT_EQ(NoOpMonitor("JSONWriter").name(), "NoOpMonitor(JSONWriter)");
  EXPECT_EQ(NoOpMonitor().name(), "NoOpMonitor");
}

TEST(Monitors, ANullMonitorIsAnError) { EXPECT_THROW(Monitors({nullptr}), std::invalid_argument); }

// ---- put_scalar ----

TEST(MonitorsPutScalar, ProcessScalarOnAllThenASummaryOfOneScalarOnAll) {
  Fixture f;
  f.monitors.put_scalar("cost", 0.5);
  EXPECT_THAT(*f.log, ElementsAre("A scalar cost=0.5", "B scalar cost=0.5", "A summary scalar:cost",
                                  "B summary scalar:cost"));
  ASSERT_EQ(f.a->summaries.size(), 1u);
  ASSERT_EQ(f.a->summaries[0].values.size(), 1u);
  EXPECT_EQ(f.a->summaries[0].values[0].tag, "cost");
  EXPECT_EQ(f.a->summaries[0].values[0].scalar, 0.5);
  const Monitors::History expected = {{0, 0.5}};
  EXPECT_EQ(f.monitors.get_history("cost"), expected);
}

// A put from inside a monitor's process_summary: every monitor still gets the outer summary
// (put_scalar reuses one summary object from put to put).
TEST(MonitorsPutScalar, APutFromInsideProcessSummaryLeavesTheOuterSummaryIntact) {
  class PutsAgain : public MonitorBase {
   public:
    Monitors* monitors = nullptr;
    void process_summary(const Summary& summary) override {
      if (summary.values.at(0).tag == "outer") monitors->put_scalar("inner", 2.0);
    }
  };
  auto log = std::make_shared<std::vector<std::string>>();
  auto again = std::make_shared<PutsAgain>();
  auto b = std::make_shared<Recorder>(log, "B");
  Monitors monitors({again, b});
  again->monitors = &monitors;
  monitors.put_scalar("outer", 1.0);
  ASSERT_EQ(b->summaries.size(), 2u);
  EXPECT_EQ(b->summaries[0].values.at(0).tag, "inner");
  EXPECT_EQ(b->summaries[0].values.at(0).scalar, 2.0);
  EXPECT_EQ(b->summaries[1].values.at(0).tag, "outer");
  EXPECT_EQ(b->summaries[1].values.at(0).scalar, 1.0);
  monitors.put_scalar("next", 3.0);  // the reused summary is free again
  ASSERT_EQ(b->summaries.size(), 3u);
  EXPECT_EQ(b->summaries[2].values.at(0).tag, "next");
}

TEST(MonitorsPutScalar, TheHistoryOfAlternatingNamesKeepsEachNameApart) {
  Fixture f;
  f.monitors.put_scalar("a", 1.0);
  f.monitors.put_scalar("b", 2.0);
  f.monitors.put_scalar("a", 3.0);
  f.monitors.put_scalar("a", 4.0);
  f.monitors.put_scalar("b", 5.0);
  EXPECT_EQ(f.monitors.get_history("a"), (Monitors::History{{0, 1.0}, {0, 3.0}, {0, 4.0}}));
  EXPECT_EQ(f.monitors.get_history("b"), (Monitors::History{{0, 2.0}, {0, 5.0}}));
  EXPECT_EQ(f.monitors.get_latest("a"), 4.0);
  EXPECT_EQ(f.monitors.names(), (std::vector<std::string>{"a", "b"}));
}

// ---- put_image: shapes ----

TEST(MonitorsPutImage, TwoDimensionsAreOneGreyImage) {
  Fixture f;
  f.monitors.put_image("img", at::zeros({5, 7}));
  ASSERT_EQ(f.a->images.size(), 1u);
  EXPECT_EQ(shape_of(f.a->images[0]), (std::vector<int64_t>{1, 5, 7, 1}));
}

TEST(MonitorsPutImage, ThreeDimensionsEndingIn1Or3Or4AreOneHwcImage) {
  for (int64_t c : {1, 3, 4}) {
    Fixture f;
    f.monitors.put_image("img", at::zeros({5, 7, c}));
    ASSERT_EQ(f.a->images.size(), 1u);
    EXPECT_EQ(shape_of(f.a->images[0]), (std::vector<int64_t>{1, 5, 7, c})) << "c=" << c;
  }
}

TEST(MonitorsPutImage, OtherThreeDimensionsAreABatchOfGreyImages) {
  for (int64_t last : {2, 5, 28}) {
    Fixture f;
    f.monitors.put_image("img", at::zeros({3, 6, last}));
    ASSERT_EQ(f.a->images.size(), 1u);
    EXPECT_EQ(shape_of(f.a->images[0]), (std::vector<int64_t>{3, 6, last, 1})) << last;
  }
}

TEST(MonitorsPutImage, FourDimensionsAreNhwcUnchanged) {
  Fixture f;
  f.monitors.put_image("img", at::zeros({2, 5, 7, 3}));
  ASSERT_EQ(f.a->images.size(), 1u);
  EXPECT_EQ(shape_of(f.a->images[0]), (std::vector<int64_t>{2, 5, 7, 3}));
}

TEST(MonitorsPutImage, OtherRanksAreRefusedWithTheShape) {
  Fixture f;
  try {
    f.monitors.put_image("img", at::zeros({5}));
    FAIL() << "1-D accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Monitors::put_image('img'): array of shape [5] is not an image");
  }
  try {
    f.monitors.put_image("vol", at::zeros({1, 2, 3, 4, 5}));
    FAIL() << "5-D accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Monitors::put_image('vol'): array of shape [1, 2, 3, 4, 5] is not an image");
  }
  try {
    f.monitors.put_image("s", at::zeros({}));
    FAIL() << "0-D accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Monitors::put_image('s'): array of shape [] is not an image");
  }
  EXPECT_THROW(f.monitors.put_image("u", at::Tensor()), std::invalid_argument);
  EXPECT_TRUE(f.log->empty());  // nothing reached the monitors
}

// ---- put_image: values ----

TEST(MonitorsPutImage, MonitorsGetContiguousCpuUint8InTheSameLayout) {
  Fixture f;
  // A transposed (non-contiguous) HWC image of 2x3 RGB pixels.
  const at::Tensor chw = at::arange(18, at::kFloat).reshape({3, 2, 3});
  const at::Tensor hwc = chw.permute({1, 2, 0});
  ASSERT_FALSE(hwc.is_contiguous());
  f.monitors.put_image("img", hwc);
  const at::Tensor got = f.a->images.at(0);
  EXPECT_EQ(got.scalar_type(), at::kByte);
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_TRUE(got.device().is_cpu());
  EXPECT_TRUE(at::equal(got[0], hwc.to(at::kByte)));
  EXPECT_EQ(got[0][1][2][0].item<int>(), 5);  // chw[0][1][2]
  EXPECT_EQ(got[0][1][2][2].item<int>(), 17);
}

TEST(MonitorsPutImage, CastsToUint8WithoutClipping) {
  Fixture f;
  // Floats in range are truncated toward zero, as numpy's astype('uint8').
  f.monitors.put_image("f", at::tensor({0.0, 0.9, 1.7, 127.5, 254.99, 255.0}).reshape({2, 3}));
  EXPECT_TRUE(at::equal(f.a->images.at(0).flatten(),
                        at::tensor({0, 0, 1, 127, 254, 255}, at::kInt).to(at::kByte)))
      << f.a->images.at(0);
  // Integers out of range wrap modulo 256 (no clipping); so do floats (undefined in numpy).
  f.monitors.put_image("i", at::tensor({-1, 256, 300, 511}, at::kInt).reshape({2, 2}));
  EXPECT_TRUE(at::equal(f.a->images.at(1).flatten(),
                        at::tensor({255, 0, 44, 255}, at::kInt).to(at::kByte)));
  f.monitors.put_image("g", at::tensor({-1.0, 256.0, 300.5}).reshape({1, 3}));
  EXPECT_TRUE(
      at::equal(f.a->images.at(2).flatten(), at::tensor({255, 0, 44}, at::kInt).to(at::kByte)));
  // Booleans are 0 and 1.
  f.monitors.put_image("b", at::tensor({1, 0}, at::kInt).to(at::kBool).reshape({1, 2}));
  EXPECT_TRUE(at::equal(f.a->images.at(3).flatten(), at::tensor({1, 0}, at::kInt).to(at::kByte)));
}

// ---- put_image: the summary ----

uint32_t be32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[at + 3]));
}

const std::string kPngSignature("\x89PNG\r\n\x1a\n", 8);

TEST(MonitorsPutImage, OneImageIsTaggedWithTheNameAndEncodedAsPng) {
  Fixture f;
  f.monitors.put_image("sample", at::full({5, 7, 3}, 200, at::kByte));
  EXPECT_THAT(*f.log, ElementsAre("A image sample [1, 5, 7, 3]", "B image sample [1, 5, 7, 3]",
                                  "A summary image:sample", "B summary image:sample"));
  const SummaryValue& v = f.b->summaries.at(0).values.at(0);
  EXPECT_EQ(v.kind, SummaryValue::Kind::kImage);
  EXPECT_EQ(v.image.height, 5);
  EXPECT_EQ(v.image.width, 7);
  EXPECT_EQ(v.image.colorspace, 3);
  const std::string& png = v.image.encoded_png;
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), kPngSignature);
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 7u);                           // width
  EXPECT_EQ(be32(png, 20), 5u);                           // height
  EXPECT_EQ(static_cast<int>(png[24]), 8);                // bit depth
  EXPECT_EQ(static_cast<int>(png[25]), 2);                // colour type: RGB
  EXPECT_TRUE(f.monitors.get_history("sample").empty());  // images are not scalars
}

TEST(MonitorsPutImage, ABatchIsTaggedWithEachIndex) {
  Fixture f;
  f.monitors.put_image("gen", at::zeros({2, 4, 6}));  // NHW: two grey 4x6 images
  EXPECT_EQ(f.log->back(), "B summary image:gen/0 image:gen/1");
  for (const SummaryValue& v : f.a->summaries.at(0).values) {
    EXPECT_EQ(v.image.height, 4);
    EXPECT_EQ(v.image.width, 6);
    EXPECT_EQ(v.image.colorspace, 1);
    EXPECT_EQ(v.image.encoded_png.substr(0, 8), kPngSignature);
    EXPECT_EQ(static_cast<int>(v.image.encoded_png[25]), 0);  // grey
  }
}

TEST(MonitorsPutImage, ColourTypesFollowTheChannels) {
  const std::pair<int64_t, int> cases[] = {{1, 0}, {2, 4}, {3, 2}, {4, 6}};
  for (const auto& [c, colour_type] : cases) {
    Fixture f;
    f.monitors.put_image("img", at::zeros({1, 3, 3, c}));
    const SummaryValue& v = f.a->summaries.at(0).values.at(0);
    EXPECT_EQ(v.image.colorspace, c);
    EXPECT_EQ(static_cast<int>(v.image.encoded_png.at(25)), colour_type) << "c=" << c;
  }
}

TEST(MonitorsPutImage, ImagesThatCannotBeEncodedAreSkippedWithAWarning) {
  Fixture f;
  testing::LogCapture capture;
  f.monitors.put_image("multi", at::zeros({2, 3, 3, 5}));  // 5 channels: no PNG colour type
  EXPECT_EQ(f.a->images.size(), 1u);                       // process_image still gets it
  EXPECT_THAT(*f.log, ElementsAre("A image multi [2, 3, 3, 5]", "B image multi [2, 3, 3, 5]",
                                  "A summary ", "B summary "));
  ASSERT_EQ(capture.lines().size(), 2u);
  EXPECT_THAT(capture.lines()[0], HasSubstr("WRN Monitors::put_image: image 'multi/0' of shape "
                                            "[3, 3, 5] was not encoded ("));
  EXPECT_THAT(capture.lines()[1], HasSubstr("'multi/1'"));
}

// ---- put_summary ----

TEST(MonitorsPutSummary, NormalisesScalarTags) {
  EXPECT_EQ(detail::normalize_summary_tag("tower0/cost-summary"), "cost");
  EXPECT_EQ(detail::normalize_summary_tag("tower1/tower12/x"), "x");
  EXPECT_EQ(detail::normalize_summary_tag("a-summary-summary"), "a-summary");
  EXPECT_EQ(detail::normalize_summary_tag("towerX/y"), "towerX/y");
  EXPECT_EQ(detail::normalize_summary_tag("tower/y"), "tower/y");
  EXPECT_EQ(detail::normalize_summary_tag("towertower1/z"), "towerz");
  EXPECT_EQ(detail::normalize_summary_tag("a/tower3/b-summary/c"), "a/b-summary/c");
  EXPECT_EQ(detail::normalize_summary_tag("cost"), "cost");
}

TEST(MonitorsPutSummary, ScalarsGoToProcessScalarWithNormalisedTagsThenTheWholeSummary) {
  Fixture f;
  Summary s;
  s.values.push_back(SummaryValue::make_scalar("tower0/cost-summary", 1));
  SummaryValue hist;
  hist.tag = "tower0/w-summary";
  hist.kind = SummaryValue::Kind::kHistogram;
  s.values.push_back(hist);
  s.values.push_back(SummaryValue::make_scalar("tower1/tower12/x", 2));
  s.values.push_back(SummaryValue::make_text("tower1/note-summary", "hello"));
  s.values.push_back(SummaryValue::make_scalar("a-summary-summary", 3));
  s.values.push_back(SummaryValue::make_scalar("towerX/y", 4));
  f.monitors.put_summary(s);
  EXPECT_THAT(*f.log, ElementsAre("A scalar cost=1", "B scalar cost=1", "A scalar x=2",
                                  "B scalar x=2", "A scalar a-summary=3", "B scalar a-summary=3",
                                  "A scalar towerX/y=4", "B scalar towerX/y=4",
                                  "A summary scalar:cost histogram:tower0/w-summary scalar:x "
                                  "text:tower1/note-summary scalar:a-summary scalar:towerX/y",
                                  "B summary scalar:cost histogram:tower0/w-summary scalar:x "
                                  "text:tower1/note-summary scalar:a-summary scalar:towerX/y"));
  EXPECT_EQ(f.a->summaries.at(0).values.at(3).text, "hello");
  // The history holds the scalars under their normalised names, and only them.
  EXPECT_EQ(f.monitors.get_latest("cost"), 1);
  EXPECT_EQ(f.monitors.get_latest("x"), 2);
  EXPECT_EQ(f.monitors.get_latest("a-summary"), 3);
  EXPECT_EQ(f.monitors.get_latest("towerX/y"), 4);
  EXPECT_TRUE(f.monitors.get_history("tower0/cost-summary").empty());
  EXPECT_TRUE(f.monitors.get_history("tower0/w-summary").empty());
  EXPECT_TRUE(f.monitors.get_history("w").empty());
  // The caller's summary is not changed.
  EXPECT_EQ(s.values[0].tag, "tower0/cost-summary");
}

// ---- put_event ----

class PutsEvents : public Callback {
 protected:
  void _trigger_step() override {
    Event e;
    e.step = -7;
    e.file_version = "kept";
    trainer().monitors().put_event(e);
  }
};

TEST(MonitorsPutEvent, SetsTheGlobalStepAndTheWallTime) {
  auto log = std::make_shared<std::vector<std::string>>();
  auto rec = std::make_shared<Recorder>(log, "A");
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  trainer.train({std::make_shared<PutsEvents>()}, {rec}, 2, 1, 1);
  const double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_THAT(*log, ElementsAre("A event step=1", "A event step=2"));
  for (const Event& e : rec->events) {
    EXPECT_GE(e.wall_time, before);
    EXPECT_LE(e.wall_time, after);
    EXPECT_EQ(e.file_version, "kept");
  }
}

TEST(MonitorsPutEvent, BeforeSetupTheStepIsZero) {
  Fixture f;
  Event e;
  e.step = 12;
  f.monitors.put_event(e);
  EXPECT_THAT(*f.log, ElementsAre("A event step=0", "B event step=0"));
  EXPECT_GT(f.a->events.at(0).wall_time, 1.6e9);  // seconds since 1970, not a clock since boot
}

// ---- validators ----

// A callback whose name is given (what the validator lists show).
class Named : public Callback {
 public:
  explicit Named(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }

 private:
  std::string name_;
};

TEST(MonitorsValidators, HaveRunOnceEveryValidatorAddedReportedARound) {
  Fixture f;
  Named fast("FastRunner"), slow("SlowRunner");
  EXPECT_TRUE(f.monitors.validators_have_run());  // none added
  f.monitors.add_validator(fast);
  f.monitors.add_validator(slow);
  f.monitors.add_validator(fast);  // once only
  EXPECT_EQ(f.monitors.validator_names(), (std::vector<std::string>{"FastRunner", "SlowRunner"}));
  EXPECT_FALSE(f.monitors.validators_have_run());
  f.monitors.validation_done(fast);
  f.monitors.validation_done(fast);
  EXPECT_FALSE(f.monitors.validators_have_run());
  f.monitors.validation_done(slow);
  EXPECT_TRUE(f.monitors.validators_have_run());
}

TEST(MonitorsValidators, AValidationOfACallbackNotAddedIsRefused) {
  Fixture f;
  Named stranger("Stranger");
  try {
    f.monitors.validation_done(stranger);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Monitors::validation_done: Stranger was not added as a validator; call "
                 "trainer().monitors().add_validator(*this) in its setup_graph first");
  }
}

TEST(MonitorsValidators, AStatIsMissingOnlyWithoutAValueOnceTheValidatorsHaveRun) {
  Fixture f;
  Named runner("InferenceRunner");
  EXPECT_EQ(detail::missing_stat_problem(f.monitors, "val-eror", 2, 1),
            "'val-eror' has not been put by global_step=2 (epoch 1), and no callback validates "
            "(none called Monitors::add_validator, as InferenceRunner does) to put it later. The "
            "stats put so far: none.");
  f.monitors.add_validator(runner);
  EXPECT_EQ(detail::missing_stat_problem(f.monitors, "val-eror", 2, 1), std::nullopt);
  f.monitors.put_scalar("val-error", 0.5);
  f.monitors.put_scalar("cost", 0.25);
  f.monitors.validation_done(runner);
  EXPECT_EQ(detail::missing_stat_problem(f.monitors, "val-eror", 4, 2),
            "'val-eror' has not been put by global_step=4 (epoch 2), though every validation has "
            "run (InferenceRunner). The stats put so far: cost, val-error.");
  EXPECT_EQ(detail::missing_stat_problem(f.monitors, "val-error", 4, 2), std::nullopt);
}

}  // namespace monitors_test
}  // namespace trainpack
