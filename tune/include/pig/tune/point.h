// Operating points (pig-tune select): one choice per layer of a model (LSH (K, L, t) or dense),
// chosen from per-layer quality records, and the file a point is written to and read from
// (pig-run / pig-bench-context / pig-eval --tuning).
//
// Selection. Each layer l has measured candidates c with a mean attention error e_l(c) and a
// cost2 k_l(c) (the sampled fraction of its indexed tokens); dense attention is always a
// candidate with e = 0 and k = 1 (it reads every token). The error of a point is the mean of its
// layers' errors (dense layers count 0), its cost the mean of their costs. Both are sums over
// layers, so the cheapest point under an error bound is a multiple-choice knapsack. Lagrangian
// relaxation (for a multiplier lambda every layer independently takes argmin k + lambda * e,
// lambda bisected to the smallest cost whose error meets the bound) reaches only the points of
// the lower convex hull of the per-layer trade-offs, and a greedy pass over the slack left
// cannot always leave it (the optimum may need one layer dearer and another cheaper at once).
// That point is the incumbent of an exact search: dynamic programming over the layers on the
// partial (error, cost) sums, keeping only the undominated ones and those that can still meet the
// bound and beat the incumbent, returns the exact optimum (the relaxation's point is kept only
// if more than 2^18 partial sums survive a layer). Ties inside a layer go to fewer projections
// (K * L), then to the candidate order of the records (never to raw timings); equal totals go to
// the lower bounded total, then to the first combination in that order: the selection is
// deterministic.
//
// Point file, schema 1 (one JSON object):
//   {"schema": 1, "kind": "operating_point", "data_hash": "...", "model_hash": "...",
//    "kernel": "d=64 bf16", "layers": [
//      {"layer": 0, "dense": true, "error": 0, "cost2": 1},
//      {"layer": 1, "K": 8, "L": 75, "t": 2, "error": 0.11, "cost2": 0.02}, ...],
//    "schedule": "", "criterion": "max-error 0.12", "error": 0.1, "cost2": 0.08,
//    "pig_version": "...", "timestamp": "..."}
// model_hash (the model file's, model_hash_of below) is optional: points selected from records
// that lack it (before issue 28) omit it, and --tuning then warns instead of checking the model.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pig/tune/frontier.h"
#include "pig/tune/record.h"

