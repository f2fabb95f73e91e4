#include "trainpack/utils/npz.h"
#include "support/command.h"
#include "support/files.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fs = std::filesystem;
using trainpack::encode_npy;
using trainpack::write_npz;

namespace npz_test {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint32_t get16(const std::string& s, size_t at) {
  return static_cast<unsigned char>(s[at]) | (static_cast<unsigned char>(s[at + 1]) << 8);
}

uint32_t get32(const std::string& s, size_t at) { return get16(s, at) | (get16(s, at + 2) << 16); }

// Bitwise CRC-32 (zip's, polynomial 0xedb88320), independent of the zlib the library uses.
uint32_t crc32_ref(const std::string& s) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// Expects `what()` of the exception thrown by f to contain every one of `parts`.
template <typename E, typename F>
void expect_throw_with(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

using trainpack::testing::run_command;

// Debian's python3-numpy installs into /usr/bin/python3's path; prefer that interpreter.
std::string python_with_numpy() {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd = std::string(py) + " -c \"import numpy\" >/dev/null 2>&1 </dev/null";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

class NpzTest : public trainpack::testing::TempDirTest {};

at::Tensor f32_2x3() {
  return at::tensor({1.5f, -2.0f, 0.25f, 3.0f, 4.0f, -0.125f}).reshape({2, 3});
}

TEST(Npy, HeaderBytesForFloat32Matrix) {
  const std::string npy = encode_npy(f32_2x3());
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected("\x93NUMPY\x01\x00\x76\x00", 10);  // header length 118
  expected += dict + std::string(58, ' ') + "\n";
  ASSERT_EQ(expected.size(), 128u);
  ASSERT_EQ(npy.size(), 128u + 6 * 4);
  EXPECT_EQ(npy.substr(0, 128), expected);
  const float values[] = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, -0.125f};
  EXPECT_EQ(npy.substr(128), std::string(reinterpret_cast<const char*>(values), sizeof values));
}

TEST(Npy, DescriptorsShapesAndAlignment) {
  struct Case {
    at::Tensor t;
    std::string descr, shape;
  };
  const Case cases[] = {
      {at::zeros({2, 3}, at::kFloat), "<f4", "(2, 3)"},
      {at::zeros({4}, at::kDouble), "<f8", "(4,)"},
      {at::zeros({1, 2, 3}, at::kHalf), "<f2", "(1, 2, 3)"},
      {at::zeros({}, at::kChar), "|i1", "()"},
      {at::zeros({0}, at::kByte), "|u1", "(0,)"},
      {at::zeros({7, 0}, at::kShort), "<i2", "(7, 0)"},
      {at::zeros({123456789, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, at::kInt), "<i4",
       "(123456789, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)"},
      {at::zeros({10}, at::kLong), "<i8", "(10,)"},
      {at::zeros({3}, at::kBool), "|b1", "(3,)"},
  };
  for (const auto& c : cases) {
    const std::string npy = encode_npy(c.t);
    const size_t hlen = get16(npy, 8);
    const size_t data_start = 10 + hlen;
    EXPECT_EQ(data_start % 64, 0u) << c.descr;
    EXPECT_EQ(npy.size(), data_start + c.t.numel() * c.t.element_size()) << c.descr;
    EXPECT_EQ(npy[data_start - 1], '\n');
    const std::string dict =
        "{'descr': '" + c.descr + "', 'fortran_order': False, 'shape': " + c.shape + ", }";
    EXPECT_EQ(npy.substr(10, dict.size()), dict);
    EXPECT_EQ(npy.substr(10 + dict.size(), hlen - dict.size() - 1),
              std::string(hlen - dict.size() - 1, ' '));
  }
}

TEST(Npy, NonContiguousTensorIsWrittenInLogicalOrder) {
  const at::Tensor t = f32_2x3().t();  // 3x2, not contiguous
  ASSERT_FALSE(t.is_contiguous());
  const std::string npy = encode_npy(t);
  EXPECT_NE(npy.find("'shape': (3, 2)"), std::string::npos);
  const float values[] = {1.5f, 3.0f, -2.0f, 4.0f, 0.25f, -0.125f};
  EXPECT_EQ(npy.substr(get16(npy, 8) + 10),
            std::string(reinterpret_cast<const char*>(values), sizeof values));
  EXPECT_EQ(npy, encode_npy(t.contiguous()));
}

TEST(Npy, UnsupportedDtypeNamesIt) {
  expect_throw_with<std::invalid_argument>([] { encode_npy(at::zeros({2}, at::kBFloat16)); },
                                           {"encode_npy", "BFloat16"});
  expect_throw_with<std::invalid_argument>([] { encode_npy(at::zeros({2}, at::kComplexFloat)); },
                                           {"ComplexFloat"});
  expect_throw_with<std::invalid_argument>([] { encode_npy(at::Tensor()); }, {"undefined"});
}

TEST_F(NpzTest, ZipStructureIsValid) {
  const fs::path path = dir() / "a.npz";
  write_npz(path.string(), {{"x", f32_2x3()}, {"dir/y", at::arange(5, at::kLong)}});
  const std::string z = read_file(path);
  ASSERT_GE(z.size(), 22u);
  const size_t eocd = z.size() - 22;
  ASSERT_EQ(get32(z, eocd), 0x06054b50u);
  EXPECT_EQ(get16(z, eocd + 8), 2u);
  EXPECT_EQ(get16(z, eocd + 10), 2u);
  const size_t cd_size = get32(z, eocd + 12), cd_off = get32(z, eocd + 16);
  EXPECT_EQ(cd_off + cd_size, eocd);
  size_t at = cd_off;
  const char* names[] = {"x.npy", "dir/y.npy"};
  const at::Tensor tensors[] = {f32_2x3(), at::arange(5, at::kLong)};
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(get32(z, at), 0x02014b50u);
    const uint32_t crc = get32(z, at + 16), size = get32(z, at + 20);
    const size_t name_len = get16(z, at + 28), local = get32(z, at + 42);
    EXPECT_EQ(z.substr(at + 46, name_len), names[i]);
    ASSERT_EQ(get32(z, local), 0x04034b50u);
    EXPECT_EQ(get16(z, local + 8), 0u);  // stored
    EXPECT_EQ(get32(z, local + 14), crc);
    EXPECT_EQ(z.substr(local + 30, name_len), names[i]);
    const std::string data = z.substr(local + 30 + name_len, size);
    EXPECT_EQ(data, encode_npy(tensors[i]));
    EXPECT_EQ(crc, crc32_ref(data));
    at += 46 + name_len;
  }
  EXPECT_TRUE(trainpack::testing::temporary_files(path.parent_path()).empty());
}

TEST_F(NpzTest, NumpyLoadsEveryDtype) {
  const std::string py = python_with_numpy();
  if (py.empty()) GTEST_SKIP() << "python3 with numpy (Debian's python3-numpy) is not installed";
  const fs::path path = dir() / "dump.npz";
  write_npz(
      path.string(),
      {
          {"fc/W", f32_2x3()},
          {"f64", at::tensor({0.1, -1e300}, at::kDouble)},
          {"f16", at::tensor({0.5f, -1.0f}).to(at::kHalf)},
          {"i8", at::tensor({-128, 127}, at::kChar)},
          {"u8", at::scalar_tensor(200, at::kByte)},
          {"i16", at::tensor({-300, 300}, at::kShort)},
          {"i32", at::tensor({-70000, 70000}, at::kInt)},
          {"i64", at::tensor({int64_t{-1}, int64_t{0}, int64_t{9007199254740993}}, at::kLong)},
          {"flag", at::tensor({1, 0, 1}, at::kInt).to(at::kBool)},
          {"T", f32_2x3().t()},
      });
  const fs::path script = dir() / "check.py";
  std::ofstream(script) << "import sys, numpy as np\n"
                           "d = np.load(sys.argv[1])\n"
                           "for k in d.files:\n"
                           "    a = d[k]\n"
                           "    print(k, a.dtype.str, a.shape, a.tolist())\n";
  const auto [out, rc] =
      run_command(py + " " + script.string() + " " + path.string() + " </dev/null");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out,
            "fc/W <f4 (2, 3) [[1.5, -2.0, 0.25], [3.0, 4.0, -0.125]]\n"
            "f64 <f8 (2,) [0.1, -1e+300]\n"
            "f16 <f2 (2,) [0.5, -1.0]\n"
            "i8 |i1 (2,) [-128, 127]\n"
            "u8 |u1 () 200\n"
            "i16 <i2 (2,) [-300, 300]\n"
            "i32 <i4 (2,) [-70000, 70000]\n"
            "i64 <i8 (3,) [-1, 0, 9007199254740993]\n"
            "flag |b1 (3,) [True, False, True]\n"
            "T <f4 (3, 2) [[1.5, 3.0], [-2.0, 4.0], [0.25, -0.125]]\n");
}

TEST_F(NpzTest, BadNamesAreRejectedBeforeWriting) {
  const std::string path = (dir() / "bad.npz").string();
  const at::Tensor t = at::zeros({2});
  expect_throw_with<std::invalid_argument>([&] { write_npz(path, {{"", t}}); }, {"empty"});
  expect_throw_with<std::invalid_argument>(
      [&] {
        write_npz(path, {{std::string("a\0b", 3), t}});
      },
      {"NUL", "'a\\0b'"});
  expect_throw_with<std::invalid_argument>(
      [&] {
        write_npz(path, {{"/etc/x", t}});
      },
      {"'/etc/x'", "separator"});
  for (const char* name : {"..", "../x", "a/../../x", "a/..", "a\\..\\x"}) {
    expect_throw_with<std::invalid_argument>(
        [&] {
          write_npz(path, {{name, t}});
        },
        {std::string("'") + name + "'", ".."});
  }
  expect_throw_with<std::invalid_argument>(
      [&] {
        write_npz(path, {{"a", t}, {"b", t}, {"a", t}});
      },
      {"duplicate", "'a'"});
  expect_throw_with<std::invalid_argument>(
      [&] {
        write_npz(path, {{"ok", t}, {"w", at::zeros({2}, at::kBFloat16)}});
      },
      {"'w'", "BFloat16"});
  EXPECT_TRUE(fs::is_empty(dir()));
  // Names that merely contain dots are fine.
  write_npz(path, {{"a..b", t}, {"..x", t}, {"x/.../y", t}});
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(NpzTest, ReplacesAtomicallyAndNamesThePathOnError) {
  const fs::path path = dir() / "d.npz";
  write_npz(path.string(), {{"a", at::zeros({100})}});
  const auto big = fs::file_size(path);
  write_npz(path.string(), {{"a", at::zeros({1})}});
  EXPECT_LT(fs::file_size(path), big);
  EXPECT_TRUE(trainpack::testing::temporary_files(path.parent_path()).empty());
  write_npz(path.string(), {});  // an empty npz is a valid (empty) zip
  EXPECT_EQ(fs::file_size(path), 22u);

  const std::string missing = (dir() / "no" / "such" / "e.npz").string();
  expect_throw_with<std::runtime_error>(
      [&] {
        write_npz(missing, {{"a", at::zeros({1})}});
      },
      {missing, "No such file"});
  // A directory in the way of the rename: the temporary file is removed, the error names both.
  const fs::path blocked = dir() / "blocked.npz";
  fs::create_directories(blocked / "inside");
  expect_throw_with<std::runtime_error>(
      [&] {
        write_npz(blocked.string(), {{"a", at::zeros({1})}});
      },
      {blocked.string(), "rename"});
  EXPECT_TRUE(trainpack::testing::temporary_files(blocked.parent_path()).empty());
}

}  // namespace npz_test
