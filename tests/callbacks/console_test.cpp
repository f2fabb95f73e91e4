// The training console and InjectShell, in this process: the console reads from and writes to
// string streams (ConsoleOptions::input/output) or runs the file's commands. The terminal itself
// (a pseudo-terminal), SIGSTOP and signals are in inject_shell_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/learning_rate.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/console.h"
#include "trainpack/callbacks/misc.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/float_repr.h"

namespace trainpack {
namespace console_test {

namespace fs = std::filesystem;
using testing::ActionCallback;
using testing::LogCapture;

// The run of these tests: 2 steps per epoch, epochs 1..max_epoch, a `learning_rate` variable (0.1,
// finite and > 0), `cost` = 1/epoch put at every epoch end before InjectShell runs, and the
// InjectShell file created in the before_epoch of `touch_epoch`.
struct RunConfig {
  std::string input;  // what the console reads
  int64_t touch_epoch = 1;
  int64_t max_epoch = 3;
  std::optional<bool> interactive = true;
  std::string file_content;  // written into the file when it is created
  bool with_saver = true;
  bool saver_every_epoch = false;  // the ModelSaver's own trigger: every epoch (before the shell)
  std::vector<CallbackPtr> extra;  // before the InjectShell
  std::optional<int64_t> every_k_steps;
};

struct RunResult {
  std::string output;                    // what the console printed
  std::vector<std::string> lr_at_start;  // learning_rate at each epoch's before_epoch
  int64_t last_epoch = 0;                // epoch_num in after_train
  int64_t last_step = 0;                 // global_step in after_train
  bool file_after = false;               // the file exists after training
  std::string error;                     // what train threw, if anything
};

class ConsoleTest : public testing::TempDirTest {
 protected:
  std::string file() const { return path("INJECT_SHELL.tmp").string(); }

  RunResult run(const RunConfig& config) {
    RunResult result;
    std::istringstream in(config.input);
    std::ostringstream out;
    double lr = 0.1;
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    testing::add_learning_rate_variable(trainer.graph(), &lr);
    auto report = std::make_shared<ActionCallback>();
    report->before_epoch_fn = [&](ActionCallback& self) {
      result.lr_at_start.push_back(python_float_repr(lr));
      if (self.epoch_num() == config.touch_epoch) std::ofstream(file()) << config.file_content;
    };
    report->trigger_fn = [](ActionCallback& self) {
      self.trainer().monitors().put_scalar("cost", 1.0 / static_cast<double>(self.epoch_num()));
    };
    report->after_train_fn = [&](ActionCallback& self) {
      result.last_epoch = self.epoch_num();
      result.last_step = self.global_step();
    };
    std::vector<CallbackPtr> callbacks = {report};
    auto saver = std::make_shared<ModelSaver>(
        ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false));
    if (config.with_saver) {
      callbacks.push_back(config.saver_every_epoch
                              ? CallbackPtr(saver)
                              : std::make_shared<PeriodicTrigger>(
                                    saver, PeriodicTriggerOptions().every_k_epochs(1000)));
    }
    for (const auto& cb : config.extra) callbacks.push_back(cb);
    CallbackPtr shell = std::make_shared<InjectShell>(
        file(), "console",
        InjectShellOptions()
            .interactive(config.interactive)
            .console(ConsoleOptions().input(&in).output(&out).prompt("> ")));
    if (config.every_k_steps) {
      shell = std::make_shared<PeriodicTrigger>(
          shell, PeriodicTriggerOptions().every_k_steps(*config.every_k_steps));
    }
    callbacks.push_back(shell);
    try {
      trainer.train(callbacks, {}, 2, 1, config.max_epoch);
    } catch (const std::exception& e) {
      result.error = e.what();
    }
    result.output = out.str();
    result.file_after = fs::exists(file());
    return result;
  }

