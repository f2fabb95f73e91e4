#include "trainpack/callbacks/summary.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/graph.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/histogram.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

// ---- MovingAverageSummary ----

MovingAverageSummary::MovingAverageSummary(std::string collection)
    : collection_(std::move(collection)) {
  // Every rank keeps its own averages, which MergeAllSummaries averages over the ranks.
  set_runs_on_every_rank();
  if (collection_.empty()) {
    throw std::invalid_argument(
        "MovingAverageSummary: collection is empty; pass a Graph collection name (the default, "
        "'MOVING_SUMMARY_OPS', holds the tower's moving averages)");
  }
}

void MovingAverageSummary::_setup_graph() {
  tower_ = collection_ == Graph::kMovingSummaryOps;
  ops_ = nullptr;  // resolved at the first step, when every callback has registered its closures
  logged_ = false;
  args_ = RunArgs();
  args_.add_op([this] { update(); });
}

RunArgs MovingAverageSummary::_before_run(const StepContext& /*ctx*/) {
  return RunArgs::ref(args_);
}

void MovingAverageSummary::update() {
  if (ops_ == nullptr) ops_ = &graph().collection(collection_);
  for (const auto& op : *ops_) op();
  const size_t n = tower_ ? trainer().tower_registry().update_moving_averages() : 0;
  if (!logged_) {
    logged_ = true;
    TP_LOG_INFO(
        "[MovingAverageSummary] {} operations in collection '{}' will be run with session hooks.",
        ops_->size() + n, collection_);
  }
}

namespace {
constexpr const char* kBiased = "biased/";
constexpr const char* kUpdates = "updates/";
constexpr const char* kDecay = "decay/";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

CallbackState MovingAverageSummary::state() const {
  // Only the default collection updates the tower's averages (the Graph collection's closures
  // keep their own state, if any).
  if (!is_set_up() || collection_ != Graph::kMovingSummaryOps) return {};
  CallbackState s;
  for (const auto& m : trainer().tower_registry().moving_average_states()) {
    s[kBiased + m.name] = state_scalar(m.biased);
    s[kUpdates + m.name] = state_scalar(m.updates);
    s[kDecay + m.name] = state_scalar(m.decay);
  }
  return s;
}

void MovingAverageSummary::load_state(const CallbackState& state) {
  const std::string who = name();
  if (!is_set_up()) {
    throw std::logic_error(who + "::load_state called before setup_graph");
  }
  if (collection_ != Graph::kMovingSummaryOps) {
    check_state_keys(who, state, {});
    return;
  }
  std::vector<TowerRegistry::MovingAverageState> states;
  for (const auto& kv : state) {
    const std::string& key = kv.first;
    if (starts_with(key, kBiased)) {
      TowerRegistry::MovingAverageState m;
      m.name = key.substr(std::char_traits<char>::length(kBiased));
      m.biased = state_double(who, state, key);
      m.updates = state_int(who, state, kUpdates + m.name);
      m.decay = state_double(who, state, kDecay + m.name);
      if (m.updates < 1 || !(m.decay >= 0.0 && m.decay < 1.0)) {
        throw std::invalid_argument(fmt::format(
            "{}: the saved moving average '{}' has updates {} and decay {}; expected updates >= 1 "
            "and decay in [0, 1)",
            who, m.name, m.updates, m.decay));
      }
      states.push_back(std::move(m));
      continue;
    }
    std::string name;
    if (starts_with(key, kUpdates)) name = key.substr(std::char_traits<char>::length(kUpdates));
    if (starts_with(key, kDecay)) name = key.substr(std::char_traits<char>::length(kDecay));
    if (name.empty() || state.count(kBiased + name) == 0) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state has an entry '{}' that this callback does not save (its entries: "
          "biased/<name>, updates/<name> and decay/<name> for each moving average)",
          who, key));
    }
  }
  trainer().tower_registry().restore_moving_averages(std::move(states));
}

// ---- merging the tower's summaries ----

