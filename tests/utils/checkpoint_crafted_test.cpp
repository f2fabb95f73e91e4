// Crafted checkpoints (utils/checkpoint.h): files with a valid trailer and CRC whose archive,
// pickle or records lie. Each is refused by read_checkpoint as corrupt, naming the file and what
// is wrong, before any tensor is read: LibTorch's reader trusts the pickle's sizes and offsets.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "support/crafted_checkpoint.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/pickle_check.h"
#include "trainpack/utils/pickle_tensors.h"
#include "trainpack/utils/zip_directory.h"

namespace trainpack {
namespace checkpoint_crafted_test {

using testing::CraftedCheckpoint;
using testing::with_geometry;
using testing::write_crafted_checkpoint;

// The 288 floats of a 32x1x3x3 convolution's weight, as in the report that found the first case.
at::Tensor conv_weight() { return at::arange(288, at::kFloat).reshape({32, 1, 3, 3}); }

// A CraftedCheckpoint of `tensors` as they are (their own records, the pickle unchanged).
CraftedCheckpoint crafted(std::vector<std::pair<std::string, at::Tensor>> tensors) {
  CraftedCheckpoint spec;
  spec.tensors = std::move(tensors);
  return spec;
}

class CheckpointCraftedTest : public testing::TempDirTest {
 protected:
  std::string prefix() const { return (dir() / "model-99").string(); }

