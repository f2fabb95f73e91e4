#include "trainpack/input/imgaug.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <fmt/format.h>

#include "support/command.h"
#include "support/errors.h"

namespace trainpack {
namespace imgaug_test {

namespace fs = std::filesystem;
using testing::message_of;

// [C, H, W] uint8 with value (c * 100 + y * 10 + x) % 256: every pixel tells where it came from.
at::Tensor coded(int64_t c, int64_t h, int64_t w) {
  at::Tensor t = at::empty({c, h, w}, at::kByte);
  auto a = t.accessor<uint8_t, 3>();
  for (int64_t i = 0; i < c; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        a[i][y][x] = static_cast<uint8_t>((i * 100 + y * 10 + x) % 256);
  return t;
}

// A uint8 image of pseudo-random texture with smooth parts, the same in every run.
at::Tensor texture(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  AugmentRng rng(seed, 0, 0);
  at::Tensor t = at::empty({c, h, w}, at::kByte);
  auto a = t.accessor<uint8_t, 3>();
  for (int64_t i = 0; i < c; ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        a[i][y][x] = static_cast<uint8_t>(x < w / 2 ? rng.integer(0, 255) : (y * 7 + i * 40) % 256);
  return t;
}

std::vector<Datapoint> images(int64_t n) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < n; ++i) {
    points.push_back(
        {texture(3, 10, 12, static_cast<uint64_t>(i)), at::scalar_tensor(i, at::kLong)});
  }
  return points;
}

std::vector<ImageAugmentorPtr> train_augmentors() {
  return {std::make_shared<ResizeShortestEdge>(8), std::make_shared<RandomCrop>(6, 6),
          std::make_shared<Flip>(FlipOptions().prob(0.5))};
}

// ---- AugmentRng ----

TEST(AugmentRng, FirstValuesOfAFixedSeedArePinned) {
  // A change of these numbers changes every augmentation of every saved run. They were computed
  // by an independent Python transcription of the algorithm in imgaug.h.
  AugmentRng rng(42, 3, 7);
  EXPECT_EQ(rng.next_u64(), 0xc6a5886a07085b69ULL);
  EXPECT_EQ(rng.next_u64(), 0x4fca0edff9f568b8ULL);
  EXPECT_EQ(rng.next_u64(), 0x3cb3017749ce6b49ULL);
  AugmentRng rng2(0, 0, 0);
  EXPECT_EQ(rng2.next_u64(), 0x2130748aaac80268ULL);
  AugmentRng rng3(42, 3, 7);
  EXPECT_EQ(rng3.integer(0, 9), 1);
  EXPECT_DOUBLE_EQ(rng3.uniform(0.0, 1.0), 0.31167691200422143);
}

TEST(AugmentRng, IsAPureFunctionOfSeedPassAndPosition) {
  AugmentRng a(5, 1, 2), b(5, 1, 2);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64());
  const uint64_t base = AugmentRng(5, 1, 2).next_u64();
  EXPECT_NE(AugmentRng(6, 1, 2).next_u64(), base);
  EXPECT_NE(AugmentRng(5, 2, 2).next_u64(), base);
  EXPECT_NE(AugmentRng(5, 1, 3).next_u64(), base);
  // Swapping pass and position gives another stream.
  EXPECT_NE(AugmentRng(5, 2, 1).next_u64(), base);
  std::set<uint64_t> firsts;
  for (int64_t pass = 0; pass < 20; ++pass)
    for (int64_t pos = 0; pos < 50; ++pos) firsts.insert(AugmentRng(0, pass, pos).next_u64());
  EXPECT_EQ(firsts.size(), 1000u);
}

TEST(AugmentRng, IntegerCoversItsRangeUniformly) {
  AugmentRng rng(1, 0, 0);
  std::vector<int> counts(7, 0);
  const int n = 70000;
  for (int i = 0; i < n; ++i) {
    const int64_t v = rng.integer(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
    ++counts[static_cast<size_t>(v + 3)];
  }
  // 10000 expected each; 5 standard deviations is about 480.
  for (int c : counts) EXPECT_NEAR(c, n / 7, 480);
  EXPECT_EQ(rng.integer(4, 4), 4);
  const int64_t big = rng.integer(INT64_MIN, INT64_MAX);  // the full range draws one value
  (void)big;
  EXPECT_THROW(rng.integer(2, 1), std::invalid_argument);
}

TEST(AugmentRng, UniformAndBernoulliStayInRange) {
  AugmentRng rng(9, 0, 0);
  int trues = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.uniform(2.0, 3.0);
    ASSERT_GE(u, 2.0);
    ASSERT_LT(u, 3.0);
    trues += rng.bernoulli(0.25);
  }
  EXPECT_NEAR(trues, 2500, 220);
  EXPECT_FALSE(rng.bernoulli(0.0));
  EXPECT_TRUE(rng.bernoulli(1.0));
  EXPECT_THROW(rng.bernoulli(1.5), std::invalid_argument);
  EXPECT_THROW(rng.uniform(1.0, 0.0), std::invalid_argument);
}

// ---- crops ----

TEST(RandomCrop, TakesTheRowOffsetThenTheColumnOffsetFromTheRng) {
  const at::Tensor img = coded(2, 6, 9);
  RandomCrop crop(3, 4);
  AugmentRng rng(11, 0, 0), same(11, 0, 0);
  const int64_t y0 = same.integer(0, 3), x0 = same.integer(0, 5);
  const at::Tensor out = crop.augment(img, rng);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(out.equal(img.slice(1, y0, y0 + 3).slice(2, x0, x0 + 4)));
  EXPECT_EQ(rng.next_u64(), same.next_u64());  // exactly two draws
  EXPECT_EQ(crop.describe(), "RandomCrop(3x4)");
}

TEST(RandomCrop, EveryOffsetOccursAndTheInputIsNotShared) {
  const at::Tensor img = coded(1, 3, 3);
  RandomCrop crop(2, 2);
  std::set<int> corners;
  for (int64_t pos = 0; pos < 200; ++pos) {
    AugmentRng rng(0, 0, pos);
    corners.insert(crop.augment(img, rng)[0][0][0].item<int>());
  }
  EXPECT_EQ(corners, (std::set<int>{0, 1, 10, 11}));
  AugmentRng rng(0, 0, 0);
  const at::Tensor whole = RandomCrop(3, 3).augment(img, rng);
  EXPECT_TRUE(whole.equal(img));
  EXPECT_NE(whole.data_ptr(), img.data_ptr());
}

TEST(RandomCrop, ASmallerImageIsAnErrorThatSaysToResizeFirst) {
  AugmentRng rng(0, 0, 0);
  const std::string msg =
      message_of<std::invalid_argument>([&] { RandomCrop(28, 28).augment(coded(3, 20, 30), rng); });
  EXPECT_NE(msg.find("RandomCrop(28x28)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("20x30"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ResizeShortestEdge(28) before RandomCrop"), std::string::npos) << msg;
}

TEST(CenterCrop, OffsetsRoundHalfToEvenAsTorchvision) {
  // H - h = 3: round(1.5) = 2; W - w = 1: round(0.5) = 0; W - w = 5: round(2.5) = 2.
  AugmentRng rng(0, 0, 0);
  const at::Tensor img = coded(1, 7, 6);
  const at::Tensor out = CenterCrop(4, 5).augment(img, rng);
  EXPECT_TRUE(out.equal(img.slice(1, 2, 6).slice(2, 0, 5)));
  const at::Tensor out2 = CenterCrop(4, 1).augment(img, rng);
  EXPECT_TRUE(out2.equal(img.slice(1, 2, 6).slice(2, 2, 3)));
  // Even differences: the middle.
  EXPECT_TRUE(CenterCrop(3, 2).augment(img, rng).equal(img.slice(1, 2, 5).slice(2, 2, 4)));
  const std::string msg =
      message_of<std::invalid_argument>([&] { CenterCrop(8, 2).augment(img, rng); });
  EXPECT_NE(msg.find("CenterCrop(8x2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resize"), std::string::npos) << msg;
}

TEST(Crops, BadDimensionsAreRefusedAtConstruction) {
  EXPECT_NE(message_of<std::invalid_argument>([] { RandomCrop(0, 3); }).find("RandomCrop"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] { CenterCrop(3, -1); }).find("width=-1"),
            std::string::npos);
}

