#include "pig/reference/kv_quant.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

namespace pig::ref {
namespace {

float bf16_bits_to_f32(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The smallest bf16 >= s, for finite s >= 0.
std::uint16_t bf16_round_up(float s) {
  std::uint32_t u;
  std::memcpy(&u, &s, 4);
  const bool exact = (u & 0xFFFFu) == 0;
  return std::uint16_t((u >> 16) + (exact ? 0u : 1u));
}

} // namespace

float q8_scale_for(float amax) {
  if (!std::isfinite(amax))
    return std::numeric_limits<float>::quiet_NaN();
  return bf16_bits_to_f32(bf16_round_up(std::fabs(amax) / 127.0f));
}

float q8_block_scale(const std::uint8_t *block) {
  std::uint16_t b;
  std::memcpy(&b, block, 2);
  return bf16_bits_to_f32(b);
}

void quantize_q8(const float *x, std::size_t d, std::uint8_t *out) {
  assert(d % kQ8Block == 0);
  for (std::size_t b = 0; b < d / kQ8Block; ++b) {
    const float *xb = x + b * kQ8Block;
    std::uint8_t *ob = out + b * kQ8BlockBytes;
    // amax is NaN when the block holds a NaN or an infinity (q8_scale_for's NaN scale).
    float amax = 0;
    for (std::size_t i = 0; i < kQ8Block; ++i)
      amax = std::isfinite(xb[i]) && std::isfinite(amax) ? std::max(amax, std::fabs(xb[i]))
                                                         : std::numeric_limits<float>::quiet_NaN();
    // A block with amax < 127 * 2^-149 gets s = 0 and reads back as zeros; otherwise s >= the
    // exact amax / 127 up to the division's rounding, which the clamp below absorbs.
    const float s = q8_scale_for(amax);
    const bool finite = std::isfinite(s);
    std::uint32_t u;
    std::memcpy(&u, &s, 4);
    const std::uint16_t sbits = std::uint16_t(u >> 16); // exact: s is a bf16 (or the NaN 0x7FC0)
    std::memcpy(ob, &sbits, 2);
    for (std::size_t i = 0; i < kQ8Block; ++i) {
      float q = 0;
      if (finite && s > 0)
        q = std::clamp(std::nearbyint(xb[i] / s), -127.0f, 127.0f);
      const std::int8_t qi = std::int8_t(q);
      std::memcpy(ob + 2 + i, &qi, 1);
    }
  }
}

void dequantize_q8(const std::uint8_t *in, std::size_t d, float *out) {
  assert(d % kQ8Block == 0);
  for (std::size_t b = 0; b < d / kQ8Block; ++b) {
    const std::uint8_t *ib = in + b * kQ8BlockBytes;
    const float s = q8_block_scale(ib);
    for (std::size_t i = 0; i < kQ8Block; ++i) {
      std::int8_t q;
      std::memcpy(&q, ib + 2 + i, 1);
      out[b * kQ8Block + i] = float(q) * s;
    }
  }
}

} // namespace pig::ref