  // The CheckpointError of read_checkpoint(prefix()); fails the test when it reads the file.
  std::string refusal() {
    try {
      (void)read_checkpoint(prefix());
    } catch (const CheckpointError& e) {
      EXPECT_EQ(e.path(), prefix() + ".data");
      return e.what();
    }
    ADD_FAILURE() << "read_checkpoint accepted the crafted file";
    return "";
  }
};

TEST_F(CheckpointCraftedTest, TheHonestFileOfTheHelperIsRead) {
  // The helper itself makes readable files: what the other tests change is all that is wrong.
  write_crafted_checkpoint(prefix(), crafted({{"conv1.weight", conv_weight()}}));
  const TensorMap m = read_checkpoint(prefix());
  EXPECT_TRUE(at::equal(m.at("conv1.weight"), conv_weight()));
}

TEST_F(CheckpointCraftedTest, ARecordShorterThanItsStorageIsRefused) {
  // The record of the 1152-byte storage holds 4 bytes: the tensor would read heap memory.
  CraftedCheckpoint spec = crafted({{"conv1.weight", conv_weight()}});
  spec.records = {at::ones({1}, at::kFloat)};
  write_crafted_checkpoint(prefix(), spec);
  EXPECT_EQ(refusal(), prefix() +
                           ".data: corrupt or crafted: storage '0' is 1152 bytes by its pickle, "
                           "but its record holds 4");
}

TEST_F(CheckpointCraftedTest, ARecordLongerThanItsStorageIsRefused) {
  CraftedCheckpoint spec = crafted({{"conv1.weight", conv_weight()}});
  spec.records = {at::ones({300}, at::kFloat)};
  write_crafted_checkpoint(prefix(), spec);
  EXPECT_EQ(refusal(), prefix() +
                           ".data: corrupt or crafted: storage '0' is 1152 bytes by its pickle, "
                           "but its record holds 1200");
}

TEST_F(CheckpointCraftedTest, AHugeStorageOffsetIsRefusedNamingTheTensor) {
  // 2^40: every resume crashed with SIGSEGV before this check.
  const at::Tensor w = conv_weight();
  write_crafted_checkpoint(
      prefix(),
      crafted({{"conv1.weight", with_geometry(w, int64_t{1} << 40, {32, 1, 3, 3}, w.strides())}}));
  EXPECT_EQ(refusal(), prefix() +
                           ".data: corrupt or crafted: the tensor 'conv1.weight' does not fit in "
                           "its storage (storage offset 1099511627776, sizes [32, 1, 3, 3], "
                           "strides [9, 9, 3, 1], but the storage holds 288 elements)");
}

TEST_F(CheckpointCraftedTest, SizesAndStridesReachingPastTheStorageAreRefused) {
  const at::Tensor w = conv_weight();
  // One element past the end: offset 1 with the full shape.
  write_crafted_checkpoint(prefix(), crafted({{"a", with_geometry(w, 1, {288}, {1})}}));
  EXPECT_NE(refusal().find("the tensor 'a' does not fit in its storage (storage offset 1, sizes "
                           "[288], strides [1]"),
            std::string::npos);
  // A stride that walks past the end, and strides whose extent overflows 64 bits.
  write_crafted_checkpoint(prefix(), crafted({{"b", with_geometry(w, 0, {2, 144}, {200, 1})}}));
  EXPECT_NE(refusal().find("the tensor 'b' does not fit"), std::string::npos);
  write_crafted_checkpoint(
      prefix(),
      crafted({{"c", with_geometry(w, 0, {2, 2}, {int64_t{1} << 62, int64_t{1} << 62})}}));
  EXPECT_NE(refusal().find("the tensor 'c' does not fit"), std::string::npos);
}

TEST_F(CheckpointCraftedTest, TensorsThatFitExactlyAreRead) {
  // The last element of the storage, a stride-0 broadcast and an empty tensor at the end.
  const at::Tensor w = conv_weight();
  write_crafted_checkpoint(prefix(), crafted({{"last", with_geometry(w, 287, {1}, {1})},
                                              {"broadcast", with_geometry(w, 5, {4, 3}, {0, 1})},
                                              {"empty", with_geometry(w, 288, {0, 3}, {3, 1})}}));
  const TensorMap m = read_checkpoint(prefix());
  EXPECT_EQ(m.at("last").item<float>(), 287.0f);
  EXPECT_TRUE(at::equal(m.at("broadcast"), at::arange(5, 8, at::kFloat).expand({4, 3})));
  EXPECT_EQ(m.at("empty").numel(), 0);
}

TEST_F(CheckpointCraftedTest, AnEmptyTensorOffsetPastItsStorageIsRefused) {
  write_crafted_checkpoint(prefix(), crafted({{"e", with_geometry(conv_weight(), 289, {0}, {1})}}));
  EXPECT_NE(refusal().find("the tensor 'e' does not fit in its storage (storage offset 289"),
            std::string::npos);
}

// The pickle with the 4-byte length of the BINUNICODE string `text` replaced by `length`.
std::function<void(std::vector<char>&)> string_length(const std::string& text, uint32_t length) {
  return [text, length](std::vector<char>& pickle) {
    std::string op = "X";
    for (int i = 0; i < 4; ++i) op += static_cast<char>((text.size() >> (8 * i)) & 0xff);
    op += text;
    const std::string bytes(pickle.begin(), pickle.end());
    const size_t at = bytes.find(op);
    ASSERT_NE(at, std::string::npos) << "no BINUNICODE '" << text << "' in the pickle";
    for (int i = 0; i < 4; ++i) pickle[at + 1 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  };
}

TEST_F(CheckpointCraftedTest, A2GiBStringLengthIsRefusedBeforeAnythingIsAllocated) {
  // Under a 1 GiB address-space limit: LibTorch's unpickler would first allocate the 2 GiB.
  CraftedCheckpoint spec = crafted({{"conv1.weight", conv_weight()}});
  spec.edit_pickle = string_length("conv1.weight", 0x7fffffff);
  write_crafted_checkpoint(prefix(), spec);
  const std::string what = refusal();
  EXPECT_NE(what.find(".data: corrupt or crafted data.pkl: opcode BINUNICODE at byte "),
            std::string::npos)
      << what;
  EXPECT_NE(what.find(" announces 2147483647 bytes, but "), std::string::npos) << what;
}

TEST_F(CheckpointCraftedTest, ACutArchiveDirectoryIsRefused) {
  // An entry's size in the central directory pointing past the entries' area.
  std::string bytes = testing::crafted_checkpoint_bytes(crafted({{"w", conv_weight()}}));
  const ZipDirectory zip = read_zip_directory(bytes.data(), bytes.size());
  ASSERT_NE(zip.find("archive/data/0"), nullptr);
  // The central header of data/0: its uncompressed and compressed sizes set to 1 GiB.
  const std::string name = "archive/data/0";
  const size_t header = bytes.rfind(std::string("PK\x01\x02", 4), bytes.rfind(name));
  for (const size_t field : {size_t{20}, size_t{24}}) {
    bytes[header + field + 3] = 0x40;
  }
  // A new valid trailer over the edited bytes.
  const size_t trailer = bytes.rfind("trainpack-checkpoint ");
  const std::string head = bytes.substr(trailer, bytes.size() - trailer - 8);
  bytes =
      bytes.substr(0, trailer) + head + fmt::format("{:08x}", crc32c::value(bytes.data(), trailer));
  testing::write_text(prefix() + ".data", bytes);
  EXPECT_NE(refusal().find("corrupt or crafted: zip entry 'archive/data/0': its 1073742976 bytes "
                           "at offset "),
            std::string::npos);
}

// ---- the two checks on their own ----

TEST(PickleBoundsProblem, AcceptsWhatLibTorchsPicklerWrites) {
  const std::string bytes = testing::crafted_checkpoint_bytes(
      crafted({{"w", conv_weight()}, {"s", at::scalar_tensor(7, at::kLong)}}));
  const ZipDirectory zip = read_zip_directory(bytes.data(), bytes.size());
  const ZipEntry* pickle = zip.find("archive/data.pkl");
  ASSERT_NE(pickle, nullptr);
  EXPECT_EQ(pickle_bounds_problem(bytes.data() + pickle->data_offset, pickle->size), "");
}

TEST(PickleBoundsProblem, NamesTheOpcodeAndTheBytesForEachKindOfArgument) {
  const auto problem = [](const std::string& p) {
    return pickle_bounds_problem(p.data(), p.size());
  };
  EXPECT_EQ(problem(std::string("\x80\x02K\x05.", 5)), "");
  EXPECT_EQ(problem(std::string("\x80\x02J\x01", 4)),
            "opcode BININT at byte 2 needs 4 bytes, but 1 remain");
  EXPECT_EQ(problem(std::string("\x80\x02X\x10\x00\x00\x00hi.", 10)),
            "opcode BINUNICODE at byte 2 announces 16 bytes, but 3 remain");
  EXPECT_EQ(problem(std::string("\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", 10)),
            "opcode BINUNICODE8 at byte 0 announces 18446744073709551615 bytes, but 1 remain");
  EXPECT_EQ(problem(std::string("T\xff\xff\xff\xff.", 6)),
            "opcode BINSTRING at byte 0 announces a negative length");
  EXPECT_EQ(problem("cmodule\nname\n."), "");
  EXPECT_EQ(problem("cmodule\nname"), "opcode GLOBAL at byte 0 has no end of line");
  EXPECT_EQ(problem(std::string("\x80\x02\xff", 3)),
            "byte 2 holds 0xff, which is not a pickle opcode");
  EXPECT_EQ(problem(std::string("\x80\x02N", 3)), "the pickle ends without its STOP opcode");
  // Memo indices: the next one or one that exists (LibTorch sizes its memo table by them).
  EXPECT_EQ(problem(std::string("\x80\x02(Nq\x00Nq\x01h\x00h\x01Nq\x00t.", 18)), "");
  EXPECT_EQ(problem(std::string("\x80\x02Nq\x05.", 6)),
            "opcode BINPUT at byte 3 uses memo entry 5, but the memo holds 0");
  EXPECT_EQ(problem(std::string("\x80\x02Nr\x00\x27\xb9\x29.", 9)),
            "opcode LONG_BINPUT at byte 3 uses memo entry 700000000, but the memo holds 0");
  EXPECT_EQ(problem(std::string("\x80\x02Nq\x00h\x01.", 8)),
            "opcode BINGET at byte 5 uses memo entry 1, but the memo holds 1");
  EXPECT_EQ(problem(std::string("\x80\x02N\x94h\x00\x86.", 8)), "");  // MEMOIZE adds one
  EXPECT_EQ(problem("Np0\n."),
            "opcode PUT at byte 1 is protocol 0's text memo, which LibTorch's "
            "pickles do not use");
  // The stack: LibTorch's unpickler pops without looking.
  EXPECT_EQ(problem(std::string("\x80\x02}R.", 5)),
            "opcode REDUCE at byte 3: needs 2 objects on the stack, but 1 are there");
  EXPECT_EQ(problem(std::string("\x80\x02}(NNNu.", 9)),
            "opcode SETITEMS at byte 7: 3 objects after its MARK, not key-value pairs");
  EXPECT_EQ(problem(std::string("\x80\x02(Nt", 5) + "NN."),
            "opcode STOP at byte 7: 3 objects on the stack at STOP (1 expected)");
  EXPECT_EQ(problem(std::string("\x80\x02(N.", 5)),
            "opcode STOP at byte 4: an unclosed MARK at STOP");
  EXPECT_EQ(problem(std::string("\x80\x02Nt.", 5)), "opcode TUPLE at byte 3: no MARK to consume");
  EXPECT_EQ(problem(std::string("\x80\x02(Ne.", 6)),
            "opcode APPENDS at byte 4: needs 1 objects on the stack, but 0 are there");
  EXPECT_EQ(problem(std::string("\x80\x02](NNe}NNs\x86.", 13)), "");
  EXPECT_EQ(problem(""), "the pickle ends without its STOP opcode");
}

// The pickle of a data file's archive.
std::string pickle_of(const std::string& archive) {
  const ZipDirectory zip = read_zip_directory(archive.data(), archive.size());
  const ZipEntry* pickle = zip.find("archive/data.pkl");
  EXPECT_NE(pickle, nullptr);
  return pickle == nullptr ? "" : archive.substr(pickle->data_offset, pickle->size);
}

TEST(PickledTensors, ReadsEachTensorsStorageAndGeometryWithItsName) {
  // Two tensors of one storage (the second reaches it through the memo) and one of its own.
  const at::Tensor w = conv_weight();
  const std::string pickle = pickle_of(
      testing::crafted_checkpoint_bytes(crafted({{"w", w},
                                                 {"view", with_geometry(w, 10, {3, 4}, {5, 1})},
                                                 {"s", at::scalar_tensor(7, at::kLong)}})));
  const std::vector<PickledTensor> tensors = pickled_tensors(pickle.data(), pickle.size());
  ASSERT_EQ(tensors.size(), 3u);
  std::map<std::string, PickledTensor> by_name;
  for (const PickledTensor& t : tensors) by_name[t.name] = t;
  ASSERT_EQ(by_name.size(), 3u) << "a tensor without its name";
  EXPECT_EQ(by_name["w"].storage_numel, 288);
  EXPECT_EQ(by_name["w"].storage_offset, 0);
  EXPECT_EQ(by_name["w"].sizes, (std::vector<int64_t>{32, 1, 3, 3}));
  EXPECT_EQ(by_name["w"].strides, (std::vector<int64_t>{9, 9, 3, 1}));
  EXPECT_EQ(by_name["view"].storage_key, by_name["w"].storage_key);
  EXPECT_EQ(by_name["view"].storage_numel, 288);
  EXPECT_EQ(by_name["view"].storage_offset, 10);
  EXPECT_EQ(by_name["view"].sizes, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(by_name["view"].strides, (std::vector<int64_t>{5, 1}));
  EXPECT_NE(by_name["s"].storage_key, by_name["w"].storage_key);
  EXPECT_EQ(by_name["s"].storage_numel, 1);
  EXPECT_TRUE(by_name["s"].sizes.empty());
  for (const PickledTensor& t : tensors) EXPECT_EQ(t.fit_problem(), "") << t.name;
}

TEST(PickledTensors, StopsWithoutThrowingAtWhatItCannotFollow) {
  const std::string pickle =
      pickle_of(testing::crafted_checkpoint_bytes(crafted({{"w", conv_weight()}})));
  // Every prefix of an honest pickle: at most the one tensor, never a throw or a crash.
  for (size_t n = 0; n < pickle.size(); ++n) {
    EXPECT_LE(pickled_tensors(pickle.data(), n).size(), 1u);
  }
  EXPECT_TRUE(pickled_tensors("\x80\x02R.", 4).empty());  // a call with nothing on the stack
  // A thousand nested tuples: kept as opaque values, not as a chain as deep.
  std::string deep = "\x80\x02N";
  for (int i = 0; i < 1000; ++i) deep += "\x85";
  EXPECT_TRUE(pickled_tensors((deep + ".").data(), deep.size() + 1).empty());
}

TEST(TensorFitProblem, CountsTheLastElementAndOnlyTheOffsetOfAnEmptyTensor) {
  EXPECT_EQ(tensor_fit_problem(287, {1}, {1}, 288), "");
  EXPECT_EQ(tensor_fit_problem(288, {1}, {1}, 288),
            "does not fit in its storage (storage offset 288, sizes [1], strides [1], but the "
            "storage holds 288 elements)");
  EXPECT_EQ(tensor_fit_problem(288, {0, 3}, {3, 1}, 288), "");
  EXPECT_NE(tensor_fit_problem(289, {0}, {1}, 288), "");
  EXPECT_EQ(tensor_fit_problem(0, {4, 3}, {0, 1}, 3), "");  // a broadcast
  EXPECT_EQ(tensor_fit_problem(-1, {1}, {1}, 288), "has a negative storage offset (-1)");
  EXPECT_EQ(tensor_fit_problem(0, {2}, {-1}, 288),
            "has a negative size or stride (sizes [2], strides [-1])");
  EXPECT_EQ(tensor_fit_problem(0, {2, 2}, {1}, 288), "has 2 sizes but 1 strides");
  EXPECT_NE(tensor_fit_problem(0, {2, 2}, {int64_t{1} << 62, int64_t{1} << 62}, 288), "");
}

TEST(ZipDirectory, ReadsTheEntriesOfAPyTorchArchive) {
  const std::string bytes = testing::crafted_checkpoint_bytes(crafted({{"w", conv_weight()}}));
  const ZipDirectory zip = read_zip_directory(bytes.data(), bytes.size());
  const ZipEntry* record = zip.find("archive/data/0");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->size, 1152u);
  // The record holds the tensor's bytes.
  EXPECT_EQ(std::memcmp(bytes.data() + record->data_offset, conv_weight().data_ptr(), 1152), 0);
  EXPECT_EQ(zip.find("archive/nothing"), nullptr);
}

TEST(ZipDirectory, RefusesWhatIsNotAnArchive) {
  EXPECT_EQ(testing::message_of([] { read_zip_directory("PK", 2); }),
            "not a zip archive: shorter than its end record");
  const std::string zeros(100, '\0');
  EXPECT_EQ(testing::message_of([&] { read_zip_directory(zeros.data(), zeros.size()); }),
            "not a zip archive: no end record whose comment reaches the end of the file");
}

}  // namespace checkpoint_crafted_test
}  // namespace trainpack
