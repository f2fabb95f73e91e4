// The files of an image folder laid out as root/<class>/<image> (torchvision's ImageFolder and
// tensorpack's ILSVRC12 layout), as a dataflow of {file index, label}.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/input/dataflow.h"

namespace trainpack {

struct ImageFolderFilesOptions {
  // The file name endings that count as images, compared without regard to case; other files
  // are ignored.
  TORCH_ARG(std::vector<std::string>, extensions) = std::vector<std::string>{".jpg", ".jpeg",
                                                                             ".png"};
  // Shuffle every pass; the order of pass k is pass_order(size, true, seed, k).
  TORCH_ARG(bool, shuffle) = false;
  TORCH_ARG(uint64_t, seed) = 0;
  // The class list that labels are indices into (training's classes(), for a validation
  // folder). Empty: the folder's own class folders, sorted by name. With a list, a class folder
  // that is not in it is std::invalid_argument naming it (labels would shift silently otherwise);
  // a class of the list without a folder is allowed (it has no images here).
  TORCH_ARG(std::vector<std::string>, classes) = {};
};

// The image files under `root`, one sub-folder per class (tensorpack's ILSVRC12Files, the
// listing half of torchvision's ImageFolder). The listing is made once, at construction: class
// folders sorted by name, and in each the files with an accepted extension found by walking it
// (sub-folders included, symbolic links followed), sorted by their path relative to the class
// folder. Every pass yields each file once, as {file index int64 scalar, label int64 scalar};
// path(index) is the file. seek() is O(1), so a resumed run continues at the exact file.
//
// A datapoint holds tensors only: what is not a tensor (a path, a class name) rides as an index
// into the tables this flow owns (files(), classes()); they are immutable after construction, so
// worker threads may read them while the flow is iterated.
//
// Errors, at construction, each naming the path and what to do: std::invalid_argument for a root
// that does not exist or is not a folder, a root with no class folder, a class folder without an
// image (with the accepted extensions), a class folder missing from `classes`, a symbolic link
// loop (the link and where it points); std::runtime_error for a folder that cannot be read (the
// system's reason).
class ImageFolderFiles : public DataFlow {
 public:
  struct File {
    std::string path;  // root/<class>/<...>/<name>
    int64_t label;     // index into classes()
  };

  explicit ImageFolderFiles(std::string root, ImageFolderFilesOptions options = {});

  std::string name() const override { return "ImageFolderFiles"; }
  // "ImageFolderFiles(/data/train: 2000 files, 4 classes, shuffled with seed 7)".
  std::string describe() const override;
  std::optional<int64_t> size() const override { return static_cast<int64_t>(files_.size()); }
  const DataFlow* first_unseekable() const override { return nullptr; }

  const std::string& root() const { return root_; }
  // The class names; a label is an index into this list.
  const std::vector<std::string>& classes() const { return classes_; }
  // Name -> label (torchvision's class_to_idx).
  std::map<std::string, int64_t> class_to_idx() const;
  const std::vector<File>& files() const { return files_; }
  // The file at `index` (a datapoint's first component); std::out_of_range past the end.
  const std::string& path(int64_t index) const;
  // The order of pass `pass` as indices into files().
  std::vector<int64_t> order_of_pass(int64_t pass) const;

 protected:
  void _begin_pass(int64_t pass) override;
  std::optional<Datapoint> _next() override;
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  std::string root_;
  ImageFolderFilesOptions options_;
  std::vector<std::string> classes_;
  std::vector<File> files_;
  std::vector<int64_t> order_;
  size_t index_ = 0;
};

}  // namespace trainpack
