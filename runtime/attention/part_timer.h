// Timing a part of a decode step (StepParts) by scope: the attentions' own accounting.
#pragma once

#include <chrono>
#include <cstddef>

namespace pig::runtime {

// Adds the scope's time to a part of the step (StepParts): two clock reads, about 40 ns, a few
// per (layer, kv-head) and step. StepParts counts thread-seconds: a scope that keeps `threads`
// threads busy (a pool's split) adds its wall time times them.
class PartTimer {
public:
  explicit PartTimer(double &acc, std::size_t threads = 1)
      : acc_(acc), threads_(double(threads)), t0_(std::chrono::steady_clock::now()) {}
  ~PartTimer() { acc_ += Seconds() * threads_; }
  PartTimer(const PartTimer &) = delete;
  PartTimer &operator=(const PartTimer &) = delete;
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

private:
  double &acc_;
  double threads_;
  std::chrono::steady_clock::time_point t0_;
};

} // namespace pig::runtime
