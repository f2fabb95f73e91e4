// ProgressBar (with tensorpack's refresh-interval rule) and the tqdm formatting it draws with. The
// expected lines were checked against tqdm 4.64's format_meter / format_num / format_interval.
#include "trainpack/callbacks/progress_bar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/step_trainer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace progress_bar_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sets environment variables for one test and restores them after.
class EnvGuard {
 public:
  ~EnvGuard() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        setenv(name.c_str(), old->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      setenv(name.c_str(), value, 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  // No SLURM/OpenMPI/override in the environment: the plain defaults apply.
  void clear_all() {
    for (const char* n : {"TRAINPACK_PROGRESS_REFRESH", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES",
                          "OMPI_COMM_WORLD_SIZE"}) {
      set(n, nullptr);
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Publishes "tower0/cost" = 1 / (global_step + 1) and advances a fake clock by the next of
// `durations` (cyclically) in every step; counts the steps that asked for the cost.
class CostTrainer : public Trainer {
 public:
  explicit CostTrainer(std::vector<double> durations) : durations_(std::move(durations)) {
    set_handle_signals(false);
  }
  double clock = 100;
  std::vector<int64_t> requested_at;  // global_step (before the increment) of each request

  void run_step() override {
    hooked_run([this](StepContext& ctx) {
      clock += durations_[static_cast<size_t>(global_step()) % durations_.size()];
      if (ctx.is_requested("tower0/cost")) requested_at.push_back(global_step());
      ctx.publish("tower0/cost", at::full({}, 1.0 / static_cast<double>(global_step() + 1)));
    });
  }

 private:
  std::vector<double> durations_;
};

struct Captured {
  std::string text;
  std::vector<std::string> pieces;
};

// A bar writing into `out`, on `trainer`'s fake clock.
std::shared_ptr<ProgressBar> make_bar(CostTrainer& trainer, Captured& out,
                                      ProgressBarOptions options) {
  return std::make_shared<ProgressBar>(options
                                           .sink([&out](std::string_view s) {
                                             out.text += s;
                                             out.pieces.emplace_back(s);
                                           })
                                           .clock([&trainer] { return trainer.clock; }));
}

// ---- the tqdm helpers ----

TEST(ProgressBarFormat, FormatIntervalIsMinutesSecondsOrHours) {
  EXPECT_EQ(tqdm::format_interval(0), "00:00");
  EXPECT_EQ(tqdm::format_interval(59.999), "00:59");
  EXPECT_EQ(tqdm::format_interval(75.9), "01:15");
  EXPECT_EQ(tqdm::format_interval(3725), "1:02:05");
  EXPECT_EQ(tqdm::format_interval(2 * 86400 + 5), "48:00:05");
}

TEST(ProgressBarFormat, FormatNumIsTheShorterOfThreeDigitsAndPythonStr) {
  EXPECT_EQ(tqdm::format_num(0.3123456), "0.312");
  EXPECT_EQ(tqdm::format_num(1.0), "1");
  EXPECT_EQ(tqdm::format_num(0.5), "0.5");
  EXPECT_EQ(tqdm::format_num(1e-05), "1e-5");
  EXPECT_EQ(tqdm::format_num(2.5e-7), "2.5e-7");
  EXPECT_EQ(tqdm::format_num(0.001234), "0.00123");
  EXPECT_EQ(tqdm::format_num(100.0), "100");
  EXPECT_EQ(tqdm::format_num(1234.0), "1234.0");
  EXPECT_EQ(tqdm::format_num(12345.0), "12345.0");
  EXPECT_EQ(tqdm::format_num(123456789.0), "1.23e+8");
  EXPECT_EQ(tqdm::format_num(1e16), "1e+16");
  EXPECT_EQ(tqdm::format_num(-0.5), "-.5");  // tqdm's replace("-0", "-"), kept as is
  EXPECT_EQ(tqdm::format_num(std::nan("")), "nan");
  EXPECT_EQ(tqdm::format_num(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(tqdm::format_num(int64_t{5}), "5");
  EXPECT_EQ(tqdm::format_num(int64_t{12345}), "12345");
  EXPECT_EQ(tqdm::format_num(int64_t{1000000}), "1e+6");
  EXPECT_EQ(tqdm::format_num(int64_t{-7}), "-7");
}

TEST(ProgressBarFormat, RateIsPaddedAndInvertedBelowOnePerSecond) {
  EXPECT_EQ(tqdm::format_rate(4.4), " 4.40it/s");
  EXPECT_EQ(tqdm::format_rate(130.52), "130.52it/s");
  EXPECT_EQ(tqdm::format_rate(1.0), " 1.00it/s");
  EXPECT_EQ(tqdm::format_rate(0.4), " 2.50s/it");
  EXPECT_EQ(tqdm::format_rate(0), "?it/s");
  EXPECT_EQ(tqdm::format_rate(kNaN), "?it/s");
}

TEST(ProgressBarFormat, MeterMatchesTqdm) {
  EXPECT_EQ(tqdm::format_meter(450, 1000, 3.4, 130.52, "cost=0.312", /*ascii=*/false),
            " 45%|\u2588\u2588\u2588\u2588\u258c     | 450/1000 [00:03<00:04, 130.52it/s, "
            "cost=0.312]");
  EXPECT_EQ(tqdm::format_meter(45, 100, 10, 4.4, "cost=0.123", /*ascii=*/true),
            " 45%|####5     | 45/100 [00:10<00:12,  4.40it/s, cost=0.123]");
  EXPECT_EQ(tqdm::format_meter(0, 1000, 0, kNaN, "", true),
            "  0%|          | 0/1000 [00:00<?, ?it/s]");
  // Unknown rate: the average n / elapsed.
  EXPECT_EQ(tqdm::format_meter(1, 4, 2.5, kNaN, "", false),
            " 25%|\u2588\u2588\u258c       | 1/4 [00:02<00:07,  2.50s/it]");
  EXPECT_EQ(tqdm::format_meter(4, 4, 8, kNaN, "", true),
            "100%|##########| 4/4 [00:08<00:00,  2.00s/it]");
  EXPECT_EQ(tqdm::format_meter(999, 1000, 3725.5, 1000, "", false),
            "100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2589| 999/1000 "
            "[1:02:05<00:00, 1000.00it/s]");
  // No total: counts and rate only.
  EXPECT_EQ(tqdm::format_meter(5, 0, 3, kNaN, "", true), "5it [00:03,  1.67it/s]");
}

TEST(ProgressBarFormat, MeterFillsAndCutsToNcols) {
  EXPECT_EQ(tqdm::format_meter(3, 7, 1, kNaN, "", true, 60),
            " 43%|##########7              | 3/7 [00:01<00:01,  3.00it/s]");
  EXPECT_EQ(tqdm::format_meter(3, 7, 1, kNaN, "", true, 30), " 43%|4| 3/7 [00:01<00:01,  3.0");
  EXPECT_EQ(tqdm::format_meter(3, 7, 1, kNaN, "", false, 10), " 43%|\u258d| 3/");
  EXPECT_EQ(tqdm::display_width(" 43%|\u258d| 3/"), 10u);
}

// ---- refresh interval and locale ----

TEST(ProgressBarRefresh, DefaultsFollowTensorpack) {
  EnvGuard env;
  env.clear_all();
  EXPECT_EQ(default_progress_refresh_interval(true), 0.5);
  EXPECT_EQ(default_progress_refresh_interval(false), 180);
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_EQ(default_progress_refresh_interval(false), 60);
  env.set("SLURM_JOB_ID", "123");
  EXPECT_EQ(default_progress_refresh_interval(false), 15);
  env.set("SLURM_JOB_NUM_NODES", "2");
  EXPECT_EQ(default_progress_refresh_interval(false), 60);
  EXPECT_EQ(default_progress_refresh_interval(true), 0.5);
}

TEST(ProgressBarRefresh, EnvironmentVariableOverridesTheDefault) {
  EnvGuard env;
  env.clear_all();
  env.set("TRAINPACK_PROGRESS_REFRESH", "2.5");
  EXPECT_EQ(default_progress_refresh_interval(false), 2.5);
  EXPECT_EQ(default_progress_refresh_interval(true), 2.5);
  env.set("TRAINPACK_PROGRESS_REFRESH", " 0 ");
  EXPECT_EQ(default_progress_refresh_interval(true), 0);

  // A bar without an explicit interval takes it in before_train.
  env.set("TRAINPACK_PROGRESS_REFRESH", "7");
  CostTrainer trainer({1});
  Captured out;
  auto bar = make_bar(trainer, out, ProgressBarOptions());
  trainer.train({bar}, {}, 2, 1, 1);
  EXPECT_EQ(bar->refresh_interval(), 7);
  EXPECT_FALSE(bar->terminal());
}

TEST(ProgressBarRefresh, BadEnvironmentValueWarnsAndUsesTheDefault) {
  EnvGuard env;
  env.clear_all();
  for (const char* bad : {"abc", "", "-1", "1.5s", "nan"}) {
    env.set("TRAINPACK_PROGRESS_REFRESH", bad);
    testing::LogCapture log;
    EXPECT_EQ(default_progress_refresh_interval(false), 180) << bad;
    EXPECT_EQ(default_progress_refresh_interval(true), 0.5) << bad;
    ASSERT_EQ(log.lines().size(), 2u) << bad;
    EXPECT_THAT(log.lines()[0], HasSubstr("WRN TRAINPACK_PROGRESS_REFRESH='" + std::string(bad) +
                                          "' is not a non-negative number of seconds"));
    EXPECT_THAT(log.lines()[0], HasSubstr("every 180 s"));
  }
}

TEST(ProgressBarRefresh, ExplicitIntervalWinsOverTheEnvironment) {
  EnvGuard env;
  env.set("TRAINPACK_PROGRESS_REFRESH", "bad");
  CostTrainer trainer({1});
  Captured out;
  testing::LogCapture log;
  auto bar = make_bar(trainer, out, ProgressBarOptions().refresh_interval(3.0));
  trainer.train({bar}, {}, 2, 1, 1);
  EXPECT_EQ(bar->refresh_interval(), 3.0);
  EXPECT_FALSE(log.contains("TRAINPACK_PROGRESS_REFRESH"));
}

TEST(ProgressBarRefresh, LocaleDecidesUnicode) {
  EnvGuard env;
  env.set("LC_ALL", nullptr);
  env.set("LC_CTYPE", nullptr);
  env.set("LANG", nullptr);
  EXPECT_FALSE(locale_is_utf8());
  env.set("LANG", "en_US.UTF-8");
  EXPECT_TRUE(locale_is_utf8());
  env.set("LC_CTYPE", "C");
  EXPECT_FALSE(locale_is_utf8());
  env.set("LC_ALL", "de_DE.utf8");
  EXPECT_TRUE(locale_is_utf8());
}

TEST(ProgressBarOptionsCheck, BadOptionsAreErrors) {
  EXPECT_THROW(ProgressBar(ProgressBarOptions().refresh_interval(-1.0)), std::invalid_argument);
  EXPECT_THROW(ProgressBar(ProgressBarOptions().ncols(-3)), std::invalid_argument);
  EXPECT_THROW(ProgressBar(ProgressBarOptions().stream(nullptr)), std::invalid_argument);
  EXPECT_THROW(ProgressBar(std::vector<std::string>{""}), std::invalid_argument);
}

// ---- the bar in a training run ----

TEST(ProgressBar, EveryStepOffTerminalPrintsOneLinePerStep) {
  CostTrainer trainer({0.5, 1.0, 0.25, 0.25});
  Captured out;
  auto bar =
      make_bar(trainer, out, ProgressBarOptions().names({"tower0/cost"}).refresh_interval(0.0));
  trainer.train({bar}, {}, 4, 1, 1);
  // Same numbers as tqdm(total=4, mininterval=0, smoothing=0.5, ascii=True); the last step is
  // drawn once, by after_epoch, with the epoch's average rate.
  EXPECT_EQ(out.text,
            " 25%|##5       | 1/4 [00:00<00:01,  2.00it/s, cost=1]\n"
            " 50%|#####     | 2/4 [00:01<00:01,  1.20it/s, cost=0.5]\n"
            " 75%|#######5  | 3/4 [00:01<00:00,  2.00it/s, cost=0.333]\n"
            "100%|##########| 4/4 [00:02<00:00,  2.00it/s, cost=0.25]\n");
  EXPECT_THAT(trainer.requested_at, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(out.pieces.size(), 4u);  // one write per line
}

TEST(ProgressBar, LargeIntervalOffTerminalPrintsOnlyEpochEndLines) {
  CostTrainer trainer({0.5});
  Captured out;
  auto bar =
      make_bar(trainer, out, ProgressBarOptions().names({"tower0/cost"}).refresh_interval(1e9));
  trainer.train({bar}, {}, 4, 1, 2);
  EXPECT_EQ(out.text,
            "100%|##########| 4/4 [00:02<00:00,  2.00it/s, cost=0.25]\n"
            "100%|##########| 4/4 [00:02<00:00,  2.00it/s, cost=0.125]\n");
  // Only the last step of each epoch asks for the value.
  EXPECT_THAT(trainer.requested_at, ElementsAre(3, 7));
}

TEST(ProgressBar, ValuesAreFetchedOnlyInTheStepsThatDraw) {
  CostTrainer trainer({0.5});
  Captured out;
  auto bar =
      make_bar(trainer, out, ProgressBarOptions().names({"tower0/cost"}).refresh_interval(1.0));
  trainer.train({bar}, {}, 10, 1, 1);
  // Steps start at t=0, 0.5, 1.0, ...: a draw is due in steps 3, 6 and 9 (1 s after the last
  // draw when they start), plus the last step for the epoch-end line.
  EXPECT_THAT(trainer.requested_at, ElementsAre(2, 5, 8, 9));
  EXPECT_EQ(out.text,
            " 30%|###       | 3/10 [00:01<00:03,  2.00it/s, cost=0.333]\n"
            " 60%|######    | 6/10 [00:03<00:02,  2.00it/s, cost=0.167]\n"
            " 90%|######### | 9/10 [00:04<00:00,  2.00it/s, cost=0.111]\n"
            "100%|##########| 10/10 [00:05<00:00,  2.00it/s, cost=0.1]\n");
}

TEST(ProgressBar, WithoutNamesNothingIsFetched) {
  CostTrainer trainer({0.5});
  Captured out;
  auto bar = make_bar(trainer, out, ProgressBarOptions().refresh_interval(0.0));
  trainer.train({bar}, {}, 2, 1, 1);
  EXPECT_TRUE(trainer.requested_at.empty());
  EXPECT_EQ(out.text,
            " 50%|#####     | 1/2 [00:00<00:00,  2.00it/s]\n"
            "100%|##########| 2/2 [00:01<00:00,  2.00it/s]\n");
}

TEST(ProgressBar, OneStepPerEpochStillRefreshesValues) {
  // docs/tensorpack-differences.md #1: local_step is -1 in before_epoch, so every epoch's single
  // step fetches.
  CostTrainer trainer({1});
  Captured out;
  auto bar =
      make_bar(trainer, out, ProgressBarOptions().names({"tower0/cost"}).refresh_interval(1e9));
  trainer.train({bar}, {}, 1, 1, 3);
  EXPECT_THAT(trainer.requested_at, ElementsAre(0, 1, 2));
  EXPECT_EQ(out.text,
            "100%|##########| 1/1 [00:01<00:00,  1.00it/s, cost=1]\n"
            "100%|##########| 1/1 [00:01<00:00,  1.00it/s, cost=0.5]\n"
            "100%|##########| 1/1 [00:01<00:00,  1.00it/s, cost=0.333]\n");
}

TEST(ProgressBar, TerminalRedrawsInPlace) {
  CostTrainer trainer({0.5, 1.0, 0.25, 0.25});
  Captured out;
  auto bar = make_bar(trainer, out,
                      ProgressBarOptions()
                          .names({"tower0/cost"})
                          .refresh_interval(0.0)
                          .force_terminal(true)
                          .ascii(true));
  trainer.train({bar}, {}, 4, 1, 1);
  EXPECT_TRUE(bar->terminal());
  // A 0% draw when the epoch starts; the last draw is padded over the longer line before it.
  EXPECT_EQ(out.text,
            "\r  0%|          | 0/4 [00:00<?, ?it/s]"
            "\r 25%|##5       | 1/4 [00:00<00:01,  2.00it/s, cost=1]"
            "\r 50%|#####     | 2/4 [00:01<00:01,  1.20it/s, cost=0.5]"
            "\r 75%|#######5  | 3/4 [00:01<00:00,  2.00it/s, cost=0.333]"
            "\r100%|##########| 4/4 [00:02<00:00,  2.00it/s, cost=0.25] \n");
}

TEST(ProgressBar, TerminalDefaultsToHalfASecondAndUnicodeOnUtf8) {
  EnvGuard env;
  env.clear_all();
  env.set("LC_ALL", "C.UTF-8");
  CostTrainer trainer({0.3});
  Captured out;
  auto bar = make_bar(trainer, out, ProgressBarOptions().force_terminal(true));
  trainer.train({bar}, {}, 4, 1, 1);
  EXPECT_EQ(bar->refresh_interval(), 0.5);
  // Steps start at 0, 0.3, 0.6, 0.9: only step 3 starts 0.5 s after the 0% draw.
  EXPECT_EQ(out.text,
            "\r  0%|          | 0/4 [00:00<?, ?it/s]"
            "\r 75%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u258c  | 3/4 [00:00<00:00,  "
            "3.33it/s]"
            "\r100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| 4/4 "
            "[00:01<00:00,  3.33it/s]\n");
}

TEST(ProgressBar, StoppedEpochIsClosedInAfterTrain) {
  CostTrainer trainer({1});
  Captured out;
  auto bar = make_bar(trainer, out, ProgressBarOptions().refresh_interval(1e9));
  auto stopper = std::make_shared<testing::ActionCallback>();
  stopper->trigger_step_fn = [](testing::ActionCallback& cb) {
    if (cb.global_step() == 2) throw StopTraining("enough");
  };
  trainer.train({bar, stopper}, {}, 5, 1, 1);
  EXPECT_EQ(out.text, " 40%|####      | 2/5 [00:02<00:03,  1.00it/s]\n");
}

TEST(ProgressBar, ZeroStepsPerEpochDrawsNothing) {
  CostTrainer trainer({1});
  Captured out;
  auto bar = make_bar(trainer, out, ProgressBarOptions().refresh_interval(0.0));
  trainer.train({bar}, {}, 0, 1, 2);
  EXPECT_EQ(out.text, "");
}

TEST(ProgressBar, NonScalarValueIsAnError) {
  testing::StepTrainer trainer([](StepContext& ctx, int64_t) {
    ctx.publish("m", at::zeros({2, 3}));
  });
  auto bar = std::make_shared<ProgressBar>(
      ProgressBarOptions().names({"m"}).refresh_interval(0.0).sink([](std::string_view) {}));
  try {
    trainer.train({bar}, {}, 2, 1, 1);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("ProgressBar can only print scalars, not 'm' of shape 2x3"));
  }
}

TEST(ProgressBar, WritesToAStream) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  CostTrainer trainer({0.5});
  auto bar =
      std::make_shared<ProgressBar>(ProgressBarOptions().stream(f).refresh_interval(1e9).clock(
          [&trainer] { return trainer.clock; }));
  trainer.train({bar}, {}, 2, 1, 1);
  EXPECT_FALSE(bar->terminal());  // a file is not a terminal
  std::rewind(f);
  char buf[256] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, n), "100%|##########| 2/2 [00:01<00:00,  2.00it/s]\n");
}

}  // namespace progress_bar_test
}  // namespace trainpack
