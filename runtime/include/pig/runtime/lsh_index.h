// Owning host-side objects around the LSH kernels (lsh_kernels.h): the SimHash matrix, the index
// of one (layer, kv-head), the per-thread retrieval scratch and the log u table. One decode step
// that chains them (encode queries -> retrieve -> fused sampled attention): lsh_step.h.
//
// Index layout (bytes per token per kv-head, see IndexLayout::bytes_per_token):
//   tokens are cut into segments of 65535; per (segment, table) the token ids (u16, relative to the
//   segment) sorted by bucket, and 2^K + 1 bucket offsets (u16, <= 65535 by the segment size).
//   ids: 2 L bytes per token (the public implementation stores int32 ids: 4 L).
//   offsets: 2 (2^K + 1) L / min(n, 65535) bytes per token: 4.7 at K = 10, L = 150, n >= 65535.
// A 16-bit id cannot name more than 65536 tokens; the segment split costs one extra bucket walk
// per segment and table (2 at 128k tokens), and keeps every list contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "pig/reference/matrix.h"
#include "pig/reference/transform.h"
#include "pig/runtime/lsh_kernels.h"

namespace pig::runtime::lsh {

/// Allocator for the big randomly-accessed arrays (index, K/V rows gathered by the sampled pass):
/// allocations of 2 MiB or more are 2 MiB-aligned and advised as transparent huge pages before
/// their first touch. A sampled step touches rows on thousands of distinct 4 KiB pages; with
/// 4 KiB pages nearly every gathered row is a TLB miss (and under virtualisation a 2-D page
/// walk), which costs more than the row itself.
template <typename T> struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHuge = std::size_t(2) << 20;
  HugePageAllocator() = default;
  template <typename U> HugePageAllocator(const HugePageAllocator<U> &) {}
  T *allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHuge)
      return static_cast<T *>(::operator new(bytes));
    const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void *p = std::aligned_alloc(kHuge, rounded);
    if (!p)
      throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE); // advisory: failure just means 4 KiB pages
#endif
    return static_cast<T *>(p);
  }
  void deallocate(T *p, std::size_t n) {
    if (n * sizeof(T) < kHuge)
      ::operator delete(p);
    else
      std::free(p);
  }
  template <typename U> bool operator==(const HugePageAllocator<U> &) const { return true; }
};

template <typename T> using HugeVector = std::vector<T, HugePageAllocator<T>>;

inline constexpr std::size_t kSegmentTokens = 65535;

struct IndexLayout {
  std::size_t count = 0; ///< indexed tokens
  int K = 0;
  int L = 0;
  std::size_t segments = 0;
  std::size_t offset_entries = 0; ///< u16
  std::size_t id_entries = 0;     ///< u16

  /// Throws std::length_error when the layout's entries (or bytes()) do not fit in a size_t.
  static IndexLayout of(std::size_t count, int K, int L);
  std::size_t bytes() const { return 2 * (offset_entries + id_entries); }
  double bytes_per_token() const { return count ? double(bytes()) / double(count) : 0.0; }
};

/// W = pig::ref::simhash_matrix(seed, d, K, L) (bit-identical), stored with its row stride
/// padded to a multiple of 16 floats (zeros), and its column norms.
class SimHash {
public:
  SimHash(std::uint64_t seed, std::size_t d, int K, int L);
  /// The (K, L) configuration over `wide`'s storage. simhash_matrix generates W column by column,
  /// so the W of (K, L) is the first K*L columns of any wider W of the same seed: the layers of a
  /// per-layer operating point share one matrix (and its cache lines: separate matrices of
  /// 10-12 configurations, ~0.5 MB each at d = 64, spill the L2 on every layer's query hashing).
  /// The columns past K*L within a row's padding are the wide W's, which the kernels compute and
  /// never read. Throws std::invalid_argument when K*L exceeds the wide configuration's.
  SimHash(std::shared_ptr<const SimHash> wide, int K, int L);
  SimHashView view() const;
  std::size_t d() const { return d_; }
  int K() const { return K_; }
  int L() const { return L_; }
  /// Entry (row r, column c) of W.
  float at(std::size_t r, std::size_t c) const { return data()[r * cols_ + c]; }

private:
  const float *data() const { return owner_ ? owner_->data() : w_.data(); }
  const float *norms() const { return owner_ ? owner_->norms() : norm_.data(); }
  std::size_t d_;
  int K_, L_;
  std::size_t cols_;
  std::vector<float> w_, norm_;
  std::shared_ptr<const SimHash> owner_; // set: w_ and norm_ are empty, the owner's are used
};

