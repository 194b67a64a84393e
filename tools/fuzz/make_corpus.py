#!/usr/bin/env python3
"""Writes the fuzz targets' corpora (fuzz/corpus/<target>/): the inputs that once crashed or misled the
runtime (regress-*, issue "Hardening") and seeds that start the fuzzer past the first checks (seed-*).

  tools/fuzz/make_corpus.py --entries-from CACHE_DIR

CACHE_DIR: a kernel cache filled by `chord-jit prewarm`; its three smallest entries seed the cache_entry
target and give the edited-entry regressions their real metadata. Input formats: fuzz/c_abi_fuzz.cpp and
fuzz/cache_entry_fuzz.cpp.
"""
import argparse
import ctypes
import json
import os
import pathlib
import struct
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import chordrt  # noqa: E402  (only the ctypes struct definitions; the library is not loaded)

ROOT = pathlib.Path(__file__).resolve().parents[2]
INT64_MAX = 2**63 - 1

# c_abi_fuzz.cpp's op numbers and flags.
OPS = {"moe_align": 0, "silu_and_mul": 1, "moe_combine": 2, "warp_decode_moe": 3, "w4a16_pack": 4,
       "grouped_contiguous": 5, "grouped_masked": 6, "indexed_gemm": 7, "mla_cache_write": 8,
       "sparse_mla_workspace_size": 9, "sparse_mla_decode": 10, "indexer_cache_write": 11,
       "dsa_indexer_logits": 12, "dsa_topk": 13, "prewarm": 14, "align_capacity": 15,
       "warp_decode_workspace": 16, "weight_sizes": 17, "indexed_block_m": 18, "record_bytes": 19,
       "status_and_version": 20, "runtime_info": 21}
SIZE_RAW = 2
FORGE_TAG = 1 << 4


def ptr(i):
    """A distinct 256-byte-aligned fake device address (compile-only mode never dereferences it)."""
    return 0x7F0000000000 + i * 0x100000


def abi_input(op, args=b"", weight=b"", tail=b"", flags=None):
    if flags is None:
        flags = FORGE_TAG if weight else 0
    return bytes([OPS[op], flags]) + bytes(args) + bytes(weight) + tail


def scalars(a=0, b=0, c=0, d=0, e=0, f=0, g=0, h=0):
    return struct.pack("<q6iq", a, b, c, d, e, f, g, h)


def weight(layout=0, experts=8, n=256, k=512):
    return chordrt.W4a16Weight(layout=layout, num_experts=experts, n=n, k=k, packed=ptr(1), scale=ptr(2),
                               tag=0x1234)


KIMI_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "moe_intermediate_size": 2048,
    "n_routed_experts": 384, "num_experts_per_tok": 8, "num_attention_heads": 64, "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "group_size": 32, "symmetric": True}}}},
}


def prewarm(model, deployment, arch, config=None):
    tail = b"\0".join(s.encode() for s in (model, deployment, arch)) + b"\0"
    if config is not None:
        tail += json.dumps(config).encode()
    return abi_input("prewarm", tail=tail)


