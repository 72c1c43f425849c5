// --tuning FILE for the runtime's tools (pig-run, pig-bench-context, pig-eval, pig-tune speed):
// decode with an operating point chosen by pig-tune, per layer. In app: it applies tune's points
// (pig_tune, runtime-free) to the runtime's AttentionSpec.
//
// FILE is either an operating point (pig-tune select --out) or a records file (pig-tune's JSON
// Lines); from a records file the point is selected here with max_error (the same selection as
// `pig-tune select --max-error`). What cannot be used is an error with a message (the caller exits
// non-zero): a missing or corrupt file, a records file without --max-error, a point for another
// layer count, a point whose schedule is illegal. Corrupt lines of a records file are warnings
// (the loader skips them), as pig-tune does.
//
// A point made for something else is refused with a TuningMismatch (the tools exit 2): another
// head dim or KV type than the target's (the point's "kernel", e.g. "d=64 bf16"), another model
// (its "model_hash": tune::model_hash_of the model file). With TuningTarget::force
// (--force-tuning) each of these is a warning instead; a point without a model hash (selected
// from records older than the field) or without "kernel" is a warning (what it lacks is not
// checked).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "pig/runtime/attention.h"
#include "pig/tune/point.h"

namespace pig::app {

using tune::OperatingPoint;

struct Tuning {
  OperatingPoint point;
  std::string source; ///< "operating point FILE" or "selected from FILE (max-error E)"
  std::vector<std::string> warnings;
};

/// What a point must have been made for. A field left at its default is not checked.
struct TuningTarget {
  size_t n_layers = 0;                   ///< always checked
  size_t head_dim = 0;                   ///< the model's; 0: not checked
  std::optional<runtime::lsh::DType> kv; ///< the run's KV type (AttentionSpec::kv_dtype)
  std::string model_path;                ///< the model file (its model_hash_of); "": not checked
  bool force = false;                    ///< --force-tuning: a mismatch is a warning
  std::string flag = "--tuning";         ///< the option messages name
};

/// A point made for another model, head dim or KV type (see above): a bad --tuning value.
struct TuningMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Loads FILE (see above) for `target`; throws TuningMismatch for a point made for something
/// else, std::runtime_error (a message naming the file and the problem) for anything else.
Tuning LoadTuning(const std::string &file, std::optional<double> max_error,
                  const TuningTarget &target);
/// The layer count alone (callers that do not know more): no head dim, KV type or model check.
Tuning LoadTuning(const std::string &file, std::optional<double> max_error, size_t n_layers);

/// spec with the point applied: method magicpig, spec.layers from the point, its schedule.
runtime::AttentionSpec ApplyTuning(runtime::AttentionSpec spec, const OperatingPoint &p);

/// AttentionSpec::layers <-> the point's layer choices.
std::vector<runtime::LayerLsh> LayerChoices(const OperatingPoint &p);

} // namespace pig::app
