// Quantisation error of candidate 8-bit KV formats on real keys and values (pig-eval
// attention-error --kv-formats; docs/KV8.md): the measurement behind the choice of q8, the KV
// cache's 8-bit format (pig/reference/kv_quant.h).
//
// Each format is simulated exactly (quantise, dequantise to f32) on one kv-head's rows; the error
// is that of EXACT attention over the dequantised rows against exact attention over the f32 rows,
// for the real decode-step queries of the head's group: what the format alone costs, before any
// sparse method.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pig/reference/reference.h"

namespace pig::eval {

enum class KvFormat {
  bf16,       ///< the baseline (2 bytes per element)
  q8,         ///< int8, a bf16 scale per block of 32 elements of a row (the KV cache's format)
  q8_row,     ///< int8, one bf16 scale per row
  q8_channel, ///< keys: int8 with a bf16 scale per channel and group of 32 tokens (KIVI's
              ///< per-channel keys); values: as q8
};

const char *to_string(KvFormat f);
/// Bytes per element of K and V together / 2 at head dim d.
double BytesPerElement(KvFormat f, std::size_t d);
std::vector<KvFormat> AllKvFormats();

/// rows (n x d, in place) -> dequantise(quantise(rows)) in format f; `keys` selects the key
/// variant of q8_channel.
void SimulateKvFormat(KvFormat f, bool keys, ref::OwnedMatrix &rows);

struct KvFormatError {
  double out_rel = 0;   ///< |o_f - o| / |o| of exact attention
  double logit_max = 0; ///< max_i |z_f,i - z_i| over the tokens (scaled logits)
  double logit_rms = 0; ///< sqrt(mean_i (z_f,i - z_i)^2)
};

/// The error of format f for each query (K, V: the f32 rows).
std::vector<KvFormatError> MeasureKvFormat(KvFormat f,
                                           const std::vector<std::vector<float>> &queries,
                                           const ref::OwnedMatrix &K, const ref::OwnedMatrix &V);

} // namespace pig::eval
