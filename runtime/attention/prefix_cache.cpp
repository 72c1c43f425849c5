#include "pig/runtime/prefix_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "byte_hash.h"
#include "pig/spec/files.h"

namespace pig::runtime {
namespace {

// The disk tier's file: this header, the block's token ids, its rows (KvPool::BlockBytes).
struct DiskHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t dtype;
  std::uint64_t salt, key, parent;
  std::uint32_t block_tokens, n_layers, n_kv_heads, head_dim;
  std::uint64_t payload_bytes;
  std::uint64_t checksum; // over the header (this field 0), the tokens and the rows
};
constexpr char kMagic[8] = {'P', 'I', 'G', 'K', 'V', 'B', 'K', '\0'};

} // namespace

std::uint64_t FileHash(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::vector<char> buf(size_t(1) << 20);
  std::uint64_t h = 0x6d6f64656cull;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    h = detail::HashBytes(h, buf.data(), size_t(in.gcount()));
  }
  if (in.bad())
    throw std::runtime_error("cannot read " + path);
  return h;
}

PrefixCache::Stats &PrefixCache::Stats::operator+=(const Stats &o) {
  lookups += o.lookups;
  hits += o.hits;
  hit_tokens += o.hit_tokens;
  evictions += o.evictions;
  inserted += o.inserted;
  blocks += o.blocks;
  bytes += o.bytes;
  disk_reads += o.disk_reads;
  disk_writes += o.disk_writes;
  disk_rejected += o.disk_rejected;
  disk_bytes += o.disk_bytes;
  return *this;
}

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
  std::uint64_t h = detail::Mix(salt_, parent);
  for (size_t i = 0; i < pool_->block_tokens(); ++i)
    h = detail::Mix(h, std::uint32_t(tokens[i]));
  return h;
}

size_t PrefixCache::Lookup(const std::int32_t *tokens, size_t n, std::vector<std::int32_t> &blocks,
                           std::uint64_t *key_out) {
  blocks.clear();
  const size_t bt = pool_->block_tokens();
  const size_t most = n >= 2 ? (n - 2) / bt : 0; // two tokens left to compute
  std::unique_lock lock(mu_);
  ++stats_.lookups;
  ++clock_;
  std::uint64_t parent = salt_;
  for (size_t b = 0; b < most; ++b) {
    const std::int32_t *t = tokens + b * bt;
    const std::uint64_t key = Key(parent, t);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.parent != parent ||
          !std::equal(it->second.tokens.begin(), it->second.tokens.end(), t))
        break; // a collision: a miss
      it->second.used = clock_;
      it->second.pinned = true; // not evicted by the disk reads of this lookup
      blocks.push_back(it->second.block);
      parent = key;
      continue;
    }
    if (dir_.empty())
      break;
    // Not in memory: the disk tier, without the lock (taking a block may evict).
    lock.unlock();
    const std::int32_t block = ReadBlock(key, parent, t);
    lock.lock();
    if (block < 0)
      break;
    Entry e;
    e.parent = parent;
    e.tokens.assign(t, t + bt);
    e.block = block;
    e.used = clock_;
    e.pinned = true;
    if (const auto p = entries_.find(parent); p != entries_.end())
      ++p->second.children;
    entries_.emplace(key, std::move(e));
    ++stats_.disk_reads;
    blocks.push_back(block);
    parent = key;
  }
  for (auto &[key, e] : entries_)
    e.pinned = false;
  if (!blocks.empty()) {
    ++stats_.hits;
    stats_.hit_tokens += blocks.size() * bt;
  }
  if (key_out)
    *key_out = blocks.empty() ? 0 : parent;
  return blocks.size() * bt;
}

std::string PrefixCache::DiskPath(std::uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.pigkv", static_cast<unsigned long long>(key));
  return dir_ + "/" + name;
}

void PrefixCache::SetDisk(const std::string &dir, size_t max_bytes) {
  spec::MakeDirs(dir);
  std::lock_guard lock(mu_);
  dir_ = dir;
  disk_max_ = max_bytes;
  stats_.disk_bytes = 0;
  std::error_code ec;
  for (const auto &f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().extension() == ".pigkv")
      stats_.disk_bytes += size_t(f.file_size(ec));
  TrimDisk();
}

