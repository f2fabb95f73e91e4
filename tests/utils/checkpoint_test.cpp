// Checkpoint files (utils/checkpoint.h): the data file and its trailer, the checks on load, the
// directory's `checkpoint` index in TensorFlow's text form, and resolve_checkpoint_path.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/errors.h"
#include "support/fifo.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/crc32c.h"

namespace trainpack {
namespace checkpoint_test {

namespace fs = std::filesystem;
using testing::FileSizeLimit;
using testing::LogCapture;
using testing::message_of;
using testing::read_text;
using testing::temporary_name_pattern;
using testing::write_text;

TensorMap sample_map() {
  TensorMap m;
  m["conv1.weight"] = at::arange(24, at::kFloat).reshape({2, 3, 4});
  m["bn/num_batches_tracked"] = at::scalar_tensor(7, at::kLong);
  m["variable/learning_rate"] = at::scalar_tensor(0.1, at::kDouble);
  m["optimizer"] = at::arange(200, at::kInt).to(at::kByte);
  m["empty"] = at::empty({0, 3}, at::kFloat);
  m["transposed"] = at::arange(6, at::kDouble).reshape({2, 3}).t();  // not contiguous
  m["mask"] = torch::tensor({true, false, true});
  return m;
}

void expect_same(const TensorMap& a, const TensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_EQ(b.count(name), 1u) << name;
    const at::Tensor& u = b.at(name);
    EXPECT_EQ(t.scalar_type(), u.scalar_type()) << name;
    EXPECT_EQ(t.sizes(), u.sizes()) << name;
    EXPECT_TRUE(at::equal(t, u)) << name;
  }
}

// The files in `dir`, by name, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class CheckpointTest : public testing::TempDirTest {
 protected:
  std::string prefix(const std::string& name = "model-600") const {
    return (dir() / name).string();
  }
};

// ---- the data file and its trailer ----

// The trailer at the end of a data file (the zip comment), or "" when the file has none.
std::string trailer_of(const std::string& data) {
  const size_t at = data.rfind("trainpack-checkpoint ");
  return at == std::string::npos ? "" : data.substr(at);
}

// `archive` (a zip whose end record says "no comment", as pickle_save makes it) with `comment`
// as its zip comment: the comment length set and the text appended.
std::string with_comment(std::string archive, const std::string& comment) {
  const size_t n = archive.size();
  archive[n - 2] = static_cast<char>(comment.size() & 0xff);
  archive[n - 1] = static_cast<char>(comment.size() >> 8);
  return archive + comment;
}

// `data` with its trailer replaced by `head` followed by the CRC-32C that a writer would put
// there (so that only what `head` says is wrong).
std::string with_trailer_head(const std::string& data, const std::string& head) {
  const std::string archive = data.substr(0, data.size() - trailer_of(data).size());
  const std::string patched = with_comment(archive, std::string(head.size() + 8, ' '));
  const std::string covered = patched.substr(0, archive.size());
  return covered + head + fmt::format("{:08x}", crc32c::value(covered));
}

TEST_F(CheckpointTest, RoundTripsAMapOfTensors) {
  const TensorMap m = sample_map();
  write_checkpoint(prefix(), m);
  EXPECT_EQ(files_in(dir()), (std::vector<std::string>{"model-600.data"}));
  expect_same(m, read_checkpoint(prefix()));
  EXPECT_EQ(verify_checkpoint(prefix()), "");
  EXPECT_TRUE(checkpoint_exists(prefix()));
  EXPECT_FALSE(checkpoint_exists(prefix("model-601")));
}

TEST_F(CheckpointTest, RoundTripsAnEmptyMapWithoutFsync) {
  write_checkpoint(prefix(), {}, CheckpointWriteOptions().fsync(false));
  EXPECT_TRUE(read_checkpoint(prefix()).empty());
  EXPECT_EQ(trailer_of(read_text(prefix() + ".data")).rfind("trainpack-checkpoint 2 entries=0 ", 0),
            0u);
}

