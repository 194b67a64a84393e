#include "runtime/tensor_map.hpp"

#include <fmt/format.h>

#include "runtime/driver.hpp"

namespace chordrt {

const CUtensorMap& tiled_tensor_map(const TiledTensorMapSpec& spec, const char* what) {
  struct Entry {
    TiledTensorMapSpec spec;
    CUtensorMap map{};
  };
  thread_local std::array<Entry, 16> entries;
  thread_local size_t next = 0;
  for (const Entry& e : entries) {
    if (e.spec.rank != 0 && e.spec == spec) return e.map;
  }
  Entry& e = entries[next++ % entries.size()];
  e.spec = {};  // a failed encoding leaves no entry behind
  const cuuint32_t element_strides[3] = {1, 1, 1};
  check_cuda(require_driver().cuTensorMapEncodeTiled(
                 &e.map, spec.type, spec.rank, const_cast<void*>(spec.address), spec.dims.data(), spec.strides.data(),
                 spec.box.data(), element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             fmt::format("cuTensorMapEncodeTiled ({})", what).c_str());
  e.spec = spec;
  return e.map;
}

}  // namespace chordrt
