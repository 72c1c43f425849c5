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
// Layout: paged. A KvPool holds blocks of kKvBlockTokens positions; a block holds those
// positions' K and V rows of every layer and kv-head, [layer][kv_head][K rows | V rows][row], so
// one block table serves every (layer, kv-head) (lsh::PagedRows: page_stride is the block's
// bytes). A KvCache is one sequence's block table over a pool: it takes blocks as the sequence
// grows, never more than its capacity needs, and returns them when it ends. The kernels read the
// rows in place through the table, bit for bit as they read rows back to back.
//
// A pool can also be a view of blocks another engine owns and writes (KvPool::External: vLLM's
// CPU cache, one tensor per layer, [blocks][kv_heads][K rows | V rows][row]): a cache over it is
// handed the engine's block table (KvCache::Adopt) and appends positions whose rows are already
// stored (Append with null k and v), so every Attention reads the engine's cache in place.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/lsh_step.h" // KvRows

namespace pig::runtime {

class IndexShare; // index_share.h

struct AttentionShape {
  size_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  size_t capacity = 0; // positions the cache can hold
  /// The logits' scale: 0 means 1 / sqrt(head_dim) (what every model pig loads uses; an engine
  /// may pass its own: PagedLshAttention).
  float scale = 0;
  /// Per layer, the sliding window: the layer's query at position p attends [p + 1 - w, p], the
  /// last w positions (Mistral, Gemma's local layers, transformers' sliding_window). Empty, or 0
  /// for a layer: every cached position (a global layer). The cache still keeps every position.
  std::vector<std::uint32_t> windows{};
  /// Attention logit soft-capping (Gemma 2): each logit s becomes c tanh(s / c); 0: none.
  float softcap = 0;
  size_t group() const { return n_kv_heads ? n_heads / n_kv_heads : 0; }
  /// The window of `layer`, 0 for a global layer.
  size_t Window(size_t layer) const { return layer < windows.size() ? windows[layer] : 0; }
  /// Whether any layer attends within a window.
  bool Windowed() const {
    for (std::uint32_t w : windows)
      if (w)
        return true;
    return false;
  }
  /// The first position a query of `layer` attends when it attends up to `end` (exclusive).
  size_t Begin(size_t layer, size_t end) const {
    const size_t w = Window(layer);
    return w && end > w ? end - w : 0;
  }
  /// The scale the kernels take (f32).
  float Scale() const { return scale > 0 ? scale : 1.0f / std::sqrt(float(head_dim)); }
  /// The scale in double (the budget methods' scores, as pig::ref computes them).
  double ScaleD() const { return scale > 0 ? double(scale) : 1.0 / std::sqrt(double(head_dim)); }
};

/// Positions per block of a KvPool unless its constructor is told otherwise: a block of a
/// (layer, kv-head) is 64 rows back to back (8 KiB of bf16 rows at d = 64), long enough that the
/// kernels stream it like contiguous rows.
inline constexpr size_t kKvBlockTokens = 64;

/// Fixed-size blocks of K and V rows for every layer and kv-head of a model shape (its capacity
/// is ignored), in one mapping that is reserved, not committed: a block's memory is touched when a
/// cache first writes it, so the pool's resident bytes are the blocks ever taken (ResidentBytes),
/// not its size. Admission is by blocks: Reserve counts blocks a cache may take later, and Take
/// never fails for a block reserved before. A pool of max_blocks == 0 has no limit but the
/// address space it could map. Reserve, Take and Give are thread-safe.
class KvPool {
public:
  using DType = lsh::DType;
  /// Throws std::invalid_argument as KvCache::Check, or for block_tokens == 0;
  /// std::length_error when the blocks do not fit in a size_t (or a block id);
  /// std::bad_alloc when the address space cannot be reserved.
  KvPool(const AttentionShape &shape, DType dtype, size_t max_blocks,
         size_t block_tokens = kKvBlockTokens);
  ~KvPool();
  KvPool(const KvPool &) = delete;
  KvPool &operator=(const KvPool &) = delete;

  /// A view of an engine's cache: per layer one region of blocks of block_tokens positions, a
  /// block holding each kv-head's K rows then its V rows ([blocks][kv_heads][2 * block_tokens]
  /// [row]). Nothing is mapped or reserved; SetLayer names each layer's region before a cache over
  /// the pool is read. Throws std::invalid_argument as KvCache::Check, or for block_tokens == 0.
  static std::shared_ptr<KvPool> External(const AttentionShape &shape, DType dtype,
                                          size_t block_tokens);
  /// External pools: layer `layer`'s region (num_blocks blocks) from now on. Throws
  /// std::invalid_argument for a layer outside the shape, a null region or an own pool.
  void SetLayer(size_t layer, const void *base, size_t num_blocks);
  /// Whether the blocks are an engine's (External).
  bool external() const { return external_; }
  /// External pools: the blocks of layer `layer`'s region (0 before SetLayer).
  size_t layer_blocks(size_t layer) const { return layer_blocks_.at(layer); }

