// pig-tune accuracy: one dense prefill of the model to the longest context, the queries of real
// decode steps captured before each context's end, then per-layer attention error and cost2 of
// the LSH candidates on those KV caches (pig_tune's MeasureCandidates), batch by batch in the
// order of the frontier's exploration. One record per (candidate, layer, context).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "pig/app/decorators.h"
#include "pig/app/progress.h"
#include "pig/app/text.h" // text reading and normalisation
#include "pig/app/tuning.h"
#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/tune/frontier.h"
#include "pig/tune/quality.h"
#include "pig/tune/record.h"
#include "workflows.h"

namespace pig::tune {

using namespace pig::runtime;
using namespace workflow;

namespace {

// FNV-1a, 64 bits: the data hash of quality records (not cryptographic; it tells measurements of
// different inputs apart).
struct Hash {
  std::uint64_t h = 1469598103934665603ull;
  void Add(const void *p, size_t n) {
    const auto *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i)
      h = (h ^ b[i]) * 1099511628211ull;
  }
  void Add(const std::string &s) {
    Add(s.data(), s.size());
    Add("\0", 1);
  }
  template <typename T> void AddValue(T v) { Add(&v, sizeof v); }
  std::string Hex() const {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

struct Stat {
  double mean = 0, sd = 0, p90 = 0, cost = 0;
};
Stat Summarise(std::vector<double> e, const std::vector<double> &c) {
  Stat s;
  if (e.empty())
    return s;
  for (double x : e)
    s.mean += x;
  s.mean /= double(e.size());
  for (double x : e)
    s.sd += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(s.sd / double(e.size()));
  std::sort(e.begin(), e.end());
  s.p90 = e[std::min(e.size() - 1, size_t(std::ceil(0.9 * double(e.size()))) - 1)];
  for (double x : c)
    s.cost += x;
  s.cost /= double(c.size());
  return s;
}

} // namespace

std::string DefaultAccuracyText() { return pig::app::kDefaultTextPath; }

int RunAccuracy(const CommonOptions &common, const AccuracyOptions &o) {
  const std::string &model_path = common.model, &records = common.records;
  std::vector<Candidate> cands;
  for (int K : o.Ks)
    for (int L : o.Ls)
      for (int t : o.ts) {
        if (t > L)
          continue;
        // A value outside its limits is a bad --K, --L or --t (exit 2), before the model loads.
        if (const std::string why = spec::LshParams{K, L, t}.validate(); !why.empty())
          throw UsageError(std::string("--") + why[0], why);
        cands.push_back({K, L, t});
      }
  if (cands.empty())
    throw std::runtime_error("no candidate (check --K, --L, --t)");
  std::vector<size_t> contexts = o.contexts;
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  const size_t min_ctx = o.sink + o.local + 16 + o.positions;
  if (contexts.front() < min_ctx)
    throw std::runtime_error("context " + std::to_string(contexts.front()) +
                             " is too short to index (at least " + std::to_string(min_ctx) + ")");

  auto model = LlamaModel::Load(model_path);
  const LlamaConfig &cfg = model->config();
  if (contexts.back() > cfg.context_length)
    throw std::runtime_error("context " + std::to_string(contexts.back()) +
                             " exceeds the model's trained context " +
                             std::to_string(cfg.context_length));
  const std::string text = pig::app::NormalizeText(pig::app::ReadTextFile(o.text));
  const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
  if (tokens.size() < contexts.back())
    throw std::runtime_error("--text " + o.text + " has " + std::to_string(tokens.size()) +
                             " tokens; the contexts need " + std::to_string(contexts.back()));
  const lsh::DType kv = lsh::DType::bf16;
  const size_t d = cfg.head_dim, G = cfg.n_heads / cfg.n_kv_heads, H = cfg.n_kv_heads;
  const std::uint64_t seed = AttentionSpec{}.seed;

  // What the values depend on: the model file, the text, the contexts and positions, the static
  // window, W's seed, the KV type and pig's version (not the candidates: one record each).
  // The model's hash is also each record's model_hash (--tuning checks a point's model with it).
  const std::string model_hash = model_hash_of(model_path);
  Hash h;
  h.Add(model_hash);
  h.Add(text);
  for (size_t c : contexts)
    h.AddValue(std::uint64_t(c));
  h.AddValue(std::uint64_t(o.positions));
  h.AddValue(std::uint64_t(o.sink));
  h.AddValue(std::uint64_t(o.local));
  h.AddValue(seed);
  h.Add(lsh::to_string(kv));
  h.Add(PIG_VERSION);
  const std::string data_hash = h.Hex();

  // Cached measurements: (kernel, t, layer, context) of this data hash.
  std::set<std::tuple<std::string, int, int, size_t>> have;
  std::map<std::tuple<std::string, int, int, size_t>, Record> cached;
  for (const Record &r : LoadRecords(records).records)
    if (r.kind == RecordKind::quality && r.ok() && r.quality && r.quality->data_hash == data_hash) {
      have.insert({r.kernel, r.t, r.layer, r.workload.context});
      cached[{r.kernel, r.t, r.layer, r.workload.context}] = r;
    }

  ThreadPool pool(common.threads);
  std::fprintf(stderr,
               "pig-tune accuracy: %s, %zu layers x %zu kv-heads x %zu query heads, text %s (%zu "
               "tokens), contexts",
               model_path.c_str(), size_t(cfg.n_layers), H, G, o.text.c_str(), tokens.size());
  for (size_t c : contexts)
    std::fprintf(stderr, " %zu", c);
  std::fprintf(stderr, ", %zu decode positions each; %zu candidates; data hash %s; %zu cached\n",
               o.positions, cands.size(), data_hash.c_str(), cached.size());

  // One dense prefill to the longest context, with `positions` decode steps before each
  // context's end: their queries are real decode steps' queries.
  const auto t_prefill = Clock::now();
  auto owned = std::make_unique<app::CapturingAttention>(
      std::make_unique<DenseAttention>(cfg.Shape(contexts.back()), kv));
  app::CapturingAttention &cap = *owned;
  LlamaSession session(*model, pool, contexts.back(), std::move(owned));
  std::vector<float> logits(cfg.vocab);
  for (size_t P : contexts) {
    const size_t until = P - o.positions;
    if (session.position() < until)
      session.Forward(tokens.data() + session.position(), until - session.position(),
                      logits.data());
    while (session.position() < P)
      session.Forward(&tokens[session.position()], 1, logits.data());
    std::fprintf(stderr, "pig-tune accuracy: prefilled %zu tokens (%.0f s)\n", P, Since(t_prefill));
    if (Stopped(common))
      return 130;
  }
  const KvCache &cache = cap.cache();
  const size_t n_max = contexts.back();
  // Keys and values of every (layer, kv-head) as float rows: read once, shared by every batch.
  std::vector<pig::ref::OwnedMatrix> Km, Vm;
  for (size_t l = 0; l < cfg.n_layers; ++l)
    for (size_t kvh = 0; kvh < H; ++kvh) {
      Km.emplace_back(n_max, d);
      Vm.emplace_back(n_max, d);
      cache.ReadRows(l, kvh, n_max, Km.back().data.data(), Vm.back().data.data());
    }
  int max_cols = 0;
  for (const auto &c : cands)
    max_cols = std::max(max_cols, c.K * c.L);
  const pig::ref::OwnedMatrix W = pig::ref::simhash_matrix(
      seed, d, 16, std::max(1, (max_cols + 15) / 16)); // prefix of every (K, L)

  // FAISS-style exploration on the all-layers mean (the uniform point's error and cost2).
  Explorer explorer(cands, 1);
  const size_t budget = o.max_evals ? o.max_evals : cands.size();
  const size_t batch_size = 6; // candidates measured together: they share projections and codes
  std::vector<Measured> results;
  size_t evaluated = 0;
  const double total_units = double(std::min(budget, cands.size()));
  app::Progress progress("pig-tune accuracy", total_units);
  const auto t0 = Clock::now();
  const std::string ts = Timestamp();
  bool stopped = false;
  while (evaluated < budget && !stopped) {
    if (o.time_limit > 0 && Since(t0) > o.time_limit) {
      std::fprintf(stderr, "\npig-tune accuracy: --time-limit reached\n");
      break;
    }
    std::vector<size_t> batch;
    while (batch.size() < batch_size && evaluated + batch.size() < budget) {
      const auto next = o.exhaustive ? (evaluated + batch.size() < cands.size()
                                            ? std::optional<size_t>(evaluated + batch.size())
                                            : std::nullopt)
                                     : explorer.next();
      if (!next)
        break;
      batch.push_back(*next);
    }
    if (batch.empty())
      break;
    // [candidate in batch][layer][context]: errors over kv-heads x query heads x positions.
    std::vector<std::vector<std::vector<std::vector<double>>>> err(
        batch.size(), std::vector<std::vector<std::vector<double>>>(
                          cfg.n_layers, std::vector<std::vector<double>>(contexts.size())));
    auto cost = err;
    std::vector<LshPoint> pts;
    std::vector<size_t> todo_index; // candidates of the batch that are not all cached
    for (size_t bi = 0; bi < batch.size(); ++bi) {
      const auto &c = cands[batch[bi]];
      bool all = true;
      for (size_t l = 0; l < cfg.n_layers; ++l)
        for (size_t P : contexts)
          all = all && have.count({KernelKey(c, d, kv), c.t, int(l), P});
      if (!all) {
        pts.push_back({c.K, c.L, c.t});
        todo_index.push_back(bi);
      }
    }
    for (size_t ci = 0; ci < contexts.size() && !pts.empty() && !stopped; ++ci) {
      const size_t P = contexts[ci];
      std::mutex mu;
      // An item's exception is rethrown here by the pool (the first one).
      pool.ParallelFor(cfg.n_layers * H, [&](size_t item, size_t) {
        if (Stopped(common))
          return;
        const size_t l = item / H, kvh = item % H;
        std::vector<QualityQuery> qs;
        for (const auto &cq : cap.queries(l))
          if (cq.pos < P && cq.pos + o.positions >= P)
            for (size_t g = 0; g < G; ++g) {
              const float *q = cq.q.data() + (kvh * G + g) * d;
              qs.push_back({std::vector<float>(q, q + d), cq.pos + 1});
            }
        const pig::ref::Matrix K{Km[item].row(0), P, d}, V{Vm[item].row(0), P, d};
        const auto res =
            MeasureCandidates(K, V, W, qs, pts, pig::ref::StaticConfig{o.sink, o.local});
        std::lock_guard<std::mutex> lock(mu);
        for (size_t p = 0; p < pts.size(); ++p)
          for (const auto &s : res[p]) {
            err[todo_index[p]][l][ci].push_back(s.error);
            cost[todo_index[p]][l][ci].push_back(s.cost);
          }
      });
      if (Stopped(common)) {
        stopped = true;
        break;
      }
      // This context is done for the batch: its records are written now (Ctrl-C keeps them).
      for (size_t p = 0; p < pts.size(); ++p) {
        const size_t bi = todo_index[p];
        const auto &c = cands[batch[bi]];
        for (size_t l = 0; l < cfg.n_layers; ++l) {
          const auto key = std::make_tuple(KernelKey(c, d, kv), c.t, int(l), P);
          if (have.count(key))
            continue;
          const Stat s = Summarise(err[bi][l][ci], cost[bi][l][ci]);
          Record r;
          r.kind = RecordKind::quality;
          r.kernel = KernelKey(c, d, kv);
          r.t = c.t;
          r.layer = int(l);
          r.workload = {P, int(G), int(pool.size())};
          Quality q;
          q.metric = "rel_l2";
          q.value = s.mean;
          q.spread = s.sd;
          q.p90 = s.p90;
          q.cost2 = s.cost;
          q.seeds = {seed};
          q.data_hash = data_hash;
          q.model_hash = model_hash;
          r.quality = q;
          r.pig_version = PIG_VERSION;
          r.timestamp = ts;
          append_record(records, r);
          cached[key] = r;
          have.insert(key);
        }
      }
    }
    if (stopped)
      break;
    // The uniform aggregate of each candidate (all layers, all contexts) for the exploration.
    for (size_t bi = 0; bi < batch.size(); ++bi) {
      const auto &c = cands[batch[bi]];
      double e = 0, k = 0;
      size_t n = 0;
      // As the uniform point: the default dense layers count error 0 and cost2 1.
      const auto dense_layers = DefaultDense(cfg.n_layers);
      for (size_t l = 0; l < cfg.n_layers; ++l)
        for (size_t P : contexts) {
          ++n;
          if (std::count(dense_layers.begin(), dense_layers.end(), l)) {
            k += 1;
            continue;
          }
          const auto &r = cached.at({KernelKey(c, d, kv), c.t, int(l), P});
          e += r.quality->value;
          k += r.quality->cost2;
        }
      explorer.report(batch[bi], k / double(n), e / double(n));
      results.push_back({c, k / double(n), e / double(n)});
    }
    evaluated += batch.size();
    progress.Update(double(evaluated), CandStr(cands[batch.back()]));
  }
  progress.Done();
  if (Stopped(common) || stopped)
    std::fprintf(stderr, "pig-tune accuracy: interrupted; every record written so far is kept\n");
  std::printf("pig-tune accuracy: %zu candidates measured, %zu skipped (cannot improve the "
              "frontier), %.0f s; records in %s (data hash %s)\n"
              "Uniform points (the candidate on every layer but the default dense ones, which "
              "count error 0 and cost2 1): mean over layers and contexts\n\n",
              results.size(), explorer.skipped(), Since(t0), records.c_str(), data_hash.c_str());
  std::printf("| K | L | t | error | cost2 | frontier |\n|---|---|---|---|---|---|\n");
  const auto front = pareto_frontier(results);
  std::vector<size_t> order(results.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return results[a].cost < results[b].cost; });
  for (size_t i : order)
    std::printf("| %d | %d | %d | %.4f | %.2f %% | %s |\n", results[i].c.K, results[i].c.L,
                results[i].c.t, results[i].error, 100 * results[i].cost,
                std::count(front.begin(), front.end(), i) ? "yes" : "");
  return Stopped(common) ? 130 : 0;
}

} // namespace pig::tune
