#include "trainpack/core/session_init.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "trainpack/core/trainer.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/terminal_text.h"

namespace trainpack {
namespace {

// A name or a path from a file, as the messages quote it: what a terminal acts on escaped, on one
// line (a checkpoint's entry names are whatever its writer chose).
std::string safe_text(const std::string& text) { return terminal_safe(text, LineFeeds::kEscape); }

// A checkpoint saved after training diverged restores as asked, but says so. `source` went through
// safe_text already.
void warn_non_finite(const TensorMap& tensors, const std::string& source) {
  const std::vector<std::string> bad = non_finite_model_entries(tensors);
  if (bad.empty()) return;
  std::string names;
  for (size_t i = 0; i < bad.size() && i < 8; ++i) names += (i ? ", " : "") + safe_text(bad[i]);
  if (bad.size() > 8) names += fmt::format(" (and {} more)", bad.size() - 8);
  TP_LOG_WARN(
      "{} holds weights that are not finite (NaN or inf), in: {}. The run that saved it had "
      "diverged; training from them will not recover. Restore an earlier checkpoint.",
      source, names);
}

}  // namespace

SaverRestore::SaverRestore(const std::string& path, SaverRestoreOptions options)
    : path_(resolve_checkpoint_path(path)), options_(std::move(options)) {}

void SaverRestore::run_init(Trainer& trainer) {
  TP_LOG_INFO("Restoring checkpoint from {} ...", safe_text(path_));
  const TensorMap tensors = read_checkpoint(path_);
  warn_non_finite(tensors, "checkpoint " + safe_text(path_));
  report_ = restore_training_state(trainer, tensors,
                                   RestoreOptions()
                                       .ignore(options_.ignore())
                                       .restore_counters(options_.restore_counters())
                                       .partial(options_.partial())
                                       .require_all(options_.require_all())
                                       .source("checkpoint " + safe_text(path_)));
}

DictRestore::DictRestore(TensorMap tensors, SaverRestoreOptions options)
    : tensors_(std::move(tensors)), options_(std::move(options)) {
  for (const auto& [name, tensor] : tensors_) {
    if (!tensor.defined()) {
      throw std::invalid_argument(
          fmt::format("DictRestore: the tensor for '{}' is undefined", safe_text(name)));
    }
  }
}

void DictRestore::run_init(Trainer& trainer) {
  std::string names;
  for (const auto& kv : tensors_) names += (names.empty() ? "" : ", ") + safe_text(kv.first);
  TP_LOG_INFO("Variables to restore from dict: {}", names);
  TP_LOG_INFO("Restoring {} variables from dict ...", tensors_.size());
  warn_non_finite(tensors_, "the dict");
  report_ = restore_training_state(trainer, tensors_,
                                   RestoreOptions()
                                       .ignore(options_.ignore())
                                       .restore_counters(options_.restore_counters())
                                       .partial(options_.partial())
                                       .source("the dict"));
}

ChainInit::ChainInit(std::vector<std::shared_ptr<SessionInit>> inits) : inits_(std::move(inits)) {
  for (size_t i = 0; i < inits_.size(); ++i) {
    if (inits_[i] == nullptr) {
      throw std::invalid_argument(fmt::format("ChainInit: initialiser {} is null", i));
    }
  }
}

void ChainInit::setup_graph(Trainer& trainer) {
  for (auto& init : inits_) init->setup_graph(trainer);
}

void ChainInit::run_init(Trainer& trainer) {
  for (auto& init : inits_) init->run_init(trainer);
}

bool ChainInit::is_noop() const {
  for (const auto& init : inits_) {
    if (!init->is_noop()) return false;
  }
  return true;
}

std::string ChainInit::name() const {
  std::string out = "ChainInit(";
  for (size_t i = 0; i < inits_.size(); ++i) out += (i ? ", " : "") + inits_[i]->name();
  return out + ")";
}

}  // namespace trainpack
