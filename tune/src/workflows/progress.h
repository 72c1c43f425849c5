// A progress bar on stderr with an estimate of the time left (a line per 10 % when stderr is not
// a terminal, so that logs stay readable). pig-tune's; app/ is to hold the one every tool uses.
#pragma once

#include <string>

#include "common.h"

namespace pig::tune::workflow {

/// "42s", "3m07s", "2h05m" ("?" when unknown).
std::string Duration(double seconds);

class Progress {
public:
  Progress(std::string what, double total) : what_(std::move(what)), total_(total) {}
  void Update(double done, const std::string &label = {});
  void Done();

private:
  std::string what_;
  double total_;
  Clock::time_point start_ = Clock::now();
  int last_decile_ = -1;
};

} // namespace pig::tune::workflow
