"""chordrt: Python binding (ctypes) of the chordrt JIT kernel runtime's C ABI (chordrt.h).

    import chordrt
    chordrt.version()                       # (0, 1, 0)
    chordrt.runtime_info()                  # driver / NVRTC / cache state
    chordrt.prewarm_model("kimi-k2", "ep8") # compile a deployment's kernels into the disk cache
    sorted_ids, expert_ids, n = chordrt.moe_align(topk_ids, num_experts=384, block_size=64)  # torch
    w = chordrt.w4a16_pack(weight_packed, weight_scale, chordrt.W4a16Layout.WGMMA_K128)     # W4A16 MoE
    out = chordrt.grouped_masked(a, w, masked_m, expected_m=16)
    w = chordrt.w4a16_pack(weight_packed, weight_scale, chordrt.W4a16Layout.MMA)            # vLLM routing
    out = chordrt.indexed_gemm(a, w, sorted_ids, expert_ids, n, top_k=8, block_m=16)
    logits = chordrt.dsa_indexer_logits(q, weights, cache, block_table, context_lens, page_size=64)  # DSA
    indices = chordrt.dsa_topk(logits, context_lens, 2048, block_table=block_table, page_size=64)
    chordrt.mla_cache_write(kv, slot_mapping, cache)                          # sparse MLA
    out, lse = chordrt.sparse_mla_decode(q, cache, indices, softmax_scale)

The shared library is found through $CHORDRT_LIBRARY, else the repository's build trees
(<repo>/build*/libchordrt.so, newest first), else ctypes.util.find_library("chordrt"); it is loaded on
first use. Failures raise ChordError (.status: Status, .message: chord_last_error()). torch is optional:
operations take torch tensors or raw integer device pointers with explicit sizes.
"""

from ._core import (
    ABI_VERSION,
    ENV_LIBRARY,
    FUNCTIONS,
    STRUCTS,
    ChordError,
    LibraryNotFoundError,
    Status,
    last_error,
    lib,
    library_candidates,
    library_path,
    status_string,
)
from ._runtime import PrewarmSummary, RuntimeInfo, abi_version, prewarm_model, runtime_info, version
from ._glue import (
    MoeAlignArgs,
    MoeCombineArgs,
    SiluAndMulArgs,
    moe_align,
    moe_align_expert_ids_capacity,
    moe_align_sorted_capacity,
    moe_combine,
    silu_and_mul,
)
from ._w4a16 import W4a16Layout, W4a16PackArgs, W4a16PackedWeight, W4a16Weight, w4a16_pack, w4a16_weight_sizes
from ._grouped import (GroupedContiguousArgs, GroupedMaskedArgs, grouped_contiguous, grouped_workspace_size,
                       grouped_masked)
from ._indexed import IndexedArgs, IndexedProfile, indexed_block_m, indexed_gemm, indexed_gemm_workspace_size
from ._warp_decode import WarpDecodeMoeArgs, WeightFormat, warp_decode_moe, warp_decode_moe_workspace_size
from ._moe_decode_path import MoeDecodePath, MoeShape, moe_decode_path
from ._sparse_mla import (
    MlaCacheFormat,
    MlaCacheWriteArgs,
    SparseMlaDecodeArgs,
    mla_cache_record_bytes,
    mla_cache_write,
    sparse_mla_decode,
    sparse_mla_decode_workspace_size,
)
from ._dsa_indexer import (
    DsaIndexerArgs,
    DsaTopkArgs,
    IndexerCacheWriteArgs,
    dsa_indexer_logits,
    dsa_topk,
    indexer_cache_page_bytes,
    indexer_cache_write,
)

__all__ = [
    "ABI_VERSION",
    "ENV_LIBRARY",
    "FUNCTIONS",
    "STRUCTS",
    "ChordError",
    "DsaIndexerArgs",
    "DsaTopkArgs",
    "GroupedContiguousArgs",
    "GroupedMaskedArgs",
    "IndexedArgs",
    "IndexedProfile",
    "IndexerCacheWriteArgs",
    "LibraryNotFoundError",
    "MlaCacheFormat",
    "MlaCacheWriteArgs",
    "MoeAlignArgs",
    "MoeCombineArgs",
    "PrewarmSummary",
    "RuntimeInfo",
    "SiluAndMulArgs",
    "SparseMlaDecodeArgs",
    "Status",
    "W4a16Layout",
    "W4a16PackArgs",
    "W4a16PackedWeight",
    "W4a16Weight",
    "WarpDecodeMoeArgs",
    "WeightFormat",
    "MoeDecodePath",
    "MoeShape",
    "abi_version",
    "dsa_indexer_logits",
    "dsa_topk",
    "grouped_contiguous",
    "grouped_workspace_size",
    "grouped_masked",
    "indexed_block_m",
    "indexed_gemm",
    "indexed_gemm_workspace_size",
    "moe_decode_path",
    "indexer_cache_page_bytes",
    "indexer_cache_write",
    "last_error",
    "lib",
    "library_candidates",
    "library_path",
    "mla_cache_record_bytes",
    "mla_cache_write",
    "moe_align",
    "moe_align_expert_ids_capacity",
    "moe_align_sorted_capacity",
    "moe_combine",
    "prewarm_model",
    "runtime_info",
    "silu_and_mul",
    "sparse_mla_decode",
    "sparse_mla_decode_workspace_size",
    "status_string",
    "version",
    "w4a16_pack",
    "w4a16_weight_sizes",
    "warp_decode_moe",
    "warp_decode_moe_workspace_size",
]
