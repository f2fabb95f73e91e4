// The readable name of a C++ type, used where tensorpack prints `str(obj)` (a class name).
#pragma once

#include <string>
#include <typeinfo>

namespace trainpack {

// The demangled name of `type`, with a leading `trainpack::` removed
// (`trainpack::ModelSaver` -> `ModelSaver`, `my::Saver` stays `my::Saver`).
std::string type_name(const std::type_info& type);

// The class name alone, without namespaces (`my::(anonymous namespace)::Saver<int>` ->
// `Saver<int>`), as Python prints a class name.
std::string class_name(const std::type_info& type);

}  // namespace trainpack
