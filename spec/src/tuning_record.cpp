#include "pig/spec/tuning_record.h"

#include <algorithm>

namespace pig::spec {

const char *RecordKindName(RecordKind k) { return k == RecordKind::quality ? "quality" : "speed"; }

std::optional<RecordKind> RecordKindFromName(std::string_view name) {
  if (name == "quality")
    return RecordKind::quality;
  if (name == "speed")
    return RecordKind::speed;
  return std::nullopt;
}

bool TuningRecord::usable_on(const MachineFingerprint &here) const {
  if (kind == RecordKind::quality)
    return true;
  return fingerprint && *fingerprint == here;
}

std::string CheckRecord(const TuningRecord &r) {
  if (r.schema < 1 || r.schema > kRecordSchema)
    return "schema " + std::to_string(r.schema) + " is not one this build reads (1.." +
           std::to_string(kRecordSchema) + ")";
  if (r.kernel.empty())
    return "field 'kernel' is empty";
  if (r.layer < -1)
    return "field 'layer' must be >= -1, got " + std::to_string(r.layer);
  if (r.ok()) {
    if (r.kind == RecordKind::quality && !r.quality)
      return "a quality record with status ok needs 'quality'";
    if (r.kind == RecordKind::speed && (!r.time || !r.fingerprint))
      return "a speed record with status ok needs 'time' and 'fingerprint'";
  }
  return {};
}

std::optional<std::size_t> ChooseScheduleRecord(const std::vector<TuningRecord> &records,
                                                std::string_view kernel,
                                                const MachineFingerprint &here,
                                                std::size_t *candidates,
                                                std::vector<std::string> *other_machines) {
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const TuningRecord &r = records[i];
    if (r.kind != RecordKind::speed || !r.ok() || r.kernel != kernel || r.layer != -1 || r.dense ||
        !r.time || !r.fingerprint)
      continue;
    if (!r.fingerprint->same_hardware(here)) {
      if (other_machines) {
        const std::string s = r.fingerprint->hardware_str();
        if (std::find(other_machines->begin(), other_machines->end(), s) == other_machines->end())
          other_machines->push_back(s);
      }
      continue;
    }
    mine.push_back(i);
  }
  std::optional<std::size_t> best;
  std::size_t n = 0;
  for (std::size_t i : mine) {
    const TuningRecord &r = records[i];
    if (!best) {
      best = i, n = 1;
      continue;
    }
    const TuningRecord &b = records[*best];
    const auto key = [](const TuningRecord &x) {
      return std::pair{x.workload.context, x.workload.threads};
    };
    if (key(r) > key(b)) {
      best = i, n = 1; // a larger workload: the earlier ones do not compete
    } else if (key(r) == key(b)) {
      ++n;
      if (r.time->median_s < b.time->median_s)
        best = i;
    }
  }
  if (candidates)
    *candidates = n;
  return best;
}

} // namespace pig::spec
