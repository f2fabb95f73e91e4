#include "trainpack/utils/demangle.h"

#include <cstdlib>
#include <memory>

#if defined(__GNUG__)
#include <cxxabi.h>
#endif

namespace trainpack {

std::string type_name(const std::type_info& type) {
  std::string name = type.name();
#if defined(__GNUG__)
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  if (status == 0 && demangled) name = demangled.get();
#endif
  const std::string prefix = "trainpack::";
  if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  return name;
}

std::string class_name(const std::type_info& type) {
  const std::string full = type_name(type);
  const size_t template_start = full.find('<');
  const size_t last_scope = full.rfind("::", template_start);
  return last_scope == std::string::npos ? full : full.substr(last_scope + 2);
}

}  // namespace trainpack
