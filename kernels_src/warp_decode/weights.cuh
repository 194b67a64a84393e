// Weight formats of the warp-decode kernels, read straight from the checkpoint layout (no repack): sizes,
// shared-memory staging layout, the conversion to BF16 MMA fragments and the matching activation order.
//
// Fragment mapping. A group is 32 consecutive K values with one scale. In the two m16n8k16 steps that
// cover one group, lane (g, t) supplies values 8t..8t+7 of the group for its A rows and its B column: for
// INT4 the t-th int32 word of the group, for MXFP8 the t-th 8-byte chunk. The K order inside an MMA is
// free as long as A and B agree, so each format feeds its values in the pair order its cheapest
// conversion produces, and b_pairs() arranges the activations the same way. The group's FP32 partial is
// scaled once, in FP32: the products are exact (BF16 weights q - 8 or E4M3 values, BF16 activations).
#pragma once

#include "common/mma.cuh"
#include "warp_decode/params.cuh"

namespace chord::warp_decode {

// N consecutive 32-bit words of shared memory (N = 1, 2 or 4: one load of 4..16 aligned bytes).
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N]) {
  static_assert(N == 1 || N == 2 || N == 4, "one 4-, 8- or 16-byte load");
  if constexpr (N == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (N == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

template <int FORMAT>
struct WeightFormat;

// compressed-tensors pack-quantized: int32 words of 8 nibbles (least significant first), value =
// (nibble - 8) * scale, BF16 scale per 32.
template <>
struct WeightFormat<kInt4Group32> {
  using Raw = uint32_t;
  static constexpr long long row_bytes(long long k) { return k / 2; }
  static constexpr long long scale_row_bytes(long long k) { return k / 32 * 2; }
  static constexpr int kGroupBytes = format_bytes(kInt4Group32).group;
  static constexpr int kScaleBytes = format_bytes(kInt4Group32).scale;
  // Shared-memory row pitch pad: pitch / 4 = 4 * groups + 4 words is 4 mod 8, so the 8 rows x 4 words
  // one LDS.32 reads land in 32 different banks (for an even number of groups per stage).
  static constexpr int kRowPad = format_bytes(kInt4Group32).row_pad;
  // A holds 128 + q (0x4300 | q, one lop3 per pair, exact); the accumulator of each group starts at
  // -136 * sum(x) from one MMA of a constant A, which leaves sum((q - 8) x). That drops the per-pair
  // subtraction (8 of ~30 instructions per group) for 2 MMAs shared by all rows; the cancellation costs
  // ~2^-17 relative, far below the BF16 output's rounding.
  static constexpr bool kOffset = true;
  static constexpr uint32_t kOffsetA = 0xC308C308u;  // BF16 -136 twice
  __device__ static Raw load(const uint8_t* row, int group, int t) {
    return *reinterpret_cast<const uint32_t*>(row + group * kGroupBytes + 4 * t);
  }
  // A group row is 16 bytes, one ldmatrix row: one ldmatrix.x4 brings a lane its words of two groups of
  // its lo and hi rows (4 LDS.32 otherwise).
  static constexpr bool kLdmatrix = true;
  // A stage reads 64 bytes of a row: L2 fetches the 256-byte block, which the next stages read.
  static constexpr bool kL2Prefetch256 = true;
  // A staged row's SG BF16 scales arrive as SG / 2 words (one 4..16-byte load); a BF16 is the top half of
  // its FP32, so each converts where it is used, in one instruction.
  template <int SG>
  using ScaleWords = uint32_t[SG / 2];
  template <int SG>
  __device__ static float scale(const ScaleWords<SG>& w, int group) {
    return __uint_as_float(group % 2 == 0 ? w[group / 2] << 16 : w[group / 2] & 0xFFFF0000u);
  }
  // Pairs (v0,v4), (v1,v5), (v2,v6), (v3,v7): nibbles i and i + 4 sit 16 bits apart.
  __device__ static void dequant(Raw w, uint32_t (&r)[4]) {
    constexpr uint32_t kNibbles = 0x000F000Fu, k128 = 0x43004300u;
    r[0] = and_or(w, kNibbles, k128);
    r[1] = and_or(w >> 4, kNibbles, k128);
    r[2] = and_or(w >> 8, kNibbles, k128);
    r[3] = and_or(w >> 12, kNibbles, k128);
  }
  __device__ static void b_pairs(const uint4& x, uint32_t (&b)[4]) {
    b[0] = byte_perm(x.x, x.z, 0x5410);  // (x0, x4)
    b[1] = byte_perm(x.x, x.z, 0x7632);  // (x1, x5)
    b[2] = byte_perm(x.y, x.w, 0x5410);  // (x2, x6)
    b[3] = byte_perm(x.y, x.w, 0x7632);  // (x3, x7)
  }
};

// OCP MX: E4M3 values, one E8M0 scale (2^(e - 127)) per 32.
template <>
struct WeightFormat<kMxfp8> {
  using Raw = uint2;
  static constexpr long long row_bytes(long long k) { return k; }
  static constexpr long long scale_row_bytes(long long k) { return k / 32; }
  static constexpr int kGroupBytes = format_bytes(kMxfp8).group;
  static constexpr int kScaleBytes = format_bytes(kMxfp8).scale;
  // Pitch = 32 * (groups + 1) bytes is 32 or 96 mod 128 for an even number of groups per stage, so the
  // 16 lanes of each half-warp LDS.64 (4 rows x 4 chunks) hit distinct banks.
  static constexpr int kRowPad = format_bytes(kMxfp8).row_pad;
  static constexpr bool kOffset = false;
  static constexpr uint32_t kOffsetA = 0;
  __device__ static Raw load(const uint8_t* row, int group, int t) {
    return *reinterpret_cast<const uint2*>(row + group * kGroupBytes + 8 * t);
  }
  static constexpr bool kLdmatrix = false;       // 8 bytes per lane and group: ldmatrix would reorder K
  static constexpr bool kL2Prefetch256 = false;  // not measured alone; with interleaved stages 7% slower
  // 2^(e - 127) as FP32 bits e << 23; e = 0 (2^-127) reads as 0 and e = 255 (NaN) as +inf. A staged
  // row's SG scales are SG / 4 words.
  template <int SG>
  using ScaleWords = uint32_t[SG / 4];
  template <int SG>
  __device__ static float scale(const ScaleWords<SG>& w, int group) {
    return __uint_as_float(((w[group / 4] >> (8 * (group % 4))) & 0xFFu) << 23);
  }
  // Two E4M3 bytes -> BF16 pair: prmt puts each byte in a 16-bit lane over a copy of its sign bit, a
  // shift and a mask give sign | exponent-and-mantissa << 4 (BF16 reading 2^-120 of the value, E4M3
  // subnormals included), and an exact multiply by 2^120 finishes.
  __device__ static uint32_t e4m3x2_to_bf16x2(uint32_t word, uint32_t selector) {
    const uint32_t spread = byte_perm(word, 0, selector);
    return fma_bf16x2((spread << 4) & 0x87F087F0u, 0x7B807B80u, 0x80008000u);
  }
  // Pairs in natural order (v0,v1), (v2,v3), (v4,v5), (v6,v7).
  __device__ static void dequant(Raw w, uint32_t (&r)[4]) {
    r[0] = e4m3x2_to_bf16x2(w.x, 0x9180);
    r[1] = e4m3x2_to_bf16x2(w.x, 0xB3A2);
    r[2] = e4m3x2_to_bf16x2(w.y, 0x9180);
    r[3] = e4m3x2_to_bf16x2(w.y, 0xB3A2);
  }
  __device__ static void b_pairs(const uint4& x, uint32_t (&b)[4]) {
    b[0] = x.x;
    b[1] = x.y;
    b[2] = x.z;
    b[3] = x.w;
  }
};

}  // namespace chord::warp_decode
