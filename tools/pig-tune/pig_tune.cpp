// pig-tune: operating points per model and per machine, from measurement to generated kernels
// (docs/TUNING.md).
//
//   pig-tune accuracy        per-layer attention error and cost2 of LSH candidates (K, L, t) on
//                            the model's real KV caches (machine-independent, cached by a hash)
//   pig-tune speed           decode-step time of candidates and tuned points on this machine,
//                            interleaved round-robin against the default (10, 150)
//   pig-tune select          an operating point: --max-error E, --max-cost2 C or --min-speedup S
//   pig-tune emit-manifest   the configs/kernels.txt lines a point needs
//   pig-tune show            the frontier: a table and a PNG (gnuplot)
//
// Every measurement is one JSON Lines record appended atomically to --records (pig-tune.jsonl):
// Ctrl-C keeps every record written so far, and a rerun skips what is already measured. select,
// emit-manifest and show only read records (replay: no model, no measurement).
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>

#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/tune/frontier.h"
#include "pig/tune/point.h"
#include "pig/tune/quality.h"
#include "pig/tune/record.h"
#include "pig/tune/speed.h"
#include "pig/tune/tuning.h"
#include "report.h" // tools/pig-eval: CSV, gnuplot
#include "tasks.h"  // tools/pig-eval: text reading and normalisation

#ifdef PIG_HAVE_GENERATED_KERNELS
#include "pig/Codegen/GeneratedKernels.h"
#endif

#ifndef PIG_VERSION
#define PIG_VERSION "0.1"
#endif

namespace {

using namespace pig::runtime;
namespace tune = pig::tune;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Ctrl-C: the first asks every loop to stop after the record it is writing (records so far
// stay); the second exits at once.
std::atomic<bool> g_stop{false};
extern "C" void OnSigint(int) {
  if (g_stop.exchange(true))
    std::_Exit(130);
}

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string Duration(double s) {
  if (s < 0 || !std::isfinite(s))
    return "?";
  char buf[32];
  if (s < 90)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 5400)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) / 60) % 60);
  return buf;
}

// A progress bar on stderr with an estimate of the time left (a line per 10 % when stderr is
// not a terminal, so that logs stay readable).
class Progress {
public:
  Progress(std::string what, double total) : what_(std::move(what)), total_(total) {}
  void Update(double done, const std::string &label = {}) {
    const double f = total_ > 0 ? std::min(1.0, done / total_) : 1.0;
    const double el = Since(start_);
    const double left = f > 0 ? el * (1 - f) / f : -1;
    if (isatty(2)) {
      const int w = 30, fill = int(f * w);
      std::fprintf(stderr, "\r%s [%s%s] %3.0f%% %s elapsed, %s left %s\033[K", what_.c_str(),
                   std::string(size_t(fill), '#').c_str(),
                   std::string(size_t(w - fill), '.').c_str(), 100 * f, Duration(el).c_str(),
                   Duration(left).c_str(), label.c_str());
    } else if (int(f * 10) > last_decile_) {
      last_decile_ = int(f * 10);
      std::fprintf(stderr, "%s: %3.0f%% (%s elapsed, %s left) %s\n", what_.c_str(), 100 * f,
                   Duration(el).c_str(), Duration(left).c_str(), label.c_str());
    }
  }
  void Done() {
    if (isatty(2))
      std::fprintf(stderr, "\n");
  }

private:
  std::string what_;
  double total_;
  Clock::time_point start_ = Clock::now();
  int last_decile_ = -1;
};

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

std::string HashFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  Hash h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    h.Add(buf.data(), size_t(in.gcount()));
  }
  return h.Hex();
}

std::string KernelKey(const tune::Candidate &c, size_t d, lsh::DType dt) {
  std::string s = "K=";
  s.append(std::to_string(c.K)).append(" L=").append(std::to_string(c.L)).append(" d=");
  s.append(std::to_string(d)).append(" ").append(lsh::to_string(dt));
  return s;
}

std::string CandStr(const tune::Candidate &c) {
  if (c.dense)
    return "dense";
  return "K=" + std::to_string(c.K) + " L=" + std::to_string(c.L) + " t=" + std::to_string(c.t);
}

// "0:dense 1-14:K=8 L=75 t=2 ..." (OperatingPoint::layers_str) back to choices.
std::vector<LayerLsh> ParseLayers(const std::string &s) {
  std::vector<LayerLsh> out;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    const auto colon = tok.find(':');
    if (colon == std::string::npos)
      throw std::runtime_error("bad layer run '" + tok + "' in '" + s + "'");
    const std::string range = tok.substr(0, colon), what = tok.substr(colon + 1);
    size_t b = 0, e = 0;
    const auto dash = range.find('-');
    b = std::stoul(range.substr(0, dash));
    e = dash == std::string::npos ? b : std::stoul(range.substr(dash + 1));
    LayerLsh c;
    if (what == "dense")
      c.dense = true;
    else {
      std::string l, t;
      in >> l >> t;
      if (what.rfind("K=", 0) != 0 || l.rfind("L=", 0) != 0 || t.rfind("t=", 0) != 0)
        throw std::runtime_error("bad layer choice in '" + s + "'");
      c.K = std::stoi(what.substr(2));
      c.L = std::stoi(l.substr(2));
      c.t = std::stoi(t.substr(2));
    }
    if (b != out.size() || e < b)
      throw std::runtime_error("layer runs out of order in '" + s + "'");
    out.insert(out.end(), e - b + 1, c);
  }
  return out;
}

std::vector<size_t> DefaultDense(size_t n_layers) { return AttentionSpec{}.DenseLayers(n_layers); }
// The runtime's default (K, L, t): the reference of every speed-up and of the evidence.
tune::Candidate DefaultCandidate() {
  const AttentionSpec d;
  return {d.K, d.L, d.t};
}

// The layer count the quality records describe (no model needed for replay).
size_t LayersOf(const std::vector<tune::Record> &rs) {
  int m = -1;
  for (const auto &r : rs)
    if (r.kind == tune::RecordKind::quality)
      m = std::max(m, r.layer);
  if (m < 0)
    throw std::runtime_error("the records hold no quality measurement (run pig-tune accuracy)");
  return size_t(m) + 1;
}

tune::LoadedRecords LoadRecords(const std::string &path) {
  tune::LoadedRecords r = tune::load_records(path);
  for (const auto &p : r.problems)
    std::fprintf(stderr, "pig-tune: warning: %s: skipped %s\n", path.c_str(), p.c_str());
  return r;
}

// ------------------------------------------------------------------------------------------
// accuracy

struct AccuracyOptions {
  std::string text = pig::eval::kDefaultTextPath; // pig-eval's text: long enough for 8k
  std::vector<size_t> contexts{2048, 4096, 8192};
  size_t positions = 4; // decode positions per context whose queries are measured
  std::vector<int> Ks{6, 7, 8, 9, 10, 11}, Ls{32, 48, 64, 100, 150, 200}, ts{1, 2};
  size_t max_evals = 0; // candidates measured (0: every one the exploration does not skip)
  double time_limit = 0;
  bool exhaustive = false;
  size_t sink = 4, local = 64;
};

// Dense attention that keeps the queries of single-token (decode) steps: the query of a real
// decode step, next to the cache it attends to, is what the estimators are measured on.
class Capture final : public ForwardingAttention {
public:
  Capture(const AttentionShape &shape, lsh::DType dt)
      : ForwardingAttention(std::make_unique<DenseAttention>(shape, dt)) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool, const Kernels &kern) override {
    if (n == 1) {
      const size_t w = shape().n_heads * shape().head_dim;
      queries[layer].push_back({pos, std::vector<float>(q, q + w)});
    }
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool, kern);
  }
  struct Query {
    size_t pos;
    std::vector<float> q; // n_heads x d
  };
  std::map<size_t, std::vector<Query>> queries; // [layer]
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

