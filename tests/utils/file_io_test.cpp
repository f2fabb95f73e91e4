// The read and write loops (utils/file_io.h): whole buffers in and out, and one error message
// naming the file and the system's reason.
#include "trainpack/utils/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "support/errors.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace trainpack {
namespace {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using testing::message_of;
using testing::read_text;

class FileIoTest : public testing::TempDirTest {};

// A buffer larger than one read() chunk, with every byte value.
std::string big_text() {
  std::string s(300000, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7 + i / 256);
  return s;
}

TEST_F(FileIoTest, WriteAllThenReadFileGiveTheSameBytes) {
  const std::string p = (dir() / "f").string();
  const std::string text = big_text();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  write_all(fd, text.substr(0, 1000), p);
  write_all(fd, text.substr(1000), p);
  ::close(fd);
  EXPECT_EQ(read_file(p), text);
  const std::vector<char> bytes = read_file<std::vector<char>>(p);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), text);
  EXPECT_EQ(read_file_if_exists(p), text);
}

TEST_F(FileIoTest, PwriteAllWritesAtTheOffset) {
  const std::string p = (dir() / "f").string();
  testing::write_text(p, "0123456789");
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  pwrite_all(fd, "abc", 4, p);
  pwrite_all(fd, "XY", 10, p);
  ::close(fd);
  EXPECT_EQ(read_text(p), "0123abc789XY");
}

TEST_F(FileIoTest, ReadAllAppendsFromTheCurrentOffset) {
  const std::string p = (dir() / "f").string();
  testing::write_text(p, "hello world");
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char first[6];
  ASSERT_EQ(read_some(fd, first, 6), 6);
  std::string out = "<";
  read_all(fd, &out, p);
  ::close(fd);
  EXPECT_EQ(out, "<world");
}

TEST_F(FileIoTest, AMissingFileIsNulloptOrAnErrorNamingIt) {
  const std::string p = (dir() / "missing").string();
  EXPECT_EQ(read_file_if_exists(p), std::nullopt);
  EXPECT_EQ(read_file_if_exists<std::vector<char>>(p), std::nullopt);
  EXPECT_EQ(message_of<std::system_error>([&] { read_file(p); }),
            "cannot open " + p + ": No such file or directory");
  try {
    read_file(p);
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
  }
}

TEST_F(FileIoTest, ReadingADirectoryIsAReadError) {
  const std::string p = dir().string();
  EXPECT_EQ(message_of<std::runtime_error>([&] { read_file(p); }),
            "cannot read " + p + ": Is a directory");
  EXPECT_THROW(read_file_if_exists(p), std::system_error);
}

TEST_F(FileIoTest, AFailedWriteNamesTheFileAndTheReason) {
  const std::string p = (dir() / "f").string();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  {
    FileSizeLimit limit(100);
    EXPECT_EQ(message_of<std::runtime_error>([&] { write_all(fd, std::string(1000, 'x'), p); }),
              "cannot write " + p + ": File too large");
    EXPECT_EQ(message_of<std::runtime_error>([&] { pwrite_all(fd, "abc", 200, p); }),
              "cannot write " + p + ": File too large");
    // The loop without the exception: what was written before the failure, and the errno.
    int err = 0;
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    ::lseek(fd, 0, SEEK_SET);
    EXPECT_EQ(write_all_or_errno(fd, std::string(150, 'y'), &err), 100u);
    EXPECT_EQ(err, EFBIG);
  }
  int err = -1;
  EXPECT_EQ(write_all_or_errno(fd, "z", &err), 1u);
  EXPECT_EQ(err, 0);
  ::close(fd);
  EXPECT_EQ(read_text(p).size(), 101u);
}

TEST_F(FileIoTest, ThrowFileErrorCarriesTheErrno) {
  try {
    throw_file_error("open directory", "/x", EACCES);
  } catch (const std::system_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open directory /x: Permission denied");
    EXPECT_EQ(e.code(), std::error_code(EACCES, std::generic_category()));
    return;
  }
  ADD_FAILURE() << "nothing thrown";
}

}  // namespace
}  // namespace trainpack
