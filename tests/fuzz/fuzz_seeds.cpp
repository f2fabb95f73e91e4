// Writes the fuzzers' seed corpora with trainpack's own writers: real files of each kind.
//   trainpack_fuzz_seeds <dir>   ->  <dir>/{checkpoint,checkpoint_index,stats_json,hyper_txt,
//                                           image_decode}/
// A checkpoint seed is the data file without its trailer (the fuzzer appends one).
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "support/image_files.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/stats_json.h"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The data file of `tensors` without its trailer (the end record's comment length zeroed).
std::string checkpoint_seed(const fs::path& scratch, const trainpack::TensorMap& tensors) {
  const std::string prefix = (scratch / "model-1").string();
  trainpack::write_checkpoint(prefix, tensors, trainpack::CheckpointWriteOptions().fsync(false));
  std::string bytes = read(prefix + ".data");
  const size_t trailer = bytes.rfind("trainpack-checkpoint ");
  bytes.resize(trailer);
  bytes[bytes.size() - 2] = bytes[bytes.size() - 1] = 0;
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: trainpack_fuzz_seeds <corpus dir>\n";
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path scratch = out / "scratch";
  fs::create_directories(scratch);
  trainpack::TensorMap small;
  small["w"] = torch::arange(6, torch::kFloat).reshape({2, 3});
  write(out / "checkpoint" / "one_tensor", checkpoint_seed(scratch, small));
  trainpack::TensorMap state;
  state["conv1.weight"] = torch::randn({4, 1, 3, 3});
  state["conv1.bias"] = torch::zeros({4});
  state["trainer/global_step"] = torch::scalar_tensor(600, torch::kLong);
  state["transposed"] = torch::arange(6, torch::kDouble).reshape({2, 3}).t();
  state["empty"] = torch::empty({0, 3});
  state["mask"] = torch::tensor({true, false});
  state["half"] = torch::ones({3}, torch::kHalf);
  write(out / "checkpoint" / "training_state", checkpoint_seed(scratch, state));

  trainpack::CheckpointIndex index;
  index.model_checkpoint_path = "model-600";
  index.all_model_checkpoint_paths = {"model-500", "model-600"};
  index.all_model_checkpoint_timestamps = {1763850000.5, 1763850060.25};
  index.last_preserved_timestamp = 1763849940;
  trainpack::write_checkpoint_index(scratch.string(), index,
                                    trainpack::CheckpointWriteOptions().fsync(false));
  write(out / "checkpoint_index" / "written", read(scratch / "checkpoint"));
  write(out / "checkpoint_index" / "tensorflow",
        "# written by TensorFlow\nmodel_checkpoint_path: 'model-6'\n"
        "all_model_checkpoint_paths : \"model-\\1636\"\n");

  std::vector<trainpack::StatsEntry> entries(2);
  entries[0].set("epoch_num", int64_t{1});
  entries[0].set("global_step", int64_t{468});
  entries[0].set("val-error-top1", 0.1542);
  entries[1].set("epoch_num", int64_t{2});
  entries[1].set("global_step", int64_t{936});
  entries[1].set("loss", std::numeric_limits<double>::quiet_NaN());
  const std::string stats = trainpack::format_stats_file(entries);
  write(out / "stats_json" / "two_epochs", stats);
  write(out / "stats_json" / "truncated", stats.substr(0, stats.size() / 2));

  write(out / "hyper_txt" / "two", "learning_rate: 0.01\n# a comment\nmomentum: 0.9\n");
  write(out / "hyper_txt" / "python", "learning_rate:1e-3  \n\nlearning_rate: inf\n");
  // Small images of each kind the decoder takes: PNG colour types, bit depths, palette with
  // transparency, interlacing; JPEG grey, colour, progressive, CMYK.
  using trainpack::testing::PngColour;
  std::vector<uint16_t> samples(8 * 6 * 4);
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<uint16_t>(i * 37 % 256);
  auto png = [&](PngColour colour, int channels, int depth, bool interlaced) {
    trainpack::testing::TestPng desc;
    desc.width = 8;
    desc.height = 6;
    desc.colour = colour;
    desc.bit_depth = depth;
    desc.interlaced = interlaced;
    for (int i = 0; i < 8 * 6 * channels; ++i) {
      desc.samples.push_back(depth == 16 ? samples[i] * 257 : samples[i] % (1 << depth));
    }
    if (colour == PngColour::kPalette) {
      for (int i = 0; i < (1 << depth) * 3; ++i) desc.palette_rgb.push_back(i * 11 % 256);
      desc.transparency = {0, 128};
    }
    return trainpack::testing::encode_test_png(desc);
  };
  const fs::path images = out / "image_decode";
  write(images / "grey1.png", png(PngColour::kGrey, 1, 1, false));
  write(images / "grey16.png", png(PngColour::kGrey, 1, 16, true));
  write(images / "rgb8_interlaced.png", png(PngColour::kRGB, 3, 8, true));
  write(images / "rgba16.png", png(PngColour::kRGBA, 4, 16, false));
  write(images / "grey_alpha8.png", png(PngColour::kGreyAlpha, 2, 8, false));
  write(images / "palette4.png", png(PngColour::kPalette, 1, 4, false));
  auto jpeg = [&](int components, bool progressive) {
    trainpack::testing::TestJpeg desc;
    desc.width = 8;
    desc.height = 6;
    desc.components = components;
    desc.progressive = progressive;
    for (int i = 0; i < 8 * 6 * components; ++i) desc.samples.push_back(samples[i] & 0xff);
    return trainpack::testing::encode_test_jpeg(desc);
  };
  write(images / "grey.jpg", jpeg(1, false));
  write(images / "rgb.jpg", jpeg(3, false));
  write(images / "rgb_progressive.jpg", jpeg(3, true));
  write(images / "cmyk.jpg", jpeg(4, false));
  fs::remove_all(scratch);
  return 0;
}
