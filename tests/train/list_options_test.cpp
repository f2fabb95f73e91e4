// Options that hold an optional list: unset means the defaults, an empty list (however it is
// written, `{}` included) means none.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/callbacks/progress_bar.h"
#include "trainpack/callbacks/scalar_printer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"

namespace trainpack {
namespace list_options_test {

template <typename T>
bool any_is(const std::vector<CallbackPtr>& list) {
  return std::any_of(list.begin(), list.end(),
                     [](const CallbackPtr& c) { return dynamic_cast<T*>(c.get()) != nullptr; });
}

TEST(ListOptions, BracesMeanAnEmptyListNotUnset) {
  TrainOptions options = TrainOptions().extra_callbacks({}).monitors({});
  ASSERT_TRUE(options.extra_callbacks().has_value());
  EXPECT_TRUE(options.extra_callbacks()->empty());
  ASSERT_TRUE(options.monitors().has_value());
  EXPECT_TRUE(options.monitors()->empty());

  TrainConfig config = TrainConfig().extra_callbacks({}).monitors({});
  ASSERT_TRUE(config.extra_callbacks().has_value());
  EXPECT_TRUE(config.extra_callbacks()->empty());
  ASSERT_TRUE(config.monitors().has_value());
  EXPECT_TRUE(config.monitors()->empty());
}

TEST(ListOptions, UnsetByDefaultAndAgainWithNullopt) {
  EXPECT_FALSE(TrainOptions().extra_callbacks().has_value());
  EXPECT_FALSE(TrainOptions().monitors().has_value());
  EXPECT_FALSE(TrainConfig().extra_callbacks().has_value());
  EXPECT_FALSE(ScalarPrinterOptions().whitelist().has_value());
  EXPECT_FALSE(TrainOptions().extra_callbacks({}).extra_callbacks(std::nullopt).extra_callbacks());
}

TEST(ListOptions, AnOptionalIsForwardedAsItIs) {
  const std::optional<std::vector<CallbackPtr>> unset;
  const std::optional<std::vector<CallbackPtr>> empty = std::vector<CallbackPtr>{};
  EXPECT_FALSE(TrainOptions().extra_callbacks(unset).extra_callbacks().has_value());
  EXPECT_TRUE(TrainOptions().extra_callbacks(empty).extra_callbacks().has_value());
}

TEST(ListOptions, WhitelistTakesABracedList) {
  ScalarPrinterOptions options = ScalarPrinterOptions().whitelist({"^a"}).blacklist({"^b"});
  ASSERT_TRUE(options.whitelist().has_value());
  EXPECT_EQ(*options.whitelist(), std::vector<std::string>{"^a"});
  EXPECT_TRUE(ScalarPrinterOptions().whitelist({}).whitelist()->empty());
}

TEST(ListOptions, AnEmptyWhitelistPrintsNothing) {
  testing::LogCapture log;
  auto printer = std::make_shared<ScalarPrinter>(ScalarPrinterOptions().whitelist({}));
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({}, {printer}, 1, 1, 1);
  printer->process_scalar("cost", 1.5);
  printer->trigger();
  EXPECT_FALSE(log.contains("cost"));
}

TEST(ListOptions, EmptyExtraCallbacksAndMonitorsRegisterNone) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train_with_defaults(
      TrainOptions().extra_callbacks({}).monitors({}).steps_per_epoch(1).max_epoch(1));
  const auto& r = trainer.registered_callbacks();
  EXPECT_FALSE(any_is<ProgressBar>(r));
  EXPECT_FALSE(any_is<ScalarPrinter>(r));
  // The step counter and the monitors' aggregator are the trainer's own.
  EXPECT_EQ(r.size(), 2u);
}

TEST(ListOptions, UnsetExtraCallbacksAndMonitorsAreTheDefaults) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train_with_defaults(TrainOptions().steps_per_epoch(1).max_epoch(1));
  const auto& r = trainer.registered_callbacks();
  EXPECT_TRUE(any_is<ProgressBar>(r));
  EXPECT_TRUE(any_is<ScalarPrinter>(r));
}

}  // namespace list_options_test
}  // namespace trainpack
