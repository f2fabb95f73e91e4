# find_package(Torch REQUIRED), with three guards that LibTorch's own CMake package lacks. Included
# by trainpack's CMakeLists.txt and, installed as trainpackFindTorch.cmake, by trainpackConfig.cmake.
#
# 1. A CUDA build of LibTorch (PyTorch's pip wheel, pytorch.org's CUDA archives) runs nvcc inside
#    its package at configure time, with or without a GPU. Without a CUDA toolkit it stops with
#    "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries"; here the
#    error says what is missing and the two ways out.
# 2. Its find_library calls for libtorch and libc10, and its find_package(Caffe2 PATHS ...), search
#    the system's directories before the LibTorch's own. With Debian's libtorch-dev also
#    installed, pip's package would link Debian's libtorch.so, libc10.so and torch_cpu targets
#    (1.13) under its own headers (seen whenever CMAKE_PREFIX_PATH did not name the wheel, as in
#    a project that finds the installed trainpack). The LibTorch's own Caffe2 package and lib/
#    are taken first, and a library or package found anywhere else is refused.
# 3. A wheel's libraries find their CUDA dependencies (cuDNN, NCCL, cuBLAS, the CUDA runtime) in
#    the nvidia-* wheels beside it, through their own RPATH, at run time; the linker does not look
#    there, and takes the CUDA toolkit's instead, which may be older than the wheel's (NCCL lacked
#    11 symbols of torch 2.15's libtorch_cuda.so here). The nvidia-* wheels' lib/ directories are
#    given to every program linked to torch, for the link (-rpath-link) and first in its RPATH, so
#    that it runs with the CUDA libraries that the wheel was built and tested with.
#
# The LibTorch is the one find_package would take: Torch_DIR, else CMAKE_PREFIX_PATH's
# <prefix>/Torch or <prefix>/share/cmake/Torch, else TRAINPACK_TORCH_HINT (the installed
# package's), else the system's (Debian's; no guard needed there).
set(_tp_torch_dir "")
set(_tp_candidates "")
if(Torch_DIR)
  list(APPEND _tp_candidates "${Torch_DIR}")
endif()
foreach(_tp_prefix IN LISTS CMAKE_PREFIX_PATH)
  list(APPEND _tp_candidates "${_tp_prefix}/Torch" "${_tp_prefix}/share/cmake/Torch")
endforeach()
if(TRAINPACK_TORCH_HINT)
  list(APPEND _tp_candidates "${TRAINPACK_TORCH_HINT}")
endif()
foreach(_tp_dir IN LISTS _tp_candidates)
  if(NOT _tp_torch_dir AND EXISTS "${_tp_dir}/TorchConfig.cmake")
    get_filename_component(_tp_torch_dir "${_tp_dir}" ABSOLUTE)
  endif()
endforeach()

set(_tp_torch_lib_dir "")
set(_tp_caffe2_dir "")
if(_tp_torch_dir)
  # <root>/share/cmake/Torch -> <root>/lib (pip's wheel, pytorch.org's archive, a source build).
  get_filename_component(_tp_torch_root "${_tp_torch_dir}/../../.." ABSOLUTE)
  if(EXISTS "${_tp_torch_root}/lib")
    set(_tp_torch_lib_dir "${_tp_torch_root}/lib")
  endif()
  if(EXISTS "${_tp_torch_dir}/../Caffe2/Caffe2Config.cmake")
    get_filename_component(_tp_caffe2_dir "${_tp_torch_dir}/../Caffe2" ABSOLUTE)
    file(STRINGS "${_tp_caffe2_dir}/Caffe2Config.cmake" _tp_uses_cuda REGEX "^[ \t]*set\\(CAFFE2_USE_CUDA ON\\)")
    if(_tp_uses_cuda AND NOT CMAKE_CUDA_COMPILER)
      find_program(_tp_nvcc nvcc
        HINTS "${CUDA_TOOLKIT_ROOT_DIR}/bin" ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda/bin)
      if(NOT _tp_nvcc)
        message(FATAL_ERROR
          "trainpack: the LibTorch in ${_tp_torch_root} is a CUDA build, and its CMake package "
          "needs the CUDA toolkit's nvcc (12.0 or later) at configure time, even without a GPU; "
          "no nvcc was found (CMAKE_CUDA_COMPILER, PATH, CUDA_HOME, /usr/local/cuda/bin). Two "
          "ways out:\n"
          "  1. install the CUDA toolkit (NVIDIA's cuda-toolkit, or Debian's "
          "nvidia-cuda-toolkit), or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc;\n"
          "  2. build against a CPU LibTorch: Debian's libtorch-dev (bash scripts/setup.sh), or "
          "pip's CPU wheel (pip install torch --index-url https://download.pytorch.org/whl/cpu).")
      endif()
      set(CMAKE_CUDA_COMPILER "${_tp_nvcc}" CACHE FILEPATH "nvcc, for LibTorch's CMake package")
    endif()
  endif()