TEST_F(CheckpointTest, TheTrailerIsTheZipCommentWithTheEntryCountAndTheChecksum) {
  write_checkpoint(prefix(), sample_map());
  const std::string data = read_text(prefix() + ".data");
  // The data file is a zip (PyTorch's format), as torch.save writes it.
  EXPECT_EQ(data.substr(0, 4), std::string("PK\x03\x04", 4));
  const std::string trailer = trailer_of(data);
  const std::string head = "trainpack-checkpoint 2 entries=7 crc32c=";
  ASSERT_EQ(trailer.size(), head.size() + 8) << trailer;
  const size_t covered = data.size() - trailer.size();
  EXPECT_EQ(trailer, head + fmt::format("{:08x}", crc32c::value(data.data(), covered)));
  // The 22-byte zip end record right before it, its comment length the trailer's.
  const std::string end_record = data.substr(covered - 22, 22);
  EXPECT_EQ(end_record.substr(0, 4), std::string("PK\x05\x06", 4));
  EXPECT_EQ(static_cast<unsigned char>(end_record[20]) |
                (static_cast<unsigned char>(end_record[21]) << 8),
            static_cast<int>(trailer.size()));
  EXPECT_EQ(checkpoint_fingerprint(prefix()), trailer);
}

// Python's zipfile (a zip reader trainpack did not write) sees a valid archive: the comment is
// the trailer, and every member passes its zip CRC-32.
TEST_F(CheckpointTest, PythonsZipfileReadsTheArchiveAndItsComment) {
  if (std::system("python3 -c 'import zipfile' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed";
  }
  write_checkpoint(prefix(), sample_map());
  const fs::path out = dir() / "zip.txt";
  const std::string cmd =
      "python3 -c \"import zipfile, sys\n"
      "z = zipfile.ZipFile(sys.argv[1])\n"
      "lines = [z.comment.decode(), repr(z.testzip())]\n"
      // Newer LibTorch versions add records (byteorder, .data/serialization_id) beside these.
      "names = [n.split('/', 1)[1] for n in z.namelist()]\n"
      "lines += sorted(n for n in names if n == 'data.pkl' or n.startswith('data/'))[:3]\n"
      "open(sys.argv[2], 'w').write(chr(10).join(lines))\n\" " +
      prefix() + ".data " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string data = read_text(prefix() + ".data");
  EXPECT_EQ(read_text(out), trailer_of(data) + "\nNone\ndata.pkl\ndata/0\ndata/1");
}

TEST_F(CheckpointTest, AnUndefinedTensorIsRejectedBeforeAnythingIsWritten) {
  TensorMap m = sample_map();
  m["bad"] = at::Tensor();
  EXPECT_EQ(message_of<std::invalid_argument>([&] { write_checkpoint(prefix(), m); }),
            "write_checkpoint(" + prefix() + "): the tensor 'bad' is undefined");
  EXPECT_TRUE(files_in(dir()).empty());
}

TEST_F(CheckpointTest, PythonsTorchLoadReadsTheDataFile) {
  // The first of these interpreters that has torch: the one of this build's LibTorch (pip's venv
  // for a build against pip's wheel), then a pyenv or venv python3 that may come first in PATH,
  // then Debian's (python3-torch is for /usr/bin/python3).
  std::string python;
  for (const char* candidate : {TRAINPACK_TORCH_PYTHON, "python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(candidate) + " -c 'import torch' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) {
    GTEST_SKIP() << "python3 with torch is not installed (Debian: apt-get install python3-torch)";
  }
  write_checkpoint(prefix(), sample_map());
  const fs::path out = dir() / "py.txt";
  const std::string cmd = python +
                          " -c \"import torch, sys\n"
                          "d = torch.load(sys.argv[1], weights_only=True)\n"
                          "lines = [type(d).__name__]\n"
                          "for k in sorted(d):\n"
                          "    v = d[k]\n"
                          "    lines.append('%s %s %s %r' % (k, str(v.dtype), list(v.shape), "
                          "v.double().sum().item()))\n"
                          "open(sys.argv[2], 'w').write(chr(10).join(lines))\n\" " +
                          prefix() + ".data " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(read_text(out),
            "dict\n"
            "bn/num_batches_tracked torch.int64 [] 7.0\n"
            "conv1.weight torch.float32 [2, 3, 4] 276.0\n"
            "empty torch.float32 [0, 3] 0.0\n"
            "mask torch.bool [3] 2.0\n"
            "optimizer torch.uint8 [200] 19900.0\n"
            "transposed torch.float64 [3, 2] 15.0\n"
            "variable/learning_rate torch.float64 [] 0.1");
}

TEST_F(CheckpointTest, ATruncatedDataFileIsRefusedNamingTheFile) {
  write_checkpoint(prefix(), sample_map());
  const std::string data_path = prefix() + ".data";
  const auto size = fs::file_size(data_path);
  for (const uintmax_t cut : {uintmax_t{1}, uintmax_t{10}, uintmax_t{60}, size / 2, size - 1}) {
    write_checkpoint(prefix(), sample_map());
    fs::resize_file(data_path, size - cut);
    const std::string msg = message_of<CheckpointError>([&] { read_checkpoint(prefix()); });
    EXPECT_EQ(msg, data_path +
                       ": truncated or not a checkpoint: it does not end with a zip end record "
                       "and trainpack's checksum trailer")
        << "cut " << cut;
    EXPECT_EQ(verify_checkpoint(prefix()), msg);
    EXPECT_FALSE(checkpoint_fingerprint(prefix()).has_value());
    try {
      read_checkpoint(prefix());
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.path(), data_path);
    }
  }
}

TEST_F(CheckpointTest, AFlippedByteIsRefusedNamingTheFile) {
  write_checkpoint(prefix(), sample_map());
  const std::string data_path = prefix() + ".data";
  const std::string good = read_text(data_path);
  const size_t trailer_at = good.size() - trailer_of(good).size();
  // In the tensors, in the zip's central directory, in the end record's comment length (which
  // then no longer reaches the end of the file), and in the trailer's checksum.
  for (const size_t at : {good.size() / 2, trailer_at - 30, trailer_at - 2, good.size() - 1}) {
    std::string data = good;
    if (at == good.size() - 1) {
      data[at] = data[at] == '0' ? '1' : '0';  // another hex digit: a well-formed trailer
    } else {
      data[at] = static_cast<char>(data[at] ^ 0x01);
    }
    write_text(data_path, data);
    const std::string msg = message_of<CheckpointError>([&] { read_checkpoint(prefix()); });
    EXPECT_EQ(msg.rfind(data_path + ": ", 0), 0u) << msg;
    if (at == trailer_at - 2) {
      EXPECT_NE(msg.find("truncated or not a checkpoint"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find(": checksum mismatch (CRC-32C 0x"), std::string::npos) << at << msg;
      EXPECT_NE(msg.find("the file is corrupt"), std::string::npos) << msg;
    }
    EXPECT_EQ(verify_checkpoint(prefix()), msg);
  }
}

// A damaged magic in the trailer (which its checksum does not cover) is corruption, not another
// program's file.
TEST_F(CheckpointTest, ADamagedTrailerMagicIsReportedAsCorrupt) {
  write_checkpoint(prefix(), sample_map());
  const std::string data_path = prefix() + ".data";
  const std::string good = read_text(data_path);
  const size_t trailer_at = good.size() - trailer_of(good).size();
  for (const size_t offset : {size_t{0}, size_t{4}, size_t{19}}) {
    std::string data = good;
    data[trailer_at + offset] = static_cast<char>(data[trailer_at + offset] ^ 0x01);
    write_text(data_path, data);
    const std::string msg = message_of<CheckpointError>([&] { read_checkpoint(prefix()); });
    EXPECT_EQ(msg.rfind(data_path + ": corrupt: its checksum trailer is damaged ('", 0), 0u) << msg;
    EXPECT_EQ(msg.find("torch.save"), std::string::npos) << msg;
    EXPECT_EQ(verify_checkpoint(prefix()), msg);
    EXPECT_FALSE(checkpoint_fingerprint(prefix()).has_value());
  }
  // A byte outside printable ASCII is shown escaped.
  std::string data = good;
  data[trailer_at + 2] = '\x01';
  write_text(data_path, data);
  const std::string msg = message_of<CheckpointError>([&] { read_checkpoint(prefix()); });
  EXPECT_NE(msg.find("'tr\\x01inpack-checkpoint 2 entries=7 crc32c="), std::string::npos) << msg;
}

// ---- special files: refused without blocking or reading them ----

TEST_F(CheckpointTest, AFifoNamedLikeACheckpointIsRefusedAtOnce) {
  const fs::path data = dir() / "model-12.data";
  testing::make_fifo(data);
  testing::FifoGuard guard(data);
  const std::string msg = message_of<CheckpointError>([&] { read_checkpoint(prefix("model-12")); });
  EXPECT_EQ(msg, data.string() + ": not a regular file (a FIFO)");
  EXPECT_EQ(verify_checkpoint(prefix("model-12")), msg);
  EXPECT_FALSE(checkpoint_fingerprint(prefix("model-12")).has_value());
  EXPECT_FALSE(guard.blocked());
}

TEST_F(CheckpointTest, AFifoNamedCheckpointIsRefusedAtOnce) {
  const fs::path index = dir() / "checkpoint";
  testing::make_fifo(index);
  testing::FifoGuard guard(index);
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint_index(dir().string()); }),
            index.string() + ": not a regular file (a FIFO)");
  EXPECT_FALSE(guard.blocked());
}

