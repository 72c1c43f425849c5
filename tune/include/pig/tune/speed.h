// The measurement harness of `pig-tune speed` (issue "pig-tune: operating points"), after the
// design of Highway's hwy/auto_tune.h: every live candidate is measured once per round, in an
// order that changes every round; robust statistics (median, MAD) instead of means, because the
// noise on our shared 2-core machines is mostly additive (preemption, another build) and now and
// then several times the signal; a candidate clearly slower than the best is dropped after a few
// rounds, so the time goes to the contenders.
//
// Beyond Highway, and for the same reason as the pair_* benchmarks (docs/PERFORMANCE.md, "How to
// read our numbers"): the figure to trust is the ratio to the default measured in the SAME round,
// the median over rounds of those ratios; a slow minute slows both sides of a round alike.
// Absolute medians are kept, but indicative; the default is re-measured at the end to say
// whether they drifted.
//
// Nothing here reads a clock for the measurement itself: run(i) times its own work and returns
// seconds per unit of work, so tests drive the harness with synthetic timers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "pig/spec/machine.h"
#include "pig/tune/record.h"

namespace pig::tune {

struct SpeedOptions {
  int warmup_rounds = 1; ///< rounds run and discarded (first touch of the data, page faults)
  int min_rounds = 5, max_rounds = 25;
  /// A candidate is measured at least this long in total (its summed samples, in run()'s unit)
  /// before the measurement may stop.
  double min_time_s = 0.5;
  /// After drop_after rounds, a candidate whose median exceeds drop_ratio x the best live median
  /// is dropped (never the default); std::numeric_limits<double>::infinity() never drops.
  double drop_ratio = 1.25;
  int drop_after = 3;
  /// The default is re-measured at the end (drift_samples samples, back to back); the result is
  /// flagged `drifted` when that median moved more than this fraction from its median in rounds.
  double drift_tolerance = 0.05;
  int drift_samples = 3;
  /// 0: none; once exceeded, no new round starts (results so far stand). Wall time by `now`.
  double time_limit_s = 0;
  /// Polled before every sample (Ctrl-C): true stops at once; the interrupted round is discarded,
  /// the completed rounds stand, and the default is not re-measured.
  std::function<bool()> stop;
  /// Called after every measured round with the rounds done, max_rounds and the live count.
  std::function<void(int round, int max_rounds, std::size_t live)> progress;
  /// Seconds on a monotonic clock, for time_limit_s and elapsed_s; empty: std::chrono's
  /// steady_clock. Tests inject a synthetic one.
  std::function<double()> now;
};

struct CandidateSpeed {
  double median_s = 0, mad_s = 0; ///< of the candidate's samples (after warm-up)
  /// Median over rounds of (default's sample / candidate's sample) in the SAME round: > 1 =
  /// faster than the default. The default's own is exactly 1.
  double ratio = 0, ratio_mad = 0;
  int rounds = 0; ///< rounds it took part in (== samples.size())
  bool dropped = false;
  /// Samples farther than 5 MAD from the median (a page fault, a preemption): the median already
  /// ignores them; counted so that a report can say how noisy the run was.
  int outliers = 0;
  std::vector<double> samples; ///< one per round, in round order
};

struct SpeedResult {
  std::vector<CandidateSpeed> candidates; ///< same order as given
  std::size_t default_index = 0;
  /// The default's median over its samples in rounds, and its re-measurement at the end (0 when
  /// not re-measured: stopped, or no round completed).
  double default_start_median_s = 0, default_end_median_s = 0;
  bool drifted = false;
  bool stopped = false;      ///< stop() returned true
  bool time_limited = false; ///< time_limit_s ended the measurement
  bool converged = false;    ///< min_rounds and min_time_s met (not max_rounds or a limit)
  int rounds = 0;            ///< completed measured rounds (warm-up excluded)
  double elapsed_s = 0;
};

/// run(i) measures candidate i once and returns seconds per unit of work (e.g. per decode step);
/// a sample that is not finite and positive throws std::runtime_error (a timer that did not
/// resolve the work would otherwise poison the ratios). Each round runs every live candidate
/// once, in BalancedOrder, the default always included and never dropped. run is never called
/// for a candidate after it is dropped. An exception from run propagates. Throws
/// std::invalid_argument on n_candidates == 0, default_index out of range, or inconsistent
/// options (min_rounds < 1, max_rounds < min_rounds, drop_ratio < 1, drop_after < 1).
SpeedResult MeasureInterleaved(std::size_t n_candidates, std::size_t default_index,
                               const std::function<double(std::size_t)> &run,
                               const SpeedOptions &o);

/// The order of positions 0..n-1 in round `round`: a Williams design (a balanced Latin square,
/// with its mirror image for odd n), period n (even n) or 2n (odd n). Over a period every
/// position runs at every place in the round equally often and right after every other position
/// equally often, so what one candidate leaves behind (caches, clock frequency) weighs on all
/// others alike; a plain rotation would always run i+1 right after i.
std::vector<std::size_t> BalancedOrder(std::size_t n, std::size_t round);

/// This machine (spec::DetectMachine: the one fingerprint, shared with pig-schedule): CPU
/// model, cores, L3 bytes; `target` (the Highway target the kernels dispatched to) and `threads`
/// (the threads used) come from the caller.
inline Fingerprint DetectFingerprint(const std::string &target, int threads) {
  return spec::DetectMachine(target, threads);
}

/// The record's timing of candidate i: its median and MAD, its rounds, and a method that says how
/// it was measured ("interleaved round-robin vs default, 9 rounds, ratio 1.234 (MAD 0.012)"),
/// with the drop and the drift when there were.
Timing ToTiming(const SpeedResult &r, std::size_t i);

/// Median (mean of the two middle values for an even count); 0 for none.
double Median(std::vector<double> v);
/// Median absolute deviation from the median, unscaled (x 1.4826 estimates a normal's sigma).
double MedianAbsDeviation(const std::vector<double> &v);

} // namespace pig::tune