namespace {

SummaryValue histogram_value(const char* who, const TowerRegistry::SummaryEntry& e) {
  SummaryValue v;
  v.tag = e.tag;
  v.kind = SummaryValue::Kind::kHistogram;
  try {
    v.histogram = make_histogram(e.value);
  } catch (const std::invalid_argument& ex) {
    throw std::invalid_argument(
        fmt::format("{}: histogram summary '{}': {}", who, e.tag, ex.what()));
  }
  return v;
}

void append_images(const char* who, const TowerRegistry::SummaryEntry& e, Summary* out) {
  at::Tensor value = e.value;
  // Only the first max_outputs images are converted (a batch may be large, and on a device).
  if (value.dim() == 4 && value.size(0) > e.max_outputs) value = value.narrow(0, 0, e.max_outputs);
  const at::Tensor nhwc =
      detail::image_to_nhwc_uint8(fmt::format("{}: image summary '{}'", who, e.tag), value);
  const int64_t n = std::min<int64_t>(nhwc.size(0), e.max_outputs);
  for (int64_t k = 0; k < n; ++k) {
    // tf.summary.image's tags: `name/image` for max_outputs 1, else `name/image/<k>`.
    std::string tag = e.max_outputs == 1 ? e.tag + "/image" : fmt::format("{}/image/{}", e.tag, k);
    SummaryValue v;
    if (detail::encode_image_value(who, nhwc, k, std::move(tag), &v)) {
      out->values.push_back(std::move(v));
    }
  }
}

}  // namespace

Summary merge_tower_summaries(const TowerRegistry& registry, const char* who) {
  Summary out;
  for (const auto& e : registry.summaries()) {
    if (!e.value.defined()) continue;
    switch (e.kind) {
      case TowerRegistry::SummaryKind::kScalar:
        out.values.push_back(SummaryValue::make_scalar(e.tag, host_scalar(e.value)));
        break;
      case TowerRegistry::SummaryKind::kHistogram:
        out.values.push_back(histogram_value(who, e));
        break;
      case TowerRegistry::SummaryKind::kImage:
        append_images(who, e, &out);
        break;
    }
  }
  for (const auto& m : registry.moving_averages()) {
    if (m.updates == 0 || !m.biased.defined()) continue;
    out.values.push_back(SummaryValue::make_scalar(m.name + "-summary", host_scalar(m.average())));
  }
  return out;
}

size_t tower_summary_count(const TowerRegistry& registry) {
  return registry.summaries().size() + registry.moving_averages().size();
}

// ---- MergeAllSummaries ----

namespace {

void check_options(const MergeAllSummariesOptions& options, const char* who) {
  if (options.period() < 0) {
    throw std::invalid_argument(
        fmt::format("{}: period must be >= 0 (0: only at the end of each epoch), got {}", who,
                    options.period()));
  }
  if (options.key() != Graph::kSummaries) {
    throw std::invalid_argument(fmt::format(
        "{}: key '{}' is not a summary collection; the training tower records every summary in "
        "'summaries', so pass key 'summaries' (the default)",
        who, options.key()));
  }
}

// The hooked runs MergeAllSummaries materialises: the last step of the epoch, and every `period`
// steps (local step based).
bool summary_due(const Callback& cb, int64_t period) {
  const int64_t ls = cb.local_step();
  return ls == cb.trainer().steps_per_epoch() - 1 || (period > 0 && (ls + 1) % period == 0);
}

// Under data-parallel training: every scalar of `summary` becomes its mean over the ranks (one
// all-reduce of them all, in float64, divided by the number of ranks); histograms and images stay
// this rank's (only the chief's are put). Every rank calls this at the same due step, so all of
// them take part; first they check that all have the same scalar tags, in the same order, or
// the sums would mix different quantities (std::runtime_error on every rank, naming the tags).
void average_scalars_over_ranks(const Callback& cb, Summary* summary) {
  const ProcessGroupPtr& group = cb.trainer().process_group();
  if (!group || !group->distributed()) return;
  std::vector<SummaryValue*> scalars;
  std::string tags;
  for (auto& v : summary->values) {
    if (v.kind != SummaryValue::Kind::kScalar) continue;
    scalars.push_back(&v);
    tags += v.tag;
    tags += '\n';
  }
  const auto n = static_cast<int64_t>(scalars.size());
  // 62 bits, so that its negation fits (max and -max give the largest and the smallest).
  const auto h = static_cast<int64_t>(std::hash<std::string>()(tags) >> 2);
  std::vector<at::Tensor> check{at::tensor({n, -n, h, -h}, at::kLong)};
  group->all_reduce_max(check);
  // `check` and `sums` are CPU buffers that the ranks exchange: no device value.
  const int64_t* c = check[0].data_ptr<int64_t>();
  if (c[0] != -c[1] || c[2] != -c[3]) {
    std::string mine;
    for (const SummaryValue* v : scalars) mine += (mine.empty() ? "'" : ", '") + v->tag + "'";
    throw std::runtime_error(fmt::format(
        "MergeAllSummaries: the ranks have different scalar summaries ({} to {} of them; this "
        "rank's: {}), so their mean over the ranks cannot be taken; every rank must run the same "
        "tower, recording the same summaries",
        -c[1], c[0], mine.empty() ? "none" : mine));
  }
  if (n == 0) return;
  std::vector<double> values;
  values.reserve(scalars.size());
  for (const SummaryValue* v : scalars) values.push_back(v->scalar);
  std::vector<at::Tensor> sums{at::tensor(values, at::kDouble)};
  group->all_reduce_sum(sums);
  const double* total = sums[0].data_ptr<double>();
  const auto world = static_cast<double>(group->world_size());
  for (size_t i = 0; i < scalars.size(); ++i) scalars[i]->scalar = total[i] / world;
}

void log_size_once(const Callback& cb, const std::string& key, bool* logged) {
  if (*logged) return;
  *logged = true;
  TP_LOG_INFO("Summarizing collection '{}' of size {}.", key,
              tower_summary_count(cb.trainer().tower_registry()));
}

}  // namespace

