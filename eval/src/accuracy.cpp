#include "pig/eval/accuracy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "pig/spec/hash.h"

namespace pig::eval {

using namespace pig::ref;

std::vector<std::uint16_t> Recode(const std::vector<std::uint16_t> &wide, const LshConfig &from,
                                  const LshConfig &to) {
  if (to.columns() > from.columns())
    throw std::invalid_argument("Recode: the narrow configuration needs more columns of W");
  const std::size_t fl = std::size_t(from.L), fk = std::size_t(from.K);
  const std::size_t tl = std::size_t(to.L), tk = std::size_t(to.K);
  const std::size_t tokens = wide.size() / fl;
  std::vector<std::uint16_t> codes(tokens * tl, 0);
  for (std::size_t i = 0; i < tokens; ++i)
    for (std::size_t c = 0; c < to.columns(); ++c) {
      const unsigned bit = (wide[i * fl + c / fk] >> (c % fk)) & 1u;
      codes[i * tl + c / tk] |= std::uint16_t(bit << (c % tk));
    }
  return codes;
}

std::size_t OracleBudget(std::span<const double> w, double target, std::size_t max_draws) {
  std::size_t lo = 1, hi = 1;
  while (expected_unique_draws(w, hi) < target && hi < max_draws)
    hi *= 2;
  hi = std::min(hi, std::max<std::size_t>(max_draws, 1));
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (expected_unique_draws(w, mid) < target)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

namespace {

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "b=%g%%", 100.0 * x);
  return buf;
}

} // namespace

