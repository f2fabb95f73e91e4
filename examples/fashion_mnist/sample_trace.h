// The main job's --trace-samples DIR: which training images each rank reads, so that a test can
// check that the ranks' shares of every epoch are a partition of it (no image read twice, none
// skipped), also across a resume with another number of ranks.
//
// SampleTrace wraps the rank's shard of datapoints {image, label, index} (the index of the image
// in the training set, added by main() when tracing) and yields {image, label}; for every
// datapoint it appends one line "<pass> <position> <index>" to
// DIR/samples-rank<R>-pid<P>.txt, where position counts the rank's datapoints in the pass from 0
// (after a resume's seek, from where it continues). The file opens with
// "# rank <R> world <W> started <unix ns>", and every line is written through at once, so a killed
// process loses none it read. The positions of batch k of a pass are [k*b, (k+1)*b) for a rank
// batch of b.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "trainpack/input/dataflow.h"

namespace fashion_mnist {

class SampleTrace : public trainpack::DataFlow {
 public:
  SampleTrace(trainpack::DataFlowPtr ds, const std::string& dir, int64_t rank, int64_t world_size)
      : ds_(std::move(ds)) {
    const std::string path =
        fmt::format("{}/samples-rank{}-pid{}.txt", dir, rank, static_cast<long long>(::getpid()));
    file_.reset(std::fopen(path.c_str(), "w"));
    if (!file_) {
      throw std::runtime_error(
          fmt::format("--trace-samples: cannot create {} (does the directory exist?)", path));
    }
    std::setvbuf(file_.get(), nullptr, _IOLBF, 0);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    std::fprintf(
        file_.get(), "# rank %lld world %lld started %lld\n", static_cast<long long>(rank),
        static_cast<long long>(world_size),
        static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  }
  std::string name() const override { return "SampleTrace"; }
  std::string describe() const override { return "SampleTrace over " + ds_->describe(); }
  void reset_state() override { ds_->reset_state(); }
  std::optional<int64_t> size() const override { return ds_->size(); }
  const DataFlow* first_unseekable() const override { return ds_->first_unseekable(); }

 protected:
  void _begin_pass(int64_t pass) override {
    ds_->begin_pass(pass);
    pass_ = pass;
    position_ = 0;
  }
  std::optional<trainpack::Datapoint> _next() override {
    std::optional<trainpack::Datapoint> dp = ds_->next();
    if (!dp) return std::nullopt;
    if (dp->size() != 3) {
      throw std::logic_error("SampleTrace: datapoints must be {image, label, index}");
    }
    std::fprintf(file_.get(), "%lld %lld %lld\n", static_cast<long long>(pass_),
                 static_cast<long long>(position_++),
                 static_cast<long long>((*dp)[2].item<int64_t>()));
    dp->pop_back();
    return dp;
  }
  void _seek(int64_t datapoints_consumed_in_this_pass) override {
    ds_->seek(datapoints_consumed_in_this_pass);
    position_ = datapoints_consumed_in_this_pass;
  }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  trainpack::DataFlowPtr ds_;
  std::unique_ptr<std::FILE, Close> file_;
  int64_t pass_ = -1;
  int64_t position_ = 0;
};

}  // namespace fashion_mnist
