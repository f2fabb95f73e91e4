// StagingInput: batches copied to the GPU ahead of the step that takes them (tensorpack's
// StagingInput).
// Public names: StagingInput, StagingInputOptions.
//
//   auto input = std::make_shared<StagingInput>(std::make_shared<QueueInput>(batches));
//   TrainConfig().data(input) ...   // or trainer.setup_graph(signature, input, ...)
//
// Every other source copies its batch to the device inside next_batch(), on the current stream,
// just before the step uses it. StagingInput wraps a source and keeps `nr_stage` batches in
// flight instead: each one is copied with a non-blocking copy on a side stream of its own, so the
// copy of the next batches overlaps the current step.
//
// On a CUDA device: the wrapped source is set up on the CPU (it copies nothing) and asked for
// pinned host batches (QueueInput pins them on its prefetch thread; other sources' batches are
// pinned here, on the training thread). The first next_batch() stages `nr_stage` batches: each
// is copied on the side stream and an event is recorded after its copy. Each next_batch() hands
// out the oldest staged batch after making the current (compute) stream wait for its event (no
// host sync), then starts the copy of the batch `nr_stage` ahead. The batches are the staged
// device tensors; no record_stream is used: a batch (device tensors and their pinned source) is
// kept until the next next_batch(), which records an event on the compute stream and makes the
// side stream wait for it before letting the batch go, so that the caching allocator cannot hand
// its memory to a later copy while the step still reads it. A batch is therefore valid for the
// step that took it: clone a tensor to keep it longer. The step must run on the current stream
// (or join it before its end, as CudaGraphStep does).
//
// On the CPU nothing is copied and no thread is added: the batches are the wrapped source's own
// tensors. The stage still runs `nr_stage` batches ahead, so that the end of the data, errors and
// positions behave as on a GPU.
//
// Positions (docs/save-load.md, "Exact resume" in input_source.h): consumed() is the position of
// the last batch the trainer took, never of those staged ahead (which the wrapped source has
// already delivered). The callbacks: the wrapped source's (QueueInput's thread and queue-size
// summary run as without staging; the one named after the source saves this position too, so a
// checkpoint restores the same batch with or without StagingInput), then `StagingInput`, whose
// state is consumed() (`pass` and `position`, int64) and whose load_state restores it (unless
// the wrapped source's own entries already did). after_train releases the staged batches.
// resume_at() and size() are the wrapped source's.
//
// The end of the data (DataExhausted, its message naming the wrapped source) and an exception
// from the wrapped source (as it was thrown) come out of next_batch() after the batches staged
// before them were taken.
//
// Errors: a null source and nr_stage < 1 are std::invalid_argument at construction; a CUDA device
// without a GPU fails at setup() (std::runtime_error, as for every source); a wrapped source that
// was set up already is std::logic_error at setup(); next_batch() after after_train is
// StopTraining; resume_at() after the first batch is std::logic_error.
//
// Differences from tensorpack: tensorpack stages with StagingArea ops (a put op run with each
// step, a get op feeding the tower) on the GPU's input pipeline; here a side stream and CUDA
// events order the copies, and staging ahead is optional: every source already copies its batch
// to the device itself.
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
