// DataParallelTrainer (train/data_parallel.h): c10d's Reducer averages the gradients during
// backward; the chief's state is broadcast at start and before every epoch.
#include "trainpack/train/data_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace detail {

struct DataParallelState {
  std::unique_ptr<c10d::Reducer> reducer;
  std::vector<at::Tensor> model_state;      // parameters then buffers, detached (shared storage)
  std::vector<at::Tensor> buffers;          // detached
  std::vector<std::string> variable_names;  // graph variables broadcast from the chief
  std::vector<at::Tensor> variable_values;  // one float64 tensor, one value per name
};

}  // namespace detail

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> c10d_group(const ProcessGroup& group) {
  return *static_cast<c10::intrusive_ptr<c10d::ProcessGroup>*>(group.c10d_process_group());
}

// One line per trainable parameter, in order: "#<k> `<name>` of shape [a, b] <dtype>".
std::vector<std::string> parameter_lines(const std::vector<at::Tensor>& params,
                                         const std::unordered_map<size_t, std::string>& names) {
  std::vector<std::string> lines;
  for (size_t k = 0; k < params.size(); ++k) {
    lines.push_back(fmt::format("#{} `{}` of shape [{}] {}", k + 1, names.at(k),
                                fmt::join(params[k].sizes(), ", "),
                                c10::toString(params[k].scalar_type())));
  }
  return lines;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every rank must build the same module: the first rank whose trainable parameters differ from
// rank 0's is named, with its host and the first parameter that differs, before any step (a
// collective: every rank calls it).
void check_same_model(ProcessGroup& group, const std::vector<std::string>& lines) {
  std::string signature;
  for (const std::string& line : lines) signature += line + "\n";
  const std::optional<ProcessGroup::RankDifference> d = group.first_difference("model", signature);
  if (!d) return;
  const std::vector<std::string> theirs = split_lines(d->value);
  const std::vector<std::string> chiefs = split_lines(d->chief_value);
  size_t k = 0;
  while (k < theirs.size() && k < chiefs.size() && theirs[k] == chiefs[k]) ++k;
  const auto line_or_none = [k](const std::vector<std::string>& v) {
    return k < v.size() ? "trainable parameter " + v[k]
                        : std::string("no parameter #") + std::to_string(k + 1);
  };
  throw std::invalid_argument(fmt::format(
      "DataParallelTrainer: the ranks' models differ: rank {} (host {}) has {}, rank 0 (host {}) "
      "has {} ({} and {} trainable parameters in all); every rank must build the same module",
      d->rank, d->host, line_or_none(theirs), d->chief_host, line_or_none(chiefs), theirs.size(),
      chiefs.size()));
}

c10::Device default_device(const ProcessGroupPtr& group) {
  if (group && group->backend() == "nccl") {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(group->local_rank()));
  }
  return c10::Device(c10::kCPU);
}

const ProcessGroupPtr& checked(const ProcessGroupPtr& group) {
  if (!group) {
    throw std::invalid_argument(
        "DataParallelTrainer: the process group is null; pass ProcessGroup::from_environment()");
  }
  return group;
}

// Whether an error out of backward came from the gradients' all-reduce (Gloo's or NCCL's
// transport) rather than from the model.
bool is_communication_error(const std::string& what) {
  for (const char* marker : {"Gloo", "gloo", "NCCL", "Connection", "connection", "Timed out",
                             "timed out", "peer", "Socket"}) {
    if (what.find(marker) != std::string::npos) return true;
  }
  return false;
}

constexpr size_t kFirstBucketBytes = 1024 * 1024;  // DDP's _DEFAULT_FIRST_BUCKET_BYTES

}  // namespace

// Broadcasts the chief's parameters, buffers and graph variables before every epoch (tensorpack's
// BROADCAST_EVERY_EPOCH callback of HorovodTrainer). chief_only: false.
class DataParallelSync : public Callback {
 public:
  explicit DataParallelSync(DataParallelTrainer* trainer) : trainer_(trainer) {
    set_chief_only(false);
  }
  std::string name() const override { return "DataParallelSync"; }

