#include "pig/tune/speed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <thread>

namespace pig::tune {
namespace {

std::string format(const char *fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

} // namespace

double Median(std::vector<double> v) {
  if (v.empty())
    return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2)
    return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + std::ptrdiff_t(mid));
  return (lower + upper) / 2;
}

double MedianAbsDeviation(const std::vector<double> &v) {
  const double m = Median(v);
  std::vector<double> dev(v.size());
  std::transform(v.begin(), v.end(), dev.begin(), [m](double x) { return std::abs(x - m); });
  return Median(std::move(dev));
}

std::vector<std::size_t> BalancedOrder(std::size_t n, std::size_t round) {
  std::vector<std::size_t> row(n);
  if (n == 0)
    return row;
  // First row 0, 1, n-1, 2, n-2, ...: its successive differences are all distinct mod n, so the
  // n cyclic shifts of it put every ordered pair side by side exactly once when n is even; for
  // odd n the mirrored shifts make up the missing half (Williams, 1949).
  const std::size_t period = n % 2 ? 2 * n : n;
  const std::size_t r = round % period, shift = r % n;
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t base = j == 0 ? 0 : j % 2 ? (j + 1) / 2 : n - j / 2;
    row[j] = (base + shift) % n;
  }
  if (r >= n)
    std::reverse(row.begin(), row.end());
  return row;
}

SpeedResult MeasureInterleaved(std::size_t n, std::size_t def,
                               const std::function<double(std::size_t)> &run,
                               const SpeedOptions &o) {
  if (n == 0)
    throw std::invalid_argument("MeasureInterleaved: no candidates");
  if (def >= n)
    throw std::invalid_argument("MeasureInterleaved: default_index " + std::to_string(def) +
                                " out of range (" + std::to_string(n) + " candidates)");
  if (o.min_rounds < 1 || o.max_rounds < o.min_rounds || !(o.drop_ratio >= 1) || o.drop_after < 1 ||
      o.warmup_rounds < 0 || o.drift_samples < 0)
    throw std::invalid_argument("MeasureInterleaved: inconsistent SpeedOptions");

  const std::function<double()> now = o.now ? o.now : [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const double t0 = now();

  SpeedResult res;
  res.default_index = def;
  res.candidates.resize(n);
  std::vector<std::size_t> live(n); // ascending candidate indices; BalancedOrder permutes them
  std::iota(live.begin(), live.end(), std::size_t{0});
  std::vector<std::vector<double>> ratios(n);
  std::vector<double> total(n, 0.0);
  std::vector<double> got(n, 0.0);
  // Rows of the design since the live set last changed: a drop restarts the balance over the
  // remaining candidates.
  std::size_t design_row = 0;

  auto stop_now = [&] {
    if (!res.stopped && o.stop && o.stop())
      res.stopped = true;
    return res.stopped;
  };
  auto sample = [&](std::size_t i) {
    const double s = run(i);
    if (!std::isfinite(s) || s <= 0)
      throw std::runtime_error("MeasureInterleaved: run(" + std::to_string(i) + ") returned " +
                               std::to_string(s) + " seconds; a sample must be finite and > 0");
    return s;
  };
  auto out_of_time = [&] {
    if (o.time_limit_s > 0 && now() - t0 >= o.time_limit_s)
      res.time_limited = true;
    return res.time_limited;
  };
  // One round into `got`; false when stop() interrupted it (its samples are then discarded, so
  // every kept round has one sample of every candidate live in it, the default's included).
  auto one_round = [&] {
    const std::vector<std::size_t> order = BalancedOrder(live.size(), design_row++);
    for (std::size_t pos : order) {
      if (stop_now())
        return false;
      got[live[pos]] = sample(live[pos]);
    }
    return true;
  };

  for (int w = 0; w < o.warmup_rounds && !out_of_time(); ++w)
    if (!one_round())
      break;

  while (!res.stopped && res.rounds < o.max_rounds && !out_of_time()) {
    if (!one_round())
      break;
    ++res.rounds;
    for (std::size_t i : live) {
      res.candidates[i].samples.push_back(got[i]);
      total[i] += got[i];
      ratios[i].push_back(got[def] / got[i]);
    }
    // Medians over the same rounds (every live candidate took part in all of them so far), so
    // the comparison is as fair as the ratios; the default stays as the reference.
    if (res.rounds >= o.drop_after) {
      double best = std::numeric_limits<double>::infinity();
      std::vector<double> med(n, 0.0);
      for (std::size_t i : live)
        best = std::min(best, med[i] = Median(res.candidates[i].samples));
      const auto before = live.size();
      std::erase_if(live, [&](std::size_t i) {
        const bool drop = i != def && med[i] > o.drop_ratio * best;
        res.candidates[i].dropped = drop;
        return drop;
      });
      if (live.size() != before)
        design_row = 0;
    }
    if (o.progress)
      o.progress(res.rounds, o.max_rounds, live.size());
    if (res.rounds >= o.min_rounds && std::all_of(live.begin(), live.end(), [&](std::size_t i) {
          return total[i] >= o.min_time_s;
        })) {
      res.converged = true;
      break;
    }
  }

  for (std::size_t i = 0; i < n; ++i) {
    CandidateSpeed &c = res.candidates[i];
    c.rounds = int(c.samples.size());
    c.median_s = Median(c.samples);
    c.mad_s = MedianAbsDeviation(c.samples);
    c.ratio = Median(ratios[i]);
    c.ratio_mad = MedianAbsDeviation(ratios[i]);
    c.outliers = int(std::count_if(c.samples.begin(), c.samples.end(), [&](double s) {
      return c.mad_s > 0 && std::abs(s - c.median_s) > 5 * c.mad_s;
    }));
  }
  res.default_start_median_s = res.candidates[def].median_s;

  // Back to back rather than interleaved: it is the absolute level that is checked, and a few
  // samples suffice to see a machine that got busier (or quieter) since the rounds began.
  if (!res.stopped && res.rounds > 0) {
    std::vector<double> end;
    for (int k = 0; k < o.drift_samples && !stop_now(); ++k)
      end.push_back(sample(def));
    if (!end.empty()) {
      res.default_end_median_s = Median(std::move(end));
      res.drifted =
          std::abs(res.default_end_median_s / res.default_start_median_s - 1) > o.drift_tolerance;
    }
  }
  res.elapsed_s = now() - t0;
  return res;
}

Timing ToTiming(const SpeedResult &r, std::size_t i) {
  const CandidateSpeed &c = r.candidates.at(i);
  Timing t;
  t.median_s = c.median_s;
  t.mad_s = c.mad_s;
  t.rounds = c.rounds;
  const std::string rounds = std::to_string(c.rounds) + (c.rounds == 1 ? " round" : " rounds");
  if (i == r.default_index)
    t.method = "interleaved round-robin, the default, " + rounds;
  else
    t.method = "interleaved round-robin vs default, " + rounds + ", ratio " +
               format("%.3f", c.ratio) + " (MAD " + format("%.3f", c.ratio_mad) + ")";
  if (c.dropped)
    t.method += ", dropped (slower than the best)";
  if (r.drifted)
    t.method += ", default drifted " +
                format("%+.1f", 100 * (r.default_end_median_s / r.default_start_median_s - 1)) +
                "% by the end";
  return t;
}

} // namespace pig::tune