  /// Bytes of one block (every layer and kv-head, K and V), without constructing a pool.
  static size_t BlockBytesFor(const AttentionShape &shape, DType dtype,
                              size_t block_tokens = kKvBlockTokens);
  /// Blocks that hold `positions` positions: ceil(positions / block_tokens).
  static size_t BlocksFor(size_t positions, size_t block_tokens = kKvBlockTokens) {
    return positions / block_tokens + (positions % block_tokens != 0);
  }

  /// Sets aside n blocks for a cache to take later; throws std::length_error, naming what is
  /// free, when the pool cannot (the pool unchanged).
  void Reserve(size_t n);
  /// Returns n reserved blocks that were not taken.
  void Unreserve(size_t n);
  /// One of the blocks reserved before (the lowest free id): a block id for a block table.
  std::int32_t Take();
  /// Returns a taken block (it stays reserved until Unreserve): drops one holder; the block is
  /// free once none is left.
  void Give(std::int32_t block);
  /// One more holder of a taken block (a prefix several caches share, PrefixCache): it is free
  /// once every holder gave it back. Rows of a block with several holders are never written
  /// (KvCache copies it first).
  void Share(std::int32_t block);
  /// The holders of a block (0: free).
  std::uint32_t Holders(std::int32_t block) const;
  /// Each block's stamp: a number that names what the block holds, unique to one taking of it
  /// (a block given back and taken again gets a new one; rows of a shared block are never
  /// rewritten), 0 for a free block. An index over a prefix records its blocks' stamps, and serves
  /// a sequence only while the sequence's blocks have the same (IndexShare). holders: each
  /// block's Holders() too, when not null.
  void Stamps(const std::int32_t *blocks, size_t n, std::uint64_t *out,
              std::uint32_t *holders = nullptr) const;
  /// The LSH indexes built over this pool's cached prefixes (index_share.h).
  IndexShare &shared_indexes() const { return *shared_indexes_; }
  /// What Reserve calls when the pool is short, with the blocks missing: it gives back blocks it
  /// holds (a prefix cache's least recently used) and returns how many. Null: none.
  void SetEvictor(std::function<size_t(size_t)> evictor);

  /// The rows of (layer, kv-head) of block 0, K or V: the base of lsh::PagedRows.
  const std::uint8_t *Base(size_t layer, size_t kvh, bool values) const {
    return layer_base_[layer] + (kvh * 2 + (values ? 1 : 0)) * block_tokens_ * row_bytes_;
  }
  std::uint8_t *Row(std::int32_t block, size_t layer, size_t kvh, bool values, size_t row) {
    return const_cast<std::uint8_t *>(Base(layer, kvh, values)) + size_t(block) * block_bytes_ +
           row * row_bytes_;
  }
  /// The page table of a block table (block_tokens rows a page, BlockBytes() apart; in an
  /// external pool a block is one layer's, so its pages are a layer's block apart).
  lsh::PagedRows Paging(const std::int32_t *table) const {
    return {table, block_tokens_, block_bytes_};
  }

  const AttentionShape &shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  size_t block_tokens() const { return block_tokens_; }
  /// Bytes from one block to the next: a block of every layer (own pools), of one layer
  /// (external).
  size_t BlockBytes() const { return block_bytes_; }
  size_t RowBytes() const { return row_bytes_; }
  /// 0: no limit.
  size_t max_blocks() const { return max_blocks_; }
  size_t reserved_blocks() const;
  size_t taken_blocks() const;
  /// The blocks ever taken at once (their memory is committed): the pool's resident bytes.
  size_t ResidentBytes() const;

private:
  KvPool(const AttentionShape &shape, DType dtype, size_t max_blocks, size_t block_tokens,
         bool external);

  AttentionShape shape_;
  DType dtype_;
  size_t block_tokens_, row_bytes_, block_bytes_, max_blocks_, mapped_blocks_ = 0;
  std::uint8_t *region_ = nullptr;
  size_t mapped_bytes_ = 0;
  bool external_ = false;
  std::vector<const std::uint8_t *> layer_base_; // layer l's block 0
  std::vector<size_t> layer_blocks_;             // external: each layer's blocks
  struct State;
  std::unique_ptr<State> state_;
  std::unique_ptr<IndexShare> shared_indexes_;
};

class KvCache {
public:
  using DType = lsh::DType;
  /// A cache of shape.capacity positions: over `pool` when given (a pool several caches share,
  /// of this shape and dtype), else over a pool of its own that holds exactly the blocks the
  /// capacity needs. Reserves those blocks (std::length_error, naming what the pool has free,
  /// when it cannot) and takes them as positions are appended. Throws std::invalid_argument for
  /// an odd head dim, heads not in whole GQA groups, a head dim the element type cannot store
  /// (q8: a multiple of 32), or a pool of another shape or dtype.
  KvCache(const AttentionShape &shape, DType dtype, std::shared_ptr<KvPool> pool = nullptr);
  ~KvCache();
  KvCache(const KvCache &) = delete;
  KvCache &operator=(const KvCache &) = delete;

