// The speed harness on synthetic timers: run() returns made-up seconds, so these tests never
// time anything and run in microseconds.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "pig/tune/speed.h"

namespace pig::tune {
namespace {

// Options that stop on rounds alone: min_time_s 0, no warm-up, unless a test says otherwise.
SpeedOptions rounds_only(int rounds) {
  SpeedOptions o;
  o.warmup_rounds = 0;
  o.min_rounds = o.max_rounds = rounds;
  o.min_time_s = 0;
  return o;
}

TEST(Speed, MedianAndMad) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({7}), 7);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(MedianAbsDeviation({}), 0);
  EXPECT_EQ(MedianAbsDeviation({5, 5, 5}), 0);
  // Median 2; deviations 1 1 0 0 2 4 7: their median is 1, whatever the outlier 9.
  EXPECT_EQ(MedianAbsDeviation({1, 1, 2, 2, 4, 6, 9}), 1);
  EXPECT_EQ(MedianAbsDeviation({1, 1, 2, 2, 4, 6, 900}), 1);
}

TEST(Speed, BalancedOrderIsAWilliamsDesign) {
  for (std::size_t n = 1; n <= 9; ++n) {
    const std::size_t period = n % 2 ? 2 * n : n;
    std::map<std::pair<std::size_t, std::size_t>, int> place, follows;
    std::vector<std::size_t> previous;
    for (std::size_t r = 0; r < period; ++r) {
      const auto row = BalancedOrder(n, r);
      EXPECT_EQ(row, BalancedOrder(n, r + period)) << "periodic";
      ASSERT_EQ(std::set<std::size_t>(row.begin(), row.end()).size(), n) << "a permutation";
      ASSERT_TRUE(std::all_of(row.begin(), row.end(), [&](std::size_t i) { return i < n; }));
      if (n >= 2 && r > 0) {
        EXPECT_NE(row, previous) << "n " << n << " round " << r;
      }
      previous = row;
      for (std::size_t j = 0; j < n; ++j)
        ++place[{row[j], j}];
      for (std::size_t j = 1; j < n; ++j)
        ++follows[{row[j - 1], row[j]}];
    }
    // Every candidate at every place, and right after every other one, equally often.
    EXPECT_EQ(place.size(), n * n) << n;
    for (const auto &[key, count] : place)
      EXPECT_EQ(count, int(period / n)) << "n " << n;
    EXPECT_EQ(follows.size(), n * (n - 1)) << n;
    for (const auto &[key, count] : follows)
      EXPECT_EQ(count, int(period / n)) << "n " << n;
  }
}

TEST(Speed, RatiosComeFromTheSameRound) {
  // The machine's load changes from round to round by up to 3x; the candidates' relative speeds
  // do not. The per-round ratios are then exact, while the medians move with the load.
  const std::vector<double> speed = {1.0, 0.8, 1.1}; // candidate 0 is the default
  const std::vector<double> load = {1, 3, 1.5, 2, 1, 2.5, 1.2};
  std::size_t calls = 0;
  auto run = [&](std::size_t i) { return speed[i] * load[(calls++ / speed.size()) % load.size()]; };
  SpeedOptions o = rounds_only(7);
  o.drop_ratio = std::numeric_limits<double>::infinity();
  const SpeedResult r = MeasureInterleaved(3, 0, run, o);
  ASSERT_EQ(r.rounds, 7);
  EXPECT_DOUBLE_EQ(r.candidates[0].ratio, 1.0);
  EXPECT_EQ(r.candidates[0].ratio_mad, 0);
  EXPECT_NEAR(r.candidates[1].ratio, 1.0 / 0.8, 1e-12);
  EXPECT_NEAR(r.candidates[2].ratio, 1.0 / 1.1, 1e-12);
  EXPECT_NEAR(r.candidates[1].ratio_mad, 0, 1e-12);
  EXPECT_NEAR(r.candidates[1].median_s, 0.8 * Median(load), 1e-12);
  EXPECT_GT(r.candidates[1].mad_s, 0); // the load shows in the absolute figures only
  for (const CandidateSpeed &c : r.candidates) {
    EXPECT_EQ(c.rounds, 7);
    EXPECT_EQ(c.samples.size(), 7u);
    EXPECT_FALSE(c.dropped);
  }
}

TEST(Speed, NoisyRatioIsRecovered) {
  // Seeded multiplicative noise of +-10 % on every sample, plus a shared per-round load: the
  // median ratio still lands close to the true 1.5.
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> noise(0.9, 1.1), load(1.0, 2.0);
  double round_load = 1;
  std::size_t calls = 0;
  auto run = [&](std::size_t i) {
    if (calls++ % 2 == 0)
      round_load = load(rng);
    return (i == 0 ? 0.03 : 0.02) * round_load * noise(rng);
  };
  const SpeedResult r = MeasureInterleaved(2, 0, run, rounds_only(25));
  EXPECT_NEAR(r.candidates[1].ratio, 1.5, 0.1);
  EXPECT_GT(r.candidates[1].ratio_mad, 0);
  EXPECT_LT(r.candidates[1].ratio_mad, 0.2);
}