namespace pig::tune {

inline constexpr int kPointSchema = 1;

struct LayerChoice {
  int layer = 0;
  Candidate c;      ///< c.dense for a dense layer
  double error = 0; ///< measured mean error of this layer with c (0 when dense)
  double cost2 = 0; ///< measured cost2 (1 when dense)
  friend bool operator==(const LayerChoice &, const LayerChoice &) = default;
};

struct OperatingPoint {
  int schema = kPointSchema;
  std::string data_hash;   ///< of the quality records it was selected from
  std::string model_hash;  ///< of the model file the records measured ("": unknown)
  std::string kernel_tail; ///< "d=64 bf16": head dim and KV type of the records (manifest lines)
  std::vector<LayerChoice> layers;
  std::string schedule;  ///< lsh::Schedule::str(); empty: the default
  std::string criterion; ///< how it was chosen, e.g. "max-error 0.12"
  double error = 0;      ///< mean over layers of the layers' errors
  double cost2 = 0;      ///< mean over layers of the layers' cost2 (dense = 1)
  /// Attention seconds per decode step predicted from per-layer times (0: selected on cost2).
  double attention_s = 0;
  std::string pig_version, timestamp;
  friend bool operator==(const OperatingPoint &, const OperatingPoint &) = default;
  /// "0:dense 1-14:K=8 L=75 t=2 15:dense ..." (runs of equal choices).
  std::string layers_str() const;
};

/// One JSON document (pretty, newline-terminated). Deterministic.
std::string to_json(const OperatingPoint &p);
/// Throws RecordError naming the field when a point could not be served: an LSH layer's K, L or
/// t outside pig::spec::LshParams' limits, a schedule pig::spec::Schedule::parse refuses, a
/// kernel tail ("d=64 bf16") that is not a servable head dim and type, an error (the point's or
/// a layer's) that is negative or not finite, a cost2 outside [0, 1], a negative or non-finite
/// attention_s, no layers, or layers not numbered 0..n-1.
void validate_point(const OperatingPoint &p);
/// Throws RecordError naming the field on malformed JSON, a missing or mistyped field, a kind
/// other than "operating_point", a newer schema, or contents validate_point refuses.
OperatingPoint parse_point(std::string_view text);
/// Reads a point file; throws RecordError when it cannot be read or parsed.
OperatingPoint load_point(const std::string &path);
/// Writes atomically (`path`.tmp renamed over the target); refuses (RecordError) a point
/// validate_point refuses. On any failure (the temporary cannot be created, written or renamed)
/// it throws RecordError, `path` keeps its old contents and no temporary it created is left.
void save_point(const std::string &path, const OperatingPoint &p);

/// Per-layer quality of candidates: what selection reads, aggregated from quality records
/// (mean over the contexts measured of each record's value).
struct LayerTable {
  std::vector<Candidate> candidates; ///< first-seen record order; dense is implicit
  std::vector<double> error, p90, cost2;
  /// What selection minimises or bounds: cost2 (the default), or a measured time per step
  /// (with_layer_times); dense_cost is dense attention's (1 for cost2).
  std::vector<double> cost;
  double dense_cost = 1.0;
};
struct QualityTable {
  std::string data_hash;
  std::string model_hash;         ///< the records' (of data_hash); "": records that lack it
  std::string kernel_tail;        ///< "d=64 bf16": the rest of the kernel key
  std::vector<LayerTable> layers; ///< [layer]
  std::vector<std::size_t> contexts;
  /// Candidates measured on every layer, in first-seen order (uniform points use these).
  std::vector<Candidate> common() const;
};

/// The quality table of the records with `data_hash` (empty: the only hash present; an error
/// when several are present), for a model of n_layers. Throws RecordError when no record
/// matches or when hashes are ambiguous; records of layers >= n_layers are an error.
QualityTable build_quality_table(const std::vector<Record> &records, std::size_t n_layers,
                                 const std::string &data_hash = {});

/// Per-layer attention time of a choice on this machine at one context (pig-tune speed
/// --per-layer), in seconds per decode step; c.dense for dense attention.
struct LayerTime {
  int layer = 0;
  Candidate c;
  double seconds = 0;
};
/// The table with selection costs replaced by measured times: candidates without a time on a
/// layer are dropped from that layer, dense takes its measured time (a layer without one keeps
/// dense out of reach: cost infinity). Selection then minimises or bounds attention time.
QualityTable with_layer_times(QualityTable t, const std::vector<LayerTime> &times);

/// The point that uses candidate c on every layer but `dense_layers` (the runtime's default
/// shape of a point); nullopt when a layer lacks a measurement of c.
std::optional<OperatingPoint> uniform_point(const QualityTable &t, const Candidate &c,
                                            const std::vector<std::size_t> &dense_layers);

/// The cheapest per-layer point (mean cost: cost2, or time after with_layer_times) with mean
/// error <= max_error. With allow_dense
/// (dense is a candidate on every layer, error 0) a point always exists; without, nullopt when
/// the most accurate LSH candidates of every layer still exceed the bound.
std::optional<OperatingPoint> select_per_layer_max_error(const QualityTable &t, double max_error,
                                                         bool allow_dense = true);
/// The most accurate per-layer point with mean cost (cost2, or seconds per layer after
/// with_layer_times) <= max_cost2.
std::optional<OperatingPoint> select_per_layer_max_cost(const QualityTable &t, double max_cost2,
                                                        bool allow_dense = true);

/// Every layer of `t` has a measured LSH candidate, else throws std::runtime_error naming the
/// layers without one (selection would silently make them dense: an interrupted or partial
/// pig-tune accuracy). Selection from records (pig-tune select, --tuning RECORDS) checks first.
void require_every_layer(const QualityTable &t);

/// The model file's identity in points and quality records: FNV-1a's step (64 bits, hex; the
/// offset basis pig-tune accuracy has always used, so data hashes stay) over its bytes (not
/// cryptographic: it tells different files apart). Throws std::runtime_error when the file
/// cannot be read.
std::string model_hash_of(const std::string &path);

} // namespace pig::tune
