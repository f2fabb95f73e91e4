// ProcessTensors, TensorPrinter, DumpTensors, DumpTensorAsImage, CheckNumerics
// (docs/tensorpack-differences.md #6 and #13). Only callbacks/graph.h is included: it must bring
// these classes along, as tensorpack's callbacks/graph.py does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/command.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/step_trainer.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace tensors_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::message_of;

// A StepTrainer that records whether "img" was requested in each run.
class TensorTrainer : public testing::StepTrainer {
 public:
  std::vector<bool> img_requested;

 protected:
  void in_run(StepContext& ctx) override {
    img_requested.push_back(ctx.is_requested("img"));
    StepTrainer::in_run(ctx);
  }
};

// Records the images and summary tags the monitors receive.
class ImageRecorder : public MonitorBase {
 public:
  std::vector<std::pair<std::string, at::Tensor>> images;
  std::vector<std::string> tags;
  void process_image(const std::string& name, const at::Tensor& nhwc) override {
    images.emplace_back(name, nhwc.clone());
  }
  void process_summary(const Summary& s) override {
    for (const auto& v : s.values) tags.push_back(v.tag);
  }
};

using testing::run_command;

// True if /usr/bin/python3 can import `module`.
bool python_has(const std::string& module) {
  const std::string cmd = "/usr/bin/python3 -c 'import " + module + "' >/dev/null 2>&1 </dev/null";
  return fs::exists("/usr/bin/python3") && std::system(cmd.c_str()) == 0;
}

class TensorsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(log_dir().string());
  }
  // The logger directory, in dir() beside the scripts and dumps that are not the logger's.
  fs::path log_dir() const { return path("log"); }

  // The names of the files in `dir` that end with `suffix`, sorted.
  static std::vector<std::string> files(const fs::path& dir, const std::string& suffix) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        out.push_back(name);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Runs a python script (on /usr/bin/python3) with the given files as arguments.
  std::string python(const std::string& script, const std::vector<std::string>& names,
                     const fs::path& dir) {
    const fs::path file = path("script.py");
    std::ofstream(file) << script;
    std::string cmd = "/usr/bin/python3 " + file.string();
    for (const auto& n : names) cmd += " " + (dir / n).string();
    const auto [out, rc] = run_command(cmd + " 2>&1 </dev/null");
    EXPECT_EQ(rc, 0) << out;
    return out;
  }

  // One line per image: file name, size, mode, pixels.
  std::string describe_pngs(const std::vector<std::string>& names, const fs::path& dir) {
    return python(
        "import os, sys\n"
        "from PIL import Image\n"
        "for p in sys.argv[1:]:\n"
        "    im = Image.open(p)\n"
        // The pixels as Image.getdata() lists them (deprecated in newer Pillow): the values of
        // a one-band image, tuples of the bands of any other.
        "    data, n = im.tobytes(), len(im.getbands())\n"
        "    px = list(data) if n == 1 else [tuple(data[i:i + n]) for i in range(0, len(data), "
        "n)]\n"
        "    print(os.path.basename(p), im.format, im.size, im.mode, px)\n",
        names, dir);
  }
};

// ---------------------------------------------------------------------------------------------
// ProcessTensors

TEST(ProcessTensors, CallsFnWithTheValuesOfTheSameStepInNameOrder) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) {
    ctx.publish("x", at::full({}, static_cast<double>(gs)));
    ctx.publish("y", at::full({2}, 10 * gs, at::kLong));
  };
  std::vector<std::string> seen;
  auto cb = std::make_shared<ProcessTensors>(
      std::vector<std::string>{"y", "x"}, [&](const std::vector<at::Tensor>& v) {
        ASSERT_EQ(v.size(), 2u);
        seen.push_back(fmt::format("gs={} y={} x={}", trainer.global_step(),
                                   v[0][1].item<int64_t>(), v[1].item<double>()));
      });
  EXPECT_TRUE(cb->chief_only());
  trainer.train({cb}, {}, 2, 1, 2);
  // after_run runs after the step counter: gs already counts the step whose values arrive.
  EXPECT_THAT(seen, ElementsAre("gs=1 y=0 x=0", "gs=2 y=10 x=1", "gs=3 y=20 x=2", "gs=4 y=30 x=3"));
}

