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
#include "support/fifo.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace trainpack {
namespace file_io_test {

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

// ---- only regular files are read, and no more than the caller's limit ----

TEST_F(FileIoTest, AFifoIsRefusedWithoutBlocking) {
  const fs::path p = dir() / "stats.json";
  testing::make_fifo(p);
  testing::FifoGuard guard(p);
  const std::string expected = p.string() + " is not a regular file (a FIFO)";
  EXPECT_EQ(message_of<FileRefusedError>([&] { read_file(p.string()); }), expected);
  EXPECT_EQ(message_of<std::system_error>([&] { read_file_if_exists(p.string()); }), expected);
  EXPECT_EQ(message_of<std::runtime_error>([&] { read_file<std::vector<char>>(p.string()); }),
            expected);
  EXPECT_FALSE(guard.blocked());
  try {
    read_file(p.string());
  } catch (const FileRefusedError& e) {
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_EQ(e.reason(), "is not a regular file (a FIFO)");
  }
}

TEST_F(FileIoTest, ALinkToADeviceIsRefusedBeforeReading) {
  const fs::path p = dir() / "model-12.data";
  fs::create_symlink("/dev/zero", p);
  EXPECT_EQ(message_of<FileRefusedError>([&] { read_file(p.string()); }),
            p.string() + " is not a regular file (a character device)");
}

TEST_F(FileIoTest, AFileOverTheLimitIsRefusedNamingTheLimit) {
  const fs::path p = dir() / "hyper.txt";
  testing::write_text(p, std::string(5000, 'x'));
  ReadFileOptions options;
  options.max_bytes = 1000;
  options.kind = "hyper-parameter file";
  EXPECT_EQ(
      message_of<FileRefusedError>([&] { read_file(p.string(), options); }),
      p.string() + " is 5000 bytes, more than the 1000-byte limit for a hyper-parameter file");
  try {
    read_file_if_exists(p.string(), options);
  } catch (const FileRefusedError& e) {
    EXPECT_EQ(e.code().value(), EFBIG);
  }
  options.max_bytes = 5000;  // at the limit: read
  EXPECT_EQ(read_file(p.string(), options).size(), 5000u);
  EXPECT_EQ(read_file(p.string()).size(), 5000u);  // no limit by default
}

TEST_F(FileIoTest, ASymlinkIsFollowedUnlessTheCallerSaysNot) {
  const fs::path target = dir() / "target", link = dir() / "link";
  testing::write_text(target, "content");
  fs::create_symlink(target, link);
  EXPECT_EQ(read_file(link.string()), "content");
  ReadFileOptions options;
  options.follow_symlinks = false;
  EXPECT_EQ(message_of<FileRefusedError>([&] { read_file(link.string(), options); }),
            link.string() + " is not a regular file (a symbolic link)");
  EXPECT_EQ(read_file(target.string(), options), "content");
  EXPECT_EQ(read_file_if_exists((dir() / "missing").string(), options), std::nullopt);
}

// What a write past the file-size limit of 100 bytes adds to the message.
const char* const kEfbig100 =
    " (EFBIG: this process may not write files larger than 100 bytes, its file-size limit "
    "`ulimit -f`; raise the limit or free the run from it)";

TEST_F(FileIoTest, AFailedWriteNamesTheFileAndTheReason) {
  const std::string p = (dir() / "f").string();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  {
    FileSizeLimit limit(100);
    EXPECT_EQ(message_of<std::runtime_error>([&] { write_all(fd, std::string(1000, 'x'), p); }),
              "cannot write " + p + kEfbig100 + ": File too large");
    EXPECT_EQ(message_of<std::runtime_error>([&] { pwrite_all(fd, "abc", 200, p); }),
              "cannot write " + p + kEfbig100 + ": File too large");
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

}  // namespace file_io_test
}  // namespace trainpack
