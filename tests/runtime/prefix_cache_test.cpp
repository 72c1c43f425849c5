// Prompt prefixes shared across sequences (prefix_cache.h): blocks with several holders, copied
// before a rewrite; the cache's hash chain, exact token match, least-recently-used eviction of
// blocks no sequence holds. Synthetic shapes only; prefix_cache_model_test.cpp holds the hits on
// the model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "pig/runtime/attention.h"
#include "pig/runtime/index_share.h"
#include "pig/runtime/kv_cache.h"
#include "pig/runtime/prefix_cache.h"
#include "pig/spec/files.h"

namespace pig::runtime {
namespace {

using lsh::DType;

AttentionShape Shape(size_t capacity) {
  AttentionShape s;
  s.n_layers = 2;
  s.n_heads = 2;
  s.n_kv_heads = 1;
  s.head_dim = 32;
  s.capacity = capacity;
  return s;
}

std::vector<float> Rows(size_t n, float base) {
  std::vector<float> x(n * 32);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = base + float(i % 97) * 0.25f;
  return x;
}

void Fill(KvCache &c, size_t from, size_t n, float base) {
  const std::vector<float> k = Rows(n, base), v = Rows(n, -base);
  for (size_t l = 0; l < 2; ++l)
    c.Append(l, from, n, k.data(), v.data());
}

TEST(KvPool, SharedBlocksAreFreedByTheirLastHolderAndCopiedBeforeARewrite) {
  auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 8, 16);
  KvCache a(Shape(64), DType::f32, pool);
  Fill(a, 0, 40, 1.0f); // 3 blocks
  EXPECT_EQ(pool->reserved_blocks(), 4u);
  std::vector<std::int32_t> prefix(a.blocks().begin(), a.blocks().begin() + 2);
  {
    KvCache b(Shape(64), DType::f32, pool);
    b.Attach(prefix.data(), prefix.size());      // positions [0, 32) shared
    EXPECT_EQ(pool->reserved_blocks(), 4u + 2u); // b reserves its 4 less the 2 it shares
    EXPECT_EQ(pool->Holders(prefix[0]), 2u);
    EXPECT_EQ(std::memcmp(b.KeyAt(1, 0, 17), a.KeyAt(1, 0, 17), b.RowBytes()), 0);
    EXPECT_THROW(b.Attach(prefix.data(), 1), std::logic_error); // not empty
    // b rewrites position 20 (inside the second shared block): it gets a copy; a keeps its rows.
    std::vector<float> before(32);
    a.KeyRow(0, 0, 20, before.data());
    Fill(b, 20, 1, 50.0f);
    EXPECT_NE(b.blocks()[1], prefix[1]);
    EXPECT_EQ(b.blocks()[0], prefix[0]);
    EXPECT_EQ(pool->Holders(prefix[1]), 1u);
    std::vector<float> after(32), copied(32);
    a.KeyRow(0, 0, 20, after.data());
    EXPECT_EQ(before, after);
    b.KeyRow(0, 0, 19, copied.data()); // the copy holds the shared rows before the rewrite
    a.KeyRow(0, 0, 19, after.data());
    EXPECT_EQ(copied, after);
    EXPECT_EQ(pool->reserved_blocks(), 4u + 3u); // the copied block is b's own now
  }
  EXPECT_EQ(pool->Holders(prefix[0]), 1u); // b gave its holds back, a keeps its blocks
  EXPECT_EQ(pool->reserved_blocks(), 4u);
  EXPECT_EQ(pool->taken_blocks(), 3u);
  EXPECT_THROW(pool->Share(7), std::logic_error); // never taken
}

TEST(PrefixCache, FindsTheLongestCachedChainByItsTokens) {
  auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 0, 16);
  PrefixCache cache(pool, 42);
  std::vector<std::int32_t> doc(100);
  for (size_t i = 0; i < doc.size(); ++i)
    doc[i] = std::int32_t(1000 + i);
  std::vector<std::int32_t> blocks;
  EXPECT_EQ(cache.Lookup(doc.data(), doc.size(), blocks), 0u);
  {
    KvCache a(Shape(128), DType::f32, pool);
    Fill(a, 0, 70, 2.0f); // 5 blocks, 4 full
    cache.Insert(doc.data(), 70, a.blocks());
    EXPECT_EQ(cache.stats().blocks, 4u);
    // The same prompt: at most (n - 2) / 16 blocks, two tokens left to compute.
    EXPECT_EQ(cache.Lookup(doc.data(), 66, blocks), 64u);
    EXPECT_EQ(cache.Lookup(doc.data(), 65, blocks), 48u);
    EXPECT_EQ(blocks, std::vector<std::int32_t>(a.blocks().begin(), a.blocks().begin() + 3));
    EXPECT_EQ(cache.Lookup(doc.data(), 100, blocks), 64u);
  }
  // The sequence ended: the cache holds its blocks.
  EXPECT_EQ(pool->taken_blocks(), 4u);
  // A different token in block 2: the chain stops there; in block 0: nothing.
  std::vector<std::int32_t> other = doc;
  other[40] = 7;
  EXPECT_EQ(cache.Lookup(other.data(), other.size(), blocks), 32u);
  other[3] = 7;
  EXPECT_EQ(cache.Lookup(other.data(), other.size(), blocks), 0u);
  const PrefixCache::Stats s = cache.stats();
  EXPECT_EQ(s.lookups, 6u);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.bytes, 4 * pool->BlockBytes());
  cache.Clear();
  EXPECT_EQ(pool->taken_blocks(), 0u);
  EXPECT_EQ(pool->reserved_blocks(), 0u);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedBlocksNoSequenceHolds) {
  // 8 blocks: two cached prompts of 2 full blocks each, one of them in use by a sequence.
  auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 8, 16);
  PrefixCache cache(pool, 1);
  std::vector<std::int32_t> p1(40, 5), p2(40, 9);
  for (const auto *p : {&p1, &p2}) { // one request after the other
    KvCache a(Shape(40), DType::f32, pool);
    Fill(a, 0, 40, float((*p)[0]));
    cache.Insert(p->data(), 40, a.blocks());
  }
  EXPECT_EQ(cache.stats().blocks, 4u);
  std::vector<std::int32_t> blocks;
  ASSERT_EQ(cache.Lookup(p2.data(), 40, blocks), 32u); // p2 used last
  KvCache user(Shape(48), DType::f32, pool);
  user.Attach(blocks.data(), blocks.size()); // p2's blocks in use: never evicted
  // 4 cached + user's 1 own: 3 free. A cache of 4 blocks makes the pool evict p1 (its leaf
  // first, then its first block), never p2.
  KvCache big(Shape(64), DType::f32, pool);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.Lookup(p1.data(), 40, blocks), 16u);
  EXPECT_EQ(cache.Lookup(p2.data(), 40, blocks), 32u);
  KvCache more(Shape(16), DType::f32, pool);
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.Lookup(p1.data(), 40, blocks), 0u);
  // Nothing left that no sequence holds: the pool refuses, naming what is free.
  EXPECT_THROW(KvCache(Shape(16), DType::f32, pool), std::length_error);
  EXPECT_EQ(cache.Lookup(p2.data(), 40, blocks), 32u);
}

