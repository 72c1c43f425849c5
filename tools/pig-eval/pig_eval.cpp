// pig-eval: accuracy of LSH sampling attention (MagicPIG) and its baselines on a real model.
//   pig-eval attention-error  relative L2 error vs exact attention on the model's real KV caches
//                             (captured at several context lengths), scalar reference (pig::ref)
//   pig-eval downstream       perplexity on real English text, needle retrieval and RULER-like
//                             aggregation tasks, decoding with each runtime Attention; with
//                             --tuning FILE also "tuned" (pig-tune's operating point, per layer);
//                             with --lsh-transform SPEC also "magicpig+SPEC" (each --lsh
//                             configuration hashing in a space fitted to the keys)
//   pig-eval all              both, sharing one prefill of the long text
// Writes CSV files, gnuplot PNGs and markdown tables to --out; --update-doc FILE rewrites the
// marked sections of docs/RESULTS.md with those tables. Numbers are measured, never stored.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "accuracy.h"
#include "kv_formats.h"
#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"
#include "pig/tune/tuning.h" // --tuning FILE
#include "report.h"
#include "tasks.h"
#include "transform_report.h"

namespace {

using namespace pig::runtime;
using pig::eval::Csv;
using pig::eval::Fmt;
using pig::eval::Stat;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// K 7-14 x L 75, 150, 300: costs from well below to well above plain (10,150)'s, for every
// transform measured (a transform moves the collision rate by a factor of up to ~10).
std::vector<pig::eval::KL> DefaultTransformGrid() {
  std::vector<pig::eval::KL> g;
  for (int K = 7; K <= 14; ++K)
    for (int L : {75, 150, 300})
      g.push_back({K, L});
  return g;
}

// The set of docs/RESULTS.md section 1b (`--transforms default` reproduces its tables).
const char *const kDefaultTransforms =
    "plain,pca:r=48,pca:r=32,whiten:a=0.1,whiten:a=0.15,whiten:a=0.25,whiten:a=0.35,"
    "whiten:a=0.5,mips:q=0.9";

struct Options {
  std::string command;
  bool quick = false;
  bool dense_only = false;
  double cwe_share = 0.5; // fraction of the CWE list taken by its 3 common words
  std::string out = "eval-out";
  std::string model = DefaultModelPath();
  std::string text = pig::eval::kDefaultTextPath;
  size_t threads = 1;
  std::uint64_t seed = 1;
  std::vector<size_t> error_contexts{2048, 4096, 8192};
  std::vector<size_t> layers{2, 5, 8, 12, 16, 20, 24, 28};
  std::vector<size_t> ppl_contexts{2048, 4096};
  size_t ppl_tokens = 48;
  std::vector<size_t> task_contexts{2048};
  size_t instances = 3;
  std::vector<std::string> tasks{"needle", "cwe", "fwe"};
  std::vector<pig::eval::KL> lsh{{10, 150}, {9, 120}, {8, 75}};
  std::string update_doc;
  lsh::DType kv = lsh::DType::bf16;
  // --lsh-seed S: downstream's SimHash matrices from seed S (another draw of every LSH method's
  // estimator, to size its sampling noise); default the runtime's.
  std::optional<std::uint64_t> lsh_seed;
  std::string command_line;
  std::string tuning;              // --tuning FILE: the downstream method "tuned"
  std::optional<double> max_error; // --max-error E: selects the point from a records file
  // --lsh-transform SPEC: downstream also decodes every --lsh configuration with that transform
  // (the method "magicpig+SPEC").
  std::optional<pig::ref::TransformSpec> lsh_transform;
  // --transforms: attention-error also compares hashing in fitted spaces at matched cost2.
  std::vector<pig::ref::TransformSpec> transforms;
  std::vector<pig::eval::KL> transform_grid = DefaultTransformGrid();
};

[[noreturn]] void Usage(const std::string &error) {
  if (!error.empty())
    std::fprintf(stderr, "pig-eval: %s\n", error.c_str());
  std::fprintf(
      error.empty() ? stdout : stderr,
      "usage: pig-eval (attention-error | downstream | all | kv-formats) [options]\n"
      "\n"
      "  attention-error   relative L2 error of TopK, oracle sampling, Quest and MagicPIG vs\n"
      "                    exact attention on the model's real KV caches (pig::ref)\n"
      "  downstream        perplexity, needle retrieval, common/frequent-words extraction with\n"
      "                    dense, magicpig (K,L) and topk/quest at magicpig's measured cost2\n"
      "  all               both (one prefill of the text serves both)\n"
      "  kv-formats        error of exact attention with 8-bit KV formats (q8: a scale per 32\n"
      "                    elements; a scale per row; per-channel keys) and bf16 against f32\n"
      "                    rows, at --error-contexts and --layers (docs/KV8.md)\n"
      "\n"
      "  --quick                 CI smoke sizes (contexts of a few hundred tokens)\n"
      "  --out DIR               CSV, PNG and markdown output (default eval-out)\n"
      "  --update-doc FILE       rewrite the pig-eval sections of FILE (docs/RESULTS.md)\n"
      "  --model FILE            GGUF model (default %s)\n"
      "  --text FILE             perplexity text, .gz allowed (default %s, Debian package %s)\n"
      "  --threads N             (default 1)\n"
      "  --seed S                task instances and sampling seeds (default 1)\n"
      "  --lsh-seed S            downstream: SimHash matrices from seed S (default the runtime's)\n"
      "  --error-contexts LIST   KV cache lengths of attention-error (default 2048,4096,8192)\n"
      "  --layers LIST           layers of attention-error (default 2,5,8,12,16,20,24,28)\n"
      "  --ppl-contexts LIST     perplexity context lengths (default 2048,4096)\n"
      "  --ppl-tokens M          tokens scored after each context (default 48)\n"
      "  --task-contexts LIST    prompt lengths of the tasks (default 2048)\n"
      "  --instances N           instances per task and context (default 3)\n"
      "  --tasks LIST            of needle,cwe,fwe (default all three)\n"
      "  --lsh LIST              MagicPIG configurations K:L,... (default 10:150,9:120,8:75)\n"
      "  --kv bf16|f32|q8        KV cache element type (default bf16; q8: 8-bit, docs/KV8.md)\n"
      "  --cwe-share PCT          percent of the CWE list taken by its 3 common words (50)\n"
      "  --dense-only            downstream with dense attention only (to size the tasks)\n"
      "  --tuning FILE           downstream also decodes with \"tuned\": magicpig with the\n"
      "                          operating point of pig-tune in FILE (per layer dense or K,L,t)\n"
      "  --max-error E           FILE is pig-tune's records: select the cheapest point with\n"
      "                          predicted mean attention error <= E\n"
      "  --lsh-transform SPEC    downstream also decodes each --lsh configuration hashing in a\n"
      "                          space fitted to the keys, rows \"magicpig+SPEC\" (whiten:a=A)\n"
      "  --transforms LIST       attention-error also compares plain MagicPIG with hashing in\n"
      "                          spaces fitted to the keys at matched cost2 (plain, pca:r=R,\n"
      "                          whiten:a=A, mips:q=Q, whiten:a=A+mips:q=Q; \"default\": %s)\n"
      "  --transform-grid LIST   their (K, L) grid, K:L,... (default K 7-14 x L 75,150,300)\n"
      "LIST: comma-separated values, or none.\n",
      DefaultModelPath(), pig::eval::kDefaultTextPath, pig::eval::kDefaultTextPackage,
      kDefaultTransforms);
  std::exit(error.empty() ? 0 : 2);
}

std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos)
      end = s.size();
    if (end > start)
      out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

