// The LSH sampling attention kernels (ALGORITHM.md section 1) as the runtime sees them: a set of
// plain function pointers per configuration key (K, L, d, dtype, target), a registry that
// resolves a key to the specialised set when one was generated and to the generic set (which
// takes K, L and d at run time) otherwise, and the argument structs of every entry point.
//
// Stable interface: pig-translate emits C++ files that instantiate the templates of
// runtime/kernels/lsh-inl.h and register them here (see the "contract for generated code" at
// the top of that file). Do not change these structs without changing the generator.
//
// Conventions shared by every kernel:
// - Keys and values are n rows of d elements, f32, bf16 (raw bits, round to nearest even when
//   converting) or q8 (row_bytes below), rows back to back, or in pages (PagedRows: a paged KV
//   cache, read in place through its page table). Queries, W, means and outputs are f32.
// - Codes are uint16_t (K <= 16), token-major: the L codes of row i at [i*L, (i+1)*L).
// - `lse` is the NATURAL-log log-sum-exp of the scaled logits, like pig::ref (the public
//   MagicPIG kernels return base 2: lse2 = lse / ln 2). An empty attended set gives lse = -inf
//   and a zero output; merge treats it as the identity.
// - A group of G query heads (GQA) sharing one kv-head is processed in one call: K/V rows are
//   read once for the whole group while every head keeps its own estimator.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pig/runtime/lsh_schedule.h"
#include "pig/spec/kernel_key.h"
#include "pig/spec/kv_type.h"

namespace pig::runtime::lsh {

/// Element type of K and V rows, the bytes of a row and the head dims each supports: pig::spec's
/// (pig/spec/kv_type.h). q8 is 8-bit with a scale per block of 32 elements (each block is a bf16
/// scale then 32 int8, so a row of d elements is d / 32 blocks of 34 bytes; d must be a multiple
/// of 32; pig/reference/kv_quant.h quantises).
using spec::DType;
using spec::dtype_unsupported;
using spec::row_bytes;
enum class Target : std::uint8_t { cpu, cuda };

const char *to_string(DType t);
const char *to_string(Target t);
/// The element type named "f32", "bf16" or "q8"; false for any other name.
bool parse_dtype(const std::string &name, DType &out);

/// Kernel template tag of q8 rows (MakeKernelSet<K, L, d, Q8>); one byte of a q8 row.
struct Q8 {
  std::uint8_t raw;
};

/// Largest group of query heads per kv-head one call handles (the per-token membership of the
/// sample sets is a uint8_t bit mask).
inline constexpr int kMaxGroup = 8;

/// Rows kept in pages, as a paged KV cache keeps them (vLLM's: one page per (block, kv-head)): row
/// i of a sequence is row i % page_rows of page pages[i / page_rows], which begins
/// pages[i / page_rows] * page_stride bytes after the rows' base pointer; inside a page the rows
/// lie back to back (row_bytes apart) like unpaged rows. Keys and values of one kv-head share the
/// table and the stride (two base pointers). The kernels read every row in place through the
/// table: nothing is gathered or copied. `pages` null: no paging, the rows are back to back.
struct PagedRows {
  const std::int32_t *pages = nullptr;
  std::size_t page_rows = 0;   ///< rows per page (> 0 when pages is set)
  std::size_t page_stride = 0; ///< bytes from one page number to the next
  bool paged() const { return pages != nullptr; }
};

/// The address of row i of rows of d elements of dtype starting at base (paged or not): what the
/// kernels compute, for host code (index build, tests).
const void *row_address(const void *base, DType dtype, std::size_t d, const PagedRows &paged,
                        std::size_t i);

/// (K, L) in the LshHash base (pig/spec/lsh_params.h); {K, L, d, dtype, target, schedule}
/// initialises, as the generated registrations write it.
struct KernelKey : spec::LshHash {
  int d = 128;
  DType dtype = DType::bf16;
  Target target = Target::cpu;
  Schedule schedule{}; ///< how the set runs (lsh_schedule.h); not what it computes