  static std::vector<std::string> v(std::initializer_list<std::string> l) { return l; }
};

constexpr const char* kBanner =
    "InjectShell: the file {} exists.\n"
    "Training is paused at global_step=2 (epoch 1). Type 'help' for the commands, 'continue' to "
    "resume.\n";

std::string banner(const std::string& file) { return fmt::format(kBanner, file); }

TEST_F(ConsoleTest, StatsPrintsTheLatestValueOfEveryStat) {
  RunConfig c;
  c.input = "stats\ncontinue\n";
  c.touch_epoch = 2;
  c.extra = {std::make_shared<CallbackFactory>(CallbackFactoryOptions().trigger(
      [](CallbackFactory& self) { self.trainer().monitors().put_scalar("acc", 0.75); }))};
  const RunResult r = run(c);
  EXPECT_EQ(r.output.substr(r.output.find("> ")),
            "> Statistics at global_step=4 (latest values):\n"
            "  acc = 0.75 (global_step=4)\n"
            "  cost = 0.5 (global_step=4)\n"
            "> ");
  EXPECT_EQ(r.error, "");
}

TEST_F(ConsoleTest, StatsWithoutAnyStat) {
  RunConfig c;
  c.input = "stats\n";
  c.touch_epoch = 1;
  c.every_k_steps = 1;  // at global_step=1, before the first epoch end puts `cost`
  const RunResult r = run(c);
  EXPECT_NE(r.output.find("> No statistics yet.\n> \n"), std::string::npos) << r.output;
}

TEST_F(ConsoleTest, HistoryPrintsTheLastValuesWithTheirSteps) {
  RunConfig c;
  c.input = "history cost\nhistory cost 2\nhistory cost 0\nhistory cost x\nhistory nope\nhistory\n";
  c.touch_epoch = 3;
  const RunResult r = run(c);
  EXPECT_EQ(r.output.substr(r.output.find("> ")),
            "> cost: the last 3 of 3 values:\n"
            "  global_step=2: 1.0\n"
            "  global_step=4: 0.5\n"
            "  global_step=6: 0.3333333333333333\n"
            "> cost: the last 2 of 3 values:\n"
            "  global_step=4: 0.5\n"
            "  global_step=6: 0.3333333333333333\n"
            "> history: '0' is not a positive number of values.\n"
            "> history: 'x' is not a positive number of values.\n"
            "> history: no statistic named 'nope'; 'stats' lists them.\n"
            "> Usage: history <name> [n]\n"
            "> \n");
}

TEST_F(ConsoleTest, ParamsListsTheGraphVariablesAndWhoElseSetsThem) {
  RunConfig c;
  c.input = "params\n";
  c.extra = {std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.1}})};
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) +
                          "> Hyperparameters:\n"
                          "  global_step = 2 (the step counter; read-only)\n"
                          "  learning_rate = 0.1 (finite and > 0); also set by "
                          "ScheduledHyperParamSetter(schedule=[(0, 0.1)])\n"
                          "> \n");
}

TEST_F(ConsoleTest, SetChangesTheValueFromTheNextEpochOn) {
  LogCapture log;
  RunConfig c;
  c.input = "set learning_rate 0.05\ncontinue\n";
  c.touch_epoch = 1;
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) + "> learning_rate changes from 0.1 to 0.05.\n> ");
  EXPECT_EQ(r.lr_at_start, v({"0.1", "0.05", "0.05"}));
  EXPECT_TRUE(log.contains("[Console] At global_step=2, learning_rate changes from 0.1 to 0.05."));
  EXPECT_TRUE(log.contains("[Console] Training continues at global_step=2."));
  EXPECT_EQ(r.last_epoch, 3);
}

TEST_F(ConsoleTest, SetRefusesWhatHyperTxtRefuses) {
  RunConfig c;
  c.input =
      "set learning_rate nan\nset learning_rate inf\nset learning_rate -1\nset learning_rate 0\n"
      "set learning_rate abc\nset learning_rate 1e-3x\nset momentum 0.9\nset global_step 7\n"
      "set learning_rate\n";
  const RunResult r = run(c);
  EXPECT_EQ(r.output,
            banner(file()) +
                "> set: learning_rate = nan is outside its range (finite and > 0); keeping "
                "learning_rate = 0.1\n"
                "> set: learning_rate = inf is outside its range (finite and > 0); keeping "
                "learning_rate = 0.1\n"
                "> set: learning_rate = -1.0 is outside its range (finite and > 0); keeping "
                "learning_rate = 0.1\n"
                "> set: learning_rate = 0.0 is outside its range (finite and > 0); keeping "
                "learning_rate = 0.1\n"
                "> set: 'abc' is not a number.\n"
                "> set: '1e-3x' is not a number.\n"
                "> set: no hyperparameter named 'momentum'; 'params' lists them.\n"
                "> set: global_step is the step counter; it cannot be set.\n"
                "> Usage: set <name> <value>\n"
                "> \n");
  EXPECT_EQ(r.lr_at_start, v({"0.1", "0.1", "0.1"}));
  EXPECT_EQ(r.last_step, 6);
}

