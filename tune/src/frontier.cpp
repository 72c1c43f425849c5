#include "pig/tune/frontier.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

namespace pig::tune {

std::int64_t Candidate::projections() const {
  return dense ? std::numeric_limits<std::int64_t>::max() : std::int64_t(K) * std::int64_t(L);
}

bool at_least_as_expensive(const Candidate &a, const Candidate &b) {
  if (a.dense)
    return true;
  if (b.dense)
    return false;
  return a.K <= b.K && a.L >= b.L && a.t <= b.t;
}

std::vector<std::size_t> pareto_frontier(const std::vector<Measured> &p) {
  std::vector<std::size_t> idx(p.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    if (p[a].cost != p[b].cost)
      return p[a].cost < p[b].cost;
    if (p[a].error != p[b].error)
      return p[a].error < p[b].error;
    return a < b;
  });
  std::vector<std::size_t> out;
  double best_error = std::numeric_limits<double>::infinity();
  for (std::size_t i : idx) {
    // In ascending cost, a point is undominated when its error is below every cheaper point's
    // (an equal cost and equal error point after the first is dominated by nothing strictly, but
    // adds nothing: keep the first).
    if (p[i].error < best_error) {
      out.push_back(i);
      best_error = p[i].error;
    }
  }
  return out;
}

Explorer::Explorer(std::vector<Candidate> candidates, std::uint64_t order_seed)
    : cands_(std::move(candidates)) {
  const std::size_t n = cands_.size();
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  if (n < 2)
    return;
  // The cheapest first (no other candidate is cheaper than it), the most expensive second.
  auto is_min = [&](std::size_t i) {
    for (std::size_t j = 0; j < n; ++j)
      if (j != i && at_least_as_expensive(cands_[i], cands_[j]) && !(cands_[i] == cands_[j]))
        return false;
    return true;
  };
  auto is_max = [&](std::size_t i) {
    for (std::size_t j = 0; j < n; ++j)
      if (j != i && at_least_as_expensive(cands_[j], cands_[i]) && !(cands_[i] == cands_[j]))
        return false;
    return true;
  };
  std::size_t lo = 0, hi = n - 1;
  for (std::size_t i = 0; i < n; ++i)
    if (is_min(i)) {
      lo = i;
      break;
    }
  for (std::size_t i = n; i-- > 0;)
    if (is_max(i) && i != lo) {
      hi = i;
      break;
    }
  std::vector<std::size_t> rest;
  for (std::size_t i = 0; i < n; ++i)
    if (i != lo && i != hi)
      rest.push_back(i);
  std::mt19937_64 rng(order_seed);
  for (std::size_t i = rest.size(); i > 1; --i) // Fisher-Yates with our own draws: portable
    std::swap(rest[i - 1], rest[rng() % i]);
  order_ = {lo, hi};
  order_.insert(order_.end(), rest.begin(), rest.end());
}

bool Explorer::cannot_improve(const Candidate &c) const {
  // Lower bounds from the measured candidates the partial order relates to c.
  double lb_cost = 0, lb_error = 0;
  for (const Measured &m : measured_) {
    if (at_least_as_expensive(c, m.c))
      lb_cost = std::max(lb_cost, m.cost);
    if (at_least_as_expensive(m.c, c))
      lb_error = std::max(lb_error, m.error);
  }
  for (std::size_t f : pareto_frontier(measured_))
    if (measured_[f].cost <= lb_cost && measured_[f].error <= lb_error)
      return true;
  return false;
}

std::optional<std::size_t> Explorer::next() {
  while (pos_ < order_.size()) {
    const std::size_t i = order_[pos_++];
    if (pos_ > 2 && cannot_improve(cands_[i])) {
      ++skipped_;
      continue;
    }
    return i;
  }
  return std::nullopt;
}

void Explorer::report(std::size_t i, double cost, double error) {
  measured_.push_back({cands_.at(i), cost, error});
}

namespace {
template <typename Primary>
std::optional<std::size_t> select(const std::vector<Measured> &p, double tie_rel,
                                  bool (*ok)(const Measured &, double), double bound,
                                  Primary primary) {
  std::optional<std::size_t> best;
  double best_v = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < p.size(); ++i)
    if (ok(p[i], bound) && primary(p[i]) < best_v) {
      best_v = primary(p[i]);
      best = i;
    }
  if (!best)
    return best;
  const double tie = best_v + std::abs(best_v) * tie_rel;
  std::optional<std::size_t> pick;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (!ok(p[i], bound) || primary(p[i]) > tie)
      continue;
    if (!pick || p[i].c.projections() < p[*pick].c.projections())
      pick = i; // equal projections: the earlier index stays
  }
  return pick;
}
} // namespace

std::optional<std::size_t> select_max_error(const std::vector<Measured> &p, double max_error,
                                            double tie_rel) {
  return select(
      p, tie_rel, [](const Measured &m, double e) { return m.error <= e; }, max_error,
      [](const Measured &m) { return m.cost; });
}

std::optional<std::size_t> select_max_cost(const std::vector<Measured> &p, double max_cost,
                                           double tie_rel) {
  return select(
      p, tie_rel, [](const Measured &m, double c) { return m.cost <= c; }, max_cost,
      [](const Measured &m) { return m.error; });
}

} // namespace pig::tune