// ---- Flip ----

TEST(Flip, HorizontalAndVerticalMirrorTheRightAxis) {
  const at::Tensor img = coded(2, 3, 4);
  AugmentRng rng(0, 0, 0);
  EXPECT_TRUE(Flip(FlipOptions().prob(1.0)).augment(img, rng).equal(img.flip({2})));
  EXPECT_TRUE(Flip(FlipOptions().horizontal(false).vertical(true).prob(1.0))
                  .augment(img, rng)
                  .equal(img.flip({1})));
  const at::Tensor kept = Flip(FlipOptions().prob(0.0)).augment(img, rng);
  EXPECT_TRUE(kept.equal(img));
  EXPECT_NE(kept.data_ptr(), img.data_ptr());
  const at::Tensor f = at::arange(12, at::kFloat).reshape({1, 3, 4});
  EXPECT_TRUE(Flip(FlipOptions().prob(1.0)).augment(f, rng).equal(f.flip({2})));
}

TEST(Flip, FlipsWhenOneBernoulliDrawSaysSo) {
  const at::Tensor img = coded(1, 2, 5);
  const Flip flip(FlipOptions().prob(0.5));
  int flipped = 0;
  for (int64_t pos = 0; pos < 400; ++pos) {
    AugmentRng rng(3, 1, pos), same(3, 1, pos);
    const bool expect = same.bernoulli(0.5);
    const at::Tensor out = flip.augment(img, rng);
    EXPECT_TRUE(out.equal(expect ? img.flip({2}) : img));
    flipped += expect;
  }
  EXPECT_NEAR(flipped, 200, 50);
  EXPECT_EQ(flip.describe(), "Flip(horizontal, p=0.5)");
}

