# Reads the version of the LibTorch that find_package(Torch) found, from its torch/version.h
# (every LibTorch has it; not every package sets Torch_VERSION), and picks the C++ standard:
#   TRAINPACK_TORCH_VERSION    e.g. 2.14.1
#   TRAINPACK_CXX_STANDARD     17, or 20 from LibTorch 2.13 on (its ATen headers need C++20)
# A user may ask for a newer standard with -DCMAKE_CXX_STANDARD=20 (or 23); an older one than the
# LibTorch needs is refused here, with the reason.
set(_trainpack_version_header "")
foreach(_dir IN LISTS TORCH_INCLUDE_DIRS)
  foreach(_candidate torch/headeronly/version.h torch/csrc/api/include/torch/version.h
                     torch/version.h)
    if(NOT _trainpack_version_header AND EXISTS "${_dir}/${_candidate}")
      file(STRINGS "${_dir}/${_candidate}" _lines REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
      if(_lines)
        set(_trainpack_version_header "${_dir}/${_candidate}")
      endif()
    endif()
  endforeach()
endforeach()
if(NOT _trainpack_version_header)
  message(FATAL_ERROR "trainpack: cannot find LibTorch's torch/version.h under TORCH_INCLUDE_DIRS "
                      "(${TORCH_INCLUDE_DIRS}); is Torch_DIR a LibTorch's share/cmake/Torch?")
endif()
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "#define TORCH_VERSION_${_part} ([0-9]+)" _match "${_lines}")
  set(_torch_${_part} "${CMAKE_MATCH_1}")
endforeach()
set(TRAINPACK_TORCH_VERSION "${_torch_MAJOR}.${_torch_MINOR}.${_torch_PATCH}")
set(TRAINPACK_TORCH_VERSION_FOUND "${TRAINPACK_TORCH_VERSION}" CACHE INTERNAL
    "The LibTorch version of this build (scripts read it from CMakeCache.txt)")
if(TRAINPACK_TORCH_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "trainpack: LibTorch ${TRAINPACK_TORCH_VERSION} (${_trainpack_version_header}) "
                      "is older than 1.13, the oldest trainpack builds against: use a newer one "
                      "(pip install -U torch, or Debian 12's libtorch-dev)")
endif()

if(TRAINPACK_TORCH_VERSION VERSION_GREATER_EQUAL 2.13)
  set(_needed 20)
else()
  set(_needed 17)
endif()
if(DEFINED CMAKE_CXX_STANDARD AND NOT CMAKE_CXX_STANDARD STREQUAL "")
  if(CMAKE_CXX_STANDARD LESS _needed)
    message(FATAL_ERROR "trainpack: LibTorch ${TRAINPACK_TORCH_VERSION} needs C++${_needed}, but "
                        "CMAKE_CXX_STANDARD is ${CMAKE_CXX_STANDARD}: configure with "
                        "-DCMAKE_CXX_STANDARD=${_needed} (or leave it unset)")
  endif()
  set(TRAINPACK_CXX_STANDARD ${CMAKE_CXX_STANDARD})
else()
  set(TRAINPACK_CXX_STANDARD ${_needed})
endif()
message(STATUS "trainpack: LibTorch ${TRAINPACK_TORCH_VERSION} (${_trainpack_version_header}), "
               "C++${TRAINPACK_CXX_STANDARD}")
unset(_lines)
unset(_needed)