 protected:
  void _before_epoch() override { trainer_->broadcast_model(/*variables=*/true); }

 private:
  DataParallelTrainer* trainer_;
};

DataParallelTrainer::DataParallelTrainer(ProcessGroupPtr group, DataParallelOptions options,
                                         std::optional<c10::Device> device)
    : SimpleTrainer(device.value_or(default_device(checked(group)))),
      options_(options),
      state_(std::make_unique<detail::DataParallelState>()) {
  if (options_.bucket_cap_mb() <= 0) {
    throw std::invalid_argument(fmt::format(
        "DataParallelOptions().bucket_cap_mb: must be > 0, got {}", options_.bucket_cap_mb()));
  }
  set_process_group(std::move(group));
}

DataParallelTrainer::~DataParallelTrainer() = default;

std::vector<CallbackPtr> DataParallelTrainer::_setup_graph() {
  const ProcessGroup& group = *process_group();
  TP_LOG_INFO("[DataParallelTrainer] rank {} of {}, local rank {}, {} on device {}", group.rank(),
              group.world_size(), group.local_rank(), group.backend(), device().str());
  if (!group.distributed()) {
    TP_LOG_INFO("Building graph for a single training tower on device {} ...", device().str());
    return {};
  }
  if (group.backend() == "gloo" && !device().is_cpu()) {
    throw std::invalid_argument(fmt::format(
        "DataParallelTrainer: the device is {}, but the group's backend is Gloo, which reduces "
        "CPU tensors here; use DistributedOptions().cuda(true) (NCCL) or the CPU device",
        device().str()));
  }
  std::vector<at::Tensor> params;
  std::unordered_map<size_t, std::string> names;
  for (const auto& p : module()->named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad()) continue;
    names[params.size()] = p.key();
    params.push_back(p.value());
  }
  for (const auto& p : module()->named_parameters(/*recurse=*/true)) {
    state_->model_state.push_back(p.value().detach());
  }
  for (const auto& b : module()->named_buffers(/*recurse=*/true)) {
    state_->buffers.push_back(b.value().detach());
    state_->model_state.push_back(b.value().detach());
  }
  if (params.empty()) {
    throw std::invalid_argument(
        "DataParallelTrainer: the module has no trainable parameters; nothing to average");
  }
  check_same_model(*process_group(), parameter_lines(params, names));
  auto pg = c10d_group(group);
  try {
    // Every rank must hold the same model (same parameters, shapes and dtypes), as DDP checks.
    c10d::verify_params_across_processes(pg, params, c10::nullopt);
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format(
        "DataParallelTrainer: the ranks' models differ (every rank must build the same module): "
        "{}",
        e.what()));
  }
  // Buckets of the parameters in reverse order of definition (the order their gradients are
  // ready in, for most models), the first of kFirstBucketBytes, kept for the whole run. (DDP
  // starts with one bucket and rebuilds them after the first step in the order the gradients
  // came: then the first step after a resume would lay out the gradients otherwise than the
  // uninterrupted run did at that step, and with more than 2 ranks Gloo's ring all-reduce would
  // add them in another order: a resumed run would no longer be the same run bit for bit.)
  const size_t cap = static_cast<size_t>(options_.bucket_cap_mb()) * 1024 * 1024;
  const std::vector<size_t> limits{kFirstBucketBytes, cap};
  const std::vector<bool> expect_sparse(params.size(), false);
  auto [buckets, bucket_limits] =
      c10d::compute_bucket_assignment_by_size(params, limits, expect_sparse);
  std::reverse(buckets.begin(), buckets.end());  // gradients come in reverse order of definition
  std::reverse(bucket_limits.begin(), bucket_limits.end());
  state_->reducer = compat::make_reducer<c10d::Reducer>(
      params, std::move(buckets), std::move(bucket_limits), pg, expect_sparse,
      static_cast<int64_t>(cap), options_.find_unused_parameters(), std::move(names),
      static_cast<int64_t>(kFirstBucketBytes));
  TP_LOG_INFO(
      "Building graph for data-parallel training on {} ranks: {} parameter tensors, "
      "gradient buckets of {} MiB",
      group.world_size(), params.size(), options_.bucket_cap_mb());
  std::vector<CallbackPtr> callbacks;
  if (options_.broadcast_every_epoch()) {
    callbacks.push_back(std::make_shared<DataParallelSync>(this));
  }
  return callbacks;
}

