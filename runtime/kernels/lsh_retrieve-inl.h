// LSH kernels, retrieve family (per Highway target): the bucket walk of every table and segment,
// collision counting per head (epoch-stamped u8 counters, or 16-bit ones past kMaxEpochT) and the
// union of the heads' sample sets (RetrieveArgs, lsh_kernels.h). The index's unsorted tail is
// retrieved on the host (lsh::retrieve_tail, lsh_index.cpp).

#if defined(PIG_RUNTIME_KERNELS_LSH_RETRIEVE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PIG_RUNTIME_KERNELS_LSH_RETRIEVE_INL_H_
#undef PIG_RUNTIME_KERNELS_LSH_RETRIEVE_INL_H_
#else
#define PIG_RUNTIME_KERNELS_LSH_RETRIEVE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/base.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "pig/runtime/lsh_kernels.h"
#include "runtime/kernels/lsh_common-inl.h"
#include "runtime/kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {

// Walks the query's probed buckets in every table of every segment: calls list(s, ids, lo, hi)
// for each (segment s, table l, probe p) in order, with ids[lo, hi) the id list of bucket
// qc[l] ^ probe[p] (ids relative to the segment). One probe (mask 0) is the query's own bucket;
// multi-probe adds the buckets within r bits (RetrieveArgs::r), each a bucket of the same table,
// so a token is listed at most once per table. Per segment, the bucket offsets of all the lists
// are loaded first (L * P independent misses overlap), then the id lists are prefetched kAhead
// lists ahead of the one being counted. Keep the prefetches in this function's body: a form that
// issued them from a lambda compiled to no prefetch instruction at all (GCC 12.2, every target; see
// objdump) and ran at 1.06-1.24x the public method against 1.43-1.63x for this one.
template <int kK, int kL, int kAhead, typename List>
HWY_INLINE void WalkIndex(const IndexView &ix, const uint16_t *HWY_RESTRICT qc,
                          const uint16_t *HWY_RESTRICT probe, std::size_t P, const List &list) {
  const std::size_t K = kK ? std::size_t(kK) : std::size_t(ix.K);
  const std::size_t L = kL ? std::size_t(kL) : std::size_t(ix.L);
  const std::size_t stride = (std::size_t(1) << K) + 1;
  const std::size_t nseg = (ix.count + kSegment - 1) / kSegment;
  const std::size_t lists = L * P;                   // per segment: table j / P, probe j % P
  constexpr std::size_t ahead = std::size_t(kAhead); // lists whose ids are in flight
  thread_local std::vector<uint32_t> lo_hi_store;    // the segment's [lo, hi) per list
  if (lo_hi_store.size() < 2 * lists)
    lo_hi_store.resize(2 * lists);
  uint32_t *HWY_RESTRICT lo_hi = lo_hi_store.data();
  for (std::size_t s = 0; s < nseg; ++s) {
    const uint16_t *off = ix.offsets + s * L * stride;
    for (std::size_t l = 0, j = 0; l < L; ++l)
      for (std::size_t p = 0; p < P; ++p, ++j) {
        const uint16_t *o = off + l * stride + (qc[l] ^ probe[p]);
        lo_hi[2 * j] = o[0];
        lo_hi[2 * j + 1] = o[1];
      }
    const std::size_t len = std::min(kSegment, ix.count - s * kSegment);
    const uint16_t *ids0 = ix.ids + s * kSegment * L; // table l's ids at ids0 + l * len
    auto ids_of = [&](std::size_t j) { return ids0 + (P == 1 ? j : j / P) * len; };
    for (std::size_t j = 0; j < std::min(ahead, lists); ++j)
      sd::PrefetchRow(ids_of(j) + lo_hi[2 * j], (lo_hi[2 * j + 1] - lo_hi[2 * j]) * 2);
    for (std::size_t j = 0; j < lists; ++j) {
      if (ahead > 0 && j + ahead < lists) {
        const std::size_t ja = j + ahead;
        sd::PrefetchRow(ids_of(ja) + lo_hi[2 * ja], (lo_hi[2 * ja + 1] - lo_hi[2 * ja]) * 2);
      }
      list(s, ids_of(j), lo_hi[2 * j], lo_hi[2 * j + 1]);
    }
  }
}

