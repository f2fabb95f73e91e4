// What launch_train_with_config refuses before the first epoch, each with a message that names
// the cause and the fix: a training input of no batch per pass.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/linear_regression.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/shard.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {
namespace config_checks_test {

std::vector<Datapoint> points(int n) {
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({torch::tensor({static_cast<float>(i), 1.0f}), torch::tensor({1.0f})});
  }
  return out;
}

// A callback that counts the epochs that began.
class EpochCounter : public Callback {
 public:
  int epochs = 0;

 protected:
  void _before_epoch() override { ++epochs; }
};

// Trains `flow` for 3 epochs; returns the error's message, "<no exception>" when training ran.
std::string train_on(const DataFlowPtr& flow, std::shared_ptr<EpochCounter> counter) {
  return testing::message_of<std::invalid_argument>([&] {
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(TrainConfig()
                                 .model(std::make_shared<testing::LinearRegressionModel>())
                                 .dataflow(flow)
                                 .callbacks({counter})
                                 .extra_callbacks(std::vector<CallbackPtr>{})
                                 .monitors(std::vector<MonitorPtr>{})
                                 .max_epoch(3),
                             trainer);
  });
}

TEST(ConfigChecks, ABatchLargerThanTheDataSetIsRefusedBeforeTheFirstEpoch) {
  // 1600 datapoints in batches of 4096 without remainder: no batch at all. It ran three empty
  // epochs, validated an untrained model and saved it as the best, and exited 0.
  auto counter = std::make_shared<EpochCounter>();
  const std::string what = train_on(
      std::make_shared<BatchData>(std::make_shared<DataFromList>(points(1600)), 4096), counter);
  EXPECT_EQ(what,
            "TrainConfig: the training input yields no batch per pass (BatchData(batch_size=4096) "
            "over DataFromList (1600 datapoints)), so an epoch would have no step. A batch larger "
            "than the data set drops it all: use a smaller batch or BatchData's remainder; or the "
            "data is not where it was looked for (a folder one level off?). "
            "TrainConfig().steps_per_epoch(n) overrides this.");
  EXPECT_EQ(counter->epochs, 0);
}

TEST(ConfigChecks, AnEmptyDataSetIsRefusedNamingTheChain) {
  auto counter = std::make_shared<EpochCounter>();
  const std::string what = train_on(
      std::make_shared<MapData>(
          std::make_shared<BatchData>(std::make_shared<DataFromList>(points(0)), 8, true),
          [](Datapoint dp) -> std::optional<Datapoint> { return dp; }),
      counter);
  EXPECT_NE(what.find("(MapData over BatchData(batch_size=8, remainder=true) over DataFromList "
                      "(0 datapoints))"),
            std::string::npos)
      << what;
  EXPECT_EQ(counter->epochs, 0);
}

TEST(ConfigChecks, OneBatchIsEnough) {
  auto counter = std::make_shared<EpochCounter>();
  EXPECT_EQ(train_on(std::make_shared<BatchData>(std::make_shared<DataFromList>(points(8)), 8),
                     counter),
            "<no exception>");
  EXPECT_EQ(counter->epochs, 3);
}

TEST(DataFlowDescribe, NamesEachFlowOfTheChain) {
  auto list = std::make_shared<DataFromList>(points(10));
  EXPECT_EQ(list->describe(), "DataFromList (10 datapoints)");
  // The seed decides a shuffled list's order: another seed is other data.
  EXPECT_EQ(DataFromList(points(10), DataFromListOptions().shuffle(true).seed(7)).describe(),
            "DataFromList (10 datapoints, shuffled with seed 7)");
  // The same on every rank: each rank compares it with the chief's checkpoint.
  EXPECT_EQ(ShardData(list, 1, 2).describe(), ShardData(list, 0, 2).describe());
  EXPECT_EQ(ShardData(list, 1, 2).describe(),
            "ShardData(world_size=2) over DataFromList (10 datapoints)");
  DataFromGenerator unknown([]() -> std::optional<Datapoint> { return std::nullopt; });
  EXPECT_EQ(unknown.describe(), "DataFromGenerator");
}

}  // namespace config_checks_test
}  // namespace trainpack
