// ScalarPrinter (with docs/tensorpack-differences.md #9): when it prints, what, and in which
// format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "trainpack/callbacks/monitor.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace scalar_printer_test {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Puts `init` in before_train, `loss` = global_step after every step and `epoch_stat` =
// epoch_num at every epoch end (before the monitors' hooks: callbacks precede monitors).
class Putter : public Callback {
 protected:
  void _before_train() override { trainer().monitors().put_scalar("init", 0.5); }
  void _trigger_step() override {
    trainer().monitors().put_scalar("loss", static_cast<double>(global_step()));
  }
  void _trigger_epoch() override {
    trainer().monitors().put_scalar("epoch_stat", static_cast<double>(epoch_num()));
  }
};

// The printer's lines and the loop's landmarks, from a 2-epoch x 2-step run.
std::vector<std::string> run_and_log(ScalarPrinterOptions options,
                                     std::vector<CallbackPtr> callbacks = {}) {
  testing::LogCapture capture;
  {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    callbacks.push_back(std::make_shared<Putter>());
    trainer.train(callbacks, {std::make_shared<ScalarPrinter>(std::move(options))}, 2, 1, 2);
  }
  static const std::regex kKept(
      "^(Start Epoch|Epoch \\d+ \\(|Training has finished|init: |"
      "loss: |epoch_stat: |early: |late: )");
  std::vector<std::string> out;
  for (const std::string& line : capture.lines()) {
    if (!std::regex_search(line, kKept)) continue;
    // "Epoch 1 (global_step 2) finished, time:0.1 second." -> without the time.
    out.push_back(line.substr(0, line.find(", time:")));
  }
  return out;
}

TEST(ScalarPrinter, DefaultPrintsBeforeTrainingAndAtEveryEpochEnd) {
  EXPECT_THAT(run_and_log(ScalarPrinterOptions()),
              ElementsAre("init: 0.5",                         //
                          "Start Epoch 1 ...",                 //
                          "Epoch 1 (global_step 2) finished",  //
                          "epoch_stat: 1", "loss: 2",          //
                          "Start Epoch 2 ...",                 //
                          "Epoch 2 (global_step 4) finished",  //
                          "epoch_stat: 2", "loss: 4",          //
                          "Training has finished!"));
}

TEST(ScalarPrinter, StepAndEpochLeaveTheLastStepToTheEpochPrint) {
  EXPECT_THAT(run_and_log(ScalarPrinterOptions().enable_step(true).enable_epoch(true)),
              ElementsAre("init: 0.5",                         //
                          "Start Epoch 1 ...",                 //
                          "loss: 1",                           //
                          "Epoch 1 (global_step 2) finished",  //
                          "epoch_stat: 1", "loss: 2",          //
                          "Start Epoch 2 ...",                 //
                          "loss: 3",                           //
                          "Epoch 2 (global_step 4) finished",  //
                          "epoch_stat: 2", "loss: 4",          //
                          "Training has finished!"));
}

TEST(ScalarPrinter, StepOnlyPrintsEpochValuesWithTheNextStepAndTheLastOnesAtAfterTrain) {
  EXPECT_THAT(run_and_log(ScalarPrinterOptions().enable_step(true).enable_epoch(false)),
              ElementsAre("init: 0.5",                         //
                          "Start Epoch 1 ...",                 //
                          "loss: 1",                           //
                          "loss: 2",                           //
                          "Epoch 1 (global_step 2) finished",  //
                          "Start Epoch 2 ...",                 //
                          "epoch_stat: 1", "loss: 3",          //
                          "loss: 4",                           //
                          "Epoch 2 (global_step 4) finished",  //
                          "Training has finished!",            //
                          "epoch_stat: 2"));                   // after_train (differences #9)
}

TEST(ScalarPrinter, NeitherPrintsBeforeTrainingAndTheLastValuesAtAfterTrain) {
  EXPECT_THAT(run_and_log(ScalarPrinterOptions().enable_step(false).enable_epoch(false)),
              ElementsAre("init: 0.5",                         //
                          "Start Epoch 1 ...",                 //
                          "Epoch 1 (global_step 2) finished",  //
                          "Start Epoch 2 ...",                 //
                          "Epoch 2 (global_step 4) finished",  //
                          "Training has finished!",            //
                          "epoch_stat: 2", "loss: 4"));        // after_train (differences #9)
}

TEST(ScalarPrinter, ValuesPutAfterTheLastPrintAppearAtAfterTrain) {
  // With the default flags the last print is at the last epoch end; a callback's after_train
  // runs before the monitors' after_train, so what it puts there is still printed.
  auto late = std::make_shared<testing::ActionCallback>();
  late->after_train_fn = [](testing::ActionCallback& cb) {
    cb.trainer().monitors().put_scalar("late", 1);
  };
  const std::vector<std::string> lines = run_and_log(ScalarPrinterOptions(), {late});
  EXPECT_THAT(std::vector<std::string>(lines.end() - 4, lines.end()),
              ElementsAre("epoch_stat: 2", "loss: 4", "Training has finished!", "late: 1"));
}

