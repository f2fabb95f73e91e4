// WriteFailureLedger (core/write_failures.h), the record behind Trainer::report_write_failure:
// every failure counted, per file in the order of its first failure, the first kMaxKept kept, and
// the summary that WriteFailedError's message quotes.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "trainpack/core/trainer.h"
#include "trainpack/core/write_failures.h"

namespace trainpack {
namespace write_failure_ledger_test {

static_assert(std::is_same_v<Trainer::WriteFailure, WriteFailure>);
static_assert(Trainer::kMaxKeptWriteFailures == WriteFailureLedger::kMaxKept);

TEST(WriteFailureLedger, EmptyHasNoSummary) {
  WriteFailureLedger ledger;
  EXPECT_TRUE(ledger.empty());
  EXPECT_EQ(ledger.count(), 0);
  EXPECT_TRUE(ledger.kept().empty());
  EXPECT_TRUE(ledger.paths().empty());
  EXPECT_EQ(ledger.summary(), "");
}

TEST(WriteFailureLedger, CountsEachFileInTheOrderOfItsFirstFailure) {
  WriteFailureLedger ledger;
  ledger.record("ModelSaver", "d/model-4.data", "disk full", 4);
  ledger.record("JSONWriter", "d/stats.json", "read-only", 5);
  ledger.record("ModelSaver", "d/model-4.data", "disk still full", 6);
  EXPECT_FALSE(ledger.empty());
  EXPECT_EQ(ledger.count(), 3);
  EXPECT_EQ(ledger.paths(), (std::vector<std::string>{"d/model-4.data", "d/stats.json"}));
  ASSERT_EQ(ledger.kept().size(), 3u);
  EXPECT_EQ(ledger.kept()[1].callback, "JSONWriter");
  EXPECT_EQ(ledger.kept()[1].path, "d/stats.json");
  EXPECT_EQ(ledger.kept()[1].error, "read-only");
  EXPECT_EQ(ledger.kept()[2].global_step, 6);
  EXPECT_EQ(ledger.summary(),
            "3 writes failed (2 files): d/model-4.data (ModelSaver, 2 failures), d/stats.json "
            "(JSONWriter, 1 failure); the first error: disk full");
}

TEST(WriteFailureLedger, KeepsTheFirstFailuresCountsAllAndNamesTenFiles) {
  WriteFailureLedger ledger;
  const int64_t n = static_cast<int64_t>(WriteFailureLedger::kMaxKept) + 5;
  for (int64_t i = 0; i < n; ++i) {
    ledger.record("Saver", "f" + std::to_string(i), "error " + std::to_string(i), i);
  }
  EXPECT_EQ(ledger.count(), n);
  ASSERT_EQ(ledger.kept().size(), WriteFailureLedger::kMaxKept);
  EXPECT_EQ(ledger.kept().back().path, "f" + std::to_string(WriteFailureLedger::kMaxKept - 1));
  EXPECT_EQ(ledger.paths().size(), static_cast<size_t>(n));
  const std::string summary = ledger.summary();
  EXPECT_EQ(summary.rfind("105 writes failed (105 files): f0 (Saver, 1 failure), f1 (", 0), 0u)
      << summary;
  EXPECT_NE(summary.find(", f9 (Saver, 1 failure) and 95 more; the first error: error 0"),
            std::string::npos)
      << summary;
}

}  // namespace write_failure_ledger_test
}  // namespace trainpack
