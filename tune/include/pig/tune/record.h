// Tuning records (pig-tune, issue "pig-tune: operating points"): one JSON object per line, one
// line per measured configuration, never keyed on a candidate list, so records from different
// runs, candidate sets and machines can share one file.
//
// Schema version 1 (every field named; "quality" or "time" or both):
//   {"schema": 1, "kind": "quality" | "speed",
//    "kernel": "K=10 L=150 d=64 bf16",            the configuration (lsh::KernelKey spelling)
//    "t": 2, "layer": 12 | -1 (every sparse layer), "dense": false,
//    "schedule": "gqa=per_head block=64 ...",      lsh::Schedule::str()
//    "workload": {"context": 16384, "group": 3, "threads": 2},
//    "fingerprint": {"cpu": "...", "target": "AVX3_DL", "cores": 2, "threads": 2,
//                    "l3_bytes": 272629760},
//    "quality": {"metric": "rel_l2", "value": 0.1, "spread": 0.02, "p90": 0.2, "cost2": 0.03,
//                "seeds": [1], "data_hash": "..."},
//    "time": {"median_s": 0.012, "mad_s": 0.0003, "rounds": 9, "method": "..."},
//    "status": "ok" | "failed: <why>", "pig_version": "...", "timestamp": "2026-12-02T03:40:00Z"}
//
// Quality does not depend on the machine: quality records are reused across fingerprints. Speed
// records apply only to the fingerprint they were measured on (usable_on()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pig::tune {

inline constexpr int kRecordSchema = 1;

/// What a speed measurement depends on beyond the configuration.
struct Fingerprint {
  std::string cpu;    ///< /proc/cpuinfo model name
  std::string target; ///< Highway target the kernels dispatched to
  int cores = 0;
  int threads = 0;
  std::uint64_t l3_bytes = 0;
  friend bool operator==(const Fingerprint &, const Fingerprint &) = default;
  std::string
  str() const; ///< "Intel(R) Xeon(R) Processor, AVX3_DL, 2 cores, 2 threads, L3 260 MiB"
};

struct Workload {
  std::size_t context = 0;
  int group = 1;
  int threads = 1;
  friend bool operator==(const Workload &, const Workload &) = default;
};

struct Quality {
  std::string metric = "rel_l2"; ///< relative L2 error of the attention output vs dense
  double value = 0;              ///< mean over heads and decode positions
  double spread = 0;             ///< standard deviation of the same
  double p90 = 0;                ///< 90th percentile
  double cost2 = 0;              ///< sampled fraction of the indexed tokens
  std::vector<std::uint64_t> seeds;
  std::string data_hash; ///< of (model file, text, contexts): what the value was measured on
  friend bool operator==(const Quality &, const Quality &) = default;
};

struct Timing {
  double median_s = 0;
  double mad_s = 0; ///< median absolute deviation
  int rounds = 0;
  std::string method; ///< e.g. "interleaved round-robin vs default"
  friend bool operator==(const Timing &, const Timing &) = default;
};

enum class RecordKind { quality, speed };

struct Record {
  int schema = kRecordSchema;
  RecordKind kind = RecordKind::quality;
  std::string kernel; ///< "K=10 L=150 d=64 bf16"
  int t = 2;
  int layer = -1; ///< -1: every sparse layer
  bool dense = false;
  std::string schedule; ///< lsh::Schedule::str(); empty: the default
  Workload workload;
  std::optional<Fingerprint> fingerprint; ///< required for speed records
  std::optional<Quality> quality;
  std::optional<Timing> time;
  std::string status = "ok";
  std::string pig_version;
  std::string timestamp; ///< UTC, ISO 8601

  friend bool operator==(const Record &, const Record &) = default;
  bool ok() const { return status == "ok"; }
  /// A speed record applies on its own fingerprint only; a quality record on every machine.
  bool usable_on(const Fingerprint &here) const;
};

/// A line that is not a valid record: the message names the field and the problem.
struct RecordError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One line of JSON (no newline). Deterministic: the same record gives the same bytes.
std::string to_json_line(const Record &r);
/// Parses one line; throws RecordError on malformed JSON, a missing or mistyped field, an
/// unknown kind, a schema newer than this build's, or a record without what its kind needs.
Record parse_record(std::string_view line);

/// The records of a file, with the problems of the lines that are not records (their line
/// numbers and messages: a truncated last line from an interrupted append, a corrupt line).
/// Throws RecordError when the file cannot be read (a missing file is no records, not an error).
struct LoadedRecords {
  std::vector<Record> records;
  std::vector<std::string> problems;
};
LoadedRecords load_records(const std::string &path);

/// Appends one record as one line with one write(2) on a descriptor opened O_APPEND, then
/// fsync: concurrent appenders never interleave within a line, and an interruption leaves at most
/// a truncated last line, which load_records() reports and skips. A file whose last line lacks
/// its newline (an earlier interrupted append) gets one first. Throws RecordError on I/O errors.
void append_record(const std::string &path, const Record &r);

} // namespace pig::tune