TEST(ProcessTensors, UnknownNameStopsTrainingNamingTheCallbackAndThePublishedNames) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t) {
    ctx.publish("x", at::zeros({}));
    ctx.publish("y", at::zeros({}));
  };
  int calls = 0;
  auto cb = std::make_shared<ProcessTensors>(std::vector<std::string>{"x", "nope"},
                                             [&](const std::vector<at::Tensor>&) { ++calls; });
  const std::string msg = message_of([&] { trainer.train({cb}, {}, 2, 1, 1); });
  EXPECT_THAT(msg, HasSubstr("ProcessTensors"));
  EXPECT_THAT(msg, HasSubstr("'nope'"));
  EXPECT_THAT(msg, HasSubstr("'x', 'y'"));
  EXPECT_EQ(calls, 0);
}

TEST(ProcessTensors, BadArgumentsAreRejectedAtConstruction) {
  const auto fn = [](const std::vector<at::Tensor>&) {};
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ProcessTensors({}, fn); }),
            "ProcessTensors: names is empty; give the names of tensors the step publishes");
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              ProcessTensors({"a", ""}, fn);
            }),
            "ProcessTensors: names[1] is empty");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ProcessTensors({"a"}, ProcessTensors::Fn()); }),
            "ProcessTensors: fn is empty; pass a callable");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { TensorPrinter({}); }),
            "TensorPrinter: names is empty; give the names of tensors the step publishes");
}

// ---------------------------------------------------------------------------------------------
// TensorPrinter

TEST(TensorPrinter, LogsEveryNameAtEveryHookedRun) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) {
    ctx.publish("cost", at::full({}, 0.5 + static_cast<double>(gs)));
    ctx.publish("m", at::tensor({1.0f, 2.5f, -3.0f, 4.0f}).reshape({2, 2}) * (gs + 1));
  };
  testing::LogCapture log;
  auto cb = std::make_shared<TensorPrinter>(std::vector<std::string>{"cost", "m"});
  EXPECT_TRUE(log.lines().empty());  // no construction warning (see Differences)
  EXPECT_TRUE(cb->chief_only());
  trainer.train({cb}, {}, 2, 1, 1);
  std::vector<std::string> printed;
  for (const auto& line : log.lines()) {
    if (line.rfind("cost: ", 0) == 0 || line.rfind("m: ", 0) == 0) printed.push_back(line);
  }
  EXPECT_THAT(printed, ElementsAre("cost: 0.5", "m: [[1, 2.5], [-3, 4]]", "cost: 1.5",
                                   "m: [[2, 5], [-6, 8]]"));
}