/// Tokens that are always attended exactly and never indexed (pig::ref::StaticConfig).
struct StaticTokens {
  std::size_t sink = 4;
  std::size_t local = 64;
  /// The centring mean averages the first mean_window indexed keys (0: all of them;
  /// pig::ref::StaticConfig::mean_window). Nonzero, an index over a prefix can be shared.
  std::size_t mean_window = 0;
};

/// How LshIndex::build allocates what it writes.
struct BuildOptions {
  /// Room for this many tokens in total (reserve()), taken before the tables are written: the
  /// tables are then allocated once and never copied (reserving after the build copied every
  /// table into a second allocation: 0.4 s of page faults and copies at 16k, 84 indexes).
  std::size_t capacity = 0;
  /// Keep the build's codes (codes()); false hashes into a per-thread buffer that the thread's
  /// next build reuses, so no build pays fresh pages for codes it drops at once.
  bool keep_codes = true;
};

/// Hashing in a space fitted to one (layer, kv-head)'s indexed keys (pig/reference/transform.h;
/// the runtime serves whiten:a=A): fitted once, at index build, by pig::ref::fit_transform on
/// the centred indexed keys (so the maps are the reference's, bit for bit), then kept as the
/// index grows, like the centring mean. Keys and queries are mapped (map_keys, map_query: the
/// reference's arithmetic, bit for bit) and hashed against the W every head shares; the sampled
/// pass takes the cosine's norms from here (|q'| per head, |k'_i| per indexed token, computed
/// when the token joins the index).
class FittedHash {
public:
  /// Fits `spec` to keys [begin, begin + count) (n x d rows of dtype) centred by `mean`.
  /// Throws std::invalid_argument for a transform the runtime does not serve or count == 0.
  FittedHash(const spec::TransformSpec &spec, const void *keys, DType dtype, std::size_t begin,
             std::size_t count, const std::vector<float> &mean, const PagedRows &paged = {});

  const ref::HashTransform &transform() const { return T_; }
  /// q' = the reference's HashTransform::query(q) (d floats, bit for bit); returns |q'|.
  float map_query(const float *q, float *out) const;
  /// k' = the reference's HashTransform::key(k - mean) of keys [first, first + rows) into out
  /// (rows x d f32, bit for bit; k - mean in f32 like the encoder), and appends their |k'|.
  void map_keys(const void *keys, DType dtype, std::size_t first, std::size_t rows,
                const std::vector<float> &mean, float *out, const PagedRows &paged = {});
  /// |k'| of the index's i-th indexed token.
  const float *key_norms() const { return norms_.data(); }
  std::size_t norm_count() const { return norms_.size(); }
  /// The two maps and the norms.
  std::size_t bytes() const;

private:
  ref::HashTransform T_;
  std::vector<float> norms_;
};

/// The LSH index of one (layer, kv-head): split into static and indexed tokens exactly like
/// pig::ref::split_tokens, centering mean of the indexed keys (accumulated in double, rounded to
/// f32 once, like pig::ref::mean_of_rows), and the bucket tables.
///
/// Growth during decoding (extend): the local window slides, and each token that leaves it
/// joins the index, hashed against the same mean (never updated, as in the paper). New tokens
/// first go to an unsorted tail of codes that retrieval scans linearly; when the tail reaches
/// tail_limit() tokens it is merged into the bucket tables of the last (open) segment, which is
/// re-sorted from its own tables (no codes are kept for sorted tokens). Generation length is
/// bounded only by the capacity given to reserve().
class LshIndex {
public:
  /// keys: n x d rows of `dtype`. Uses set.encode and set.build_index. A non-plain transform
  /// is fitted to the indexed keys (FittedHash) and the keys are hashed in its space; an index
  /// built with no indexed token stays plain (there is nothing to fit; the mean is zero too).
  static LshIndex build(const LshKernelSet &set, const void *keys, DType dtype, std::size_t n,
                        const SimHash &W, StaticTokens st = {},
                        const spec::TransformSpec &transform = {}, const BuildOptions &opt = {});
  /// The same over keys in pages (a paged KV cache, read in place; PagedRows): the same index.
  static LshIndex build(const LshKernelSet &set, const void *keys, DType dtype,
                        const PagedRows &paged, std::size_t n, const SimHash &W,
                        StaticTokens st = {}, const spec::TransformSpec &transform = {},
                        const BuildOptions &opt = {});

