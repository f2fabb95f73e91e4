// trainpack_bench_fs_ops: what the file operations of a checkpoint save cost on this disk, one
// by one; the figures behind the checkpoint format (one file per checkpoint) and the index's swap
// file (BENCHMARKS.md, "Checkpoints").
//
// Each operation runs after sync() (untimed), as in trainpack_bench_checkpoint, so that the
// files it touches are written back (their blocks allocated) and nothing else is in flight:
//   create_small           create a 120-byte file, write, close, rename it to a new name
//   unlink_small           unlink such a file (written back: one block to free)
//   unlink_empty           unlink an empty file (no block)
//   unlink_853k            unlink an 853,272-byte file (a checkpoint's size)
//   replace_by_rename      write_file_atomically of a 400-byte file over an existing one (a new
//                          temporary file renamed over it: the old one's block is freed)
//   replace_by_swap        replace_file_by_swap of the same file (written in place into the swap
//                          file, names exchanged: no block allocated or freed)
// Medians and minima in milliseconds over --reps reps after 3 warm-up reps.
//
//   trainpack_bench_fs_ops [--reps R] [--dir DIR]
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/utils/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using trainpack::bench::median;

void write_new_file(const std::string& path, size_t bytes) {
  const std::string data(bytes, 'x');
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    std::perror(path.c_str());
    std::exit(1);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  const auto [reps, base] = trainpack::bench::parse_reps_and_dir(argc, argv, 100);
  const fs::path root = trainpack::bench::make_scratch_dir(base, "bench-fs-ops");
  const auto at = [&](const std::string& name) { return (root / name).string(); };
  const std::string index_text(400, 'i');
  trainpack::write_file_atomically(at("by_rename"), index_text, false);
  trainpack::write_file_atomically(at("by_swap"), index_text, false);

  std::map<std::string, std::vector<double>> ms;
  const auto timed = [&](const char* name, bool record, const std::function<void()>& f) {
    ::sync();
    const auto t0 = Clock::now();
    f();
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (record) ms[name].push_back(took);
  };
  const int warmup = 3;
  for (int r = 0; r < warmup + reps; ++r) {
    const bool record = r >= warmup;
    const std::string small = at("small-" + std::to_string(r));
    timed("create_small", record, [&] {
      write_new_file(small + ".tmp", 120);
      std::rename((small + ".tmp").c_str(), small.c_str());
    });
    timed("unlink_small", record, [&] { ::unlink(small.c_str()); });
    write_new_file(at("empty"), 0);
    timed("unlink_empty", record, [&] { ::unlink(at("empty").c_str()); });
    write_new_file(at("big"), 853272);
    timed("unlink_853k", record, [&] { ::unlink(at("big").c_str()); });
    timed("replace_by_rename", record,
          [&] { trainpack::write_file_atomically(at("by_rename"), index_text, false); });
    timed("replace_by_swap", record, [&] {
      trainpack::replace_file_by_swap(at("by_swap"), at("by_swap.previous"), index_text, false);
    });
  }
  std::printf("%d reps, each operation after sync(), in %s\n", reps, base.c_str());
  for (const char* name : {"create_small", "unlink_small", "unlink_empty", "unlink_853k",
                           "replace_by_rename", "replace_by_swap"}) {
    const auto& v = ms[name];
    std::printf("%-18s median %7.3f ms   min %7.3f ms\n", name, median(v),
                *std::min_element(v.begin(), v.end()));
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
