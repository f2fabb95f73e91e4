#include "trainpack/core/callback_group.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <stdexcept>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

void CallbackTimeLogger::add(std::string name, double seconds) {
  total_ += seconds;
  times_.emplace_back(std::move(name), seconds);
}

std::string CallbackTimeLogger::message() const {
  if (total_ < 2.0) return "";
  std::string parts;
  for (const auto& [name, t] : times_) {
    if (t / total_ > 0.3 && t > 1) {
      if (!parts.empty()) parts += "; ";
      parts += name + ": " + humanize_time_delta(t);
    }
  }
  return fmt::format("Callbacks took {:.3f} sec in total. {}", total_, parts);
}

void CallbackTimeLogger::log() const {
  std::string msg = message();
  if (!msg.empty()) TP_LOG_INFO("{}", msg);
}

Callbacks::Callbacks(std::vector<CallbackPtr> callbacks) : callbacks_(std::move(callbacks)) {
  for (const auto& cb : callbacks_) {
    if (!cb) throw std::invalid_argument("Callbacks: a callback in the list is null");
  }
}

void Callbacks::setup_graph(Trainer& trainer) {
  for (auto& list : lists_) list.clear();
  for (const auto& cb : callbacks_) {
    try {
      cb->setup_graph(trainer);
    } catch (...) {
      rethrow_named(*cb, Hook::kSetupGraph);
    }
  }
  for (int h = 0; h < kNumHooks; ++h) {
    for (const auto& cb : callbacks_) {
      if (cb->overrides(static_cast<Hook>(h))) lists_[h].push_back(cb.get());
    }
  }
}

void Callbacks::trigger_epoch() {
  CallbackTimeLogger timer;
  const auto timed = [&timer](Callback& cb) {
    auto start = std::chrono::steady_clock::now();
    cb.trigger_epoch();
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    timer.add(cb.name(), took.count());
  };
  const auto& list = dispatch_list(Hook::kTriggerEpoch);
  size_t i = 0;
  try {
    for (; i < list.size(); ++i) timed(*list[i]);
  } catch (const StopTraining&) {
    // The epoch was trained: the monitors after the callback that stopped (stats.json, the event
    // file, the printer) still record it, or a stop at an epoch end (the console's `stop`,
    // EarlyStopping) would leave the epoch out of the statistics for good. Nothing else runs.
    for (size_t j = i + 1; j < list.size(); ++j) {
      Callback& cb = *list[j];
      if (dynamic_cast<MonitorBase*>(&cb) == nullptr && dynamic_cast<Monitors*>(&cb) == nullptr) {
        continue;
      }
      try {
        timed(cb);
      } catch (const StopTraining&) {
        // Stopping already.
      } catch (...) {
        rethrow_named(cb, Hook::kTriggerEpoch);
      }
    }
    throw;
  } catch (...) {
    rethrow_named(*list[i], Hook::kTriggerEpoch);
  }
  timer.log();
}

int Callbacks::after_train() {
  int failures = 0;
  for (Callback* cb : dispatch_list(Hook::kAfterTrain)) {
    try {
      cb->after_train();
    } catch (const std::exception& e) {
      ++failures;
      TP_LOG_ERROR("Exception in {}.after_train(): {}", cb->name(), e.what());
    } catch (...) {
      ++failures;
      TP_LOG_ERROR("Exception in {}.after_train(): unknown exception", cb->name());
    }
  }
  return failures;
}

void Callbacks::rethrow_named(const Callback& callback, Hook hook) {
  try {
    throw;
  } catch (const StopTraining&) {
    throw;
  } catch (const CallbackError&) {
    throw;  // already names the innermost callback
  } catch (const std::exception& e) {
    std::throw_with_nested(CallbackError(callback.name(), hook_name(hook), e.what()));
  } catch (...) {
    std::throw_with_nested(CallbackError(callback.name(), hook_name(hook), "unknown exception"));
  }
}

}  // namespace trainpack
