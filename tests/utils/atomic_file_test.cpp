// Durable file replacement (utils/atomic_file.h): the content, the temporary file, and what a
// failure leaves behind.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/errors.h"
#include "support/fifo.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/utils/atomic_file.h"

namespace trainpack {
namespace atomic_file_test {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using testing::message_of;
using testing::read_text;
using testing::temporary_files;
using testing::temporary_name_pattern;
using Names = std::vector<std::string>;

class AtomicFileTest : public testing::TempDirTest {};

TEST_F(AtomicFileTest, WritesAndReplacesTheContentLeavingNoTemporaryFile) {
  const fs::path p = dir() / "f.txt";
  write_file_atomically(p.string(), "first");
  EXPECT_EQ(read_text(p), "first");
  write_file_atomically(p.string(), "second, longer", /*durable=*/false);
  EXPECT_EQ(read_text(p), "second, longer");
  write_file_atomically(p.string(), "");
  EXPECT_EQ(read_text(p), "");
  EXPECT_EQ(temporary_files(dir()), Names{});
}

TEST_F(AtomicFileTest, AMissingDirectoryIsAnErrorNamingTheFileAndTheReason) {
  const std::string p = (dir() / "no" / "f.txt").string();
  const std::string msg = message_of<std::runtime_error>([&] { write_file_atomically(p, "x"); });
  EXPECT_TRUE(std::regex_search(msg, std::regex(temporary_name_pattern(p)))) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST_F(AtomicFileTest, AFailedRenameKeepsTheOldFileAndRemovesTheTemporary) {
  // A non-empty directory in the way of the rename.
  const fs::path p = dir() / "blocked";
  fs::create_directories(p / "inside");
  const std::string msg =
      message_of<std::runtime_error>([&] { write_file_atomically(p.string(), "x"); });
  EXPECT_TRUE(std::regex_search(
      msg, std::regex("cannot rename " + temporary_name_pattern(p.string()) + " to ")))
      << msg;
  EXPECT_TRUE(fs::is_directory(p / "inside"));
  EXPECT_EQ(temporary_files(dir()), Names{});
}

TEST_F(AtomicFileTest, AWriteBeyondTheFileSizeLimitFailsAndChangesNothing) {
  const fs::path p = dir() / "f.bin";
  write_file_atomically(p.string(), "old content");
  std::string msg;
  {
    FileSizeLimit limit(1000);
    msg = message_of<std::runtime_error>(
        [&] { write_file_atomically(p.string(), std::string(5000, 'x')); });
  }
  EXPECT_TRUE(std::regex_match(
      msg, std::regex("cannot write " + temporary_name_pattern(p.string()) +
                      " \\(EFBIG: this process may not write files larger than 1000 bytes, its "
                      "file-size limit `ulimit -f`; raise the limit or free the run from it\\): "
                      "File too large")))
      << msg;
  EXPECT_EQ(read_text(p), "old content");
  EXPECT_EQ(temporary_files(dir()), Names{});
}

TEST_F(AtomicFileTest, AnUncommittedWriterRemovesItsTemporaryFile) {
  const fs::path p = dir() / "f.txt";
  write_file_atomically(p.string(), "old");
  {
    AtomicFileWriter w(p.string());
    w.write("new");
    w.finish();
    EXPECT_TRUE(fs::exists(w.temporary_path()));
    EXPECT_TRUE(
        std::regex_match(w.temporary_path(), std::regex(temporary_name_pattern(p.string()))))
        << w.temporary_path();
  }
  EXPECT_EQ(read_text(p), "old");
  EXPECT_EQ(temporary_files(dir()), Names{});
}

TEST_F(AtomicFileTest, TwoWritersCommitAfterBothAreWritten) {
  const fs::path a = dir() / "a", b = dir() / "b";
  AtomicFileWriter wa(a.string()), wb(b.string());
  wa.write("A1");
  wa.write(std::string_view("A2"));
  wb.write("B", 1);
  wa.finish();
  wb.finish();
  EXPECT_FALSE(fs::exists(a));
  wa.commit();
  wb.commit();
  fsync_directory(dir().string());
  EXPECT_EQ(read_text(a), "A1A2");
  EXPECT_EQ(read_text(b), "B");
  EXPECT_EQ(temporary_files(dir()), Names{});
}

// ---- files and links planted in the directory ----

// A directory with `log` (where trainpack writes) and `outside` holding a file that must not
// change.
class PlantedLinkTest : public AtomicFileTest {
 protected:
  void SetUp() override {
    AtomicFileTest::SetUp();
    fs::create_directories(log());
    fs::create_directories(dir() / "outside");
    testing::write_text(outside(), "outside, not to be touched");
  }
  fs::path log() const { return dir() / "log"; }
  fs::path outside() const { return dir() / "outside" / "victim"; }
  void expect_outside_untouched() const {
    EXPECT_EQ(read_text(outside()), "outside, not to be touched");
  }
};

TEST_F(PlantedLinkTest, ALinkOrFileAtTheOldTemporaryNameIsLeftAlone) {
  const fs::path p = log() / "stats.json";
  fs::create_symlink(outside(), p.string() + ".tmp");
  testing::write_text(p.string() + ".swp", "x");
  write_file_atomically(p.string(), "new content");
  EXPECT_EQ(read_text(p), "new content");
  expect_outside_untouched();
  EXPECT_TRUE(fs::is_symlink(p.string() + ".tmp"));
}

TEST_F(PlantedLinkTest, LinksAtTheNextTemporaryNamesAreSkipped) {
  const fs::path p = log() / "model-6.data";
  std::string first;
  {
    AtomicFileWriter w(p.string());
    first = w.temporary_path();
  }
  // `<p>.tmp.<pid>.<n>`: plant links at the names of the next writers of this process.
  const size_t dot = first.rfind('.');
  const uint64_t n = std::stoull(first.substr(dot + 1));
  for (uint64_t k = 1; k <= 5; ++k) {
    fs::create_symlink(outside(), first.substr(0, dot + 1) + std::to_string(n + k));
  }
  write_file_atomically(p.string(), "checkpoint bytes");
  EXPECT_EQ(read_text(p), "checkpoint bytes");
  expect_outside_untouched();
  EXPECT_EQ(temporary_files(log()).size(), 5u);  // the planted links, still there
  for (const auto& name : temporary_files(log())) EXPECT_TRUE(fs::is_symlink(log() / name));
}

TEST_F(PlantedLinkTest, ALinkAtTheFinalNameIsReplacedNotFollowed) {
  for (const char* name : {"stats.json", "model-6.data", "dump.npz"}) {
    const fs::path p = log() / name;
    fs::create_symlink(outside(), p);
    write_file_atomically(p.string(), "mine");
    EXPECT_FALSE(fs::is_symlink(p)) << name;
    EXPECT_EQ(read_text(p), "mine");
    expect_outside_untouched();
  }
}

TEST_F(PlantedLinkTest, ReplaceBySwapFollowsNoLinkAtEitherName) {
  const fs::path p = log() / "checkpoint", swap = log() / "checkpoint.previous";
  fs::create_symlink(outside(), p);
  fs::create_symlink(outside(), swap);
  replace_file_by_swap(p.string(), swap.string(), "index 1");
  replace_file_by_swap(p.string(), swap.string(), "index 2");
  EXPECT_EQ(read_text(p), "index 2");
  EXPECT_FALSE(fs::is_symlink(p));
  expect_outside_untouched();
}

TEST_F(PlantedLinkTest, AFifoAsTheSwapFileDoesNotBlock) {
  const fs::path p = log() / "checkpoint", swap = log() / "checkpoint.previous";
  write_file_atomically(p.string(), "index 1");
  ASSERT_EQ(::mkfifo(swap.c_str(), 0644), 0);
  testing::FifoGuard guard(swap);
  replace_file_by_swap(p.string(), swap.string(), "index 2");
  EXPECT_FALSE(guard.blocked());
  EXPECT_EQ(read_text(p), "index 2");
}

TEST_F(AtomicFileTest, CommitAsNewDoesNotReplaceAnExistingFile) {
  const fs::path p = dir() / "stats.json.orig-1";
  {
    AtomicFileWriter w(p.string());
    w.write("backup");
    w.commit_as_new();
  }
  EXPECT_EQ(read_text(p), "backup");
  {
    AtomicFileWriter w(p.string());
    w.write("another");
    const std::string msg = message_of<std::runtime_error>([&] { w.commit_as_new(); });
    EXPECT_NE(msg.find(": File exists"), std::string::npos) << msg;
  }
  EXPECT_EQ(read_text(p), "backup");
  EXPECT_EQ(temporary_files(dir()), Names{});
}

// ---- replace_file_by_swap ----

ino_t inode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

TEST_F(AtomicFileTest, ReplaceBySwapLeavesThePreviousContentInTheSwapFile) {
  const fs::path p = dir() / "checkpoint", swap = dir() / "checkpoint.previous";
  replace_file_by_swap(p.string(), swap.string(), "first, long content");
  EXPECT_EQ(read_text(p), "first, long content");
  EXPECT_FALSE(fs::exists(swap));  // nothing to swap with yet: written as write_file_atomically
  const ino_t first = inode_of(p);
  replace_file_by_swap(p.string(), swap.string(), "second", /*durable=*/false);
  EXPECT_EQ(read_text(p), "second");
  EXPECT_EQ(read_text(swap), "first, long content");
  EXPECT_EQ(inode_of(swap), first);
  const ino_t second = inode_of(p);
  replace_file_by_swap(p.string(), swap.string(), "third");  // written into the first's inode
  EXPECT_EQ(read_text(p), "third");
  EXPECT_EQ(read_text(swap), "second");
  EXPECT_EQ(inode_of(p), first);
  EXPECT_EQ(inode_of(swap), second);
  EXPECT_EQ(temporary_files(dir()), Names{});
}

// A swap file with another name (a hard-linked backup of the directory) is not written into.
TEST_F(AtomicFileTest, ReplaceBySwapDoesNotWriteIntoAHardLinkedSwapFile) {
  const fs::path p = dir() / "checkpoint", swap = dir() / "checkpoint.previous";
  write_file_atomically(p.string(), "current");
  write_file_atomically(swap.string(), "backed up");
  fs::create_hard_link(swap, dir() / "backup");
  replace_file_by_swap(p.string(), swap.string(), "next");
  EXPECT_EQ(read_text(p), "next");
  EXPECT_EQ(read_text(dir() / "backup"), "backed up");
}

TEST_F(AtomicFileTest, ReplaceBySwapDoesNotFollowASymlink) {
  const fs::path p = dir() / "checkpoint", swap = dir() / "checkpoint.previous";
  write_file_atomically(p.string(), "current");
  write_file_atomically((dir() / "target").string(), "not to be touched");
  fs::create_symlink(dir() / "target", swap);
  replace_file_by_swap(p.string(), swap.string(), "next");
  EXPECT_EQ(read_text(p), "next");
  EXPECT_EQ(read_text(dir() / "target"), "not to be touched");
  EXPECT_TRUE(fs::is_symlink(swap));
}

TEST_F(AtomicFileTest, ReplaceBySwapBeyondTheFileSizeLimitFailsAndKeepsTheFile) {
  const fs::path p = dir() / "checkpoint", swap = dir() / "checkpoint.previous";
  write_file_atomically(p.string(), "current");
  std::string msg;
  {
    FileSizeLimit limit(1000);
    msg = message_of<std::runtime_error>(
        [&] { replace_file_by_swap(p.string(), swap.string(), std::string(5000, 'x')); });
  }
  EXPECT_EQ(msg, "cannot write " + swap.string() +
                     " (EFBIG: this process may not write files larger than 1000 bytes, its "
                     "file-size limit `ulimit -f`; raise the limit or free the run from it): File "
                     "too large");
  EXPECT_EQ(read_text(p), "current");
  replace_file_by_swap(p.string(), swap.string(),
                       "next");  // the partly written swap file is reused
  EXPECT_EQ(read_text(p), "next");
  EXPECT_EQ(read_text(swap), "current");
}

TEST_F(AtomicFileTest, FsyncDirectoryNamesAMissingDirectory) {
  const std::string d = (dir() / "missing").string();
  EXPECT_EQ(message_of<std::runtime_error>([&] { fsync_directory(d); }),
            "cannot open directory " + d + ": No such file or directory");
}

TEST(ParentDirectory, IsTheDirectoryPartOrDot) {
  EXPECT_EQ(parent_directory("a/b/c"), "a/b");
  EXPECT_EQ(parent_directory("c"), ".");
  EXPECT_EQ(parent_directory("/c"), "/");
  EXPECT_EQ(parent_directory("./c"), ".");
}

}  // namespace atomic_file_test
}  // namespace trainpack