std::vector<std::vector<ErrorPoint>> MeasureGroup(const std::vector<std::vector<float>> &queries,
                                                  Matrix K, Matrix V, Matrix W,
                                                  const ErrorOptions &opt,
                                                  const EarlierQueries &earlier) {
  const std::size_t n = K.rows;
  const TokenSplit split = split_tokens(n, opt.statics);
  const std::size_t indexed = split.indexed();
  if (indexed < opt.quest_page)
    throw std::invalid_argument("MeasureGroup: too few indexed tokens (" + std::to_string(n) +
                                " cached)");
  // The indexed rows as views: TopK, Quest and oracle sampling run on them, and their result is
  // merged with the exact static part by the LSEs (ref::merge), which is exactly attention over
  // the union of the two sets (the oracle's LSE is the exact one of the indexed part).
  const Matrix Ki{K.row(split.indexed_begin), indexed, K.cols};
  const Matrix Vi{V.row(split.indexed_begin), indexed, V.cols};
  const double ni = double(indexed);
  const std::size_t pages = (indexed + opt.quest_page - 1) / opt.quest_page;

  // One index per configuration, shared by the group's queries: the widest is hashed, the
  // others are read out of its codes.
  int max_columns = 0;
  KL widest{0, 0};
  for (KL kl : opt.magicpig)
    if (kl.K * kl.L > max_columns) {
      max_columns = kl.K * kl.L;
      widest = kl;
    }
  std::vector<LshIndex> indexes;
  if (!opt.magicpig.empty()) {
    const LshConfig wcfg{widest.K, widest.L, opt.threshold, opt.seed};
    const LshIndex wide = build_index(K, W, wcfg, opt.statics);
    for (KL kl : opt.magicpig) {
      const LshConfig cfg{kl.K, kl.L, opt.threshold, opt.seed};
      LshIndex index;
      index.cfg = cfg;
      index.split = wide.split;
      index.mean = wide.mean;
      index.centered = wide.centered;
      index.codes = Recode(wide.codes, wcfg, cfg);
      indexes.push_back(std::move(index));
    }
  }

  // Reused selections (reuse = R > 1): per lag R - 1, the earlier queries and an index of each
  // matched configuration over the rows cached then.
  struct Stale {
    std::vector<std::vector<float>> queries;
    std::vector<LshIndex> indexes; // [c] for the matched configurations
  };
  std::map<std::size_t, Stale> stale;
  for (const HybridConfig &v : opt.hybrid) {
    if (v.reuse <= 1 || stale.count(std::size_t(v.reuse - 1)))
      continue;
    const std::size_t lag = std::size_t(v.reuse) - 1;
    if (!earlier)
      throw std::invalid_argument("MeasureGroup: lsh-hybrid reuse=" + std::to_string(v.reuse) +
                                  " needs the queries of earlier decode steps");
    if (lag >= n || split_tokens(n - lag, opt.statics).indexed() == 0)
      throw std::invalid_argument("MeasureGroup: lsh-hybrid reuse=" + std::to_string(v.reuse) +
                                  " reaches back before the indexed part of " + std::to_string(n) +
                                  " cached tokens");
    Stale st;
    st.queries = earlier(lag);
    if (st.queries.size() != queries.size())
      throw std::invalid_argument("MeasureGroup: the earlier queries are " +
                                  std::to_string(st.queries.size()) + ", the queries " +
                                  std::to_string(queries.size()));
    const Matrix K0{K.row(0), n - lag, K.cols};
    for (std::size_t c = 0;
         c < std::min(std::max<std::size_t>(opt.matched, 1), opt.magicpig.size()); ++c)
      st.indexes.push_back(build_index(
          K0, W, LshConfig{opt.magicpig[c].K, opt.magicpig[c].L, opt.threshold, opt.seed},
          opt.statics));
    stale.emplace(lag, std::move(st));
  }

  std::vector<std::vector<ErrorPoint>> result;
  for (std::size_t qi = 0; qi < queries.size(); ++qi) {
    const std::vector<float> &q = queries[qi];
    std::vector<ErrorPoint> pts;
    const Attention exact = dense_attention(q, K, V);
    const Attention stat = static_attention(q, K, V, split);
    const std::vector<double> w = attention_weights(q, Ki);
    auto add = [&](std::string method, std::string config, double cost, const Attention &a) {
      pts.push_back(
          {std::move(method), std::move(config), cost, relative_l2_error(a.out, exact.out)});
    };
    auto topk = [&](double b, std::string config) {
      const std::size_t m = std::clamp<std::size_t>(std::size_t(std::lround(b * ni)), 1, indexed);
      const SparseEstimate e = topk_attention(q, Ki, Vi, m);
      add("TopK", std::move(config), e.cost(), merge(stat, e.attention));
    };
    auto quest = [&](double b, std::string config) {
      const std::size_t kept = std::clamp<std::size_t>(
          std::size_t(std::lround(b * ni / double(opt.quest_page))), 1, pages);
      const SparseEstimate e = quest_attention(q, Ki, Vi, opt.quest_page, kept);
      add("Quest", std::move(config), e.cost(), merge(stat, e.attention));
    };
    auto oracle = [&](double b, std::string config) {
      const std::size_t B = OracleBudget(w, b * ni, opt.max_oracle_draws);
      const SparseEstimate e = oracle_sampling(q, Ki, Vi, B, opt.sample_seed);
      add("Oracle", std::move(config), e.cost(), merge(stat, e.attention));
    };
    for (double b : opt.budgets)
      topk(b, Percent(b));
    for (double b : opt.budgets)
      quest(b, Percent(b));
    for (double b : opt.budgets)
      oracle(b, Percent(b));
    std::vector<double> mp_cost;
    for (std::size_t c = 0; c < indexes.size(); ++c) {
      const MagicPigResult e = magicpig_attention(q, K, V, W, indexes[c]);
      mp_cost.push_back(e.cost());
      add("MagicPIG",
          "K=" + std::to_string(opt.magicpig[c].K) + " L=" + std::to_string(opt.magicpig[c].L),
          e.cost(), e.attention);
    }
    // LSH-hybrid on an index: the variant's description without its budget.
    auto hybrid = [&](std::size_t at, double b, const HybridConfig &v, std::string tag) {
      const LshIndex &index = indexes[at];
      HybridConfig c = v;
      c.budget = std::clamp(b, 1.0 / ni, 1.0);
      c.max_budget = std::max(c.max_budget, c.budget);
      // A draw of its own per query (the runtime seeds per layer, head and position): one seed
      // for all would give every head the same uniforms per position, correlating their draws.
      std::uint64_t seed = opt.sample_seed;
      for (float x : q)
        seed = spec::mix64(seed ^ std::bit_cast<std::uint32_t>(x));
      c.seed = seed;
      const std::string desc = c.str();
      if (c.reuse <= 1) {
        const HybridResult e = hybrid_attention(q, K, V, W, index, c);
        add("LSH-hybrid", tag + desc.substr(desc.find(' ')), e.cost(), e.attention);
        return;
      }
      // The selection made reuse - 1 steps earlier (on that step's index of this configuration),
      // attended by this query.
      const std::size_t lag = std::size_t(c.reuse) - 1;
      const Stale &st = stale.at(lag);
      const LshIndex &index0 = st.indexes.at(at);
      const Matrix K0{K.row(0), n - lag, K.cols}, V0{V.row(0), n - lag, V.cols};
      const HybridResult sel = hybrid_attention(st.queries[qi], K0, V0, W, index0, c);
      const Attention a =
          hybrid_reuse(q, K, V, sel, index0.split.indexed_begin, index0.split.indexed_end);
      const double read =
          double(sel.head.size() + sel.tail.size() + split.indexed_end - index0.split.indexed_end);
      add("LSH-hybrid", tag + desc.substr(desc.find(' ')), read / ni, a);
    };
    if (!indexes.empty())
      for (const HybridConfig &v : opt.hybrid)
        for (double b : opt.budgets)
          hybrid(0, b, v, Percent(b));
    // The baselines at the cost this query's MagicPIG sample actually had (at least one token).
    for (std::size_t c = 0; c < std::min(opt.matched, indexes.size()); ++c) {
      const std::string tag = "= MagicPIG " + std::to_string(opt.magicpig[c].K) + "," +
                              std::to_string(opt.magicpig[c].L);
      const double b = std::max(mp_cost[c], 1.0 / ni);
      topk(b, tag);
      quest(b, tag);
      oracle(b, tag);
      for (const HybridConfig &v : opt.hybrid)
        hybrid(c, b, v, tag);
    }
    result.push_back(std::move(pts));
  }
  return result;
}

