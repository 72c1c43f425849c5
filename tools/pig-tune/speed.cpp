// pig-tune speed: one dense prefill tiled to each context (as pig-bench-context), then the
// candidates' decode steps interleaved round-robin against the default (pig_tune's
// MeasureInterleaved); --per-layer times each layer's attention as a ratio to the default's
// same layer, and --per-layer --point compares a point's layers in the mix with those times.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "pig/app/progress.h"
#include "pig/app/text.h" // text reading and normalisation
#include "pig/app/tiled_decode.h"
#include "pig/app/tuning.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/ops.h"
#include "pig/tune/frontier.h"
#include "pig/tune/point.h"
#include "pig/tune/record.h"
#include "pig/tune/speed.h"
#include "replay.h"
#include "workflows.h"

namespace pig::tune {

using namespace pig::runtime;
using namespace workflow;
using app::Progress;
using app::TiledDecoder;

namespace {

struct SpeedCandidate {
  std::string label; // "default K=10 L=150 t=2", "point max-error 0.1", ...
  AttentionSpec spec;
  std::optional<OperatingPoint> point; // predicted quality when known
  std::string kernel;                  // record key
  int t = 0;
};

// Per-layer attention time of each candidate on every layer (and of dense attention), for
// selection on this machine's times (select --cost time). Each candidate decodes with its
// (K, L, t) on every layer, alternated step by step with the default (which order first changes
// every round); a layer's time is the median over rounds of its ratio to the default's same
// layer in the same round, times the default's median for that layer: the machine's drift
// cancels as in every other ratio of the project. The default's non-attention time (MLPs,
// projections) is recorded too: predicted step = non-attention + sum of the layers' times.
int PerLayerSpeed(const LlamaModel &model, ThreadPool &pool, const Fingerprint &fp,
                  const CommonOptions &common, const SpeedRunOptions &o,
                  const std::vector<Candidate> &cands, const std::vector<int32_t> &tokens,
                  const KvCache &prefix, size_t ctx) {
  const std::string &records = common.records;
  const LlamaConfig &c = model.config();
  const size_t nl = c.n_layers, d = c.head_dim;
  const lsh::DType kv = lsh::DType::bf16;
  KvCache tiled(c.Shape(ctx), kv);
  tiled.Tile(prefix, o.prefill, ctx);
  AttentionSpec def;
  def.method = pig::spec::Method::magicpig;
  def.kv_dtype = kv;
  const size_t rounds = size_t(std::max(o.harness.min_rounds, 3));
  const size_t steps = (rounds + 2) * (cands.size() + 2) + 8;
  TiledDecoder D(model, pool, def, tiled, ctx, steps);
  size_t tok = 0;
  auto next = [&] { return tokens[o.prefill + tok++ % 64]; };
  D.Step(next()); // builds the default's index
  const std::string ts = Timestamp();
  Progress progress("pig-tune speed --per-layer " + std::to_string(ctx), double(cands.size() + 1));
  std::vector<double> def_layer_all, def_rest;
  std::vector<std::vector<double>> def_layers(nl);
  auto write = [&](const Candidate &cand, int layer, double secs, double mad,
                   const std::string &method) {
    Record rec;
    rec.kind = RecordKind::speed;
    rec.kernel = cand.dense ? "dense d=" + std::to_string(d) + " " + lsh::to_string(kv)
                            : KernelKey(cand, d, kv);
    rec.t = cand.dense ? 0 : cand.t;
    rec.layer = layer;
    rec.dense = cand.dense;
    rec.schedule = def.schedule.str();
    rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
    rec.fingerprint = fp;
    rec.time = Timing{secs, mad, int(rounds), method};
    rec.pig_version = PIG_VERSION;
    rec.timestamp = ts;
    append_record(records, rec);
  };
  for (size_t ci = 0; ci <= cands.size(); ++ci) {
    if (Stopped(common))
      break;
    // Dense first: every layer's dense time, the choice against which LSH is weighed.
    const Candidate cand = ci == 0 ? Candidate{{0, 0, 0}, true} : cands[ci - 1];
    AttentionSpec spec = def;
    if (cand.dense)
      spec.method = pig::spec::Method::dense;
    else
      spec.layers.assign(nl, LayerLsh{{cand.K, cand.L, cand.t}});
    TiledDecoder X(model, pool, spec, tiled, ctx, steps);
    X.Step(next()); // index build: not timed
    std::vector<std::vector<double>> ratio(nl), dl(nl);
    for (size_t r = 0; r < rounds && !Stopped(common); ++r) {
      const bool x_first = r % 2 == 0;
      double ds = 0;
      if (!x_first)
        ds = D.Step(next());
      X.Step(next());
      const std::vector<double> xl = X.attention().layer_seconds;
      if (x_first)
        ds = D.Step(next());
      const std::vector<double> &dls = D.attention().layer_seconds;
      double dsum = 0;
      for (size_t l = 0; l < nl; ++l) {
        ratio[l].push_back(xl[l] / dls[l]);
        dl[l].push_back(dls[l]);
        def_layers[l].push_back(dls[l]);
        dsum += dls[l];
      }
      def_rest.push_back(ds - dsum);
    }
    if (Stopped(common))
      break;
    for (size_t l = 0; l < nl; ++l) {
      const double med = Median(ratio[l]) * Median(dl[l]);
      std::vector<double> scaled;
      for (size_t r = 0; r < ratio[l].size(); ++r)
        scaled.push_back(ratio[l][r] * Median(dl[l]));
      write(cand, int(l), med, MedianAbsDeviation(scaled),
            "per-layer attention time, alternated with the default, " + std::to_string(rounds) +
                " rounds");
    }
    progress.Update(double(ci + 1), CandStr(cand));
  }
  progress.Done();
  // The default's time outside attention, over every round.
  if (!def_rest.empty()) {
    Record rec;
    rec.kind = RecordKind::speed;
    rec.kernel = "non-attention";
    rec.t = 0;
    rec.layer = -1;
    rec.schedule = def.schedule.str();
    rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
    rec.fingerprint = fp;
    rec.time = Timing{Median(def_rest), MedianAbsDeviation(def_rest), int(def_rest.size()),
                      "the default's step time minus its attention time"};
    rec.pig_version = PIG_VERSION;
    rec.timestamp = ts;
    append_record(records, rec);
    double att = 0;
    for (size_t l = 0; l < nl; ++l)
      att += Median(def_layers[l]);
    std::printf("| %zu | per-layer times of %zu candidates and dense | default: attention %.2f ms "
                "+ the rest %.2f ms per step |\n",
                ctx, cands.size(), 1e3 * att, 1e3 * Median(def_rest));
  }
  if (Stopped(common)) {
    std::fprintf(stderr, "pig-tune speed: interrupted; every record written so far is kept\n");
    return 130;
  }
  return 0;
}

// speed --per-layer --point FILE: the point decodes alternated with the default, each of its
// layers timed as a ratio to the default's same layer (as --per-layer times candidates), and
// compared with the time the latest --per-layer run of this machine gives the layer's choice
// when every layer has it. Where the two differ, the sum-of-layers model is wrong for mixed
// points. Prints only; records nothing (the records hold uniform runs).
int ComparePointLayers(const LlamaModel &model, ThreadPool &pool, const Fingerprint &fp,
                       const CommonOptions &common, const SpeedRunOptions &o,
                       const OperatingPoint &point, const std::string &label,
                       const std::vector<int32_t> &tokens, const KvCache &prefix, size_t ctx) {
  const LlamaConfig &c = model.config();
  const size_t nl = c.n_layers;
  bool foreign = false;
  const std::string &records = common.records;
  const auto times = LoadLayerTimes(load_records(records).records, fp, ctx, foreign);
  if (!times)
    throw std::runtime_error("no per-layer times of this machine at " + std::to_string(ctx) +
                             " tokens in " + records + " (run speed --per-layer first)");
  const lsh::DType kv = lsh::DType::bf16;
  KvCache tiled(c.Shape(ctx), kv);
  tiled.Tile(prefix, o.prefill, ctx);
  AttentionSpec def;
  def.method = pig::spec::Method::magicpig;
  def.kv_dtype = kv;
  const size_t rounds = size_t(std::max(o.harness.min_rounds, 3));
  const size_t steps = 2 * rounds + 8;
  TiledDecoder D(model, pool, def, tiled, ctx, steps);
  TiledDecoder X(model, pool, app::ApplyTuning(def, point), tiled, ctx, steps);
  size_t tok = 0;
  auto next = [&] { return tokens[o.prefill + tok++ % 64]; };
  D.Step(next());
  X.Step(next());
  std::vector<std::vector<double>> ratio(nl), dl(nl);
  std::vector<double> xs, ds;
  for (size_t r = 0; r < rounds && !Stopped(common); ++r) {
    double d = 0, x = 0;
    if (r % 2)
      d = D.Step(next());
    x = X.Step(next());
    const std::vector<double> xl = X.attention().layer_seconds;
    if (r % 2 == 0)
      d = D.Step(next());
    xs.push_back(x);
    ds.push_back(d);
    for (size_t l = 0; l < nl; ++l) {
      ratio[l].push_back(xl[l] / D.attention().layer_seconds[l]);
      dl[l].push_back(D.attention().layer_seconds[l]);
    }
  }
  if (Stopped(common))
    return 130;
  // Both sides as ratios to the default's same layer in their own run: the machine's state
  // (which moves by 10-20 % between runs) cancels.
  const auto uniform_time = [&](size_t l, const Candidate &ch) {
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
    const Candidate &ch = point.layers[l].c;
    const bool dl_dense = std::count(defaults.begin(), defaults.end(), l) > 0;
    const double u = uniform_time(l, ch);
    const double d = uniform_time(l, dl_dense ? Candidate{{0, 0, 0}, true} : DefaultCandidate());
    const double rp = Median(ratio[l]);
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
              1e3 * sum_u, 1e3 * sum_p, 1e3 * sum_def, Median(speedup), xs.size());
  return 0;
}

// --point FILE: a point made for this model, head dim and KV type (else a usage error naming
// --point); the loader's warnings printed.
OperatingPoint LoadPoint(const std::string &file, const std::string &model_path,
                         const LlamaConfig &c, lsh::DType kv) {
  app::TuningTarget target;
  target.n_layers = c.n_layers;
  target.head_dim = c.head_dim;
  target.kv = kv;
  target.model_path = model_path;
  target.flag = "--point";
  try {
    app::Tuning t = app::LoadTuning(file, std::nullopt, target);
    for (const std::string &w : t.warnings)
      std::fprintf(stderr, "pig-tune: warning: %s\n", w.c_str());
    return t.point;
  } catch (const app::TuningMismatch &e) { // "--point FILE: why"
    const std::string what = e.what(), prefix = "--point " + file + ": ";
    throw UsageError("--point " + file,
                     what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
  }
}

} // namespace

int RunSpeed(const CommonOptions &common, SpeedRunOptions o) {
  const std::string &model_path = common.model, &records = common.records;
  auto model = LlamaModel::Load(model_path);
  const LlamaConfig &c = model->config();
  const size_t d = c.head_dim;
  ThreadPool pool(common.threads);
  const Fingerprint fp = DetectFingerprint(BestKernels().target, int(pool.size()));
  const lsh::DType kv = lsh::DType::bf16;

  // Quality of what is measured, when the records know it (the table of the only data hash).
  std::optional<QualityTable> table;
  {
    const auto loaded = LoadRecords(records);
    try {
      table = build_quality_table(loaded.records, c.n_layers);
    } catch (const RecordError &e) {
      std::fprintf(stderr, "pig-tune speed: no quality for the candidates (%s)\n", e.what());
    }
  }
  std::vector<SpeedCandidate> cands;
  AttentionSpec base;
  base.method = pig::spec::Method::magicpig;
  base.kv_dtype = kv;
  {
    SpeedCandidate def{"default " + CandStr({base.K, base.L, base.t}), base, std::nullopt,
                       KernelKey({base.K, base.L, base.t}, d, kv), base.t};
    if (table)
      def.point = uniform_point(*table, {base.K, base.L, base.t}, DefaultDense(c.n_layers));
    cands.push_back(def);
  }
  for (const spec::LshParams &p : o.lsh) {
    Candidate cand;
    cand.K = p.K;
    cand.L = p.L;
    cand.t = p.t;
    AttentionSpec spec = base;
    spec.K = cand.K;
    spec.L = cand.L;
    spec.t = cand.t;
    spec.Validate(c.n_layers);
    SpeedCandidate sc{"uniform " + CandStr(cand), spec, std::nullopt, KernelKey(cand, d, kv),
                      cand.t};
    if (table)
      sc.point = uniform_point(*table, cand, DefaultDense(c.n_layers));
    cands.push_back(sc);
  }
  auto add_point = [&](const OperatingPoint &p, const std::string &label) {
    SpeedCandidate sc{label, app::ApplyTuning(base, p), p, "point " + p.layers_str(), 0};
    sc.spec.Validate(c.n_layers);
    cands.push_back(sc);
  };
  for (const std::string &f : o.points)
    add_point(LoadPoint(f, model_path, c, kv), "point " + f);
  for (double e : o.max_errors) {
    if (!table)
      throw std::runtime_error("--max-errors needs quality records in " + records);
    require_every_layer(*table);
    const auto p = select_per_layer_max_error(*table, e);
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
          throw UsageError("--schedules", err);
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
  std::vector<Candidate> timed;
  if (o.per_layer) {
    if (!table)
      throw std::runtime_error("--per-layer needs quality records in " + records +
                               " (pig-tune accuracy)");
    for (const LayerTable &lt : table->layers) {
      std::vector<Measured> ms;
      for (size_t i = 0; i < lt.candidates.size(); ++i)
        ms.push_back({lt.candidates[i], lt.cost2[i], lt.error[i]});
      for (size_t i : pareto_frontier(ms))
        if (std::find(timed.begin(), timed.end(), ms[i].c) == timed.end())
          timed.push_back(ms[i].c);
    }
    std::stable_sort(timed.begin(), timed.end(), [](const auto &a, const auto &b) {
      return a.projections() < b.projections();
    });
    if (o.max_per_layer && timed.size() > o.max_per_layer)
      timed.resize(o.max_per_layer);
    // The default is always timed: predicted speed-ups are relative to it.
    if (std::find(timed.begin(), timed.end(), Candidate{base.K, base.L, base.t}) == timed.end())
      timed.push_back({base.K, base.L, base.t});
  }

  std::vector<int32_t> tokens =
      model->tokenizer().Encode(pig::app::NormalizeText(pig::app::ReadTextFile(o.text)));
  if (tokens.empty())
    throw std::runtime_error("--text " + o.text + " has no tokens");
  while (tokens.size() < o.prefill + 64)
    tokens.insert(tokens.end(), tokens.begin(), tokens.end());
  AttentionSpec dense;
  dense.kv_dtype = kv;
  LlamaSession pre(*model, pool, o.prefill, MakeAttention(dense, c.Shape(o.prefill)));
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
        if (int rc =
                ComparePointLayers(*model, pool, fp, common, o, LoadPoint(f, model_path, c, kv), f,
                                   tokens, pre.attention().cache(), ctx))
          return rc;
    return 0;
  }
  if (o.per_layer) {
    std::printf("| context | measured | default |\n|---|---|---|\n");
    for (size_t ctx : o.contexts)
      if (int rc = PerLayerSpeed(*model, pool, fp, common, o, timed, tokens,
                                 pre.attention().cache(), ctx))
        return rc;
    return 0;
  }
  std::printf("| context | candidate | step ms (median, MAD) | tok/s | vs default | error | cost2 "
              "| rounds |\n|---|---|---|---|---|---|---|---|\n");
  const std::string ts = Timestamp();
  o.harness.stop = [&common] { return Stopped(common); };
  const size_t steps =
      size_t(o.harness.warmup_rounds + o.harness.max_rounds + o.harness.drift_samples + 4);
  for (size_t ctx : o.contexts) {
    KvCache tiled(c.Shape(ctx), kv);
    tiled.Tile(pre.attention().cache(), o.prefill, ctx);
    std::vector<std::unique_ptr<TiledDecoder>> dec;
    for (const auto &sc : cands)
      dec.push_back(std::make_unique<TiledDecoder>(*model, pool, sc.spec, tiled, ctx, steps));
    std::vector<size_t> next(cands.size(), 0);
    Progress progress("pig-tune speed " + std::to_string(ctx), double(o.harness.max_rounds));
    o.harness.progress = [&](int round, int max_rounds, size_t live) {
      progress.Update(double(round), std::to_string(live) + " live of " +
                                         std::to_string(max_rounds) + " rounds max");
    };
    const SpeedResult r = MeasureInterleaved(
        cands.size(), 0,
        [&](size_t i) {
          const int32_t tok = tokens[o.prefill + next[i]++ % 64];
          return dec[i]->Step(tok);
        },
        o.harness);
    progress.Done();
    for (size_t i = 0; i < cands.size(); ++i) {
      const CandidateSpeed &cs = r.candidates[i];
      const AttentionStats st = dec[i]->attention().stats();
      std::printf("| %zu | %s | %.2f (%.2f) | %.1f | %.2fx | %s | %.2f %% | %d%s |\n", ctx,
                  cands[i].label.c_str(), 1e3 * cs.median_s, 1e3 * cs.mad_s, 1.0 / cs.median_s,
                  i == 0 ? 1.0 : cs.ratio,
                  cands[i].point ? Fmt("%.4f", cands[i].point->error).c_str() : "?",
                  100 * st.cost2(), cs.rounds, cs.dropped ? ", dropped" : "");
      if (cs.rounds == 0)
        continue;
      Record rec;
      rec.kind = RecordKind::speed;
      rec.kernel = cands[i].kernel;
      rec.t = cands[i].t;
      rec.layer = -1;
      rec.schedule = cands[i].spec.schedule.str();
      rec.workload = {ctx, int(c.n_heads / c.n_kv_heads), int(pool.size())};
      rec.fingerprint = fp;
      if (cands[i].point) {
        Quality q;
        q.value = cands[i].point->error;
        q.cost2 = cands[i].point->cost2;
        q.data_hash = cands[i].point->data_hash;
        rec.quality = q;
      }
      rec.time = ToTiming(r, i);
      rec.status = cs.dropped ? "failed: dropped (slower than 1.25x the best)" : "ok";
      rec.pig_version = PIG_VERSION;
      rec.timestamp = ts;
      append_record(records, rec);
    }
    if (r.drifted)
      std::printf("\nwarning: the default's step time moved %.0f %% between the start and the end "
                  "of the %zu-token run: the machine was not steady; rerun before trusting the "
                  "ratios\n",
                  100 * (r.default_end_median_s / r.default_start_median_s - 1), ctx);
    std::fflush(stdout);
    if (r.stopped || Stopped(common)) {
      std::fprintf(stderr, "pig-tune speed: interrupted; every record written so far is kept\n");
      return 130;
    }
  }
  return 0;
}

} // namespace pig::tune
