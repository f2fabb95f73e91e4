// Where a callback or monitor writes its files: the directory it was given, else the logger
// directory. One function for all of them (TFEventWriter, JSONWriter, ModelSaver, MinSaver,
// DumpTensors, DumpTensorAsImage, HumanHyperParamSetter), so that the rule and the error are the
// same everywhere: std::invalid_argument("DumpTensors: no directory was given and the logger
// directory is not set; pass one with DumpTensorsOptions().dir(dir), or call
// trainpack::logger::set_logger_dir(dir) first").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trainpack {

// `given` when it has a value (as it is, even empty: a caller that rejects an empty directory
// checks it first), else the logger directory (normalised, see logger::get_logger_dir), else
// nullopt.
std::optional<std::string> output_dir_or_logger_dir(const std::optional<std::string>& given);

// The message above: `who` names the class, `option` how to give a directory; an empty `option`
// leaves out "no directory was given" and "pass one with ...".
std::string missing_output_dir_message(std::string_view who, std::string_view option);

// output_dir_or_logger_dir(given), or std::invalid_argument(missing_output_dir_message(...)).
std::string resolve_output_dir(const std::optional<std::string>& given, std::string_view who,
                               std::string_view option);

}  // namespace trainpack