std::vector<std::vector<TransformPoint>>
MeasureTransformGrid(const std::vector<std::vector<float>> &queries, Matrix K, Matrix V,
                     const TransformGridOptions &opt) {
  if (opt.grid.empty())
    throw std::invalid_argument("MeasureTransformGrid: empty grid");
  KL widest = opt.grid.front();
  for (KL kl : opt.grid)
    if (kl.K * kl.L > widest.K * widest.L)
      widest = kl;
  const LshConfig wcfg{widest.K, widest.L, opt.threshold, opt.seed};
  std::vector<std::vector<TransformPoint>> result(queries.size());
  std::vector<Attention> exact;
  for (const std::vector<float> &q : queries)
    exact.push_back(dense_attention(q, K, V));
  for (std::size_t t = 0; t < opt.transforms.size(); ++t) {
    const TransformSpec &spec = opt.transforms[t];
    const OwnedMatrix W = simhash_matrix(opt.seed, spec.hashed_dim(K.cols), widest.K, widest.L);
    LshIndex index = build_index(K, W, wcfg, opt.statics, Centering::mean_of_indexed, spec);
    const std::vector<std::uint16_t> wide = std::move(index.codes);
    for (std::size_t g = 0; g < opt.grid.size(); ++g) {
      index.cfg = LshConfig{opt.grid[g].K, opt.grid[g].L, opt.threshold, opt.seed};
      index.codes = Recode(wide, wcfg, index.cfg);
      for (std::size_t i = 0; i < queries.size(); ++i) {
        const MagicPigResult e = magicpig_attention(queries[i], K, V, W, index);
        result[i].push_back({t, g, e.cost(), relative_l2_error(e.attention.out, exact[i].out)});
      }
    }
  }
  return result;
}

std::vector<std::vector<ProbePoint>>
MeasureProbeGrid(const std::vector<std::vector<float>> &queries, Matrix K, Matrix V,
                 const ProbeGridOptions &opt) {
  if (opt.configs.empty())
    throw std::invalid_argument("MeasureProbeGrid: no configuration");
  std::size_t columns = 0;
  for (const spec::LshParams &p : opt.configs) {
    LshConfig(p, opt.seed).validate();
    columns = std::max(columns, std::size_t(p.K) * std::size_t(p.L));
  }
  // Any (K, L) with enough columns reads the same W prefix (random.h): 16-bit codes, fewest rows.
  const LshConfig wcfg{16, int((columns + 15) / 16), 1, opt.seed};
  const OwnedMatrix W = simhash_matrix(opt.seed, K.cols, wcfg.K, wcfg.L);
  LshIndex index = build_index(K, W, wcfg, opt.statics);
  const std::vector<std::uint16_t> wide = std::move(index.codes);
  std::vector<std::vector<ProbePoint>> result(queries.size());
  std::vector<Attention> exact;
  for (const std::vector<float> &q : queries)
    exact.push_back(dense_attention(q, K, V));
  for (std::size_t c = 0; c < opt.configs.size(); ++c) {
    index.cfg = LshConfig(opt.configs[c], opt.seed);
    index.codes = Recode(wide, wcfg, index.cfg);
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const MagicPigResult e = magicpig_attention(queries[i], K, V, W, index);
      result[i].push_back({c, e.cost(), relative_l2_error(e.attention.out, exact[i].out)});
    }
  }
  return result;
}

std::optional<double> ErrorAtCost(std::vector<std::pair<double, double>> points, double cost) {
  std::erase_if(points, [](const auto &p) { return !(p.first > 0) || std::isnan(p.second); });
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, double>> front;
  for (const auto &p : points)
    if (front.empty() || p.second < front.back().second) {
      if (!front.empty() && front.back().first == p.first)
        front.back() = p; // same cost, lower error
      else
        front.push_back(p);
    }
  if (front.empty() || !(cost >= front.front().first) || !(cost <= front.back().first))
    return std::nullopt;
  for (std::size_t i = 0; i + 1 < front.size(); ++i) {
    const auto &[c0, e0] = front[i];
    const auto &[c1, e1] = front[i + 1];
    if (cost <= c1) {
      const double w = (std::log(cost) - std::log(c0)) / (std::log(c1) - std::log(c0));
      return e0 + w * (e1 - e0);
    }
  }
  return front.back().second; // cost == the last frontier point's
}

} // namespace pig::eval
