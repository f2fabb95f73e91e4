// What ModelSaver (src/callbacks/saver.cpp) and MinSaver (src/callbacks/min_saver.cpp) share: the
// directory they resolve, the paths in it, and the ModelSavers among a trainer's callbacks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainpack/core/callback.h"

namespace trainpack {

class ModelSaver;

namespace detail {

// The given directory, or the logger directory; normalised without a trailing '/'. "" if none.
std::string saver_dir(const std::optional<std::string>& dir);

// `name` in `dir`; `name` itself when it is an absolute path.
std::string saver_path(const std::string& dir, const std::string& name);

// Appends `cb` to `out` when it is a ModelSaver, then does the same for the callback it wraps
// (ProxyCallback), and so on inwards.
void collect_model_savers(const CallbackPtr& cb, std::vector<ModelSaver*>* out);

}  // namespace detail
}  // namespace trainpack