// Counts one head's index entries into the epoch-stamped u8 counters: a counter below `base` is
// stale (left by an earlier head or call) and reads as 0, and a head's count saturates at t + 1,
// so the count of token i is min(max(c_i, base) - base, t + 1) and the head's values stay within
// [base, base + t + 1]; no counter is ever cleared per step. The entry that brings a count to
// exactly t marks the token as a hit, so the tokens reaching t are known when the walk ends: no
// pass over the counters and no branch per entry. Returns the number of hits appended to `hits`
// (vector walk), or 0 with the hits' bits set in `bits` (scalar walk).
//
// Why bytes: the walk's gathers and scatters hit random counters of a 65535-token segment, 64
// KiB of u8 counters against 128 KiB of u16 ones, so more of them stay in L1 (48 KiB here), and
// the scratch is half the size. Measured on the Xeon (AVX3_DL, cached, a harness running this
// walk's loop on copied lists): the benchmark's own lists (n = 128k, 22.3k entries) 18.5-22.2 us
// against 19.1-23.0 us; random ids in lists of those lengths 21.2 against 25.7 us. The walk is
// bound by the scatter (a scatter-only loop costs as much as the whole walk) more than by where
// the counters sit; the interleaved retrieval pair did not move measurably.
//
// AVX-512 (and later x86 targets): one bucket list is taken 16 entries at a time by a 32-bit
// gather of the counters, a max, add and min, and a scatter back (each lane reads and writes its
// u8 counter with its three upper neighbours, which is why the state has kCounterSlack counters
// of slack); hits are compressed onto `hits` as index positions. With the counters in cache the
// walk is bound by instructions per entry, not by memory: the scalar loop takes ~15, the public
// method ~9, this about one vector instruction (the scatter, ~1.2 cycles per entry, is the
// limit). Two lanes of one vector never name the same counter (a token is in a bucket once), and
// when they name neighbours (ids i and i + 1..3) the scatter writes lanes in order, lowest first,
// and ids ascend within a bucket (BuildIndex), so the lane that owns a counter writes it last.
// Lanes past the list's end are masked out of the gather, the scatter and the hits. Other
// targets: the scalar loop, which sets the hit's bit at once.
template <int kK, int kL, int kAhead>
HWY_INLINE std::size_t CountHead(const IndexView &ix, const uint16_t *HWY_RESTRICT qc,
                                 const uint16_t *HWY_RESTRICT probe, std::size_t P, uint32_t base,
                                 uint32_t t, uint8_t *HWY_RESTRICT counters,
                                 uint64_t *HWY_RESTRICT bits, uint32_t *HWY_RESTRICT hits) {
  std::size_t n_hits = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  (void)bits;
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const std::size_t N = hn::Lanes(du);
  const auto vbase = hn::Set(du, base), vt = hn::Set(du, base + t), one = hn::Set(du, 1u);
  const auto vsat = hn::Set(du, base + t + 1);
  const auto low = hn::Set(du, 0xFFu), high = hn::Set(du, 0xFFFFFF00u);
  WalkIndex<kK, kL, kAhead>(
      ix, qc, probe, P, [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
        // ids are relative to the segment
        uint8_t *HWY_RESTRICT cw = counters + s * kSegment;
        const auto seg = hn::Set(du, uint32_t(s * kSegment));
        for (uint32_t j = lo; j < hi; j += uint32_t(N)) {
          const std::size_t n = std::min<std::size_t>(N, hi - j);
          // A masked load: the last list of the index may end at the end of its allocation.
          const auto id = hn::PromoteTo(du, hn::MaskedLoad(hn::FirstN(d16, n), d16, ids + j));
          const auto valid = hn::FirstN(du, n);
          const auto offset = hn::BitCast(di, id); // bytes
          // Masked gather and scatter (Highway 1.0.3 has neither): lanes past the list's end cost
          // nothing, where unmasked ones repeating the last entry took a full 16-lane scatter.
          const auto word = decltype(id){
              _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid.raw, offset.raw, cw, 1)};
          // base + this head's count after the entry, saturated at base + t + 1
          const auto now = hn::Min(hn::Add(hn::Max(hn::And(word, low), vbase), one), vsat);
          _mm512_mask_i32scatter_epi32(cw, valid.raw, offset.raw,
                                       hn::Or(hn::And(word, high), now).raw, 1);
          const auto hit = hn::And(valid, hn::Eq(now, vt));
          hn::StoreU(hn::Compress(hn::Add(id, seg), hit), du, hits + n_hits); // hits has N slack
          n_hits += hn::CountTrue(du, hit);
        }
      });
#else
  (void)hits;
  WalkIndex<kK, kL, kAhead>(
      ix, qc, probe, P, [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
        uint8_t *HWY_RESTRICT c = counters + s * kSegment; // ids are relative to the segment
        const std::size_t s0 = s * kSegment;
        for (uint32_t j = lo; j < hi; ++j) {
          const uint32_t id = ids[j];
          // max(v - base, 0) without a branch: written as v > base ? v : base, GCC emits a jump
          // that mispredicts on every second collision of a token.
          const int32_t dv = int32_t(c[id]) - int32_t(base);
          const uint32_t was = uint32_t(dv & ~(dv >> 31)); // this head's count before the entry
          const uint32_t now = was + uint32_t(was <= t);   // after it, saturated at t + 1
          c[id] = uint8_t(base + now);
          const std::size_t g = s0 + id;
          bits[g / 64] |= uint64_t(now == t) << (g % 64); // only the entry from t - 1 gives t
        }
      });