TEST_F(ConsoleTest, SetKeepsAnIntegerVariableIntegral) {
  int64_t steps = 10;
  RunConfig c;
  // Added in CallbackFactory's setup_graph, so under its name scope.
  c.input = "set CallbackFactory/decay_steps 2.5\nset CallbackFactory/decay_steps 20\nparams\n";
  c.extra = {std::make_shared<CallbackFactory>(
      CallbackFactoryOptions().setup_graph([&](CallbackFactory& self) {
        self.graph().add_variable(
            "decay_steps", [&] { return static_cast<double>(steps); },
            [&](double v) { steps = static_cast<int64_t>(v); }, /*is_floating=*/false,
            ValueRange().min(1));
      }))};
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) +
                          "> set: CallbackFactory/decay_steps holds integers and 2.5 is not one; "
                          "keeping CallbackFactory/decay_steps = 10.0\n"
                          "> CallbackFactory/decay_steps changes from 10.0 to 20.0.\n"
                          "> Hyperparameters:\n"
                          "  CallbackFactory/decay_steps = 20.0 (finite and >= 1, integer)\n"
                          "  global_step = 2 (the step counter; read-only)\n"
                          "  learning_rate = 0.1 (finite and > 0)\n"
                          "> \n");
  EXPECT_EQ(steps, 20);
}

TEST_F(ConsoleTest, SetWarnsThatASetterMayReplaceTheValue) {
  RunConfig c;
  c.input = "set learning_rate 0.05\n";
  c.extra = {std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.1}})};
  const RunResult r = run(c);
  EXPECT_NE(r.output.find("> learning_rate changes from 0.1 to 0.05.\nNote: "
                          "ScheduledHyperParamSetter(schedule=[(0, 0.1)]) also sets "
                          "learning_rate; its next run may replace this value.\n"),
            std::string::npos)
      << r.output;
}

TEST_F(ConsoleTest, SaveWritesACheckpointOfThisStep) {
  RunConfig c;
  c.input = "save\nsave\ncontinue\n";
  c.touch_epoch = 2;
  const RunResult r = run(c);
  const std::string d = dir().string();
  EXPECT_NE(r.output.find(fmt::format("> Saved model-4 in {}.\n> model-4 was saved at this step "
                                      "already (in {}).\n",
                                      d, d)),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(path("model-4.data")));
  EXPECT_FALSE(fs::exists(path("model-2.data")));
  EXPECT_FALSE(fs::exists(path("model-6.data")));
}

TEST_F(ConsoleTest, SaveWithoutAModelSaverSaysSo) {
  RunConfig c;
  c.input = "save\n";
  c.with_saver = false;
  const RunResult r = run(c);
  EXPECT_EQ(r.output,
            banner(file()) +
                "> save: the trainer has no ModelSaver among its callbacks; nothing was saved.\n"
                "> \n");
}

TEST_F(ConsoleTest, SaveAfterTheSaversOwnTriggerAtThisStep) {
  RunConfig c;
  c.input = "save\n";
  c.saver_every_epoch = true;
  const RunResult r = run(c);
  EXPECT_NE(r.output.find(
                fmt::format("> model-2 was saved at this step already (in {}).\n", dir().string())),
            std::string::npos)
      << r.output;
}

TEST_F(ConsoleTest, StopEndsTrainingAtThisEpoch) {
  LogCapture log;
  RunConfig c;
  c.input = "stop\n";
  c.touch_epoch = 2;
  const RunResult r = run(c);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.last_epoch, 2);
  EXPECT_EQ(r.last_step, 4);
  EXPECT_EQ(r.lr_at_start, v({"0.1", "0.1"}));
  EXPECT_TRUE(log.contains("[Console] Stop requested at global_step=4."));
  EXPECT_TRUE(log.contains(
      "Training was stopped by exception InjectShell: stop from the console at global_step=4."));
}