  friend bool operator==(const KernelKey &, const KernelKey &) = default;
  /// The configuration and schedule without the target (pig/spec/kernel_key.h).
  spec::KernelKey config() const { return {{K, L}, d, dtype, schedule}; }
  /// "K=10 L=150 d=128 bf16 cpu" (spec::KernelKey's spelling, then the target), with
  /// " [gqa=union block=32 ...]" when the schedule is not the default.
  std::string str() const;
};

/// The SimHash matrix W (d x cols, row-major, f32, bit-identical to pig::ref::simhash_matrix)
/// and the Euclidean norm of each of its first K*L columns (rounded up), which bounds the f32
/// rounding error of a projection: projections too close to zero for their sign to be certain
/// are recomputed in double exactly as pig::ref::encode does, so codes equal the reference's.
struct SimHashView {
  const float *w = nullptr;
  const float *col_norm = nullptr; ///< K*L entries
  std::size_t d = 0;
  std::size_t cols = 0; ///< row stride of w, >= K*L
  int K = 0;
  int L = 0;
};

/// codes[r*L + l] = code of (x_{first+r} - mean) in table l, for rows r in [0, rows). The
/// subtraction is done in f32 (as pig::ref::build_index does); a null mean hashes the rows as they
/// are.
struct EncodeArgs {
  const void *x = nullptr;
  DType dtype = DType::f32;
  std::size_t rows = 0;
  std::size_t first = 0;       ///< the rows are rows [first, first + rows) of x
  PagedRows paged;             ///< x in pages (null table: back to back)
  const float *mean = nullptr; ///< d entries or null
  SimHashView W;
  std::uint16_t *codes = nullptr; ///< rows * L
};

/// The bucket index of `count` tokens, split in segments of kSegmentTokens tokens: per segment
/// and table, 2^K + 1 bucket offsets (uint16) and the segment's token ids sorted by bucket
/// (uint16, relative to the segment). Layout and sizes: lsh_index.h (IndexLayout).
struct IndexView {
  int K = 0;
  int L = 0;
  std::size_t begin = 0; ///< absolute position of indexed token 0
  std::size_t count = 0; ///< indexed tokens
  const std::uint16_t *offsets = nullptr;
  const std::uint16_t *ids = nullptr;
};

/// Counting sort of the token-major codes of `count` tokens into the index storage.
struct BuildIndexArgs {
  const std::uint16_t *codes = nullptr; ///< count * L, token-major
  std::size_t count = 0;
  int K = 0;
  int L = 0;
  std::uint16_t *offsets = nullptr; ///< IndexLayout::offset_entries
  std::uint16_t *ids = nullptr;     ///< IndexLayout::id_entries
};

/// Counter entries a RetrievalState holds past `capacity`: the vector walk reads and writes
/// counters four at a time (a 32-bit lane at the u8 counter of a token), so the counter of the
/// last token needs three neighbours.
inline constexpr std::size_t kCounterSlack = 16;

/// The largest t the epoch-stamped u8 counters serve: a head's counter saturates at t + 1, and
/// its epoch's values [base, base + t + 1] must fit in a byte. Retrieval with a larger t (which
/// needs L >= 255 tables) counts in a plain 16-bit array cleared per head instead.
inline constexpr int kMaxEpochT = 254;

/// Per-thread state of retrieval: epoch-stamped u8 counters (never cleared per step: a counter
/// below the current epoch base reads as zero; each head advances the base by t + 1 and one
/// memset every ~255 / (t + 1) heads restarts the epochs) and one hit bitset per head, cleared
/// while it is read. Size it with lsh_index.h's RetrievalScratch.
struct RetrievalState {
  std::uint8_t *counters = nullptr; ///< capacity + kCounterSlack entries
  std::uint64_t *bits = nullptr;    ///< kMaxGroup * words entries, zero between calls
  std::size_t words = 0;            ///< bitset words per head, >= ceil(count / 64)
  std::uint32_t *epoch = nullptr;   ///< current base; advanced by t + 1 per head and call
  std::size_t capacity = 0;         ///< tokens (>= the index's count; all cleared on a wrap)
};

/// Tokens whose codes agree with the query's in >= t tables, for each of G query heads of one
/// kv-head: the union of the G sample sets in ascending absolute position, with for each token
/// the bit mask of the heads whose set contains it (bit h = head h).
struct RetrieveArgs {
  IndexView index;
  const std::uint16_t *query_codes = nullptr; ///< G * L
  int G = 1;
  int t = 2;
  /// Multi-probe radius (ALGORITHM.md section 5): each table is walked in every bucket whose code
  /// is within r bits of the query's (probe_masks(K, r) XORed onto it), so a token counts a table
  /// when its code differs from the query's in at most r bits. 0: the query's bucket alone.
  int r = 0;
  RetrievalState state;
  std::uint32_t *tokens = nullptr; ///< capacity index.count
  std::uint8_t *masks = nullptr;   ///< capacity index.count
  std::size_t *count = nullptr;    ///< out: union size
  std::size_t *per_head = nullptr; ///< out (optional): |S_h| for each head
};

/// log u as a function of the per-bit collision probability p (ALGORITHM.md 1.4), tabulated once
/// per (K, L, t, r) from pig::ref::log_collision_probability: h(p) = log u(p) - t*(K-r)*log p is
/// smooth on [0, 1] (u ~ C(L, t) (C(K, r) p^(K-r))^t as p -> 0), so log u = h(p) + t*(K-r)*log p
/// with h linearly interpolated. See lsh_index.h.
struct LogUTable {
  const float *h = nullptr; ///< size + 1 samples of h on p = i / size
  int size = 0;
  float tk = 0; ///< t * (K - r)
};

/// The XOR masks a table is probed with at radius r: every K-bit mask of at most r set bits, by
/// popcount then value (0 first), spec::probes_per_table(K, r) of them.
inline std::vector<std::uint16_t> probe_masks(int K, int r) {
  std::vector<std::uint16_t> masks{0};
  for (int bits = 1; bits <= r && bits <= K; ++bits)      // Gosper's hack: the next larger mask of
    for (unsigned m = (1u << bits) - 1; m < (1u << K);) { // as many bits
      masks.push_back(std::uint16_t(m));
      const unsigned low = m & -m, up = m + low;
      m = (((up ^ m) >> 2) / low) | up;
    }
  return masks;
}

/// The fused MagicPIG pass for G query heads of one kv-head: one online softmax over the static
/// tokens [0, static_end_sink) u [static_begin_local, n) (u = 1) and the sampled tokens
/// (logit scale*q.k_i - log u_i, u_i from the cosine of q with k_i - mean), accumulating values;
/// tokens of the union that head h did not sample are skipped for head h.
///
/// Fitted hashing (pig/reference/transform.h, whiten): keys and queries were hashed as
/// k' = A (k - mean) and q' = B q with q'.k' = q.(k - mean), so the cosine u needs is
/// q.(k_i - mean) / (|q'| |k'_i|): the caller passes |q'| per head and |k'_i| per indexed token
/// (both null for plain hashing, where they are |q| and |k_i - mean|, computed here).
struct SampledAttentionArgs {
  const float *q = nullptr; ///< G * d
  int G = 1;
  std::size_t d = 0;
  float scale = 0; ///< 1/sqrt(d) usually
  const void *k = nullptr;
  const void *v = nullptr;
  DType dtype = DType::bf16;
  PagedRows paged; ///< k and v in pages (one table; null: back to back)
  std::size_t n = 0;
  std::size_t sink_end = 0;    ///< static tokens [0, sink_end)
  std::size_t local_begin = 0; ///< and [local_begin, n)
  const float *mean = nullptr; ///< d entries: the centering mean of the index
  const std::uint32_t *tokens = nullptr;
  const std::uint8_t *masks = nullptr; ///< null: every head sampled every token
  std::size_t count = 0;
  LogUTable log_u;
  float *out = nullptr;               ///< G * d
  float *lse = nullptr;               ///< G
  const float *query_norms = nullptr; ///< fitted hashing: |q'_h|, G entries; null: |q_h|
  /// Fitted hashing: |k'_i| of sampled token i at [i - key_norms_begin]; null: |k_i - mean|.
  const float *key_norms = nullptr;
  std::size_t key_norms_begin = 0; ///< absolute position of key_norms[0] (the index's first)
};

/// Exact attention of G query heads over rows [begin, end) of one kv-head (dense layers, and the
/// static part alone when it runs elsewhere than the sampled part).
struct DenseAttentionArgs {
  const float *q = nullptr; ///< G * d
  int G = 1;
  std::size_t d = 0;
  float scale = 0;
  const void *k = nullptr;
  const void *v = nullptr;
  DType dtype = DType::bf16;
  PagedRows paged; ///< k and v in pages (one table; null: back to back)
  std::size_t begin = 0;
  std::size_t end = 0;
  float *out = nullptr; ///< G * d
  float *lse = nullptr; ///< G
};

/// o = (e^a o_a + e^b o_b) / (e^a + e^b) for `heads` independent pairs (in place allowed: out may
/// alias out_a).
struct MergeArgs {
  const float *out_a = nullptr;
  const float *lse_a = nullptr;
  const float *out_b = nullptr;
  const float *lse_b = nullptr;
  std::size_t heads = 1;
  std::size_t d = 0;
  float *out = nullptr;
  float *lse = nullptr;
};

using EncodeFn = void (*)(const EncodeArgs &);
using BuildIndexFn = void (*)(const BuildIndexArgs &);
using RetrieveFn = void (*)(const RetrieveArgs &);
using SampledAttentionFn = void (*)(const SampledAttentionArgs &);
using DenseAttentionFn = void (*)(const DenseAttentionArgs &);
using MergeFn = void (*)(const MergeArgs &);

/// One configuration's kernels, already dispatched to one SIMD target: calling them involves
/// no further dispatch.
struct LshKernelSet {
  KernelKey key;            ///< the key served (its schedule is the one the kernels run)
  bool specialised = false; ///< false: the generic kernels (K, L, d taken at run time)
  /// Set by resolve() when the requested schedule had no registered set and the default
  /// schedule's set (or the generic set) serves instead; `key.schedule` is then the default.
  bool schedule_fallback = false;
  Schedule requested_schedule{}; ///< the schedule resolve() was asked for
  const char *simd_target = "";  ///< Highway target name, e.g. "AVX2"
  EncodeFn encode = nullptr;     ///< queries (mean null) and keys (mean = centering mean)
  BuildIndexFn build_index = nullptr;
  RetrieveFn retrieve = nullptr;
  SampledAttentionFn sampled_attention = nullptr;
  DenseAttentionFn dense_attention = nullptr;
  MergeFn merge = nullptr;
};

/// Makes the set for the SIMD target currently chosen by Highway's dynamic dispatch (a generated
/// TU returns HWY_DYNAMIC_DISPATCH(its per-target maker)()).
using KernelSetFactory = LshKernelSet (*)();

class KernelRegistry {
public:
  /// The process-wide registry that generated TUs register into during static initialisation.
  static KernelRegistry &global();

