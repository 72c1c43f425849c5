// Timing a part of a decode step (StepParts) by scope: the attentions' own accounting.
#pragma once

#include <chrono>

namespace pig::runtime {

// Adds the scope's time to a part of the step (StepParts): two clock reads, about 40 ns, a few
// per (layer, kv-head) and step.
class PartTimer {
public:
  explicit PartTimer(double &acc) : acc_(acc), t0_(std::chrono::steady_clock::now()) {}
  ~PartTimer() { acc_ += Seconds(); }
  PartTimer(const PartTimer &) = delete;
  PartTimer &operator=(const PartTimer &) = delete;
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

private:
  double &acc_;
  std::chrono::steady_clock::time_point t0_;
};

} // namespace pig::runtime