TEST(Flip, BadOptionsAreRefused) {
  EXPECT_NE(message_of<std::invalid_argument>([] { Flip(FlipOptions().prob(1.5)); }).find("prob"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] {
              Flip(FlipOptions().vertical(true));
            }).find("exactly one"),
            std::string::npos);
  EXPECT_NE(
      message_of<std::invalid_argument>([] { Flip(FlipOptions().horizontal(false)); }).find("Flip"),
      std::string::npos);
}

// ---- Normalize ----

TEST(Normalize, Uint8BecomesFloatAsToTensorThenNormalize) {
  at::Tensor img = at::empty({2, 1, 2}, at::kByte);
  auto a = img.accessor<uint8_t, 3>();
  a[0][0][0] = 0;
  a[0][0][1] = 255;
  a[1][0][0] = 51;
  a[1][0][1] = 204;
  AugmentRng rng(0, 0, 0);
  const at::Tensor out = Normalize({0.5, 0.25}, {0.5, 0.25}).augment(img, rng);
  ASSERT_EQ(out.scalar_type(), at::kFloat);
  auto o = out.accessor<float, 3>();
  EXPECT_FLOAT_EQ(o[0][0][0], -1.0f);
  EXPECT_FLOAT_EQ(o[0][0][1], 1.0f);
  EXPECT_FLOAT_EQ(o[1][0][0], (51.0f / 255.0f - 0.25f) / 0.25f);
  EXPECT_FLOAT_EQ(o[1][0][1], (204.0f / 255.0f - 0.25f) / 0.25f);
  // Float input is already in [0, 1], and keeps its dtype.
  const at::Tensor f = at::full({2, 1, 1}, 0.75, at::kDouble);
  const at::Tensor fo = Normalize({0.5, 0.0}, {0.5, 2.0}).augment(f, rng);
  ASSERT_EQ(fo.scalar_type(), at::kDouble);
  EXPECT_DOUBLE_EQ(fo[0][0][0].item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(fo[1][0][0].item<double>(), 0.375);
  EXPECT_EQ(Normalize({0.5}, {0.25}).describe(), "Normalize(mean=[0.5], std=[0.25])");
}

TEST(Normalize, ChannelCountsAndBadArgumentsAreNamed) {
  AugmentRng rng(0, 0, 0);
  const std::string msg = message_of<std::invalid_argument>([&] {
    Normalize({0.5, 0.5, 0.5}, {1, 1, 1}).augment(coded(1, 2, 2), rng);
  });
  EXPECT_NE(msg.find("1 channels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("have 3"), std::string::npos) << msg;
  EXPECT_NE(message_of<std::invalid_argument>([] { Normalize({}, {}); }).find("mean is empty"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] { Normalize({0.5}, {0.0}); }).find("std[0]"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] {
              Normalize({0.5}, {1, 1});
            }).find("std 2"),
            std::string::npos);
}

// ---- ResizeShortestEdge ----

TEST(ResizeShortestEdge, KeepsTheAspectRoundingTheLongerSideAsTensorpack) {
  const ResizeShortestEdge r(10);
  EXPECT_EQ(r.output_size(20, 30), (std::pair<int64_t, int64_t>{10, 15}));  // landscape
  EXPECT_EQ(r.output_size(30, 20), (std::pair<int64_t, int64_t>{15, 10}));  // portrait
  EXPECT_EQ(r.output_size(20, 20), (std::pair<int64_t, int64_t>{10, 10}));
  // 10 * 33 / 20 = 16.5: rounded up (torchvision would truncate to 16).
  EXPECT_EQ(r.output_size(20, 33), (std::pair<int64_t, int64_t>{10, 17}));
  EXPECT_EQ(r.output_size(7, 9), (std::pair<int64_t, int64_t>{10, 13}));  // 12.86: enlarged
  AugmentRng rng(0, 0, 0);
  EXPECT_EQ(r.augment(coded(3, 30, 20), rng).sizes(), (std::vector<int64_t>{3, 15, 10}));
  EXPECT_EQ(r.augment(coded(1, 20, 33), rng).sizes(), (std::vector<int64_t>{1, 10, 17}));
  EXPECT_EQ(r.describe(), "ResizeShortestEdge(10)");
}

TEST(ResizeShortestEdge, Uint8IsComputedInFloatThenRoundedHalfToEven) {
  // Halving a row of 2 pixels into 1: the mean of the two. 0 and 1 give 0.5 -> 0 (half to
  // even), 1 and 2 give 1.5 -> 2, 254 and 255 give 254.5 -> 254.
  at::Tensor img = at::empty({3, 2, 4}, at::kByte);
  auto a = img.accessor<uint8_t, 3>();
  const uint8_t pairs[3][2] = {{0, 1}, {1, 2}, {254, 255}};
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 4; ++x) a[c][y][x] = pairs[c][(x / 2 + y) % 2];
  AugmentRng rng(0, 0, 0);
  const at::Tensor out = ResizeShortestEdge(1).augment(img, rng);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{3, 1, 2}));
  ASSERT_EQ(out.scalar_type(), at::kByte);
  EXPECT_EQ(out[0][0][0].item<int>(), 0);
  EXPECT_EQ(out[1][0][0].item<int>(), 2);
  EXPECT_EQ(out[2][0][1].item<int>(), 254);
  // The float path keeps the exact mean.
  const at::Tensor f = ResizeShortestEdge(1).augment(img.to(at::kFloat), rng);
  EXPECT_FLOAT_EQ(f[2][0][1].item<float>(), 254.5f);
}

