// The runtime's one 64-bit hash of bytes: the prefix cache's block keys and file checksums, the
// shared indexes' file names and checksums, and the fingerprints of an engine's KV blocks. Not
// cryptographic: it names and checks what this process or an earlier one wrote.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pig::runtime::detail {

inline std::uint64_t Mix(std::uint64_t h, std::uint64_t x) {
  // splitmix64's finaliser over the running state: a well-spread 64-bit key.
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

inline std::uint64_t HashBytes(std::uint64_t h, const void *data, std::size_t n) {
  const auto *p = static_cast<const unsigned char *>(data);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = Mix(h, w);
  }
  std::uint64_t w = 0;
  std::memcpy(&w, p + i, n - i);
  return Mix(h, w ^ (std::uint64_t(n - i) << 56));
}

} // namespace pig::runtime::detail