  /// Registers a specialised set; a second registration of the same key replaces the first.
  void add(const KernelKey &key, KernelSetFactory factory);
  /// The set registered under exactly `key` (schedule included); else the set registered for
  /// the same (K, L, d, dtype, target) with the default schedule; else the generic set with the
  /// default schedule (specialised = false). The key of the result is what serves; a fallback
  /// from the requested schedule sets schedule_fallback. Throws std::invalid_argument for a key
  /// no kernel can serve (spec::KernelKey::validate: K outside [1, kMaxK], L outside [1, kMaxL],
  /// a head dim the element type does not support, an illegal schedule; or a cuda key on the
  /// CPU registry).
  LshKernelSet resolve(const KernelKey &key) const;
  bool has_specialised(const KernelKey &key) const;
  std::vector<KernelKey> keys() const;
  /// "specialised K=10 L=150 d=64 bf16 cpu on AVX2, schedule gqa=per_head block=64 ..." or
  /// "generic ... (no specialisation registered)", plus what the requested schedule was when the
  /// registry fell back from it.
  static std::string describe(const LshKernelSet &set);

private:
  struct Entry {
    KernelKey key;
    KernelSetFactory factory;
  };
  std::vector<Entry> entries_;
};

/// The generic set for the chosen SIMD target (defined in runtime/kernels/lsh_generic.cpp).
LshKernelSet generic_kernel_set();

/// Static registrar for generated TUs: `static const KernelRegistrar reg{key, &Factory};`.
struct KernelRegistrar {
  KernelRegistrar(const KernelKey &key, KernelSetFactory factory) {
    KernelRegistry::global().add(key, factory);
  }
};

} // namespace pig::runtime::lsh

/// Registers `factory` (a function returning LshKernelSet) for the key at static-initialisation
/// time. `name` must be unique in the TU. The object file must be linked in whole (it is part of
/// pig_kernels, or its test executable): nothing else references it.
#define PIG_REGISTER_LSH_KERNELS(name, K_, L_, d_, dtype_, factory)                                \
  PIG_REGISTER_LSH_KERNELS_SCHEDULED(name, K_, L_, d_, dtype_, ::pig::runtime::lsh::Schedule{},    \
                                     factory)

/// The same for a set compiled with a schedule other than the default (`schedule_` a Schedule
/// value, e.g. `::pig::runtime::lsh::Schedule{GqaStrategy::union_rows, 32}`).
#define PIG_REGISTER_LSH_KERNELS_SCHEDULED(name, K_, L_, d_, dtype_, schedule_, factory)           \
  static const ::pig::runtime::lsh::KernelRegistrar pig_lsh_registrar_##name {                     \
    ::pig::runtime::lsh::KernelKey{                                                                \
        K_,       L_, d_, ::pig::runtime::lsh::DType::dtype_, ::pig::runtime::lsh::Target::cpu,    \
        schedule_},                                                                                \
        factory                                                                                    \
  }