endif()

if(_tp_torch_lib_dir)
  set(_tp_saved_library_path "${CMAKE_LIBRARY_PATH}")
  list(PREPEND CMAKE_LIBRARY_PATH "${_tp_torch_lib_dir}")
endif()
if(_tp_torch_dir AND NOT Torch_DIR)
  set(Torch_DIR "${_tp_torch_dir}" CACHE PATH "LibTorch's CMake package" FORCE)
endif()
if(_tp_caffe2_dir AND NOT Caffe2_DIR)
  set(Caffe2_DIR "${_tp_caffe2_dir}" CACHE PATH "LibTorch's Caffe2 package" FORCE)
endif()
find_package(Torch REQUIRED)

# _tp_require_own(WHAT FOUND_DIR OWN_DIR FIX): FOUND_DIR must be OWN_DIR (after symbolic links).
macro(_tp_require_own what found_dir own_dir fix)
  get_filename_component(_tp_found_real "${found_dir}" REALPATH)
  get_filename_component(_tp_own_real "${own_dir}" REALPATH)
  if(NOT _tp_found_real STREQUAL _tp_own_real)
    message(FATAL_ERROR
      "trainpack: LibTorch's package in ${_tp_torch_dir} took ${what}, which is not its own "
      "(${own_dir}): two LibTorches would be mixed. Configure a fresh build directory, or pass "
      "${fix}.")
  endif()
endmacro()
if(_tp_caffe2_dir)
  _tp_require_own("the Caffe2 package in ${Caffe2_DIR}" "${Caffe2_DIR}" "${_tp_caffe2_dir}"
                  "-DCaffe2_DIR=${_tp_caffe2_dir}")
endif()
if(_tp_torch_lib_dir)
  set(CMAKE_LIBRARY_PATH "${_tp_saved_library_path}")
  foreach(_tp_var TORCH_LIBRARY c10_LIBRARY)
    if(${_tp_var})
      get_filename_component(_tp_found_dir "${${_tp_var}}" DIRECTORY)
      _tp_require_own("${_tp_var}=${${_tp_var}}" "${_tp_found_dir}" "${_tp_torch_lib_dir}"
                      "-D${_tp_var}=${_tp_torch_lib_dir}/<its file>")
    endif()
  endforeach()

  get_filename_component(_tp_site_packages "${_tp_torch_root}/.." ABSOLUTE)
  file(GLOB _tp_nvidia_lib_dirs LIST_DIRECTORIES true "${_tp_site_packages}/nvidia/*/lib")
  if(_tp_nvidia_lib_dirs)
    string(REPLACE ";" ":" _tp_nvidia_path "${_tp_nvidia_lib_dirs}")
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS
      "LINKER:-rpath-link,${_tp_nvidia_path}" "LINKER:-rpath,${_tp_nvidia_path}")
    message(STATUS "trainpack: the nvidia-* wheels' libraries come first at link and run time: "
                   "${_tp_nvidia_path}")
  endif()
endif()
foreach(_tp_var _tp_caffe2_dir _tp_site_packages _tp_nvidia_lib_dirs _tp_nvidia_path _tp_torch_dir
                _tp_candidates _tp_torch_lib_dir _tp_torch_root _tp_uses_cuda
                _tp_saved_library_path _tp_found_dir _tp_found_real _tp_own_real _tp_dir
                _tp_prefix)
  unset(${_tp_var})
endforeach()