int Accuracy(const std::string &model_path, const std::string &records, size_t threads,
             const AccuracyOptions &o) {
  std::vector<tune::Candidate> cands;
  for (int K : o.Ks)
    for (int L : o.Ls)
      for (int t : o.ts) {
        if (t > L)
          continue;
        pig::ref::LshConfig{K, L, t, 1}.validate();
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
  const std::string text = pig::eval::NormalizeText(pig::eval::ReadTextFile(o.text));
  const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
  if (tokens.size() < contexts.back())
    throw std::runtime_error("--text " + o.text + " has " + std::to_string(tokens.size()) +
                             " tokens; the contexts need " + std::to_string(contexts.back()));
  const lsh::DType kv = lsh::DType::bf16;
  const size_t d = cfg.head_dim, G = cfg.n_heads / cfg.n_kv_heads, H = cfg.n_kv_heads;
  const std::uint64_t seed = AttentionSpec{}.seed;

  // What the values depend on: the model file, the text, the contexts and positions, the static
  // window, W's seed, the KV type and pig's version (not the candidates: one record each).
  Hash h;
  h.Add(HashFile(model_path));
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
  std::map<std::tuple<std::string, int, int, size_t>, tune::Record> cached;
  for (const tune::Record &r : LoadRecords(records).records)
    if (r.kind == tune::RecordKind::quality && r.ok() && r.quality &&
        r.quality->data_hash == data_hash) {
      have.insert({r.kernel, r.t, r.layer, r.workload.context});
      cached[{r.kernel, r.t, r.layer, r.workload.context}] = r;
    }

  ThreadPool pool(threads);
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
  auto owned = std::make_unique<Capture>(
      AttentionShape{cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, d, contexts.back()}, kv);
  Capture &cap = *owned;
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
    if (g_stop)
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
      for (size_t i = 0; i < n_max; ++i) {
        cache.KeyRow(l, kvh, i, Km.back().row(i));
        cache.ValueRow(l, kvh, i, Vm.back().row(i));
      }
    }
  int max_cols = 0;
  for (const auto &c : cands)
    max_cols = std::max(max_cols, c.K * c.L);
  const pig::ref::OwnedMatrix W = pig::ref::simhash_matrix(
      seed, d, 16, std::max(1, (max_cols + 15) / 16)); // prefix of every (K, L)

  // FAISS-style exploration on the all-layers mean (the uniform point's error and cost2).
  tune::Explorer explorer(cands, 1);
  const size_t budget = o.max_evals ? o.max_evals : cands.size();
  const size_t batch_size = 6; // candidates measured together: they share projections and codes
  std::vector<tune::Measured> results;
  size_t evaluated = 0;
  const double total_units = double(std::min(budget, cands.size()));
  Progress progress("pig-tune accuracy", total_units);
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
    std::vector<pig::tune::LshPoint> pts;
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
      std::exception_ptr failed; // the pool does not carry exceptions across threads
      pool.ParallelFor(cfg.n_layers * H, [&](size_t item, size_t) {
        if (g_stop)
          return;
        try {
          const size_t l = item / H, kvh = item % H;
          std::vector<tune::QualityQuery> qs;
          for (const auto &cq : cap.queries[l])
            if (cq.pos < P && cq.pos + o.positions >= P)
              for (size_t g = 0; g < G; ++g) {
                const float *q = cq.q.data() + (kvh * G + g) * d;
                qs.push_back({std::vector<float>(q, q + d), cq.pos + 1});
              }
          const pig::ref::Matrix K{Km[item].row(0), P, d}, V{Vm[item].row(0), P, d};
          const auto res =
              tune::MeasureCandidates(K, V, W, qs, pts, pig::ref::StaticConfig{o.sink, o.local});
          std::lock_guard<std::mutex> lock(mu);
          for (size_t p = 0; p < pts.size(); ++p)
            for (const auto &s : res[p]) {
              err[todo_index[p]][l][ci].push_back(s.error);
              cost[todo_index[p]][l][ci].push_back(s.cost);
            }
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failed)
            failed = std::current_exception();
        }
      });
      if (failed)
        std::rethrow_exception(failed);
      if (g_stop) {
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
          tune::Record r;
          r.kind = tune::RecordKind::quality;
          r.kernel = KernelKey(c, d, kv);
          r.t = c.t;
          r.layer = int(l);
          r.workload = {P, int(G), int(pool.size())};
          tune::Quality q;
          q.metric = "rel_l2";
          q.value = s.mean;
          q.spread = s.sd;
          q.p90 = s.p90;
          q.cost2 = s.cost;
          q.seeds = {seed};
          q.data_hash = data_hash;
          r.quality = q;
          r.pig_version = PIG_VERSION;
          r.timestamp = ts;
          tune::append_record(records, r);
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
  if (g_stop || stopped)
    std::fprintf(stderr, "pig-tune accuracy: interrupted; every record written so far is kept\n");
  std::printf("pig-tune accuracy: %zu candidates measured, %zu skipped (cannot improve the "
              "frontier), %.0f s; records in %s (data hash %s)\n"
              "Uniform points (the candidate on every layer but the default dense ones, which "
              "count error 0 and cost2 1): mean over layers and contexts\n\n",
              results.size(), explorer.skipped(), Since(t0), records.c_str(), data_hash.c_str());
  std::printf("| K | L | t | error | cost2 | frontier |\n|---|---|---|---|---|---|\n");
  const auto front = tune::pareto_frontier(results);
  std::vector<size_t> order(results.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return results[a].cost < results[b].cost; });
  for (size_t i : order)
    std::printf("| %d | %d | %d | %.4f | %.2f %% | %s |\n", results[i].c.K, results[i].c.L,
                results[i].c.t, results[i].error, 100 * results[i].cost,
                std::count(front.begin(), front.end(), i) ? "yes" : "");
  return g_stop ? 130 : 0;
}

// ------------------------------------------------------------------------------------------
// speed

struct SpeedCli {
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::vector<size_t> contexts{8192, 16384, 32768};
  size_t prefill = 2048;
  std::vector<std::string> lsh;       // uniform candidates "K,L,t"
  std::vector<std::string> points;    // operating point files
  std::vector<double> max_errors;     // per-layer points selected from the quality records
  std::vector<std::string> schedules; // each candidate x each schedule ("" = default)
  tune::SpeedOptions so;
  bool per_layer = false;   // per-layer attention times of candidates (select --cost time)
  size_t max_per_layer = 0; // candidates timed per layer at most (0: the per-layer frontiers)
};

struct SpeedCandidate {
  std::string label; // "default K=10 L=150 t=2", "point max-error 0.1", ...
  AttentionSpec spec;
  std::optional<tune::OperatingPoint> point; // predicted quality when known
  std::string kernel;                        // record key
  int t = 0;
};

// Forwards to an Attention and keeps the time of each layer's last call.
class LayerTimed final : public ForwardingAttention {
public:
  explicit LayerTimed(std::unique_ptr<Attention> inner)
      : ForwardingAttention(std::move(inner)), seconds(shape().n_layers, 0.0) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool, const Kernels &kern) override {
    const auto t0 = Clock::now();
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool, kern);
    seconds[layer] = Since(t0);
  }
  std::vector<double> seconds; // [layer]: the last step's
};

// One candidate's session decoding from the tiled cache.
class Decoder {
public:
  Decoder(const LlamaModel &model, ThreadPool &pool, const AttentionSpec &spec,
          const KvCache &tiled, size_t context, size_t steps)
      : logits_(model.config().vocab) {
    const LlamaConfig &c = model.config();
    const AttentionShape shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, context + steps};
    auto attn = std::make_unique<LayerTimed>(MakeAttention(spec, shape));
    attn->LoadPrefix(tiled, context);
    attn_ = attn.get();
    session_ = std::make_unique<LlamaSession>(model, pool, shape.capacity, std::move(attn));
    session_->SetPosition(context);
  }
  double Step(int32_t token) {
    if (session_->position() >= session_->capacity())
      throw std::runtime_error("speed: a session ran out of positions (raise the capacity)");
    const auto t0 = Clock::now();
    session_->Forward(&token, 1, logits_.data());
    return Since(t0);
  }
  AttentionStats Stats() const { return attn_->stats(); }
  const std::vector<double> &LayerSeconds() const { return attn_->seconds; }

private:
  std::vector<float> logits_;
  LayerTimed *attn_ = nullptr;
  std::unique_ptr<LlamaSession> session_;
};