  /// An immutable copy of a built index's tables that other sequences' indexes can stand on
  /// (on()): the index of a prefix, shared read-only. Throws std::invalid_argument for an index
  /// that cannot be shared: fitted hashing (its map is fitted to all of one sequence's keys), a
  /// tail not yet merged, or one that stands on a base itself.
  static std::shared_ptr<const LshIndex> freeze(LshIndex built);
  /// The index of a sequence whose first sink_end() + limit positions, and the keys base's mean
  /// averaged, hold the same keys as base's (the same KV blocks: the caller's to know): base's
  /// first `limit` indexed tokens are read through `base`, never copied, and this index owns
  /// what joins after them (extend() from here, with base's mean). Retrieval gives what an index
  /// built over the whole sequence with the same mean gives, token for token. Throws
  /// std::invalid_argument when limit is 0 or exceeds base's indexed tokens.
  static LshIndex on(std::shared_ptr<const LshIndex> base, std::size_t limit);
  /// A frozen index (freeze's kind) as bytes, and back: parse() checks every size against the
  /// fields and returns nullopt, saying why, for bytes that do not make such an index.
  std::string serialize() const;
  static std::optional<LshIndex> parse(std::string_view bytes, std::string *why);

  /// Room for `capacity` tokens in total, so that extend() never reallocates the tables.
  void reserve(std::size_t capacity);
  /// The sequence grew to new_n >= n() tokens; keys: the whole new_n x d matrix of `dtype`.
  void extend(const LshKernelSet &set, const void *keys, DType dtype, std::size_t new_n,
              const SimHash &W);
  /// The same over keys in pages.
  void extend(const LshKernelSet &set, const void *keys, DType dtype, const PagedRows &paged,
              std::size_t new_n, const SimHash &W);
  /// extend() in two halves, for a caller that hashes the joining keys of many indexes in one
  /// encode (one pass over W for every 8 rows: PagedLshAttention). extend_rows writes into `rows`
  /// the f32 rows that extend(new_n) hashes -- the keys leaving the local window, centred by the
  /// mean, or mapped into the fitted space (whose key norms it records) -- and returns their
  /// count; extend_codes then takes their codes (set.encode of those rows with the index's W)
  /// and grows the index to new_n. extend() is the two with set.encode between them, so both give
  /// the same index. Nothing may change the index between the two calls.
  std::size_t extend_rows(const void *keys, DType dtype, const PagedRows &paged, std::size_t new_n,
                          std::vector<float> &rows);
  void extend_codes(const LshKernelSet &set, std::size_t new_n, const std::uint16_t *codes);

  /// The sorted part this index owns (what set.retrieve reads), after the base's tokens.
  IndexView view() const;
  /// The index this one stands on (null: none), and how many of its indexed tokens it reads:
  /// positions [sink_end(), sink_end() + base_count()). Retrieval walks base()->view() and keeps
  /// the tokens below that bound.
  const LshIndex *base() const { return base_.get(); }
  std::size_t base_count() const { return base_count_; }
  /// Keys the mean averaged: [sink_end(), sink_end() + mean_count()) (ref::mean_count).
  std::size_t mean_count() const { return mean_count_; }
  /// Layout of the sorted part.
  const IndexLayout &layout() const { return layout_; }
  const std::vector<float> &mean() const { return mean_; }
  /// Token-major codes of the centered indexed keys at build (kept for tests; empty after
  /// drop_codes()).
  const std::vector<std::uint16_t> &codes() const { return codes_; }
  void drop_codes() { codes_ = {}; }
  std::size_t n() const { return n_; }
  std::size_t sink_end() const { return begin_; }
  /// Indexed tokens: the base's, the sorted part, the tail.
  std::size_t count() const { return base_count_ + layout_.count + tail_count(); }
  std::size_t local_begin() const { return begin_ + count(); }
  /// Tokens [tail_begin(), local_begin()), token-major codes (L each).
  std::size_t tail_count() const { return L_ ? tail_.size() / std::size_t(L_) : 0; }
  std::size_t tail_begin() const { return begin_ + base_count_ + layout_.count; }
  const std::uint16_t *tail_codes() const { return tail_.data(); }
  /// The tail is merged into the tables when it reaches this many tokens: 256, or 1/16 of the
  /// open segment, whichever is larger (merging costs a pass over the open segment).
  std::size_t tail_limit() const;
  /// Bytes held now: tables, tail codes, mean (fitted hashing apart: fitted()->bytes()); a
  /// base's are its own (base()->bytes()), shared by every index on it.
  std::size_t bytes() const;
  /// The fitted hashing space, or null for plain hashing.
  const FittedHash *fitted() const { return fitted_ ? &*fitted_ : nullptr; }
  std::size_t local() const { return local_; }
  int K() const { return K_; } ///< bits per code
  int L() const { return L_; } ///< tables (codes per token)

private:
  void merge_tail(const LshKernelSet &set);
  // How many tokens extend(new_n) moves from the local window into the index (throws when the
  // sequence would shrink).
  std::size_t joining(std::size_t new_n) const;

