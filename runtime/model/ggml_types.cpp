#include "pig/runtime/ggml_types.h"

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pig::runtime {

std::optional<GgmlTypeInfo> GgmlTypeLookup(uint32_t id) {
  switch (id) {
  case 0:
    return GgmlTypeInfo{"F32", 1, 4, true};
  case 1:
    return GgmlTypeInfo{"F16", 1, 2, true};
  case 2:
    return GgmlTypeInfo{"Q4_0", 32, 18, true};
  case 3:
    return GgmlTypeInfo{"Q4_1", 32, 20, true};
  case 6:
    return GgmlTypeInfo{"Q5_0", 32, 22, false};
  case 7:
    return GgmlTypeInfo{"Q5_1", 32, 24, false};
  case 8:
    return GgmlTypeInfo{"Q8_0", 32, 34, true};
  case 9:
    return GgmlTypeInfo{"Q8_1", 32, 36, false};
  case 10:
    return GgmlTypeInfo{"Q2_K", 256, 84, false};
  case 11:
    return GgmlTypeInfo{"Q3_K", 256, 110, false};
  case 12:
    return GgmlTypeInfo{"Q4_K", 256, 144, true};
  case 13:
    return GgmlTypeInfo{"Q5_K", 256, 176, false};
  case 14:
    return GgmlTypeInfo{"Q6_K", 256, 210, true};
  case 15:
    return GgmlTypeInfo{"Q8_K", 256, 292, false};
  case 24:
    return GgmlTypeInfo{"I8", 1, 1, false};
  case 25:
    return GgmlTypeInfo{"I16", 1, 2, false};
  case 26:
    return GgmlTypeInfo{"I32", 1, 4, false};
  case 27:
    return GgmlTypeInfo{"I64", 1, 8, false};
  case 28:
    return GgmlTypeInfo{"F64", 1, 8, false};
  case 30:
    return GgmlTypeInfo{"BF16", 1, 2, true};
  default:
    return std::nullopt;
  }
}

GgmlTypeInfo GgmlInfo(GgmlType t) {
  auto info = GgmlTypeLookup(static_cast<uint32_t>(t));
  if (!info)
    throw std::invalid_argument("unknown ggml type " + std::to_string(uint32_t(t)));
  return *info;
}

const char *GgmlTypeName(GgmlType t) {
  auto info = GgmlTypeLookup(static_cast<uint32_t>(t));
  return info ? info->name : "unknown";
}

size_t GgmlRowBytes(GgmlType t, uint64_t n) {
  const GgmlTypeInfo info = GgmlInfo(t);
  return static_cast<size_t>(n / info.block_elems * info.block_bytes);
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = int32_t((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFF;
  if (((x >> 23) & 0xFF) == 0xFF)
    return uint16_t(sign | 0x7C00 | (mant ? 0x200 : 0));
  if (exp >= 31)
    return uint16_t(sign | 0x7C00);
  if (exp <= 0) {
    if (exp < -10)
      return uint16_t(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = uint32_t(exp) << 10 | mant >> 13;
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent: fine
  return uint16_t(sign | h);
}

float BF16ToF32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t F32ToBF16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000)
    return uint16_t((x >> 16) | 0x40); // quiet NaN
  x += 0x7FFF + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

void Q4KScaleMin(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void DequantizeRowScalar(GgmlType t, const void *src, float *y, size_t n) {
  const auto *p = static_cast<const uint8_t *>(src);
  switch (t) {
  case GgmlType::kF32:
    std::memcpy(y, p, n * 4);
    return;
  case GgmlType::kF16:
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      y[i] = F16ToF32(h);
    }
    return;
  case GgmlType::kBF16:
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      y[i] = BF16ToF32(h);
    }
    return;
  case GgmlType::kQ8_0:
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ8_0 *>(p) + b;
      const float d = F16ToF32(blk->d);
      for (int j = 0; j < 32; ++j)
        y[j] = d * float(blk->qs[j]);
    }
    return;
  case GgmlType::kQ4_0:
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ4_0 *>(p) + b;
      const float d = F16ToF32(blk->d);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * float((blk->qs[j] & 0xF) - 8);
        y[j + 16] = d * float((blk->qs[j] >> 4) - 8);
      }
    }
    return;
  case GgmlType::kQ4_1:
    for (size_t b = 0; b < n / 32; ++b, y += 32) {
      const auto *blk = reinterpret_cast<const BlockQ4_1 *>(p) + b;
      const float d = F16ToF32(blk->d), m = F16ToF32(blk->m);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * float(blk->qs[j] & 0xF) + m;
        y[j + 16] = d * float(blk->qs[j] >> 4) + m;
      }
    }
    return;
  case GgmlType::kQ4_K:
    for (size_t b = 0; b < n / 256; ++b) {
      const auto *blk = reinterpret_cast<const BlockQ4_K *>(p) + b;
      const float d = F16ToF32(blk->d), dmin = F16ToF32(blk->dmin);
      const uint8_t *q = blk->qs;
      for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
        uint8_t sc, m;
        Q4KScaleMin(is, blk->scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        Q4KScaleMin(is + 1, blk->scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l)
          y[l] = d1 * float(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l)
          y[32 + l] = d2 * float(q[l] >> 4) - m2;
      }
    }
    return;
  case GgmlType::kQ6_K:
    for (size_t b = 0; b < n / 256; ++b) {
      const auto *blk = reinterpret_cast<const BlockQ6_K *>(p) + b;
      const float d = F16ToF32(blk->d);
      const uint8_t *ql = blk->ql, *qh = blk->qh;
      const int8_t *sc = blk->scales;
      for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * float(sc[is + 0]) * float(q1);
          y[l + 32] = d * float(sc[is + 2]) * float(q2);
          y[l + 64] = d * float(sc[is + 4]) * float(q3);
          y[l + 96] = d * float(sc[is + 6]) * float(q4);
        }
      }
    }
    return;
  default:
    throw std::invalid_argument(std::string("cannot dequantise ggml type ") + GgmlTypeName(t));
  }
}

} // namespace pig::runtime
