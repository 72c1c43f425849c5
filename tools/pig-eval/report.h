// Transitional: pig-tune and pig-bench-context include "report.h" from this folder; the header
// moved to the eval library (eval/include/pig/eval/report.h). Remove once they include it there.
#pragma once

#include "pig/eval/report.h"
