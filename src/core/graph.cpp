#include "trainpack/core/graph.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "trainpack/utils/host_read.h"

namespace trainpack {
namespace {

template <typename Map>
std::string list_keys(const Map& map) {
  if (map.empty()) return "(none)";
  std::string out;
  for (const auto& kv : map) {
    if (!out.empty()) out += ", ";
    out += "'" + kv.first + "'";
  }
  return out;
}

}  // namespace

void Graph::check_mutable(const char* what, const std::string& name) const {
  if (finalized_) {
    throw std::logic_error(fmt::format(
        "Graph::{}('{}') was called after the graph was finalized. Register variables, ops and "
        "collections in setup_graph()/_setup_graph(), not inside the training loop.",
        what, name));
  }
}

std::string Graph::scoped(const std::string& name) const {
  return scope_.empty() ? name : scope_ + "/" + name;
}

std::string Graph::insert_variable(const std::string& name, Variable variable) {
  check_mutable("add_variable", name);
  if (name.empty()) throw std::invalid_argument("Graph::add_variable: the name is empty");
  const std::string full = scoped(name);
  if (variables_.count(full)) {
    throw std::invalid_argument(
        fmt::format("Graph::add_variable: a variable named '{}' already exists", full));
  }
  variables_[full] = std::move(variable);
  return full;
}

void Graph::add_variable(const std::string& name, std::function<double()> get,
                         std::function<void(double)> set, bool is_floating, ValueRange range) {
  if (!get || !set) {
    throw std::invalid_argument(
        fmt::format("Graph::add_variable('{}'): both a getter and a setter are required", name));
  }
  insert_variable(
      name, Variable{std::move(get), std::move(set), at::Tensor(), is_floating, std::move(range)});
}

void Graph::add_variable(const std::string& name, at::Tensor tensor) {
  if (!tensor.defined() || tensor.numel() != 1) {
    throw std::invalid_argument(fmt::format(
        "Graph::add_variable('{}'): a tensor variable must be defined and hold one element", name));
  }
  const bool floating = at::isFloatingType(tensor.scalar_type());
  insert_variable(name, Variable{[tensor] { return host_scalar(tensor); },
                                 [tensor](double v) mutable { tensor.fill_(v); }, tensor, floating,
                                 ValueRange()});
}

void Graph::add_module(const std::string& name, std::shared_ptr<torch::nn::Module> module) {
  check_mutable("add_module", name);
  if (module == nullptr) {
    throw std::invalid_argument(fmt::format("Graph::add_module('{}'): the module is null", name));
  }
  for (const auto& entry : modules_) {
    if (entry.first == name) {
      throw std::invalid_argument(
          fmt::format("Graph::add_module: a module named '{}' already exists", name));
    }
  }
  modules_.emplace_back(name, std::move(module));
}

void Graph::add_optimizer(const std::string& name, torch::optim::Optimizer* optimizer) {
  check_mutable("add_optimizer", name);
  if (optimizer == nullptr) {
    throw std::invalid_argument(
        fmt::format("Graph::add_optimizer('{}'): the optimizer is null", name));
  }
  for (const auto& entry : optimizers_) {
    if (entry.first == name) {
      throw std::invalid_argument(
          fmt::format("Graph::add_optimizer: an optimizer named '{}' already exists", name));
    }
  }
  optimizers_.emplace_back(name, optimizer);
}

bool Graph::has_variable(const std::string& name) const { return variables_.count(name) != 0; }

const Graph::Variable& Graph::variable(const std::string& name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    throw std::invalid_argument(
        fmt::format("Graph: '{}' is not a variable in the graph. Variables that exist: {}", name,
                    list_keys(variables_)));
  }
  return it->second;
}

std::vector<std::string> Graph::variable_names() const {
  std::vector<std::string> names;
  for (const auto& kv : variables_) names.push_back(kv.first);
  return names;
}

void Graph::add_op(const std::string& name, Op op) {
  check_mutable("add_op", name);
  if (!op) throw std::invalid_argument(fmt::format("Graph::add_op('{}'): the op is empty", name));
  const std::string full = scoped(name);
  if (ops_.count(full)) {
    throw std::invalid_argument(
        fmt::format("Graph::add_op: an op named '{}' already exists", full));
  }
  ops_[full] = std::move(op);
}

bool Graph::has_op(const std::string& name) const { return ops_.count(name) != 0; }

const Graph::Op& Graph::op(const std::string& name) const {
  auto it = ops_.find(name);
  if (it == ops_.end()) {
    throw std::invalid_argument(fmt::format(
        "Graph: '{}' is not an op in the graph. Ops that exist: {}", name, list_keys(ops_)));
  }
  return it->second;
}

std::vector<std::string> Graph::op_names() const {
  std::vector<std::string> names;
  for (const auto& kv : ops_) names.push_back(kv.first);
  return names;
}

void Graph::add_to_collection(const std::string& key, Op op) {
  check_mutable("add_to_collection", key);
  if (!op) {
    throw std::invalid_argument(
        fmt::format("Graph::add_to_collection('{}'): the op is empty", key));
  }
  collections_[key].push_back(std::move(op));
}

void Graph::add_trainable_variable(const std::string& name, at::Tensor tensor) {
  check_mutable("add_trainable_variable", name);
  if (!tensor.defined()) {
    throw std::invalid_argument(
        fmt::format("Graph::add_trainable_variable('{}'): the tensor is undefined", name));
  }
  for (const auto& entry : trainable_) {
    if (entry.first == name) {
      throw std::invalid_argument(fmt::format(
          "Graph::add_trainable_variable: a trainable variable named '{}' already exists", name));
    }
  }
  trainable_.emplace_back(name, std::move(tensor));
}

const std::vector<Graph::Op>& Graph::collection(const std::string& key) const {
  static const std::vector<Op> kEmpty;
  auto it = collections_.find(key);
  return it == collections_.end() ? kEmpty : it->second;
}

void Graph::finalize() { finalized_ = true; }

Graph::NameScope::NameScope(Graph& graph, const std::string& scope, bool from_root)
    : graph_(graph), saved_(graph.scope_) {
  if (from_root) graph_.scope_.clear();
  if (!scope.empty()) graph_.scope_ = graph_.scoped(scope);
}

Graph::NameScope::~NameScope() { graph_.scope_ = saved_; }

}  // namespace trainpack