TEST(ScalarPrinter, PrintsInBeforeTrainWhatEarlierCallbacksPutThere) {
  auto early = std::make_shared<testing::ActionCallback>();
  early->before_train_fn = [](testing::ActionCallback& cb) {
    cb.trainer().monitors().put_scalar("early", 12345.6);
  };
  const std::vector<std::string> lines = run_and_log(ScalarPrinterOptions(), {early});
  EXPECT_THAT(std::vector<std::string>(lines.begin(), lines.begin() + 3),
              ElementsAre("early: 12346", "init: 0.5", "Start Epoch 1 ..."));
}

// ---- format and filters, driven directly ----

std::vector<std::string> print(ScalarPrinter& printer) {
  testing::LogCapture capture;
  printer.trigger();
  return capture.lines();
}

TEST(ScalarPrinter, FormatsLikePythonPercentPoint5g) {
  ScalarPrinter printer;
  printer.process_scalar("a", 0.1);
  printer.process_scalar("b", 1e-05);
  printer.process_scalar("c", 12345.6);
  printer.process_scalar("d", 100000);
  printer.process_scalar("e", std::nan(""));
  printer.process_scalar("f", -std::numeric_limits<double>::infinity());
  printer.process_scalar("g", 0.123456789);
  printer.process_scalar("h", 3);
  printer.process_scalar("i", -2.5e-7);
  EXPECT_THAT(print(printer), ElementsAre("a: 0.1", "b: 1e-05", "c: 12346", "d: 1e+05", "e: nan",
                                          "f: -inf", "g: 0.12346", "h: 3", "i: -2.5e-07"));
}

TEST(ScalarPrinter, PrintsTheLastValueOfEachNameSortedByNameThenForgetsThem) {
  ScalarPrinter printer;
  printer.process_scalar("zeta", 1);
  printer.process_scalar("Alpha", 2);
  printer.process_scalar("beta", 3);
  printer.process_scalar("zeta", 4);
  EXPECT_THAT(print(printer), ElementsAre("Alpha: 2", "beta: 3", "zeta: 4"));
  EXPECT_TRUE(print(printer).empty());
  printer.process_scalar("beta", 5);
  EXPECT_THAT(print(printer), ElementsAre("beta: 5"));
}

TEST(ScalarPrinter, WhitelistAndBlacklistSelectNamesBySearch) {
  ScalarPrinter printer(ScalarPrinterOptions()
                            .whitelist(std::vector<std::string>{"^val", "acc"})
                            .blacklist({"top5", "^val-cost$"}));
  for (const char* name :
       {"val-error", "train/accuracy", "val-top5", "cost", "my_val", "val-cost", "val-cost2"}) {
    printer.process_scalar(name, 1);
  }
  EXPECT_THAT(print(printer), ElementsAre("train/accuracy: 1", "val-cost2: 1", "val-error: 1"));
  // Filtered names are dropped at the print too: they do not come back later.
  printer.process_scalar("val-error", 2);
  EXPECT_THAT(print(printer), ElementsAre("val-error: 2"));
}

TEST(ScalarPrinter, AnEmptyWhitelistPrintsNothingAndNoWhitelistEverything) {
  ScalarPrinter none(ScalarPrinterOptions().whitelist(std::vector<std::string>{}));
  none.process_scalar("cost", 1);
  EXPECT_TRUE(print(none).empty());
  ScalarPrinter all(ScalarPrinterOptions().blacklist({"^c"}));
  all.process_scalar("cost", 1);
  all.process_scalar("acc", 1);
  EXPECT_THAT(print(all), ElementsAre("acc: 1"));
}

TEST(ScalarPrinter, ABadRegexIsAnErrorNamingTheListAndThePattern) {
  try {
    ScalarPrinter printer(ScalarPrinterOptions().whitelist(std::vector<std::string>{"ok", "("}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), StartsWith("ScalarPrinter: whitelist pattern '(' is not a valid "
                                     "regular expression ("));
  }
  try {
    ScalarPrinter printer(ScalarPrinterOptions().blacklist({"[a-"}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), StartsWith("ScalarPrinter: blacklist pattern '[a-' is not a valid "
                                     "regular expression ("));
  }
}

TEST(ScalarPrinter, IsNotChiefOnlyAndStaysOffTheStepPathUnlessAsked) {
  ScalarPrinter printer;
  EXPECT_FALSE(printer.chief_only());
  EXPECT_EQ(printer.name(), "ScalarPrinter");
  EXPECT_FALSE(printer.overrides(Hook::kTriggerStep));
  EXPECT_TRUE(printer.overrides(Hook::kTriggerEpoch));
  EXPECT_TRUE(printer.overrides(Hook::kBeforeTrain));
  EXPECT_TRUE(printer.overrides(Hook::kAfterTrain));
  EXPECT_FALSE(printer.overrides(Hook::kAfterRun));
  ScalarPrinter per_step(ScalarPrinterOptions().enable_step(true).enable_epoch(false));
  EXPECT_TRUE(per_step.overrides(Hook::kTriggerStep));
  EXPECT_FALSE(per_step.overrides(Hook::kTriggerEpoch));
}

}  // namespace scalar_printer_test
}  // namespace trainpack