  /// What the constructor refuses (std::invalid_argument), without allocating.
  static void Check(const AttentionShape &shape, DType dtype);
  /// The bytes the cache's blocks take once every position is used (what a memory budget
  /// reserves for it), without allocating; std::length_error when that does not fit in a size_t.
  static size_t BytesFor(const AttentionShape &shape, DType dtype);

  /// Stores the keys and values of positions [pos, pos + n) of `layer`: k, v are n x
  /// (n_kv_heads * head_dim) f32, row-major. Takes the blocks [0, pos + n) needs. Throws
  /// std::runtime_error past the capacity. Over an external pool k and v must be null (the
  /// engine stored the rows) and the adopted table must hold the positions (std::runtime_error);
  /// null k and v over an own pool are std::invalid_argument.
  void Append(size_t layer, size_t pos, size_t n, const float *k, const float *v);
  /// External pools: the engine's block table, whose first ceil(n / block_tokens) entries hold
  /// positions [0, n). Throws std::invalid_argument for an own pool, n past the capacity, a
  /// table shorter than n needs or a block outside a layer's region (the table left as it was).
  void Adopt(const std::int32_t *blocks, size_t n_blocks, size_t n);
  /// Copies positions [0, n) of every layer from `other` (same shape; rows of another element
  /// type are converted through f32, as Append would store them).
  void CopyPrefix(const KvCache &other, size_t n);
  /// Fills positions [0, n) with positions [0, period) of `other` repeated (benchmarks: a long
  /// context made of real keys and values from a shorter prefill), converted like CopyPrefix.
  void Tile(const KvCache &other, size_t period, size_t n);
  /// Returns every block to the pool (the positions are forgotten; the reservation is kept).
  void Clear();
  /// Takes `n_blocks` full blocks another cache holds as this cache's positions [0, n_blocks *
  /// block_tokens) (a cached prompt prefix, PrefixCache): shared, not copied; this cache's own
  /// reservation shrinks by as many blocks. A block it later rewrites (after SetPosition back) is
  /// copied first. Throws std::logic_error unless the cache is empty, std::invalid_argument past
  /// the capacity or over an external pool.
  void Attach(const std::int32_t *blocks, size_t n_blocks);

  /// The K and V rows of one (layer, kv-head), in pages: what the kernels take. Valid until the
  /// next Append, CopyPrefix, Tile or Clear.
  lsh::KvRows Rows(size_t layer, size_t kvh) const {
    return {pool_->Base(layer, kvh, false), pool_->Base(layer, kvh, true), dtype_, shape_.head_dim,
            pool_->Paging(table_.data())};
  }
  /// One stored row (RowBytes() bytes of the element type).
  const void *KeyAt(size_t layer, size_t kvh, size_t pos) const {
    return At(layer, kvh, false, pos);
  }
  const void *ValueAt(size_t layer, size_t kvh, size_t pos) const {
    return At(layer, kvh, true, pos);
  }
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
  /// The blocks held now, in bytes: what the cache uses (a sequence of 1k positions in a cache
  /// of 8k holds 1k, rounded up to a block). 0 over an external pool (the engine's memory).
  size_t MemoryBytes() const { return pool_->external() ? 0 : table_.size() * pool_->BlockBytes(); }
  /// The blocks the capacity needs, in bytes: what MemoryBytes() can grow to (0: external).
  size_t ReservedBytes() const { return reserved_ * pool_->BlockBytes(); }
  /// The block table (one block id per kKvBlockTokens positions held).
  const std::vector<std::int32_t> &blocks() const { return table_; }
  const KvPool &pool() const { return *pool_; }

private:
  const void *At(size_t layer, size_t kvh, bool values, size_t pos) const {
    const size_t bt = pool_->block_tokens();
    return pool_->Base(layer, kvh, values) + size_t(table_[pos / bt]) * pool_->BlockBytes() +
           (pos % bt) * pool_->RowBytes();
  }
  void *At(size_t layer, size_t kvh, bool values, size_t pos) {
    return const_cast<void *>(std::as_const(*this).At(layer, kvh, values, pos));
  }
  // Takes blocks until positions [0, n) are held (n <= capacity).
  void Hold(size_t n);
  // Positions [from, from + m) of `other` to [to, to + m) of this cache, every layer and kv-head.
  void CopyRows(const KvCache &other, size_t from, size_t to, size_t m);

  // Before positions [pos, pos + n) are written: a block among them that others hold too is
  // replaced by a copy of its own.
  void Unshare(size_t pos, size_t n);

  AttentionShape shape_;
  DType dtype_;
  std::shared_ptr<KvPool> pool_;
  size_t reserved_ = 0;                // blocks reserved in the pool for this cache
  std::vector<std::int32_t> table_;    // blocks held, in position order
  std::vector<std::uint8_t> borrowed_; // [block of table_]: attached (another's reservation)
};

} // namespace pig::runtime
