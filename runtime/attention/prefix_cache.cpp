#include "pig/runtime/prefix_cache.h"

#include <algorithm>
#include <stdexcept>

namespace pig::runtime {
namespace {

std::uint64_t Mix(std::uint64_t h, std::uint64_t x) {
  // splitmix64's finaliser over the running state: a well-spread 64-bit key.
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

} // namespace

PrefixCache::PrefixCache(std::shared_ptr<KvPool> pool, std::uint64_t salt)
    : pool_(std::move(pool)), salt_(salt) {
  if (!pool_ || pool_->external())
    throw std::invalid_argument("prefix cache: a pool of pig's own blocks is needed");
  pool_->SetEvictor([this](size_t blocks) { return Evict(blocks); });
}

PrefixCache::~PrefixCache() {
  pool_->SetEvictor(nullptr);
  std::lock_guard lock(mu_);
  for (const auto &[key, e] : entries_) {
    pool_->Give(e.block);
    pool_->Unreserve(1);
  }
}

std::uint64_t PrefixCache::Key(std::uint64_t parent, const std::int32_t *tokens) const {
  std::uint64_t h = Mix(salt_, parent);
  for (size_t i = 0; i < pool_->block_tokens(); ++i)
    h = Mix(h, std::uint32_t(tokens[i]));
  return h;
}

size_t PrefixCache::Lookup(const std::int32_t *tokens, size_t n,
                           std::vector<std::int32_t> &blocks) {
  blocks.clear();
  const size_t bt = pool_->block_tokens();
  const size_t most = n >= 2 ? (n - 2) / bt : 0; // two tokens left to compute
  std::lock_guard lock(mu_);
  ++stats_.lookups;
  ++clock_;
  std::uint64_t parent = salt_;
  for (size_t b = 0; b < most; ++b) {
    const std::int32_t *t = tokens + b * bt;
    const std::uint64_t key = Key(parent, t);
    const auto it = entries_.find(key);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(it->second.tokens.begin(), it->second.tokens.end(), t))
      break;
    it->second.used = clock_;
    blocks.push_back(it->second.block);
    parent = key;
  }
  if (!blocks.empty()) {
    ++stats_.hits;
    stats_.hit_tokens += blocks.size() * bt;
  }
  return blocks.size() * bt;
}

void PrefixCache::Insert(const std::int32_t *tokens, size_t n,
                         const std::vector<std::int32_t> &table) {
  const size_t bt = pool_->block_tokens();
  const size_t full = std::min(n / bt, table.size());
  std::uint64_t parent = salt_;
  for (size_t b = 0; b < full; ++b) {
    const std::int32_t *t = tokens + b * bt;
    const std::uint64_t key = Key(parent, t);
    {
      std::lock_guard lock(mu_);
      ++clock_;
      const auto it = entries_.find(key);
      if (it != entries_.end()) {
        if (it->second.parent != parent ||
            !std::equal(it->second.tokens.begin(), it->second.tokens.end(), t))
          return; // a collision: this prompt's rest stays uncached
        it->second.used = clock_;
        parent = key;
        continue;
      }
    }
    {
      std::lock_guard lock(mu_);
      if (max_blocks_ && entries_.size() >= max_blocks_ && EvictLocked(1) == 0)
        return; // full of blocks in use
    }
    // The cache's own reservation for the block (the sequence's goes when it ends); not under
    // the lock: a short pool calls back into Evict.
    try {
      pool_->Reserve(1);
    } catch (const std::length_error &) {
      return;
    }
    std::lock_guard lock(mu_);
    pool_->Share(table[b]);
    Entry e;
    e.parent = parent;
    e.tokens.assign(t, t + bt);
    e.block = table[b];
    e.used = ++clock_;
    if (parent != salt_)
      if (const auto p = entries_.find(parent); p != entries_.end())
        ++p->second.children;
    entries_.emplace(key, std::move(e));
    ++stats_.inserted;
    parent = key;
  }
}

size_t PrefixCache::EvictLocked(size_t blocks) {
  size_t done = 0;
  while (done < blocks) {
    // The least recently used leaf that no sequence holds (the cache's own reference only).
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.children == 0 && pool_->Holders(it->second.block) == 1 &&
          (victim == entries_.end() || it->second.used < victim->second.used))
        victim = it;
    if (victim == entries_.end())
      break;
    if (const auto p = entries_.find(victim->second.parent); p != entries_.end())
      --p->second.children;
    pool_->Give(victim->second.block);
    pool_->Unreserve(1);
    entries_.erase(victim);
    ++stats_.evictions;
    ++done;
  }
  return done;
}

size_t PrefixCache::Evict(size_t blocks) {
  std::lock_guard lock(mu_);
  return EvictLocked(blocks);
}

void PrefixCache::set_max_blocks(size_t blocks) {
  std::lock_guard lock(mu_);
  max_blocks_ = blocks;
  if (blocks && entries_.size() > blocks)
    EvictLocked(entries_.size() - blocks);
}

void PrefixCache::Clear() {
  std::lock_guard lock(mu_);
  EvictLocked(entries_.size());
}

PrefixCache::Stats PrefixCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.blocks = entries_.size();
  s.bytes = entries_.size() * pool_->BlockBytes();
  return s;
}

} // namespace pig::runtime