// The disk tier: blocks written when cached are read back by a new pool and cache over the same
// directory (a restart), bit for bit; a truncated, corrupted, foreign or old-version file is a
// miss, never a crash or a wrong block; the directory stays under its limit.
TEST(PrefixCache, TheDiskTierServesAfterARestartAndRefusesBadFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pig-prefix-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::vector<std::int32_t> doc(40);
  for (size_t i = 0; i < doc.size(); ++i)
    doc[i] = std::int32_t(300 + 7 * i);
  std::vector<float> want(32), got(32);
  {
    auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 0, 16);
    PrefixCache cache(pool, 7);
    cache.SetDisk(dir.string(), 0);
    KvCache a(Shape(64), DType::f32, pool);
    Fill(a, 0, 40, 4.0f);
    cache.Insert(doc.data(), 40, a.blocks());
    EXPECT_EQ(cache.stats().disk_writes, 2u);
    a.KeyRow(1, 0, 20, want.data());
  }
  auto restart = [&](std::uint64_t salt = 7) {
    auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 0, 16);
    auto cache = std::make_unique<PrefixCache>(pool, salt);
    cache->SetDisk(dir.string(), 0);
    return std::make_pair(pool, std::move(cache));
  };
  std::vector<std::int32_t> blocks;
  {
    auto [pool, cache] = restart();
    ASSERT_EQ(cache->Lookup(doc.data(), doc.size(), blocks), 32u);
    EXPECT_EQ(cache->stats().disk_reads, 2u);
    KvCache b(Shape(64), DType::f32, pool);
    b.Attach(blocks.data(), blocks.size());
    b.KeyRow(1, 0, 20, got.data());
    EXPECT_EQ(got, want);
  }
  {
    auto [pool, cache] = restart();
    const std::string path = cache->DiskPath(cache->FirstKey(doc.data()));
    const std::string good = spec::ReadFile(path);
    struct Bad {
      const char *what;
      std::string bytes;
    };
    std::vector<Bad> bad;
    bad.push_back({"truncated", good.substr(0, good.size() - 100)});
    bad.push_back({"empty", ""});
    std::string flipped = good;
    flipped[good.size() - 7] ^= 0x10;
    bad.push_back({"flipped", flipped});
    std::string version = good;
    version[8] = 2; // the format version, after the 8-byte magic
    bad.push_back({"version", version});
    std::string foreign = good;
    foreign[16] ^= 1; // the salt: another model's
    bad.push_back({"foreign", foreign});
    size_t rejected = 0;
    for (const Bad &b : bad) {
      spec::WriteFileAtomically(path, b.bytes);
      EXPECT_EQ(cache->Lookup(doc.data(), doc.size(), blocks), 0u) << b.what;
      EXPECT_EQ(cache->stats().disk_rejected, ++rejected) << b.what;
      EXPECT_EQ(pool->taken_blocks(), 0u) << b.what;
    }
    // The next insert of that block rewrites its file.
    KvCache a(Shape(64), DType::f32, pool);
    Fill(a, 0, 40, 4.0f);
    cache->Insert(doc.data(), 40, a.blocks());
    EXPECT_EQ(spec::ReadFile(path), good);
  }
  {
    // Another model (salt): its keys name other files, a miss.
    auto [pool, cache] = restart(8);
    EXPECT_EQ(cache->Lookup(doc.data(), doc.size(), blocks), 0u);
  }
  {
    // A limit of one file and a half: the oldest go.
    const size_t file = std::filesystem::file_size(
        restart().second->DiskPath(restart().second->FirstKey(doc.data())));
    auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 0, 16);
    PrefixCache cache(pool, 9);
    cache.SetDisk((dir / "small").string(), file + file / 2);
    KvCache a(Shape(64), DType::f32, pool);
    Fill(a, 0, 64, 1.0f);
    cache.Insert(doc.data(), 32, a.blocks());
    EXPECT_LE(cache.stats().disk_bytes, file + file / 2);
    size_t files = 0;
    for (const auto &f : std::filesystem::directory_iterator(dir / "small"))
      files += f.path().extension() == ".pigkv";
    EXPECT_EQ(files, 1u);
  }
  std::filesystem::remove_all(dir);
}

