#include "trainpack/input/image_folder_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <utility>

#include <ATen/Functions.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainpack/input/pass_order.h"

namespace trainpack {

namespace {

namespace fs = std::filesystem;

// A folder's identity, to tell a symbolic link that leads back into a folder being walked.
using FolderId = std::pair<dev_t, ino_t>;

std::string folder_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool folder_has_extension(const std::string& file_name,
                          const std::vector<std::string>& lower_exts) {
  const std::string lower = folder_lower(file_name);
  for (const std::string& ext : lower_exts) {
    if (lower.size() > ext.size() &&
        lower.compare(lower.size() - ext.size(), ext.size(), ext) == 0) {
      return true;
    }
  }
  return false;
}

// Hidden entries (".ipynb_checkpoints", ".DS_Store") are neither classes nor images.
bool folder_is_hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

// The sorted, non-hidden entries of `dir`; std::runtime_error naming it when it cannot be read.
std::vector<fs::path> folder_entries(const fs::path& dir, const char* what) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  std::vector<fs::path> entries;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!folder_is_hidden(it->path())) entries.push_back(it->path());
  }
  if (ec) {
    throw std::runtime_error(fmt::format(
        "ImageFolderFiles: cannot read the {} '{}': {}; make it readable by this user (or move it "
        "out of the image folder)",
        what, dir.string(), ec.message()));
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

FolderId folder_id(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw std::runtime_error(
        fmt::format("ImageFolderFiles: cannot stat '{}': {}", dir.string(), std::strerror(errno)));
  }
  return {st.st_dev, st.st_ino};
}

// Appends the images under `dir` (walked depth first, sorted, links followed) to `out`.
// `walking` holds the folders from the class folder down to `dir`: a link to one of them is a
// loop.
void folder_walk(const fs::path& dir, const std::vector<std::string>& lower_exts,
                 std::vector<FolderId>& walking, std::vector<std::string>& out) {
  for (const fs::path& entry : folder_entries(dir, "folder")) {
    std::error_code ec;
    if (fs::is_directory(entry, ec)) {
      const FolderId id = folder_id(entry);
      if (std::find(walking.begin(), walking.end(), id) != walking.end()) {
        std::error_code link_ec;
        const fs::path target = fs::read_symlink(entry, link_ec);
        throw std::invalid_argument(fmt::format(
            "ImageFolderFiles: symbolic link loop: '{}' points to '{}', a folder that contains "
            "it; remove the link, or make it point outside the image folder",
            entry.string(), link_ec ? std::string("(unreadable)") : target.string()));
      }
      walking.push_back(id);
      folder_walk(entry, lower_exts, walking, out);
      walking.pop_back();
    } else if (folder_has_extension(entry.filename().string(), lower_exts)) {
      out.push_back(entry.string());
    }
  }
}

}  // namespace