CallbackPtr MergeAllSummaries(MergeAllSummariesOptions options) {
  check_options(options, "MergeAllSummaries");
  if (options.run_alone()) return std::make_shared<MergeAllSummaries_RunAlone>(std::move(options));
  return std::make_shared<MergeAllSummaries_RunWithOp>(std::move(options));
}

MergeAllSummaries_RunWithOp::MergeAllSummaries_RunWithOp(MergeAllSummariesOptions options)
    : options_(std::move(options)) {
  check_options(options_, "MergeAllSummaries");
  set_runs_on_every_rank();  // the scalars are averaged over the ranks
}

RunArgs MergeAllSummaries_RunWithOp::_before_run(const StepContext& /*ctx*/) {
  due_ = summary_due(*this, options_.period());
  return RunArgs();
}

void MergeAllSummaries_RunWithOp::_after_run(const StepContext& /*ctx*/,
                                             const RunValues& /*values*/) {
  log_size_once(*this, options_.key(), &logged_);
  if (!due_) return;
  due_ = false;
  Summary summary = merge_tower_summaries(trainer().tower_registry(), "MergeAllSummaries");
  average_scalars_over_ranks(*this, &summary);
  if (!summary.values.empty()) trainer().monitors().put_summary(std::move(summary));
}

MergeAllSummaries_RunAlone::MergeAllSummaries_RunAlone(MergeAllSummariesOptions options)
    : options_(std::move(options)) {
  check_options(options_, "MergeAllSummaries");
  set_runs_on_every_rank();  // the scalars are averaged over the ranks
}

RunArgs MergeAllSummaries_RunAlone::_before_run(const StepContext& /*ctx*/) {
  due_ = summary_due(*this, options_.period());
  return RunArgs();
}

void MergeAllSummaries_RunAlone::_after_run(const StepContext& /*ctx*/,
                                            const RunValues& /*values*/) {
  log_size_once(*this, options_.key(), &logged_);
  if (!due_) return;
  due_ = false;
  summary_ = merge_tower_summaries(trainer().tower_registry(), "MergeAllSummaries");
  average_scalars_over_ranks(*this, &summary_);
  pending_ = !summary_.values.empty();
}

void MergeAllSummaries_RunAlone::_trigger_step() {
  const int64_t period = options_.period();
  if (!pending_ || period <= 0 || (local_step() + 1) % period != 0) return;
  trainer().monitors().put_summary(summary_);
}

void MergeAllSummaries_RunAlone::_trigger() {
  if (!pending_) return;
  pending_ = false;
  trainer().monitors().put_summary(summary_);
}

// ---- SimpleMovingAverage ----