TEST(Speed, EveryRoundRunsEveryCandidateOnceInAChangingOrder) {
  std::vector<std::size_t> calls;
  auto run = [&](std::size_t i) {
    calls.push_back(i);
    return 0.01;
  };
  SpeedOptions o = rounds_only(8);
  o.warmup_rounds = 2;
  o.drift_samples = 0;
  const SpeedResult r = MeasureInterleaved(4, 2, run, o);
  ASSERT_EQ(calls.size(), (2 + 8) * 4u);
  std::set<std::vector<std::size_t>> orders;
  std::set<std::size_t> firsts;
  for (std::size_t round = 0; round < 10; ++round) {
    const std::vector<std::size_t> order(calls.begin() + std::ptrdiff_t(4 * round),
                                         calls.begin() + std::ptrdiff_t(4 * round + 4));
    EXPECT_EQ(std::set<std::size_t>(order.begin(), order.end()),
              (std::set<std::size_t>{0, 1, 2, 3}))
        << "round " << round;
    if (round > 0) {
      EXPECT_NE(order, std::vector<std::size_t>(calls.begin() + std::ptrdiff_t(4 * round - 4),
                                                calls.begin() + std::ptrdiff_t(4 * round)));
    }
    orders.insert(order);
    firsts.insert(order.front());
  }
  EXPECT_EQ(orders.size(), 4u); // the period of the design for 4
  EXPECT_EQ(firsts.size(), 4u); // every candidate goes first in turn
  EXPECT_EQ(r.rounds, 8);
  EXPECT_EQ(r.default_index, 2u);
}

TEST(Speed, ASlowCandidateIsDroppedAndNeverRunAgain) {
  const std::vector<double> t = {1.0, 1.1, 2.0, 0.9}; // 2 is 2x slower than the default 0
  std::vector<std::size_t> calls;
  auto run = [&](std::size_t i) {
    calls.push_back(i);
    return t[i];
  };
  SpeedOptions o = rounds_only(10);
  o.warmup_rounds = 1;
  o.drop_after = 3;
  std::vector<std::size_t> live_after;
  o.progress = [&](int round, int max_rounds, std::size_t live) {
    EXPECT_EQ(round, int(live_after.size()) + 1);
    EXPECT_EQ(max_rounds, 10);
    live_after.push_back(live);
  };
  const SpeedResult r = MeasureInterleaved(4, 0, run, o);
  // Warm-up plus the three rounds before the decision, then never again.
  EXPECT_EQ(std::count(calls.begin(), calls.end(), 2u), 1 + 3);
  const auto last_of_2 = std::find(calls.rbegin(), calls.rend(), 2u).base() - calls.begin();
  EXPECT_LE(last_of_2, (1 + 3) * 4);
  EXPECT_TRUE(r.candidates[2].dropped);
  EXPECT_EQ(r.candidates[2].rounds, 3);
  EXPECT_EQ(r.candidates[2].median_s, 2.0);
  EXPECT_DOUBLE_EQ(r.candidates[2].ratio, 0.5);
  for (std::size_t i : {0u, 1u, 3u}) {
    EXPECT_FALSE(r.candidates[i].dropped) << i; // 1.1 / 0.9 = 1.22 stays within 1.25
    EXPECT_EQ(r.candidates[i].rounds, 10) << i;
  }
  EXPECT_EQ(live_after, (std::vector<std::size_t>{4, 4, 3, 3, 3, 3, 3, 3, 3, 3}));
}

TEST(Speed, TheDefaultIsNeverDropped) {
  std::size_t default_calls = 0;
  auto run = [&](std::size_t i) {
    default_calls += i == 1;
    return i == 1 ? 3.0 : 1.0; // the default is 3x slower than everyone
  };
  SpeedOptions o = rounds_only(6);
  o.drift_samples = 0;
  const SpeedResult r = MeasureInterleaved(3, 1, run, o);
  EXPECT_FALSE(r.candidates[1].dropped);
  EXPECT_EQ(default_calls, 6u);
  EXPECT_EQ(r.candidates[1].rounds, 6);
  EXPECT_DOUBLE_EQ(r.candidates[0].ratio, 3.0);
}

