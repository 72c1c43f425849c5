// The 8-bit KV element format "q8" (docs/KV8.md): the oracle of KvCache's 8-bit rows and of every
// kernel that reads them.
//
// A row of d elements (d a multiple of 32) is d / 32 blocks, each 34 bytes: a bf16 scale s (raw
// bits, little-endian) followed by 32 int8 values q_i, and element i of the block is q_i * s
// (exact in f32: a 7-bit integer times an 8-bit mantissa). Like llama.cpp's q8_0 (an f16 scale
// per 32 elements) except for the scale's type: bf16 covers f32's whole range, so huge and tiny
// rows keep their scale (an f16 scale overflows above 65504 * 127 and loses its bits below
// 6e-5 * 127).
//
// Quantisation of a block: s = max_i |x_i| / 127 rounded UP to bf16 (so no |x_i| / s exceeds
// 127), q_i = x_i / s rounded to nearest even and clamped to [-127, 127]. A block of zeros has
// s = 0. A block with a NaN or an infinity gets s = NaN and q = 0: every element of that block
// reads back as NaN, so a non-finite key or value poisons the attention that reads it (as with
// f32 and bf16 rows) instead of vanishing.
//
// Why blocks of 32 and not a scale per row or per channel: docs/KV8.md, measured on the model's
// keys and values.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pig/spec/kv_type.h"

namespace pig::ref {

/// The block (32 elements, 34 bytes) and the row size are pig::spec's (pig/spec/kv_type.h).
using spec::kQ8Block;
using spec::kQ8BlockBytes;
using spec::q8_row_bytes;

/// x (d floats, d a multiple of 32) -> out (q8_row_bytes(d) bytes).
void quantize_q8(const float *x, std::size_t d, std::uint8_t *out);
/// in (q8_row_bytes(d) bytes) -> out (d floats), element i = q_i * s.
void dequantize_q8(const std::uint8_t *in, std::size_t d, float *out);
/// The scale of a block as f32.
float q8_block_scale(const std::uint8_t *block);
/// The one rule for q8's scale, used by quantize_q8 (and pig-eval kv-formats for other groupings
/// of elements): for a block whose largest |x| is amax, |amax| / 127 rounded UP to bf16 (0 for
/// amax = 0; a bf16 >= |amax| / 127, so no |x| / s exceeds 127 beyond the division's rounding);
/// NaN when amax is NaN or infinite (a block holding a NaN or an infinity: its elements read
/// back as NaN).
float q8_scale_for(float amax);

} // namespace pig::ref