ImageFolderFiles::ImageFolderFiles(std::string root, ImageFolderFilesOptions options)
    : root_(std::move(root)), options_(std::move(options)) {
  if (options_.extensions().empty()) {
    throw std::invalid_argument(
        "ImageFolderFiles: `extensions` is empty; name the image file endings, e.g. {\".png\"}");
  }
  std::vector<std::string> lower_exts;
  for (const std::string& ext : options_.extensions()) lower_exts.push_back(folder_lower(ext));

  std::error_code ec;
  const fs::file_status status = fs::status(root_, ec);
  if (!fs::exists(status)) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderFiles: the root '{}' does not exist; pass the folder that holds one "
        "sub-folder per class (root/<class>/<image>)",
        root_));
  }
  if (!fs::is_directory(status)) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderFiles: the root '{}' is not a folder; pass the folder that holds one "
        "sub-folder per class (root/<class>/<image>)",
        root_));
  }

  std::vector<fs::path> class_dirs;
  for (const fs::path& entry : folder_entries(root_, "image folder")) {
    if (fs::is_directory(entry, ec)) class_dirs.push_back(entry);
  }
  if (class_dirs.empty()) {
    throw std::invalid_argument(fmt::format(
        "ImageFolderFiles: the root '{}' has no class folder; images go in root/<class>/<image>, "
        "one sub-folder per class (files directly in the root are not read)",
        root_));
  }

  std::map<std::string, int64_t> label_of;
  if (options_.classes().empty()) {
    for (const fs::path& dir : class_dirs) classes_.push_back(dir.filename().string());
  } else {
    classes_ = options_.classes();
    std::set<std::string> seen;
    for (const std::string& name : classes_) {
      if (!seen.insert(name).second) {
        throw std::invalid_argument(
            fmt::format("ImageFolderFiles: `classes` names '{}' twice; each class once", name));
      }
    }
  }
  for (size_t i = 0; i < classes_.size(); ++i) label_of[classes_[i]] = static_cast<int64_t>(i);

  const FolderId root_id = folder_id(root_);
  for (const fs::path& dir : class_dirs) {
    const std::string class_name = dir.filename().string();
    const auto label = label_of.find(class_name);
    if (label == label_of.end()) {
      throw std::invalid_argument(fmt::format(
          "ImageFolderFiles: the class folder '{}' is not in the class list given ({} classes: "
          "{}); labels come from that list (the training folder's), so a class it lacks has no "
          "label: remove the folder, or train with it",
          dir.string(), classes_.size(), fmt::join(classes_, ", ")));
    }
    std::vector<FolderId> walking{root_id, folder_id(dir)};
    if (walking[1] == root_id) {
      throw std::invalid_argument(fmt::format(
          "ImageFolderFiles: symbolic link loop: the class folder '{}' is the root itself; "
          "remove the link",
          dir.string()));
    }
    std::vector<std::string> paths;
    folder_walk(dir, lower_exts, walking, paths);
    if (paths.empty()) {
      throw std::invalid_argument(fmt::format(
          "ImageFolderFiles: the class folder '{}' holds no image (files ending in {}); add "
          "images, remove the folder, or pass other `extensions`",
          dir.string(), fmt::join(options_.extensions(), ", ")));
    }
    for (std::string& path : paths) files_.push_back(File{std::move(path), label->second});
  }
}

std::string ImageFolderFiles::describe() const {
  return fmt::format(
      "ImageFolderFiles({}: {} files, {} classes{})", root_, files_.size(), classes_.size(),
      options_.shuffle() ? fmt::format(", shuffled with seed {}", options_.seed()) : std::string());
}

std::map<std::string, int64_t> ImageFolderFiles::class_to_idx() const {
  std::map<std::string, int64_t> result;
  for (size_t i = 0; i < classes_.size(); ++i) result[classes_[i]] = static_cast<int64_t>(i);
  return result;
}

const std::string& ImageFolderFiles::path(int64_t index) const {
  if (index < 0 || static_cast<uint64_t>(index) >= files_.size()) {
    throw std::out_of_range(fmt::format("ImageFolderFiles: file index {} is not in 0..{} ({})",
                                        index, static_cast<int64_t>(files_.size()) - 1, root_));
  }
  return files_[static_cast<size_t>(index)].path;
}

std::vector<int64_t> ImageFolderFiles::order_of_pass(int64_t pass) const {
  return pass_order(static_cast<int64_t>(files_.size()), options_.shuffle(), options_.seed(), pass);
}

void ImageFolderFiles::_begin_pass(int64_t pass) {
  order_ = order_of_pass(pass);
  index_ = 0;
}

std::optional<Datapoint> ImageFolderFiles::_next() {
  if (index_ >= order_.size()) return std::nullopt;
  const int64_t file = order_[index_++];
  return Datapoint{at::scalar_tensor(file, at::kLong),
                   at::scalar_tensor(files_[static_cast<size_t>(file)].label, at::kLong)};
}

void ImageFolderFiles::_seek(int64_t datapoints_consumed_in_this_pass) {
  if (static_cast<uint64_t>(datapoints_consumed_in_this_pass) > order_.size()) {
    throw std::out_of_range(fmt::format("ImageFolderFiles: seek to {} past the end of a pass of {}",
                                        datapoints_consumed_in_this_pass, order_.size()));
  }
  index_ = static_cast<size_t>(datapoints_consumed_in_this_pass);
}

}  // namespace trainpack
