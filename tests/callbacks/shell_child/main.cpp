// trainpack_shell_child: the process that inject_shell_test.cpp drives through a pseudo-terminal
// (or with stdin closed, or stopped by SIGSTOP). It trains a NoOpTrainer, 3 steps per epoch, with a
// `learning_rate` graph variable (0.1, finite and > 0), a stat `cost` = 1/epoch put at every epoch
// end, an InjectShell on `file`, and a ModelSaver that saves only when the console asks (its own
// trigger is every 1000 epochs). Log lines (stdout, and <log dir>/log.log) that the test reads:
//   [report] epoch <e> starts with learning_rate <lr>        before_epoch
//   [report] after_train at global_step=<gs> epoch=<e>       after_train
//
//   trainpack_shell_child <log dir> <file> <shell> <touch epoch> <max epoch> [every k steps]
// <touch epoch> > 0: the file is created (empty) in that epoch's before_epoch, as a person would
// create it; 0: not created by the child. [every k steps]: InjectShell runs in a PeriodicTrigger of
// that many steps instead of at epoch ends.
// Exit status: 0 when training ended (finished or stopped), 128+signal when a signal stopped it,
// 1 on an error (printed to stderr).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "trainpack/callbacks/misc.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

#include "programs/programs.h"
#include "support/learning_rate.h"

namespace shell_child {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

class Report : public Callback {
 public:
  Report(std::string file, int64_t touch_epoch) : file_(std::move(file)), touch_(touch_epoch) {}

 protected:
  void _before_epoch() override {
    TP_LOG_INFO("[report] epoch {} starts with learning_rate {}", epoch_num(),
                python_float_repr(graph().variable("learning_rate").get()));
    if (epoch_num() == touch_) std::ofstream(file_).flush();
  }
  void _trigger() override {
    trainer().monitors().put_scalar("cost", 1.0 / static_cast<double>(epoch_num()));
  }
  void _after_train() override {
    TP_LOG_INFO("[report] after_train at global_step={} epoch={}", global_step(), epoch_num());
  }

 private:
  std::string file_;
  int64_t touch_;
};

}  // namespace shell_child

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_shell_child.
int shell_child_main(int argc, char** argv) {
  using namespace shell_child;  // NOLINT(google-build-using-namespace): its own helpers
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr,
                 "usage: %s <log dir> <file> <shell> <touch epoch> <max epoch> [every k steps]\n",
                 argv[0]);
    return 2;
  }
  try {
    logger::set_logger_dir(argv[1], 'k');
    const std::string file = argv[2];
    const int64_t touch_epoch = std::atoll(argv[4]);
    const int64_t max_epoch = std::atoll(argv[5]);
    double lr = 0.1;
    NoOpTrainer trainer;
    trainpack::testing::add_learning_rate_variable(trainer.graph(), &lr);
    CallbackPtr shell = std::make_shared<InjectShell>(file, argv[3]);
    if (argc == 7) {
      shell = std::make_shared<PeriodicTrigger>(
          shell, PeriodicTriggerOptions().every_k_steps(std::atoll(argv[6])));
    }
    std::vector<CallbackPtr> callbacks = {
        std::make_shared<Report>(file, touch_epoch), shell,
        std::make_shared<PeriodicTrigger>(std::make_shared<ModelSaver>(),
                                          PeriodicTriggerOptions().every_k_epochs(1000))};
    trainer.train(callbacks, {}, /*steps_per_epoch=*/3, 1, max_epoch);
    return exit_code_for_signal(trainer.received_signal());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_shell_child: %s\n", e.what());
    return 1;
  }
}
