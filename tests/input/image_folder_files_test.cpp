#include "trainpack/input/image_folder_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/as_nobody.h"
#include "support/errors.h"
#include "support/temp_dir.h"
#include "trainpack/input/pass_order.h"

namespace trainpack {
namespace image_folder_files_test {

namespace fs = std::filesystem;
using testing::message_of;
using testing::ScopedTempDir;

// An empty file at `path` (listing does not read the files), with its folders.
void touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

// (file path relative to root, label) of every datapoint of one pass, in order.
std::vector<std::pair<std::string, int64_t>> read_pass(ImageFolderFiles& ds, const fs::path& root) {
  std::vector<std::pair<std::string, int64_t>> out;
  while (auto dp = ds.next()) {
    out.emplace_back(fs::path(ds.path((*dp)[0].item<int64_t>())).lexically_relative(root).string(),
                     (*dp)[1].item<int64_t>());
  }
  return out;
}

TEST(ImageFolderFiles, ListsClassesSortedAndFilesSortedWithTheirLabels) {
  ScopedTempDir dir("image_folder_files_test");
  const fs::path root = dir.path();
  touch(root / "dog" / "b.png");
  touch(root / "dog" / "a.JPG");      // extensions compare without case
  touch(root / "dog" / "notes.txt");  // not an image: ignored
  touch(root / "cat" / "z.jpeg");
  touch(root / "cat" / "sub" / "y.png");         // sub-folders of a class are walked
  touch(root / "cat" / ".hidden.png");           // hidden: ignored
  touch(root / ".ipynb_checkpoints" / "c.png");  // a hidden folder is not a class
  touch(root / "readme.png");                    // directly in the root: not in a class
  ImageFolderFiles ds(root.string());
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ds.class_to_idx(), (std::map<std::string, int64_t>{{"cat", 0}, {"dog", 1}}));
  ASSERT_EQ(ds.size(), 4);
  ds.reset_state();
  ds.begin_pass();
  using Row = std::pair<std::string, int64_t>;
  EXPECT_EQ(read_pass(ds, root),
            (std::vector<Row>{
                {"cat/sub/y.png", 0}, {"cat/z.jpeg", 0}, {"dog/a.JPG", 1}, {"dog/b.png", 1}}));
  EXPECT_EQ(ds.describe(), "ImageFolderFiles(" + root.string() + ": 4 files, 2 classes)");
}

TEST(ImageFolderFiles, ShuffledPassesFollowPassOrderAndSeekContinuesExactly) {
  ScopedTempDir dir("image_folder_files_test");
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 7; ++i)
      touch(dir.path() / ("c" + std::to_string(c)) / (std::to_string(i) + ".png"));
  }
  ImageFolderFiles ds(dir.path().string(), ImageFolderFilesOptions().shuffle(true).seed(11));
  EXPECT_EQ(ds.order_of_pass(2), pass_order(21, true, 11, 2));
  EXPECT_NE(ds.order_of_pass(0), ds.order_of_pass(1));
  ds.begin_pass(2);
  const auto whole = read_pass(ds, dir.path());
  ASSERT_EQ(whole.size(), 21u);
  for (size_t i = 0; i < whole.size(); ++i) {
    const int64_t file = ds.order_of_pass(2)[i];
    EXPECT_EQ(whole[i].first, fs::path(ds.path(file)).lexically_relative(dir.path()).string());
    EXPECT_EQ(whole[i].second, file / 7);  // 7 files a class, classes in order
  }
  // A resumed run: pass 2 again, seeked to 9.
  ImageFolderFiles resumed(dir.path().string(), ImageFolderFilesOptions().shuffle(true).seed(11));
  resumed.begin_pass(2);
  resumed.seek(9);
  const auto rest = read_pass(resumed, dir.path());
  using Rows = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(rest, Rows(whole.begin() + 9, whole.end()));
  EXPECT_THROW(resumed.seek(22), std::out_of_range);
}

TEST(ImageFolderFiles, ValidationUsesTheTrainingClassList) {
  ScopedTempDir dir("image_folder_files_test");
  for (const char* c : {"ant", "bee", "cow"}) touch(dir.path() / "train" / c / "1.png");
  touch(dir.path() / "val" / "cow" / "1.png");  // only one class in validation
  ImageFolderFiles train((dir.path() / "train").string());
  ImageFolderFiles val((dir.path() / "val").string(),
                       ImageFolderFilesOptions().classes(train.classes()));
  EXPECT_EQ(val.classes(), train.classes());
  val.begin_pass();
  EXPECT_EQ(val.next()->at(1).item<int64_t>(), 2);  // cow's label in training, not 0
}

