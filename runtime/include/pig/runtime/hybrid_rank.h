// lsh-hybrid's Hamming ranker as a kernel (docs/HYBRID.md): the L SimHash codes of a token packed
// into one bit string (its "sketch"), and a scan that counts, for every token and each of G query
// heads, the bits in which the token's sketch and the head's differ. The scan runs on the best
// Highway target (PopulationCount: VPOPCNTQ on AVX3_DL) and gives exactly pig::ref::hybrid_hamming.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pig/spec/hybrid_config.h"

namespace pig::runtime::lsh {

/// What lsh-hybrid's ranker `rank` reads per token and kv-head: the packed sketch of `bits`
/// SimHash columns (hamming; hybrid_sketch_words), the L codes (collisions), or the int4 key and
/// its f32 scale (quant; hybrid_quant_bytes + 4). 0 for lowrank (not in the runtime).
std::size_t hybrid_ranker_bytes(spec::HybridRank rank, int bits, int L, std::size_t d);

/// u64 words of one packed sketch of `bits` SimHash columns: ceil(bits / 64), rounded up to a
/// multiple of 8 (a 512-bit vector) so that the scan has no remainder; the padding is zero.
std::size_t hybrid_sketch_words(int bits);

/// Packs the first `bits` SimHash columns of `rows` tokens (codes token-major, L uint16 each,
/// K bits per code) into sketches of hybrid_sketch_words(bits) words: column b (table b / K, bit
/// b % K) at bit b % 64 of word b / 64.
void hybrid_pack(const std::uint16_t *codes, std::size_t rows, int K, int L, int bits,
                 std::uint64_t *out);

/// H[g * stride + i] = popcount(sketch_i XOR query_g) for tokens i in [0, n) and heads g in
/// [0, G): pig::ref::hybrid_hamming of the codes the sketches were packed from. words: the
/// sketches' hybrid_sketch_words (every sketch and query that long). stride 0: n (a chunk of
/// tokens [a, b) of a longer scan passes sketches + a words, H + a and the whole scan's n).
void hybrid_hamming_scan(const std::uint64_t *sketches, std::size_t words, std::size_t n,
                         const std::uint64_t *queries, int G, std::uint16_t *H,
                         std::size_t stride = 0);

/// The Hamming ranker's scores: z[i] = sq norms[i] cos_of[H[i]] (+ log_vnorms[i] when given),
/// NaN mapped to -inf, for i in [0, n): what ref::hybrid_scores computes for rank=hamming given
/// sq = scale |q|, the centred keys' norms and cos_of[h] = ref::hamming_cosine(h, bits) (the
/// same operations in the same order: the same doubles).
void hybrid_hamming_scores(const std::uint16_t *H, const double *norms, const double *log_vnorms,
                           std::size_t n, const double *cos_of, double sq, double *z);

// rank=quant (docs/HYBRID.md): every token's centred key rounded to int4 with one scale
// (ref::HybridLowRank::round_key), the query to int8 (ref::HybridLowRank::query8); the ranker
// reads d / 2 + 4 bytes per token instead of the sketch's K L / 8.
//
// The keys are stored in blocks of kQuantBlock tokens, component-pair-major inside a block: byte
// p * kQuantBlock + lane of block b holds token b kQuantBlock + lane's components 2p (low nibble)
// and 2p + 1 (high nibble), each as x + 8 in [1, 15] (a component past d: 8, that is 0). A
// vector of lanes then holds one component of several tokens, and the scan needs no horizontal
// sums.
constexpr std::size_t kQuantBlock = 16;

/// Bytes per token of a packed int4 key of dimension d: ceil(d / 2).
std::size_t hybrid_quant_bytes(std::size_t d);
/// Bytes that n packed tokens occupy: whole blocks, ceil(n / kQuantBlock) kQuantBlock
/// hybrid_quant_bytes(d).
std::size_t hybrid_quant_size(std::size_t n, std::size_t d);

/// Rounds the centred key c (d floats) as ref::HybridLowRank::round_key(c, 4) and writes it as
/// token `token` of the blocked array `keys` (hybrid_quant_size(token + 1, d) bytes at least).
/// Returns its scale: 0 for a zero key, NaN when a component is not finite (its codes are then 0).
float hybrid_quant_pack(const float *c, std::size_t d, std::size_t token, std::uint8_t *keys);

/// acc[g * stride + i] = sum_j q_g[j] x_ij, the integer dot product of head g's int8 query and
/// token i's int4 key, for tokens i in [0, n) of `keys` (the array's first token is a block's
/// first) and heads g in [0, G): qf holds each head's query as floats (integers in [-127, 127]),
/// 2 hybrid_quant_bytes(d) of them per head, zero past d. Every partial sum is an integer below
/// 2^24 in magnitude for d <= 8192, so the f32 sums are exact in any order: the same integers as
/// ref::HybridLowRank::dot8's. stride 0: n.
void hybrid_quant_scan(const std::uint8_t *keys, std::size_t d, std::size_t n, const float *qf,
                       int G, float *acc, std::size_t stride = 0);

/// rank=quant's scores: z[i] = scale ((sq kscale[i]) acc[i]) (+ log_vnorms[i] when given), NaN
/// mapped to -inf, for i in [0, n): ref::hybrid_scores's doubles given sq = the query's int8
/// scale, the keys' scales and hybrid_quant_scan's integers (the same operations in the same
/// order).
void hybrid_quant_scores(const float *acc, const float *kscale, const double *log_vnorms,
                         std::size_t n, double sq, double scale, double *z);

/// rank=quant's sparse path (ref::HybridConfig::cut): the f32 products p_i = kscale[i] acc[i],
/// each within 2^-24 |p_i| of the exact one, whose positive multiple (by scale sq) the score is.
/// Their largest, and their largest magnitude, over the non-NaN ones (-inf and 0 for none).
void hybrid_quant_extent(const float *acc, const float *kscale, std::size_t n, float *max,
                         float *max_abs);
/// The tokens with p_i >= threshold (never a NaN one), ascending, into ids (n entries at most;
/// null: only counted); returns their count.
std::size_t hybrid_quant_above(const float *acc, const float *kscale, std::size_t n,
                               float threshold, std::uint32_t *ids);

} // namespace pig::runtime::lsh
