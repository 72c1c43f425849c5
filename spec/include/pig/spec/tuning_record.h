// The one tuning-record format: pig-tune writes these records (JSON Lines, one measured
// configuration per line) and reads them back (select, emit-manifest, show); pig-schedule reads
// the same files to choose a kernel set's schedule at build time. This header holds the record's
// fields, their JSON spelling, the rules a record obeys and the build-time choice; the JSON
// itself is read and written with nlohmann-json by the two readers (tune/src/record.cpp, the
// whole record; passes/lib/Schedule.cpp, the fields pig-schedule needs), which this
// standard-library-only layer cannot include.
//
// Schema version 1 (every field named; "quality" or "time" or both):
//   {"schema": 1, "kind": "quality" | "speed",
//    "kernel": "K=10 L=150 d=64 bf16",            the configuration (the kernel key's spelling;
//                                                 pig-tune also writes "point ..." and
//                                                 "non-attention" rows)
//    "t": 2, "layer": 12 | -1 (every sparse layer), "dense": false,
//    "schedule": "gqa=per_head block=64 ...",      lsh::Schedule::str(); "": the default
//    "workload": {"context": 16384, "group": 3, "threads": 2},
//    "fingerprint": {"cpu": "...", "target": "AVX3_DL", "cores": 2, "threads": 2,
//                    "l3_bytes": 272629760},      a MachineFingerprint (machine.h)
//    "quality": {"metric": "rel_l2", "value": 0.1, "spread": 0.02, "p90": 0.2, "cost2": 0.03,
//                "seeds": [1], "data_hash": "...", "model_hash": "..."},   model_hash:
//                                                 optional (records before issue 28 lack it)
//    "time": {"median_s": 0.012, "mad_s": 0.0003, "rounds": 9, "method": "..."},
//    "status": "ok" | "failed: <why>", "pig_version": "...", "timestamp": "2026-12-02T03:40:00Z"}
//
// Quality does not depend on the machine: quality records are reused across fingerprints. Speed
// records apply only to the fingerprint they were measured on (usable_on()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pig/spec/machine.h"

namespace pig::spec {

inline constexpr int kRecordSchema = 1;

/// The JSON names of the record's fields (top level, then each object's).
namespace record_field {
inline constexpr const char *kSchema = "schema", *kKind = "kind", *kKernel = "kernel", *kT = "t",
                            *kLayer = "layer", *kDense = "dense", *kSchedule = "schedule",
                            *kWorkload = "workload", *kFingerprint = "fingerprint",
                            *kQuality = "quality", *kTime = "time", *kStatus = "status",
                            *kPigVersion = "pig_version", *kTimestamp = "timestamp";
// workload
inline constexpr const char *kContext = "context", *kGroup = "group", *kThreads = "threads";
// fingerprint (and kThreads)
inline constexpr const char *kCpu = "cpu", *kTarget = "target", *kCores = "cores",
                            *kL3Bytes = "l3_bytes";
// quality
inline constexpr const char *kMetric = "metric", *kValue = "value", *kSpread = "spread",
                            *kP90 = "p90", *kCost2 = "cost2", *kSeeds = "seeds",
                            *kDataHash = "data_hash", *kModelHash = "model_hash";
// time
inline constexpr const char *kMedianS = "median_s", *kMadS = "mad_s", *kRounds = "rounds",
                            *kMethod = "method";
} // namespace record_field

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
  std::string data_hash;  ///< of (model file, text, contexts): what the value was measured on
  std::string model_hash; ///< of the model file alone (empty: a record that predates it)
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
/// "quality" / "speed".
const char *RecordKindName(RecordKind k);
std::optional<RecordKind> RecordKindFromName(std::string_view name);

struct TuningRecord {
  int schema = kRecordSchema;
  RecordKind kind = RecordKind::quality;
  std::string kernel; ///< "K=10 L=150 d=64 bf16"
  int t = 2;
  int layer = -1; ///< -1: every sparse layer
  bool dense = false;
  std::string schedule; ///< lsh::Schedule::str(); empty: the default
  Workload workload;
  std::optional<MachineFingerprint> fingerprint; ///< required for speed records
  std::optional<Quality> quality;
  std::optional<Timing> time;
  std::string status = "ok";
  std::string pig_version;
  std::string timestamp; ///< UTC, ISO 8601

  friend bool operator==(const TuningRecord &, const TuningRecord &) = default;
  bool ok() const { return status == "ok"; }
  /// A speed record applies on its own fingerprint only; a quality record on every machine.
  bool usable_on(const MachineFingerprint &here) const;
};

/// What a record read field by field must also satisfy: "" when it does, else the problem (a
/// schema this build does not read, an empty kernel, a layer below -1, an ok record without what
/// its kind needs). Both readers call it.
std::string CheckRecord(const TuningRecord &r);

/// pig-schedule's choice of a schedule for kernel key `kernel` on a machine with `here`'s
/// hardware (MachineFingerprint::same_hardware: a build knows neither the Highway target nor the
/// threads). The candidates are the ok whole-step (layer -1, not dense) speed records of that
/// kernel with a time and a fingerprint of the same hardware; of those measured at the largest
/// context, and among them with the most threads, the fastest (lowest median) wins, the earlier
/// record on a tie. Returns its index in `records`, or nullopt. `candidates`, when given, gets
/// how many records the choice was among; `other_machines` the hardware (hardware_str(), each once)
/// of the records of that kernel that were measured on other hardware.
std::optional<std::size_t> ChooseScheduleRecord(const std::vector<TuningRecord> &records,
                                                std::string_view kernel,
                                                const MachineFingerprint &here,
                                                std::size_t *candidates = nullptr,
                                                std::vector<std::string> *other_machines = nullptr);

} // namespace pig::spec