TEST(ResizeShortestEdge, FloatMatchesATensAntialiasedBilinearKernel) {
  AugmentRng rng(0, 0, 0);
  const at::Tensor img = texture(3, 37, 53, 5).to(at::kFloat);
  for (int64_t size : {5, 16, 36, 37, 60}) {
    const ResizeShortestEdge r(size);
    const auto [h, w] = r.output_size(37, 53);
    const at::Tensor expected =
        at::_upsample_bilinear2d_aa(img.unsqueeze(0), {h, w}, false).squeeze(0);
    const at::Tensor got = r.augment(img, rng);
    ASSERT_EQ(got.sizes(), expected.sizes()) << size;
    // Values 0..255 in float32: the two differ by an ulp or two (3e-5) where they differ.
    EXPECT_LT(got.sub(expected).abs().max().item<double>(), 1e-3) << "size " << size;
  }
}

bool torchvision_available() {
  return fs::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import torchvision' >/dev/null 2>&1 </dev/null") == 0;
}

TEST(ResizeShortestEdge, Uint8MatchesTorchvisionWithinOneGreyLevel) {
  if (!torchvision_available()) {
    GTEST_SKIP() << "/usr/bin/python3 with torchvision is not installed (Debian: apt-get install "
                    "python3-torchvision); the comparison with torchvision's resize is skipped";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("trainpack_imgaug_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // One Python process for every case (importing torch takes seconds): case i is read from
  // in<i>.bin, resized to the size on line i of cases.txt, and written to out<i>.bin.
  const fs::path script = dir / "resize.py";
  std::ofstream(script)
      << "import sys, torch\n"
         "import torchvision.transforms.functional as F\n"
         "d = sys.argv[1]\n"
         "for i, line in enumerate(open(d + '/cases.txt')):\n"
         "    c, h, w, oh, ow = map(int, line.split())\n"
         "    data = bytearray(open(f'{d}/in{i}.bin', 'rb').read())\n"
         "    img = torch.frombuffer(data, dtype=torch.uint8).reshape(c, h, w)\n"
         "    out = F.resize(img, [oh, ow], antialias=True)\n"
         "    open(f'{d}/out{i}.bin', 'wb').write(out.contiguous().numpy().tobytes())\n";
  struct Case {
    int64_t c, h, w, size;
  };
  // Shrinking landscape and portrait (by up to 4x), a slight shrink, and an enlargement.
  const std::vector<Case> cases = {
      {3, 37, 53, 16}, {3, 64, 48, 12}, {1, 30, 40, 29}, {3, 9, 7, 20}};
  std::vector<at::Tensor> inputs;
  {
    std::ofstream list(dir / "cases.txt");
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& k = cases[i];
      inputs.push_back(texture(k.c, k.h, k.w, static_cast<uint64_t>(k.size)));
      const auto [oh, ow] = ResizeShortestEdge(k.size).output_size(k.h, k.w);
      list << k.c << " " << k.h << " " << k.w << " " << oh << " " << ow << "\n";
      std::ofstream(dir / fmt::format("in{}.bin", i), std::ios::binary)
          .write(static_cast<const char*>(inputs[i].data_ptr()),
                 static_cast<std::streamsize>(inputs[i].numel()));
    }
  }
  const auto [text, rc] = testing::run_command(
      fmt::format("/usr/bin/python3 {} {} 2>&1", script.string(), dir.string()));
  ASSERT_EQ(rc, 0) << text;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    const ResizeShortestEdge r(k.size);
    const auto [oh, ow] = r.output_size(k.h, k.w);
    std::ifstream f(dir / fmt::format("out{}.bin", i), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), k.c * oh * ow);
    const at::Tensor expected =
        at::from_blob(const_cast<char*>(bytes.data()), {k.c, oh, ow}, at::kByte).clone();
    AugmentRng rng(0, 0, 0);
    const at::Tensor got = r.augment(inputs[i], rng);
    ASSERT_EQ(got.sizes(), expected.sizes());
    const int diff = got.to(at::kInt).sub(expected.to(at::kInt)).abs().max().item<int>();
    EXPECT_LE(diff, 1) << k.h << "x" << k.w << " -> " << oh << "x" << ow;
  }
  fs::remove_all(dir);
}

