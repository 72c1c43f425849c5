// Transitional: pig-tune includes "tasks.h" from this folder; the header moved to the eval
// library (eval/include/pig/eval/tasks.h). Remove once it includes it there.
#pragma once

#include "pig/eval/tasks.h"
