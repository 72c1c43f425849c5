// One decode step of one kv-head group on the LSH kernels (lsh_kernels.h) and the index objects
// (lsh_index.h): encode the group's queries, retrieve the union of their sample sets, one fused
// pass over the static and sampled tokens. LshAttention (lsh_attention.cpp) runs these for each
// kv-head of a step, in two phases (retrieve_step, then attend_step, possibly split across
// threads); the kernel tests and pig-bench-attention call them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"

namespace pig::runtime::lsh {

/// One kv-head's cached rows: K and V, n x d elements of `dtype` each, row_bytes(dtype, d) apart
/// (n is the index's: LshIndex::n()), or in pages (`paged`: a paged KV cache read in place).
struct KvRows {
  const void *k = nullptr;
  const void *v = nullptr;
  DType dtype = DType::bf16;
  std::size_t d = 0;
  PagedRows paged; ///< null table: back to back
};

/// One group's queries: the G query heads sharing one kv-head, and where their results go.
struct GroupQueries {
  const float *q = nullptr; ///< G x d
  int G = 1;
  float scale = 0;      ///< 1/sqrt(d) usually
  float *out = nullptr; ///< G x d
  float *lse = nullptr; ///< G (natural log)
};

struct StepStats {
  std::size_t sampled_union = 0; ///< union of the group's sets (rows read from memory)
  std::size_t sampled_per_head[kMaxGroup] = {};
  std::size_t indexed = 0;     ///< tokens the index held (sorted + tail)
  double index_bytes_read = 0; ///< offsets, ids of the walked buckets, tail codes
  double encode_seconds = 0;   ///< retrieve_step: the queries' hashing (part of the call)
};

/// Everything a decode step of one kv-head group needs, reusable across steps.
struct StepBuffers {
  std::vector<float> qmapped, qnorms; ///< fitted hashing: q'_h (G x d) and |q'_h|
  std::vector<std::uint16_t> qcodes;
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint8_t> masks;
};

/// Which indexed tokens a retrieval samples: those whose codes are within r bits of the query's
/// (multi-probe; 0: equal codes) in at least t tables. Converts from t alone (r = 0), the rule
/// every caller before multi-probe passed.
struct SampleRule {
  int t = 2;
  int r = 0;
  SampleRule(int t_ = 2, int r_ = 0) : t(t_), r(r_) {} // NOLINT: implicit from t on purpose
};

/// One MagicPIG step for the G query heads of one kv-head: encode the queries, retrieve the union
/// of their sample sets, one fused pass over static and sampled tokens. rows: the index's n rows
/// (its dtype, d = W.d(); std::invalid_argument otherwise). It is retrieve_step, then attend_step
/// over all the retrieved tokens with the static ones.
void sampled_step(const LshKernelSet &set, const LshIndex &index, const SimHash &W,
                  const LogUTableData &log_u, SampleRule rule, RetrievalScratch &scratch,
                  StepBuffers &buf, const GroupQueries &queries, const KvRows &rows,
                  StepStats *stats = nullptr);

/// The first half of sampled_step: encode the G queries and retrieve the union of their sample
/// sets (sorted segments, then the tail) into buf.tokens (ascending) and, for G > 1, buf.masks.
/// Returns the union's size.
std::size_t retrieve_step(const LshKernelSet &set, const LshIndex &index, const SimHash &W,
                          SampleRule rule, RetrievalScratch &scratch, StepBuffers &buf,
                          const float *q, int G, StepStats *stats = nullptr);

/// retrieve_step in two halves, for a caller that hashes many groups' queries in one encode
/// (one pass over W for every 8 rows: PagedLshAttention). query_rows returns the G x d f32 rows
/// retrieve_step hashes -- q itself, or under fitted hashing q'_h (in buf.qmapped, their norms in
/// buf.qnorms for attend_step); retrieve_encoded is the rest of retrieve_step once buf.qcodes
/// holds their G x L codes (set.encode of those rows with the index's W).
const float *query_rows(const LshIndex &index, const float *q, int G, StepBuffers &buf);
std::size_t retrieve_encoded(const LshKernelSet &set, const LshIndex &index, SampleRule rule,
                             RetrievalScratch &scratch, StepBuffers &buf, int G,
                             StepStats *stats = nullptr);

/// The second half: the fused pass over the retrieved tokens [begin, end) of buf, with the sink
/// and local-window tokens if with_static. Passes over disjoint ranges (one of them with the
/// static tokens) combine exactly with the merge kernel: a step can be split across threads.
void attend_step(const LshKernelSet &set, const LshIndex &index, const LogUTableData &log_u,
                 const StepBuffers &buf, std::size_t begin, std::size_t end, bool with_static,
                 const GroupQueries &queries, const KvRows &rows);

} // namespace pig::runtime::lsh
