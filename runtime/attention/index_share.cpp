#include "pig/runtime/index_share.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_set>

#include "byte_hash.h"
#include "pig/runtime/kv_cache.h"
#include "pig/spec/files.h"

namespace pig::runtime {

struct IndexShare::Node {
  std::string key;
  std::vector<std::int32_t> blocks;
  std::vector<std::uint64_t> stamps;
  std::size_t block_tokens = 0;
  std::size_t need = 0; ///< positions a sequence must share for any base here: sink + window
  enum class State : std::uint8_t { empty, building, ready };
  struct Slot {
    State state = State::empty;
    std::shared_ptr<const lsh::LshIndex> base;
  };
  std::vector<Slot> slots; ///< per unit
  std::uint64_t last_use = 0;
};

struct IndexShare::DiskHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t unit;
  std::uint64_t salt, name, prefix_key, window, payload_bytes;
};
namespace {
constexpr char kMagic[8] = {'P', 'I', 'G', 'L', 'S', 'H', 'I', 'X'};
constexpr std::uint32_t kDiskVersion = 1;

struct Ticket {
  std::shared_ptr<void> node;
  std::size_t unit = 0;
  std::string path; ///< where the base goes on disk; empty: nowhere
  IndexShare::DiskHeader head{};
};

// What names a request's base: everything its codes depend on besides the prefix's keys.
std::uint64_t NameOf(const IndexShare::Request &r) {
  std::uint64_t h = detail::HashBytes(0x696e646578ull, r.key.data(), r.key.size());
  for (std::uint64_t x :
       {std::uint64_t(r.unit), std::uint64_t(r.units), std::uint64_t(r.st.mean_window),
        std::uint64_t(r.st.sink), std::uint64_t(r.st.local), r.prefix_key})
    h = detail::Mix(h, x);
  return h;
}

// Leading blocks the node and the request name alike, with the same stamps.
std::size_t Common(const std::vector<std::int32_t> &blocks,
                   const std::vector<std::uint64_t> &stamps, const IndexShare::Request &r) {
  const std::size_t m = std::min(blocks.size(), r.n_blocks);
  std::size_t i = 0;
  while (i < m && blocks[i] == r.blocks[i] && stamps[i] == r.stamps[i] && stamps[i] != 0)
    ++i;
  return i;
}

} // namespace

void IndexShare::SetDisk(const std::string &dir, std::uint64_t salt, std::size_t max_bytes) {
  spec::MakeDirs(dir);
  std::lock_guard lock(mu_);
  dir_ = dir;
  salt_ = salt;
  disk_max_ = max_bytes;
}

std::string IndexShare::DiskPath(const Request &r) const {
  char name[40];
  std::snprintf(name, sizeof name, "%016llx.pigix", static_cast<unsigned long long>(NameOf(r)));
  return dir_ + "/" + name;
}

// A request's base from the disk tier, or null (a missing file quietly; a bad one said on
// stderr and counted).
std::shared_ptr<const lsh::LshIndex> IndexShare::ReadLocked(const Request &r) {
  const std::string path = DiskPath(r);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return nullptr;
  std::string why;
  try {
    const std::string bytes = spec::ReadFile(path);
    DiskHeader h;
    if (bytes.size() < sizeof h + 8) {
      why = "truncated";
    } else {
      std::memcpy(&h, bytes.data(), sizeof h);
      std::uint64_t sum;
      std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
      if (std::memcmp(h.magic, kMagic, 8) != 0)
        why = "not an index file";
      else if (h.version != kDiskVersion)
        why =
            "format version " + std::to_string(h.version) + ", not " + std::to_string(kDiskVersion);
      else if (h.salt != salt_)
        why = "another model's";
      else if (h.name != NameOf(r) || h.prefix_key != r.prefix_key || h.unit != r.unit ||
               h.window != r.st.mean_window)
        why = "another index's";
      else if (bytes.size() != sizeof h + h.payload_bytes + 8)
        why = "truncated";
      else if (detail::HashBytes(salt_, bytes.data(), bytes.size() - 8) != sum)
        why = "checksum mismatch";
      else if (auto ix = lsh::LshIndex::parse(
                   std::string_view(bytes.data() + sizeof h, h.payload_bytes), &why)) {
        if (ix->mean_count() == r.st.mean_window && ix->sink_end() == r.st.sink &&
            ix->local() == r.st.local) {
          ++disk_reads_;
          return std::make_shared<const lsh::LshIndex>(std::move(*ix));
        }
        why = "another window's";
      }
    }
  } catch (const std::exception &e) {
    why = e.what();
  }
  ++disk_rejected_;
  std::fprintf(stderr, "pig: LSH index file %s: %s; rebuilding it\n", path.c_str(), why.c_str());
  return nullptr;
}

