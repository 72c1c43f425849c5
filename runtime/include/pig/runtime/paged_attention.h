// Decode attention over a paged KV cache that another engine owns (vLLM's CPU engine: one tensor
// per layer, [blocks][kv_heads][2 * block_size][head_dim], a block's K rows then its V rows,
// both row-major), read in place through each sequence's block table: nothing of the cache is
// copied.
//
// It is not a second implementation: each request is the Attention pig-run and pig-serve decode
// with (MakeAttention: every method, plain and fitted hashing, per-layer points, every schedule),
// its KvCache a view of the engine's blocks (KvPool::External, KvCache::Adopt), and a call runs
// the rows of every request through one BatchAttention, as LlamaForward runs a batch's: one split
// over the threads, the keys and queries of every request hashed in one encode.
//
// The engine schedules; this class keeps, per request, what the method needs between steps (the
// LSH indexes, Quest's page bounds, lsh-hybrid's sketches), built from the cache pages the first
// time the request is seen past the static window (so keys the engine wrote without us, a
// prefix-cached prompt or a prefill, are indexed too), extended as tokens are generated, dropped
// by Free() when the request finishes or is preempted.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/index_share.h"
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
  /// shape.capacity: the longest sequence (the engine's max_model_len). Every method
  /// MakeAttention builds, over bf16 or f32 rows: the engine's cache holds its own element type,
  /// so q8 (pig's own row format) is refused with std::invalid_argument, as is any spec or shape
  /// MakeAttention refuses.
  PagedLshAttention(const AttentionSpec &spec, const AttentionShape &shape, size_t block_size);
  ~PagedLshAttention();

  /// The decode rows of one layer: out = attention of q over the request's n_tokens positions.
  /// Rows of one request may not repeat within a call. Throws std::invalid_argument (the state
  /// left as it was) for a row whose block table is too short or names a block outside the cache,
  /// a sequence longer than the capacity, a cache of another dtype or block size, or a scale
  /// other than the first call's (a request's attention is built with it).
  void Decode(size_t layer, const PagedCache &cache, std::span<const PagedRow> rows, float scale,
              ThreadPool &pool);
  /// Drops the request's state (every layer); unknown ids are ignored.
  void Free(std::string_view request);
  /// Requests with state.
  std::vector<std::string> Requests() const;
  /// Bytes of the requests' method state (LSH indexes with their fitted maps, page bounds,
  /// sketches), every layer and kv-head; the KV rows are the engine's.
  size_t IndexBytes() const;
  /// Summed over the requests, those freed included.
  AttentionStats stats() const;
  const AttentionSpec &spec() const { return spec_; }
  /// The indexes requests share over blocks that hold the same keys (spec.mean_window fixed;
  /// index_share.h): kept up to kSharedIndexBytes, least recently used first out.
  IndexShare::Stats SharedIndexStats() const;
  static constexpr size_t kSharedIndexBytes = size_t(1) << 30;

private:
  struct Request {
    std::unique_ptr<Attention> attention;
    std::vector<size_t> n; // [layer]: the positions of the last call
  };

  AttentionSpec spec_;
  AttentionShape shape_;
  size_t block_size_;
  std::shared_ptr<KvPool> pool_; // KvPool::External: the engine's blocks
  std::string kernels_;
  std::unordered_map<std::string, Request> requests_;
  BatchAttention batch_;
  std::vector<AttendSpan> spans_;
  AttentionStats freed_; // the counters of freed requests
};

} // namespace pig::runtime
