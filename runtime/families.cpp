// The list of kernel families: the one place above the families that names them all.
#include "runtime/kernel_registry.hpp"
#include "runtime/ops/dsa_indexer.hpp"
#include "runtime/ops/glue.hpp"
#include "runtime/ops/grouped.hpp"
#include "runtime/ops/indexed.hpp"
#include "runtime/ops/sparse_mla.hpp"
#include "runtime/ops/w4a16.hpp"
#include "runtime/ops/warp_decode.hpp"

namespace chordrt {

std::span<const KernelFamily* const> kernel_families() {
  static const KernelFamily* const kFamilies[] = {&ops::MoeAlignFamily::family(),
                                                  &ops::SiluAndMulFamily::family(),
                                                  &ops::MoeCombineFamily::family(),
                                                  &ops::WarpDecodeGateUpFamily::family(),
                                                  &ops::WarpDecodeDownFamily::family(),
                                                  &ops::W4a16PackFamily::family(),
                                                  &ops::GroupedGemmFamily::family(),
                                                  &ops::IndexedPrefillFamily::family(),
                                                  &ops::IndexedDecodeFamily::family(),
                                                  &ops::SparseMlaCacheWriteFamily::family(),
                                                  &ops::SparseMlaDecodeFamily::family(),
                                                  &ops::SparseMlaCombineFamily::family(),
                                                  &ops::DsaIndexerCacheWriteFamily::family(),
                                                  &ops::DsaIndexerLogitsFamily::family(),
                                                  &ops::DsaIndexerTopkFamily::family()};
  return kFamilies;
}

}  // namespace chordrt

namespace chordrt {

std::span<const FamilyPlanner> family_planners() {
  static const FamilyPlanner kPlanners[] = {&ops::plan_glue,    &ops::plan_warp_decode, &ops::plan_indexed,
                                            &ops::plan_grouped, &ops::plan_sparse_mla,  &ops::plan_dsa_indexer};
  return kPlanners;
}

}  // namespace chordrt