void DataParallelTrainer::broadcast_model(bool variables) {
  ProcessGroup& group = *process_group();
  if (!group.distributed()) return;
  {
    torch::NoGradGuard no_grad;
    group.broadcast(state_->model_state);
  }
  if (!variables) return;
  if (state_->variable_names.empty() && state_->variable_values.empty()) {
    for (const auto& name : graph().variable_names()) {
      if (name != "global_step") state_->variable_names.push_back(name);  // counters: below
    }
    state_->variable_values = {
        at::zeros({static_cast<int64_t>(state_->variable_names.size())}, at::kDouble)};
  }
  if (state_->variable_names.empty()) return;
  double* values = state_->variable_values.front().data_ptr<double>();
  for (size_t i = 0; i < state_->variable_names.size(); ++i) {
    values[i] = graph().variable(state_->variable_names[i]).get();
  }
  group.broadcast(state_->variable_values);
  if (group.is_chief()) return;
  for (size_t i = 0; i < state_->variable_names.size(); ++i) {
    const Graph::Variable& var = graph().variable(state_->variable_names[i]);
    if (var.get() != values[i]) var.set(values[i]);
  }
}

bool DataParallelTrainer::cuda_graph_possible(std::string* why_not) const {
  if (process_group()->world_size() > 1) {
    *why_not = fmt::format(
        "the gradients of {} processes are all-reduced by c10d's Reducer, whose hooks run on the "
        "host at every backward, so the step is not captured",
        process_group()->world_size());
    return false;
  }
  return SimpleTrainer::cuda_graph_possible(why_not);
}

