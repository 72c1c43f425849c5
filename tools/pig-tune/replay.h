// Reading pig-tune's records back (select, show, speed --per-layer --point): the machine the
// records must match, the speed records usable here, the per-layer times, the operating point a
// speed record measured. Internal to pig_tune_workflows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"
#include "workflows.h"

namespace pig::tune::workflow {

/// This machine's fingerprint at common.threads threads, or o.as_machine's (tests replay as the
/// fixture's machine); a malformed as_machine is a UsageError.
Fingerprint HereFingerprint(const CommonOptions &common, const SelectOptions &o);

/// A whole-step record of the default (K, L, t).
bool IsDefault(const Record &r);

/// A speed record usable here at one context, with its ratio to the default of the same run.
struct SpeedRow {
  Record r;
  double ratio = 0;
};
/// The whole-step speed records of fp at `context` (0: the largest measured; set to it);
/// foreign: some records were of other machines.
std::vector<SpeedRow> UsableSpeed(const std::vector<Record> &rs, const Fingerprint &fp,
                                  size_t &context, bool &foreign);

/// "0:dense 1-14:K=8 L=75 t=2 ..." (OperatingPoint::layers_str) back to choices.
std::vector<runtime::LayerLsh> ParseLayers(const std::string &s);

/// The operating point a speed record measured, with its quality from t (nullopt when t lacks a
/// layer's choice).
std::optional<OperatingPoint> PointOfSpeedRecord(const Record &r, const QualityTable &t);

/// This machine's per-layer times (pig-tune speed --per-layer) at one context (0: the largest
/// with such records): the layer times and the time outside attention.
struct LayerTimes {
  size_t context = 0;
  std::vector<LayerTime> times;
  double rest_s = 0;
};
std::optional<LayerTimes> LoadLayerTimes(const std::vector<Record> &rs, const Fingerprint &fp,
                                         size_t context, bool &foreign);

} // namespace pig::tune::workflow