// IndexShare (index_share.h) on its own: who builds, who waits and stands on the result, what a
// changed block (a new stamp) or a short prefix refuses, and what Collect forgets.
TEST(IndexShare, OneBuildsTheOthersWaitAndStandOnIt) {
  auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 16, 16);
  auto a = std::make_unique<KvCache>(Shape(128), DType::f32, pool);
  Fill(*a, 0, 100, 1.0f); // 7 blocks, 6 full
  const std::vector<std::int32_t> blocks = a->blocks();
  for (size_t i = 0; i < 4; ++i)
    pool->Share(blocks[i]); // a cache holds the first 4
  std::vector<std::uint64_t> stamps(blocks.size());
  std::vector<std::uint32_t> holders(blocks.size());
  pool->Stamps(blocks.data(), blocks.size(), stamps.data(), holders.data());
  EXPECT_EQ(holders[0], 2u);
  EXPECT_EQ(holders[5], 1u);
  IndexShare &share = pool->shared_indexes();
  IndexShare::Request r{
      "key", 1, 2, blocks.data(), stamps.data(), 6, 4, 16, lsh::StaticTokens{4, 16, 32}, 100};
  // The first builds an index of 60 indexed tokens: the shared 64 positions less the sink.
  const IndexShare::Share first = share.Acquire(r);
  ASSERT_EQ(first.build, 60u);
  ASSERT_FALSE(first.base);
  // Another sequence over the same blocks waits until the build is published.
  std::atomic<bool> done{false};
  IndexShare::Share second;
  std::thread waiter([&] {
    second = share.Acquire(r);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  std::vector<float> rows(100 * 32);
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i] = float((i * 7) % 13) - 6.0f;
  const lsh::LshKernelSet set = lsh::generic_kernel_set();
  const lsh::SimHash W(1, 32, 4, 4);
  auto base = lsh::LshIndex::freeze(
      lsh::LshIndex::build(set, rows.data(), DType::f32, 4 + 60 + 16, W, r.st));
  share.Publish(first, base);
  waiter.join();
  EXPECT_EQ(second.base, base);
  EXPECT_EQ(second.limit, 60u);
  EXPECT_EQ(share.stats().builds, 1u);
  EXPECT_EQ(share.stats().hits, 1u);
  EXPECT_EQ(share.stats().bytes, base->bytes());
  // Another key over blocks no one else holds enough of, or no window: nothing shared.
  IndexShare::Request other = r;
  other.key = "other";
  other.shared_blocks = 2; // 32 positions < sink + window
  IndexShare::Share none = share.Acquire(other);
  EXPECT_TRUE(!none.base && none.build == 0);
  other = r;
  other.st.mean_window = 0;
  none = share.Acquire(other);
  EXPECT_TRUE(!none.base && none.build == 0);
  // The node's other unit is built by whoever comes first; a failed build is built again.
  IndexShare::Request u0 = r;
  u0.unit = 0;
  const IndexShare::Share failed = share.Acquire(u0);
  EXPECT_EQ(failed.build, 60u);
  share.Abandon(failed);
  const IndexShare::Share building = share.Acquire(u0);
  EXPECT_EQ(building.build, 60u);
  // Every block given back and taken anew (the same ids, new stamps): the node no longer names
  // what they hold, and a sequence over them builds a node of its own.
  a.reset();
  for (size_t i = 0; i < 4; ++i)
    pool->Give(blocks[i]);
  ASSERT_EQ(pool->taken_blocks(), 0u);
  pool->Reserve(6);
  std::vector<std::int32_t> again;
  for (size_t i = 0; i < 6; ++i)
    again.push_back(pool->Take());
  EXPECT_EQ(again, std::vector<std::int32_t>(blocks.begin(), blocks.begin() + 6));
  std::vector<std::uint64_t> now(6);
  pool->Stamps(again.data(), 6, now.data());
  for (size_t i = 0; i < 6; ++i)
    EXPECT_NE(now[i], stamps[i]) << i;
  IndexShare::Request fresh = r;
  fresh.blocks = again.data();
  fresh.stamps = now.data();
  fresh.shared_blocks = 6;
  const IndexShare::Share own = share.Acquire(fresh);
  EXPECT_TRUE(!own.base && own.build == 80u); // min(96, sink + 80 indexed) - sink
  share.Abandon(own);
  // Collect keeps a node one of whose units is being built, and the current one.
  share.Collect(*pool);
  EXPECT_EQ(share.stats().nodes, 2u);
  share.Abandon(building);
  share.Collect(*pool);
  EXPECT_EQ(share.stats().nodes, 1u);
  for (std::int32_t b : again)
    pool->Give(b);
  share.Collect(*pool);
  EXPECT_EQ(share.stats().nodes, 0u);
}

