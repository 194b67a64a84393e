# fmt, spdlog, xxHash, nlohmann-json, CLI11 and Catch2, all header-only through one interface target.
# Headers come from CHORD_DEPS_DIR (tools/fetch_deps.sh extracts Debian's packages there for machines
# without them) or else from the system.
find_package(Threads REQUIRED)

set(_chord_dep_headers fmt/format.h spdlog/spdlog.h xxhash.h nlohmann/json.hpp CLI/CLI.hpp catch2/catch.hpp)
set(CHORD_DEP_INCLUDE "")
foreach(h IN LISTS _chord_dep_headers)
  string(MAKE_C_IDENTIFIER "${h}" _var)
  find_path(CHORD_INC_${_var} NAMES ${h} HINTS "${CHORD_DEPS_DIR}" PATHS /usr/include NO_CACHE)
  if(NOT CHORD_INC_${_var})
    message(FATAL_ERROR "chordrt: header <${h}> not found. On Debian: apt-get install libfmt-dev "
      "libspdlog-dev libxxhash-dev nlohmann-json3-dev libcli11-dev catch2, or run tools/fetch_deps.sh.")
  endif()
  list(APPEND CHORD_DEP_INCLUDE "${CHORD_INC_${_var}}")
endforeach()
list(REMOVE_DUPLICATES CHORD_DEP_INCLUDE)
message(STATUS "chordrt: third-party headers from ${CHORD_DEP_INCLUDE}")

# The CUDA driver/NVRTC headers provide types only; nothing links against them.
file(GLOB _chord_cuda_versioned LIST_DIRECTORIES true /usr/local/cuda-*/include)
find_path(CHORD_CUDA_INCLUDE NAMES cuda.h
  HINTS "$ENV{CUDA_HOME}/include" "$ENV{CUDA_PATH}/include" /usr/local/cuda/include ${_chord_cuda_versioned}
  NO_CACHE)
if(NOT CHORD_CUDA_INCLUDE)
  message(FATAL_ERROR "chordrt: cuda.h not found; install a CUDA toolkit (>= 12.8) or set CUDA_HOME")
endif()

add_library(chord_deps INTERFACE)
add_library(chord::deps ALIAS chord_deps)
target_include_directories(chord_deps SYSTEM INTERFACE
  $<BUILD_INTERFACE:${CHORD_DEP_INCLUDE}> $<BUILD_INTERFACE:${CHORD_CUDA_INCLUDE}>)
target_compile_definitions(chord_deps INTERFACE FMT_HEADER_ONLY=1 SPDLOG_HEADER_ONLY=1
  SPDLOG_FMT_EXTERNAL=1 XXH_INLINE_ALL=1)