TEST_F(CheckpointTest, ACheckpointLinkedToDevZeroIsRefusedWithoutReadingIt) {
  fs::create_symlink("/dev/zero", prefix("model-12") + ".data");
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint(prefix("model-12")); }),
            prefix("model-12") + ".data: not a regular file (a character device)");
  // The index is never read through a link (checked before what it points to).
  fs::create_symlink("/dev/zero", dir() / "checkpoint");
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint_index(dir().string()); }),
            (dir() / "checkpoint").string() + ": not a regular file (a symbolic link)");
}

TEST_F(CheckpointTest, AnIndexOverOneMebibyteIsRefused) {
  write_text(dir() / "checkpoint",
             "model_checkpoint_path: \"model-1\"\n" + std::string(2 << 20, '#') + "\n");
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint_index(dir().string()); }),
            (dir() / "checkpoint").string() + ": " +
                std::to_string(fs::file_size(dir() / "checkpoint")) +
                " bytes, more than the 1048576-byte limit for a checkpoint index");
}

// ---- links planted in the directory ----

CheckpointIndex sample_index();

TEST_F(CheckpointTest, PlantedLinksAreNeverWrittenThrough) {
  const fs::path outside = dir() / "outside";
  const fs::path log = dir() / "log";
  fs::create_directories(log);
  write_text(outside, "outside");
  const std::string p = (log / "model-6").string();
  // At the temporary name of the past, and at the final names of the data file and the index.
  fs::create_symlink(outside, p + ".data.tmp");
  fs::create_symlink(outside, p + ".data");
  fs::create_symlink(outside, log / "checkpoint");
  fs::create_symlink(outside, log / "checkpoint.previous");
  write_checkpoint(p, sample_map());
  write_checkpoint_index(log.string(), sample_index());
  write_checkpoint_index(log.string(), sample_index());
  copy_checkpoint(p, (log / "min-val-error-top1").string());
  EXPECT_EQ(read_text(outside), "outside");
  EXPECT_FALSE(fs::is_symlink(p + ".data"));
  expect_same(sample_map(), read_checkpoint(p));
  EXPECT_EQ(read_checkpoint_index(log.string())->model_checkpoint_path, "model-600");
}

