#include "trainpack/input/dataflow.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "trainpack/input/pass_order.h"

namespace trainpack {

namespace {

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << sizes;
  return os.str();
}

}  // namespace

// ---- DataFlow ----

DataFlow::~DataFlow() = default;

void DataFlow::begin_pass() { begin_pass(pass_ + 1); }

void DataFlow::begin_pass(int64_t pass) {
  if (pass < 0) {
    throw std::invalid_argument(fmt::format("{}: invalid pass number {}", name(), pass));
  }
  _begin_pass(pass);
  pass_ = pass;
  position_ = 0;
  ended_ = false;
}

std::optional<Datapoint> DataFlow::next() {
  if (pass_ < 0) {
    throw std::logic_error(name() + ": next() called before begin_pass()");
  }
  if (ended_) return std::nullopt;
  auto dp = _next();
  if (dp) {
    ++position_;
  } else {
    ended_ = true;
  }
  return dp;
}

void DataFlow::seek(int64_t datapoints_consumed_in_this_pass) {
  if (pass_ < 0) {
    throw std::logic_error(name() + ": seek() called before begin_pass()");
  }
  if (datapoints_consumed_in_this_pass < 0) {
    throw std::invalid_argument(
        fmt::format("{}: invalid seek position {}", name(), datapoints_consumed_in_this_pass));
  }
  _seek(datapoints_consumed_in_this_pass);
  position_ = datapoints_consumed_in_this_pass;
  ended_ = false;
}

std::string DataFlow::describe() const {
  const std::optional<int64_t> n = size();
  return n ? fmt::format("{} ({} datapoints)", name(), *n) : name();
}

std::string BatchData::describe() const {
  return fmt::format("BatchData(batch_size={}{}) over {}", batch_size_,
                     remainder_ ? ", remainder=true" : "", ds_->describe());
}

void DataFlow::_seek(int64_t) { throw std::logic_error(name() + " does not support seek"); }

// ---- DataFromList ----

DataFromList::DataFromList(std::vector<Datapoint> datapoints, DataFromListOptions options)
    : datapoints_(std::move(datapoints)), options_(options) {}

std::vector<int64_t> DataFromList::order_of_pass(int64_t pass) const {
  return pass_order(static_cast<int64_t>(datapoints_.size()), options_.shuffle(), options_.seed(),
                    pass);
}

std::string DataFromList::describe() const {
  if (!options_.shuffle()) return DataFlow::describe();
  return fmt::format("{} ({} datapoints, shuffled with seed {})", name(), datapoints_.size(),
                     options_.seed());
}

void DataFromList::_begin_pass(int64_t pass) {
  order_ = order_of_pass(pass);
  index_ = 0;
}

std::optional<Datapoint> DataFromList::_next() {
  if (index_ >= order_.size()) return std::nullopt;
  return datapoints_[static_cast<size_t>(order_[index_++])];
}

void DataFromList::_seek(int64_t datapoints_consumed_in_this_pass) {
  if (static_cast<uint64_t>(datapoints_consumed_in_this_pass) > order_.size()) {
    throw std::out_of_range(fmt::format("DataFromList: seek to {} past the end of a pass of {}",
                                        datapoints_consumed_in_this_pass, order_.size()));
  }
  index_ = static_cast<size_t>(datapoints_consumed_in_this_pass);
}

// ---- DataFromGenerator ----

DataFromGenerator::DataFromGenerator(Generator generator, std::optional<int64_t> size)
    : generator_(std::move(generator)), size_(size) {
  if (!generator_) throw std::invalid_argument("DataFromGenerator: empty generator function");
  if (size_ && *size_ < 0) {
    throw std::invalid_argument(fmt::format("DataFromGenerator: invalid size {}", *size_));
  }
}

// ---- BatchData ----