void IndexShare::Write(const std::string &path, DiskHeader head, const lsh::LshIndex &base) {
  const std::string payload = base.serialize();
  head.payload_bytes = payload.size();
  std::string bytes(reinterpret_cast<const char *>(&head), sizeof head);
  bytes += payload;
  const std::uint64_t sum = detail::HashBytes(head.salt, bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char *>(&sum), 8);
  try {
    spec::WriteFileAtomically(path, bytes);
  } catch (const std::exception &e) { // a full disk is a file not written, not a failed request
    std::fprintf(stderr, "pig: LSH index file %s not written: %s\n", path.c_str(), e.what());
    return;
  }
  std::lock_guard lock(mu_);
  ++disk_writes_;
  if (disk_max_ == 0)
    return;
  // The oldest files go past the limit.
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> files;
  std::uintmax_t total = 0;
  std::error_code ec;
  for (const auto &f : std::filesystem::directory_iterator(dir_, ec)) {
    if (f.path().extension() != ".pigix")
      continue;
    total += f.file_size(ec);
    files.emplace_back(f.last_write_time(ec), f.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto &[when, f] : files) {
    if (total <= disk_max_)
      break;
    const std::uintmax_t size = std::filesystem::file_size(f, ec);
    if (std::filesystem::remove(f, ec))
      total -= size;
  }
}

IndexShare::IndexShare() = default;
IndexShare::~IndexShare() = default;

IndexShare::Share IndexShare::Acquire(const Request &r) {
  const lsh::StaticTokens &st = r.st;
  const std::size_t count = r.n > st.sink + st.local ? r.n - st.sink - st.local : 0;
  // The mean must be a function of the shared positions: a window, every key of which exists.
  if (st.mean_window == 0 || r.n < st.sink + st.mean_window || count == 0 || r.block_tokens == 0)
    return {};
  const std::size_t need = st.sink + st.mean_window;
  std::unique_lock lock(mu_);
  for (;;) {
    std::shared_ptr<Node> ready, building, empty;
    std::size_t ready_limit = 0, empty_limit = 0;
    for (const auto &node : nodes_) {
      if (node->key != r.key || node->block_tokens != r.block_tokens || node->need != need ||
          node->slots.size() != r.units)
        continue;
      const std::size_t shared = Common(node->blocks, node->stamps, r) * r.block_tokens;
      if (shared < need)
        continue;
      // Positions both index: the shared blocks, within this sequence's indexed range.
      const std::size_t limit = std::min(shared, st.sink + count) - st.sink;
      const Node::Slot &slot = node->slots[r.unit];
      if (slot.state == Node::State::ready) {
        const std::size_t l = std::min(limit, slot.base->layout().count);
        if (slot.base->mean_count() == st.mean_window && l > ready_limit) {
          ready = node;
          ready_limit = l;
        }
      } else if (slot.state == Node::State::building) {
        building = node;
      } else if (limit > empty_limit) {
        empty = node;
        empty_limit = limit;
      }
    }
    if (ready) {
      ++hits_;
      ready->last_use = ++clock_;
      return Share{ready->slots[r.unit].base, ready_limit, 0, nullptr};
    }
    if (building) { // another thread builds what this one would stand on
      built_.wait(lock);
      continue;
    }
    if (!empty) {
      // A new node over the blocks this sequence shares with their other holders.
      const std::size_t shared = std::min(r.shared_blocks, r.n_blocks) * r.block_tokens;
      if (shared < need)
        return {};
      auto node = std::make_shared<Node>();
      node->key = r.key;
      node->blocks.assign(r.blocks, r.blocks + std::min(r.shared_blocks, r.n_blocks));
      node->stamps.assign(r.stamps, r.stamps + node->blocks.size());
      node->block_tokens = r.block_tokens;
      node->need = need;
      node->slots.resize(r.units);
      nodes_.push_back(node);
      empty = node;
      empty_limit = std::min(shared, st.sink + count) - st.sink;
    }
    empty->last_use = ++clock_;
    auto ticket = std::make_shared<Ticket>(Ticket{empty, r.unit, {}, {}});
    if (!dir_.empty() && r.prefix_key != 0) {
      // Built before, maybe by another process: read back instead of built.
      if (auto base = ReadLocked(r)) {
        empty->slots[r.unit] = Node::Slot{Node::State::ready, base};
        const std::size_t limit = std::min(empty_limit, base->layout().count);
        return Share{std::move(base), limit, 0, nullptr};
      }
      ticket->path = DiskPath(r);
      DiskHeader &h = ticket->head;
      std::memcpy(h.magic, kMagic, 8);
      h.version = kDiskVersion;
      h.unit = std::uint32_t(r.unit);
      h.salt = salt_;
      h.name = NameOf(r);
      h.prefix_key = r.prefix_key;
      h.window = r.st.mean_window;
    }
    empty->slots[r.unit].state = Node::State::building;
    return Share{nullptr, 0, empty_limit, std::move(ticket)};
  }
}

void IndexShare::Publish(const Share &s, std::shared_ptr<const lsh::LshIndex> base) {
  if (!s.ticket || !base)
    throw std::invalid_argument("IndexShare::Publish: no build was asked, or no index");
  const auto &t = *std::static_pointer_cast<Ticket>(s.ticket);
  {
    std::lock_guard lock(mu_);
    Node::Slot &slot = std::static_pointer_cast<Node>(t.node)->slots[t.unit];
    slot.base = base;
    slot.state = Node::State::ready;
    ++builds_;
    // Over the limit: the least recently used nodes go, none being built, the new one last.
    while (max_bytes_ > 0 && BytesLocked() > max_bytes_) {
      auto victim = nodes_.end();
      for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
        const bool building =
            std::any_of((*it)->slots.begin(), (*it)->slots.end(),
                        [](const auto &s) { return s.state == Node::State::building; });
        if (!building && it->get() != t.node.get() &&
            (victim == nodes_.end() || (*it)->last_use < (*victim)->last_use))
          victim = it;
      }
      if (victim == nodes_.end())
        break;
      nodes_.erase(victim);
    }
  }
  built_.notify_all();
  if (!t.path.empty())
    Write(t.path, t.head, *base);
}