TEST_F(CheckpointTest, MissingAndEmptyFilesAreRefusedNamingTheFile) {
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint(prefix()); }),
            prefix() + ".data: the checkpoint's data file does not exist");
  write_text(prefix() + ".data", "");
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint(prefix()); }),
            prefix() + ".data: the checkpoint's data file is empty");
}

TEST_F(CheckpointTest, MalformedTrailersAreRefusedNamingTheFile) {
  write_checkpoint(prefix(), sample_map());
  const std::string data_path = prefix() + ".data";
  const std::string good = read_text(data_path);
  const std::string archive = good.substr(0, good.size() - trailer_of(good).size());
  struct Case {
    std::string data;
    std::string reason;
  };
  const std::string no_trailer =
      "has no trainpack checksum trailer (a zip archive, but not written by trainpack's "
      "write_checkpoint: a torch.save file?)";
  const auto malformed = [](const std::string& t) {
    return "malformed checksum trailer '" + t + "'";
  };
  const std::vector<Case> cases = {
      {with_comment(archive, ""), no_trailer},
      {with_comment(archive, "hello"), no_trailer},
      {with_trailer_head(good, "trainpack-checkpoint 3 entries=7 crc32c="),
       "unsupported checkpoint format 'trainpack-checkpoint 3' (this trainpack reads "
       "'trainpack-checkpoint 2')"},
      {with_comment(archive, "trainpack-checkpoint 2"), malformed("trainpack-checkpoint 2")},
      {with_comment(archive, "trainpack-checkpoint 2 entries=7"),
       malformed("trainpack-checkpoint 2 entries=7")},
      {with_comment(archive, "trainpack-checkpoint 2 entries=x crc32c=00000000"),
       malformed("trainpack-checkpoint 2 entries=x crc32c=00000000")},
      {with_comment(archive, "trainpack-checkpoint 2 entries=7 crc32c=ABCDEF01"),
       malformed("trainpack-checkpoint 2 entries=7 crc32c=ABCDEF01")},
      {with_comment(archive, "trainpack-checkpoint 2 entries=7 crc32c=123"),
       malformed("trainpack-checkpoint 2 entries=7 crc32c=123")},
      {with_comment(archive, "trainpack-checkpoint 2 crc32c=12345678 entries=7"),
       malformed("trainpack-checkpoint 2 crc32c=12345678 entries=7")},
      // A valid trailer with the wrong entry count: decoded, then refused.
      {with_trailer_head(good, "trainpack-checkpoint 2 entries=8 crc32c="),
       "holds 7 entries, but its trailer says 8"},
  };
  for (const Case& c : cases) {
    write_text(data_path, c.data);
    EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint(prefix()); }),
              data_path + ": " + c.reason)
        << trailer_of(c.data);
  }
}

