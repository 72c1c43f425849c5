// Prompt prefixes shared across sequences: the KV blocks of prompts already prefilled, found again
// by their tokens, so a new sequence that starts with the same tokens (a follow-up question on a
// long document, the next turn of a chat, a system prompt) attaches those blocks instead of
// prefilling them again.
//
// A block of kKvBlockTokens positions is named by a hash chain: its key is the hash of the key of
// the block before it and of its own token ids (the first block's "before" is the salt: what else
// changes the rows, the model; the element type is the pool's, one cache per pool). Entries keep
// the token ids, so a hash collision is a miss, never a wrong prefix. Only full blocks are cached,
// so a hit ends on a block boundary; the sequence recomputes its prompt from there (a hit inside a
// block is rounded down: the block's tail is recomputed, never copied). At least two of the
// prompt's tokens are always left to compute: a one-row span would be a decode step (the integer
// weight path, sparse attention), and the last token's logits are needed anyway.
//
// Rows are bit-identical to recomputing them: a prompt's K and V rows do not depend on how the
// prompt was chunked or batched (LlamaForward), and a cached block is only ever filled by prompt
// chunks (the engine inserts a prompt once it is prefilled). The LSH index, Quest's bounds and
// lsh-hybrid's sketches are not shared yet: each sequence builds them from the shared rows at its
// first decode step, as it would from rows of its own (docs/SERVING.md, Prefix cache).
//
// Blocks are reference-counted in the pool (KvPool::Share): the cache holds one reference and one
// reservation per cached block; a sequence that attaches a block holds another. Blocks no sequence
// holds are evicted least recently used when the pool is short (KvPool::SetEvictor), leaves of the
// chain first; a block a sequence holds is never evicted.
//
// A disk tier (SetDisk): a cached block is also written to DIR, one file per block named by its
// key (a versioned header with the salt, the shape and element type, the block's tokens and its
// parent's key, then the rows, checksummed; written atomically), and a lookup that leaves memory
// continues on disk, also after a restart. A truncated, corrupted, foreign or old-version file is
// a logged miss (and rewritten at the next insert of its block), never a wrong prefix. The
// directory is kept under its size limit by removing the oldest files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pig/runtime/kv_cache.h"

namespace pig::runtime {

/// A 64-bit hash of a file's bytes (the model's identity in the disk tier's salt). Throws
/// std::runtime_error when the file cannot be read.
std::uint64_t FileHash(const std::string &path);

class PrefixCache {
public:
  struct Stats {
    std::uint64_t lookups = 0;       ///< Lookup calls
    std::uint64_t hits = 0;          ///< ... that found at least one block
    std::uint64_t hit_tokens = 0;    ///< positions served from the cache
    std::uint64_t evictions = 0;     ///< blocks evicted
    std::uint64_t inserted = 0;      ///< blocks ever cached
    size_t blocks = 0;               ///< blocks cached now
    size_t bytes = 0;                ///< ... in bytes (each counted once, however many hold it)
    std::uint64_t disk_reads = 0;    ///< blocks read back from the disk tier
    std::uint64_t disk_writes = 0;   ///< blocks written to it
    std::uint64_t disk_rejected = 0; ///< files refused (truncated, corrupt, foreign, old)
    size_t disk_bytes = 0;           ///< the disk tier's files now
    /// Sums another cache's (several pools: one cache each).
    Stats &operator+=(const Stats &o);
  };

  /// A cache over `pool` (own blocks, not an engine's); salt: what else names the rows (the
  /// model). Registers itself as the pool's evictor (one cache per pool).
  PrefixCache(std::shared_ptr<KvPool> pool, std::uint64_t salt);
  ~PrefixCache();
  PrefixCache(const PrefixCache &) = delete;
  PrefixCache &operator=(const PrefixCache &) = delete;

  /// The blocks of the longest cached prefix of tokens[0, n), leaving at least two tokens to
  /// compute: their ids in `blocks` (replaced); returns the positions they hold. key: the last
  /// block's key (its chain names the prefix and the model), 0 without a hit.
  size_t Lookup(const std::int32_t *tokens, size_t n, std::vector<std::int32_t> &blocks,
                std::uint64_t *key = nullptr);
  /// Caches the full blocks of a sequence's prompt tokens[0, n), whose rows `table` holds (its
  /// KvCache::blocks()); blocks already cached are kept as they are. Where the pool cannot reserve
  /// a block even after evicting, the rest of the prompt is not cached.
  void Insert(const std::int32_t *tokens, size_t n, const std::vector<std::int32_t> &table);
  /// Evicts up to `blocks` cached blocks no sequence holds, least recently used first; returns
  /// how many.
  size_t Evict(size_t blocks);
  /// Evicts every block no sequence holds.
  void Clear();
  /// The most blocks the cache holds (0: as many as the pool gives); Insert evicts the least
  /// recently used to stay within it.
  void set_max_blocks(size_t blocks);
  /// A new salt (the rows of the old one are computed otherwise): the cached blocks no sequence
  /// holds are evicted, the others are never found again.
  void set_salt(std::uint64_t salt);
  /// The disk tier in `dir` (made if missing), at most max_bytes of files (0: no limit). The
  /// salt must name the model file itself (FileHash), not only its shape. Throws
  /// std::runtime_error when the directory cannot be made.
  void SetDisk(const std::string &dir, size_t max_bytes);
  /// The file of a block's key in the disk tier (tests).
  std::string DiskPath(std::uint64_t key) const;
  /// The key of the first block of `tokens` (tests: DiskPath(FirstKey(t))).
  std::uint64_t FirstKey(const std::int32_t *tokens) const { return Key(salt_, tokens); }
  /// The format version of the disk tier's files.
  static constexpr std::uint32_t kDiskVersion = 1;
  Stats stats() const;
  const KvPool &pool() const { return *pool_; }

private:
  struct Entry {
    std::uint64_t parent = 0; // the key of the block before (the salt for the first)
    std::vector<std::int32_t> tokens;
    std::int32_t block = -1;
    std::uint64_t used = 0; // the clock at the last Lookup or Insert that met it
    size_t children = 0;    // cached blocks that continue it
    bool pinned = false;    // met by the Lookup under way: not evicted by its disk reads
  };
  std::uint64_t Key(std::uint64_t parent, const std::int32_t *tokens) const;
  size_t EvictLocked(size_t blocks);
  // The disk tier: a block's file written (unless a good one is there), read back into a block
  // the cache takes (-1: no usable file), and the directory trimmed to its limit.
  void WriteBlock(std::uint64_t key, std::uint64_t parent, const std::int32_t *tokens,
                  std::int32_t block);
  std::int32_t ReadBlock(std::uint64_t key, std::uint64_t parent, const std::int32_t *tokens);
  void TrimDisk();

  std::shared_ptr<KvPool> pool_;
  std::uint64_t salt_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::uint64_t clock_ = 0;
  size_t max_blocks_ = 0;
  Stats stats_;
  std::string dir_;
  size_t disk_max_ = 0;
  std::unordered_map<std::uint64_t, bool> bad_; // keys whose file was refused: rewrite them
};

} // namespace pig::runtime
