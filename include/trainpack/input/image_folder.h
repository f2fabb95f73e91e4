// Images from a folder laid out as root/<class>/<image>, decoded and augmented on worker threads
// (torchvision's ImageFolder run by a DataLoader with workers; tensorpack's ILSVRC12 with
// AugmentImageComponent and MultiThreadMapData).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/input/dataflow.h"
#include "trainpack/input/image_folder_files.h"
#include "trainpack/input/imgaug.h"
#include "trainpack/utils/image_decode.h"

namespace trainpack {

// What ImageFolder does with a file that does not decode.
enum class OnBadImage {
  kFail,  // next() throws the file's ImageDecodeError (the default)
  kSkip,  // the file is left out of the pass, with a warning naming it; skipped() counts them
};

struct ImageFolderOptions {
  // As ImageFolderFilesOptions: accepted file endings, the shuffle, and the class list to label
  // with (training's classes(), for a validation folder).
  TORCH_ARG(std::vector<std::string>, extensions) = std::vector<std::string>{".jpg", ".jpeg",
                                                                             ".png"};
  TORCH_ARG(bool, shuffle) = false;
  // Decides the order of every pass (with shuffle) and every random draw of the augmentors.
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(std::vector<std::string>, classes) = {};
  // How files decode: channels (RGB by default), layout (augmentors need kCHW), pixel limit.
  TORCH_ARG(ImageDecodeOptions, decode) = {};
  // Applied in order to every decoded image; the file at position p of pass k draws from
  // AugmentRng(seed, k, p), so the result does not depend on threads or on a resume.
  TORCH_ARG(std::vector<ImageAugmentorPtr>, augmentors) = {};
  // Worker threads that decode and augment (MultiThreadMapData); 0 decodes on the thread that
  // calls next() (MapData).
  TORCH_ARG(int64_t, num_threads) = 1;
  // Files in flight at most with worker threads (MultiThreadMapData's buffer_size).
  TORCH_ARG(int64_t, buffer_size) = 64;
  TORCH_ARG(OnBadImage, on_bad_image) = OnBadImage::kFail;
};

// The images of root/<class>/<image> as datapoints {image, label int64 scalar}: the image is
// decoded (uint8, [C,H,W] by default) and then augmented (float32 after Normalize). The listing,
// class list and errors about the folder are ImageFolderFiles'; decoding and its errors are
// decode_image's. Passes are in ImageFolderFiles' order, kept whatever the number of threads.
//
// seek() is exact: with OnBadImage::kFail (the default) it is O(1); with kSkip, which files fail
// is known only by decoding them, so seek(n) reads the pass from its start again (on the worker
// threads, without returning it) until n images have been produced.
class ImageFolder : public DataFlow {
 public:
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});
  ~ImageFolder() override;

  std::string name() const override { return "ImageFolder"; }
  // "ImageFolder([ResizeShortestEdge(32), ...]) over ImageFolderFiles(...)": what decides the
  // datapoints, not the number of threads (a resume with other threads continues at the same
  // image).
  std::string describe() const override;
  void reset_state() override { mapped_->reset_state(); }
  // Files per pass (an upper bound with kSkip).
  std::optional<int64_t> size() const override { return files_->size(); }
  const DataFlow* first_unseekable() const override { return nullptr; }

  const ImageFolderFiles& files() const { return *files_; }
  const std::vector<std::string>& classes() const { return files_->classes(); }
  std::map<std::string, int64_t> class_to_idx() const { return files_->class_to_idx(); }
  // Files skipped as undecodable so far (kSkip), over every pass (a file skipped in two passes
  // counts twice).
  int64_t skipped() const { return skipped_->load(); }

 protected:
  void _begin_pass(int64_t pass) override { mapped_->begin_pass(pass); }
  std::optional<Datapoint> _next() override { return mapped_->next(); }
  void _seek(int64_t datapoints_consumed_in_this_pass) override;

 private:
  ImageFolderOptions options_;
  std::shared_ptr<ImageFolderFiles> files_;
  std::shared_ptr<std::atomic<int64_t>> skipped_;
  DataFlowPtr mapped_;  // MultiThreadMapData or MapData over files_
};

}  // namespace trainpack