def c_abi_corpus():
    c = chordrt
    out = {}
    # 9: sizes whose bytes overflow 64 bits; capacities 0 for a non-empty routing (a silent no-op once).
    out["regress-moe-combine-bytes-overflow"] = abi_input("moe_combine", c.MoeCombineArgs(
        expert_rows=ptr(1), topk_weights=ptr(2), output=ptr(3), num_tokens=2**31 - 1, top_k=8, hidden=2**31 - 1))
    out["regress-indexed-capacity-zero"] = abi_input("indexed_gemm", c.IndexedArgs(
        a=ptr(3), num_tokens=4, top_k=2, block_m=64, sorted_token_ids=ptr(4), sorted_token_ids_capacity=0,
        expert_ids=ptr(5), expert_ids_capacity=0, num_tokens_post_padded=ptr(6), out=ptr(7)), weight())
    out["regress-indexed-expert-ids-below-one-block"] = abi_input("indexed_gemm", c.IndexedArgs(
        a=ptr(3), num_tokens=4, top_k=2, block_m=64, sorted_token_ids=ptr(4), sorted_token_ids_capacity=512,
        expert_ids=ptr(5), expert_ids_capacity=0, num_tokens_post_padded=ptr(6), out=ptr(7)), weight())
    out["regress-mla-workspace-misaligned"] = abi_input("sparse_mla_decode", c.SparseMlaDecodeArgs(
        format=0, num_heads=128, rope_dims=64, topk=2048, num_tokens=64, q=ptr(1), cache=ptr(2),
        num_slots=1 << 20, indices=ptr(3), softmax_scale=0.1, out=ptr(4), lse=ptr(5), workspace=ptr(6) + 4,
        workspace_bytes=1 << 30))
    out["regress-struct-size-huge"] = abi_input("moe_align", c.MoeAlignArgs(struct_size=2**63), flags=SIZE_RAW)
    # 10: size helpers.
    out["regress-align-capacity-int64-max"] = abi_input("align_capacity", scalars(INT64_MAX, 64, 1024, 1024))
    out["regress-align-capacity-2p62"] = abi_input("align_capacity", scalars(2**62, 8, 384, 16))
    out["regress-align-capacity-negative"] = abi_input("align_capacity", scalars(-5, 8, 384, 16))
    out["regress-warp-decode-workspace-wraps"] = abi_input("warp_decode_workspace", scalars(2**62, 8, 2**30))
    # Found by the fuzzer: a C caller's status value outside the enum (undefined behaviour in C++).
    out["regress-status-string-out-of-range"] = abi_input("status_and_version", scalars(0, 42))
    # Found by the fuzzer: a RoPE width near INT32_MAX overflowed the record's dims before it was checked.
    out["regress-mla-record-rope-int32-max"] = abi_input("record_bytes", scalars(0, 0, 2**31 - 1))
    # 11, 12: config.json and arch.
    out["regress-config-hidden-size-past-int32"] = prewarm("@", "ep8", "sm_90a", dict(KIMI_CONFIG, hidden_size=4294967552))
    bad_quant = json.loads(json.dumps(KIMI_CONFIG))
    bad_quant["quantization_config"]["quant_method"] = 5
    out["regress-config-quant-method-number"] = prewarm("@", "tp8", "sm_90a", bad_quant)
    out["regress-arch-sm80"] = prewarm("kimi-k2", "ep8", "sm_80")
    out["regress-arch-sm100a"] = prewarm("deepseek-v3", "tp8", "sm_100a")

    # Seeds: plausible calls of every op, so mutations start past the struct_size and null checks.
    out["seed-moe-align"] = abi_input("moe_align", c.MoeAlignArgs(
        topk_ids=ptr(1), num_tokens=16, top_k=8, num_experts=64, block_size=16, sorted_token_ids=ptr(2),
        sorted_token_ids_capacity=1088, expert_ids=ptr(3), expert_ids_capacity=68, num_tokens_post_padded=ptr(4)))
    out["seed-silu-and-mul"] = abi_input("silu_and_mul", c.SiluAndMulArgs(input=ptr(1), output=ptr(2), rows=16,
                                                                          intermediate=2048))
    out["seed-moe-combine"] = abi_input("moe_combine", c.MoeCombineArgs(
        expert_rows=ptr(1), topk_weights=ptr(2), output=ptr(3), num_tokens=16, top_k=8, hidden=7168))
    out["seed-warp-decode"] = abi_input("warp_decode_moe", c.WarpDecodeMoeArgs(
        format=0, num_tokens=8, hidden=7168, intermediate=256, num_experts=384, top_k=8, x=ptr(1), topk_ids=ptr(2),
        topk_weights=ptr(3), w13=ptr(4), w13_scale=ptr(5), w2=ptr(6), w2_scale=ptr(7), workspace=ptr(8),
        workspace_bytes=8 * 8 * 256 * 2, output=ptr(9)))
    out["seed-w4a16-pack"] = abi_input("w4a16_pack", c.W4a16PackArgs(
        layout=0, num_experts=8, n=256, k=512, bits=4, group_size=32, symmetric=1, scale_is_bf16=1,
        weight_packed=ptr(1), weight_scale=ptr(2), packed=ptr(3), packed_bytes=1 << 20, scale=ptr(4),
        scale_bytes=1 << 20))
    out["seed-grouped-contiguous"] = abi_input("grouped_contiguous", c.GroupedContiguousArgs(
        a=ptr(1), m=256, m_indices=ptr(2), out=ptr(3)), weight())
    out["seed-grouped-masked"] = abi_input("grouped_masked", c.GroupedMaskedArgs(
        a=ptr(1), max_m=64, masked_m=ptr(2), expected_m=8, out=ptr(3)), weight(layout=1))
    out["seed-indexed-gemm"] = abi_input("indexed_gemm", c.IndexedArgs(
        a=ptr(3), num_tokens=4, top_k=2, block_m=64, sorted_token_ids=ptr(4), sorted_token_ids_capacity=512,
        expert_ids=ptr(5), expert_ids_capacity=8, num_tokens_post_padded=ptr(6), out=ptr(7)), weight())
    out["seed-mla-cache-write"] = abi_input("mla_cache_write", c.MlaCacheWriteArgs(
        format=0, rope_dims=64, num_tokens=16, kv=ptr(1), slot_mapping=ptr(2), cache=ptr(3), num_slots=4096))
    mla = dict(format=0, num_heads=64, rope_dims=64, topk=2048, num_tokens=4, q=ptr(1), cache=ptr(2),
               num_slots=1 << 16, indices=ptr(3), softmax_scale=0.1, out=ptr(4), lse=ptr(5))
    out["seed-sparse-mla-workspace-size"] = abi_input("sparse_mla_workspace_size", c.SparseMlaDecodeArgs(**mla))
    out["seed-sparse-mla-decode"] = abi_input("sparse_mla_decode", c.SparseMlaDecodeArgs(**mla))
    out["seed-indexer-cache-write"] = abi_input("indexer_cache_write", c.IndexerCacheWriteArgs(
        num_tokens=16, k=ptr(1), slot_mapping=ptr(2), cache=ptr(3), page_size=64, num_pages=64))
    out["seed-dsa-indexer-logits"] = abi_input("dsa_indexer_logits", c.DsaIndexerArgs(
        num_heads=64, num_tokens=4, q=ptr(1), weights=ptr(2), cache=ptr(3), page_size=64, num_pages=1024,
        block_table=ptr(4), max_pages_per_seq=1024, context_lens=ptr(5), max_context=65536, logits=ptr(6)))
    out["seed-dsa-topk"] = abi_input("dsa_topk", c.DsaTopkArgs(
        num_tokens=4, topk=2048, logits=ptr(1), max_context=65536, context_lens=ptr(2), indices=ptr(3)))
    out["seed-prewarm-config"] = prewarm("@", "ep8", "sm_90a", KIMI_CONFIG)
    out["seed-prewarm-preset"] = prewarm("kimi-k2", "tp8", "sm_90a")
    out["seed-weight-sizes"] = abi_input("weight_sizes", scalars(0, 0, 384, 4096, 7168))
    out["seed-runtime-info"] = abi_input("runtime_info", scalars(h=48))
    out["seed-indexed-block-m"] = abi_input("indexed_block_m", scalars(4096, 0, 48, 4096, 7168, 0))
    return out


