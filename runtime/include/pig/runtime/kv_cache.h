// The KV store of one sequence: keys and values of every (layer, kv-head), position-major rows of
// head_dim elements in f32, bf16 (round to nearest even) or q8 (8-bit, a bf16 scale per block of
// 32 elements: pig/reference/kv_quant.h, docs/KV8.md). Dense attention and every sparse attention
// read the same store, so a comparison between them never mixes element types.
//
// Non-finite elements are stored, never refused: f32 keeps them, bf16 rounds them to bf16's NaN
// or infinity, and q8 gives a block holding a NaN or an infinity the scale NaN (codes 0), so all
// 32 elements of that block read back as NaN (pig::ref::q8_scale_for) and the other blocks of
// the row are unaffected. Attention that reads such a row answers NaN, in every element type.
//
// Layout: [layer][kv_head][position][row]: a (layer, kv-head) is n rows of lsh::row_bytes(dtype,
// head_dim) bytes back to back, which is what the LSH kernels take (lsh_kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "pig/runtime/lsh_index.h" // HugeVector
#include "pig/runtime/lsh_kernels.h"

namespace pig::runtime {

struct AttentionShape {
  size_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t capacity = 0; // positions the cache can hold
  size_t group() const { return n_kv_heads ? n_heads / n_kv_heads : 0; }
};

class KvCache {
public:
  using DType = lsh::DType;
  /// Allocates capacity rows per (layer, kv-head) (2 MiB pages where the kernel allows them).
  /// Throws std::invalid_argument for an odd head dim, heads not in whole GQA groups, or a head
  /// dim the element type cannot store (q8: a multiple of 32).
  KvCache(const AttentionShape &shape, DType dtype);

  /// What the constructor refuses (std::invalid_argument), without allocating.
  static void Check(const AttentionShape &shape, DType dtype);
  /// The bytes the constructor allocates (MemoryBytes() of the new cache: K and V), without
  /// allocating; std::length_error when that does not fit in a size_t.
  static size_t BytesFor(const AttentionShape &shape, DType dtype);

  /// Stores the keys and values of positions [pos, pos + n) of `layer`: k, v are n x
  /// (n_kv_heads * head_dim) f32, row-major. Throws std::runtime_error past the capacity.
  void Append(size_t layer, size_t pos, size_t n, const float *k, const float *v);
  /// Copies positions [0, n) of every layer from `other` (same shape; rows of another element
  /// type are converted through f32, as Append would store them).
  void CopyPrefix(const KvCache &other, size_t n);
  /// Fills positions [0, n) with positions [0, period) of `other` repeated (benchmarks: a long
  /// context made of real keys and values from a shorter prefill), converted like CopyPrefix.
  void Tile(const KvCache &other, size_t period, size_t n);

  /// The capacity rows of one (layer, kv-head), of RowBytes() bytes each.
  const void *Keys(size_t layer, size_t kvh) const { return Row(k_, layer, kvh, 0); }
  const void *Values(size_t layer, size_t kvh) const { return Row(v_, layer, kvh, 0); }
  /// One row converted to f32 (head_dim floats).
  void KeyRow(size_t layer, size_t kvh, size_t pos, float *out) const;
  void ValueRow(size_t layer, size_t kvh, size_t pos, float *out) const;
  /// Positions [0, n) of one (layer, kv-head) converted to f32, n x head_dim floats each into
  /// `keys` and `values` (either may be null).
  void ReadRows(size_t layer, size_t kvh, size_t n, float *keys, float *values) const;

  DType dtype() const { return dtype_; }
  const AttentionShape &shape() const { return shape_; }
  /// Bytes of one row of head_dim elements.
  size_t RowBytes() const { return lsh::row_bytes(dtype_, shape_.head_dim); }
  /// Bytes of K and V of one token over all layers and kv-heads.
  size_t BytesPerToken() const;
  size_t MemoryBytes() const { return k_.size() + v_.size(); }

private:
  // Positions [from, from + m) of `other` to [to, to + m) of this cache, every layer and kv-head.
  void CopyRows(const KvCache &other, size_t from, size_t to, size_t m);
  const std::uint8_t *Row(const lsh::HugeVector<std::uint8_t> &m, size_t layer, size_t kvh,
                          size_t pos) const {
    return m.data() + ((layer * shape_.n_kv_heads + kvh) * shape_.capacity + pos) * RowBytes();
  }
  std::uint8_t *Row(lsh::HugeVector<std::uint8_t> &m, size_t layer, size_t kvh, size_t pos) {
    return const_cast<std::uint8_t *>(std::as_const(*this).Row(m, layer, kvh, pos));
  }

  AttentionShape shape_;
  DType dtype_;
  lsh::HugeVector<std::uint8_t> k_, v_;
};

} // namespace pig::runtime