size_t ParseSize(const std::string &flag, const std::string &s, size_t lo, size_t hi) {
  char *end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi)
    Usage(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "], got '" + s + "'");
  return size_t(v);
}

std::vector<size_t> ParseList(const std::string &flag, const std::string &s, size_t lo, size_t hi) {
  std::vector<size_t> out;
  if (s == "none")
    return out;
  for (const std::string &p : Split(s, ','))
    out.push_back(ParseSize(flag, p, lo, hi));
  if (out.empty())
    Usage(flag + " needs at least one value (or none)");
  return out;
}

Options Parse(int argc, char **argv) {
  Options o;
  for (int i = 0; i < argc; ++i)
    o.command_line += (i ? " " : "") + std::string(i ? argv[i] : "build/bin/pig-eval");
  if (argc < 2)
    Usage("give a command: attention-error, downstream, all or kv-formats");
  o.command = argv[1];
  if (o.command == "-h" || o.command == "--help")
    Usage("");
  if (o.command != "attention-error" && o.command != "downstream" && o.command != "all" &&
      o.command != "kv-formats")
    Usage("unknown command '" + o.command + "'");
  // --quick first, so that explicit flags after it still win.
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") {
      o.quick = true;
      o.error_contexts = {256, 512};
      o.layers = {2};
      o.ppl_contexts = {256};
      o.ppl_tokens = 8;
      o.task_contexts = {300};
      o.instances = 1;
      o.lsh = {{10, 150}, {8, 75}};
    }
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {
    } else if (a == "--cwe-share") {
      o.cwe_share = double(ParseSize(a, value(), 5, 90)) / 100.0;
    } else if (a == "--dense-only") {
      o.dense_only = true;
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--update-doc") {
      o.update_doc = value();
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--text") {
      o.text = value();
    } else if (a == "--threads") {
      o.threads = ParseSize(a, value(), 1, 256);
    } else if (a == "--seed") {
      o.seed = ParseSize(a, value(), 0, ~size_t(0));
    } else if (a == "--lsh-seed") {
      o.lsh_seed = ParseSize(a, value(), 0, ~size_t(0));
    } else if (a == "--error-contexts") {
      o.error_contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--layers") {
      o.layers = ParseList(a, value(), 0, 1024);
    } else if (a == "--ppl-contexts") {
      o.ppl_contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--ppl-tokens") {
      o.ppl_tokens = ParseSize(a, value(), 1, 4096);
    } else if (a == "--task-contexts") {
      o.task_contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--instances") {
      o.instances = ParseSize(a, value(), 1, 1000);
    } else if (a == "--tasks") {
      o.tasks = Split(value(), ',');
      for (const std::string &t : o.tasks)
        if (t != "needle" && t != "cwe" && t != "fwe")
          Usage("unknown task '" + t + "' (needle, cwe, fwe)");
    } else if (a == "--lsh") {
      o.lsh.clear();
      for (const std::string &p : Split(value(), ',')) {
        const std::vector<std::string> kl = Split(p, ':');
        if (kl.size() != 2)
          Usage("--lsh expects K:L pairs, got '" + p + "'");
        o.lsh.push_back({int(ParseSize(a, kl[0], 1, 16)), int(ParseSize(a, kl[1], 1, 1024))});
      }
    } else if (a == "--transforms") {
      std::string v = value();
      if (v == "default")
        v = kDefaultTransforms;
      o.transforms.clear();
      if (v != "none")
        for (const std::string &p : Split(v, ',')) {
          try {
            o.transforms.push_back(pig::ref::TransformSpec::parse(p));
          } catch (const std::invalid_argument &e) {
            Usage(std::string("--transforms: ") + e.what());
          }
        }
      // Plain first: the others are matched to it.
      std::erase_if(o.transforms, [](const auto &t) { return t.identity(); });
      if (!o.transforms.empty())
        o.transforms.insert(o.transforms.begin(), pig::ref::TransformSpec{});
    } else if (a == "--transform-grid") {
      o.transform_grid.clear();
      for (const std::string &p : Split(value(), ',')) {
        const std::vector<std::string> kl = Split(p, ':');
        if (kl.size() != 2)
          Usage("--transform-grid expects K:L pairs, got '" + p + "'");
        o.transform_grid.push_back(
            {int(ParseSize(a, kl[0], 1, 16)), int(ParseSize(a, kl[1], 1, 1024))});
      }
    } else if (a == "--kv") {
      const std::string v = value();
      if (!lsh::parse_dtype(v, o.kv))
        Usage("--kv expects bf16, f32 or q8, got '" + v + "'");
    } else if (a == "--tuning") {
      o.tuning = value();
      if (o.tuning.empty())
        Usage("--tuning needs a file");
    } else if (a == "--max-error") {
      const std::string v = value();
      o.max_error = pig::tools::ParseMaxError(v);
      if (!o.max_error)
        Usage("--max-error expects a number >= 0, got '" + v + "'");
    } else if (a == "--lsh-transform") {
      // A bad spec or one the runtime does not serve: a usage error before the model is read.
      try {
        o.lsh_transform = pig::runtime::ParseServedTransform(value());
      } catch (const std::invalid_argument &e) {
        Usage(std::string("--lsh-transform: ") + e.what());
      }
    } else if (a == "-h" || a == "--help") {
      Usage("");
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  if (o.max_error && o.tuning.empty())
    Usage("--max-error selects a point from --tuning FILE's records: give --tuning FILE");
  if (!o.tuning.empty() && o.command == "attention-error")
    Usage("--tuning adds the method \"tuned\" to downstream; attention-error measures fixed "
          "configurations (pig-tune accuracy measures a point's error)");
  if (!o.tuning.empty() && o.dense_only)
    Usage("--tuning and --dense-only do not combine");
  if (o.lsh_transform && o.command == "attention-error")
    Usage("--lsh-transform adds the method \"magicpig+SPEC\" to downstream; attention-error "
          "compares transforms with --transforms");
  if (o.lsh_transform && o.dense_only)
    Usage("--lsh-transform and --dense-only do not combine");
  if (!o.transforms.empty()) {
    if (o.command == "downstream")
      Usage("--transforms compares attention errors: use attention-error or all");
    if (std::none_of(o.transform_grid.begin(), o.transform_grid.end(),
                     [](pig::eval::KL kl) { return kl.K == 10 && kl.L == 150; }))
      Usage("--transform-grid must contain 10:150, plain MagicPIG's configuration the "
            "transforms are matched to");
  }
  return o;
}