BatchData::BatchData(DataFlowPtr ds, int64_t batch_size, bool remainder)
    : ds_(std::move(ds)), batch_size_(batch_size), remainder_(remainder) {
  if (!ds_) throw std::invalid_argument("BatchData: null dataflow");
  if (batch_size_ < 1) {
    throw std::invalid_argument(fmt::format("BatchData: invalid batch_size {}", batch_size_));
  }
}

std::optional<int64_t> BatchData::size() const {
  auto n = ds_->size();
  if (!n) return std::nullopt;
  return remainder_ ? (*n + batch_size_ - 1) / batch_size_ : *n / batch_size_;
}

std::optional<Datapoint> BatchData::_next() {
  std::vector<Datapoint> points;
  points.reserve(static_cast<size_t>(batch_size_));
  while (static_cast<int64_t>(points.size()) < batch_size_) {
    auto dp = ds_->next();
    if (!dp) break;
    points.push_back(std::move(*dp));
  }
  if (points.empty()) return std::nullopt;
  if (static_cast<int64_t>(points.size()) < batch_size_ && !remainder_) return std::nullopt;

  const Datapoint& first = points.front();
  for (size_t j = 1; j < points.size(); ++j) {
    if (points[j].size() != first.size()) {
      throw std::invalid_argument(
          fmt::format("BatchData: datapoint {} of the batch has {} components, the first has {}", j,
                      points[j].size(), first.size()));
    }
    for (size_t c = 0; c < first.size(); ++c) {
      const at::Tensor& a = first[c];
      const at::Tensor& b = points[j][c];
      if (a.sizes() != b.sizes()) {
        throw std::invalid_argument(fmt::format(
            "BatchData: component {} has shape {} in datapoint {} of the batch but {} in the "
            "first",
            c, shape_str(b.sizes()), j, shape_str(a.sizes())));
      }
      if (a.scalar_type() != b.scalar_type()) {
        throw std::invalid_argument(
            fmt::format("BatchData: component {} has dtype {} in datapoint {} of the batch but {} "
                        "in the first",
                        c, c10::toString(b.scalar_type()), j, c10::toString(a.scalar_type())));
      }
    }
  }
  Datapoint batch;
  batch.reserve(first.size());
  std::vector<at::Tensor> parts(points.size());
  for (size_t c = 0; c < first.size(); ++c) {
    for (size_t j = 0; j < points.size(); ++j) parts[j] = points[j][c];
    batch.push_back(at::stack(parts, 0));
  }
  return batch;
}

void BatchData::_seek(int64_t datapoints_consumed_in_this_pass) {
  int64_t target = datapoints_consumed_in_this_pass * batch_size_;
  // With remainder the last batch is short: seeking past it (to size()) is the pass's end.
  const auto n = ds_->size();
  if (remainder_ && n && datapoints_consumed_in_this_pass == *size()) target = std::min(target, *n);
  ds_->seek(target);
}

// ---- MapData ----

MapData::MapData(DataFlowPtr ds, Func func) : ds_(std::move(ds)) {
  if (!ds_) throw std::invalid_argument("MapData: null dataflow");
  if (!func) throw std::invalid_argument("MapData: empty function");
  func_ = [f = std::move(func)](Datapoint dp, const MapContext&) { return f(std::move(dp)); };
}

MapData::MapData(DataFlowPtr ds, ContextFunc func) : ds_(std::move(ds)), func_(std::move(func)) {
  if (!ds_) throw std::invalid_argument("MapData: null dataflow");
  if (!func_) throw std::invalid_argument("MapData: empty function");
}

void MapData::_begin_pass(int64_t pass) {
  ds_->begin_pass(pass);
  input_position_ = 0;
}

std::optional<Datapoint> MapData::_next() {
  while (auto dp = ds_->next()) {
    const MapContext context{pass(), input_position_++};
    if (auto out = func_(std::move(*dp), context)) return out;
  }
  return std::nullopt;
}

void MapData::_seek(int64_t datapoints_consumed_in_this_pass) {
  ds_->seek(datapoints_consumed_in_this_pass);
  input_position_ = datapoints_consumed_in_this_pass;
}

}  // namespace trainpack