void IndexShare::set_max_bytes(std::size_t bytes) {
  std::lock_guard lock(mu_);
  max_bytes_ = bytes;
}

std::size_t IndexShare::BytesLocked() const {
  std::size_t bytes = 0;
  std::unordered_set<const lsh::LshIndex *> seen;
  for (const auto &node : nodes_)
    for (const auto &slot : node->slots)
      if (slot.base && seen.insert(slot.base.get()).second)
        bytes += slot.base->bytes();
  return bytes;
}

void IndexShare::Abandon(const Share &s) {
  if (!s.ticket)
    return;
  const auto &t = *std::static_pointer_cast<Ticket>(s.ticket);
  {
    std::lock_guard lock(mu_);
    std::static_pointer_cast<Node>(t.node)->slots[t.unit].state = Node::State::empty;
  }
  built_.notify_all();
}

void IndexShare::Collect(const KvPool &pool) {
  if (pool.external())
    return; // an engine's blocks have no stamps: set_max_bytes bounds those nodes
  std::lock_guard lock(mu_);
  std::vector<std::uint64_t> now;
  std::erase_if(nodes_, [&](const std::shared_ptr<Node> &node) {
    now.resize(node->blocks.size());
    pool.Stamps(node->blocks.data(), node->blocks.size(), now.data());
    std::size_t m = 0;
    while (m < now.size() && now[m] == node->stamps[m] && now[m] != 0)
      ++m;
    node->blocks.resize(m);
    node->stamps.resize(m);
    // A slot being built keeps its node: its builder publishes into it.
    const bool building = std::any_of(node->slots.begin(), node->slots.end(), [](const auto &s) {
      return s.state == Node::State::building;
    });
    return m * node->block_tokens < node->need && !building;
  });
}

void IndexShare::Clear() {
  std::lock_guard lock(mu_);
  std::erase_if(nodes_, [](const std::shared_ptr<Node> &node) {
    return std::none_of(node->slots.begin(), node->slots.end(),
                        [](const auto &s) { return s.state == Node::State::building; });
  });
}

IndexShare::Stats IndexShare::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  s.nodes = nodes_.size();
  s.hits = hits_;
  s.builds = builds_;
  s.bytes = BytesLocked();
  s.disk_reads = disk_reads_;
  s.disk_writes = disk_writes_;
  s.disk_rejected = disk_rejected_;
  return s;
}

} // namespace pig::runtime