#endif
  return n_hits;
}

// The ≥ t rule for t > kMaxEpochT (L >= 255 tables): plain 16-bit counts of this head, cleared
// per head, with the hit's bit set when a count reaches t. Outside the fast path on purpose; it
// keeps every valid (K, L, t) served.
template <int kK, int kL, int kAhead>
HWY_INLINE void CountHeadWide(const IndexView &ix, const uint16_t *HWY_RESTRICT qc,
                              const uint16_t *HWY_RESTRICT probe, std::size_t P, uint32_t t,
                              uint64_t *HWY_RESTRICT bits) {
  thread_local std::vector<uint16_t> count;
  count.assign(ix.count, 0);
  WalkIndex<kK, kL, kAhead>(ix, qc, probe, P,
                            [&](std::size_t s, const uint16_t *ids, uint32_t lo, uint32_t hi) {
                              for (uint32_t j = lo; j < hi; ++j) {
                                const std::size_t g = s * kSegment + ids[j];
                                if (++count[g] == t)
                                  bits[g / 64] |= uint64_t(1) << (g % 64);
                              }
                            });
}

// The union of G hit bitsets (head h's at bits + h * stride, `words` words each) in ascending
// order: tokens[i] = begin + position, and with masks, masks[i] = the bit mask of the heads whose
// set holds it (bit h = head h). Clears the bitsets as it reads them, adds each head's count to
// per_head[h], and returns the union's size. Writes nothing past the union (masked stores).
//
// AVX-512: per 64-bit word, the set positions are compressed out of an index vector and the
// heads' mask bytes out of a vector built from their words, with no branch per token. The scalar
// loop (one tzcnt, G shifts and a data-dependent loop exit per token) cost ~50 us per GQA-3 step
// at n = 128k, more than a third of its three walks (harness on cached data, Xeon).
HWY_INLINE std::size_t UnionOfBitsets(uint64_t *HWY_RESTRICT bits, std::size_t stride,
                                      std::size_t words, int G, uint32_t begin,
                                      uint32_t *HWY_RESTRICT tokens, uint8_t *HWY_RESTRICT masks,
                                      std::size_t *HWY_RESTRICT per_head) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  alignas(64) static constexpr uint8_t kIota[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i iota8 = _mm512_load_si512(kIota);
  const __m512i iota32 = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(iota8));
  auto first = [](unsigned k) { return __mmask16(k >= 16 ? 0xFFFFu : (1u << k) - 1u); };
#endif
  std::size_t n = 0;
  for (std::size_t w = 0; w < words; ++w) {
    uint64_t hb[kMaxGroup];
    uint64_t any = 0;
    for (int h = 0; h < G; ++h) {
      hb[h] = bits[std::size_t(h) * stride + w];
      any |= hb[h];
    }
    if (!any)
      continue;
    for (int h = 0; h < G; ++h) {
      bits[std::size_t(h) * stride + w] = 0;
      per_head[h] += std::size_t(hwy::PopCount(hb[h]));
    }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    const unsigned cnt = unsigned(hwy::PopCount(any));
    const __m512i base = _mm512_set1_epi32(int32_t(begin + uint32_t(w * 64)));
#if HWY_TARGET <= HWY_AVX3_DL
    // VBMI2: one byte compress gives every position and every mask of the word.
    if (masks) {
      __m512i mv = _mm512_maskz_mov_epi8(hb[0], _mm512_set1_epi8(1));
      for (int h = 1; h < G; ++h)
        mv = _mm512_or_si512(mv, _mm512_maskz_mov_epi8(hb[h], _mm512_set1_epi8(char(1 << h))));
      _mm512_mask_storeu_epi8(masks + n, cnt >= 64 ? ~uint64_t(0) : (uint64_t(1) << cnt) - 1,
                              _mm512_maskz_compress_epi8(any, mv));
    }
    __m512i pos = _mm512_maskz_compress_epi8(any, iota8);
    for (unsigned c = 0; c < cnt; c += 16) { // once for all but words of > 16 tokens
      const __m512i t32 = _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(pos)), base);
      _mm512_mask_storeu_epi32(tokens + n + c, first(cnt - c), t32);
      pos = _mm512_alignr_epi32(pos, pos, 4); // the next 16 positions to the bottom
    }