SimpleMovingAverage::SimpleMovingAverage(std::vector<std::string> names, int64_t window_size)
    : window_(window_size) {
  if (names.empty()) {
    throw std::invalid_argument(
        "SimpleMovingAverage: names is empty; pass the names of scalar tensors the step "
        "publishes, e.g. {\"cost\"}");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      throw std::invalid_argument(fmt::format(
          "SimpleMovingAverage: name {} is empty; pass the names of scalar tensors the step "
          "publishes",
          i));
    }
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) {
        throw std::invalid_argument(fmt::format(
            "SimpleMovingAverage: name '{}' is given twice; list each tensor once", names[i]));
      }
    }
  }
  if (window_size < 1) {
    throw std::invalid_argument(fmt::format(
        "SimpleMovingAverage: window_size must be >= 1 (the number of steps averaged), got {}",
        window_size));
  }
  for (const auto& n : names) tags_.push_back(n + "/SMA");
  ring_.assign(static_cast<size_t>(window_) * names.size(), 0.0);
  fetch_ = RunArgs(std::move(names));
}

RunArgs SimpleMovingAverage::_before_run(const StepContext& /*ctx*/) {
  return RunArgs::ref(fetch_);
}

void SimpleMovingAverage::_after_run(const StepContext& /*ctx*/, const RunValues& values) {
  const size_t n = tags_.size();
  const size_t row = static_cast<size_t>(rows_ % window_);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& t = values[i];
    if (t.numel() != 1) {
      throw std::invalid_argument(fmt::format(
          "SimpleMovingAverage: tensor '{}' must be a scalar, but has shape [{}]; publish a "
          "one-element tensor (e.g. .mean())",
          values.name(i), fmt::join(t.sizes().begin(), t.sizes().end(), ", ")));
    }
    ring_[row * n + i] = host_scalar(t);  // a host sync, inherent to this callback
  }
  ++rows_;
}

CallbackState SimpleMovingAverage::state() const {
  const size_t n = tags_.size();
  const int64_t held = std::min(rows_, window_);
  const int64_t oldest = rows_ > window_ ? rows_ % window_ : 0;
  CallbackState s;
  s["rows"] = state_scalar(rows_);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> column;
    column.reserve(static_cast<size_t>(held));
    for (int64_t r = 0; r < held; ++r) {
      column.push_back(ring_[static_cast<size_t>((oldest + r) % window_) * n + i]);
    }
    s["values/" + names()[i]] = state_vector(column);
  }
  return s;
}

void SimpleMovingAverage::load_state(const CallbackState& state) {
  const std::string who = name();
  const size_t n = tags_.size();
  for (const auto& kv : state) {
    bool known = kv.first == "rows";
    for (const auto& name : names()) known = known || kv.first == "values/" + name;
    if (!known) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state has an entry '{}' that this callback does not save (its entries: "
          "rows, and values/<name> for {})",
          who, kv.first, fmt::join(names(), ", ")));
    }
  }
  const int64_t rows = state_int(who, state, "rows");
  std::vector<std::vector<double>> columns;
  for (const auto& name : names()) {
    columns.push_back(state_doubles(who, state, "values/" + name));
  }
  const int64_t saved = static_cast<int64_t>(columns.front().size());
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int64_t>(columns[i].size()) != saved || rows < saved) {
      throw std::invalid_argument(
          fmt::format("{}: the saved state entry 'values/{}' has {} values, but 'rows' is {} and "
                      "'values/{}' has {}; every column holds min(rows, window) values",
                      who, names()[i], columns[i].size(), rows, names()[0], saved));
    }
  }
  // The last min(saved, window) rows go where an uninterrupted run holds them. (A window larger
  // than the saved one holds only the saved rows: they count as all there were.)
  const int64_t kept = std::min(saved, window_);
  rows_ = kept < std::min(rows, window_) ? kept : rows;
  for (int64_t r = 0; r < kept; ++r) {
    const int64_t appended = rows_ - kept + r;  // the row's 0-based number among all appended
    const auto slot = static_cast<size_t>(appended % window_);
    for (size_t i = 0; i < n; ++i) {
      ring_[slot * n + i] = columns[i][static_cast<size_t>(saved - kept + r)];
    }
  }
}

void SimpleMovingAverage::_trigger_step() {
  if (rows_ == 0 || global_step() % window_ != 0) return;
  const size_t n = tags_.size();
  const int64_t held = std::min(rows_, window_);
  const int64_t oldest = rows_ > window_ ? rows_ % window_ : 0;
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;  // oldest first, as numpy sums a deque of few rows
    for (int64_t r = 0; r < held; ++r) {
      sum += ring_[static_cast<size_t>((oldest + r) % window_) * n + i];
    }
    trainer().monitors().put_scalar(tags_[i], sum / static_cast<double>(held));
  }
}

}  // namespace trainpack