TEST(TensorPrinter, FormatsScalarsTensorsAndLargeTensors) {
  EXPECT_EQ(format_tensor_value(at::full({}, 0.6931471805599453)), "0.693147");
  EXPECT_EQ(format_tensor_value(at::full({}, 1e-7, at::kDouble)), "1e-07");
  EXPECT_EQ(format_tensor_value(at::full({}, 123456789.0, at::kDouble)), "1.23457e+08");
  EXPECT_EQ(format_tensor_value(at::full({}, std::nan(""))), "nan");
  EXPECT_EQ(format_tensor_value(at::full({1}, -std::numeric_limits<double>::infinity())), "[-inf]");
  EXPECT_EQ(format_tensor_value(at::full({}, int64_t{9007199254740993}, at::kLong)),
            "9007199254740993");
  EXPECT_EQ(format_tensor_value(at::tensor({1, 0}, at::kInt).to(at::kBool)), "[True, False]");
  EXPECT_EQ(format_tensor_value(at::tensor({0.5f, 2.0f}).to(at::kHalf)), "[0.5, 2]");
  EXPECT_EQ(format_tensor_value(at::arange(6, at::kInt).reshape({2, 1, 3})),
            "[[[0, 1, 2]], [[3, 4, 5]]]");
  EXPECT_EQ(format_tensor_value(at::zeros({2, 0})), "[[], []]");
  EXPECT_EQ(format_tensor_value(at::arange(1000, at::kLong)).size(), 4890u);  // not summarized
  EXPECT_EQ(format_tensor_value(at::arange(1001, at::kLong)), "[0, 1, 2, ..., 998, 999, 1000]");
  EXPECT_EQ(format_tensor_value(at::arange(7 * 200, at::kLong).reshape({7, 200})),
            "[[0, 1, 2, ..., 197, 198, 199], [200, 201, 202, ..., 397, 398, 399], [400, 401, 402, "
            "..., 597, 598, 599], ..., [800, 801, 802, ..., 997, 998, 999], [1000, 1001, 1002, "
            "..., 1197, 1198, 1199], [1200, 1201, 1202, ..., 1397, 1398, 1399]]");
  EXPECT_EQ(format_tensor_value(at::Tensor()), "<undefined>");
  EXPECT_EQ(format_tensor_value(at::zeros({2}, at::kComplexFloat)),
            "<tensor of dtype ComplexFloat and shape [2]>");
  // Non-contiguous: logical order.
  EXPECT_EQ(format_tensor_value(at::arange(4, at::kLong).reshape({2, 2}).t()), "[[0, 2], [1, 3]]");
}

// ---------------------------------------------------------------------------------------------
// DumpTensors

TEST_F(TensorsTest, DumpTensorsWritesOneNpzPerRunNamedAfterTheIncrementedStep) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) {
    ctx.publish("x", at::full({}, static_cast<double>(gs), at::kFloat));
    ctx.publish("m", at::arange(6, at::kLong).reshape({2, 3}) + 10 * gs);
    ctx.publish("fc/W", at::full({2}, 0.5 * gs, at::kDouble));
    ctx.publish("unused", at::zeros({3}));
  };
  auto cb = std::make_shared<DumpTensor>(std::vector<std::string>{"m", "x", "fc/W"});
  EXPECT_TRUE(cb->chief_only());
  EXPECT_EQ(cb->dir(), log_dir().string());
  trainer.train({cb}, {}, 2, 1, 2);
  const std::vector<std::string> names = files(log_dir(), ".npz");
  ASSERT_THAT(names, ElementsAre("DumpTensor-1.npz", "DumpTensor-2.npz", "DumpTensor-3.npz",
                                 "DumpTensor-4.npz"));
  EXPECT_TRUE(testing::temporary_files(log_dir()).empty());
  if (!python_has("numpy")) GTEST_SKIP() << "/usr/bin/python3 with numpy is not installed";
  EXPECT_EQ(python("import os, sys, numpy as np\n"
                   "for p in sys.argv[1:]:\n"
                   "    d = np.load(p)\n"
                   "    for k in d.files:\n"
                   "        a = d[k]\n"
                   "        print(os.path.basename(p), k, a.dtype.str, a.shape, a.tolist())\n",
                   names, log_dir()),
            "DumpTensor-1.npz m <i8 (2, 3) [[0, 1, 2], [3, 4, 5]]\n"
            "DumpTensor-1.npz x <f4 () 0.0\n"
            "DumpTensor-1.npz fc/W <f8 (2,) [0.0, 0.0]\n"
            "DumpTensor-2.npz m <i8 (2, 3) [[10, 11, 12], [13, 14, 15]]\n"
            "DumpTensor-2.npz x <f4 () 1.0\n"
            "DumpTensor-2.npz fc/W <f8 (2,) [0.5, 0.5]\n"
            "DumpTensor-3.npz m <i8 (2, 3) [[20, 21, 22], [23, 24, 25]]\n"
            "DumpTensor-3.npz x <f4 () 2.0\n"
            "DumpTensor-3.npz fc/W <f8 (2,) [1.0, 1.0]\n"
            "DumpTensor-4.npz m <i8 (2, 3) [[30, 31, 32], [33, 34, 35]]\n"
            "DumpTensor-4.npz x <f4 () 3.0\n"
            "DumpTensor-4.npz fc/W <f8 (2,) [1.5, 1.5]\n");
}