TEST(Speed, StopsOnMinTimeMinRoundsAndMaxRounds) {
  auto constant = [](double s) { return [s](std::size_t) { return s; }; };
  SpeedOptions o;
  o.warmup_rounds = 1;
  o.min_rounds = 5;
  o.max_rounds = 25;
  o.drift_samples = 0;

  o.min_time_s = 0.125; // 1/64 s a sample: the eighth round reaches it (binary-exact sums)
  SpeedResult r = MeasureInterleaved(3, 0, constant(0.015625), o);
  EXPECT_EQ(r.rounds, 8);
  EXPECT_TRUE(r.converged);

  o.min_time_s = 0.5; // long samples: min_rounds is what stops
  r = MeasureInterleaved(3, 0, constant(1.0), o);
  EXPECT_EQ(r.rounds, 5);
  EXPECT_TRUE(r.converged);

  o.min_time_s = 1.0; // min_time_s never reached: max_rounds stops
  r = MeasureInterleaved(3, 0, constant(0.001), o);
  EXPECT_EQ(r.rounds, 25);
  EXPECT_FALSE(r.converged);
  for (const CandidateSpeed &c : r.candidates)
    EXPECT_EQ(c.samples.size(), 25u); // warm-up samples are not kept
}

TEST(Speed, ADroppedCandidateDoesNotHoldUpTheStop) {
  // Candidate 2 is dropped after 3 rounds with 0.75 s measured, short of min_time_s for good: were
  // it still counted, the measurement would run to max_rounds.
  auto run = [](std::size_t i) { return i == 2 ? 0.25 : 0.125; };
  SpeedOptions o;
  o.warmup_rounds = 0;
  o.min_rounds = 3;
  o.max_rounds = 50;
  o.min_time_s = 1.0; // 0 and 1 reach it in 8 rounds
  o.drift_samples = 0;
  const SpeedResult r = MeasureInterleaved(3, 0, run, o);
  EXPECT_TRUE(r.candidates[2].dropped);
  EXPECT_EQ(r.rounds, 8);
  EXPECT_TRUE(r.converged);
}

TEST(Speed, TimeLimitStopsStartingRounds) {
  // A synthetic clock that advances by what run() says it took.
  double clock = 0;
  auto run = [&](std::size_t) {
    clock += 0.0625;
    return 0.0625;
  };
  SpeedOptions o;
  o.warmup_rounds = 1;
  o.min_rounds = 5;
  o.max_rounds = 25;
  o.min_time_s = 100;
  o.time_limit_s = 0.5; // a round takes 0.125: warm-up, then rounds at 0.125, 0.25, 0.375
  o.now = [&] { return clock; };
  const SpeedResult r = MeasureInterleaved(2, 0, run, o);
  EXPECT_TRUE(r.time_limited);
  EXPECT_FALSE(r.converged);
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.rounds, 3);
  EXPECT_EQ(r.candidates[1].rounds, 3);
  EXPECT_EQ(r.default_end_median_s, 0.0625); // the drift check still runs
  EXPECT_DOUBLE_EQ(r.elapsed_s, 0.5 + 3 * 0.0625);
}

TEST(Speed, StopIsHonouredMidRound) {
  std::size_t calls = 0;
  bool stopped = false;
  auto run = [&](std::size_t i) {
    EXPECT_FALSE(stopped) << "run() after stop() said true";
    ++calls;
    return 0.01 * double(i + 1);
  };
  SpeedOptions o = rounds_only(20);
  o.warmup_rounds = 1;
  o.drop_ratio = std::numeric_limits<double>::infinity();
  // Warm-up (3 samples), two full rounds (6), then stop after one sample of the third round.
  o.stop = [&] { return stopped = calls >= 3 + 6 + 1; };
  const SpeedResult r = MeasureInterleaved(3, 0, run, o);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(calls, 10u);
  EXPECT_EQ(r.rounds, 2);
  for (const CandidateSpeed &c : r.candidates) // the interrupted round is discarded everywhere
    EXPECT_EQ(c.samples.size(), 2u);
  EXPECT_DOUBLE_EQ(r.candidates[2].ratio, 1.0 / 3);
  EXPECT_EQ(r.default_end_median_s, 0); // no re-measurement after a stop
  EXPECT_FALSE(r.drifted);
}

TEST(Speed, StopDuringWarmUpLeavesNoRounds) {
  std::size_t calls = 0;
  SpeedOptions o;
  o.stop = [&] { return calls >= 1; };
  const SpeedResult r = MeasureInterleaved(
      2, 0, [&](std::size_t) { return ++calls, 0.01; }, o);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.rounds, 0);
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(r.candidates[0].median_s, 0);
}

// The default's samples during rounds are 1.0; after `rounds` rounds it returns `end`.
SpeedResult with_end_level(double end) {
  const int rounds = 6;
  std::size_t calls = 0;
  auto run = [&](std::size_t i) {
    const bool after_rounds = calls++ >= std::size_t(2 * rounds);
    return i == 0 ? (after_rounds ? end : 1.0) : 0.9;
  };
  return MeasureInterleaved(2, 0, run, rounds_only(rounds));
}

