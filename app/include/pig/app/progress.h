// A progress bar on stderr with the time elapsed and an estimate of the time left: redrawn in
// place on a terminal, a line per 10 % otherwise (so that logs stay readable).
#pragma once

#include <chrono>
#include <string>

namespace pig::app {

/// "42s", "3m07s", "2h05m"; "?" for a negative or non-finite time.
std::string FormatDuration(double seconds);

class Progress {
public:
  /// `total`: the units of work; `terminal`: draw a bar (default: when stderr is a terminal).
  Progress(std::string what, double total, int terminal = -1);
  /// `done` units of `total` are done; `label` follows the figures.
  void Update(double done, const std::string &label = {});
  /// Ends the bar's line (on a terminal).
  void Done();
  /// "what [####......]  40% 12s elapsed, 18s left label": what a terminal shows.
  std::string Line(double done, const std::string &label = {}) const;

private:
  std::string what_;
  double total_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int last_decile_ = -1;
};

} // namespace pig::app
