//===- PigSchedule.h - #pig.schedule and pig::spec's Schedule ---*- C++ -*-===//
//
// The knobs of #pig.schedule are pig::spec's (spec/include/pig/spec/schedule.h:
// kScheduleKnobs, Schedule), which the runtime's kernels are compiled with. This header converts
// between the attribute and the value. It brings the namespace ::pig into scope: after `using
// namespace mlir;` write mlir::pig:: for the dialect's names.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_DIALECT_PIGSCHEDULE_H
#define PIG_DIALECT_PIGSCHEDULE_H

#include "pig/Dialect/PigDialect.h"
#include "pig/spec/schedule.h"

namespace mlir::pig {
/// The attribute of `schedule` (every knob, in kScheduleKnobs order).
ScheduleAttr getScheduleAttr(MLIRContext *context, const ::pig::spec::Schedule &schedule);
/// The value of a (verified) attribute.
::pig::spec::Schedule toSchedule(ScheduleAttr attr);
} // namespace mlir::pig

#endif // PIG_DIALECT_PIGSCHEDULE_H
