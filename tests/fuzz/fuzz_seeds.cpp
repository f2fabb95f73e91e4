// Writes the fuzzers' seed corpora with trainpack's own writers: real files of each kind.
//   trainpack_fuzz_seeds <dir>   ->  <dir>/{checkpoint,checkpoint_index,stats_json,hyper_txt}/
// A checkpoint seed is the data file without its trailer (the fuzzer appends one).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

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
  fs::remove_all(scratch);
  return 0;
}
