#include "trainpack/train/defaults.h"

#include "trainpack/callbacks/graph.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS() { return {std::make_shared<RunUpdateOps>()}; }

std::vector<MonitorPtr> DEFAULT_MONITORS() { return {}; }

}  // namespace trainpack
