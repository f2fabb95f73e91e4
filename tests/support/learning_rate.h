// Test support: a learning rate held in a double, seen by the graph as SingleCostTrainer shows its
// optimizer's (what a console, a shell or a hyperparameter setter reads and sets).
#pragma once

#include "trainpack/core/graph.h"

namespace trainpack {
namespace testing {

// Adds to `graph` the variable "learning_rate" bound to `*lr`: floating, and set by the
// hyperparameter setters only to values > 0 (the learning rate's range).
inline void add_learning_rate_variable(Graph& graph, double* lr) {
  graph.add_variable(
      "learning_rate", [lr] { return *lr; }, [lr](double v) { *lr = v; }, true,
      ValueRange().min_exclusive(0));
}

}  // namespace testing
}  // namespace trainpack