void DataParallelTrainer::_after_initialize() {
  SimpleTrainer::_after_initialize();  // the CUDA graph's checks, the same on every rank
  ProcessGroup& group = *process_group();
  if (!group.distributed()) return;
  const size_t n = state_->model_state.size();
  if (group.is_chief()) {
    TP_LOG_INFO("Broadcasting initialization of {} global variables ...", n);
  } else {
    TP_LOG_INFO("Rank {} waiting for initialization of {} variables ...", group.rank(), n);
  }
  broadcast_model(/*variables=*/true);

  // The optimizer's state (momentum buffers, step counts), as bytes of its archive.
  std::string bytes;
  if (group.is_chief()) {
    torch::serialize::OutputArchive archive;
    optimizer().save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = group.broadcast_bytes(bytes);
  if (!group.is_chief()) {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    optimizer().load(archive);
  }

  // The counters and the input position the chief restored, and the saved epoch length (so that
  // every rank checks it in main_loop, and all refuse together).
  const std::optional<ResumePoint>& restored = restored_resume_point();
  const InputPosition position = input()->consumed();
  std::vector<at::Tensor> counters{
      at::tensor({static_cast<int64_t>(restored.has_value()), restored ? restored->epoch : 0,
                  restored ? restored->step_in_epoch : 0, restored ? restored->global_step : 0,
                  position.pass, position.position, saved_steps_per_epoch()},
                 at::kLong)};
  group.broadcast(counters);
  const int64_t* c = counters.front().data_ptr<int64_t>();
  // The chief restored its callbacks' states (schedules, moving averages, the input position):
  // the same callbacks on the other ranks continue from them too.
  if (c[0] != 0) broadcast_callback_states();
  if (group.is_chief()) return;
  if (c[0] != 0) set_resume_point(ResumePoint{c[1], c[2], c[3]}, c[6]);
  if (c[4] != 0 || c[5] != 0) input()->resume_at(InputPosition{c[4], c[5]});
}

namespace {

// The callbacks that run on every rank, in registration order: the same list on every rank,
// since the ranks run the same program and skip the same chief-only callbacks.
std::vector<Callback*> callbacks_on_every_rank(const Trainer& trainer) {
  std::vector<Callback*> list;
  for (const auto& cb : trainer.registered_callbacks()) {
    if (!cb->chief_only() || cb->runs_on_every_rank()) list.push_back(cb.get());
  }
  return list;
}

}  // namespace

void DataParallelTrainer::broadcast_callback_states() {
  ProcessGroup& group = *process_group();
  const std::vector<Callback*> callbacks = callbacks_on_every_rank(*this);
  std::string bytes;
  if (group.is_chief()) {
    torch::serialize::OutputArchive archive;
    for (size_t i = 0; i < callbacks.size(); ++i) {
      for (const auto& [key, value] : callbacks[i]->state()) {
        archive.write(fmt::format("{}/{}/{}", i, callbacks[i]->name(), key), value);
      }
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = group.broadcast_bytes(bytes);
  if (group.is_chief()) return;
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  std::vector<CallbackState> states(callbacks.size());
  for (const std::string& key : archive.keys()) {
    const size_t slash = key.find('/');
    const size_t second = key.find('/', slash + 1);
    const size_t i = std::stoul(key.substr(0, slash));
    const std::string name = key.substr(slash + 1, second - slash - 1);
    if (i >= callbacks.size() || callbacks[i]->name() != name) {
      TP_LOG_WARN(
          "The chief's callback #{} ({}) has no counterpart on rank {}; its state is "
          "not copied here",
          i, name, group.rank());
      continue;
    }
    at::Tensor value;
    archive.read(key, value);
    states[i][key.substr(second + 1)] = value;
  }
  for (size_t i = 0; i < callbacks.size(); ++i) {
    if (!states[i].empty()) callbacks[i]->load_state(states[i]);
  }
}

void DataParallelTrainer::run_step() {
  c10d::Reducer* reducer = state_->reducer.get();
  if (reducer == nullptr) {  // a group of one
    SimpleTrainer::run_step();
    return;
  }
  hooked_run([this, reducer](StepContext& ctx) {
    auto& opt = optimizer();
    const int64_t micro_batches = accumulate_steps();
    // With gradient accumulation, the micro-batches before the last run as DDP's no_sync():
    // without prepare_for_backward the Reducer's autograd hooks do nothing, so each backward only
    // adds to the local gradients; the last micro-batch's backward all-reduces the sums.
    for (int64_t i = 0; i < micro_batches; ++i) {
      const bool sync = i == micro_batches - 1;
      const std::vector<at::Tensor> batch = input()->next_batch();
      if (sync) {
        if (options_.broadcast_buffers() && !state_->buffers.empty()) {
          torch::NoGradGuard no_grad;
          process_group()->broadcast(state_->buffers);
        }
        reducer->prepare_for_forward();
      }
      at::Tensor cost = micro_batches == 1 ? run_tower(ctx, batch) : run_micro_batch(ctx, batch, i);
      if (i == 0) opt.zero_grad();
      if (!sync) {
        loss_for_backward(cost).backward();
        continue;
      }
      reducer->prepare_for_backward({});
      // The Reducer's all-reduces run inside backward: a collective for the heartbeats.
      const ProcessGroup::Collective collective(*process_group(),
                                                "the all-reduce of the gradients");
      try {
        loss_for_backward(cost)
            .backward();  // the Reducer all-reduces each bucket as its gradients are ready
      } catch (const DistributedError&) {
        throw;
      } catch (const c10::Error& e) {
        if (!is_communication_error(e.what_without_backtrace())) throw;  // the model's own error
        throw process_group()->explain_failure("the all-reduce of the gradients",
                                               e.what_without_backtrace());
      } catch (const std::exception& e) {
        // Gloo's transport errors (gloo::IoException) come out of backward as they were thrown.
        if (!is_communication_error(e.what())) throw;
        throw process_group()->explain_failure("the all-reduce of the gradients", e.what());
      }
    }
    if (micro_batches > 1) publish_micro_batch_cost(ctx);
    // On the averaged gradients, the same on every rank: with float16, every rank finds the same
    // inf/NaN and skips the same steps.
    apply_gradients(ctx);
  });
}

}  // namespace trainpack
