// The Graph registry: variables, ops, collections, name scopes, finalize().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "trainpack/core/graph.h"

namespace trainpack {
namespace graph_test {

using ::testing::HasSubstr;

TEST(Graph, GetSetVariablesReadAndWriteThroughTheirFunctions) {
  Graph g;
  double lr = 0.1;
  g.add_variable(
      "learning_rate", [&] { return lr; }, [&](double v) { lr = v; });
  EXPECT_TRUE(g.has_variable("learning_rate"));
  EXPECT_DOUBLE_EQ(g.variable("learning_rate").get(), 0.1);
  g.variable("learning_rate").set(0.01);
  EXPECT_DOUBLE_EQ(lr, 0.01);
  EXPECT_EQ(g.variable_names(), std::vector<std::string>{"learning_rate"});
}

TEST(Graph, TensorVariablesShareTheTensorStorage) {
  Graph g;
  at::Tensor t = at::full({}, 3.0);
  g.add_variable("scale", t);
  EXPECT_DOUBLE_EQ(g.variable("scale").get(), 3.0);
  g.variable("scale").set(5.0);
  EXPECT_DOUBLE_EQ(t.item<double>(), 5.0);
  EXPECT_TRUE(g.variable("scale").is_floating);
  g.add_variable("count", at::zeros({1}, at::kLong));
  EXPECT_FALSE(g.variable("count").is_floating);
}

TEST(Graph, AnUnknownVariableListsTheOnesThatExist) {
  Graph g;
  g.add_variable(
      "a", [] { return 0.0; }, [](double) {});
  g.add_variable(
      "b", [] { return 0.0; }, [](double) {});
  try {
    g.variable("learning_rate");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'learning_rate' is not a variable in the graph"));
    EXPECT_THAT(e.what(), HasSubstr("Variables that exist: 'a', 'b'"));
  }
}

TEST(Graph, DuplicateNamesAreErrors) {
  Graph g;
  g.add_variable(
      "a", [] { return 0.0; }, [](double) {});
  EXPECT_THROW(g.add_variable(
                   "a", [] { return 0.0; }, [](double) {}),
               std::invalid_argument);
  g.add_op("op", [] {});
  EXPECT_THROW(g.add_op("op", [] {}), std::invalid_argument);
}

TEST(Graph, BadVariablesAreErrors) {
  Graph g;
  EXPECT_THROW(g.add_variable(
                   "", [] { return 0.0; }, [](double) {}),
               std::invalid_argument);
  EXPECT_THROW(g.add_variable("x", nullptr, [](double) {}), std::invalid_argument);
  EXPECT_THROW(g.add_variable("t", at::zeros({2})), std::invalid_argument);
  EXPECT_THROW(g.add_variable("u", at::Tensor()), std::invalid_argument);
}

TEST(Graph, CollectionsKeepRegistrationOrder) {
  Graph g;
  std::string order;
  g.add_to_collection(Graph::kUpdateOps, [&] { order += "a"; });
  g.add_to_collection(Graph::kUpdateOps, [&] { order += "b"; });
  for (const auto& op : g.collection(Graph::kUpdateOps)) op();
  EXPECT_EQ(order, "ab");
  EXPECT_TRUE(g.collection("missing").empty());
}

TEST(Graph, NameScopesNestAndRestore) {
  Graph g;
  {
    Graph::NameScope outer(g, "outer");
    g.add_op("a", [] {});
    {
      Graph::NameScope inner(g, "inner");
      g.add_op("b", [] {});
      Graph::NameScope root(g, "fresh", /*from_root=*/true);
      g.add_op("c", [] {});
    }
    EXPECT_EQ(g.current_scope(), "outer");
  }
  g.add_op("d", [] {});
  EXPECT_EQ(g.op_names(), (std::vector<std::string>{"d", "fresh/c", "outer/a", "outer/inner/b"}));
}

TEST(Graph, ChangesAfterFinalizeThrowNamingTheCaller) {
  Graph g;
  g.finalize();
  EXPECT_TRUE(g.finalized());
  try {
    g.add_op("late_op", [] {});
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Graph::add_op('late_op') was called after the graph was "
                                    "finalized"));
  }
  EXPECT_THROW(g.add_variable(
                   "v", [] { return 0.0; }, [](double) {}),
               std::logic_error);
  EXPECT_THROW(g.add_to_collection("c", [] {}), std::logic_error);
}

TEST(Graph, AnUnknownOpListsTheOnesThatExist) {
  Graph g;
  try {
    g.op("x");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("Ops that exist: (none)"));
  }
}

}  // namespace graph_test
}  // namespace trainpack
