// The schedule of the LSH kernels under the runtime's names: the knob table and Schedule are
// pig::spec's (pig/spec/schedule.h), shared with the dialect, the passes and pig-translate.
#pragma once

#include "pig/spec/schedule.h"

namespace pig::runtime::lsh {
using spec::GqaStrategy;
using spec::KnobInfo;
using spec::kScheduleKnobs;
using spec::Schedule;
} // namespace pig::runtime::lsh
