//===- PigSchedule.h - #pig.schedule and the runtime's Schedule -*- C++ -*-===//
//
// The knobs of #pig.schedule are the runtime's (runtime/include/pig/runtime/lsh_schedule.h:
// kScheduleKnobs, Schedule). This header converts between the attribute and the value. It
// brings the namespace ::pig into scope: after `using namespace mlir;` write mlir::pig:: for the
// dialect's names.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_DIALECT_PIGSCHEDULE_H
#define PIG_DIALECT_PIGSCHEDULE_H

#include "pig/Dialect/PigDialect.h"
#include "pig/runtime/lsh_schedule.h"

namespace mlir::pig {
/// The attribute of `schedule` (every knob, in kScheduleKnobs order).
ScheduleAttr getScheduleAttr(MLIRContext *context, const ::pig::runtime::lsh::Schedule &schedule);
/// The value of a (verified) attribute.
::pig::runtime::lsh::Schedule toSchedule(ScheduleAttr attr);
} // namespace mlir::pig

#endif // PIG_DIALECT_PIGSCHEDULE_H