#else
    // AVX3: 32-bit compresses, 16 positions at a time.
    for (unsigned c = 0, o = 0; c < 64; c += 16) {
      const __mmask16 m = __mmask16(any >> c);
      const unsigned k = unsigned(_mm_popcnt_u32(m));
      const __m512i pos = _mm512_add_epi32(iota32, _mm512_set1_epi32(int32_t(c)));
      _mm512_mask_storeu_epi32(tokens + n + o, first(k),
                               _mm512_maskz_compress_epi32(m, _mm512_add_epi32(pos, base)));
      if (masks) {
        __m512i mv = _mm512_maskz_mov_epi32(__mmask16(hb[0] >> c), _mm512_set1_epi32(1));
        for (int h = 1; h < G; ++h)
          mv = _mm512_or_si512(
              mv, _mm512_maskz_mov_epi32(__mmask16(hb[h] >> c), _mm512_set1_epi32(1 << h)));
        _mm512_mask_cvtepi32_storeu_epi8(masks + n + o, first(k),
                                         _mm512_maskz_compress_epi32(m, mv));
      }
      o += k;
    }
#endif
    n += cnt;
#else
    const uint32_t t0 = begin + uint32_t(w * 64);
    while (any) {
      const std::size_t b = hwy::Num0BitsBelowLS1Bit_Nonzero64(any);
      any &= any - 1;
      uint32_t m = 0;
      for (int h = 0; h < G; ++h)
        m |= uint32_t((hb[h] >> b) & 1u) << h;
      tokens[n] = t0 + uint32_t(b);
      if (masks)
        masks[n] = uint8_t(m);
      ++n;
    }
#endif
  }
  return n;
}

template <int kK, int kL, int kAhead> void Retrieve(const RetrieveArgs &a) {
  const IndexView &ix = a.index;
  const std::size_t L = Pick<kL>(std::size_t(ix.L));
  const std::size_t K = Pick<kK>(std::size_t(ix.K));
  HWY_ASSERT(a.G >= 1 && a.G <= kMaxGroup && a.t >= 1 && a.t <= int(L));
  HWY_ASSERT(a.r >= 0 && a.r <= spec::kMaxR && a.r < int(K));
  // The probe masks of (K, r), made when a thread's (K, r) changes.
  thread_local std::vector<uint16_t> probe;
  thread_local int probe_key = -1;
  if (probe_key != int(K) * 8 + a.r) {
    probe = probe_masks(int(K), a.r);
    probe_key = int(K) * 8 + a.r;
  }
  const std::size_t P = probe.size();
  const std::size_t words = (ix.count + 63) / 64;
  HWY_ASSERT(a.state.words >= words && a.state.capacity >= ix.count);
  const uint32_t t = uint32_t(a.t);
  thread_local std::vector<uint32_t> hits;
  const std::size_t hits_needed = ix.count + hn::Lanes(hn::ScalableTag<uint32_t>());
  if (hits.size() < hits_needed) // grow only: a token is a hit once per head, plus a vector
    hits.resize(hits_needed);
  for (int h = 0; h < a.G; ++h) {
    uint64_t *HWY_RESTRICT bits = a.state.bits + std::size_t(h) * a.state.words;
    if (a.t > kMaxEpochT) {
      CountHeadWide<kK, kL, kAhead>(ix, a.query_codes + h * L, probe.data(), P, t, bits);
      continue;
    }
    // A head's counters saturate at base + t + 1: its values stay within [base, base + t + 1].
    uint32_t base = *a.state.epoch;
    if (base + t + 1 > 0xFFu) { // epoch space exhausted: one clear every ~255 / (t + 1) heads
      // All of them, not only this index's: the scratch serves indexes of different sizes, and
      // a counter past this count left at a high epoch would read as a count for a larger one.
      std::memset(a.state.counters, 0, a.state.capacity);
      base = 0;
    }
    *a.state.epoch = base + t + 1;
    const std::size_t n_hits = CountHead<kK, kL, kAhead>(
        ix, a.query_codes + h * L, probe.data(), P, base, t, a.state.counters, bits, hits.data());
    for (std::size_t i = 0; i < n_hits; ++i) // hits of the vector walk (none on other targets)
      bits[hits[i] / 64] |= uint64_t(1) << (hits[i] % 64);
  }
  std::size_t per_head[kMaxGroup] = {};
  const std::size_t n = UnionOfBitsets(a.state.bits, a.state.words, words, a.G, uint32_t(ix.begin),
                                       a.tokens, a.masks, per_head);
  *a.count = n;
  if (a.per_head)
    for (int h = 0; h < a.G; ++h)
      a.per_head[h] = per_head[h];
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // PIG_RUNTIME_KERNELS_LSH_RETRIEVE_INL_H_ toggle