// trainpack's format 1 kept the checksum in `model-<step>.index` beside a plain pickle_save file.
TEST_F(CheckpointTest, AFormat1CheckpointIsRefusedSayingSo) {
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(at::ones({2})));
  write_text(prefix() + ".data", std::string(bytes.begin(), bytes.end()));
  write_text(
      prefix() + ".index",
      "format: trainpack-checkpoint 1\ndata_bytes: 5\ndata_crc32c: 0x00000000\nentries: 1\n");
  EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint(prefix()); }),
            prefix() +
                ".data: written by an earlier trainpack (checkpoint format 1, with its checksum "
                "in model-600.index), which this version does not read; start a new run "
                "(--no-resume) or load it with torch.load in Python");
}

TEST_F(CheckpointTest, AFailedWriteLeavesTheExistingCheckpointAsItWas) {
  const TensorMap small = {{"a", at::ones({4})}};
  write_checkpoint(prefix(), small);
  const std::string before = read_text(prefix() + ".data");
  std::string msg;
  {
    FileSizeLimit limit(2000);
    msg = message_of<std::runtime_error>([&] {
      write_checkpoint(prefix(), {{"a", at::ones({10000})}});
    });
  }
  EXPECT_TRUE(std::regex_match(
      msg, std::regex("cannot write " + temporary_name_pattern(prefix() + ".data") +
                      " \\(EFBIG: this process may not write files larger than [0-9]+ bytes, "
                      "its file-size limit `ulimit -f`; raise the limit or free the run from "
                      "it\\): File too large")))
      << msg;
  EXPECT_EQ(read_text(prefix() + ".data"), before);
  expect_same(small, read_checkpoint(prefix()));
  EXPECT_EQ(files_in(dir()), (std::vector<std::string>{"model-600.data"}));
}