TEST(ImageFolderFiles, AClassTheListLacksIsAnError) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "ant" / "1.png");
  touch(dir.path() / "emu" / "1.png");
  EXPECT_EQ(
      message_of([&] {
        ImageFolderFiles(dir.path().string(), ImageFolderFilesOptions().classes({"ant", "bee"}));
      }),
      "ImageFolderFiles: the class folder '" + (dir.path() / "emu").string() +
          "' is not in the class list given (2 classes: ant, bee); labels come from that "
          "list (the training folder's), so a class it lacks has no label: remove the "
          "folder, or train with it");
  EXPECT_EQ(message_of([&] {
              ImageFolderFiles(dir.path().string(),
                               ImageFolderFilesOptions().classes({"ant", "emu", "ant"}));
            }),
            "ImageFolderFiles: `classes` names 'ant' twice; each class once");
}

TEST(ImageFolderFiles, AMissingRootOrAFileAsRootIsNamed) {
  ScopedTempDir dir("image_folder_files_test");
  const fs::path missing = dir.path() / "nope";
  EXPECT_EQ(message_of([&] { ImageFolderFiles(missing.string()); }),
            "ImageFolderFiles: the root '" + missing.string() +
                "' does not exist; pass the folder that holds one sub-folder per class "
                "(root/<class>/<image>)");
  touch(dir.path() / "file.png");
  EXPECT_EQ(message_of([&] { ImageFolderFiles((dir.path() / "file.png").string()); }),
            "ImageFolderFiles: the root '" + (dir.path() / "file.png").string() +
                "' is not a folder; pass the folder that holds one sub-folder per class "
                "(root/<class>/<image>)");
}

TEST(ImageFolderFiles, ARootWithoutClassFoldersIsNamed) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "a.png");
  EXPECT_EQ(message_of([&] { ImageFolderFiles(dir.path().string()); }),
            "ImageFolderFiles: the root '" + dir.path().string() +
                "' has no class folder; images go in root/<class>/<image>, one sub-folder per "
                "class (files directly in the root are not read)");
}

TEST(ImageFolderFiles, AnEmptyClassIsNamedWithTheExtensions) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "ant" / "1.png");
  touch(dir.path() / "bee" / "1.gif");
  EXPECT_EQ(message_of([&] { ImageFolderFiles(dir.path().string()); }),
            "ImageFolderFiles: the class folder '" + (dir.path() / "bee").string() +
                "' holds no image (files ending in .jpg, .jpeg, .png); add images, remove the "
                "folder, or pass other `extensions`");
  // With .gif accepted, it lists.
  EXPECT_EQ(
      ImageFolderFiles(dir.path().string(), ImageFolderFilesOptions().extensions({".png", ".GIF"}))
          .size(),
      2);
}

TEST(ImageFolderFiles, ASymlinkLoopIsNamedNotWalkedForever) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "ant" / "1.png");
  fs::create_directory_symlink(dir.path() / "ant", dir.path() / "ant" / "again");
  EXPECT_EQ(message_of([&] { ImageFolderFiles(dir.path().string()); }),
            "ImageFolderFiles: symbolic link loop: '" + (dir.path() / "ant" / "again").string() +
                "' points to '" + (dir.path() / "ant").string() +
                "', a folder that contains it; remove the link, or make it point outside the "
                "image folder");
  // A link to the root as a class folder.
  fs::remove(dir.path() / "ant" / "again");
  fs::create_directory_symlink(dir.path(), dir.path() / "root_again");
  EXPECT_EQ(message_of([&] { ImageFolderFiles(dir.path().string()); }),
            "ImageFolderFiles: symbolic link loop: the class folder '" +
                (dir.path() / "root_again").string() + "' is the root itself; remove the link");
}

TEST(ImageFolderFiles, LinksOutsideTheFolderAreFollowed) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "elsewhere" / "x.png");
  touch(dir.path() / "data" / "ant" / "1.png");
  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "data" / "ant" / "more");
  fs::create_directory_symlink(dir.path() / "elsewhere", dir.path() / "data" / "bee");
  ImageFolderFiles ds((dir.path() / "data").string());
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"ant", "bee"}));
}

TEST(ImageFolderFiles, AnUnreadableClassFolderSaysWhy) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to read as another user in a child";
  ScopedTempDir dir("image_folder_files_test");
  fs::permissions(dir.path(), fs::perms::all);
  touch(dir.path() / "ant" / "1.png");
  touch(dir.path() / "bee" / "1.png");
  fs::permissions(dir.path() / "ant", fs::perms::all);
  fs::permissions(dir.path() / "bee", fs::perms::owner_all);  // root only
  EXPECT_EQ(testing::message_as_nobody([&] { ImageFolderFiles(dir.path().string()); }),
            "ImageFolderFiles: cannot read the folder '" + (dir.path() / "bee").string() +
                "': Permission denied; make it readable by this user (or move it out of the "
                "image folder)");
}

TEST(ImageFolderFiles, PathOutOfRangeIsNamed) {
  ScopedTempDir dir("image_folder_files_test");
  touch(dir.path() / "ant" / "1.png");
  ImageFolderFiles ds(dir.path().string());
  EXPECT_THROW(ds.path(1), std::out_of_range);
  EXPECT_THROW(ds.path(-1), std::out_of_range);
  EXPECT_EQ(ds.path(0), (dir.path() / "ant" / "1.png").string());
}

}  // namespace image_folder_files_test
}  // namespace trainpack
