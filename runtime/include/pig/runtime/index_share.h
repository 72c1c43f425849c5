// The LSH indexes of cached prefixes, shared by every sequence that extends the prefix (issue
// 51; docs/SERVING.md, "Prefix caching"). One per KV pool (KvPool::shared_indexes).
//
// A sequence that attached a cached prefix (KvCache::Attach) holds the same KV blocks as the
// sequence that wrote them. When a (layer, kv-head)'s index is built, Acquire looks for an index
// built over those blocks: a node records the blocks (ids and KvPool stamps) its sequence held
// and, per (layer, kv-head), the frozen index over them (LshIndex::freeze). The caller then
// stands on it (LshIndex::on) and indexes only its own positions. Nothing is copied.
//
// Why the codes agree: the index's centring mean averages the first mean_window indexed keys
// (StaticTokens::mean_window), so it is a function of the shared positions; W is the spec's.
// Every shared key then has the code it would have in an index built by the sequence alone, and
// retrieval over (base, own part) returns the same tokens in the same order: logits are bit for
// bit those of the same request without the cache (prefix_cache_model_test). With
// mean_window == 0 (the paper's mean of every indexed key) nothing is shared.
//
// A node lives while its first blocks do: Collect drops the nodes whose blocks were given back
// and taken anew (their stamps changed) past the point where their mean was taken. Over an
// engine's blocks (vLLM: KvPool::External, which stamps nothing) the stamps are fingerprints of
// the very K rows a (layer, kv-head) index reads, and set_max_bytes bounds what is kept.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pig/runtime/lsh_index.h"

namespace pig::runtime {

class KvPool;

class IndexShare {
public:
  /// One (layer, kv-head)'s index build of one sequence.
  struct Request {
    std::string key;   ///< what changes the codes besides the keys: W, (K, L), sink, local, window
    std::size_t unit;  ///< layer * kv_heads + kv-head
    std::size_t units; ///< layers * kv_heads
    const std::int32_t *blocks = nullptr;  ///< the sequence's block table
    const std::uint64_t *stamps = nullptr; ///< KvPool::Stamps of blocks
    std::size_t n_blocks = 0;
    /// Leading blocks that another holder (a prefix cache) shares too: what a new node may name.
    std::size_t shared_blocks = 0;
    std::size_t block_tokens = 0;
    lsh::StaticTokens st;
    std::size_t n = 0; ///< positions the index is built over (LshIndex::build's n)
    /// The PrefixCache key of the prefix the sequence attached (0: none), whose blocks are the
    /// first shared_blocks: with SetDisk, a base over them is written under it and read back.
    std::uint64_t prefix_key = 0;
  };
  /// What Acquire decides.
  struct Share {
    /// Set: stand on it, LshIndex::on(base, limit).
    std::shared_ptr<const lsh::LshIndex> base;
    std::size_t limit = 0;
    /// Nonzero: build the base over the first `build` indexed tokens (LshIndex::build over
    /// sink + build + local positions), then Publish it (or Abandon on failure).
    std::size_t build = 0;
    std::shared_ptr<void> ticket;
  };
  struct Stats {
    std::size_t nodes = 0;
    std::size_t bytes = 0;  ///< tables of the frozen indexes
    std::size_t hits = 0;   ///< Acquire that returned a base
    std::size_t builds = 0; ///< bases built and published
    std::size_t disk_reads = 0, disk_writes = 0, disk_rejected = 0; ///< SetDisk's files
  };

  IndexShare();
  ~IndexShare();
  IndexShare(const IndexShare &) = delete;
  IndexShare &operator=(const IndexShare &) = delete;

  /// A base to stand on, a base to build, or neither (index privately: the prefix is shorter
  /// than the mean's window, or not shared). Waits while another thread builds the base this
  /// request would stand on. Thread-safe.
  Share Acquire(const Request &r);
  /// The base a Share with build > 0 asked for: other sequences may stand on it from now.
  void Publish(const Share &s, std::shared_ptr<const lsh::LshIndex> base);
  /// The build failed: the next Acquire of that unit builds it.
  void Abandon(const Share &s);
  /// Forgets the nodes whose blocks no longer hold what was indexed (given back to `pool`), and
  /// trims the others to the blocks that still do.
  void Collect(const KvPool &pool);
  /// Forgets every node (the bases live on in the indexes that stand on them).
  void Clear();
  /// Past this many bytes of bases (0: no limit), Publish forgets the least recently used nodes
  /// none of whose units is being built. For pools whose blocks it cannot stamp (an engine's:
  /// Collect cannot tell when their content changes), this bounds what finished requests leave.
  void set_max_bytes(std::size_t bytes);
  /// A disk tier in `dir` (made if missing; at most max_bytes of files, 0: no limit): a base
  /// published for a request with a prefix_key is written there (atomically: a versioned header
  /// naming the salt, the index parameters and the prefix; checksummed), and a request over the
  /// same prefix whose base is missing reads it back instead of building it, also after a
  /// restart. A truncated, corrupted, foreign or old-version file is a logged miss, rebuilt and
  /// rewritten. salt: the model's (PrefixCache's). Throws std::runtime_error when the
  /// directory cannot be made.
  void SetDisk(const std::string &dir, std::uint64_t salt, std::size_t max_bytes);
  /// The file of a request's (layer, kv-head) base in the disk tier (tests).
  std::string DiskPath(const Request &r) const;
  Stats stats() const;
  struct DiskHeader; ///< the disk tier's file header (index_share.cpp)

private:
  struct Node;
  mutable std::mutex mu_;
  std::condition_variable built_;
  std::size_t BytesLocked() const;
  std::shared_ptr<const lsh::LshIndex> ReadLocked(const Request &r);
  void Write(const std::string &path, DiskHeader head, const lsh::LshIndex &base);
  std::string dir_;
  std::uint64_t salt_ = 0;
  std::size_t disk_max_ = 0, disk_reads_ = 0, disk_writes_ = 0, disk_rejected_ = 0;
  std::vector<std::shared_ptr<Node>> nodes_;
  std::size_t hits_ = 0, builds_ = 0, max_bytes_ = 0;
  std::uint64_t clock_ = 0; // Acquire and Publish calls: nodes' last use
};

} // namespace pig::runtime
