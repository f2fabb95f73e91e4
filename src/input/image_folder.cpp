#include "trainpack/input/image_folder.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "trainpack/input/parallel_map.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

// The map function of an ImageFolder: {file index, label} at (pass, position) -> {image, label}.
// It reads only what is immutable once the folder is listed (the file table, the options), and
// the atomic count, so any number of worker threads may call it at once.
MapData::ContextFunc image_folder_loader(std::shared_ptr<const ImageFolderFiles> files,
                                         ImageFolderOptions options,
                                         std::shared_ptr<std::atomic<int64_t>> skipped) {
  auto augmentors = std::make_shared<const AugmentorList>(options.augmentors());
  const bool augment = !options.augmentors().empty();
  return [files = std::move(files), options = std::move(options), skipped = std::move(skipped),
          augmentors = std::move(augmentors),
          augment](Datapoint dp, const MapContext& where) -> std::optional<Datapoint> {
    const std::string& path = files->path(dp[0].item<int64_t>());
    at::Tensor image;
    try {
      image = read_image(path, options.decode());
    } catch (const ImageDecodeError& e) {
      if (options.on_bad_image() == OnBadImage::kFail) throw;
      const int64_t count = ++*skipped;
      TP_LOG_WARN("ImageFolder: skipped {} ({} skipped so far): {}", path, count, e.what());
      return std::nullopt;
    }
    if (augment) {
      AugmentRng rng(options.seed(), where.pass, where.position);
      image = augmentors->augment(image, rng);
    }
    return Datapoint{std::move(image), std::move(dp[1])};
  };
}

}  // namespace

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options)
    : options_(std::move(options)), skipped_(std::make_shared<std::atomic<int64_t>>(0)) {
  if (options_.num_threads() < 0) {
    throw std::invalid_argument(
        fmt::format("ImageFolder: num_threads is {}; give 0 (decode on the calling thread) or more",
                    options_.num_threads()));
  }
  if (!options_.augmentors().empty() && options_.decode().layout() != ImageLayout::kCHW) {
    throw std::invalid_argument(
        "ImageFolder: the augmentors take [C,H,W] images, but `decode` asks for the HWC layout; "
        "leave the layout at ImageLayout::kCHW");
  }
  files_ =
      std::make_shared<ImageFolderFiles>(std::move(root), ImageFolderFilesOptions()
                                                              .extensions(options_.extensions())
                                                              .shuffle(options_.shuffle())
                                                              .seed(options_.seed())
                                                              .classes(options_.classes()));
  auto loader = image_folder_loader(files_, options_, skipped_);
  if (options_.num_threads() == 0) {
    mapped_ = std::make_shared<MapData>(files_, std::move(loader));
  } else {
    mapped_ =
        std::make_shared<MultiThreadMapData>(files_, options_.num_threads(), std::move(loader),
                                             MultiThreadMapDataOptions().buffer_size(std::max(
                                                 options_.buffer_size(), options_.num_threads())));
  }
}

ImageFolder::~ImageFolder() = default;

// Names what decides the datapoints (augmentors, skipping, the files and their order), not the
// threads: a checkpoint's position stays valid when only the number of threads changes.
std::string ImageFolder::describe() const {
  std::string augment;
  if (!options_.augmentors().empty()) {
    augment = "(" + AugmentorList(options_.augmentors()).describe_items() + ")";
  }
  return fmt::format("ImageFolder{}{} over {}", augment,
                     options_.on_bad_image() == OnBadImage::kSkip ? ", skipping bad images" : "",
                     files_->describe());
}

void ImageFolder::_seek(int64_t datapoints_consumed_in_this_pass) {
  if (options_.on_bad_image() == OnBadImage::kFail) {
    mapped_->seek(datapoints_consumed_in_this_pass);
    return;
  }
  // Which files fail is known only by decoding them: read the pass again up to the position.
  mapped_->begin_pass(pass());
  for (int64_t i = 0; i < datapoints_consumed_in_this_pass; ++i) {
    if (!mapped_->next()) {
      throw std::out_of_range(
          fmt::format("ImageFolder: seek to {} past the end of pass {}, which has {} images",
                      datapoints_consumed_in_this_pass, pass(), i));
    }
  }
}

}  // namespace trainpack
