// --tuning FILE for the runtime's tools (pig-run, pig-bench-context, pig-eval, pig-tune speed):
// decode with an operating point chosen by pig-tune, per layer. Library pig_tuning: tune/ on the
// runtime (pig_tune itself stays runtime-free).
//
// FILE is either an operating point (pig-tune select --out) or a records file (pig-tune's JSON
// Lines); from a records file the point is selected here with max_error (the same selection as
// `pig-tune select --max-error`). What cannot be used is an error with a message (the caller exits
// non-zero): a missing or corrupt file, a records file without --max-error, a point for another
// layer count or head dim, a point whose schedule is illegal. Corrupt lines of a records file are
// warnings (the loader skips them), as pig-tune does.
#pragma once

#include <optional>
#include <string>

#include "pig/runtime/attention.h"
#include "pig/tune/point.h"

namespace pig::tune {

struct Tuning {
  OperatingPoint point;
  std::string source; ///< "operating point FILE" or "selected from FILE (max-error E)"
  std::vector<std::string> warnings;
};

/// Loads FILE (see above) for a model of n_layers layers; throws std::runtime_error with a
/// message naming the file and the problem.
Tuning LoadTuning(const std::string &file, std::optional<double> max_error, size_t n_layers);

/// spec with the point applied: method magicpig, spec.layers from the point, its schedule.
runtime::AttentionSpec ApplyTuning(runtime::AttentionSpec spec, const OperatingPoint &p);

/// --max-error's value: a number >= 0 (nullopt for anything else: the caller's usage error).
std::optional<double> ParseMaxError(const std::string &text);

/// AttentionSpec::layers <-> the point's layer choices.
std::vector<runtime::LayerLsh> LayerChoices(const OperatingPoint &p);

} // namespace pig::tune

// The names the tools' mains use today (pig::tools::LoadTuning, ...): until those mains move to
// app/'s option groups (issue 27), after which these go.
namespace pig::tools {
using tune::ApplyTuning;
using tune::LayerChoices;
using tune::LoadTuning;
using tune::ParseMaxError;
using tune::Tuning;
} // namespace pig::tools
