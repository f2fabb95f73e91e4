// trainpack_bench_checkpoint: the cost of ModelSaver's save against a bare torch::save.
//
// The state is the main job's (examples/fashion_mnist/model.h: NetImpl, ~105k parameters) with
// an SGD optimizer (Nesterov momentum 0.9, weight decay) that has taken one step, so that its
// momentum buffers exist. Each rep runs, interleaved, into fresh directories on the same disk:
//   modelsaver_nofsync   ModelSaver::save() with async(false) and fsync(false):
//                        collect_training_state (weights, buffers, the optimizer's state tensors
//                        and options, counters, RNG state), write model-<k>.data (streamed, with
//                        its CRC-32C trailer; temporary file, rename), the `checkpoint` index
//                        (through its swap file), and the deletion of the checkpoint that
//                        max_to_keep=10 drops;
//   modelsaver_fsync     the same with fsync (the default): every file and the directory;
//   modelsaver_async_fsync  the training thread's part of a save with the defaults (async, fsync):
//                        ModelSaver::save() takes the snapshot (the state, every tensor cloned)
//                        and hands it to the writer thread, which does the rest; timed until
//                        save() returns. The writer is then waited for (flush(), untimed), so
//                        that its disk writes do not overlap the next form's time, and the
//                        writer's whole save, snapshot to durable index, is reported as
//                        modelsaver_async_until_durable (from save() to the end of flush());
//   bare_tensors_nofsync torch::save(std::vector<Tensor>) of the module's parameters and buffers
//                        and the optimizer's momentum buffers, into one new file;
//   bare_tensors_fsync   the same, then fsync of the file;
//   bare_module_nofsync  torch::save(net, "model-k.pt") + torch::save(optimizer, "opt-k.pt"):
//                        what a LibTorch program writes;
//   bare_module_fsync    the same, then fsync of both files.
// Before each timed call the benchmark calls sync() (untimed), so that every variant starts
// from a quiet disk, as a save at the end of an epoch does; without it, the writeback of one
// variant's files lands in the next one's time. Medians (and minima) in milliseconds after a
// warm-up of 3 reps. `modelsaver_over_bare_nofsync=<median modelsaver_nofsync / the smaller of
// the two bare nofsync medians>` compares the synchronous save; the last line,
// `modelsaver_thread_over_bare=<median modelsaver_async_fsync / median bare_tensors_fsync>`, what a
// save costs the training thread against a bare torch::save with fsync.
//
//   trainpack_bench_checkpoint [--reps R] [--dir DIR]
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../examples/fashion_mnist/model.h"
#include "support.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/logger.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using trainpack::bench::median;

// A trainer whose global step the benchmark sets (each save needs a new step).
class BenchTrainer : public trainpack::NoOpTrainer {
 public:
  using trainpack::Trainer::set_global_step;
};

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    std::fprintf(stderr, "cannot fsync %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  ::close(fd);
}

uint64_t bytes_of(const fs::path& p) {
  std::error_code ec;
  uint64_t total = 0;
  if (fs::is_directory(p, ec)) {
    for (const auto& e : fs::directory_iterator(p)) {
      if (e.is_regular_file()) total += e.file_size();
    }
    return total;
  }
  return fs::file_size(p, ec);
}

}  // namespace