AttentionShape ShapeOf(const LlamaConfig &cfg, size_t capacity) {
  AttentionShape s;
  s.n_layers = cfg.n_layers;
  s.n_heads = cfg.n_heads;
  s.n_kv_heads = cfg.n_kv_heads;
  s.head_dim = cfg.head_dim;
  s.capacity = capacity;
  return s;
}

// Dense attention that also keeps the queries of single-token steps (decode) of chosen layers:
// the query of a real decode step, next to the cache it attends to, is what attention-error
// measures the estimators on.
class CapturingAttention final : public ForwardingAttention {
public:
  CapturingAttention(const AttentionShape &shape, lsh::DType dtype, std::vector<size_t> layers)
      : ForwardingAttention(std::make_unique<DenseAttention>(shape, dtype)),
        layers_(std::move(layers)), q_(shape.n_layers) {}
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool, const Kernels &kern) override {
    if (armed_ && n == 1 && std::find(layers_.begin(), layers_.end(), layer) != layers_.end())
      q_[layer].assign(q, q + shape().n_heads * shape().head_dim);
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool, kern);
  }

  void Arm(bool on) { armed_ = on; }
  const std::vector<float> &query(size_t layer) const { return q_[layer]; }

private:
  std::vector<size_t> layers_;
  std::vector<std::vector<float>> q_;
  bool armed_ = false;
};

// ---------------------------------------------------------------------------------------------
// The methods of the downstream comparison.

struct Method {
  std::string label;  // "dense", "magicpig", "magicpig+whiten:a=0.25", "topk", "quest", "tuned"
  std::string config; // "K=10 L=150", "= magicpig 10,150"
  AttentionSpec spec;
  int matched_to = -1; // index of the magicpig configuration whose cost2 sets the budget
};

std::string KLName(pig::eval::KL kl) { return std::to_string(kl.K) + "," + std::to_string(kl.L); }

// The config column of "tuned": how the point was chosen ("max-error 0.1"), else "point".
std::string TunedConfig(const pig::tools::Tuning &t) {
  return t.point.criterion.empty() ? std::string("point") : t.point.criterion;
}

// The label of magicpig hashing in a fitted space: "magicpig+whiten:a=0.25".
std::string TransformLabel(const pig::ref::TransformSpec &t) { return "magicpig+" + t.str(); }

// dense first, then each magicpig configuration followed by topk and quest at its cost2: the
// budget of a baseline is only known once its magicpig run has measured cost2. With
// --lsh-transform, "magicpig+SPEC" right after each magicpig configuration (same K, L; the
// baselines stay matched to plain magicpig). With --tuning, "tuned" last (config: the point's
// criterion).
std::vector<Method> Methods(const Options &o, const pig::tools::Tuning *tuning) {
  std::vector<Method> m;
  AttentionSpec base;
  base.kv_dtype = o.kv;
  base.sample_seed = o.seed;
  if (o.lsh_seed)
    base.seed = *o.lsh_seed;
  m.push_back({"dense", "", base});
  if (o.dense_only)
    return m;
  for (size_t c = 0; c < o.lsh.size(); ++c) {
    AttentionSpec s = base;
    s.method = "magicpig";
    s.K = o.lsh[c].K;
    s.L = o.lsh[c].L;
    const std::string config = "K=" + std::to_string(s.K) + " L=" + std::to_string(s.L);
    m.push_back({"magicpig", config, s});
    if (o.lsh_transform) {
      AttentionSpec x = s;
      x.transform = *o.lsh_transform;
      m.push_back({TransformLabel(*o.lsh_transform), config, x});
    }
    for (const char *b : {"topk", "quest"}) {
      AttentionSpec t = base;
      t.method = b;
      m.push_back({b, "= magicpig " + KLName(o.lsh[c]), t, int(c)});
    }
  }
  if (tuning)
    m.push_back({"tuned", TunedConfig(*tuning), pig::tools::ApplyTuning(base, tuning->point)});
  return m;
}

struct MethodRun {
  double cost1 = 0, cost2 = 0;
  double seconds = 0;
  size_t steps = 0;
};

