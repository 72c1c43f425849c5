// Decode attention over a paged KV cache that another engine owns (vLLM's CPU engine: one tensor
// per layer, [blocks][kv_heads][2 * block_size][head_dim], a block's K rows then its V rows,
// both row-major), read in place through each sequence's block table (lsh::PagedRows): nothing
// of the cache is copied.
//
// The engine schedules; this class keeps, per (request, layer, kv-head), what MagicPIG needs
// between steps: the LSH index of the request's keys, built from the cache pages the first time
// the request is seen past the static window (so keys the engine wrote without us, a prefix-cached
// prompt or a prefill, are indexed too), extended as tokens are generated, dropped by Free() when
// the request finishes or is preempted. Each decode step is pig-run's (lsh_attention.h): sink and
// local tokens exact, the rest sampled; layers in spec.dense_layers and sequences too short to
// index are attended densely with the same kernels; method dense attends every layer densely.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_attention.h"
#include "pig/runtime/thread_pool.h"

namespace pig::runtime {

/// One layer's cache in the engine's layout.
struct PagedCache {
  const void *data = nullptr;
  lsh::DType dtype = lsh::DType::bf16;
  size_t num_blocks = 0;
  size_t block_size = 0; ///< rows of K (and of V) per block and kv-head
};

/// One decode row: a request's newest token, whose K and V are already in the cache.
struct PagedRow {
  std::string_view request;
  std::span<const std::int32_t> blocks; ///< the request's block table (at least ceil(n / bs))
  size_t n_tokens = 0;                  ///< positions in the cache, the new one included
  const float *q = nullptr;             ///< n_heads * head_dim, head-major
  float *out = nullptr;                 ///< n_heads * head_dim
};

class PagedLshAttention {
public:
  /// shape.capacity: the longest sequence (the engine's max_model_len). Methods served: dense and
  /// magicpig with bf16 or f32 rows (the others need state this class does not keep: refused
  /// with std::invalid_argument, as is any spec AttentionSpec::Validate refuses).
  PagedLshAttention(const AttentionSpec &spec, const AttentionShape &shape, size_t block_size);
  ~PagedLshAttention();

  /// The decode rows of one layer: out = attention of q over the request's n_tokens positions.
  /// Rows of one request may not repeat within a call. Throws std::invalid_argument (the state
  /// left as it was) for a row whose block table is too short or names a block outside the cache,
  /// a sequence longer than the capacity, or a cache of another dtype or block size.
  void Decode(size_t layer, const PagedCache &cache, std::span<const PagedRow> rows, float scale,
              ThreadPool &pool);
  /// Drops the request's state (every layer); unknown ids are ignored.
  void Free(std::string_view request);
  /// Requests with state.
  std::vector<std::string> Requests() const;
  /// Index bytes held (every request, layer and kv-head).
  size_t IndexBytes() const;
  AttentionStats stats() const;
  const AttentionSpec &spec() const { return spec_; }

private:
  struct Request {
    std::vector<std::optional<lsh::LshIndex>> index; // [layer * n_kv_heads + kvh]
  };
  struct PerThread;
  struct Unit;
  size_t Indexable(size_t n_tokens) const;
  // A (row, kv-head)'s step in three phases: Prepare attends it densely, or builds its index at
  // first sight and gives the rows to hash (the keys joining the index, the group's queries);
  // Decode hashes every unit's rows in one encode; Sample extends, retrieves and attends.
  void Prepare(size_t layer, const PagedCache &cache, const PagedRow &row, Request &req, size_t kvh,
               float scale, PerThread &pt, Unit &u);
  void Sample(size_t layer, const PagedCache &cache, const PagedRow &row, Request &req, size_t kvh,
              float scale, PerThread &pt, Unit &u);

  AttentionSpec spec_;
  AttentionShape shape_;
  size_t block_size_;
  LshLayers layers_;
  std::unordered_map<std::string, Request> requests_;
  std::vector<std::unique_ptr<PerThread>> threads_;
  std::vector<Unit> units_;       // [row * n_kv_heads + kvh] of the current call
  std::vector<float> batch_rows_; // every unit's rows to hash, one f32 matrix
  std::vector<std::uint16_t> batch_codes_;
  CostCounters total_;
  size_t decode_steps_ = 0;
};

} // namespace pig::runtime
