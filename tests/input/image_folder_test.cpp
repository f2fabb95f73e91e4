#include "trainpack/input/image_folder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "support/errors.h"
#include "support/temp_dir.h"
#include "trainpack/utils/png.h"

namespace trainpack {
namespace image_folder_test {

namespace fs = std::filesystem;
using testing::message_of;
using testing::ScopedTempDir;

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A grey PNG of height x width whose pixel (y, x) is (value + y * width + x) mod 256.
std::string grey_png(int64_t height, int64_t width, int value) {
  std::vector<uint8_t> pixels(static_cast<size_t>(height * width));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((value + i) % 256);
  return encode_png(pixels.data(), height, width, 1);
}

// root/c<k>/<i>.png for k < classes, i < per_class: 12 x 10 grey images, each of its own value.
void make_folder(const fs::path& root, int classes, int per_class) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      write_bytes(root / ("c" + std::to_string(c)) / (std::to_string(i) + ".png"),
                  grey_png(12, 10, c * 50 + i));
    }
  }
}

std::vector<Datapoint> read_pass(DataFlow& ds) {
  std::vector<Datapoint> out;
  while (auto dp = ds.next()) out.push_back(*dp);
  return out;
}

void expect_same(const std::vector<Datapoint>& a, const std::vector<Datapoint>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k) {
      EXPECT_TRUE(a[i][k].equal(b[i][k])) << "datapoint " << i << ", component " << k;
    }
  }
}

ImageFolderOptions augmented(int64_t threads) {
  return ImageFolderOptions()
      .shuffle(true)
      .seed(5)
      .num_threads(threads)
      .decode(ImageDecodeOptions().channels(ImageChannels::kGrey))
      .augmentors(
          {std::make_shared<RandomCrop>(8, 8), std::make_shared<Flip>(),
           std::make_shared<Normalize>(std::vector<double>{0.5}, std::vector<double>{0.25})});
}

TEST(ImageFolder, DecodesEveryImageWithItsLabel) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 2, 3);
  ImageFolder ds(dir.path().string(),
                 ImageFolderOptions().decode(ImageDecodeOptions().channels(ImageChannels::kGrey)));
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"c0", "c1"}));
  ds.reset_state();
  ds.begin_pass();
  const auto points = read_pass(ds);
  ASSERT_EQ(points.size(), 6u);
  for (size_t i = 0; i < points.size(); ++i) {
    const int c = static_cast<int>(i / 3), k = static_cast<int>(i % 3);
    const at::Tensor& image = points[i][0];
    EXPECT_EQ(image.sizes(), (std::vector<int64_t>{1, 12, 10}));
    EXPECT_EQ(image.scalar_type(), at::kByte);
    EXPECT_EQ(image[0][0][0].item<int64_t>(), c * 50 + k);
    EXPECT_EQ(image[0][11][9].item<int64_t>(), (c * 50 + k + 119) % 256);
    EXPECT_EQ(points[i][1].item<int64_t>(), c);
  }
  // RGB by default: the grey value in every channel.
  ImageFolder rgb(dir.path().string());
  rgb.begin_pass();
  const at::Tensor first = rgb.next()->at(0);
  EXPECT_EQ(first.sizes(), (std::vector<int64_t>{3, 12, 10}));
  EXPECT_TRUE(first[0].equal(first[2]));
}

TEST(ImageFolder, TheSameImagesWhateverTheThreads) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 3, 7);
  std::vector<std::vector<Datapoint>> passes;
  for (int64_t threads : {0, 1, 4}) {
    ImageFolder ds(dir.path().string(), augmented(threads));
    ds.reset_state();
    ds.begin_pass(3);
    passes.push_back(read_pass(ds));
  }
  ASSERT_EQ(passes[0].size(), 21u);
  EXPECT_EQ(passes[0][0][0].sizes(), (std::vector<int64_t>{1, 8, 8}));
  EXPECT_EQ(passes[0][0][0].scalar_type(), at::kFloat);
  expect_same(passes[0], passes[1]);
  expect_same(passes[0], passes[2]);
}