TEST_F(TensorsTest, DumpTensorsWritesIntoAGivenDirectoryWithoutALoggerDirectory) {
  logger::unset_logger_dir();
  const fs::path out = path("dumps") / "sub";
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { ctx.publish("x", at::full({1}, gs)); };
  auto cb = std::make_shared<DumpTensors>(std::vector<std::string>{"x"},
                                          DumpTensorsOptions().dir(out.string()));
  trainer.train({cb}, {}, 3, 1, 1);  // the directory is created at before_train
  EXPECT_THAT(files(out, ".npz"),
              ElementsAre("DumpTensor-1.npz", "DumpTensor-2.npz", "DumpTensor-3.npz"));
}

TEST_F(TensorsTest, DumpTensorsRejectsBadArguments) {
  using V = std::vector<std::string>;
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensors(V{}); }),
            "DumpTensors: names is empty; give the names of tensors the step publishes");
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensors(V{"a/../../x"}); }),
            "DumpTensors: name 'a/../../x' cannot be a key of an npz file: it has a '..' "
            "component");
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensors(V{"/etc/x"}); }),
            "DumpTensors: name '/etc/x' cannot be a key of an npz file: it starts with a path "
            "separator");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              DumpTensors(V{"a", "b", "a"});
            }),
            "DumpTensors: name 'a' is given twice; an npz file holds each key once");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { DumpTensors(V{"a"}, DumpTensorsOptions().dir(std::string())); }),
            "DumpTensors: DumpTensorsOptions().dir is empty");
  logger::unset_logger_dir();
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensors(V{"a"}); }),
            "DumpTensors: no directory was given and the logger directory is not set; pass one "
            "with DumpTensorsOptions().dir(dir), or call trainpack::logger::set_logger_dir(dir) "
            "first");
}

// ---------------------------------------------------------------------------------------------
// DumpTensorAsImage

TEST_F(TensorsTest, DumpTensorAsImageDumpsTheLastStepOfEachEpochScaledAndClipped) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) {
    ctx.publish(
        "img",
        at::tensor({-5.0, 0.0, 100.7, 255.0, 300.0, static_cast<double>(gs)}).reshape({2, 3}));
  };
  auto recorder = std::make_shared<ImageRecorder>();
  auto cb = std::make_shared<DumpTensorAsImage>("img", DumpTensorAsImageOptions().scale(1));
  EXPECT_TRUE(cb->chief_only());
  trainer.train({cb}, {recorder}, 3, 1, 2);
  // Fetched only in the last step of each epoch.
  EXPECT_THAT(trainer.img_requested, ElementsAre(false, false, true, false, false, true));
  const std::vector<std::string> names = files(log_dir(), ".png");
  ASSERT_THAT(names, ElementsAre("img-ep001-0.png", "img-ep002-0.png"));

  ASSERT_EQ(recorder->images.size(), 2u);
  EXPECT_EQ(recorder->images[0].first, "img");
  EXPECT_EQ(recorder->images[0].second.sizes(), (std::vector<int64_t>{1, 2, 3, 1}));
  EXPECT_TRUE(recorder->images[0].second.equal(
      at::tensor({0, 0, 100, 255, 255, 2}, at::kByte).reshape({1, 2, 3, 1})));
  EXPECT_TRUE(recorder->images[1].second.equal(
      at::tensor({0, 0, 100, 255, 255, 5}, at::kByte).reshape({1, 2, 3, 1})));
  EXPECT_THAT(recorder->tags, ElementsAre("img", "img"));

  if (!python_has("PIL")) GTEST_SKIP() << "/usr/bin/python3 with PIL is not installed";
  EXPECT_EQ(describe_pngs(names, log_dir()),
            "img-ep001-0.png PNG (3, 2) L [0, 0, 100, 255, 255, 2]\n"
            "img-ep002-0.png PNG (3, 2) L [0, 0, 100, 255, 255, 5]\n");
}

