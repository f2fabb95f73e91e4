#include "trainpack/input/fashion_mnist.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/as_nobody.h"
#include "support/errors.h"
#include "support/temp_dir.h"

namespace trainpack {
namespace fashion_mnist_test {

namespace fs = std::filesystem;

using testing::message_of;

// The message of opening the training split of the data in `folder` as user 65534 (nobody).
std::string message_as_nobody(const fs::path& folder) {
  return testing::message_as_nobody([&] { FashionMnist("train", folder.string()); });
}

using testing::ScopedTempDir;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

// An IDX images file: `count` in the header, `stored` images of 28x28 pixels (pixel = image index).
std::vector<uint8_t> images_file(uint32_t count, uint32_t stored, uint32_t magic = 2051) {
  std::vector<uint8_t> out;
  put_u32(out, magic);
  put_u32(out, count);
  put_u32(out, 28);
  put_u32(out, 28);
  for (uint32_t i = 0; i < stored; ++i)
    out.insert(out.end(), 28 * 28, static_cast<uint8_t>(i * 50));
  return out;
}

std::vector<uint8_t> labels_file(uint32_t count, uint32_t stored, uint32_t magic = 2049) {
  std::vector<uint8_t> out;
  put_u32(out, magic);
  put_u32(out, count);
  for (uint32_t i = 0; i < stored; ++i) out.push_back(static_cast<uint8_t>(i % 10));
  return out;
}

TEST(FashionMnist, ReadsTheDebianFiles) {
  if (!fs::exists(fs::path(kFashionMnistDir) / "t10k-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDir
                 << " (apt-get install dataset-fashion-mnist)";
  }
  FashionMnist train("train");
  EXPECT_EQ(train.size(), 60000);
  FashionMnist test("test");
  EXPECT_EQ(test.size(), 10000);

  train.reset_state();
  train.begin_pass();
  std::vector<int64_t> labels;
  for (int i = 0; i < 10; ++i) {
    auto dp = train.next();
    ASSERT_TRUE(dp.has_value());
    ASSERT_EQ(dp->size(), 2u);
    if (i == 0) {
      const at::Tensor& image = (*dp)[0];
      EXPECT_EQ(image.sizes(), (at::IntArrayRef{28, 28}));
      EXPECT_EQ(image.scalar_type(), at::kFloat);
      EXPECT_EQ(image.min().item<float>(), 0.0f);
      EXPECT_EQ(image.max().item<float>(), 1.0f);
      EXPECT_NEAR(image.sum().item<double>(), 76247.0 / 255.0, 1e-2);
      EXPECT_EQ((*dp)[1].dim(), 0);
      EXPECT_EQ((*dp)[1].scalar_type(), at::kLong);
    }
    labels.push_back((*dp)[1].item<int64_t>());
  }
  EXPECT_EQ(labels, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));

  auto [images, test_labels] = FashionMnist::read("test");
  EXPECT_EQ(images.sizes(), (at::IntArrayRef{10000, 28, 28}));
  EXPECT_GE(images.min().item<float>(), 0.0f);
  EXPECT_LE(images.max().item<float>(), 1.0f);
  std::vector<int64_t> first_test_labels;
  for (int64_t i = 0; i < 5; ++i) first_test_labels.push_back(test_labels[i].item<int64_t>());
  EXPECT_EQ(first_test_labels, (std::vector<int64_t>{9, 2, 1, 1, 6}));
}

TEST(FashionMnist, ReadsSmallFilesAndShuffles) {
  ScopedTempDir dir("fashion_mnist_test");
  write_gz(dir.path() / "t10k-images-idx3-ubyte.gz", images_file(4, 4));
  write_gz(dir.path() / "t10k-labels-idx1-ubyte.gz", labels_file(4, 4));
  FashionMnist ds("test", dir.path().string(), FashionMnistOptions().shuffle(true).seed(5));
  EXPECT_EQ(ds.size(), 4);
  ds.begin_pass();
  const auto order = ds.order_of_pass(0);
  for (int64_t i = 0; i < 4; ++i) {
    auto dp = ds.next();
    ASSERT_TRUE(dp.has_value());
    EXPECT_EQ((*dp)[1].item<int64_t>(), order[i]);
    EXPECT_FLOAT_EQ((*dp)[0][3][4].item<float>(), static_cast<float>(order[i] * 50) / 255.0f);
  }
}

TEST(FashionMnist, MissingFileNamesTheDebianPackage) {
  ScopedTempDir dir("fashion_mnist_test");
  const std::string msg = message_of([&] { FashionMnist("train", dir.path().string()); });
  EXPECT_NE(msg.find((dir.path() / "train-images-idx3-ubyte.gz").string()), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_THROW(FashionMnist("train", dir.path().string()), std::runtime_error);
}

TEST(FashionMnist, ADirectoryWhereAFileBelongsIsNotCalledMissing) {
  ScopedTempDir dir("fashion_mnist_test");
  fs::create_directory(dir.path() / "train-images-idx3-ubyte.gz");
  const std::string msg = message_of([&] { FashionMnist("train", dir.path().string()); });
  EXPECT_EQ(msg, "Fashion-MNIST file " + (dir.path() / "train-images-idx3-ubyte.gz").string() +
                     " is not a regular file (a directory); give the directory that holds the "
                     "four .gz files of the data set");
}

TEST(FashionMnist, AnUnreadableFileSaysWhy) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to read as another user in a child";
  ScopedTempDir dir("fashion_mnist_test");
  fs::permissions(dir.path(), fs::perms::all);
  const auto images = dir.path() / "train-images-idx3-ubyte.gz";
  write_gz(images, images_file(2, 2));
  fs::permissions(images, fs::perms::owner_read | fs::perms::owner_write);
  // A child as user 65534 (nobody) reads the root-only file.
  const std::string msg = message_as_nobody(dir.path());
  EXPECT_EQ(msg, "Cannot open Fashion-MNIST file " + images.string() + ": Permission denied");
}

// The data in a folder that the user may not enter: the file exists, so the message says why it
// cannot be read, not that it is missing and which package to install.
TEST(FashionMnist, AFolderOthersMayNotEnterSaysWhyNotMissing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to read as another user in a child";
  ScopedTempDir dir("fashion_mnist_test");
  fs::permissions(dir.path(), fs::perms::all);
  const auto data = dir.path() / "private";
  fs::create_directory(data);
  const auto images = data / "train-images-idx3-ubyte.gz";
  write_gz(images, images_file(2, 2));
  fs::permissions(data, fs::perms::owner_all);
  const std::string msg = message_as_nobody(data);
  EXPECT_EQ(msg, "Cannot open Fashion-MNIST file " + images.string() + ": Permission denied");
}

TEST(FashionMnist, WrongMagicNamesTheFile) {
  ScopedTempDir dir("fashion_mnist_test");
  const auto labels = dir.path() / "t10k-labels-idx1-ubyte.gz";
  write_gz(dir.path() / "t10k-images-idx3-ubyte.gz", images_file(2, 2));
  write_gz(labels, labels_file(2, 2, /*magic=*/2051));
  EXPECT_EQ(message_of([&] { FashionMnist("test", dir.path().string()); }),
            "Fashion-MNIST file " + labels.string() +
                " has magic number 2051, expected 2049 for an IDX labels file");
}

TEST(FashionMnist, TruncatedFileNamesTheFile) {
  ScopedTempDir dir("fashion_mnist_test");
  const auto images = dir.path() / "t10k-images-idx3-ubyte.gz";
  auto bytes = images_file(3, 3);
  bytes.resize(bytes.size() - 100);
  write_gz(images, bytes);
  write_gz(dir.path() / "t10k-labels-idx1-ubyte.gz", labels_file(3, 3));
  EXPECT_EQ(message_of([&] { FashionMnist("test", dir.path().string()); }),
            "Fashion-MNIST file " + images.string() +
                " is truncated: 3 images needs 2352 bytes, the file has only 2252");
  // A header cut short is truncated too.
  write_gz(images, {0, 0, 8});
  EXPECT_NE(message_of([&] { FashionMnist("test", dir.path().string()); }).find("is truncated"),
            std::string::npos);
}

// A header that claims 2^32-1 images (3.4 TB) is refused with the file named, before anything of
// that size is allocated; the same for the labels.
TEST(FashionMnist, ImpossibleCountInTheHeaderNamesTheFile) {
  ScopedTempDir dir("fashion_mnist_test");
  const auto images = dir.path() / "t10k-images-idx3-ubyte.gz";
  const auto labels = dir.path() / "t10k-labels-idx1-ubyte.gz";
  write_gz(images, images_file(0xffffffffu, 2));
  write_gz(labels, labels_file(2, 2));
  std::string msg = message_of([&] { FashionMnist("test", dir.path().string()); });
  EXPECT_NE(msg.find("Fashion-MNIST file " + images.string() +
                     " is corrupt: its header says 4294967295 images (3367254359280 bytes)"),
            std::string::npos)
      << msg;
  write_gz(images, images_file(2, 2));
  write_gz(labels, labels_file(0xffffffffu, 2));
  msg = message_of([&] { FashionMnist("test", dir.path().string()); });
  EXPECT_NE(msg.find("Fashion-MNIST file " + labels.string() +
                     " is corrupt: its header says 4294967295 labels"),
            std::string::npos)
      << msg;
}

TEST(FashionMnist, CountMismatchNamesBothFiles) {
  ScopedTempDir dir("fashion_mnist_test");
  write_gz(dir.path() / "train-images-idx3-ubyte.gz", images_file(3, 3));
  write_gz(dir.path() / "train-labels-idx1-ubyte.gz", labels_file(2, 2));
  const std::string msg = message_of([&] { FashionMnist("train", dir.path().string()); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 images but 2 labels"), std::string::npos) << msg;
}

TEST(FashionMnist, UnknownSplit) {
  EXPECT_EQ(message_of([] { FashionMnist("validation"); }),
            "FashionMnist: unknown split \"validation\", expected \"train\" or \"test\"");
  EXPECT_THROW(FashionMnist::read("validation"), std::invalid_argument);
}

}  // namespace fashion_mnist_test
}  // namespace trainpack
