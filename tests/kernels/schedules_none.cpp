#include "schedules.h"

std::vector<pig::runtime::lsh::LshKernelSet> pig::test::scheduled_generic_sets() { return {}; }