TEST_F(TensorsTest, DumpParamAsImageReadsATrainableVariableAtTriggerTime) {
  // [N=2, H=1, W=2, C=3]; the step adds 0.25, so epoch 1 ends with base + 0.25, epoch 2 + 0.5.
  at::Tensor w =
      at::tensor({0.0, 0.25, 0.5, 0.75, 1.0, -1.0, 2.0, -0.25, 0.125, 0.375, 0.625, 0.875})
          .reshape({2, 1, 2, 3});
  TensorTrainer trainer;
  trainer.graph().add_trainable_variable("conv/W", w);
  trainer.step = [&](StepContext&, int64_t) { w.add_(0.25); };  // publishes nothing
  auto recorder = std::make_shared<ImageRecorder>();
  auto cb = std::make_shared<DumpParamAsImage>("conv/W");  // default scale 255
  EXPECT_EQ(cb->prefix(), "conv/W");
  trainer.train({cb}, {recorder}, 1, 1, 2);
  EXPECT_THAT(trainer.img_requested, ElementsAre(false, false));
  const std::vector<std::string> names = files(log_dir(), ".png");
  ASSERT_THAT(names, ElementsAre("conv_W-ep001-0.png", "conv_W-ep001-1.png", "conv_W-ep002-0.png",
                                 "conv_W-ep002-1.png"));
  ASSERT_EQ(recorder->images.size(), 2u);
  EXPECT_EQ(recorder->images[1].first, "conv/W");
  EXPECT_TRUE(recorder->images[0].second.equal(
      at::tensor({63, 127, 191, 255, 255, 0, 255, 0, 95, 159, 223, 255}, at::kByte)
          .reshape({2, 1, 2, 3})));
  EXPECT_THAT(recorder->tags, ElementsAre("conv/W/0", "conv/W/1", "conv/W/0", "conv/W/1"));

  if (!python_has("PIL")) GTEST_SKIP() << "/usr/bin/python3 with PIL is not installed";
  EXPECT_EQ(describe_pngs(names, log_dir()),
            "conv_W-ep001-0.png PNG (2, 1) RGB [(63, 127, 191), (255, 255, 0)]\n"
            "conv_W-ep001-1.png PNG (2, 1) RGB [(255, 0, 95), (159, 223, 255)]\n"
            "conv_W-ep002-0.png PNG (2, 1) RGB [(127, 191, 255), (255, 255, 0)]\n"
            "conv_W-ep002-1.png PNG (2, 1) RGB [(255, 63, 159), (223, 255, 255)]\n");
}

TEST_F(TensorsTest, DumpTensorAsImageAppliesMapFuncAndPrefixToABatchOfGreyImages) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t) {
    ctx.publish("x", at::arange(20, at::kFloat));  // 1-D: an image only after map_func
  };
  auto recorder = std::make_shared<ImageRecorder>();
  auto cb = std::make_shared<DumpTensorAsImage>(
      "x", DumpTensorAsImageOptions().prefix("a/b").scale(1).map_func([](const at::Tensor& t) {
        return t.reshape({2, 2, 5});
      }));  // [N, H, W]
  trainer.train({cb}, {recorder}, 1, 1, 1);
  const std::vector<std::string> names = files(log_dir(), ".png");
  ASSERT_THAT(names, ElementsAre("a_b-ep001-0.png", "a_b-ep001-1.png"));
  ASSERT_EQ(recorder->images.size(), 1u);
  EXPECT_EQ(recorder->images[0].first, "a/b");
  EXPECT_TRUE(recorder->images[0].second.equal(at::arange(20, at::kByte).reshape({2, 2, 5, 1})));
  if (!python_has("PIL")) GTEST_SKIP() << "/usr/bin/python3 with PIL is not installed";
  EXPECT_EQ(describe_pngs(names, log_dir()),
            "a_b-ep001-0.png PNG (5, 2) L [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n"
            "a_b-ep001-1.png PNG (5, 2) L [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]\n");
}