TEST_F(ConsoleTest, EndOfInputContinues) {
  LogCapture log;
  RunConfig c;
  c.input = "";
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) + "> \n");
  EXPECT_TRUE(log.contains("[Console] End of input: training continues at global_step=2."));
  EXPECT_EQ(r.last_epoch, 3);
}

TEST_F(ConsoleTest, BadCommandsStayInTheConsole) {
  RunConfig c;
  c.input = "frobnicate now\n\n   \nstats please\ncontinue 2\nhelp\ncontinue\n";
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) +
                          "> Unknown command 'frobnicate'. Type 'help' for the commands.\n"
                          "> > > 'stats' takes no arguments.\n"
                          "> 'continue' takes no arguments.\n"
                          "> Commands:\n"
                          "  stats                the latest value of every statistic\n"
                          "  history <name> [n]   the last n (default 10) values of a statistic\n"
                          "  params               the hyperparameters and their ranges\n"
                          "  set <name> <value>   set a hyperparameter (within its range)\n"
                          "  save                 save a checkpoint now (with the ModelSaver)\n"
                          "  stop                 stop training at this point\n"
                          "  continue             resume training (also: end of input, Ctrl-D)\n"
                          "  help                 this list\n"
                          "> ");
  EXPECT_EQ(r.last_epoch, 3);
}

TEST_F(ConsoleTest, OpensOncePerCreationOfTheFile) {
  RunConfig c;
  c.input = "continue\ncontinue\ncontinue\n";
  c.touch_epoch = 1;
  const RunResult r = run(c);
  EXPECT_EQ(r.output, banner(file()) + "> ");
  EXPECT_FALSE(r.file_after);
}

TEST_F(ConsoleTest, APeriodicTriggerOpensItAtThatStep) {
  RunConfig c;
  c.input = "continue\n";
  c.touch_epoch = 1;
  c.every_k_steps = 3;  // global steps 3 and 6; the epoch end of epoch 1 is global_step 2
  const RunResult r = run(c);
  EXPECT_NE(r.output.find("Training is paused at global_step=3 (epoch 2)."), std::string::npos)
      << r.output;
}

TEST_F(ConsoleTest, WithoutATerminalTheFileHoldsTheCommands) {
  LogCapture log;
  RunConfig c;
  c.interactive = false;
  c.input = "stop\n";  // never read
  c.file_content =
      "# from a batch job\nstats\n\nset learning_rate 0.02\r\nset learning_rate -1\nsave\n";
  c.touch_epoch = 1;
  const RunResult r = run(c);
  EXPECT_EQ(r.output, "");
  EXPECT_EQ(r.lr_at_start, v({"0.1", "0.02", "0.02"}));
  EXPECT_TRUE(fs::exists(path("model-2.data")));
  EXPECT_FALSE(r.file_after);
  const std::vector<std::string> expected = {
      fmt::format("File {} exists, entering shell.", file()),
      fmt::format("[Console] InjectShell: the file {} exists.", file()),
      "[Console] > stats",
      "[Console] Statistics at global_step=2 (latest values):",
      "[Console]   cost = 1.0 (global_step=2)",
      "[Console] > set learning_rate 0.02",
      "[Console] At global_step=2, learning_rate changes from 0.1 to 0.02.",
      "[Console] > set learning_rate -1",
      "[Console] set: learning_rate = -1.0 is outside its range (finite and > 0); keeping "
      "learning_rate = 0.02",
      "[Console] > save",
      fmt::format("Model saved to {}/model-2.", dir().string()),
      fmt::format("[Console] Saved model-2 in {}.", dir().string()),
      "[Console] End of the commands: training continues at global_step=2.",
  };
  std::vector<std::string> got;
  bool in_shell = false;
  for (const auto& l : log.lines()) {
    if (l.find("entering shell") != std::string::npos) in_shell = true;
    if (in_shell) got.push_back(l);
    if (l.find("End of the commands") != std::string::npos) in_shell = false;
  }
  EXPECT_EQ(got, expected);
}

