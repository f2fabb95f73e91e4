#include "trainpack/input/fashion_mnist.h"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include <ATen/Functions.h>
#include <fmt/format.h>

namespace trainpack {

namespace {

constexpr uint32_t kImagesMagic = 2051;
constexpr uint32_t kLabelsMagic = 2049;
constexpr int64_t kSide = 28;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// An open gzipped IDX file; every error names the file.
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    const auto status = std::filesystem::status(path_, ec);
    // A path that cannot be looked at (a folder on the way that this user may not enter) is not
    // a missing file: say why, not which package to install.
    if (ec && status.type() != std::filesystem::file_type::not_found) {
      throw std::runtime_error(
          fmt::format("Cannot open Fashion-MNIST file {}: {}", path_, ec.message()));
    }
    if (!std::filesystem::exists(status)) {
      throw std::runtime_error(fmt::format(
          "Fashion-MNIST file {} is missing. It comes with the Debian package "
          "dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or give the directory "
          "that holds it",
          path_));
    }
    if (!std::filesystem::is_regular_file(status)) {
      throw std::runtime_error(fmt::format(
          "Fashion-MNIST file {} is not a regular file ({}); give the directory that holds the "
          "four .gz files of the data set",
          path_,
          std::filesystem::is_directory(status) ? "a directory" : "not a file one can read"));
    }
    errno = 0;
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      throw std::runtime_error(fmt::format("Cannot open Fashion-MNIST file {}: {}", path_,
                                           err ? std::strerror(err) : "gzip cannot read it"));
    }
  }

  // Reads exactly n bytes; fewer (end of file or a gzip error) is a truncated/corrupt file.
  void read(void* out, size_t n, const char* what) {
    auto* dst = static_cast<unsigned char*>(out);
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(file_.get(), dst + done, chunk);
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_.get(), &errnum);
        throw std::runtime_error(
            fmt::format("Fashion-MNIST file {} is corrupt while reading {}: {}", path_, what,
                        msg ? msg : "gzip error"));
      }
      if (got == 0) {
        throw std::runtime_error(fmt::format(
            "Fashion-MNIST file {} is truncated: {} needs {} bytes, the file has only {}", path_,
            what, n, done));
      }
      done += static_cast<size_t>(got);
    }
  }

  uint32_t read_u32(const char* what) {
    std::array<unsigned char, 4> b{};
    read(b.data(), b.size(), what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

  void check_magic(uint32_t expected, const char* kind) {
    const uint32_t magic = read_u32("the header");
    if (magic != expected) {
      throw std::runtime_error(
          fmt::format("Fashion-MNIST file {} has magic number {}, expected {} for an IDX {} file",
                      path_, magic, expected, kind));
    }
  }

  // Refuses a header that claims more bytes than the file can hold, before anything of that size
  // is allocated: deflate compresses at most 1032:1, so a gzip file of S bytes holds at most
  // about 1032 * S bytes. A forged or damaged count (2^32-1 images: 3.4 TB) is then an error
  // that names the file, not an allocation failure that names nothing.
  void check_count(int64_t count, int64_t bytes_each, const char* what) const {
    std::error_code ec;
    const auto compressed = std::filesystem::file_size(path_, ec);
    if (ec) return;  // the reads will fail with the file named
    constexpr int64_t kMaxDeflateRatio = 1032;
    const int64_t limit = static_cast<int64_t>(compressed) * kMaxDeflateRatio + 1024;
    if (count > limit / bytes_each) {
      throw std::runtime_error(fmt::format(
          "Fashion-MNIST file {} is corrupt: its header says {} {} ({} bytes), more than a gzip "
          "file of {} bytes can hold; download or reinstall it (Debian package "
          "dataset-fashion-mnist)",
          path_, count, what, count * bytes_each, compressed));
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  GzPtr file_;
};

at::Tensor read_images(const std::string& path) {
  IdxReader r(path);
  r.check_magic(kImagesMagic, "images");
  const int64_t n = r.read_u32("the header");
  const int64_t rows = r.read_u32("the header");
  const int64_t cols = r.read_u32("the header");
  if (rows != kSide || cols != kSide) {
    throw std::runtime_error(fmt::format("Fashion-MNIST file {} holds {}x{} images, expected {}x{}",
                                         path, rows, cols, kSide, kSide));
  }
  r.check_count(n, rows * cols, "images");
  auto bytes = at::empty({n, rows, cols}, at::kByte);
  r.read(bytes.data_ptr<uint8_t>(), static_cast<size_t>(n * rows * cols),
         fmt::format("{} images", n).c_str());
  return bytes.to(at::kFloat).div_(255.0);
}

at::Tensor read_labels(const std::string& path) {
  IdxReader r(path);
  r.check_magic(kLabelsMagic, "labels");
  const int64_t n = r.read_u32("the header");
  r.check_count(n, 1, "labels");
  auto bytes = at::empty({n}, at::kByte);
  r.read(bytes.data_ptr<uint8_t>(), static_cast<size_t>(n), fmt::format("{} labels", n).c_str());
  if (n > 0) {
    const int64_t max = bytes.max().item<int64_t>();
    if (max > 9) {
      throw std::runtime_error(
          fmt::format("Fashion-MNIST file {} holds label {}, expected 0..9", path, max));
    }
  }
  return bytes.to(at::kLong);
}

std::vector<Datapoint> to_datapoints(const std::pair<at::Tensor, at::Tensor>& data) {
  const auto& [images, labels] = data;
  const int64_t n = images.size(0);
  std::vector<Datapoint> points;
  points.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) points.push_back({images[i], labels[i]});
  return points;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> FashionMnist::read(const std::string& split,
                                                     const std::string& dir) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test") {
    prefix = "t10k";
  } else {
    throw std::invalid_argument(
        fmt::format("FashionMnist: unknown split \"{}\", expected \"train\" or \"test\"", split));
  }
  const std::filesystem::path base(dir);
  const std::string images_path = (base / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (base / (prefix + "-labels-idx1-ubyte.gz")).string();
  at::Tensor images = read_images(images_path);
  at::Tensor labels = read_labels(labels_path);
  if (images.size(0) != labels.size(0)) {
    throw std::runtime_error(
        fmt::format("Fashion-MNIST files {} and {} disagree: {} images but {} labels", images_path,
                    labels_path, images.size(0), labels.size(0)));
  }
  return {images, labels};
}

FashionMnist::FashionMnist(const std::string& split, const std::string& dir,
                           FashionMnistOptions options)
    : DataFromList(to_datapoints(read(split, dir)),
                   DataFromListOptions().shuffle(options.shuffle()).seed(options.seed())) {}

}  // namespace trainpack
