// ggml tensor element types as stored in GGUF files: ids, block geometry and the scalar
// (reference) dequantisation that the Highway kernels are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace pig::runtime {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  const char *name;
  uint32_t block_elems; // elements per block
  uint32_t block_bytes; // bytes per block
  bool supported;       // usable as a weight by the runtime
};

// Geometry of a known type id (including ones we cannot compute with); nullopt if unknown.
std::optional<GgmlTypeInfo> GgmlTypeLookup(uint32_t id);
GgmlTypeInfo GgmlInfo(GgmlType t);
const char *GgmlTypeName(GgmlType t);
// Bytes of a row of `n` elements; n must be a multiple of the block size.
size_t GgmlRowBytes(GgmlType t, uint64_t n);

float F16ToF32(uint16_t h);
// Inline fast path for the per-block scales the kernels read: normal numbers are a shift and
// an add; zero, subnormals, inf and NaN take the exact out-of-line conversion.
inline float F16ToF32Fast(uint16_t h) {
  const uint32_t e = h & 0x7C00u;
  if (e == 0 || e == 0x7C00u)
    return F16ToF32(h);
  const uint32_t bits =
      (uint32_t(h & 0x8000u) << 16) | ((uint32_t(h & 0x7FFFu) << 13) + 0x38000000u);
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t h);
uint16_t F32ToBF16(float f); // round to nearest even

// Block layouts (little-endian, packed, exactly as ggml writes them).
#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);

// Scalar reference: dequantise `n` elements (a multiple of the block size) of type `t`.
void DequantizeRowScalar(GgmlType t, const void *src, float *dst, size_t n);
// Unpacks the 6-bit scale and min of sub-block j of a Q4_K block.
void Q4KScaleMin(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

} // namespace pig::runtime