// The data file is streamed into the file (tensors written from their own memory): the bytes of
// torch::jit::pickle_save of the dict, which builds the archive in memory, with the trailer as
// its zip comment.
TEST_F(CheckpointTest, TheDataFileHoldsTheBytesOfPickleSaveWithoutTypeTags) {
  TensorMap m = sample_map();
  m["big"] = at::arange(100000, at::kFloat);  // over the writer's 64 KiB buffer
  m["alias"] = m["big"].narrow(0, 10, 20);    // a view of the same storage: stored once
  write_checkpoint(prefix(), m, CheckpointWriteOptions().fsync(false));
  c10::Dict<std::string, at::Tensor> dict;
  // Detached, as write_checkpoint stores them: a tensor referenced elsewhere too is memoized by
  // the pickler (a BINPUT more), which changes the bytes but not what they mean.
  for (const auto& [name, t] : m) dict.insert(name, t.detach());
  // What torch::jit::pickle_save makes, with the dict's type tag left out (tag_aggregates off:
  // Python's torch.load refuses the tag by default since PyTorch 2.6).
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&pickle](const char* b, size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
      nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> expected;
  {
    caffe2::serialize::PyTorchStreamWriter zip([&expected](const void* b, size_t n) {
      expected.insert(expected.end(), static_cast<const char*>(b), static_cast<const char*>(b) + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                       zip);
    zip.writeEndOfFile();
  }
  EXPECT_EQ(std::string(pickle.begin(), pickle.end()).find("restore_type_tag"), std::string::npos);
  const std::string data = read_text(prefix() + ".data");
  const std::string trailer = trailer_of(data);
  EXPECT_EQ(trailer.rfind("trainpack-checkpoint 2 entries=9 crc32c=", 0), 0u) << trailer;
  EXPECT_EQ(data, with_comment(std::string(expected.begin(), expected.end()), trailer));
  expect_same(m, read_checkpoint(prefix()));
}

// A write that fails in the middle of a large tensor (written straight from its memory, past the
// buffer): the error names the file, nothing is replaced, no temporary file is left.
TEST_F(CheckpointTest, AWriteThatFailsInsideALargeTensorReplacesNothing) {
  const TensorMap small = {{"a", at::ones({4})}};
  write_checkpoint(prefix(), small);
  std::string msg;
  {
    FileSizeLimit limit(100000);
    msg = message_of<std::runtime_error>([&] {
      write_checkpoint(prefix(), {{"a", at::ones({1000000})}, {"b", at::ones({5})}});
    });
  }
  EXPECT_TRUE(std::regex_match(
      msg, std::regex("cannot write " + temporary_name_pattern(prefix() + ".data") +
                      " \\(EFBIG: this process may not write files larger than [0-9]+ bytes, "
                      "its file-size limit `ulimit -f`; raise the limit or free the run from "
                      "it\\): File too large")))
      << msg;
  expect_same(small, read_checkpoint(prefix()));
  EXPECT_EQ(files_in(dir()), (std::vector<std::string>{"model-600.data"}));
}

TEST_F(CheckpointTest, AnUnwritableDirectoryIsAnErrorNamingTheFile) {
  const std::string p = (dir() / "gone" / "model-1").string();
  const std::string msg =
      message_of<std::runtime_error>([&] { write_checkpoint(p, sample_map()); });
  EXPECT_TRUE(
      std::regex_match(msg, std::regex("cannot create " + temporary_name_pattern(p + ".data") +
                                       ": No such file or directory")))
      << msg;
}

TEST_F(CheckpointTest, CopyAndRemove) {
  const TensorMap m = sample_map();
  write_checkpoint(prefix(), m);
  copy_checkpoint(prefix(), prefix("min-val-error"));
  expect_same(m, read_checkpoint(prefix("min-val-error")));
  EXPECT_EQ(read_text(prefix() + ".data"), read_text(prefix("min-val-error") + ".data"));
  remove_checkpoint(prefix());
  remove_checkpoint(prefix());  // nothing left: not an error
  EXPECT_EQ(files_in(dir()), (std::vector<std::string>{"min-val-error.data"}));
}

TEST_F(CheckpointTest, ACorruptCheckpointIsNotCopied) {
  write_checkpoint(prefix(), sample_map());
  fs::resize_file(prefix() + ".data", 100);
  EXPECT_EQ(message_of<CheckpointError>([&] {
              copy_checkpoint(prefix(), prefix("best"));
            }).rfind(prefix() + ".data: truncated", 0),
            0u);
  EXPECT_FALSE(fs::exists(prefix("best") + ".data"));
}

TEST_F(CheckpointTest, FingerprintsTellCopiesFromOtherCheckpoints) {
  write_checkpoint(prefix(), sample_map());
  copy_checkpoint(prefix(), prefix("best"));
  TensorMap other = sample_map();
  other["conv1.weight"] = other["conv1.weight"] + 1;
  write_checkpoint(prefix("model-700"), other);
  const auto a = checkpoint_fingerprint(prefix());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(checkpoint_fingerprint(prefix("best")), a);
  EXPECT_NE(checkpoint_fingerprint(prefix("model-700")), a);
  EXPECT_FALSE(checkpoint_fingerprint(prefix("model-800")).has_value());  // no file
  write_text(prefix("plain") + ".data", "not a checkpoint");
  EXPECT_FALSE(checkpoint_fingerprint(prefix("plain")).has_value());
}

// ---- the `checkpoint` index file ----

CheckpointIndex sample_index() {
  CheckpointIndex index;
  index.model_checkpoint_path = "model-600";
  index.all_model_checkpoint_paths = {"model-500", "model-600"};
  index.all_model_checkpoint_timestamps = {1763850000.5, 1763850060.25};
  index.last_preserved_timestamp = 1763849940;
  return index;
}

TEST_F(CheckpointTest, TheCheckpointIndexIsTensorFlowsTextForm) {
  write_checkpoint_index(dir().string(), sample_index());
  EXPECT_EQ(read_text(dir() / "checkpoint"),
            "model_checkpoint_path: \"model-600\"\n"
            "all_model_checkpoint_paths: \"model-500\"\n"
            "all_model_checkpoint_paths: \"model-600\"\n"
            "all_model_checkpoint_timestamps: 1763850000.5\n"
            "all_model_checkpoint_timestamps: 1763850060.25\n"
            "last_preserved_timestamp: 1763849940\n");
  const auto back = read_checkpoint_index(dir().string());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->model_checkpoint_path, "model-600");
  EXPECT_EQ(back->all_model_checkpoint_paths, sample_index().all_model_checkpoint_paths);
  EXPECT_EQ(back->all_model_checkpoint_timestamps, sample_index().all_model_checkpoint_timestamps);
  EXPECT_EQ(back->last_preserved_timestamp, 1763849940);
  EXPECT_EQ(testing::temporary_files(dir()), std::vector<std::string>{});
}

TEST_F(CheckpointTest, TheCheckpointIndexOmitsEmptyFieldsAndEscapesNames) {
  CheckpointIndex index;
  index.model_checkpoint_path = "a \"b\"\\c\n\xc3\xa9";
  index.all_model_checkpoint_paths = {index.model_checkpoint_path};
  write_checkpoint_index(dir().string(), index);
  EXPECT_EQ(read_text(dir() / "checkpoint"),
            "model_checkpoint_path: \"a \\\"b\\\"\\\\c\\n\\303\\251\"\n"
            "all_model_checkpoint_paths: \"a \\\"b\\\"\\\\c\\n\\303\\251\"\n");
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path,
            index.model_checkpoint_path);
}