// Per-layer attention time of each candidate on every layer (and of dense attention), for
// selection on this machine's times (select --cost time). Each candidate decodes with its
// (K, L, t) on every layer, alternated step by step with the default (which order first changes
// every round); a layer's time is the median over rounds of its ratio to the default's same
// layer in the same round, times the default's median for that layer: the machine's drift
// cancels as in every other ratio of the project. The default's non-attention time (MLPs,
// projections) is recorded too: predicted step = non-attention + sum of the layers' times.
int PerLayerSpeed(const LlamaModel &model, ThreadPool &pool, const tune::Fingerprint &fp,
                  const std::string &records, const SpeedCli &o,
                  const std::vector<tune::Candidate> &cands, const std::vector<int32_t> &tokens,
                  const KvCache &prefix, size_t ctx) {
  const LlamaConfig &c = model.config();
  const size_t nl = c.n_layers, d = c.head_dim;
  const lsh::DType kv = lsh::DType::bf16;
  KvCache tiled(AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, d, ctx}, kv);
  tiled.Tile(prefix, o.prefill, ctx);
  AttentionSpec def;
  def.method = "magicpig";
  def.kv_dtype = kv;
  const size_t rounds = size_t(std::max(o.so.min_rounds, 3));
  const size_t steps = (rounds + 2) * (cands.size() + 2) + 8;
  Decoder D(model, pool, def, tiled, ctx, steps);
  size_t tok = 0;
  auto next = [&] { return tokens[o.prefill + tok++ % 64]; };
  D.Step(next()); // builds the default's index
  const std::string ts = Timestamp();
  Progress progress("pig-tune speed --per-layer " + std::to_string(ctx), double(cands.size() + 1));
  std::vector<double> def_layer_all, def_rest;
  std::vector<std::vector<double>> def_layers(nl);
  auto write = [&](const tune::Candidate &cand, int layer, double secs, double mad,
                   const std::string &method) {
    tune::Record rec;
    rec.kind = tune::RecordKind::speed;
    rec.kernel = cand.dense ? "dense d=" + std::to_string(d) + " " + lsh::to_string(kv)
                            : KernelKey(cand, d, kv);
    rec.t = cand.dense ? 0 : cand.t;
    rec.layer = layer;
    rec.dense = cand.dense;
    rec.schedule = def.schedule.str();
    rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
    rec.fingerprint = fp;
    rec.time = tune::Timing{secs, mad, int(rounds), method};
    rec.pig_version = PIG_VERSION;
    rec.timestamp = ts;
    tune::append_record(records, rec);
  };
  for (size_t ci = 0; ci <= cands.size(); ++ci) {
    if (g_stop)
      break;
    // Dense first: every layer's dense time, the choice against which LSH is weighed.
    const tune::Candidate cand = ci == 0 ? tune::Candidate{0, 0, 0, true} : cands[ci - 1];
    AttentionSpec spec = def;
    if (cand.dense)
      spec.method = "dense";
    else
      spec.layers.assign(nl, LayerLsh{false, cand.K, cand.L, cand.t});
    Decoder X(model, pool, spec, tiled, ctx, steps);
    X.Step(next()); // index build: not timed
    std::vector<std::vector<double>> ratio(nl), dl(nl);
    for (size_t r = 0; r < rounds && !g_stop; ++r) {
      const bool x_first = r % 2 == 0;
      double ds = 0;
      if (!x_first)
        ds = D.Step(next());
      X.Step(next());
      const std::vector<double> xl = X.LayerSeconds();
      if (x_first)
        ds = D.Step(next());
      const std::vector<double> &dls = D.LayerSeconds();
      double dsum = 0;
      for (size_t l = 0; l < nl; ++l) {
        ratio[l].push_back(xl[l] / dls[l]);
        dl[l].push_back(dls[l]);
        def_layers[l].push_back(dls[l]);
        dsum += dls[l];
      }
      def_rest.push_back(ds - dsum);
    }
    if (g_stop)
      break;
    for (size_t l = 0; l < nl; ++l) {
      const double med = tune::Median(ratio[l]) * tune::Median(dl[l]);
      std::vector<double> scaled;
      for (size_t r = 0; r < ratio[l].size(); ++r)
        scaled.push_back(ratio[l][r] * tune::Median(dl[l]));
      write(cand, int(l), med, tune::MedianAbsDeviation(scaled),
            "per-layer attention time, alternated with the default, " + std::to_string(rounds) +
                " rounds");
    }
    progress.Update(double(ci + 1), CandStr(cand));
  }
  progress.Done();
  // The default's time outside attention, over every round.
  if (!def_rest.empty()) {
    tune::Record rec;
    rec.kind = tune::RecordKind::speed;
    rec.kernel = "non-attention";
    rec.t = 0;
    rec.layer = -1;
    rec.schedule = def.schedule.str();
    rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
    rec.fingerprint = fp;
    rec.time =
        tune::Timing{tune::Median(def_rest), tune::MedianAbsDeviation(def_rest),
                     int(def_rest.size()), "the default's step time minus its attention time"};
    rec.pig_version = PIG_VERSION;
    rec.timestamp = ts;
    tune::append_record(records, rec);
    double att = 0;
    for (size_t l = 0; l < nl; ++l)
      att += tune::Median(def_layers[l]);
    std::printf("| %zu | per-layer times of %zu candidates and dense | default: attention %.2f ms "
                "+ the rest %.2f ms per step |\n",
                ctx, cands.size(), 1e3 * att, 1e3 * tune::Median(def_rest));
  }
  if (g_stop) {
    std::fprintf(stderr, "pig-tune speed: interrupted; every record written so far is kept\n");
    return 130;
  }
  return 0;
}

int ComparePointLayers(const LlamaModel &model, ThreadPool &pool, const tune::Fingerprint &fp,
                       const std::string &records, const SpeedCli &o,
                       const tune::OperatingPoint &point, const std::string &label,
                       const std::vector<int32_t> &tokens, const KvCache &prefix, size_t ctx);