TEST(ResizeShortestEdge, BadSizeAndDtypeAreRefused) {
  EXPECT_NE(message_of<std::invalid_argument>([] {
              ResizeShortestEdge(0);
            }).find("ResizeShortestEdge: size=0"),
            std::string::npos);
  AugmentRng rng(0, 0, 0);
  EXPECT_NE(message_of<std::invalid_argument>([&] {
              ResizeShortestEdge(2).augment(at::zeros({1, 4, 4}, at::kInt), rng);
            }).find("uint8 or floating"),
            std::string::npos);
}

// ---- every augmentor ----

TEST(ImageAugmentor, ATensorThatIsNot3DIsNamedWithItsShape) {
  AugmentRng rng(0, 0, 0);
  const std::vector<ImageAugmentorPtr> all = {
      std::make_shared<ResizeShortestEdge>(4),
      std::make_shared<RandomCrop>(2, 2),
      std::make_shared<CenterCrop>(2, 2),
      std::make_shared<Flip>(),
      std::make_shared<Normalize>(std::vector<double>{0.5}, std::vector<double>{0.5}),
      std::make_shared<AugmentorList>(std::vector<ImageAugmentorPtr>{})};
  for (const auto& aug : all) {
    const std::string msg = message_of<std::invalid_argument>([&] {
      aug->augment(at::zeros({28, 28}, at::kByte), rng);
    });
    EXPECT_NE(msg.find(aug->describe() + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[28, 28]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[C, H, W]"), std::string::npos) << msg;
  }
}

TEST(AugmentorList, AppliesInOrderDrawingFromOneRng) {
  const AugmentorList list(train_augmentors());
  EXPECT_EQ(list.describe(),
            "AugmentorList([ResizeShortestEdge(8), RandomCrop(6x6), Flip(horizontal, p=0.5)])");
  const at::Tensor img = texture(3, 10, 12, 1);
  AugmentRng rng(4, 2, 9), same(4, 2, 9);
  at::Tensor expected = img;
  for (const auto& aug : train_augmentors()) expected = aug->augment(expected, same);
  const at::Tensor before = img.clone();
  EXPECT_TRUE(list.augment(img, rng).equal(expected));
  EXPECT_TRUE(img.equal(before));  // the input is never modified
  EXPECT_THROW(AugmentorList({nullptr}), std::invalid_argument);
}

// ---- AugmentImageComponent ----

// The image of every datapoint of one pass, from the flow's current position.
std::vector<at::Tensor> drain_images(DataFlow& ds) {
  std::vector<at::Tensor> out;
  while (auto dp = ds.next()) out.push_back((*dp)[0]);
  return out;
}

TEST(AugmentImageComponent, AugmentsOneComponentWithTheRngOfPassAndPosition) {
  const auto points = images(4);
  auto ds = std::make_shared<AugmentImageComponent>(std::make_shared<DataFromList>(points),
                                                    train_augmentors(),
                                                    AugmentImageComponentOptions().seed(7));
  ds->reset_state();
  ds->begin_pass(2);
  const AugmentorList list(train_augmentors());
  for (int64_t pos = 0; pos < 4; ++pos) {
    auto dp = ds->next();
    ASSERT_TRUE(dp);
    AugmentRng rng(7, 2, pos);
    EXPECT_TRUE((*dp)[0].equal(list.augment(points[static_cast<size_t>(pos)][0], rng)));
    EXPECT_EQ((*dp)[1].item<int64_t>(), pos);  // the label passes unchanged
  }
  EXPECT_FALSE(ds->next());
  EXPECT_EQ(ds->size(), 4);
}

TEST(AugmentImageComponent, SeekGivesWhatIteratingGives) {
  auto make = [] {
    return std::make_shared<AugmentImageComponent>(
        std::make_shared<DataFromList>(images(6), DataFromListOptions().shuffle(true).seed(3)),
        train_augmentors(), AugmentImageComponentOptions().seed(1));
  };
  auto uninterrupted = make();
  uninterrupted->begin_pass(1);
  const std::vector<at::Tensor> all = drain_images(*uninterrupted);
  ASSERT_EQ(all.size(), 6u);
  auto resumed = make();
  ASSERT_TRUE(resumed->seekable());
  resumed->begin_pass(1);
  resumed->seek(4);
  const std::vector<at::Tensor> rest = drain_images(*resumed);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_TRUE(rest[0].equal(all[4]));
  EXPECT_TRUE(rest[1].equal(all[5]));
}

TEST(AugmentImageComponent, EveryPassDrawsAnew) {
  // Without shuffling, the same source images in both passes: only the augmentation differs.
  auto ds = std::make_shared<AugmentImageComponent>(std::make_shared<DataFromList>(images(8)),
                                                    train_augmentors());
  ds->begin_pass(0);
  const auto pass0 = drain_images(*ds);
  ds->begin_pass();
  const auto pass1 = drain_images(*ds);
  ASSERT_EQ(pass0.size(), pass1.size());
  int same = 0;
  for (size_t i = 0; i < pass0.size(); ++i) same += pass0[i].equal(pass1[i]);
  EXPECT_LT(same, 8);
  ds->begin_pass(0);
  const auto again = drain_images(*ds);
  for (size_t i = 0; i < pass0.size(); ++i) EXPECT_TRUE(again[i].equal(pass0[i]));
}

TEST(AugmentImageComponent, ThreadsInAnyOrderDrawWhatOneThreadDraws) {
  const auto points = images(12);
  auto ds = std::make_shared<AugmentImageComponent>(std::make_shared<DataFromList>(points),
                                                    train_augmentors(),
                                                    AugmentImageComponentOptions().seed(9));
  ds->begin_pass(3);
  const std::vector<at::Tensor> sequential = drain_images(*ds);
  // Four threads, each taking every fourth datapoint from the end of the pass backwards.
  const AugmentorList list(train_augmentors());
  std::vector<at::Tensor> parallel(points.size());
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t pos = 11 - t; pos >= 0; pos -= 4) {
        AugmentRng rng(9, 3, pos);
        parallel[static_cast<size_t>(pos)] = list.augment(points[static_cast<size_t>(pos)][0], rng);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(sequential.size(), parallel.size());
  for (size_t i = 0; i < parallel.size(); ++i) EXPECT_TRUE(parallel[i].equal(sequential[i])) << i;
}

TEST(AugmentImageComponent, DescribesItselfAndForwardsSeekability) {
  auto ds = std::make_shared<AugmentImageComponent>(std::make_shared<DataFromList>(images(2)),
                                                    train_augmentors());
  EXPECT_EQ(ds->describe(),
            "AugmentImageComponent(index=0, [ResizeShortestEdge(8), RandomCrop(6x6), "
            "Flip(horizontal, p=0.5)]) over DataFromList (2 datapoints)");
  auto gen = std::make_shared<DataFromGenerator>([] { return std::optional<Datapoint>(); });
  AugmentImageComponent over_gen(gen, {}, AugmentImageComponentOptions().index(1).seed(5));
  EXPECT_FALSE(over_gen.seekable());
  EXPECT_EQ(over_gen.first_unseekable(), gen.get());
  EXPECT_EQ(over_gen.describe(),
            "AugmentImageComponent(index=1, seed=5, []) over DataFromGenerator");
}

TEST(AugmentImageComponent, ErrorsAreNamed) {
  EXPECT_NE(message_of<std::invalid_argument>([] {
              AugmentImageComponent(nullptr, {});
            }).find("AugmentImageComponent: null dataflow"),
            std::string::npos);
  EXPECT_NE(message_of<std::invalid_argument>([] {
              AugmentImageComponent(std::make_shared<DataFromList>(images(1)), {},
                                    AugmentImageComponentOptions().index(-1));
            }).find("index=-1"),
            std::string::npos);
  AugmentImageComponent ds(std::make_shared<DataFromList>(images(1)), {},
                           AugmentImageComponentOptions().index(2));
  ds.begin_pass();
  const std::string msg = message_of<std::invalid_argument>([&] { ds.next(); });
  EXPECT_NE(msg.find("has 2 components"), std::string::npos) << msg;
  EXPECT_NE(msg.find("index=2"), std::string::npos) << msg;
}

}  // namespace imgaug_test
}  // namespace trainpack
