// lsh-hybrid's Hamming ranker as a kernel (docs/HYBRID.md): the L SimHash codes of a token packed
// into one bit string (its "sketch"), and a scan that counts, for every token and each of G query
// heads, the bits in which the token's sketch and the head's differ. The scan runs on the best
// Highway target (PopulationCount: VPOPCNTQ on AVX3_DL) and gives exactly pig::ref::hybrid_hamming.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pig::runtime::lsh {

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

} // namespace pig::runtime::lsh