  std::size_t n_ = 0, begin_ = 0, local_ = 0, mean_count_ = 0, base_count_ = 0;
  std::shared_ptr<const LshIndex> base_;
  int K_ = 0, L_ = 0;
  IndexLayout layout_;
  std::vector<float> mean_;
  std::vector<std::uint16_t> codes_, tail_;
  HugeVector<std::uint16_t> offsets_, ids_;
  std::optional<FittedHash> fitted_;
};

/// The unsorted tail of an index (LshIndex::tail_codes) and one group's query codes, for
/// retrieve_tail.
struct RetrieveTailArgs {
  const std::uint16_t *codes = nullptr; ///< count * L, token-major
  std::size_t count = 0;                ///< tail tokens
  std::size_t first = 0;                ///< absolute position of tail token 0
  int L = 0;
  const std::uint16_t *query_codes = nullptr; ///< G * L
  int G = 1;
  int t = 2;
  int r = 0;                       ///< multi-probe radius: a table counts within r bits
  std::uint32_t *tokens = nullptr; ///< appended to at [n, ...)
  std::uint8_t *masks = nullptr;   ///< appended to like tokens; null: no masks (G == 1)
  std::size_t n = 0;               ///< entries already in tokens and masks
  std::size_t *per_head = nullptr; ///< optional: per_head[h] += the tail tokens head h sampled
};

/// Tokens of the tail (token i at absolute position first + i) whose codes agree with head h's
/// query codes in >= t tables, appended after the `n` entries already in tokens/masks (they
/// follow every sorted token, so the order stays ascending), with the mask of the heads that
/// sampled each. Returns the new n.
std::size_t retrieve_tail(const RetrieveTailArgs &a);

/// Retrieval scratch for indexes of up to `capacity` tokens (one per thread).
class RetrievalScratch {
public:
  explicit RetrievalScratch(std::size_t capacity);
  RetrievalState state();
  std::size_t capacity() const { return counters_.size() - kCounterSlack; }

private:
  HugeVector<std::uint8_t> counters_;
  std::vector<std::uint64_t> bits_;
  std::uint32_t epoch_ = 0;
};

/// h(p) = log u(p) - t (K - r) log p on p = i / size, from pig::ref::log_collision_probability
/// (the one definition of u, at probe radius r). Linear interpolation error < 2e-6 in log u at
/// size 4096 for the configurations tested (tests/kernels).
class LogUTableData {
public:
  LogUTableData(int K, int L, int t, int r = 0, int size = 4096);
  LogUTable view() const { return LogUTable{h_.data(), size_, tk_}; }

private:
  std::vector<float> h_;
  int size_;
  float tk_;
};

/// Round-to-nearest-even f32 -> bf16 (raw bits) of n values on the chosen SIMD target, and back.
void convert_to_bf16(const float *in, std::uint16_t *out, std::size_t n);
void convert_from_bf16(const std::uint16_t *in, float *out, std::size_t n);
/// Row i of rows of d elements of dtype (row_bytes apart) as d floats (q8: pig::ref's dequantised
/// values).
void row_to_f32(const void *rows, DType dtype, std::size_t i, std::size_t d, float *out);
/// The same for rows in pages (PagedRows).
void row_to_f32(const void *rows, DType dtype, const PagedRows &paged, std::size_t i, std::size_t d,
                float *out);
/// The kernels' exp (<= 1e-6 relative, 0 below ln FLT_MIN) on n values: for tests.
void exp_clamped(const float *in, float *out, std::size_t n);

} // namespace pig::runtime::lsh