int main(int argc, char** argv) {
  const auto [reps, base] = trainpack::bench::parse_reps_and_dir(argc, argv, 30);
  torch::set_num_threads(1);
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);  // no "Model saved to" lines

  const fs::path root = trainpack::bench::make_scratch_dir(base, "bench-checkpoint");
  for (const char* d : {"saver_nofsync", "saver_fsync", "saver_async", "bare"}) {
    fs::create_directories(root / d);
  }

  // The main job's model and optimizer, after one step.
  torch::manual_seed(0);
  fashion_mnist::Net net;
  torch::optim::SGD opt(
      net->parameters(),
      torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4));
  {
    const auto x = torch::rand({32, 28, 28});
    const auto y = torch::randint(0, 10, {32}, torch::kLong);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
  std::vector<at::Tensor> bare_tensors;
  for (const auto& p : net->parameters()) bare_tensors.push_back(p.detach());
  for (const auto& b : net->buffers()) bare_tensors.push_back(b);
  for (const auto& kv : opt.state()) {
    const auto& s = static_cast<const torch::optim::SGDParamState&>(*kv.second);
    bare_tensors.push_back(s.momentum_buffer());
  }

  BenchTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.graph().add_module("", net.ptr());
  trainer.graph().add_optimizer("", &opt);
  auto saver_nofsync =
      std::make_shared<trainpack::ModelSaver>(trainpack::ModelSaverOptions()
                                                  .checkpoint_dir((root / "saver_nofsync").string())
                                                  .fsync(false)
                                                  .async(false));
  auto saver_fsync = std::make_shared<trainpack::ModelSaver>(
      trainpack::ModelSaverOptions().checkpoint_dir((root / "saver_fsync").string()).async(false));
  auto saver_async = std::make_shared<trainpack::ModelSaver>(
      trainpack::ModelSaverOptions().checkpoint_dir((root / "saver_async").string()));
  trainer.setup_callbacks({saver_nofsync, saver_fsync, saver_async}, {});

  // The bare saves write new files each time, as ModelSaver does, and then delete the files of
  // their previous save (timed): each side keeps a bounded number of checkpoints and deletes one
  // per save. (Rewriting one file in place instead makes ext4 start writeback at close:
  // auto_da_alloc.)
  const fs::path bare_dir = root / "bare";
  int64_t step = 0, k = 0, nofsync_step = 0;  // nofsync_step: modelsaver_nofsync's last save
  std::map<std::string, std::vector<std::string>> kept;  // bare variant -> its latest files
  const auto bare_path = [&](const char* name) {
    return (bare_dir / fmt::format("{}-{}.pt", name, ++k)).string();
  };
  const auto rotate = [&](const std::string& variant, std::vector<std::string> files) {
    for (const auto& f : kept[variant]) fs::remove(f);
    kept[variant] = std::move(files);
  };
  struct Variant {
    std::string name;
    std::function<void()> run;
    std::function<void()> after = nullptr;  // untimed, right after run
  };
  Clock::time_point async_started;
  std::vector<double> async_until_durable;
  bool record_async = false;
  const std::vector<Variant> variants = {
      {"modelsaver_nofsync",
       [&] {
         trainer.set_global_step(nofsync_step = ++step);
         if (!saver_nofsync->save()) std::exit(1);
       }},
      {"modelsaver_fsync",
       [&] {
         trainer.set_global_step(++step);
         if (!saver_fsync->save()) std::exit(1);
       }},
      {"modelsaver_async_fsync",
       [&] {
         trainer.set_global_step(++step);
         async_started = Clock::now();
         if (!saver_async->save()) std::exit(1);
       },
       [&] {
         if (!saver_async->flush()) std::exit(1);
         const double took =
             std::chrono::duration<double, std::milli>(Clock::now() - async_started).count();
         if (record_async) async_until_durable.push_back(took);
       }},
      {"bare_tensors_nofsync",
       [&] {
         const std::string f = bare_path("tensors");
         torch::save(bare_tensors, f);
         rotate("bare_tensors_nofsync", {f});
       }},
      {"bare_tensors_fsync",
       [&] {
         const std::string f = bare_path("tensors");
         torch::save(bare_tensors, f);
         fsync_file(f);
         rotate("bare_tensors_fsync", {f});
       }},
      {"bare_module_nofsync",
       [&] {
         const std::string m = bare_path("model"), o = bare_path("opt");
         torch::save(net, m);
         torch::save(opt, o);
         rotate("bare_module_nofsync", {m, o});
       }},
      {"bare_module_fsync",
       [&] {
         const std::string m = bare_path("model"), o = bare_path("opt");
         torch::save(net, m);
         torch::save(opt, o);
         fsync_file(m);
         fsync_file(o);
         rotate("bare_module_fsync", {m, o});
       }},
  };

  std::map<std::string, std::vector<double>> ms;
  const int warmup = 3;
  const auto timed = [&](const std::string& name, bool record, const std::function<void()>& f) {
    ::sync();  // start from a quiet disk: no writeback of the previous variant's files
    const auto t0 = Clock::now();
    f();
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (record) ms[name].push_back(took);
  };
  for (int r = 0; r < warmup + reps; ++r) {
    record_async = r >= warmup;
    for (const auto& v : variants) {
      timed(v.name, r >= warmup, v.run);
      if (v.after) v.after();
    }
  }

  // Where ModelSaver's time goes: its steps one by one (no fsync), into a directory of their own.
  const fs::path parts = root / "parts";
  fs::create_directories(parts);
  const auto nofsync = trainpack::CheckpointWriteOptions().fsync(false);
  for (int r = 0; r < warmup + reps; ++r) {
    const bool record = r >= warmup;
    const std::string prefix = (parts / fmt::format("model-{}", r)).string();
    trainpack::TensorMap state;
    timed("  collect_training_state", record,
          [&] { state = trainpack::collect_training_state(trainer); });
    timed("  (clone for a snapshot)", record, [&] {
      trainpack::TensorMap copy = state;
      for (auto& entry : copy) entry.second = entry.second.clone();
    });
    timed("  write_checkpoint", record,
          [&] { trainpack::write_checkpoint(prefix, state, nofsync); });
    std::string data;
    {
      std::ifstream in(prefix + ".data", std::ios::binary);
      data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    timed("    of which CRC-32C", record, [&] {
      volatile uint32_t crc = trainpack::crc32c::value(data);
      (void)crc;
    });
    timed("    (table-code CRC-32C)", record, [&] {
      volatile uint32_t crc = trainpack::crc32c::extend_portable(0, data.data(), data.size());
      (void)crc;
    });
    timed("  write_checkpoint_index", record, [&] {
      trainpack::CheckpointIndex index;
      index.model_checkpoint_path = fmt::format("model-{}", r);
      index.all_model_checkpoint_paths = {index.model_checkpoint_path};
      index.all_model_checkpoint_timestamps = {1.0};
      trainpack::write_checkpoint_index(parts.string(), index, nofsync);
    });
    timed("  remove_checkpoint", record, [&] {
      if (r > 0) trainpack::remove_checkpoint((parts / fmt::format("model-{}", r - 1)).string());
    });
  }

  int64_t params = 0;
  for (const auto& p : net->parameters()) params += p.numel();
  std::printf("state: fashion_mnist NetImpl, %lld parameters, SGD momentum buffers; %d reps\n",
              static_cast<long long>(params), reps);
  std::printf("crc32c: %s\n", trainpack::crc32c::hardware_available()
                                  ? "SSE4.2 crc32 instruction, three streams"
                                  : "table code (no SSE4.2)");
  std::printf(
      "sizes: checkpoint data %llu bytes, bare tensors %llu bytes, bare model+opt %llu bytes\n",
      static_cast<unsigned long long>(
          bytes_of(root / "saver_nofsync" / ("model-" + std::to_string(nofsync_step) + ".data"))),
      static_cast<unsigned long long>(bytes_of(kept["bare_tensors_nofsync"].at(0))),
      static_cast<unsigned long long>(bytes_of(kept["bare_module_nofsync"].at(0)) +
                                      bytes_of(kept["bare_module_nofsync"].at(1))));
  for (const auto& [name, v] : ms) {
    if (name[0] == ' ') continue;
    std::printf("%-24s median %8.3f ms   min %8.3f ms\n", name.c_str(), median(v),
                *std::min_element(v.begin(), v.end()));
  }
  std::printf("modelsaver_nofsync, step by step:\n");
  for (const char* name : {"  collect_training_state", "  (clone for a snapshot)",
                           "  write_checkpoint", "    of which CRC-32C", "    (table-code CRC-32C)",
                           "  write_checkpoint_index", "  remove_checkpoint"}) {
    const auto& v = ms[name];
    std::printf("%-24s median %8.3f ms   min %8.3f ms\n", name, median(v),
                *std::min_element(v.begin(), v.end()));
  }
  const double saver = median(ms["modelsaver_nofsync"]);
  const double bare_t = median(ms["bare_tensors_nofsync"]);
  const double bare_m = median(ms["bare_module_nofsync"]);
  std::printf("modelsaver_fsync_over_bare_tensors_fsync=%.3f\n",
              median(ms["modelsaver_fsync"]) / median(ms["bare_tensors_fsync"]));
  std::printf("modelsaver_over_bare_module_nofsync=%.3f\n", saver / bare_m);
  std::printf("modelsaver_over_bare_tensors_nofsync=%.3f\n", saver / bare_t);
  std::printf("%-24s median %8.3f ms   min %8.3f ms\n", "modelsaver_async_until_durable",
              median(async_until_durable),
              *std::min_element(async_until_durable.begin(), async_until_durable.end()));
  std::error_code ec;
  fs::remove_all(root, ec);
  std::printf("modelsaver_over_bare_nofsync=%.3f\n", saver / std::min(bare_t, bare_m));
  std::printf("modelsaver_thread_over_bare=%.3f\n",
              median(ms["modelsaver_async_fsync"]) / median(ms["bare_tensors_fsync"]));
  return 0;
}