def cache_input(meta, cubin):
    return json.dumps(meta).encode() + b"\0" + cubin


def smallest_entries(cache_dir, count):
    metas = sorted(pathlib.Path(cache_dir).glob("entries/*/*.json"), key=lambda p: p.with_suffix(".cubin").stat().st_size)
    if len(metas) < count:
        sys.exit(f"{cache_dir} holds {len(metas)} entries; prewarm a model into it first")
    return [(json.loads(p.read_text()), p.with_suffix(".cubin").read_bytes()) for p in metas[:count]]


def cache_entry_corpus(cache_dir):
    entries = smallest_entries(cache_dir, 3)
    out = {f"seed-entry-{i}": cache_input(m, c) for i, (m, c) in enumerate(entries)}
    (meta, cubin), (other, _) = entries[0], entries[1]
    # 1: nesting that overflowed the stack of every reader (kept under the 1 MiB metadata limit).
    depth = 250_000
    deep = json.dumps(dict(meta, descriptor="@")).replace('"@"', "[" * depth + "]" * depth)
    out["regress-deep-descriptor"] = deep.encode() + b"\0" + cubin
    # 2: launch metadata edited with the checksum intact, and an entry copied under another key.
    for field, value in (("threads", meta["threads"] * 2), ("dynamic_smem", meta["dynamic_smem"] + 1024),
                         ("cluster", [2, 1, 1]), ("lowered_name", "_Z7anotherv")):
        out[f"regress-edited-{field}"] = cache_input(dict(meta, **{field: value}), cubin)
    out["regress-copied-under-another-key"] = cache_input(dict(meta, key=other["key"]), cubin)
    # A float where an integer belongs: nlohmann's cast of it is undefined behaviour (found by the fuzzer).
    out["regress-float-dynamic_smem"] = cache_input(dict(meta, dynamic_smem=1e300), cubin)
    # 7: terminal escape codes and invalid UTF-8 in printed text.
    out["regress-escape-codes"] = cache_input(dict(meta, descriptor_text="\x1b[2J\x1b]0;owned\x07"), cubin)
    raw = json.dumps(dict(meta, descriptor_text="@")).encode()
    out["regress-invalid-utf8"] = raw.replace(b'"@"', b'"\xff\xfe\xc0"') + b"\0" + cubin
    out["regress-cubin-truncated"] = cache_input(meta, cubin[: len(cubin) // 2])
    out["regress-no-cubin"] = json.dumps(meta).encode()
    return out


def write(target, files):
    d = ROOT / "fuzz" / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    for name, data in sorted(files.items()):
        (d / name).write_bytes(data)
    print(f"{d.relative_to(ROOT)}: {len(files)} files")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries-from", required=True, help="a kernel cache directory filled by chord-jit prewarm")
    a = ap.parse_args()
    write("c_abi", c_abi_corpus())
    write("cache_entry", cache_entry_corpus(a.entries_from))


if __name__ == "__main__":
    main()