TEST_F(TensorsTest, DumpTensorAsImageFileNamesFollowTheFileNameRule) {
  // No hidden file, no '..', no control character; the monitor tag keeps the prefix as given.
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t) { ctx.publish("x", at::zeros({2, 2})); };
  auto recorder = std::make_shared<ImageRecorder>();
  auto cb =
      std::make_shared<DumpTensorAsImage>("x", DumpTensorAsImageOptions().prefix("../.hidden\n"));
  trainer.train({cb}, {recorder}, 1, 1, 1);
  EXPECT_THAT(files(log_dir(), ".png"), ElementsAre("_._.hidden_-ep001-0.png"));
  ASSERT_EQ(recorder->images.size(), 1u);
  EXPECT_EQ(recorder->images[0].first, "../.hidden\n");
}

TEST_F(TensorsTest, DumpTensorAsImageWritesRgbaAndMapsNanToZeroAndInfinitiesToTheBounds) {
  const double inf = std::numeric_limits<double>::infinity();
  TensorTrainer trainer;
  trainer.graph().add_trainable_variable(
      "rgba", at::tensor({std::nan(""), 0.5, 1.0, 2.0, -inf, inf, 0.25, 0.0}).reshape({1, 2, 4}));
  auto cb = std::make_shared<DumpTensorAsImage>("rgba");
  trainer.train({cb}, {}, 1, 3, 3);  // starting_epoch 3: the file says ep003
  const std::vector<std::string> names = files(log_dir(), ".png");
  ASSERT_THAT(names, ElementsAre("rgba-ep003-0.png"));
  if (!python_has("PIL")) GTEST_SKIP() << "/usr/bin/python3 with PIL is not installed";
  EXPECT_EQ(describe_pngs(names, log_dir()),
            "rgba-ep003-0.png PNG (2, 1) RGBA [(0, 127, 255, 255), (0, 255, 63, 0)]\n");
}

TEST_F(TensorsTest, DumpTensorAsImageRejectsAValueThatIsNotAnImage) {
  {
    TensorTrainer trainer;
    trainer.step = [](StepContext& ctx, int64_t) { ctx.publish("x", at::zeros({6})); };
    auto cb = std::make_shared<DumpTensorAsImage>("x");
    EXPECT_EQ(message_of([&] { trainer.train({cb}, {}, 1, 1, 1); }),
              "Callback DumpTensorAsImage failed in trigger_epoch: DumpTensorAsImage('x'): a value "
              "of shape [6] is not an image (after map_func); expected [H, W], [H, W, C] with C "
              "in 1, 3, 4, [N, H, W] or [N, H, W, C] with C in 1, 3, 4, none of them 0");
  }
  for (const auto& shape : {std::vector<int64_t>{1, 2, 2, 2}, std::vector<int64_t>{0, 3},
                            std::vector<int64_t>{2, 3, 4, 1, 1}}) {
    TensorTrainer trainer;
    trainer.graph().add_trainable_variable("w", at::zeros(shape));
    auto cb = std::make_shared<DumpTensorAsImage>("w");
    EXPECT_THAT(message_of([&] { trainer.train({cb}, {}, 1, 1, 1); }),
                HasSubstr(fmt::format("DumpTensorAsImage('w'): a value of shape [{}] is not an "
                                      "image",
                                      fmt::join(shape, ", "))));
  }
  EXPECT_TRUE(files(log_dir(), ".png").empty());
}