TEST_F(CheckpointTest, ReadsTheIndexThatTensorFlowWrites) {
  write_text(dir() / "checkpoint",
             "model_checkpoint_path: \"model-600\"\n"
             "all_model_checkpoint_paths: \"model-500\"\n"
             "all_model_checkpoint_paths: 'model-600'\n"
             "\n"
             "  last_preserved_timestamp:1.7e9  \n");
  const auto index = read_checkpoint_index(dir().string());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->model_checkpoint_path, "model-600");
  EXPECT_EQ(index->all_model_checkpoint_paths,
            (std::vector<std::string>{"model-500", "model-600"}));
  EXPECT_TRUE(index->all_model_checkpoint_timestamps.empty());
  EXPECT_EQ(index->last_preserved_timestamp, 1.7e9);
}

TEST_F(CheckpointTest, NoCheckpointIndexIsNullopt) {
  EXPECT_FALSE(read_checkpoint_index(dir().string()).has_value());
}

TEST_F(CheckpointTest, MalformedCheckpointIndexFilesAreRefusedNamingTheFile) {
  const std::string path = (dir() / "checkpoint").string();
  struct Case {
    std::string text;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"", "names no checkpoint (no model_checkpoint_path)"},
      {"model_checkpoint_path: \"\"\n", "names no checkpoint (no model_checkpoint_path)"},
      {"model_checkpoint_path: model-6\n",
       "line 1: not a quoted string for 'model_checkpoint_path'"},
      {"model_checkpoint_path: \"model-6\n",
       "line 1: not a quoted string for 'model_checkpoint_path'"},
      {"model_checkpoint_path: \"a\"b\"\n",
       "line 1: not a quoted string for 'model_checkpoint_path'"},
      {"model_checkpoint_path: \"a\\q\"\n",
       "line 1: not a quoted string for 'model_checkpoint_path'"},
      {"model_checkpoint_path: \"a\"\nmodel_checkpoint_path: \"b\"\n",
       "line 2: 'model_checkpoint_path' appears twice"},
      {"model_checkpoint_path: \"a\"\nlatest: \"b\"\n", "line 2: an unknown field (not an index that ModelSaver wrote)"},
      {"model_checkpoint_path: \"a\"\nsomething\n",
       "line 2: expected 'field: value' (not an index that ModelSaver wrote)"},
      {"model_checkpoint_path: \"a\"\nall_model_checkpoint_timestamps: soon\n",
       "line 2: not a number for 'all_model_checkpoint_timestamps'"},
      {"model_checkpoint_path: \"a\"\nall_model_checkpoint_paths: \"a\"\n"
       "all_model_checkpoint_timestamps: 1\nall_model_checkpoint_timestamps: 2\n",
       "has 2 all_model_checkpoint_timestamps for 1 all_model_checkpoint_paths"},
  };
  for (const Case& c : cases) {
    write_text(path, c.text);
    EXPECT_EQ(message_of<CheckpointError>([&] { read_checkpoint_index(dir().string()); }),
              path + ": " + c.reason)
        << c.text;
  }
}