int Speed(const std::string &model_path, const std::string &records, size_t threads, SpeedCli o) {
  auto model = LlamaModel::Load(model_path);
  const LlamaConfig &c = model->config();
  const size_t d = c.head_dim;
  ThreadPool pool(threads);
  const tune::Fingerprint fp = tune::DetectFingerprint(BestKernels().target, int(pool.size()));
  const lsh::DType kv = lsh::DType::bf16;

  // Quality of what is measured, when the records know it (the table of the only data hash).
  std::optional<tune::QualityTable> table;
  {
    const auto loaded = LoadRecords(records);
    try {
      table = tune::build_quality_table(loaded.records, c.n_layers);
    } catch (const tune::RecordError &e) {
      std::fprintf(stderr, "pig-tune speed: no quality for the candidates (%s)\n", e.what());
    }
  }
  std::vector<SpeedCandidate> cands;
  AttentionSpec base;
  base.method = "magicpig";
  base.kv_dtype = kv;
  {
    SpeedCandidate def{"default " + CandStr({base.K, base.L, base.t}), base, std::nullopt,
                       KernelKey({base.K, base.L, base.t}, d, kv), base.t};
    if (table)
      def.point = tune::uniform_point(*table, {base.K, base.L, base.t}, DefaultDense(c.n_layers));
    cands.push_back(def);
  }
  for (const std::string &s : o.lsh) {
    tune::Candidate cand;
    if (std::sscanf(s.c_str(), "%d,%d,%d", &cand.K, &cand.L, &cand.t) != 3)
      throw CLI::ValidationError("--lsh", "expects K,L,t, got '" + s + "'");
    AttentionSpec spec = base;
    spec.K = cand.K;
    spec.L = cand.L;
    spec.t = cand.t;
    spec.Validate(c.n_layers);
    SpeedCandidate sc{"uniform " + CandStr(cand), spec, std::nullopt, KernelKey(cand, d, kv),
                      cand.t};
    if (table)
      sc.point = tune::uniform_point(*table, cand, DefaultDense(c.n_layers));
    cands.push_back(sc);
  }
  auto add_point = [&](const tune::OperatingPoint &p, const std::string &label) {
    SpeedCandidate sc{label, pig::tools::ApplyTuning(base, p), p, "point " + p.layers_str(), 0};
    sc.spec.Validate(c.n_layers);
    cands.push_back(sc);
  };
  for (const std::string &f : o.points) {
    const auto t = pig::tools::LoadTuning(f, std::nullopt, c.n_layers);
    add_point(t.point, "point " + f);
  }
  for (double e : o.max_errors) {
    if (!table)
      throw std::runtime_error("--max-errors needs quality records in " + records);
    const auto p = tune::select_per_layer_max_error(*table, e);
    add_point(*p, "tuned " + p->criterion);
  }
  // Each candidate under each schedule asked for.
  if (!o.schedules.empty()) {
    std::vector<SpeedCandidate> all;
    for (const auto &sc : cands)
      for (const std::string &s : o.schedules) {
        std::string err;
        const auto sched = lsh::Schedule::parse(s, &err);
        if (!sched)
          throw CLI::ValidationError("--schedules", err);
        SpeedCandidate x = sc;
        x.spec.schedule = *sched;
        if (!s.empty())
          x.label += " [" + s + "]";
        all.push_back(x);
      }
    cands = all;
  }

  // --per-layer: the candidates on some layer's error-vs-cost2 frontier (the ones selection can
  // pick), fewest projections first when --max-per-layer limits them.
  std::vector<tune::Candidate> timed;
  if (o.per_layer) {
    if (!table)
      throw std::runtime_error("--per-layer needs quality records in " + records +
                               " (pig-tune accuracy)");
    for (const tune::LayerTable &lt : table->layers) {
      std::vector<tune::Measured> ms;
      for (size_t i = 0; i < lt.candidates.size(); ++i)
        ms.push_back({lt.candidates[i], lt.cost2[i], lt.error[i]});
      for (size_t i : tune::pareto_frontier(ms))
        if (std::find(timed.begin(), timed.end(), ms[i].c) == timed.end())
          timed.push_back(ms[i].c);
    }
    std::stable_sort(timed.begin(), timed.end(), [](const auto &a, const auto &b) {
      return a.projections() < b.projections();
    });
    if (o.max_per_layer && timed.size() > o.max_per_layer)
      timed.resize(o.max_per_layer);
    // The default is always timed: predicted speed-ups are relative to it.
    if (std::find(timed.begin(), timed.end(), tune::Candidate{base.K, base.L, base.t}) ==
        timed.end())
      timed.push_back({base.K, base.L, base.t});
  }

  std::vector<int32_t> tokens =
      model->tokenizer().Encode(pig::eval::NormalizeText(pig::eval::ReadTextFile(o.text)));
  if (tokens.empty())
    throw std::runtime_error("--text " + o.text + " has no tokens");
  while (tokens.size() < o.prefill + 64)
    tokens.insert(tokens.end(), tokens.begin(), tokens.end());
  AttentionSpec dense;
  dense.kv_dtype = kv;
  LlamaSession pre(
      *model, pool, o.prefill,
      MakeAttention(dense, AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, d, o.prefill}));
  std::vector<float> logits(c.vocab);
  pre.Forward(tokens.data(), o.prefill, logits.data());
  std::printf("pig-tune speed: %s on %s; %zu candidates; dense prefill of %zu tokens tiled to "
              "each context (as pig-bench-context)\n\n",
              model_path.c_str(), fp.str().c_str(), o.per_layer ? timed.size() : cands.size(),
              o.prefill);
  if (o.per_layer && !o.points.empty()) {
    // A point's layers timed in the mix, against what the uniform runs predict for them.
    for (const std::string &f : o.points)
      for (size_t ctx : o.contexts)
        if (int rc = ComparePointLayers(*model, pool, fp, records, o,
                                        pig::tools::LoadTuning(f, std::nullopt, c.n_layers).point,
                                        f, tokens, pre.attention().cache(), ctx))
          return rc;
    return 0;
  }
  if (o.per_layer) {
    std::printf("| context | measured | default |\n|---|---|---|\n");
    for (size_t ctx : o.contexts)
      if (int rc = PerLayerSpeed(*model, pool, fp, records, o, timed, tokens,
                                 pre.attention().cache(), ctx))
        return rc;
    return 0;
  }
  std::printf("| context | candidate | step ms (median, MAD) | tok/s | vs default | error | cost2 "
              "| rounds |\n|---|---|---|---|---|---|---|---|\n");
  const std::string ts = Timestamp();
  o.so.stop = [] { return g_stop.load(); };
  const size_t steps = size_t(o.so.warmup_rounds + o.so.max_rounds + o.so.drift_samples + 4);
  for (size_t ctx : o.contexts) {
    KvCache tiled(AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, d, ctx}, kv);
    tiled.Tile(pre.attention().cache(), o.prefill, ctx);
    std::vector<std::unique_ptr<Decoder>> dec;
    for (const auto &sc : cands)
      dec.push_back(std::make_unique<Decoder>(*model, pool, sc.spec, tiled, ctx, steps));
    std::vector<size_t> next(cands.size(), 0);
    Progress progress("pig-tune speed " + std::to_string(ctx), double(o.so.max_rounds));
    o.so.progress = [&](int round, int max_rounds, size_t live) {
      progress.Update(double(round), std::to_string(live) + " live of " +
                                         std::to_string(max_rounds) + " rounds max");
    };
    const tune::SpeedResult r = tune::MeasureInterleaved(
        cands.size(), 0,
        [&](size_t i) {
          const int32_t tok = tokens[o.prefill + next[i]++ % 64];
          return dec[i]->Step(tok);
        },
        o.so);
    progress.Done();
    for (size_t i = 0; i < cands.size(); ++i) {
      const tune::CandidateSpeed &cs = r.candidates[i];
      const AttentionStats st = dec[i]->Stats();
      std::printf("| %zu | %s | %.2f (%.2f) | %.1f | %.2fx | %s | %.2f %% | %d%s |\n", ctx,
                  cands[i].label.c_str(), 1e3 * cs.median_s, 1e3 * cs.mad_s, 1.0 / cs.median_s,
                  i == 0 ? 1.0 : cs.ratio,
                  cands[i].point ? Fmt("%.4f", cands[i].point->error).c_str() : "?",
                  100 * st.cost2(), cs.rounds, cs.dropped ? ", dropped" : "");
      if (cs.rounds == 0)
        continue;
      tune::Record rec;
      rec.kind = tune::RecordKind::speed;
      rec.kernel = cands[i].kernel;
      rec.t = cands[i].t;
      rec.layer = -1;
      rec.schedule = cands[i].spec.schedule.str();
      rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
      rec.fingerprint = fp;
      if (cands[i].point) {
        tune::Quality q;
        q.value = cands[i].point->error;
        q.cost2 = cands[i].point->cost2;
        q.data_hash = cands[i].point->data_hash;
        rec.quality = q;
      }
      rec.time = tune::ToTiming(r, i);
      rec.status = cs.dropped ? "failed: dropped (slower than 1.25x the best)" : "ok";
      rec.pig_version = PIG_VERSION;
      rec.timestamp = ts;
      tune::append_record(records, rec);
    }
    if (r.drifted)
      std::printf("\nwarning: the default's step time moved %.0f %% between the start and the end "
                  "of the %zu-token run: the machine was not steady; rerun before trusting the "
                  "ratios\n",
                  100 * (r.default_end_median_s / r.default_start_median_s - 1), ctx);
    std::fflush(stdout);
    if (r.stopped || g_stop) {
      std::fprintf(stderr, "pig-tune speed: interrupted; every record written so far is kept\n");
      return 130;
    }
  }
  return 0;
}

// ------------------------------------------------------------------------------------------
// select, emit-manifest, show (replay: records only)

struct SelectCli {
  std::optional<double> max_error, max_cost2, min_speedup;
  size_t context = 0; // speed records' context (0: the largest measured)
  bool uniform = false;
  std::string cost = "cost2"; // what selection minimises or bounds: cost2 | time
  std::string out = "pig-tune-point.json";
  std::string data_hash;
  std::string as_machine; // "cpu|target|cores|threads|l3_bytes": replay as that machine (tests)
  int threads = 0;
};

tune::Fingerprint HereFingerprint(const SelectCli &o) {
  if (!o.as_machine.empty()) {
    std::vector<std::string> f;
    std::stringstream ss(o.as_machine);
    for (std::string x; std::getline(ss, x, '|');)
      f.push_back(x);
    if (f.size() != 5)
      throw CLI::ValidationError("--as-machine", "expects cpu|target|cores|threads|l3_bytes");
    return tune::Fingerprint{f[0], f[1], std::stoi(f[2]), std::stoi(f[3]), std::stoull(f[4])};
  }
  const int threads = o.threads ? o.threads : int(std::thread::hardware_concurrency());
  return tune::DetectFingerprint(BestKernels().target, std::max(1, threads));
}