TEST_F(TensorsTest, DumpTensorAsImageOfAStepTensorMustRunAtAnEpochEnd) {
  TensorTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t) { ctx.publish("x", at::zeros({2, 2})); };
  auto cb = std::make_shared<PeriodicTrigger>(std::make_shared<DumpTensorAsImage>("x"),
                                              PeriodicTriggerOptions().every_k_steps(1));
  EXPECT_EQ(message_of([&] { trainer.train({cb}, {}, 2, 1, 1); }),
            "Callback PeriodicTrigger-DumpTensorAsImage failed in trigger_step: "
            "DumpTensorAsImage('x'): trigger() ran at global_step 1 with no value of 'x' from that "
            "step; 'x' is not a trainable variable of the graph, so it is fetched from the last "
            "step of each "
            "epoch only: run this callback at epoch ends (e.g. "
            "PeriodicTrigger(...every_k_epochs(k)), not every_k_steps or before_train)");
}

TEST_F(TensorsTest, DumpTensorAsImageRejectsBadArguments) {
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensorAsImage(""); }),
            "DumpTensorAsImage: tensor_name is empty");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { DumpTensorAsImage("x", DumpTensorAsImageOptions().prefix(std::string())); }),
            "DumpTensorAsImage: DumpTensorAsImageOptions().prefix is empty; leave it unset to use "
            "the tensor name");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { DumpTensorAsImage("x", DumpTensorAsImageOptions().scale(std::nan(""))); }),
            "DumpTensorAsImage: DumpTensorAsImageOptions().scale must be finite, got nan");
  logger::unset_logger_dir();
  EXPECT_EQ(message_of<std::invalid_argument>([] { DumpTensorAsImage("x"); }),
            "DumpTensorAsImage: no directory was given and the logger directory is not set; pass "
            "one with DumpTensorAsImageOptions().dir(dir), or call "
            "trainpack::logger::set_logger_dir(dir) first");
}

// ---------------------------------------------------------------------------------------------
// CheckNumerics

// A trainer with one trainable variable `w` (3 finite values).
class CheckTrainer : public TensorTrainer {
 public:
  at::Tensor w = at::zeros({3});
  CheckTrainer() { graph().add_trainable_variable("w", w); }
};

const double kNaN = std::nan("");
const double kInf = std::numeric_limits<double>::infinity();

TEST(CheckNumerics, PassesWhenEverythingIsFinite) {
  CheckTrainer trainer;
  trainer.step = [&](StepContext& ctx, int64_t gs) {
    trainer.w.add_(1.0);
    ctx.publish("cost", at::full({}, 1.0 / (gs + 1)));
  };
  testing::LogCapture log;
  auto cb = std::make_shared<CheckNumerics>(CheckNumericsOptions().run_step(true).names({"cost"}));
  EXPECT_TRUE(cb->chief_only());
  trainer.train({cb}, {}, 3, 1, 2);
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_FALSE(log.contains("CheckNumerics"));
}

TEST(CheckNumerics, RunsBeforeTraining) {
  CheckTrainer trainer;
  trainer.w[1].fill_(kNaN);
  int steps = 0;
  trainer.step = [&](StepContext&, int64_t) { ++steps; };
  EXPECT_EQ(message_of([&] { trainer.train({std::make_shared<CheckNumerics>()}, {}, 2, 1, 1); }),
            "Callback CheckNumerics failed in before_train: CheckNumerics['w']: Tensor had NaN "
            "values (1 NaN, 0 Inf of 3 values) in trainable variable 'w' at global_step 0");
  EXPECT_EQ(steps, 0);
}

TEST(CheckNumerics, ChecksAtTheEndOfEveryEpoch) {
  // Inf appears in the after_epoch of epoch 2 (of 3): the check at that epoch's end fails, the
  // ones before it passed, and no step of epoch 3 runs.
  CheckTrainer trainer;
  int steps = 0;
  trainer.step = [&](StepContext&, int64_t) { ++steps; };
  auto poison = std::make_shared<testing::ActionCallback>();
  poison->after_epoch_fn = [&](testing::ActionCallback& self) {
    if (self.epoch_num() == 2) {
      trainer.w[0].fill_(kInf);
      trainer.w[2].fill_(-kInf);
    }
  };
  auto cb = std::make_shared<CheckNumerics>();
  EXPECT_EQ(message_of([&] {
              trainer.train({poison, cb}, {}, 2, 1, 3);
            }),
            "Callback CheckNumerics failed in trigger_epoch: CheckNumerics['w']: Tensor had Inf "
            "values (0 NaN, 2 Inf of 3 values) in trainable variable 'w' at global_step 4");
  EXPECT_EQ(steps, 4);
}

