// StagingInput: tensorpack's StagingInput. Wraps another input source and keeps `nr_stage` of its
// batches in flight on the device, each copied with a non-blocking copy on a side stream, so that
// the copy of the next batches overlaps the current step.
//
// On a CUDA device the wrapped source is set up on the CPU and asked for pinned host batches; the
// compute stream waits for a batch's copy event (the host does not). A batch handed out is valid
// for the step that took it: it is kept until the next next_batch(), which makes the side stream
// wait for the compute stream before letting it go (no record_stream); clone a tensor to keep it
// longer. The step must run on the current stream or join it before its end. On the CPU nothing is
// copied and no thread is added, but the stage still runs `nr_stage` ahead, so that the end of the
// data, errors and positions behave as on a GPU.
//
// Positions: consumed() is the position of the last batch the trainer took, never of those staged
// ahead; the wrapped source's callback saves that position too, so a checkpoint restores the same
// batch with or without staging. The callbacks are the wrapped source's, then `StagingInput`
// (state `pass`, `position`); after_train releases the staged batches. The end of the data and an
// exception from the wrapped source come out of next_batch() after the batches staged before them.
//
// Errors: a null source, nr_stage < 1: std::invalid_argument; a wrapped source set up already,
// resume_at() after the first batch: std::logic_error; next_batch() after after_train:
// StopTraining. docs/input.md, "StagingInput", has the whole story.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/input/input_source.h"

namespace trainpack {

struct StagingInputOptions {
  // How many batches ahead of the step are copied (tensorpack's nr_stage, 1).
  TORCH_ARG(int64_t, nr_stage) = 1;
};

// An InputSource that stages the batches of another one on the device ahead of the step (see the
// top of this file).
//   auto input = std::make_shared<StagingInput>(std::make_shared<QueueInput>(batches),
//                                               StagingInputOptions().nr_stage(2));
class StagingInput : public InputSource {
 public:
  explicit StagingInput(InputSourcePtr input, StagingInputOptions options = {});
  ~StagingInput() override;
  StagingInput(const StagingInput&) = delete;
  StagingInput& operator=(const StagingInput&) = delete;

  std::string name() const override { return "StagingInput"; }
  std::string describe() const override { return input_->describe(); }
  std::optional<int64_t> size() const override { return input_->size(); }
  const InputSourcePtr& input() const { return input_; }
  const StagingInputOptions& options() const { return options_; }

  // Batches staged now (copied or being copied, not yet taken): nr_stage once the first batch was
  // taken, fewer near the end of the data.
  int64_t staged() const;

  // The position of the last batch the trainer took; before the first one, the wrapped source's
  // (its start, or the point given to resume_at).
  InputPosition consumed() const override;
  // The wrapped source's resume_at (its checks and errors), before the first batch;
  // std::logic_error after it.
  void resume_at(InputPosition point) override;

 protected:
  std::vector<CallbackPtr> _setup() override;
  std::optional<Datapoint> _next_batch() override;
  std::string end_of_data_reason() const override;

 private:
  struct Stage;  // the staged batches and, on CUDA, the streams and events (staging_input.cpp)

  // Takes the next batch from the wrapped source into the stage (starting its copy); false when
  // the wrapped source has run out or failed (remembered, delivered once the stage is empty).
  bool stage_one();
  // Lets go of the batch handed out last, once the compute stream is past it (see the top).
  void release_taken();
  // Drops everything staged (after_train).
  void release_all();

  InputSourcePtr input_;
  StagingInputOptions options_;
  std::unique_ptr<Stage> stage_;
};

}  // namespace trainpack