// ---- resolve_checkpoint_path ----

TEST_F(CheckpointTest, ResolvesDirectoriesIndexFilesAndSuffixes) {
  write_checkpoint(prefix("model-500"), sample_map());
  write_checkpoint(prefix(), sample_map());
  write_checkpoint_index(dir().string(), sample_index());
  EXPECT_EQ(resolve_checkpoint_path(dir().string()), prefix());
  EXPECT_EQ(resolve_checkpoint_path((dir() / "checkpoint").string()), prefix());
  EXPECT_EQ(resolve_checkpoint_path(prefix("model-500")), prefix("model-500"));
  LogCapture log;
  EXPECT_EQ(resolve_checkpoint_path(prefix("model-500") + ".data"), prefix("model-500"));
  EXPECT_EQ(resolve_checkpoint_path(prefix("model-500") + ".index"), prefix("model-500"));
  EXPECT_EQ(log.lines(), (std::vector<std::string>{
                             "Checkpoint path " + prefix("model-500") +
                                 ".data is auto-corrected to " + prefix("model-500") + ".",
                             "Checkpoint path " + prefix("model-500") +
                                 ".index is auto-corrected to " + prefix("model-500") + "."}));
}

TEST_F(CheckpointTest, ResolvesABareNameInTheCurrentDirectory) {
  write_checkpoint(prefix(), sample_map());
  const fs::path cwd = fs::current_path();
  fs::current_path(dir());
  std::string resolved, missing;
  try {
    resolved = resolve_checkpoint_path("model-600");
    missing = message_of<CheckpointError>([&] { resolve_checkpoint_path("model-7"); });
  } catch (...) {
  }
  fs::current_path(cwd);
  EXPECT_EQ(resolved, "./model-600");
  EXPECT_EQ(missing, "./model-7: no such checkpoint (./model-7.data does not exist)");
}

TEST_F(CheckpointTest, ResolveRefusesWhatNamesNoCheckpoint) {
  EXPECT_EQ(message_of<CheckpointError>([&] { resolve_checkpoint_path(dir().string()); }),
            dir().string() + ": no checkpoint index file 'checkpoint' in " + dir().string());
  write_checkpoint_index(dir().string(), sample_index());  // names model-600, which is not there
  EXPECT_EQ(message_of<CheckpointError>([&] { resolve_checkpoint_path(dir().string()); }),
            prefix() + ": no such checkpoint (" + prefix() + ".data does not exist)");
  EXPECT_EQ(message_of<CheckpointError>([&] { resolve_checkpoint_path(""); }),
            ": the checkpoint path is empty");
}

}  // namespace checkpoint_test
}  // namespace trainpack