TEST(Speed, DriftOfTheDefaultIsFlagged) {
  const SpeedResult up = with_end_level(1.2);
  EXPECT_EQ(up.default_start_median_s, 1.0);
  EXPECT_EQ(up.default_end_median_s, 1.2);
  EXPECT_TRUE(up.drifted);
  EXPECT_NE(ToTiming(up, 1).method.find("drifted +20.0%"), std::string::npos)
      << ToTiming(up, 1).method;

  const SpeedResult stable = with_end_level(1.0);
  EXPECT_EQ(stable.default_end_median_s, 1.0);
  EXPECT_FALSE(stable.drifted);
  EXPECT_FALSE(with_end_level(1.03).drifted); // within the 5 % tolerance
  EXPECT_TRUE(with_end_level(0.8).drifted);   // a machine that got quieter drifted too
}

TEST(Speed, ExceptionsFromRunPropagate) {
  std::size_t calls = 0;
  auto run = [&](std::size_t) -> double {
    if (++calls == 5)
      throw std::runtime_error("kernel failed");
    return 0.01;
  };
  EXPECT_THROW(MeasureInterleaved(3, 0, run, SpeedOptions{}), std::runtime_error);
  EXPECT_EQ(calls, 5u);
}

TEST(Speed, BadSamplesAndArgumentsAreRefused) {
  auto value = [](double v) { return [v](std::size_t) { return v; }; };
  EXPECT_THROW(MeasureInterleaved(2, 0, value(0), SpeedOptions{}), std::runtime_error);
  EXPECT_THROW(MeasureInterleaved(2, 0, value(-1), SpeedOptions{}), std::runtime_error);
  EXPECT_THROW(MeasureInterleaved(2, 0, value(std::nan("")), SpeedOptions{}), std::runtime_error);
  EXPECT_THROW(MeasureInterleaved(0, 0, value(1), SpeedOptions{}), std::invalid_argument);
  EXPECT_THROW(MeasureInterleaved(2, 2, value(1), SpeedOptions{}), std::invalid_argument);
  SpeedOptions o;
  o.max_rounds = 2; // below min_rounds
  EXPECT_THROW(MeasureInterleaved(2, 0, value(1), o), std::invalid_argument);
  o = {};
  o.drop_ratio = 0.9;
  EXPECT_THROW(MeasureInterleaved(2, 0, value(1), o), std::invalid_argument);
}

TEST(Speed, TimingForTheRecord) {
  SpeedOptions o = rounds_only(9);
  o.drift_samples = 0;
  const SpeedResult r = MeasureInterleaved(
      3, 0, [](std::size_t i) { return i == 2   ? 5.0
                                       : i == 1 ? 0.8
                                                : 1.0; }, o);
  const Timing t = ToTiming(r, 1);
  EXPECT_EQ(t.median_s, 0.8);
  EXPECT_EQ(t.mad_s, 0);
  EXPECT_EQ(t.rounds, 9);
  EXPECT_EQ(t.method, "interleaved round-robin vs default, 9 rounds, ratio 1.250 (MAD 0.000)");
  EXPECT_EQ(ToTiming(r, 0).method, "interleaved round-robin, the default, 9 rounds");
  EXPECT_EQ(ToTiming(r, 2).rounds, 3);
  EXPECT_NE(ToTiming(r, 2).method.find("dropped"), std::string::npos);
}

TEST(Speed, OutliersAreCountedNotFollowed) {
  std::size_t calls = 0;
  // One sample in twenty is a 10x preemption; the median does not move.
  auto run = [&](std::size_t) { return calls++ % 20 == 7 ? 0.1 : 0.01 + 1e-4 * double(calls % 3); };
  const SpeedResult r = MeasureInterleaved(2, 0, run, rounds_only(20));
  EXPECT_LT(r.candidates[0].median_s, 0.0103);
  EXPECT_EQ(r.candidates[0].outliers + r.candidates[1].outliers, 2);
}

TEST(Speed, FingerprintOfThisMachine) {
  if (!std::ifstream("/proc/cpuinfo"))
    GTEST_SKIP() << "/proc/cpuinfo unreadable";
  const Fingerprint f = DetectFingerprint("AVX3_DL", 2);
  EXPECT_FALSE(f.cpu.empty());
  EXPECT_GE(f.cores, 1);
  EXPECT_EQ(f.target, "AVX3_DL");
  EXPECT_EQ(f.threads, 2);
  EXPECT_EQ(f, DetectFingerprint("AVX3_DL", 2)); // deterministic
}

} // namespace
} // namespace pig::tune