// A whole-step record of the default (K, L, t).
bool IsDefault(const tune::Record &r) {
  tune::Candidate c;
  if (std::sscanf(r.kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
    return false;
  c.t = r.t;
  return c == DefaultCandidate();
}

// The speed records usable here at one context, with their ratio to the default of the same run.
struct SpeedRow {
  tune::Record r;
  double ratio = 0;
};
std::vector<SpeedRow> UsableSpeed(const std::vector<tune::Record> &rs, const tune::Fingerprint &fp,
                                  size_t &context, bool &foreign) {
  foreign = false;
  std::vector<const tune::Record *> here;
  for (const auto &r : rs) {
    // Whole-step records only (per-layer times and the non-attention record are select
    // --cost time's).
    if (r.kind != tune::RecordKind::speed || !r.time || r.layer != -1 ||
        r.kernel == "non-attention")
      continue;
    if (!r.usable_on(fp)) {
      foreign = true;
      continue;
    }
    here.push_back(&r);
  }
  if (context == 0)
    for (const auto *r : here)
      context = std::max(context, r->workload.context);
  std::vector<SpeedRow> out;
  for (const auto *r : here) {
    if (r->workload.context != context || !r->ok())
      continue;
    // The default of the same run (same timestamp and context) is the reference of its ratio.
    const tune::Record *ref = nullptr;
    for (const auto *x : here)
      if (x->timestamp == r->timestamp && x->workload.context == context && IsDefault(*x) &&
          x->schedule == r->schedule && x->time->method.find("the default") != std::string::npos)
        ref = x;
    if (!ref)
      continue;
    out.push_back({*r, ref->time->median_s / r->time->median_s});
  }
  return out;
}

std::optional<tune::OperatingPoint> PointOfSpeedRecord(const tune::Record &r,
                                                       const tune::QualityTable &t) {
  if (r.kernel.rfind("point ", 0) == 0) {
    const auto layers = ParseLayers(r.kernel.substr(6));
    if (layers.size() != t.layers.size())
      return std::nullopt;
    tune::OperatingPoint p;
    p.data_hash = t.data_hash;
    p.kernel_tail = t.kernel_tail;
    double e = 0, k = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      tune::LayerChoice lc{int(l), {layers[l].K, layers[l].L, layers[l].t, layers[l].dense}, 0, 1};
      if (!lc.c.dense) {
        const auto &lt = t.layers[l];
        auto it = std::find(lt.candidates.begin(), lt.candidates.end(), lc.c);
        if (it == lt.candidates.end())
          return std::nullopt;
        lc.error = lt.error[size_t(it - lt.candidates.begin())];
        lc.cost2 = lt.cost2[size_t(it - lt.candidates.begin())];
      }
      e += lc.error;
      k += lc.cost2;
      p.layers.push_back(lc);
    }
    p.error = e / double(layers.size());
    p.cost2 = k / double(layers.size());
    p.schedule = r.schedule == lsh::Schedule{}.str() ? "" : r.schedule;
    return p;
  }
  tune::Candidate c;
  if (std::sscanf(r.kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
    return std::nullopt;
  c.t = r.t;
  auto p = tune::uniform_point(t, c, DefaultDense(t.layers.size()));
  if (p)
    p->schedule = r.schedule == lsh::Schedule{}.str() ? "" : r.schedule;
  return p;
}

// This machine's per-layer times (pig-tune speed --per-layer) at one context (0: the largest
// with such records): the layer times and the time outside attention.
struct LayerTimes {
  size_t context = 0;
  std::vector<tune::LayerTime> times;
  double rest_s = 0;
};
std::optional<LayerTimes> LoadLayerTimes(const std::vector<tune::Record> &rs,
                                         const tune::Fingerprint &fp, size_t context,
                                         bool &foreign) {
  foreign = false;
  LayerTimes lt;
  lt.context = context;
  for (const auto &r : rs)
    if (r.kind == tune::RecordKind::speed && r.time && r.ok() && r.kernel == "non-attention") {
      if (!r.usable_on(fp)) {
        foreign = true;
        continue;
      }
      if (context == 0)
        lt.context = std::max(lt.context, r.workload.context);
    }
  if (lt.context == 0)
    return std::nullopt;
  // One run's records only (the latest run at this context): every time of a run is
  // normalised to that run's default, so runs are not mixed.
  std::string run;
  for (const auto &r : rs)
    if (r.kind == tune::RecordKind::speed && r.time && r.ok() && r.usable_on(fp) &&
        r.workload.context == lt.context && r.kernel == "non-attention" && r.timestamp >= run) {
      run = r.timestamp;
      lt.rest_s = r.time->median_s;
    }
  if (run.empty())
    return std::nullopt;
  std::map<std::tuple<std::string, int, int>, const tune::Record *> latest;
  for (const auto &r : rs)
    if (r.kind == tune::RecordKind::speed && r.time && r.ok() && r.usable_on(fp) &&
        r.workload.context == lt.context && r.timestamp == run && r.layer >= 0)
      latest[{r.kernel, r.t, r.layer}] = &r;
  for (const auto &[key, r] : latest) {
    tune::Candidate c{0, 0, 0, r->dense};
    if (!r->dense && std::sscanf(r->kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
      continue;
    if (!r->dense)
      c.t = r->t;
    lt.times.push_back({r->layer, c, r->time->median_s});
  }
  return lt;
}

// speed --per-layer --point FILE: the point decodes alternated with the default, each of its
// layers timed as a ratio to the default's same layer (as --per-layer times candidates), and
// compared with the time the latest --per-layer run of this machine gives the layer's choice
// when every layer has it. Where the two differ, the sum-of-layers model is wrong for mixed
// points. Prints only; records nothing (the records hold uniform runs).
int ComparePointLayers(const LlamaModel &model, ThreadPool &pool, const tune::Fingerprint &fp,
                       const std::string &records, const SpeedCli &o,
                       const tune::OperatingPoint &point, const std::string &label,
                       const std::vector<int32_t> &tokens, const KvCache &prefix, size_t ctx) {
  const LlamaConfig &c = model.config();
  const size_t nl = c.n_layers;
  bool foreign = false;
  const auto times = LoadLayerTimes(tune::load_records(records).records, fp, ctx, foreign);
  if (!times)
    throw std::runtime_error("no per-layer times of this machine at " + std::to_string(ctx) +
                             " tokens in " + records + " (run speed --per-layer first)");
  const lsh::DType kv = lsh::DType::bf16;
  KvCache tiled(AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, ctx}, kv);
  tiled.Tile(prefix, o.prefill, ctx);
  AttentionSpec def;
  def.method = "magicpig";
  def.kv_dtype = kv;
  const size_t rounds = size_t(std::max(o.so.min_rounds, 3));
  const size_t steps = 2 * rounds + 8;
  Decoder D(model, pool, def, tiled, ctx, steps);
  Decoder X(model, pool, pig::tools::ApplyTuning(def, point), tiled, ctx, steps);
  size_t tok = 0;
  auto next = [&] { return tokens[o.prefill + tok++ % 64]; };
  D.Step(next());
  X.Step(next());
  std::vector<std::vector<double>> ratio(nl), dl(nl);
  std::vector<double> xs, ds;
  for (size_t r = 0; r < rounds && !g_stop; ++r) {
    double d = 0, x = 0;
    if (r % 2)
      d = D.Step(next());
    x = X.Step(next());
    const std::vector<double> xl = X.LayerSeconds();
    if (r % 2 == 0)
      d = D.Step(next());
    xs.push_back(x);
    ds.push_back(d);
    for (size_t l = 0; l < nl; ++l) {
      ratio[l].push_back(xl[l] / D.LayerSeconds()[l]);
      dl[l].push_back(D.LayerSeconds()[l]);
    }
  }
  if (g_stop)
    return 130;
  // Both sides as ratios to the default's same layer in their own run: the machine's state
  // (which moves by 10-20 % between runs) cancels.
  const auto uniform_time = [&](size_t l, const tune::Candidate &ch) {
    for (const auto &x : times->times)
      if (x.layer == int(l) && x.c.dense == ch.dense && (ch.dense || x.c == ch))
        return x.seconds;
    return -1.0;
  };
  const auto defaults = AttentionSpec{}.DenseLayers(nl);
  std::printf("\n%s at %zu tokens: each layer's time as a ratio to the default's same layer, "
              "in the point (alternated with the default) and with the same choice on every "
              "layer (the latest --per-layer run)\n\n| layer | choice | uniform run | in the "
              "point | point / uniform |\n|---|---|---|---|---|\n",
              label.c_str(), ctx);
  double sum_u = 0, sum_p = 0, sum_def = 0;
  for (size_t l = 0; l < nl; ++l) {
    const tune::Candidate &ch = point.layers[l].c;
    const bool dl_dense = std::count(defaults.begin(), defaults.end(), l) > 0;
    const double u = uniform_time(l, ch);
    const double d =
        uniform_time(l, dl_dense ? tune::Candidate{0, 0, 0, true} : DefaultCandidate());
    const double rp = tune::Median(ratio[l]);
    const double ru = u > 0 && d > 0 ? u / d : -1;
    if (ru > 0) {
      sum_u += u;
      sum_p += rp * d;
      sum_def += d;
    }
    std::printf("| %zu | %s | %s | %.2f | %s |\n", l, CandStr(ch).c_str(),
                ru > 0 ? Fmt("%.2f", ru).c_str() : "?", rp,
                ru > 0 ? Fmt("%.2f", rp / ru).c_str() : "?");
  }
  std::vector<double> speedup;
  for (size_t r = 0; r < xs.size(); ++r)
    speedup.push_back(ds[r] / xs[r]);
  std::printf("\nattention per step in the uniform run's time: %.2f ms predicted, %.2f ms as "
              "measured in the point (the default %.2f ms); the point's speed-up over the default "
              "%.3fx (median of %zu alternated rounds' ratios)\n",
              1e3 * sum_u, 1e3 * sum_p, 1e3 * sum_def, tune::Median(speedup), xs.size());
  return 0;
}

void PrintPoint(const tune::OperatingPoint &p) {
  std::printf("criterion: %s\nlayers: %s\npredicted attention error (mean over layers): %.4f\n"
              "predicted cost2 (mean over layers, dense = 100 %%): %.2f %%\n",
              p.criterion.c_str(), p.layers_str().c_str(), p.error, 100 * p.cost2);
  if (!p.schedule.empty())
    std::printf("schedule: %s\n", p.schedule.c_str());
}

int Select(const std::string &records, const SelectCli &o) {
  const auto loaded = LoadRecords(records);
  const size_t n_layers = LayersOf(loaded.records);
  const tune::QualityTable t = tune::build_quality_table(loaded.records, n_layers, o.data_hash);
  std::optional<tune::OperatingPoint> p;
  const auto dense = DefaultDense(n_layers);
  std::optional<LayerTimes> times;
  std::optional<tune::QualityTable> timed;
  double def_step = 0;
  if (o.cost == "time") {
    bool foreign = false;
    times = LoadLayerTimes(loaded.records, HereFingerprint(o), o.context, foreign);
    if (!times) {
      // Never a time measured elsewhere: one warning, then the fallback (selection on cost2).
      std::fprintf(stderr,
                   "pig-tune: warning: no per-layer times of this machine (%s)%s; selecting on "
                   "cost2 instead (run pig-tune speed --per-layer)\n",
                   HereFingerprint(o).str().c_str(),
                   foreign ? " (times of other machines are not applied)" : "");
    } else {
      timed = tune::with_layer_times(t, times->times);
      const auto d = tune::uniform_point(*timed, DefaultCandidate(), dense);
      if (!d)
        throw std::runtime_error("the per-layer times lack the default (10, 150) on some layer");
      def_step = times->rest_s + d->attention_s;
    }
  }
  if (timed && o.min_speedup) {
    // Predicted: the step is the time outside attention plus the layers' attention times.
    const double budget = def_step / *o.min_speedup - times->rest_s;
    if (budget > 0)
      p = tune::select_per_layer_max_cost(*timed, budget / double(n_layers));
    if (!p)
      throw std::runtime_error("no point is predicted to reach " + Fmt("%g", *o.min_speedup) +
                               "x the default at " + std::to_string(times->context) +
                               " tokens (the time outside attention alone is " +
                               Fmt("%.2f", 1e3 * times->rest_s) + " ms of the default's " +
                               Fmt("%.2f", 1e3 * def_step) + " ms)");
    p->criterion = "min-speedup " + Fmt("%g", *o.min_speedup) + " at " +
                   std::to_string(times->context) + " tokens (per-layer times)";
  } else if (timed && o.max_error) {
    p = tune::select_per_layer_max_error(*timed, *o.max_error);
    if (p)
      p->criterion = "max-error " + Fmt("%g", *o.max_error) + ", fastest at " +
                     std::to_string(times->context) + " tokens (per-layer times)";
  } else if (timed && o.max_cost2) {
    throw CLI::ValidationError("--max-cost2", "bounds cost2; with --cost time use --min-speedup");
  } else if (o.min_speedup) {
    const tune::Fingerprint fp = HereFingerprint(o);
    size_t ctx = o.context;
    bool foreign = false;
    const auto rows = UsableSpeed(loaded.records, fp, ctx, foreign);
    if (rows.empty()) {
      // Never a speed measured elsewhere: one warning, then the fallback (the default point).
      std::fprintf(stderr,
                   "pig-tune: warning: no speed record of this machine (%s)%s; falling back to "
                   "the default (10, 150)\n",
                   fp.str().c_str(), foreign ? " (records of other machines are not applied)" : "");
      p = tune::uniform_point(t, DefaultCandidate(), dense);
      if (!p)
        throw std::runtime_error("the records lack the default (10, 150) on some layer");
      p->criterion = "fallback: default (no speed record for this machine)";
    } else {
      // The most accurate measured point at least S times as fast as the default; ties (within
      // 2 % relative error) to the cheaper cost2, then record order: never raw timing.
      std::optional<tune::OperatingPoint> best;
      for (const auto &row : rows) {
        if (row.ratio < *o.min_speedup)
          continue;
        auto q = PointOfSpeedRecord(row.r, t);
        if (!q)
          continue;
        if (!best || q->error < best->error * 0.98 ||
            (q->error <= best->error * 1.02 && q->cost2 < best->cost2)) {
          best = q;
          char crit[96];
          std::snprintf(crit, sizeof crit, "min-speedup %g at %zu tokens (measured %.2fx)",
                        *o.min_speedup, ctx, row.ratio);
          best->criterion = crit;
        }
      }
      if (!best)
        throw std::runtime_error("no measured point reaches " + Fmt("%g", *o.min_speedup) +
                                 "x the default at " + std::to_string(ctx) +
                                 " tokens on this machine (pig-tune show lists what was measured)");
      p = best;
    }
  } else if (o.max_error) {
    if (o.uniform) {
      // The cheapest uniform candidate within the bound (ties as tune::select_max_error).
      std::vector<tune::Measured> ms;
      std::vector<tune::OperatingPoint> ups;
      for (const auto &c : t.common())
        if (auto u = tune::uniform_point(t, c, dense)) {
          ms.push_back({c, u->cost2, u->error});
          ups.push_back(*u);
        }
      if (auto i = tune::select_max_error(ms, *o.max_error)) {
        p = ups[*i];
        p->criterion = "uniform max-error " + Fmt("%g", *o.max_error);
      }
    } else
      p = tune::select_per_layer_max_error(t, *o.max_error);
  } else if (o.max_cost2) {
    p = tune::select_per_layer_max_cost(t, *o.max_cost2);
  }
  if (!p)
    throw std::runtime_error("no point of the records meets the bound");
  p->pig_version = PIG_VERSION;
  p->timestamp = Timestamp();
  tune::save_point(o.out, *p);
  PrintPoint(*p);
  if (const auto def = tune::uniform_point(t, DefaultCandidate(), dense))
    std::printf("the default (10, 150): error %.4f, cost2 %.2f %%\n", def->error, 100 * def->cost2);
  if (timed && p->attention_s > 0)
    std::printf("predicted decode step at %zu tokens on this machine: %.2f ms (the default "
                "%.2f ms): %.2fx\n",
                times->context, 1e3 * (times->rest_s + p->attention_s), 1e3 * def_step,
                def_step / (times->rest_s + p->attention_s));
  std::printf("wrote %s (pig-run --tuning %s)\n", o.out.c_str(), o.out.c_str());
  return 0;
}

// Whitespace-normalised manifest line (comments dropped): how two lines are compared.
std::string ManifestKey(const std::string &line) {
  std::istringstream in(line.substr(0, line.find('#')));
  std::string w, key;
  while (in >> w)
    key += (key.empty() ? "" : " ") + w;
  return key;
}

// The point's configs/kernels.txt lines: one per distinct (K, L) of its LSH layers (head dim and
// KV type from the records, the schedule when not the default). With a manifest, only the lines
// it lacks (the build refuses a line listed twice); --append adds them to it.
int EmitManifest(const std::string &point_file, const std::string &out, const std::string &manifest,
                 bool append) {
  const tune::OperatingPoint p = tune::load_point(point_file);
  if (p.kernel_tail.empty())
    throw std::runtime_error(point_file + " does not name its head dim and KV type (\"kernel\")");
  std::set<std::string> present;
  if (!manifest.empty()) {
    std::ifstream in(manifest);
    if (!in)
      throw std::runtime_error("cannot read the manifest " + manifest);
    for (std::string line; std::getline(in, line);)
      if (!ManifestKey(line).empty())
        present.insert(ManifestKey(line));
  }
  std::ostringstream s;
  s << "# pig-tune emit-manifest " << point_file << ": " << p.criterion << " (data " << p.data_hash
    << ")\n";
  std::set<std::pair<int, int>> seen;
  size_t added = 0, already = 0;
  for (const auto &l : p.layers) {
    if (l.c.dense || !seen.insert({l.c.K, l.c.L}).second)
      continue;
    std::string line =
        "K=" + std::to_string(l.c.K) + " L=" + std::to_string(l.c.L) + " " + p.kernel_tail;
    if (!p.schedule.empty())
      line += " " + p.schedule;
    if (present.count(ManifestKey(line))) {
      ++already;
      continue;
    }
    s << line << "\n";
    ++added;
  }
  if (append) {
    if (manifest.empty())
      throw CLI::ValidationError("--append", "needs --manifest FILE");
    if (added) {
      std::ofstream o(manifest, std::ios::app);
      o << "\n" << s.str();
      if (!o)
        throw std::runtime_error("cannot append to " + manifest);
    }
    std::printf("%s: %zu line(s) added, %zu already listed; rebuild (./pig build) to generate "
                "them\n",
                manifest.c_str(), added, already);
  } else if (out.empty()) {
    std::fputs(s.str().c_str(), stdout);
    if (!manifest.empty())
      std::printf("# %zu configuration(s) of the point already in %s\n", already, manifest.c_str());
  } else {
    pig::eval::WriteFile(out, s.str());
    std::printf("wrote %s: %zu kernel configuration(s) (%zu already in the manifest)\n",
                out.c_str(), added, already);
  }
  return 0;
}

int Show(const std::string &records, const std::string &out, const SelectCli &o) {
  const auto loaded = LoadRecords(records);
  const size_t n_layers = LayersOf(loaded.records);
  const tune::QualityTable t = tune::build_quality_table(loaded.records, n_layers, o.data_hash);
  const auto dense = DefaultDense(n_layers);
  std::vector<tune::Measured> ms;
  for (const auto &c : t.common())
    if (auto u = tune::uniform_point(t, c, dense))
      ms.push_back({c, u->cost2, u->error});
  const auto front = tune::pareto_frontier(ms);
  std::printf("quality records: data hash %s, %zu layers, contexts", t.data_hash.c_str(), n_layers);
  for (size_t c : t.contexts)
    std::printf(" %zu", c);
  std::printf("\n\nUniform points (one (K, L, t) on every layer but the default dense ones):\n\n"
              "| K | L | t | error | cost2 | frontier |\n|---|---|---|---|---|---|\n");
  std::vector<size_t> order(ms.size());
  for (size_t i = 0; i < ms.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ms[a].cost < ms[b].cost; });
  for (size_t i : order)
    std::printf("| %d | %d | %d | %.4f | %.2f %% | %s |\n", ms[i].c.K, ms[i].c.L, ms[i].c.t,
                ms[i].error, 100 * ms[i].cost,
                std::count(front.begin(), front.end(), i) ? "yes" : "");
  // Per-layer points along the uniform frontier's errors.
  std::printf("\nPer-layer points (pig-tune select --max-error E) at the uniform frontier's "
              "errors:\n\n| max error | error | cost2 | vs uniform cost2 | layers |\n"
              "|---|---|---|---|---|\n");
  std::vector<std::pair<double, double>> per_layer;
  for (size_t i : front) {
    const auto p = tune::select_per_layer_max_error(t, ms[i].error);
    if (!p)
      continue;
    per_layer.push_back({p->cost2, p->error});
    std::printf("| %.4f | %.4f | %.2f %% | %.2fx cheaper | %s |\n", ms[i].error, p->error,
                100 * p->cost2, ms[i].cost / std::max(p->cost2, 1e-12), p->layers_str().c_str());
  }
  // Speed records of this machine.
  bool foreign = false;
  size_t ctx = o.context;
  const auto rows = UsableSpeed(loaded.records, HereFingerprint(o), ctx, foreign);
  if (!rows.empty()) {
    std::printf("\nSpeed on this machine at %zu tokens:\n\n| configuration | schedule | step ms | "
                "vs default | error |\n|---|---|---|---|---|\n",
                ctx);
    for (const auto &r : rows)
      std::printf("| %s%s | %s | %.2f | %.2fx | %s |\n", r.r.kernel.c_str(),
                  r.r.kernel.rfind("point", 0) == 0 ? "" : (" t=" + std::to_string(r.r.t)).c_str(),
                  r.r.schedule.c_str(), 1e3 * r.r.time->median_s, r.ratio,
                  r.r.quality ? Fmt("%.4f", r.r.quality->value).c_str() : "?");
  } else if (foreign)
    std::printf("\n(speed records of other machines are not shown)\n");
  if (out.empty())
    return 0;
  pig::eval::MakeDirs(out);
  {
    pig::eval::Csv u(out + "/uniform.csv", {"cost2", "error", "frontier", "K", "L", "t"});
    for (size_t i : order)
      u.row({Fmt("%.6f", ms[i].cost), Fmt("%.6f", ms[i].error),
             std::count(front.begin(), front.end(), i) ? "1" : "0", std::to_string(ms[i].c.K),
             std::to_string(ms[i].c.L), std::to_string(ms[i].c.t)});
    pig::eval::Csv f(out + "/frontier.csv", {"cost2", "error"});
    std::vector<size_t> fs(front.begin(), front.end());
    for (size_t i : fs)
      f.row({Fmt("%.6f", ms[i].cost), Fmt("%.6f", ms[i].error)});
    pig::eval::Csv pl(out + "/per_layer.csv", {"cost2", "error"});
    for (const auto &[k, e] : per_layer)
      pl.row({Fmt("%.6f", k), Fmt("%.6f", e)});
    pig::eval::Csv sp(out + "/speed.csv", {"step_ms", "error", "ratio"});
    for (const auto &r : rows)
      if (r.r.quality)
        sp.row({Fmt("%.4f", 1e3 * r.r.time->median_s), Fmt("%.6f", r.r.quality->value),
                Fmt("%.4f", r.ratio)});
  }
  const auto def = tune::uniform_point(t, DefaultCandidate(), dense);
  std::string gp = "set datafile separator ','\nset terminal pngcairo size 1300,500 noenhanced "
                   "font ',10'\nset output '" +
                   out + "/frontier.png'\nset multiplot layout 1," + (rows.empty() ? "1" : "2") +
                   " title 'pig-tune: attention error vs cost (" + t.data_hash + ")'\n" +
                   "set grid\nset key top right\nset logscale x\nset xlabel 'cost2 (mean over "
                   "layers, dense layer = 1)'\nset ylabel 'attention error (relative L2, mean "
                   "over layers)'\nset title 'quality'\n";
  gp += "plot '" + out +
        "/uniform.csv' every ::1 using 1:2 with points pt 7 ps 0.6 lc rgb "
        "'#999999' title 'uniform candidates', '" +
        out +
        "/frontier.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#1f77b4' title "
        "'uniform frontier', '" +
        out +
        "/per_layer.csv' every ::1 using 1:2 with linespoints lw 2 lc rgb '#d62728' title "
        "'per-layer points'";
  if (def)
    gp += ", '-' using 1:2 with points pt 9 ps 2 lc rgb '#2ca02c' title 'default (10,150)'\n" +
          Fmt("%.6f", def->cost2) + "," + Fmt("%.6f", def->error) + "\ne";
  gp += "\n";
  if (!rows.empty())
    gp += "unset logscale x\nset xlabel 'decode speed-up over the default (10,150), same run, " +
          std::to_string(ctx) + " tokens, this machine'\nset title 'speed'\nplot '" + out +
          "/speed.csv' every ::1 using 3:2 with points pt 7 ps 1.2 title 'measured points'\n";
  gp += "unset multiplot\n";
  pig::eval::WriteFile(out + "/frontier.gp", gp);
  if (pig::eval::RunGnuplot(out + "/frontier.gp"))
    std::printf("\nwrote %s/frontier.png\n", out.c_str());
  return 0;
}

std::vector<size_t> SizeList(const std::string &s) {
  std::vector<size_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char *end = nullptr;
    const unsigned long long x = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end || item[0] == '-' || x == 0)
      throw CLI::ValidationError("list",
                                 "expects positive integers separated by commas, got '" + s + "'");
    v.push_back(size_t(x));
  }
  return v;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"pig-tune: operating points per model and per machine (docs/TUNING.md)"};
  app.require_subcommand(1);
  std::string records = "pig-tune.jsonl", model = DefaultModelPath();
  size_t threads = 0;
  app.add_option("--records", records, "tuning records, JSON Lines (appended)")
      ->capture_default_str();
  app.add_option("--model", model, "GGUF model")->capture_default_str();
  app.add_option("--threads", threads, "threads (0: every core)")->capture_default_str();

  AccuracyOptions ao;
  std::string ctx_str = "2048,4096,8192";
  auto *acc = app.add_subcommand("accuracy", "per-layer attention error and cost2 of LSH "
                                             "candidates on the model's real KV caches");
  acc->add_option("--text", ao.text, "text prefilled (densely) to build the KV caches")
      ->capture_default_str();
  acc->add_option("--contexts", ctx_str, "KV cache lengths measured")->capture_default_str();
  acc->add_option("--positions", ao.positions, "decode positions per context")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  acc->add_option("--K", ao.Ks, "bits per table")->delimiter(',')->capture_default_str();
  acc->add_option("--L", ao.Ls, "tables")->delimiter(',')->capture_default_str();
  acc->add_option("--t", ao.ts, "collision thresholds")->delimiter(',')->capture_default_str();
  acc->add_option("--max-evals", ao.max_evals, "candidates measured at most (0: no limit)")
      ->capture_default_str();
  acc->add_option("--time-limit", ao.time_limit, "seconds; stops starting new candidates")
      ->capture_default_str();
  acc->add_flag("--exhaustive", ao.exhaustive,
                "measure every candidate (no pruning of those that cannot improve the frontier)");

  SpeedCli sc;
  std::string sctx = "8192,16384,32768";
  auto *spd = app.add_subcommand("speed", "decode-step time of candidates and tuned points on "
                                          "this machine, interleaved against the default");
  spd->add_option("--text", sc.text, "text prefilled densely, then tiled")->capture_default_str();
  spd->add_option("--contexts", sctx, "contexts")->capture_default_str();
  spd->add_option("--prefill", sc.prefill, "tokens prefilled (tiled up to each context)")
      ->capture_default_str();
  spd->add_option("--lsh", sc.lsh, "uniform candidates K,L,t (repeatable)");
  spd->add_option("--point", sc.points, "operating point files (repeatable)");
  spd->add_option("--max-errors", sc.max_errors,
                  "per-layer points selected from the quality records at these errors")
      ->delimiter(',');
  spd->add_option("--schedules", sc.schedules,
                  "measure each candidate under each schedule ('' = default; repeatable)");
  spd->add_flag("--per-layer", sc.per_layer,
                "per-layer attention times of the per-layer frontiers' candidates and of dense "
                "attention (for select --cost time); with --point: the point's layers timed in "
                "the mix against those times (prints only)");
  spd->add_option("--max-per-layer", sc.max_per_layer,
                  "with --per-layer: candidates timed at most (0: every frontier candidate)");
  spd->add_option("--min-rounds", sc.so.min_rounds)->capture_default_str();
  spd->add_option("--max-rounds", sc.so.max_rounds)->capture_default_str();
  spd->add_option("--min-time", sc.so.min_time_s, "seconds measured per candidate at least")
      ->capture_default_str();
  spd->add_option("--drop-ratio", sc.so.drop_ratio,
                  "drop a candidate slower than this times the best (inf: never)")
      ->capture_default_str();
  spd->add_option("--time-limit", sc.so.time_limit_s, "seconds per context (0: none)")
      ->capture_default_str();

  SelectCli so;
  auto *sel = app.add_subcommand("select", "an operating point from the records (no measuring)");
  auto *me = sel->add_option("--max-error", so.max_error,
                             "cheapest point whose mean attention error is at most E");
  auto *mc = sel->add_option("--max-cost2", so.max_cost2,
                             "most accurate point whose mean cost2 is at most C");
  auto *ms = sel->add_option("--min-speedup", so.min_speedup,
                             "most accurate measured point at least S x the default's speed");
  me->excludes(mc)->excludes(ms);
  mc->excludes(ms);
  sel->add_flag("--uniform", so.uniform, "one (K, L, t) on every sparse layer (with --max-error)");
  sel->add_option("--cost", so.cost,
                  "what the point minimises or bounds: cost2 (any machine) or time (this "
                  "machine's per-layer times, pig-tune speed --per-layer)")
      ->check(CLI::IsMember({"cost2", "time"}))
      ->capture_default_str();
  sel->add_option("--context", so.context, "context of the speed records (0: the largest)");
  sel->add_option("--out", so.out, "point file written")->capture_default_str();
  sel->add_option("--data-hash", so.data_hash, "quality records of this data hash");
  sel->add_option("--as-machine", so.as_machine, "replay as another machine (tests)")->group("");

  std::string point_file, manifest_out;
  auto *em = app.add_subcommand("emit-manifest", "the configs/kernels.txt lines of a point");
  em->add_option("point", point_file, "operating point file")->required();
  em->add_option("--out", manifest_out, "write here (default: stdout)");
  std::string manifest;
  bool append = false;
  em->add_option("--manifest", manifest,
                 "leave out the lines this manifest lists (configs/kernels.txt)");
  em->add_flag("--append", append, "append the missing lines to --manifest");

  std::string show_out;
  SelectCli sho;
  auto *sh = app.add_subcommand("show", "the frontier: tables and a PNG");
  sh->add_option("--out", show_out, "directory for frontier.png and the CSVs");
  sh->add_option("--data-hash", sho.data_hash, "quality records of this data hash");
  sh->add_option("--context", sho.context, "context of the speed records (0: the largest)");
  sh->add_option("--as-machine", sho.as_machine, "replay as another machine (tests)")->group("");

  // A bad command line exits 2, as the project's other tools do (--help: 0).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::signal(SIGINT, OnSigint);
  try {
#ifdef PIG_HAVE_GENERATED_KERNELS
    pig_register_generated_kernels();
#endif
    if (*acc) {
      ao.contexts = SizeList(ctx_str);
      return Accuracy(model, records, threads, ao);
    }
    if (*spd) {
      sc.contexts = SizeList(sctx);
      return Speed(model, records, threads, sc);
    }
    if (*sel) {
      if (!so.max_error && !so.max_cost2 && !so.min_speedup)
        throw CLI::ValidationError("select", "give --max-error, --max-cost2 or --min-speedup");
      so.threads = int(threads);
      return Select(records, so);
    }
    if (*em)
      return EmitManifest(point_file, manifest_out, manifest, append);
    if (*sh) {
      sho.threads = int(threads);
      return Show(records, show_out, sho);
    }
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-tune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