// IndexShare's disk tier: a base published for a request with a prefix key is written; another
// IndexShare (a restart) reads it back for the same request instead of building it; truncated,
// flipped, another model's and another version's files are logged misses, built again.
TEST(IndexShare, TheDiskTierReadsABaseBackAndRefusesBadFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pig-index-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto pool = std::make_shared<KvPool>(Shape(0), DType::f32, 16, 16);
  KvCache a(Shape(128), DType::f32, pool);
  Fill(a, 0, 100, 1.0f);
  const std::vector<std::int32_t> blocks = a.blocks();
  std::vector<std::uint64_t> stamps(blocks.size());
  pool->Stamps(blocks.data(), blocks.size(), stamps.data());
  IndexShare::Request r{
      "key", 1, 2, blocks.data(), stamps.data(), 6, 4, 16, lsh::StaticTokens{4, 16, 32}, 100};
  r.prefix_key = 0x5eed;
  std::vector<float> rows(100 * 32);
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i] = float((i * 7) % 13) - 6.0f;
  const lsh::LshKernelSet set = lsh::generic_kernel_set();
  const lsh::SimHash W(1, 32, 4, 4);
  auto build = [&](const IndexShare::Share &s) {
    return lsh::LshIndex::freeze(
        lsh::LshIndex::build(set, rows.data(), DType::f32, 4 + s.build + 16, W, r.st));
  };
  std::string written;
  {
    IndexShare first;
    first.SetDisk(dir.string(), 7, 0);
    const IndexShare::Share s = first.Acquire(r);
    ASSERT_EQ(s.build, 60u);
    const auto base = build(s);
    first.Publish(s, base);
    EXPECT_EQ(first.stats().disk_writes, 1u);
    ASSERT_TRUE(std::filesystem::exists(first.DiskPath(r)));
    written = base->serialize();
  }
  auto restart = [&](std::uint64_t salt) {
    auto share = std::make_unique<IndexShare>();
    share->SetDisk(dir.string(), salt, 0);
    return share;
  };
  {
    auto share = restart(7);
    const IndexShare::Share s = share->Acquire(r);
    ASSERT_TRUE(s.base);
    EXPECT_EQ(s.build, 0u);
    EXPECT_EQ(s.limit, 60u);
    EXPECT_EQ(s.base->serialize(), written);
    EXPECT_EQ(share->stats().disk_reads, 1u);
    IndexShare::Request other = r;
    other.prefix_key = 0xbad; // another prefix: another file, none there
    other.unit = 0;
    const IndexShare::Share o = share->Acquire(other);
    EXPECT_EQ(o.build, 60u);
    EXPECT_EQ(share->stats().disk_rejected, 0u);
    share->Abandon(o);
  }
  const std::string path = restart(7)->DiskPath(r);
  const std::string good = pig::spec::ReadFile(path);
  auto refused = [&](const std::string &bytes, std::uint64_t salt, const char *what) {
    pig::spec::WriteFileAtomically(path, bytes);
    auto share = restart(salt);
    const IndexShare::Share s = share->Acquire(r);
    EXPECT_FALSE(s.base) << what;
    EXPECT_EQ(s.build, 60u) << what;
    EXPECT_EQ(share->stats().disk_rejected, 1u) << what;
    share->Abandon(s);
  };
  refused(good.substr(0, good.size() - 100), 7, "truncated");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  refused(flipped, 7, "a flipped byte");
  refused(good, 8, "another model's");
  std::string old = good;
  old[8] = 9; // the version field
  refused(old, 7, "another version's");
  // Rebuilt and published again, the file is good again.
  pig::spec::WriteFileAtomically(path, flipped);
  {
    auto share = restart(7);
    const IndexShare::Share s = share->Acquire(r);
    share->Publish(s, build(s));
    EXPECT_EQ(pig::spec::ReadFile(path), good);
  }
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace pig::runtime