void PrefixCache::WriteBlock(std::uint64_t key, std::uint64_t parent, const std::int32_t *tokens,
                             std::int32_t block) {
  const std::string path = DiskPath(key);
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !bad_.count(key))
    return; // written before (this run or an earlier one)
  const size_t bt = pool_->block_tokens(), payload = pool_->BlockBytes();
  const AttentionShape &sh = pool_->shape();
  DiskHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kDiskVersion;
  h.dtype = std::uint32_t(pool_->dtype());
  h.salt = salt_;
  h.key = key;
  h.parent = parent;
  h.block_tokens = std::uint32_t(bt);
  h.n_layers = std::uint32_t(sh.n_layers);
  h.n_kv_heads = std::uint32_t(sh.n_kv_heads);
  h.head_dim = std::uint32_t(sh.head_dim);
  h.payload_bytes = payload;
  std::string bytes(sizeof h + bt * sizeof(std::int32_t) + payload, '\0');
  std::memcpy(bytes.data() + sizeof h, tokens, bt * sizeof(std::int32_t));
  std::memcpy(bytes.data() + sizeof h + bt * sizeof(std::int32_t),
              pool_->Row(block, 0, 0, false, 0), payload);
  std::memcpy(bytes.data(), &h, sizeof h);
  h.checksum = detail::HashBytes(0, bytes.data(), bytes.size());
  std::memcpy(bytes.data(), &h, sizeof h);
  try {
    spec::WriteFileAtomically(path, bytes);
  } catch (const std::runtime_error &e) { // a full disk: the memory tier goes on
    std::fprintf(stderr, "pig: prefix cache: %s; not written\n", e.what());
    return;
  }
  bad_.erase(key);
  ++stats_.disk_writes;
  stats_.disk_bytes += bytes.size();
  TrimDisk();
}

std::int32_t PrefixCache::ReadBlock(std::uint64_t key, std::uint64_t parent,
                                    const std::int32_t *tokens) {
  const std::string path = DiskPath(key);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return -1;
  const size_t bt = pool_->block_tokens(), payload = pool_->BlockBytes();
  const AttentionShape &sh = pool_->shape();
  std::string why;
  std::string bytes;
  try {
    bytes = spec::ReadFile(path);
  } catch (const std::runtime_error &e) {
    why = e.what();
  }
  DiskHeader h{};
  if (why.empty() && bytes.size() < sizeof h)
    why = "truncated header";
  if (why.empty()) {
    std::memcpy(&h, bytes.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
      why = "not a pig KV block";
    else if (h.version != kDiskVersion)
      why = "format version " + std::to_string(h.version) + ", this build reads " +
            std::to_string(kDiskVersion);
    else if (h.salt != salt_)
      why = "another model's (or another prefill path's) block";
    else if (h.key != key || h.parent != parent || h.block_tokens != bt ||
             h.n_layers != sh.n_layers || h.n_kv_heads != sh.n_kv_heads ||
             h.head_dim != sh.head_dim || h.dtype != std::uint32_t(pool_->dtype()) ||
             h.payload_bytes != payload)
      why = "another block, shape or element type";
    else if (bytes.size() != sizeof h + bt * sizeof(std::int32_t) + payload)
      why = "truncated: " + std::to_string(bytes.size()) + " bytes";
  }
  if (why.empty()) {
    const std::uint64_t want = h.checksum;
    DiskHeader z = h;
    z.checksum = 0;
    std::memcpy(bytes.data(), &z, sizeof z);
    if (detail::HashBytes(0, bytes.data(), bytes.size()) != want)
      why = "checksum mismatch (corrupt)";
    else if (std::memcmp(bytes.data() + sizeof h, tokens, bt * sizeof(std::int32_t)) != 0)
      why = "other tokens";
  }
  if (!why.empty()) {
    std::fprintf(stderr, "pig: prefix cache: %s: %s; a miss\n", path.c_str(), why.c_str());
    std::lock_guard lock(mu_);
    ++stats_.disk_rejected;
    bad_[key] = true;
    return -1;
  }
  try {
    pool_->Reserve(1); // the cache's own block from now on
  } catch (const std::length_error &) {
    return -1; // no room: a miss
  }
  const std::int32_t block = pool_->Take();
  std::memcpy(pool_->Row(block, 0, 0, false, 0),
              bytes.data() + sizeof h + bt * sizeof(std::int32_t), payload);
  return block;
}

void PrefixCache::TrimDisk() {
  if (!disk_max_ || stats_.disk_bytes <= disk_max_)
    return;
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  std::error_code ec;
  for (const auto &f : std::filesystem::directory_iterator(dir_, ec))
    if (f.path().extension() == ".pigkv")
      files.emplace_back(f.last_write_time(ec), f.path());
  std::sort(files.begin(), files.end());
  for (const auto &[t, path] : files) {
    if (stats_.disk_bytes <= disk_max_)
      break;
    const size_t size = size_t(std::filesystem::file_size(path, ec));
    if (std::filesystem::remove(path, ec))
      stats_.disk_bytes -= std::min(size, stats_.disk_bytes);
  }
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
    if (!dir_.empty())
      WriteBlock(key, parent, t, table[b]);
    parent = key;
  }
}

size_t PrefixCache::EvictLocked(size_t blocks) {
  size_t done = 0;
  while (done < blocks) {
    // The least recently used leaf that no sequence holds (the cache's own reference only).
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.children == 0 && !it->second.pinned && pool_->Holders(it->second.block) == 1 &&
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

void PrefixCache::set_salt(std::uint64_t salt) {
  std::lock_guard lock(mu_);
  salt_ = salt;
  EvictLocked(entries_.size());
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
