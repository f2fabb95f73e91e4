// trainpack/trainpack.h: the whole public API in one include, as <torch/torch.h> is LibTorch's.
//
//   #include <trainpack/trainpack.h>
//
// Each header below can also be included on its own. trainpack/testing.h (tools for testing
// callbacks) is not included: a test includes it itself. trainpack/detail/ is internal.
#pragma once

// The loop: trainers, towers, the training state, ModelDesc and TrainConfig
#include "trainpack/train/config.h"
#include "trainpack/train/data_parallel.h"
#include "trainpack/train/defaults.h"
#include "trainpack/train/distributed.h"
#include "trainpack/train/optimizer_state.h"
#include "trainpack/train/resume_point.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/train/state.h"
#include "trainpack/train/step_context.h"
#include "trainpack/train/tower.h"
#include "trainpack/train/tower_registry.h"
#include "trainpack/train/trainer.h"

// Callbacks and monitors (tensorpack's callbacks/ package)
#include "trainpack/callbacks/base.h"
#include "trainpack/callbacks/callback_state.h"
#include "trainpack/callbacks/concurrency.h"
#include "trainpack/callbacks/console.h"
#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/graph_profiler.h"
#include "trainpack/callbacks/group.h"
#include "trainpack/callbacks/hooks.h"
#include "trainpack/callbacks/inference.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/callbacks/inject_shell.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/misc.h"
#include "trainpack/callbacks/monitor.h"
#include "trainpack/callbacks/monitor_base.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/prof.h"
#include "trainpack/callbacks/progress_bar.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/scalar_printer.h"
#include "trainpack/callbacks/send_monitor_data.h"
#include "trainpack/callbacks/session_run_timeout.h"
#include "trainpack/callbacks/steps.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/tensors.h"
#include "trainpack/callbacks/tf_event_writer.h"
#include "trainpack/callbacks/trigger.h"

// Input: dataflows and input sources
#include "trainpack/input/dataflow.h"
#include "trainpack/input/fashion_mnist.h"
#include "trainpack/input/input_desc.h"
#include "trainpack/input/input_source.h"
#include "trainpack/input/shard.h"

// The Graph registry, the loop's exceptions and session initialisers
#include "trainpack/exceptions.h"
#include "trainpack/graph.h"
#include "trainpack/session_init.h"

// Utilities: logger, clocks, runtime settings, file formats
#include "trainpack/utils/arg.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/chrome_trace.h"
#include "trainpack/utils/clock.h"
#include "trainpack/utils/command_template.h"
#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/error_file.h"
#include "trainpack/utils/event_file_writer.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/file_names.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/histogram.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/npz.h"
#include "trainpack/utils/nvml.h"
#include "trainpack/utils/output_dir.h"
#include "trainpack/utils/png.h"
#include "trainpack/utils/runtime.h"
#include "trainpack/utils/stats_json.h"
#include "trainpack/utils/summary.h"
#include "trainpack/utils/value_range.h"