TEST(CheckNumerics, WithoutRunAsTriggerOnlyChecksBeforeTraining) {
  CheckTrainer trainer;
  trainer.step = [&](StepContext&, int64_t gs) {
    if (gs == 1) trainer.w[0].fill_(kNaN);
  };
  auto cb = std::make_shared<CheckNumerics>(CheckNumericsOptions().run_as_trigger(false));
  EXPECT_FALSE(cb->overrides(Hook::kBeforeRun));
  EXPECT_FALSE(cb->overrides(Hook::kAfterRun));
  trainer.train({cb}, {}, 2, 1, 2);  // the NaN is never seen
  EXPECT_EQ(trainer.global_step(), 4);
}

TEST(CheckNumerics, RunStepChecksTheVariablesAfterEveryStep) {
  CheckTrainer trainer;
  int steps = 0;
  trainer.step = [&](StepContext&, int64_t gs) {
    ++steps;
    if (gs == 2) trainer.w.fill_(kNaN);  // the third step (global_step 3 after it)
  };
  auto cb = std::make_shared<CheckNumerics>(CheckNumericsOptions().run_step(true));
  EXPECT_FALSE(cb->overrides(Hook::kBeforeRun));  // nothing to fetch
  EXPECT_TRUE(cb->overrides(Hook::kAfterRun));
  EXPECT_EQ(message_of([&] { trainer.train({cb}, {}, 5, 1, 1); }),
            "Callback CheckNumerics failed in after_run: CheckNumerics['w']: Tensor had NaN "
            "values (3 NaN, 0 Inf of 3 values) in trainable variable 'w' at global_step 3");
  EXPECT_EQ(steps, 3);
}

TEST(CheckNumerics, RunStepChecksTheNamedTensorsOfTheStep) {
  CheckTrainer trainer;
  trainer.step = [&](StepContext& ctx, int64_t gs) {
    ctx.publish("cost", at::tensor({1.0, gs == 1 ? -kInf : 2.0, gs == 1 ? kNaN : 3.0}));
  };
  auto cb = std::make_shared<CheckNumerics>(CheckNumericsOptions().run_step(true).names({"cost"}));
  EXPECT_TRUE(cb->overrides(Hook::kBeforeRun));
  EXPECT_EQ(message_of([&] { trainer.train({cb}, {}, 3, 1, 1); }),
            "Callback CheckNumerics failed in after_run: CheckNumerics['cost']: Tensor had NaN "
            "values (1 NaN, 1 Inf of 3 values) in step tensor 'cost' at global_step 2");
}

TEST(CheckNumerics, WarnsWhenThereIsNothingToCheck) {
  TensorTrainer trainer;
  testing::LogCapture log;
  trainer.train({std::make_shared<CheckNumerics>()}, {}, 1, 1, 1);
  EXPECT_TRUE(
      log.contains("WRN CheckNumerics: the graph has no trainable variables; there is nothing to "
                   "check."));
}

TEST(CheckNumerics, RejectsBadArguments) {
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { CheckNumerics(CheckNumericsOptions().names({"cost"})); }),
            "CheckNumerics: names are tensors of the step, checked after every step; set "
            "CheckNumericsOptions().run_step(true)");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              CheckNumerics(CheckNumericsOptions().run_step(true).names({"a", ""}));
            }),
            "CheckNumerics: names[1] is empty");
}

}  // namespace tensors_test
}  // namespace trainpack