TEST(ImageFolder, SeekContinuesWithTheSameImagesAndDraws) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 3, 7);
  ImageFolder whole(dir.path().string(), augmented(3));
  whole.reset_state();
  whole.begin_pass(2);
  const auto all = read_pass(whole);
  ImageFolder resumed(dir.path().string(), augmented(2));  // another thread count: same data
  EXPECT_EQ(resumed.describe(), whole.describe());
  resumed.reset_state();
  resumed.begin_pass(2);
  resumed.seek(9);
  expect_same(read_pass(resumed), std::vector<Datapoint>(all.begin() + 9, all.end()));
  // Another pass draws other crops and order.
  whole.begin_pass(3);
  const auto next_pass = read_pass(whole);
  bool differs = false;
  for (size_t i = 0; i < all.size(); ++i) differs |= !all[i][0].equal(next_pass[i][0]);
  EXPECT_TRUE(differs);
}

TEST(ImageFolder, ABadFileFailsAtItsTurnNamingIt) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 1, 4);
  const fs::path bad = dir.path() / "c0" / "2.png";
  write_bytes(bad, grey_png(12, 10, 0).substr(0, 50));  // truncated
  ImageFolder ds(dir.path().string(), ImageFolderOptions().num_threads(3));
  ds.reset_state();
  ds.begin_pass();
  EXPECT_TRUE(ds.next().has_value());
  EXPECT_TRUE(ds.next().has_value());
  try {
    ds.next();
    FAIL() << "no error for the truncated file";
  } catch (const ImageDecodeError& e) {
    EXPECT_EQ(e.path(), bad.string());
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
  }
}

TEST(ImageFolder, SkippingBadFilesCountsThemAndSeeksExactly) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 2, 5);
  write_bytes(dir.path() / "c0" / "1.png", "not an image at all");
  write_bytes(dir.path() / "c1" / "3.png", grey_png(12, 10, 0).substr(0, 45));  // IDAT cut short
  auto options = augmented(2).on_bad_image(OnBadImage::kSkip);
  ImageFolder ds(dir.path().string(), options);
  ds.reset_state();
  ds.begin_pass(1);
  const auto all = read_pass(ds);
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(ds.skipped(), 2);
  EXPECT_NE(ds.describe().find("skipping bad images"), std::string::npos);
  for (int64_t at : {0, 3, 6, 8}) {
    ImageFolder resumed(dir.path().string(), options);
    resumed.reset_state();
    resumed.begin_pass(1);
    resumed.seek(at);
    expect_same(read_pass(resumed), std::vector<Datapoint>(all.begin() + at, all.end()));
  }
  ImageFolder past(dir.path().string(), options);
  past.begin_pass(1);
  EXPECT_THROW(past.seek(9), std::out_of_range);
}

TEST(ImageFolder, ValidationSharesTheTrainingClasses) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path() / "train", 3, 1);
  write_bytes(dir.path() / "val" / "c2" / "x.png", grey_png(4, 4, 9));
  ImageFolder train((dir.path() / "train").string());
  ImageFolder val((dir.path() / "val").string(), ImageFolderOptions().classes(train.classes()));
  val.begin_pass();
  EXPECT_EQ(val.next()->at(1).item<int64_t>(), 2);
}

TEST(ImageFolder, BadOptionsAreNamed) {
  ScopedTempDir dir("image_folder_test");
  make_folder(dir.path(), 1, 1);
  EXPECT_EQ(
      message_of([&] { ImageFolder(dir.path().string(), ImageFolderOptions().num_threads(-1)); }),
      "ImageFolder: num_threads is -1; give 0 (decode on the calling thread) or more");
  EXPECT_EQ(message_of([&] {
              ImageFolder(dir.path().string(),
                          ImageFolderOptions()
                              .decode(ImageDecodeOptions().layout(ImageLayout::kHWC))
                              .augmentors({std::make_shared<Flip>()}));
            }),
            "ImageFolder: the augmentors take [C,H,W] images, but `decode` asks for the HWC "
            "layout; leave the layout at ImageLayout::kCHW");
}

}  // namespace image_folder_test
}  // namespace trainpack
