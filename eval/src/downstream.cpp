// downstream's runs and report: each method decodes from one dense prefill (perplexity of the text;
// greedy answers to the needle and aggregation tasks), rows to perplexity.csv and tasks.csv, the
// tables to downstream.md, score-vs-cost2 plots (gnuplot).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pig/app/generation.h"
#include "pig/spec/files.h"
#include "reports.h"

namespace pig::eval {

using namespace pig::runtime;

namespace {

std::string KLName(KL kl) { return std::to_string(kl.K) + "," + std::to_string(kl.L); }

// The config column of "tuned": how the point was chosen ("max-error 0.1"), else "point".
std::string TunedConfig(const pig::app::Tuning &t) {
  return t.point.criterion.empty() ? std::string("point") : t.point.criterion;
}

// The label of magicpig hashing in a fitted space: "magicpig+whiten:a=0.25".
std::string TransformLabel(const pig::ref::TransformSpec &t) { return "magicpig+" + t.str(); }

// dense first, then each magicpig configuration followed by topk, quest and lsh-hybrid (its
// default configuration, docs/HYBRID.md) at its cost2: the
// budget of a baseline is only known once its magicpig run has measured cost2. With
// --lsh-transform, "magicpig+SPEC" right after each magicpig configuration (same K, L; the
// baselines stay matched to plain magicpig). With --tuning, "tuned" last (config: the point's
// criterion).
std::vector<Method> Methods(const EvalOptions &e, const DownstreamOptions &o,
                            const pig::app::Tuning *tuning) {
  std::vector<Method> m;
  AttentionSpec base;
  base.kv_dtype = e.kv;
  base.sample_seed = e.seed;
  base.mean_window = e.mean_window;
  if (o.lsh_seed)
    base.seed = *o.lsh_seed;
  m.push_back({"dense", "", base});
  if (o.dense_only)
    return m;
  for (size_t c = 0; c < o.lsh.size(); ++c) {
    AttentionSpec s = base;
    s.method = pig::spec::Method::magicpig;
    s.K = o.lsh[c].K;
    s.L = o.lsh[c].L;
    const std::string config = "K=" + std::to_string(s.K) + " L=" + std::to_string(s.L);
    m.push_back({"magicpig", config, s});
    if (o.lsh_transform) {
      AttentionSpec x = s;
      x.transform = *o.lsh_transform;
      m.push_back({TransformLabel(*o.lsh_transform), config, x});
    }
    for (const pig::spec::Method b : {pig::spec::Method::topk, pig::spec::Method::quest}) {
      AttentionSpec t = base;
      t.method = b;
      m.push_back({pig::spec::name(b), "= magicpig " + KLName(o.lsh[c]), t, int(c)});
    }
    // lsh-hybrid (on the default (K, L)'s codes, as before); a configuration other than the
    // default is named.
    for (const pig::ref::HybridConfig &h : o.hybrid) {
      AttentionSpec t = base;
      t.method = pig::spec::Method::lsh_hybrid;
      t.hybrid = h;
      const std::string spec = h.spec();
      m.push_back({spec == pig::ref::HybridConfig{}.spec() ? "lsh-hybrid" : "lsh-hybrid " + spec,
                   "= magicpig " + KLName(o.lsh[c]), t, int(c)});
    }
  }
  if (tuning)
    m.push_back({"tuned", TunedConfig(*tuning), pig::app::ApplyTuning(base, tuning->point)});
  return m;
}

// Decodes from a dense prefix of `n` positions with one method: `step(session, logits)` is
// called before each decode step with the logits of the previous position and returns the next
// token to feed, or -1 to stop.
template <class Step>
MethodRun DecodeWith(const LlamaModel &model, ThreadPool &pool, const KvCache &prefix, size_t n,
                     size_t capacity, const AttentionSpec &spec, const std::vector<float> &logits0,
                     Step step) {
  const auto t0 = Clock::now();
  std::unique_ptr<Attention> attn = MakeAttention(spec, model.config().Shape(capacity));
  attn->LoadPrefix(prefix, n);
  LlamaSession s(model, pool, capacity, std::move(attn));
  s.SetPosition(n);
  std::vector<float> logits = logits0;
  MethodRun r;
  for (;;) {
    const int32_t next = step(logits);
    if (next < 0)
      break;
    s.Forward(&next, 1, logits.data());
    ++r.steps;
  }
  const AttentionStats st = s.attention().stats();
  r.cost1 = st.cost1();
  r.cost2 = st.cost2();
  r.kernels = st.kernels;
  r.seconds = Since(t0);
  return r;
}

double LogSoftmaxAt(const std::vector<float> &logits, int32_t token) {
  double mx = -INFINITY;
  for (float x : logits)
    mx = std::max(mx, double(x));
  double sum = 0;
  for (float x : logits)
    sum += std::exp(double(x) - mx);
  return double(logits[size_t(token)]) - mx - std::log(sum);
}

} // namespace

Downstream::Downstream(const EvalOptions &e, const DownstreamOptions &o, bool shared_prefill,
                       const LlamaModel &model, ThreadPool &pool, const pig::app::Tuning *tuning)
    : e_(e), o_(o), shared_prefill_(shared_prefill), model_(model), pool_(pool),
      methods_(Methods(e, o, tuning)),
      ppl_csv_(e.out + "/perplexity.csv",
               {"context", "method", "config", "budget", "tokens", "nll", "ppl",
                "delta_nll_vs_dense", "se_delta_nll", "cost1", "cost2", "seconds"}),
      task_csv_(e.out + "/tasks.csv",
                {"task", "context", "instance", "prompt_tokens", "method", "config", "budget",
                 "cost1", "cost2", "score", "answer", "expected", "seconds"}) {}

void Downstream::Perplexity(const KvCache &prefix, size_t n, const std::vector<int32_t> &tokens,
                            const std::vector<float> &logits0) {
  // Held in members: GCC 12 reports a false -Wfree-nonheap-object on local vectors here.
  dense_nll_.clear();
  cost2_.assign(o_.lsh.size(), 0.0);
  for (const Method &m : methods_) {
    AttentionSpec spec = m.spec;
    if (m.matched_to >= 0)
      spec.budget = std::clamp(cost2_[size_t(m.matched_to)], 1e-3, 1.0);
    std::vector<double> nll;
    const MethodRun r = ScoreTokens(prefix, n, tokens, logits0, spec, nll);
    ShowKernels(m, r);
    if (m.label == "magicpig")
      for (size_t c = 0; c < o_.lsh.size(); ++c)
        if (m.config == "K=" + std::to_string(o_.lsh[c].K) + " L=" + std::to_string(o_.lsh[c].L))
          cost2_[c] = r.cost2;
    if (m.label == "dense")
      dense_nll_ = nll;
    Stat mean, delta;
    for (size_t i = 0; i < nll.size(); ++i) {
      mean.add(nll[i]);
      delta.add(nll[i] - dense_nll_[i]);
    }
    const std::string budget = m.matched_to >= 0 ? Fmt("%.5f", spec.budget) : "";
    ppl_csv_.row({std::to_string(n), m.label, m.config, budget, std::to_string(nll.size()),
                  Fmt("%.5f", mean.mean), Fmt("%.4f", std::exp(mean.mean)), Fmt("%.5f", delta.mean),
                  Fmt("%.5f", delta.se()), Fmt("%.5f", r.cost1), Fmt("%.5f", r.cost2),
                  Fmt("%.2f", r.seconds)});
    PplCell &c = ppl_[{"ppl", n, m.label, m.config}];
    c.nll = mean.mean;
    c.delta = delta.mean;
    c.se = delta.se();
    c.cost1 = r.cost1;
    c.cost2 = r.cost2;
    c.order = ppl_.size();
    std::fprintf(stderr, "pig-eval: ppl n=%zu %-8s %-18s ppl %.3f (dnll %+.4f) cost2 %.4f %.1fs\n",
                 n, m.label.c_str(), m.config.c_str(), std::exp(mean.mean), delta.mean, r.cost2,
                 r.seconds);
  }
}

void Downstream::Tasks() {
  const Tokenizer &tok = model_.tokenizer();
  for (size_t ctx : o_.task_contexts)
    for (const std::string &task : o_.tasks)
      for (size_t inst = 0; inst < o_.instances; ++inst) {
        const std::uint64_t seed = e_.seed * 1000003 + inst * 7919 + ctx;
        auto make = [&](size_t size) {
          if (task == "needle")
            return MakeNeedle(size, double(inst + 1) / double(o_.instances + 1), seed);
          if (task == "multikey")
            return MakeMultiKeyNeedle(size, 4, seed);
          if (task == "vt")
            return MakeVariableTracking(size, 4, seed);
          if (task == "count")
            return MakeCounting(size, 2, 9, seed);
          if (task == "cwe")
            return MakeCommonWords(size, 3, CweCommonFreq(size), CweRareFreq(size), seed);
          return MakeFrequentWords(size, 2.0, seed);
        };
        auto encode = [&](const TaskInstance &t) {
          return tok.Encode(tok.ApplyChatTemplate(t.prompt) + t.answer_prefix);
        };
        // Size the instance to the context: tokens grow linearly with the size parameter
        // (fixed instructions + a per-item cost), so two probes fit the line; then shrink
        // until the prompt fits.
        const size_t s1 = 64, t1 = encode(make(s1)).size();
        const size_t s2 = 256, t2 = encode(make(s2)).size();
        const double per_item = double(t2 - t1) / double(s2 - s1);
        size_t size =
            std::max<size_t>(16, size_t(double(s1) + (double(ctx) - double(t1)) / per_item));
        TaskInstance t = make(size);
        std::vector<int32_t> ids = encode(t);
        while (ids.size() > ctx && size > 16) {
          size = size * 98 / 100;
          t = make(size);
          ids = encode(t);
        }
        RunTask(t, ids, ctx, inst);
      }
}

void Downstream::Finish(double seconds, double prefill_seconds) {
  Plot();
  Markdown(seconds, prefill_seconds);
}

MethodRun Downstream::ScoreTokens(const KvCache &prefix, size_t n,
                                  const std::vector<int32_t> &tokens,
                                  const std::vector<float> &logits0, const AttentionSpec &spec,
                                  std::vector<double> &nll) const {
  const size_t M = o_.ppl_tokens;
  size_t j = 0;
  return DecodeWith(model_, pool_, prefix, n, n + M + 1, spec, logits0,
                    [&](const std::vector<float> &logits) -> int32_t {
                      if (j > 0)
                        nll.push_back(-LogSoftmaxAt(logits, tokens[n + j]));
                      if (j == M)
                        return -1;
                      return tokens[n + j++];
                    });
}

size_t Downstream::CweCommonFreq(size_t size) const {
  return std::max<size_t>(4, size_t(o_.cwe_share * double(size) / 3.0));
}

size_t Downstream::CweRareFreq(size_t size) const {
  const size_t rest = size > 3 * CweCommonFreq(size) ? size - 3 * CweCommonFreq(size) : 0;
  return std::min(CweCommonFreq(size) - 1, std::max<size_t>(2, (rest + 149) / 150));
}

void Downstream::RunTask(const TaskInstance &t, const std::vector<int32_t> &ids, size_t ctx,
                         size_t inst) {
  const Tokenizer &tok = model_.tokenizer();
  // The answer's length: a number; three words; five variable names of up to ~4 tokens each.
  const size_t max_new = t.name == "count"                            ? 8
                         : t.name == "needle" || t.name == "multikey" ? 12
                         : t.name == "vt"                             ? 32
                                                                      : 24;
  const size_t capacity = ids.size() + max_new + 1;
  const auto t0 = Clock::now();
  LlamaSession base(model_, pool_, capacity,
                    std::make_unique<DenseAttention>(model_.config().Shape(capacity), e_.kv));
  std::vector<float> logits0(model_.config().vocab);
  base.Forward(ids.data(), ids.size(), logits0.data());
  const double prefill_s = Since(t0);
  std::vector<double> cost2(o_.lsh.size(), 0);
  for (const Method &m : methods_) {
    AttentionSpec spec = m.spec;
    if (m.matched_to >= 0)
      spec.budget = std::clamp(cost2[size_t(m.matched_to)], 1e-3, 1.0);
    // Greedy. Every token of the answer is fed, the last one too: that pass's cost is in the
    // tasks' cost1 and cost2 (and in the budget a matched method gets) as it always was.
    pig::app::Generation gen(tok, {{}, max_new, {}, false});
    std::string answer;
    const MethodRun r =
        DecodeWith(model_, pool_, base.attention().cache(), ids.size(), capacity, spec, logits0,
                   [&](const std::vector<float> &logits) -> int32_t {
                     if (gen.done())
                       return -1;
                     const auto t = gen.Next(logits.data(), logits.size());
                     answer += t.text;
                     return gen.stop() == pig::app::StopReason::kEndOfGeneration ? -1 : t.id;
                   });
    answer += gen.Finish();
    ShowKernels(m, r);
    for (size_t c = 0; c < o_.lsh.size(); ++c)
      if (m.label == "magicpig" &&
          m.config == "K=" + std::to_string(o_.lsh[c].K) + " L=" + std::to_string(o_.lsh[c].L))
        cost2[c] = r.cost2;
    const double score = t.name == "count" ? ScoreFirstNumber(answer, t.expected[0])
                                           : ScoreAnswer(answer, t.expected);
    task_csv_.row({t.name, std::to_string(ctx), std::to_string(inst), std::to_string(ids.size()),
                   m.label, m.config, m.matched_to >= 0 ? Fmt("%.5f", spec.budget) : "",
                   Fmt("%.5f", r.cost1), Fmt("%.5f", r.cost2), Fmt("%.3f", score), answer,
                   Join(t.expected, " "), Fmt("%.2f", r.seconds)});
    auto [it, fresh] = cells_.try_emplace(DownKey{t.name, ctx, m.label, m.config});
    if (fresh)
      it->second.order = cells_.size();
    it->second.score.add(score);
    it->second.cost1.add(r.cost1);
    it->second.cost2.add(r.cost2);
    std::fprintf(stderr,
                 "pig-eval: %s ctx %zu (%zu tokens, prefill %.1fs) #%zu %-8s %-18s "
                 "score %.2f cost2 %.4f: %s\n",
                 t.name.c_str(), ctx, ids.size(), prefill_s, inst, m.label.c_str(),
                 m.config.c_str(), score, r.cost2, answer.c_str());
  }
}

void Downstream::Plot() const {
  const std::string dir = e_.out + "/plotdata";
  spec::MakeDirs(dir);
  struct Panel {
    std::string title, key;
    size_t ctx;
  };
  std::vector<Panel> panels;
  for (size_t ctx : o_.ppl_contexts)
    if (HasPpl(ctx))
      panels.push_back({"perplexity, context " + std::to_string(ctx), "ppl", ctx});
  for (const std::string &t : o_.tasks)
    for (size_t ctx : o_.task_contexts)
      panels.push_back({t + ", prompt <= " + std::to_string(ctx) + " tokens", t, ctx});
  if (panels.empty())
    return;
  const size_t cols = std::min<size_t>(3, panels.size());
  const size_t rows = (panels.size() + cols - 1) / cols;
  std::string gp =
      "set terminal pngcairo size " + std::to_string(480 * cols) + "," +
      std::to_string(380 * rows + 40) + " font ',10'\nset output '" + e_.out +
      "/downstream.png'\nset multiplot layout " + std::to_string(rows) + "," +
      std::to_string(cols) +
      " title 'SmolLM2-135M: dense vs MagicPIG vs TopK / Quest / LSH-hybrid at MagicPIG cost2'\n"
      "set grid\nset key bottom right\nset xlabel 'cost2: sampled fraction of "
      "indexed tokens (%)'\nset xrange [0:*]\n";
  int p = 0;
  for (const Panel &pan : panels) {
    std::vector<std::string> plots;
    double dense = NAN;
    std::vector<std::string> series{"magicpig", "topk", "quest", "lsh-hybrid"};
    if (o_.lsh_transform)
      series.push_back(TransformLabel(*o_.lsh_transform));
    for (const Method &m : methods_)
      if ((m.label == "tuned" || m.label.rfind("lsh-hybrid ", 0) == 0) &&
          std::find(series.begin(), series.end(), m.label) == series.end())
        series.push_back(m.label);
    for (const std::string &m : series) {
      std::vector<std::pair<double, double>> pts;
      if (pan.key == "ppl") {
        for (const auto &[k, c] : ppl_)
          if (k.context == pan.ctx && k.method == m)
            pts.push_back({100 * c.cost2, std::exp(c.nll)});
      } else {
        for (const auto &[k, c] : cells_)
          if (k.task == pan.key && k.context == pan.ctx && k.method == m)
            pts.push_back({100 * c.cost2.mean, c.score.mean});
      }
      std::sort(pts.begin(), pts.end());
      std::string data;
      for (auto [x, y] : pts)
        data += Fmt("%.6f", x) + " " + Fmt("%.6f", y) + "\n";
      std::string file_m = m; // "magicpig+whiten:a=0.25": a plain file name
      std::replace_if(
          file_m.begin(), file_m.end(), [](char ch) { return !std::isalnum((unsigned char)ch); },
          '_');
      const std::string f = dir + "/down_" + std::to_string(p) + "_" + file_m + ".dat";
      spec::WriteFileAtomically(f, data);
      plots.push_back("'" + f + "' using 1:2 with linespoints lw 2 pt 7 title '" + m + "'");
    }
    if (pan.key == "ppl") {
      auto it = ppl_.find({"ppl", pan.ctx, "dense", ""});
      if (it != ppl_.end())
        dense = std::exp(it->second.nll);
    } else {
      auto it = cells_.find({pan.key, pan.ctx, "dense", ""});
      if (it != cells_.end())
        dense = it->second.score.mean;
    }
    if (!std::isnan(dense))
      plots.push_back(Fmt("%.6f", dense) + " with lines lw 2 dt 2 lc rgb 'black' title 'dense'");
    gp += "set title '" + pan.title + "'\nset ylabel '" +
          (pan.key == "ppl" ? std::string("perplexity") : std::string("score")) + "'\n" +
          (pan.key == "ppl" ? "set yrange [*:*]\n" : "set yrange [0:1.05]\n") + "plot " +
          Join(plots, ", ") + "\n";
    ++p;
  }
  gp += "unset multiplot\n";
  const std::string script = e_.out + "/downstream.gp";
  spec::WriteFileAtomically(script, gp);
  RunGnuplot(script);
}

bool Downstream::HasPpl(size_t ctx) const {
  for (const auto &[k, c] : ppl_)
    if (k.context == ctx)
      return true;
  return false;
}

void Downstream::Markdown(double seconds, double prefill_seconds) const {
  std::string md = "Command: `" + e_.command_line +
                   "` (perplexity and tasks: " + Fmt("%.0f", seconds) + " s wall";
  if (prefill_seconds > 0)
    md += ", plus " + Fmt("%.0f", prefill_seconds) + " s for the dense prefill of the long text" +
          (shared_prefill_ ? ", shared with attention-error" : "");
  md += ").\n\n";
  std::vector<size_t> ppl_ctx;
  for (size_t c : o_.ppl_contexts)
    if (HasPpl(c))
      ppl_ctx.push_back(c);
  if (!ppl_ctx.empty()) {
    md += "**Perplexity** of " + std::to_string(o_.ppl_tokens) +
          " tokens teacher-forced after a dense prefill of n tokens of the text; Δ = mean "
          "per-token NLL difference to dense (± its standard error, paired by token); cost1 = "
          "index traffic / K+V bytes of the indexed tokens, cost2 = sampled fraction.\n\n";
    std::string head = "| method | config |", sep = "|---|---|";
    for (size_t c : ppl_ctx) {
      head += " n = " + std::to_string(c) + ": ppl (Δ vs dense) | cost1 / cost2 |";
      sep += "---|---|";
    }
    md += head + "\n" + sep + "\n";
    for (const Method &m : methods_) {
      std::string row = "| " + m.label + " | " + m.config + " |";
      for (size_t c : ppl_ctx) {
        auto it = ppl_.find({"ppl", c, m.label, m.config});
        auto d = ppl_.find({"ppl", c, "dense", ""});
        if (it == ppl_.end() || d == ppl_.end()) {
          row += " | |";
          continue;
        }
        const double rel = std::exp(it->second.nll) / std::exp(d->second.nll) - 1;
        // append, not `" " + string`: GCC 12 reports a false -Wrestrict on that once inlined
        row.append(" ").append(Fmt("%.3f", std::exp(it->second.nll)));
        if (m.label != "dense")
          row += " (" + Fmt("%+.2f", 100 * rel) + " %, Δnll " + Fmt("%+.4f", it->second.delta) +
                 " ± " + Fmt("%.4f", it->second.se) + ")";
        row += m.label == "dense" ? " | — |"
                                  : " | " + Fmt("%.3f", it->second.cost1) + " / " +
                                        Fmt("%.2f", 100 * it->second.cost2) + " % |";
      }
      md += row + "\n";
    }
    md += "\n";
  }
  if (!cells_.empty()) {
    md += "**Tasks**: mean score over " + std::to_string(o_.instances) +
          " seeded instances per task and context (needle: the number is in the answer; "
          "multikey: the asked key's number, of 4 keys, is in it; count: the answer's first number "
          "is how "
          "often a sentence was repeated, 2 to 9 times (chance 0.125); vt: fraction of the 5 "
          "variables "
          "of a 4-hop chain named, beside a distractor chain; cwe: fraction of the 3 common "
          "words named; fwe: fraction of the 3 most frequent coded words named), greedy decoding "
          "after a dense prefill of the chat-formatted prompt; "
          "cost1 / cost2 as above, averaged over instances.\n\n";
    std::string head = "| method | config |", sep = "|---|---|";
    std::vector<std::pair<std::string, size_t>> cols;
    for (const std::string &t : o_.tasks)
      for (size_t c : o_.task_contexts) {
        cols.push_back({t, c});
        head += " " + t + " ≤ " + std::to_string(c) + " |";
        sep += "---|";
      }
    head += " cost1 / cost2 |";
    sep += "---|";
    md += head + "\n" + sep + "\n";
    for (const Method &m : methods_) {
      std::string row = "| " + m.label + " | " + m.config + " |";
      Stat c1, c2;
      for (const auto &[t, c] : cols) {
        auto it = cells_.find({t, c, m.label, m.config});
        if (it == cells_.end()) {
          row += " |";
          continue;
        }
        // Appended, not " " + Fmt(..) + ..: GCC 12 at -O3 reports a false -Wrestrict there.
        row.append(" ").append(Fmt("%.2f", it->second.score.mean)).append(" |");
        c1.add(it->second.cost1.mean);
        c2.add(it->second.cost2.mean);
      }
      row += m.label == "dense"
                 ? " — |"
                 : " " + Fmt("%.3f", c1.mean) + " / " + Fmt("%.2f", 100 * c2.mean) + " % |";
      md += row + "\n";
    }
    md += "\nPer-instance answers: `tasks.csv` beside the plots.\n";
  }
  spec::WriteFileAtomically(e_.out + "/downstream.md", md);
  if (!e_.update_doc.empty())
    UpdateMarkedSection(e_.update_doc, "downstream", md);
  std::printf("\n%s", md.c_str());
}

void Downstream::ShowKernels(const Method &m, const MethodRun &r) {
  if (!kernels_shown_.insert(m.label + " " + m.config).second)
    return;
  std::fprintf(stderr, "pig-eval: kernels of %s%s%s: %s\n", m.label.c_str(),
               m.config.empty() ? "" : " ", m.config.c_str(), r.kernels.c_str());
}

} // namespace pig::eval
