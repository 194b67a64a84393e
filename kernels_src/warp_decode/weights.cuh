// Weight formats of the warp-decode kernels, read straight from the checkpoint layout (no repack), and
// the MMA loop both kernels share: 16 weight rows x up to 8*N_TILES activation columns.
//
// Fragment mapping. A group is 32 consecutive K values with one scale. In an m16n8k16 pair covering one
// group, lane (g, t) supplies values 8t..8t+7 of the group for its A rows and its B column: for INT4 that
// is the t-th int32 word of the group, for MXFP8 the t-th 8-byte chunk. K order inside the MMA is a free
// choice as long as A and B agree, so the lane feeds its values as the pairs (v0,v4), (v1,v5) [first
// k16 step] and (v2,v6), (v3,v7) [second], the order the INT4 nibble trick produces, and permutes the
// activations to match with two prmt per pair. The group's two MMAs start from zero and the FP32
// partial is scaled once per group, so the result is an FP32 sum of exact products: (q - 8) and the E4M3
// values are exact in BF16 and the scale is applied in FP32.
#pragma once

#include "common/mma.cuh"

namespace chord::warp_decode {

enum : int { kInt4Group32 = 0, kMxfp8 = 1 };

template <int FORMAT>
struct WeightFormat;

// compressed-tensors pack-quantized: int32 words of 8 nibbles (least significant first), value =
// (nibble - 8) * scale, BF16 scale per 32.
template <>
struct WeightFormat<kInt4Group32> {
  using Raw = uint32_t;
  static constexpr long long row_bytes(long long k) { return k / 2; }
  static constexpr long long scale_row_bytes(long long k) { return k / 32 * 2; }
  __device__ static Raw load(const uint8_t* row, int group, int t) {
    return __ldg(reinterpret_cast<const uint32_t*>(row) + group * 4 + t);
  }
  __device__ static float scale(const uint8_t* scale_row, int group) {
    bf16 s;
    s.bits = __ldg(reinterpret_cast<const uint16_t*>(scale_row) + group);
    return to_float(s);
  }
  // 0x4300 | q is the BF16 value 128 + q; subtracting 136 leaves q - 8 exactly.
  __device__ static void dequant(Raw w, uint32_t (&r)[4]) {
    constexpr uint32_t kNibbles = 0x000F000Fu, k128 = 0x43004300u, kOne = 0x3F803F80u, kMinus136 = 0xC308C308u;
    r[0] = fma_bf16x2(and_or(w, kNibbles, k128), kOne, kMinus136);
    r[1] = fma_bf16x2(and_or(w >> 4, kNibbles, k128), kOne, kMinus136);
    r[2] = fma_bf16x2(and_or(w >> 8, kNibbles, k128), kOne, kMinus136);
    r[3] = fma_bf16x2(and_or(w >> 12, kNibbles, k128), kOne, kMinus136);
  }
};

// OCP MX: E4M3 values, one E8M0 scale (2^(e - 127)) per 32.
template <>
struct WeightFormat<kMxfp8> {
  using Raw = uint2;
  static constexpr long long row_bytes(long long k) { return k; }
  static constexpr long long scale_row_bytes(long long k) { return k / 32; }
  __device__ static Raw load(const uint8_t* row, int group, int t) {
    return __ldg(reinterpret_cast<const uint2*>(row) + group * 4 + t);
  }
  __device__ static float scale(const uint8_t* scale_row, int group) {
    const uint32_t e = __ldg(scale_row + group);
    if (e == 0) return __uint_as_float(0x00400000u);  // 2^-127 is an FP32 subnormal
    if (e == 255) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(e << 23);
  }
  // E4M3 -> F16 by the hardware (exact), F16 -> BF16 by moving exponent and mantissa down 3 bits (the
  // BF16 then reads 2^-112 of the value; E4M3 values have 3 mantissa bits, so nothing is lost) and an
  // exact multiply by 2^112.
  __device__ static uint32_t e4m3x2_to_bf16x2(uint32_t pair) {
    uint32_t h;
    asm("{\n .reg .b16 p;\n cvt.u16.u32 p, %1;\n cvt.rn.f16x2.e4m3x2 %0, p;\n}" : "=r"(h) : "r"(pair));
    const uint32_t bf = ((h >> 3) & 0x0FFF0FFFu) | (h & 0x80008000u);
    return fma_bf16x2(bf, 0x77807780u, 0x80008000u);
  }
  __device__ static void dequant(Raw w, uint32_t (&r)[4]) {
    const uint32_t p = byte_perm(w.x, w.y, 0x5140), q = byte_perm(w.x, w.y, 0x7362);  // v0 v4 v1 v5, v2 v6 v3 v7
    r[0] = e4m3x2_to_bf16x2(p & 0xFFFFu);
    r[1] = e4m3x2_to_bf16x2(p >> 16);
    r[2] = e4m3x2_to_bf16x2(q & 0xFFFFu);
    r[3] = e4m3x2_to_bf16x2(q >> 16);
  }
};

// acc[nt] += W[rows] . B[columns of tile nt] over groups [g_begin, g_end) (a multiple of UNROLL long).
// Lane (g, t): a_lo / a_hi are weight rows g and g + 8, s_lo / s_hi their scale rows, b_rows[nt] the
// BF16 row of column 8 nt + g. Each lane issues all loads of UNROLL groups before the math.
template <int FORMAT, int N_TILES, int UNROLL>
__device__ __forceinline__ void mma_weight_rows(float (&acc)[N_TILES][4], const uint8_t* a_lo, const uint8_t* a_hi,
                                                const uint8_t* s_lo, const uint8_t* s_hi,
                                                const bf16* const (&b_rows)[N_TILES], int g_begin, int g_end, int t) {
  using F = WeightFormat<FORMAT>;
  for (int g0 = g_begin; g0 < g_end; g0 += UNROLL) {
    typename F::Raw wl[UNROLL], wh[UNROLL];
    float sl[UNROLL], sh[UNROLL];
    uint4 xb[UNROLL][N_TILES];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int g = g0 + u;
      wl[u] = F::load(a_lo, g, t);
      wh[u] = F::load(a_hi, g, t);
      sl[u] = F::scale(s_lo, g);
      sh[u] = F::scale(s_hi, g);
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) xb[u][nt] = __ldg(reinterpret_cast<const uint4*>(b_rows[nt] + g * 32 + 8 * t));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      uint32_t lo[4], hi[4];
      F::dequant(wl[u], lo);
      F::dequant(wh[u], hi);
      const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]}, a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt) {
        const uint4 x = xb[u][nt];
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_bf16_m16n8k16(d, a0, byte_perm(x.x, x.z, 0x5410), byte_perm(x.x, x.z, 0x7632));
        mma_bf16_m16n8k16(d, a1, byte_perm(x.y, x.w, 0x5410), byte_perm(x.y, x.w, 0x7632));
        acc[nt][0] += sl[u] * d[0];
        acc[nt][1] += sl[u] * d[1];
        acc[nt][2] += sh[u] * d[2];
        acc[nt][3] += sh[u] * d[3];
      }
    }
  }
}

}  // namespace chord::warp_decode