TEST_F(ConsoleTest, WithoutATerminalStopInTheFileStops) {
  RunConfig c;
  c.interactive = false;
  c.file_content = "stop\nset learning_rate 0.02\n";
  c.touch_epoch = 2;
  const RunResult r = run(c);
  EXPECT_EQ(r.last_epoch, 2);
  EXPECT_EQ(r.lr_at_start, v({"0.1", "0.1"}));
  EXPECT_FALSE(r.file_after);
}

TEST(InjectShell, WithoutTheFileNothingHappens) {
  LogCapture log;
  std::istringstream in("stop\n");
  std::ostringstream out;
  auto shell = std::make_shared<InjectShell>(
      "/nonexistent-dir-of-a-test/INJECT_SHELL.tmp", "console",
      InjectShellOptions().interactive(true).console(ConsoleOptions().input(&in).output(&out)));
  testing::run_noop({shell}, 2, 1, 3);
  EXPECT_EQ(out.str(), "");
  EXPECT_FALSE(log.contains("entering shell"));
  EXPECT_TRUE(log.contains(
      "Create a file '/nonexistent-dir-of-a-test/INJECT_SHELL.tmp' to open console shell."));
}

TEST_F(ConsoleTest, AfterTrainRemovesTheFile) {
  LogCapture log;
  auto late = std::make_shared<ActionCallback>();
  late->trigger_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) std::ofstream(file()).flush();  // after the shell's last trigger
  };
  std::istringstream in("stop\n");
  std::ostringstream out;
  auto shell = std::make_shared<InjectShell>(
      file(), "console",
      InjectShellOptions().interactive(true).console(ConsoleOptions().input(&in).output(&out)));
  testing::run_noop({shell, late}, 2, 1, 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_FALSE(fs::exists(file()));
  EXPECT_FALSE(log.contains("entering shell"));
}

TEST_F(ConsoleTest, ADirectoryOfThatNameIsNotTheFile) {
  fs::create_directory(file());
  LogCapture log;
  std::istringstream in("stop\n");
  std::ostringstream out;
  auto shell = std::make_shared<InjectShell>(
      file(), "console",
      InjectShellOptions().interactive(true).console(ConsoleOptions().input(&in).output(&out)));
  testing::run_noop({shell}, 2, 1, 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_FALSE(log.contains("entering shell"));
  EXPECT_TRUE(fs::is_directory(file()));
}

TEST(InjectShell, BadArguments) {
  try {
    InjectShell("", "console");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "InjectShell: file is empty; give the path of the file that opens the shell, e.g. "
              "\"INJECT_SHELL.tmp\"");
  }
  try {
    InjectShell("INJECT_SHELL.tmp", "ipython");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "InjectShell: shell must be \"console\" or \"gdb\", got \"ipython\" (tensorpack's "
              "\"ipython\" and \"pdb\" are Python's; \"console\" is the training console)");
  }
  const InjectShell defaults;
  EXPECT_EQ(defaults.file(), "INJECT_SHELL.tmp");
  EXPECT_EQ(defaults.shell(), "console");
  EXPECT_TRUE(defaults.chief_only());
}

TEST(Console, RunConsoleCommandsStopsAtTheFirstStopOrContinue) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  std::vector<ConsoleOutcome> outcomes;
  auto probe = std::make_shared<CallbackFactory>(
      CallbackFactoryOptions().trigger([&](CallbackFactory& self) {
        outcomes.push_back(run_console_commands(self.trainer(), "", {"help", "stop", "bogus"}));
        outcomes.push_back(run_console_commands(self.trainer(), "", {"continue", "stop"}));
        outcomes.push_back(run_console_commands(self.trainer(), "", {}));
      }));
  trainer.train({probe}, {}, 1, 1, 1);
  EXPECT_EQ(outcomes, std::vector<ConsoleOutcome>({ConsoleOutcome::kStop, ConsoleOutcome::kContinue,
                                                   ConsoleOutcome::kContinue}));
}

}  // namespace console_test
}  // namespace trainpack