// Decodes from a dense prefix of `n` positions with one method: `step(session, logits)` is
// called before each decode step with the logits of the previous position and returns the next
// token to feed, or -1 to stop.
template <class Step>
MethodRun DecodeWith(const LlamaModel &model, ThreadPool &pool, const KvCache &prefix, size_t n,
                     size_t capacity, const AttentionSpec &spec, const std::vector<float> &logits0,
                     Step step) {
  const auto t0 = Clock::now();
  std::unique_ptr<Attention> attn = MakeAttention(spec, ShapeOf(model.config(), capacity));
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

// ---------------------------------------------------------------------------------------------
// Part 1: attention error on real KV caches.

struct ErrorKey {
  size_t context;
  std::string method, config;
  bool operator<(const ErrorKey &o) const {
    return std::tie(context, method, config) < std::tie(o.context, o.method, o.config);
  }
};

struct ErrorAgg {
  Stat cost, err;
  size_t order = 0; // first-seen order, to print rows as MeasureGroup emits them
};

class ErrorReport {
public:
  explicit ErrorReport(const Options &o)
      : o_(o), raw_(o.out + "/attention_error.csv",
                    {"context", "layer", "head", "method", "config", "cost", "error"}) {}

  void Add(size_t context, size_t layer, size_t head, const pig::eval::ErrorPoint &p) {
    raw_.row({std::to_string(context), std::to_string(layer), std::to_string(head), p.method,
              p.config, Fmt("%.6f", p.cost), Fmt("%.6f", p.error)});
    for (size_t l : {layer, kAllLayers}) {
      auto &m = l == kAllLayers ? all_ : per_layer_[l];
      auto [it, fresh] = m.try_emplace(ErrorKey{context, p.method, p.config});
      if (fresh)
        it->second.order = m.size();
      it->second.cost.add(p.cost);
      it->second.err.add(p.error);
    }
  }

  void Finish(double seconds, double prefill_seconds) {
    const std::string dir = o_.out;
    {
      Csv s(dir + "/attention_error_summary.csv",
            {"context", "method", "config", "samples", "mean_cost", "mean_error", "sd_error"});
      for (const auto &[k, a] : Sorted(all_))
        s.row({std::to_string(k.context), k.method, k.config, std::to_string(a.err.n),
               Fmt("%.6f", a.cost.mean), Fmt("%.6f", a.err.mean), Fmt("%.6f", a.err.sd())});
    }
    Plot();
    Markdown(seconds, prefill_seconds);
  }

private:
  static constexpr size_t kAllLayers = ~size_t(0);
  using Map = std::map<ErrorKey, ErrorAgg>;

  static std::vector<std::pair<ErrorKey, ErrorAgg>> Sorted(const Map &m) {
    std::vector<std::pair<ErrorKey, ErrorAgg>> v(m.begin(), m.end());
    std::stable_sort(v.begin(), v.end(), [](const auto &a, const auto &b) {
      return std::tie(a.first.context, a.second.order) < std::tie(b.first.context, b.second.order);
    });
    return v;
  }

  // Fixed-budget points (and every MagicPIG configuration) of one method, sorted by cost.
  static std::string Series(const Map &m, size_t context, const std::string &method) {
    std::vector<std::pair<double, double>> pts;
    for (const auto &[k, a] : m)
      if (k.context == context && k.method == method && k.config.rfind("= ", 0) != 0)
        pts.push_back({a.cost.mean, a.err.mean});
    std::sort(pts.begin(), pts.end());
    std::string s;
    for (auto [c, e] : pts)
      s += Fmt("%.6f", 100 * c) + " " + Fmt("%.6f", e) + "\n";
    return s;
  }

  void Plot() const {
    const std::string dir = o_.out + "/plotdata";
    pig::eval::MakeDirs(dir);
    const char *methods[] = {"TopK", "Quest", "Oracle", "MagicPIG"};
    std::string gp = "set terminal pngcairo size 1500,460 font ',11'\n"
                     "set output '" +
                     o_.out +
                     "/attention_error.png'\n"
                     "set multiplot layout 1," +
                     std::to_string(o_.error_contexts.size()) +
                     " title 'Relative L2 error of the attention output vs exact, real KV caches "
                     "of SmolLM2-135M (mean over layers " +
                     pig::eval::Join(LayerNames(), ",") +
                     " and all 9 query heads)'\n"
                     "set logscale y\nset grid\nset key top right\n"
                     "set xlabel 'cost: tokens read / indexed tokens (%)'\n"
                     "set ylabel 'relative L2 error'\nset xrange [0:*]\n";
    for (size_t ctx : o_.error_contexts) {
      std::vector<std::string> plots;
      for (const char *m : methods) {
        const std::string f = dir + "/err_" + std::to_string(ctx) + "_" + m + ".dat";
        pig::eval::WriteFile(f, Series(all_, ctx, m));
        plots.push_back("'" + f + "' using 1:2 with linespoints lw 2 title '" + m + "'");
      }
      gp += "set title 'KV cache of " + std::to_string(ctx) + " tokens'\nplot " +
            pig::eval::Join(plots, ", ") + "\n";
    }
    gp += "unset multiplot\n";
    // Figure 4 of the paper, per layer: TopK's error against its budget, with MagicPIG's.
    const size_t ctx = o_.error_contexts.back();
    gp += "set terminal pngcairo size 900,560 font ',11'\nset output '" + o_.out +
          "/attention_error_layers.png'\n"
          "set title 'Per layer, KV cache of " +
          std::to_string(ctx) +
          " tokens (mean over 9 query heads): TopK solid, MagicPIG dashed'\n"
          "set key outside right\n";
    std::vector<std::string> plots;
    int color = 1;
    for (size_t layer : o_.layers) {
      for (const char *m : {"TopK", "MagicPIG"}) {
        const std::string f = dir + "/err_layer" + std::to_string(layer) + "_" +
                              std::to_string(ctx) + "_" + m + ".dat";
        pig::eval::WriteFile(f, Series(per_layer_.at(layer), ctx, m));
        plots.push_back("'" + f + "' using 1:2 with linespoints lw 2 lc " + std::to_string(color) +
                        (std::string(m) == "TopK" ? " dt 1" : " dt 2") + " title '" + m +
                        " layer " + std::to_string(layer) + "'");
      }
      ++color;
    }
    gp += "plot " + pig::eval::Join(plots, ", ") + "\n";
    const std::string script = o_.out + "/attention_error.gp";
    pig::eval::WriteFile(script, gp);
    pig::eval::RunGnuplot(script);
  }

  std::vector<std::string> LayerNames() const {
    std::vector<std::string> v;
    for (size_t l : o_.layers)
      v.push_back(std::to_string(l));
    return v;
  }

  void Markdown(double seconds, double prefill_seconds) const {
    std::string md;
    md += "Command: `" + o_.command_line + "` (" + Fmt("%.0f", seconds) +
          " s wall in total for this part, of which " + Fmt("%.0f", prefill_seconds) +
          " s the model's prefill). Layers " + pig::eval::Join(LayerNames(), ", ") +
          ", all query heads; per cell: mean relative L2 error (standard deviation) over " +
          "layers x heads, and the mean cost (tokens read / indexed tokens).\n\n";
    std::string head = "| method | config |", sep = "|---|---|";
    for (size_t ctx : o_.error_contexts) {
      head += " n = " + std::to_string(ctx) + " |";
      sep += "---|";
    }
    md += head + "\n" + sep + "\n";
    // Rows in the order of the first context; cells looked up per context.
    for (const auto &[k, a] : Sorted(all_)) {
      if (k.context != o_.error_contexts.front())
        continue;
      std::string row = "| " + k.method + " | " + k.config + " |";
      for (size_t ctx : o_.error_contexts) {
        auto it = all_.find(ErrorKey{ctx, k.method, k.config});
        if (it == all_.end()) {
          row += " |";
          continue;
        }
        const ErrorAgg &c = it->second;
        row += " " + Fmt("%.3f", c.err.mean) + " (" + Fmt("%.3f", c.err.sd()) + ") at " +
               Fmt("%.2f", 100 * c.cost.mean) + " % |";
      }
      md += row + "\n";
    }
    if (!all_.empty())
      md += "\nSamples per cell: " + std::to_string(all_.begin()->second.err.n) +
            " (layers x query heads, one decode step each).\n";
    pig::eval::WriteFile(o_.out + "/attention_error.md", md);
    if (!o_.update_doc.empty())
      pig::eval::UpdateMarkedSection(o_.update_doc, "attention-error", md);
    std::printf("\n%s", md.c_str());
  }

  const Options &o_;
  Csv raw_;
  Map all_;
  std::map<size_t, Map> per_layer_;
};

// ---------------------------------------------------------------------------------------------
// Part 2: downstream.

struct Cell {
  Stat score, cost1, cost2;
  size_t order = 0;
};

struct DownKey {
  std::string task;
  size_t context;
  std::string method, config;
  bool operator<(const DownKey &o) const {
    return std::tie(task, context, method, config) <
           std::tie(o.task, o.context, o.method, o.config);
  }
};

class Downstream {
public:
  Downstream(const Options &o, const LlamaModel &model, ThreadPool &pool,
             const pig::tools::Tuning *tuning)
      : o_(o), model_(model), pool_(pool), methods_(Methods(o, tuning)),
        ppl_csv_(o.out + "/perplexity.csv",
                 {"context", "method", "config", "budget", "tokens", "nll", "ppl",
                  "delta_nll_vs_dense", "se_delta_nll", "cost1", "cost2", "seconds"}),
        task_csv_(o.out + "/tasks.csv",
                  {"task", "context", "instance", "prompt_tokens", "method", "config", "budget",
                   "cost1", "cost2", "score", "answer", "expected", "seconds"}) {}

  // Perplexity of tokens [n + 1, n + M] given a dense prefix of n positions held by `prefix`,
  // `logits0` being the prediction of token n (from the dense prefill).
  void Perplexity(const KvCache &prefix, size_t n, const std::vector<int32_t> &tokens,
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
                    Fmt("%.5f", mean.mean), Fmt("%.4f", std::exp(mean.mean)),
                    Fmt("%.5f", delta.mean), Fmt("%.5f", delta.se()), Fmt("%.5f", r.cost1),
                    Fmt("%.5f", r.cost2), Fmt("%.2f", r.seconds)});
      PplCell &c = ppl_[{"ppl", n, m.label, m.config}];
      c.nll = mean.mean;
      c.delta = delta.mean;
      c.se = delta.se();
      c.cost1 = r.cost1;
      c.cost2 = r.cost2;
      c.order = ppl_.size();
      std::fprintf(
          stderr, "pig-eval: ppl n=%zu %-8s %-18s ppl %.3f (dnll %+.4f) cost2 %.4f %.1fs\n", n,
          m.label.c_str(), m.config.c_str(), std::exp(mean.mean), delta.mean, r.cost2, r.seconds);
    }
  }

  void Tasks() {
    const Tokenizer &tok = model_.tokenizer();
    for (size_t ctx : o_.task_contexts)
      for (const std::string &task : o_.tasks)
        for (size_t inst = 0; inst < o_.instances; ++inst) {
          const std::uint64_t seed = o_.seed * 1000003 + inst * 7919 + ctx;
          auto make = [&](size_t size) {
            if (task == "needle")
              return pig::eval::MakeNeedle(size, double(inst + 1) / double(o_.instances + 1), seed);
            if (task == "cwe")
              return pig::eval::MakeCommonWords(size, 3, CweCommonFreq(size), CweRareFreq(size),
                                                seed);
            return pig::eval::MakeFrequentWords(size, 2.0, seed);
          };
          auto encode = [&](const pig::eval::TaskInstance &t) {
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
          pig::eval::TaskInstance t = make(size);
          std::vector<int32_t> ids = encode(t);
          while (ids.size() > ctx && size > 16) {
            size = size * 98 / 100;
            t = make(size);
            ids = encode(t);
          }
          RunTask(t, ids, ctx, inst);
        }
  }

  void Finish(double seconds, double prefill_seconds) {
    Plot();
    Markdown(seconds, prefill_seconds);
  }

private:
  struct PplCell {
    double nll = 0, delta = 0, se = 0, cost1 = 0, cost2 = 0;
    size_t order = 0;
  };

  // Teacher-forces tokens [n, n + M) with one method; nll gets -log p of tokens [n + 1, n + M].
  // The prediction of token n comes from the dense prefill, the same for every method: unscored.
  MethodRun ScoreTokens(const KvCache &prefix, size_t n, const std::vector<int32_t> &tokens,
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

  // The common words must outnumber the rest clearly but leave room for many distinct words.
  size_t CweCommonFreq(size_t size) const {
    return std::max<size_t>(4, size_t(o_.cwe_share * double(size) / 3.0));
  }
  // Rare words appear at least twice (as in RULER) and often enough that the generator's word
  // pool (150 distinct words) covers the rest of the list.
  size_t CweRareFreq(size_t size) const {
    const size_t rest = size > 3 * CweCommonFreq(size) ? size - 3 * CweCommonFreq(size) : 0;
    return std::min(CweCommonFreq(size) - 1, std::max<size_t>(2, (rest + 149) / 150));
  }

  void RunTask(const pig::eval::TaskInstance &t, const std::vector<int32_t> &ids, size_t ctx,
               size_t inst) {
    const Tokenizer &tok = model_.tokenizer();
    const size_t max_new = t.name == "needle" ? 12 : 24;
    const size_t capacity = ids.size() + max_new + 1;
    const auto t0 = Clock::now();
    LlamaSession base(model_, pool_, capacity,
                      std::make_unique<DenseAttention>(ShapeOf(model_.config(), capacity), o_.kv));
    std::vector<float> logits0(model_.config().vocab);
    base.Forward(ids.data(), ids.size(), logits0.data());
    const double prefill_s = Since(t0);
    std::vector<double> cost2(o_.lsh.size(), 0);
    for (const Method &m : methods_) {
      AttentionSpec spec = m.spec;
      if (m.matched_to >= 0)
        spec.budget = std::clamp(cost2[size_t(m.matched_to)], 1e-3, 1.0);
      std::vector<int32_t> out;
      const MethodRun r =
          DecodeWith(model_, pool_, base.attention().cache(), ids.size(), capacity, spec, logits0,
                     [&](const std::vector<float> &logits) -> int32_t {
                       const int32_t next = ArgMax(logits.data(), logits.size());
                       if (tok.IsEndOfGeneration(next) || out.size() >= max_new)
                         return -1;
                       out.push_back(next);
                       return next;
                     });
      for (size_t c = 0; c < o_.lsh.size(); ++c)
        if (m.label == "magicpig" &&
            m.config == "K=" + std::to_string(o_.lsh[c].K) + " L=" + std::to_string(o_.lsh[c].L))
          cost2[c] = r.cost2;
      std::string answer;
      for (int32_t id : out)
        if (!tok.IsControl(id))
          answer += tok.Decode(id);
      const double score = pig::eval::ScoreAnswer(answer, t.expected);
      task_csv_.row({t.name, std::to_string(ctx), std::to_string(inst), std::to_string(ids.size()),
                     m.label, m.config, m.matched_to >= 0 ? Fmt("%.5f", spec.budget) : "",
                     Fmt("%.5f", r.cost1), Fmt("%.5f", r.cost2), Fmt("%.3f", score), answer,
                     pig::eval::Join(t.expected, " "), Fmt("%.2f", r.seconds)});
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

  std::vector<std::string> Contexts(const std::vector<size_t> &v) const {
    std::vector<std::string> s;
    for (size_t c : v)
      s.push_back(std::to_string(c));
    return s;
  }

  // Scores (y) against cost2 (x) per task, one series per method; dense as a flat line.
  void Plot() const {
    const std::string dir = o_.out + "/plotdata";
    pig::eval::MakeDirs(dir);
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
    std::string gp = "set terminal pngcairo size " + std::to_string(480 * cols) + "," +
                     std::to_string(380 * rows + 40) + " font ',10'\nset output '" + o_.out +
                     "/downstream.png'\nset multiplot layout " + std::to_string(rows) + "," +
                     std::to_string(cols) +
                     " title 'SmolLM2-135M: dense vs MagicPIG vs TopK / Quest at MagicPIG cost2'\n"
                     "set grid\nset key bottom right\nset xlabel 'cost2: sampled fraction of "
                     "indexed tokens (%)'\nset xrange [0:*]\n";
    int p = 0;
    for (const Panel &pan : panels) {
      std::vector<std::string> plots;
      double dense = NAN;
      std::vector<std::string> series{"magicpig", "topk", "quest"};
      if (o_.lsh_transform)
        series.push_back(TransformLabel(*o_.lsh_transform));
      for (const Method &m : methods_)
        if (m.label == "tuned")
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
        pig::eval::WriteFile(f, data);
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
            pig::eval::Join(plots, ", ") + "\n";
      ++p;
    }
    gp += "unset multiplot\n";
    const std::string script = o_.out + "/downstream.gp";
    pig::eval::WriteFile(script, gp);
    pig::eval::RunGnuplot(script);
  }

  bool HasPpl(size_t ctx) const {
    for (const auto &[k, c] : ppl_)
      if (k.context == ctx)
        return true;
    return false;
  }

  void Markdown(double seconds, double prefill_seconds) const {
    std::string md = "Command: `" + o_.command_line +
                     "` (perplexity and tasks: " + Fmt("%.0f", seconds) + " s wall";
    if (prefill_seconds > 0)
      md += ", plus " + Fmt("%.0f", prefill_seconds) + " s for the dense prefill of the long text" +
            (o_.command == "all" ? ", shared with attention-error" : "");
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
          row += " " + Fmt("%.3f", std::exp(it->second.nll));
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
            " seeded instances per task and context (needle: the number is in the answer; cwe: "
            "fraction of the 3 common words named; fwe: fraction of the 3 most frequent coded "
            "words named), greedy decoding after a dense prefill of the chat-formatted prompt; "
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
          row += " " + Fmt("%.2f", it->second.score.mean) + " |";
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
    pig::eval::WriteFile(o_.out + "/downstream.md", md);
    if (!o_.update_doc.empty())
      pig::eval::UpdateMarkedSection(o_.update_doc, "downstream", md);
    std::printf("\n%s", md.c_str());
  }

  const Options &o_;
  const LlamaModel &model_;
  ThreadPool &pool_;
  std::vector<Method> methods_;
  Csv ppl_csv_, task_csv_;
  std::map<DownKey, PplCell> ppl_;
  std::map<DownKey, Cell> cells_;
  std::vector<double> dense_nll_, cost2_;
};

// ---------------------------------------------------------------------------------------------

// kv-formats: the quantisation error of each candidate 8-bit format (kv_formats.h), aggregated
// over the layers, kv-heads and query heads of each context.
class KvFormatReport {
public:
  template <typename Load>
  void Measure(size_t P, const std::vector<size_t> &layers, size_t n_kv_heads, Load &&load) {
    for (size_t layer : layers)
      for (size_t kvh = 0; kvh < n_kv_heads; ++kvh) {
        pig::ref::OwnedMatrix K, V;
        std::vector<std::vector<float>> qs;
        load(layer, kvh, K, V, qs);
        for (pig::eval::KvFormat f : pig::eval::AllKvFormats())
          for (const auto &e : pig::eval::MeasureKvFormat(f, qs, K, V))
            errs_[{P, int(f)}].push_back(e);
      }
    std::fprintf(stderr, "pig-eval: kv formats at %zu done\n", P);
  }
  void Finish(const Options &o, size_t d) const {
    using pig::eval::Fmt;
    std::string md =
        "Exact attention over the dequantised rows against exact attention over the f32 "
        "rows (relative L2 error of the output; scaled-logit error), real decode-step "
        "queries, layers " +
        JoinSizes(o.layers) + ", every kv-head and query head. Command: `" + o.command_line +
        "`\n\n| context | format | bytes/element | output error "
        "mean | p95 | max | logit error rms (mean) | logit error max |\n"
        "|---|---|---|---|---|---|---|---|\n";
    for (const auto &[key, v] : errs_) {
      std::vector<double> rel;
      double rms = 0, lmax = 0;
      for (const auto &e : v) {
        rel.push_back(e.out_rel);
        rms += e.logit_rms;
        lmax = std::max(lmax, e.logit_max);
      }
      std::sort(rel.begin(), rel.end());
      double mean = 0;
      for (double r : rel)
        mean += r;
      mean /= double(rel.size());
      const double p95 = rel[std::min(rel.size() - 1, size_t(0.95 * double(rel.size())))];
      const auto f = pig::eval::KvFormat(key.second);
      md += "| " + std::to_string(key.first) + " | " + pig::eval::to_string(f) + " | " +
            Fmt("%.3f", pig::eval::BytesPerElement(f, d)) + " | " + Fmt("%.2e", mean) + " | " +
            Fmt("%.2e", p95) + " | " + Fmt("%.2e", rel.back()) + " | " +
            Fmt("%.2e", rms / double(v.size())) + " | " + Fmt("%.2e", lmax) + " |\n";
    }
    std::printf("%s", md.c_str());
    pig::eval::WriteFile(o.out + "/kv_formats.md", md);
  }

private:
  static std::string JoinSizes(const std::vector<size_t> &v) {
    std::string s;
    for (size_t x : v)
      s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  }
  std::map<std::pair<size_t, int>, std::vector<pig::eval::KvFormatError>> errs_;
};

int Run(const Options &o) {
  const auto start = Clock::now();
  pig::eval::MakeDirs(o.out);
  auto model = LlamaModel::Load(o.model);
  const LlamaConfig &cfg = model->config();
  ThreadPool pool(o.threads);
  const bool formats = o.command == "kv-formats";
  const bool part1 = o.command == "attention-error" || o.command == "all";
  const bool part2 = o.command == "downstream" || o.command == "all";
  for (size_t l : o.layers)
    if (l >= cfg.n_layers)
      Usage("--layers: layer " + std::to_string(l) + " outside the model's " +
            std::to_string(cfg.n_layers));

  // Checkpoints of the one long-text prefill: attention-error captures and perplexity points.
  std::set<size_t> checkpoints;
  size_t capacity = 0, need_tokens = 0;
  if (part1 || formats)
    for (size_t c : o.error_contexts) {
      checkpoints.insert(c);
      capacity = std::max(capacity, c);
      need_tokens = std::max(need_tokens, c);
    }
  if (part2)
    for (size_t c : o.ppl_contexts) {
      checkpoints.insert(c);
      capacity = std::max(capacity, c);
      need_tokens = std::max(need_tokens, c + o.ppl_tokens + 1);
    }
  if (capacity > cfg.context_length)
    Usage("a context of " + std::to_string(capacity) + " exceeds the model's trained context " +
          std::to_string(cfg.context_length));

  std::unique_ptr<ErrorReport> errors;
  if (part1)
    errors = std::make_unique<ErrorReport>(o);
  std::unique_ptr<pig::eval::TransformReport> transforms;
  if (part1 && !o.transforms.empty()) {
    for (const pig::ref::TransformSpec &t : o.transforms)
      try {
        t.validate(cfg.head_dim);
      } catch (const std::invalid_argument &e) {
        Usage(std::string("--transforms: ") + e.what());
      }
    pig::eval::TransformReportOptions to;
    to.out = o.out;
    to.update_doc = o.update_doc;
    to.command_line = o.command_line;
    to.contexts = o.error_contexts;
    to.layers = o.layers;
    to.grid.transforms = o.transforms;
    to.grid.grid = o.transform_grid;
    to.grid.seed = AttentionSpec{}.seed;
    transforms = std::make_unique<pig::eval::TransformReport>(std::move(to));
  }
  double transforms_s = 0;
  // --tuning: loaded (and refused) before any prefill.
  std::optional<pig::tools::Tuning> tuning;
  if (part2 && !o.tuning.empty()) {
    tuning = pig::tools::LoadTuning(o.tuning, o.max_error, cfg.n_layers);
    for (const std::string &w : tuning->warnings)
      std::fprintf(stderr, "pig-eval: warning: %s\n", w.c_str());
    AttentionSpec probe;
    probe.kv_dtype = o.kv;
    pig::tools::ApplyTuning(probe, tuning->point).Validate(cfg.n_layers);
    const pig::tune::OperatingPoint &p = tuning->point;
    std::fprintf(stderr,
                 "pig-eval: tuning: %s: layers %s (predicted attention error %.3f, cost2 %.1f "
                 "%%%s%s)\n",
                 tuning->source.c_str(), p.layers_str().c_str(), p.error, 100.0 * p.cost2,
                 p.criterion.empty() ? "" : "; criterion ", p.criterion.c_str());
  }
  KvFormatReport kv_formats;
  std::unique_ptr<Downstream> down;
  if (part2)
    down = std::make_unique<Downstream>(o, *model, pool, tuning ? &*tuning : nullptr);

  double prefill_s = 0, part1_s = 0, ppl_s = 0;
  if (!checkpoints.empty()) {
    const std::string text = pig::eval::NormalizeText(pig::eval::ReadTextFile(o.text));
    const std::vector<int32_t> tokens = model->tokenizer().Encode(text);
    std::fprintf(stderr, "pig-eval: text %s: %zu bytes, %zu tokens\n", o.text.c_str(), text.size(),
                 tokens.size());
    if (tokens.size() < need_tokens)
      throw std::runtime_error("the text has " + std::to_string(tokens.size()) +
                               " tokens, the contexts need " + std::to_string(need_tokens));
    // kv-formats quantises the exact rows itself: the capture keeps them in f32.
    auto owned = std::make_unique<CapturingAttention>(ShapeOf(cfg, capacity),
                                                      formats ? lsh::DType::f32 : o.kv, o.layers);
    CapturingAttention &cap = *owned;
    LlamaSession base(*model, pool, capacity, std::move(owned));
    std::vector<float> logits(cfg.vocab);
    const pig::ref::OwnedMatrix W =
        pig::ref::simhash_matrix(AttentionSpec{}.seed, cfg.head_dim, 10, 150);
    pig::eval::ErrorOptions eo;
    eo.sample_seed = o.seed;
    for (size_t P : checkpoints) {
      // Prefill to P - 1, then position P - 1 as a decode step: its queries are a real decode
      // step's, and the cache then holds exactly P positions.
      auto t0 = Clock::now();
      if (base.position() < P - 1)
        base.Forward(tokens.data() + base.position(), P - 1 - base.position(), logits.data());
      cap.Arm(true);
      base.Forward(&tokens[P - 1], 1, logits.data());
      cap.Arm(false);
      prefill_s += Since(t0);
      std::fprintf(stderr, "pig-eval: prefilled %zu tokens (%.0f s so far)\n", P, prefill_s);
      if ((part1 || formats) && std::count(o.error_contexts.begin(), o.error_contexts.end(), P)) {
        t0 = Clock::now();
        const KvCache &cache = cap.cache();
        const size_t d = cfg.head_dim, group = cfg.n_heads / cfg.n_kv_heads;
        // One kv-head's cached rows (f32) and the decode step's queries of its group.
        auto load = [&](size_t layer, size_t kvh, pig::ref::OwnedMatrix &K,
                        pig::ref::OwnedMatrix &V, std::vector<std::vector<float>> &qs) {
          K = pig::ref::OwnedMatrix(P, d);
          V = pig::ref::OwnedMatrix(P, d);
          for (size_t i = 0; i < P; ++i) {
            cache.KeyRow(layer, kvh, i, K.row(i));
            cache.ValueRow(layer, kvh, i, V.row(i));
          }
          for (size_t h = kvh * group; h < (kvh + 1) * group; ++h) {
            const float *q = cap.query(layer).data() + h * d;
            qs.emplace_back(q, q + d);
          }
        };
        if (formats) {
          kv_formats.Measure(P, o.layers, cfg.n_kv_heads, load);
          continue;
        }
        for (size_t layer : o.layers)
          for (size_t kvh = 0; kvh < cfg.n_kv_heads; ++kvh) {
            pig::ref::OwnedMatrix K, V;
            std::vector<std::vector<float>> qs;
            load(layer, kvh, K, V, qs);
            const auto pts = pig::eval::MeasureGroup(qs, K, V, W, eo);
            for (size_t g = 0; g < pts.size(); ++g)
              for (const auto &p : pts[g])
                errors->Add(P, layer, kvh * group + g, p);
          }
        part1_s += Since(t0);
        std::fprintf(stderr, "pig-eval: attention error at %zu done (%.0f s)\n", P, part1_s);
        if (transforms) {
          // (layer, kv-head) jobs across the pool; the report is fed under a lock.
          t0 = Clock::now();
          std::vector<std::pair<size_t, size_t>> jobs;
          for (size_t layer : o.layers)
            for (size_t kvh = 0; kvh < cfg.n_kv_heads; ++kvh)
              jobs.push_back({layer, kvh});
          std::mutex mu;
          std::exception_ptr failure;
          pig::eval::TransformGridOptions go;
          go.transforms = o.transforms;
          go.grid = o.transform_grid;
          go.seed = AttentionSpec{}.seed;
          pool.ParallelFor(jobs.size(), [&](size_t j, size_t) {
            try {
              const auto [layer, kvh] = jobs[j];
              pig::ref::OwnedMatrix K, V;
              std::vector<std::vector<float>> qs;
              load(layer, kvh, K, V, qs);
              const auto pts = pig::eval::MeasureTransformGrid(qs, K, V, go);
              std::lock_guard<std::mutex> lock(mu);
              for (size_t g = 0; g < pts.size(); ++g)
                for (const auto &p : pts[g])
                  transforms->Add(P, layer, kvh * group + g, p);
            } catch (...) {
              std::lock_guard<std::mutex> lock(mu);
              if (!failure)
                failure = std::current_exception();
            }
          });
          if (failure)
            std::rethrow_exception(failure);
          transforms_s += Since(t0);
          std::fprintf(stderr, "pig-eval: hash transforms at %zu done (%.0f s)\n", P, transforms_s);
        }
      }
      if (part2 && std::count(o.ppl_contexts.begin(), o.ppl_contexts.end(), P)) {
        t0 = Clock::now();
        down->Perplexity(cap.cache(), P, tokens, logits);
        ppl_s += Since(t0);
      }
    }
  }
  if (formats)
    kv_formats.Finish(o, cfg.head_dim);
  if (errors)
    errors->Finish(part1_s + prefill_s, prefill_s);
  if (transforms)
    transforms->Finish(transforms_s + prefill_s, prefill_s);
  if (down) {
    const auto t0 = Clock::now();
    down->Tasks();
    down->Finish(ppl_s + Since(t0), prefill_s);
  }
  std::fprintf(stderr, "pig-eval: done in %.0f s (prefill of the text %.0f s)\n", Since(start),
               prefill_s);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = Parse(argc, argv);
  try {
    return Run(o);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-eval: error: %s\n", e.what());
    return 1;
  }
}
