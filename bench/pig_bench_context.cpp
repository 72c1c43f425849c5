// pig-bench-context: decode speed of the real model, dense against LSH sampling attention, at
// long contexts (issue: 2k, 4k, 8k, 16k, 32k), with the share of each step spent in attention.
//
// Prefilling 32k tokens of a 135M model on a 2-core CPU takes most of an hour, so the long KV
// caches are made of real rows: one dense prefill of --prefill tokens of real text, whose keys
// and values are then tiled up to each context length (positions beyond the prefill repeat it).
// Speed depends on the number of rows read, not on their positions; the sampled fraction is that
// of the prefilled text (every copy of a sampled key is sampled too). Beyond the model's trained
// context (8k) quality is not meaningful; speed is.
//
// For each context: both methods decode the same --steps tokens from the same cache, one step of
// each in turn; the first LSH step builds the index of every sparse layer and is reported apart.
// With --tuning FILE a third method, "tuned" (magicpig with pig-tune's operating point, per
// layer), decodes too, its steps alternated with the other two. With --transform SPEC a method
// "magicpig+SPEC" (magicpig's K, L, t hashing in a space fitted to the keys, AttentionSpec::
// transform) decodes alternated with the others: its speed vs plain magicpig and vs dense, the
// first step (index build and the fit) and the fitted hashing's memory. With --kv A,B (e.g.
// bf16,q8) dense and magicpig run with each KV element type, all alternated, and a second table
// compares them (LSH with B against dense with A and with B: the 8-bit KV cache's end-to-end
// figure); the prefill then runs with f32 KV and each tiled cache holds its rows converted.
// Usage: pig-bench-context [--model FILE] [--text FILE] [--prefill N] [--steps N]
//                          [--contexts 2048,4096,...] [--threads N] [--kv T[,T2]] [--out DIR]
//                          [--tuning FILE [--max-error E]] [--transform SPEC]
// --out DIR writes speed.csv and draws speed.png with gnuplot (docs/PERFORMANCE.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "pig/reference/lsh.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/tune/tuning.h" // --tuning FILE
#include "report.h"          // tools/pig-eval: CSV and gnuplot helpers

#ifdef PIG_HAVE_GENERATED_KERNELS
#include "pig/Codegen/GeneratedKernels.h"
#endif

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Forwards to an Attention and accumulates the time spent in it.
class TimedAttention final : public ForwardingAttention {
public:
  using ForwardingAttention::ForwardingAttention;
  void Forward(size_t layer, size_t pos, size_t n, const float *q, const float *k, const float *v,
               float *out, ThreadPool &pool, const Kernels &kern) override {
    const auto t0 = Clock::now();
    ForwardingAttention::Forward(layer, pos, n, q, k, v, out, pool, kern);
    seconds += Since(t0);
  }
  double seconds = 0;
};

struct Options {
  std::string model = DefaultModelPath();
  std::string text = "/usr/share/common-licenses/GPL-3";
  size_t prefill = 2048, steps = 16, threads = 0;
  std::vector<size_t> contexts{2048, 4096, 8192, 16384, 32768};
  lsh::DType kv = lsh::DType::bf16;
  std::optional<lsh::DType> kv2;   // --kv A,B: dense and magicpig with B too
  std::string out;                 // --out: CSV + PNG
  std::string tuning;              // --tuning FILE: a third method, "tuned"
  std::optional<double> max_error; // --max-error E: selects the point from a records file
  // --transform SPEC: a method "magicpig+SPEC", magicpig hashing in a fitted space.
  std::optional<pig::ref::TransformSpec> transform;
  // --transform-lsh K:L: the transform's (K, L), to compare at matched cost2 (a transform
  // changes the collision rate); default magicpig's.
  std::optional<std::pair<int, int>> transform_kl;
};

[[noreturn]] void Usage(const std::string &e) {
  std::fprintf(
      stderr,
      "pig-bench-context: %s\nusage: pig-bench-context [--model F] [--text F] "
      "[--prefill N] [--steps N] [--contexts a,b,..] [--threads N] [--kv T[,T2]] [--out DIR]\n"
      "                         (T: bf16, f32 or q8; a second type T2 adds dense and magicpig "
      "with T2)\n"
      "                         [--tuning FILE [--max-error E]]  (a third method: pig-tune's "
      "operating point)\n"
      "                         [--transform SPEC]  (a method magicpig+SPEC: magicpig hashing in "
      "a space\n"
      "                                              fitted to the keys, whiten:a=A; vs magicpig "
      "and dense)\n"
      "                         [--transform-lsh K:L]  (its K, L: to match magicpig's cost2; "
      "default magicpig's)\n",
      e.c_str());
  std::exit(2);
}

size_t Count(const std::string &flag, const std::string &s) {
  char *end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end || s[0] == '-' || v == 0)
    Usage(flag + " expects a positive integer, got '" + s + "'");
  return size_t(v);
}

struct Run {
  double tokens_per_s = 0, attention_share = 0, first_step_s = 0;
  AttentionStats stats;
  size_t memory = 0;
};

// One method's session decoding from the tiled cache, one timed step at a time.
class Decoder {
public:
  Decoder(const LlamaModel &model, ThreadPool &pool, const AttentionSpec &spec,
          const KvCache &tiled, size_t context, size_t steps)
      : logits_(model.config().vocab) {
    const LlamaConfig &c = model.config();
    const AttentionShape shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, context + steps};
    auto timed = std::make_unique<TimedAttention>(MakeAttention(spec, shape));
    timed_ = timed.get();
    timed_->LoadPrefix(tiled, context);
    session_ = std::make_unique<LlamaSession>(model, pool, shape.capacity, std::move(timed));
    session_->SetPosition(context);
  }
  // Decodes one token; returns the step's seconds. After the first step (which builds the LSH
  // index), steps and attention time are accumulated.
  double Step(int32_t token) {
    const double attention0 = timed_->seconds;
    const auto t0 = Clock::now();
    session_->Forward(&token, 1, logits_.data());
    const double s = Since(t0);
    if (first_) {
      run_.first_step_s = s;
      first_ = false;
    } else {
      total_ += s;
      attention_ += timed_->seconds - attention0;
      ++steps_;
    }
    return s;
  }
  Run Result() const {
    Run r = run_;
    r.tokens_per_s = double(steps_) / total_;
    r.attention_share = attention_ / total_;
    r.stats = timed_->stats();
    r.memory = timed_->MemoryBytes();
    return r;
  }

private:
  std::vector<float> logits_;
  TimedAttention *timed_ = nullptr;
  std::unique_ptr<LlamaSession> session_;
  Run run_;
  bool first_ = true;
  double total_ = 0, attention_ = 0;
  size_t steps_ = 0;
};

// The methods decode the same tokens from the same cache, their steps alternated (dense, LSH,
// [tuned,] dense, ...) so that the machine's drift (30 % and more within minutes on a shared
// machine) affects them alike; before, each method ran its steps in a time window of its own.
// Each spec loads its prefix from the tiled cache of its KV element type (`tiled`, one per type).
std::vector<Run> DecodeAll(const LlamaModel &model, ThreadPool &pool,
                           const std::vector<AttentionSpec> &specs,
                           const std::vector<std::unique_ptr<KvCache>> &tiled, size_t context,
                           const std::vector<int32_t> &feed) {
  std::vector<std::unique_ptr<Decoder>> decoders;
  for (const AttentionSpec &spec : specs) {
    const KvCache *src = nullptr;
    for (const auto &t : tiled)
      if (t->dtype() == spec.kv_dtype)
        src = t.get();
    if (!src)
      throw std::logic_error("pig-bench-context: no tiled cache of the spec's KV type");
    decoders.push_back(std::make_unique<Decoder>(model, pool, spec, *src, context, feed.size()));
  }
  for (int32_t token : feed)
    for (auto &d : decoders)
      d->Step(token);
  std::vector<Run> runs;
  for (const auto &d : decoders)
    runs.push_back(d->Result());
  return runs;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      o.model = value();
    else if (a == "--text")
      o.text = value();
    else if (a == "--prefill")
      o.prefill = Count(a, value());
    else if (a == "--steps")
      o.steps = Count(a, value());
    else if (a == "--out")
      o.out = value();
    else if (a == "--threads")
      o.threads = Count(a, value());
    else if (a == "--kv") {
      const std::string k = value();
      const size_t comma = k.find(',');
      lsh::DType t2{};
      if (!lsh::parse_dtype(k.substr(0, comma), o.kv) ||
          (comma != std::string::npos && !lsh::parse_dtype(k.substr(comma + 1), t2)))
        Usage("--kv expects T or T,T2 with T in bf16, f32, q8; got '" + k + "'");
      if (comma != std::string::npos) {
        if (t2 == o.kv)
          Usage("--kv T,T2 needs two different types, got '" + k + "'");
        o.kv2 = t2;
      }
    } else if (a == "--tuning") {
      o.tuning = value();
      if (o.tuning.empty())
        Usage("--tuning needs a file");
    } else if (a == "--max-error") {
      const std::string v = value();
      o.max_error = pig::tools::ParseMaxError(v);
      if (!o.max_error)
        Usage("--max-error expects a number >= 0, got '" + v + "'");
    } else if (a == "--transform-lsh") {
      const std::string v = value();
      const size_t colon = v.find(':');
      if (colon == std::string::npos)
        Usage("--transform-lsh expects K:L, got '" + v + "'");
      const size_t K = Count(a, v.substr(0, colon)), L = Count(a, v.substr(colon + 1));
      try {
        pig::ref::LshConfig{int(K), int(L), 2, 0}.validate();
      } catch (const std::invalid_argument &e) {
        Usage(std::string("--transform-lsh: ") + e.what());
      }
      o.transform_kl = {int(K), int(L)};
    } else if (a == "--transform") {
      // A bad spec or one the runtime does not serve: a usage error before the model is read.
      try {
        o.transform = pig::runtime::ParseServedTransform(value());
      } catch (const std::invalid_argument &e) {
        Usage(std::string("--transform: ") + e.what());
      }
    } else if (a == "--contexts") {
      o.contexts.clear();
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ','))
        o.contexts.push_back(Count(a, item));
    } else
      Usage("unknown argument '" + a + "'");
  }
  if (o.steps < 2)
    Usage("--steps must be at least 2 (the first step is reported apart)");
  if (o.transform_kl && !o.transform)
    Usage("--transform-lsh gives the (K, L) of --transform SPEC's method: give --transform");
  if (o.max_error && o.tuning.empty())
    Usage("--max-error selects a point from --tuning FILE's records: give --tuning FILE");
  try {
#ifdef PIG_HAVE_GENERATED_KERNELS
    pig_register_generated_kernels();
#endif
    auto model = LlamaModel::Load(o.model);
    const LlamaConfig &c = model->config();
    // --tuning: loaded (and refused) before the prefill.
    std::optional<pig::tools::Tuning> tuning;
    if (!o.tuning.empty()) {
      tuning = pig::tools::LoadTuning(o.tuning, o.max_error, c.n_layers);
      for (const std::string &w : tuning->warnings)
        std::fprintf(stderr, "pig-bench-context: warning: %s\n", w.c_str());
      AttentionSpec probe;
      probe.kv_dtype = o.kv;
      pig::tools::ApplyTuning(probe, tuning->point).Validate(c.n_layers);
    }
    std::ifstream in(o.text, std::ios::binary);
    if (!in)
      throw std::runtime_error("cannot read " + o.text);
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<int32_t> tokens = model->tokenizer().Encode(ss.str());
    while (tokens.size() < o.prefill + o.steps) // short text: repeat it
      tokens.insert(tokens.end(), tokens.begin(), tokens.end());
    const std::vector<int32_t> feed(tokens.begin() + std::ptrdiff_t(o.prefill),
                                    tokens.begin() + std::ptrdiff_t(o.prefill + o.steps));
    ThreadPool pool(o.threads);
    AttentionSpec dense;
    dense.kv_dtype = o.kv;
    AttentionSpec prefill = dense;
    if (o.kv2) // one prefill for both types: exact rows, converted into each tiled cache
      prefill.kv_dtype = lsh::DType::f32;
    LlamaSession pre(*model, pool, o.prefill,
                     MakeAttention(prefill, AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads,
                                                           c.head_dim, o.prefill}));
    std::vector<float> logits(c.vocab);
    const auto t0 = Clock::now();
    pre.Forward(tokens.data(), o.prefill, logits.data());
    const std::string kv_names = std::string(lsh::to_string(o.kv)) +
                                 (o.kv2 ? std::string(" and ") + lsh::to_string(*o.kv2) : "");
    std::printf("pig-bench-context: %s, %zu threads, KV %s; dense prefill of %zu tokens of %s "
                "in %.1f s, tiled to each context; %zu decode steps per run\n",
                o.model.c_str(), pool.size(), kv_names.c_str(), o.prefill, o.text.c_str(),
                Since(t0), o.steps);
    AttentionSpec lsh = dense;
    lsh.method = "magicpig";
    // The methods' indices in `specs` and `runs`: dense 0, LSH 1, then tuned and the transform
    // when given (0: absent).
    std::vector<AttentionSpec> specs{dense, lsh};
    size_t ti = 0, xi = 0;
    if (tuning) {
      ti = specs.size();
      specs.push_back(pig::tools::ApplyTuning(dense, tuning->point));
      const pig::tune::OperatingPoint &p = tuning->point;
      std::printf("tuning: %s: layers %s (predicted attention error %.3f, cost2 %.1f %%%s%s)\n",
                  tuning->source.c_str(), p.layers_str().c_str(), p.error, 100.0 * p.cost2,
                  p.criterion.empty() ? "" : "; criterion ", p.criterion.c_str());
    }
    const std::string xl = o.transform ? "magicpig+" + o.transform->str() : "";
    if (o.transform) {
      xi = specs.size();
      AttentionSpec x = lsh;
      x.transform = *o.transform;
      if (o.transform_kl)
        std::tie(x.K, x.L) = *o.transform_kl;
      x.Validate(c.n_layers);
      specs.push_back(x);
      std::printf("transform: %s: %s\n", xl.c_str(), x.str(c.n_layers).c_str());
    }
    size_t d2i = 0; // --kv A,B: dense and magicpig with B at d2i, d2i + 1
    if (o.kv2) {
      d2i = specs.size();
      for (AttentionSpec x : {dense, lsh}) {
        x.kv_dtype = *o.kv2;
        x.Validate(c.n_layers);
        specs.push_back(x);
      }
    }
    std::vector<std::string> kv_rows; // the --kv A,B table, printed after the main one
    auto row_of = [](const std::vector<std::string> &cells) {
      std::string r = "|";
      for (const std::string &cell : cells)
        r += " " + cell + " |";
      return r;
    };
    using pig::eval::Fmt;
    {
      std::vector<std::string> head{"context", "dense tok/s", "LSH tok/s", "speed-up"};
      if (ti)
        head.insert(head.end(), {"tuned tok/s", "tuned vs LSH"});
      if (xi)
        head.insert(head.end(), {xl + " tok/s", xl + " vs LSH", xl + " vs dense"});
      head.push_back(std::string("attention share (dense / LSH") + (ti ? " / tuned" : "") +
                     (xi ? " / " + xl : "") + ")");
      head.push_back("cost2");
      if (ti)
        head.push_back("tuned cost2");
      if (xi)
        head.push_back(xl + " cost2");
      head.push_back("index build (s)");
      if (xi)
        head.push_back(xl + " first step (s)");
      head.insert(head.end(), {"KV MiB", "index MiB"});
      if (xi)
        head.push_back(xl + " hash MiB");
      std::printf("\n%s\n", row_of(head).c_str());
      std::string sep = "|";
      for (size_t i = 0; i < head.size(); ++i)
        sep += "---|";
      std::printf("%s\n", sep.c_str());
    }
    std::unique_ptr<pig::eval::Csv> csv;
    // Column (1-based) of the transform's first CSV column, for the plot.
    const size_t xcol = 11 + (ti ? 4 : 0);
    if (!o.out.empty()) {
      pig::eval::MakeDirs(o.out);
      std::vector<std::string> columns{"context",  "dense_tok_s",           "lsh_tok_s",
                                       "speedup",  "dense_attention_share", "lsh_attention_share",
                                       "cost2",    "index_build_s",         "kv_mib",
                                       "index_mib"};
      if (ti)
        columns.insert(columns.end(),
                       {"tuned_tok_s", "tuned_vs_lsh", "tuned_attention_share", "tuned_cost2"});
      if (xi)
        columns.insert(columns.end(), {"transform_tok_s", "transform_vs_lsh", "transform_vs_dense",
                                       "transform_attention_share", "transform_cost2",
                                       "transform_first_step_s", "transform_hash_mib"});
      csv = std::make_unique<pig::eval::Csv>(o.out + "/speed.csv", columns);
    }
    std::unique_ptr<pig::eval::Csv> csv_kv; // --kv A,B with --out: kv.csv
    if (!o.out.empty() && o.kv2)
      csv_kv = std::make_unique<pig::eval::Csv>(
          o.out + "/kv.csv",
          std::vector<std::string>{"context", "dense_tok_s", "dense2_tok_s", "lsh_tok_s",
                                   "lsh2_tok_s", "lsh2_vs_dense", "lsh2_vs_dense2",
                                   "dense2_vs_dense", "lsh2_vs_lsh", "kv_mib", "kv2_mib"});
    std::vector<std::pair<size_t, double>> x_vs_lsh; // per context: transform tok/s over LSH's
    for (size_t ctx : o.contexts) {
      std::vector<std::unique_ptr<KvCache>> tiled;
      for (lsh::DType t : {o.kv, o.kv2.value_or(o.kv)}) {
        if (!tiled.empty() && tiled[0]->dtype() == t)
          continue;
        tiled.push_back(std::make_unique<KvCache>(
            AttentionShape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, ctx}, t));
        tiled.back()->Tile(pre.attention().cache(), o.prefill, ctx);
      }
      const std::vector<Run> runs = DecodeAll(*model, pool, specs, tiled, ctx, feed);
      const Run &d = runs[0], &l = runs[1];
      const double kv_mib = double(tiled[0]->MemoryBytes()) / 1048576.0;
      if (d2i) {
        const Run &d2 = runs[d2i], &l2 = runs[d2i + 1];
        kv_rows.push_back(
            row_of({std::to_string(ctx), Fmt("%.1f", d.tokens_per_s), Fmt("%.1f", d2.tokens_per_s),
                    Fmt("%.1f", l.tokens_per_s), Fmt("%.1f", l2.tokens_per_s),
                    Fmt("%.2fx", l2.tokens_per_s / d.tokens_per_s),
                    Fmt("%.2fx", l2.tokens_per_s / d2.tokens_per_s),
                    Fmt("%.2fx", d2.tokens_per_s / d.tokens_per_s),
                    Fmt("%.2fx", l2.tokens_per_s / l.tokens_per_s), Fmt("%.0f", kv_mib),
                    Fmt("%.0f", double(tiled[1]->MemoryBytes()) / 1048576.0),
                    Fmt("%.0f", double(l2.stats.index_bytes) / 1048576.0)}));
        if (csv_kv)
          csv_kv->row({std::to_string(ctx), Fmt("%.2f", d.tokens_per_s),
                       Fmt("%.2f", d2.tokens_per_s), Fmt("%.2f", l.tokens_per_s),
                       Fmt("%.2f", l2.tokens_per_s), Fmt("%.3f", l2.tokens_per_s / d.tokens_per_s),
                       Fmt("%.3f", l2.tokens_per_s / d2.tokens_per_s),
                       Fmt("%.3f", d2.tokens_per_s / d.tokens_per_s),
                       Fmt("%.3f", l2.tokens_per_s / l.tokens_per_s), Fmt("%.1f", kv_mib),
                       Fmt("%.1f", double(tiled[1]->MemoryBytes()) / 1048576.0)});
      }
      const double index_mib = double(l.stats.index_bytes) / 1048576.0;
      std::vector<std::string> cells{std::to_string(ctx), Fmt("%.1f", d.tokens_per_s),
                                     Fmt("%.1f", l.tokens_per_s),
                                     Fmt("%.2fx", l.tokens_per_s / d.tokens_per_s)};
      std::string share =
          Fmt("%.0f %%", 100 * d.attention_share) + " / " + Fmt("%.0f %%", 100 * l.attention_share);
      if (ti) {
        const Run &t = runs[ti];
        cells.insert(cells.end(),
                     {Fmt("%.1f", t.tokens_per_s), Fmt("%.2fx", t.tokens_per_s / l.tokens_per_s)});
        share += " / " + Fmt("%.0f %%", 100 * t.attention_share);
      }
      if (xi) {
        const Run &x = runs[xi];
        cells.insert(cells.end(),
                     {Fmt("%.1f", x.tokens_per_s), Fmt("%.3fx", x.tokens_per_s / l.tokens_per_s),
                      Fmt("%.2fx", x.tokens_per_s / d.tokens_per_s)});
        share += " / " + Fmt("%.0f %%", 100 * x.attention_share);
        x_vs_lsh.push_back({ctx, x.tokens_per_s / l.tokens_per_s});
      }
      cells.push_back(share);
      cells.push_back(Fmt("%.2f %%", 100 * l.stats.cost2()));
      if (ti)
        cells.push_back(Fmt("%.2f %%", 100 * runs[ti].stats.cost2()));
      if (xi)
        cells.push_back(Fmt("%.2f %%", 100 * runs[xi].stats.cost2()));
      cells.push_back(Fmt("%.2f", l.first_step_s));
      if (xi)
        cells.push_back(Fmt("%.2f", runs[xi].first_step_s));
      cells.insert(cells.end(), {Fmt("%.0f", kv_mib), Fmt("%.0f", index_mib)});
      if (xi)
        cells.push_back(Fmt("%.1f", double(runs[xi].stats.hash_bytes) / 1048576.0));
      std::printf("%s\n", row_of(cells).c_str());
      std::fflush(stdout);
      if (csv) {
        std::vector<std::string> row{std::to_string(ctx),
                                     Fmt("%.2f", d.tokens_per_s),
                                     Fmt("%.2f", l.tokens_per_s),
                                     Fmt("%.3f", l.tokens_per_s / d.tokens_per_s),
                                     Fmt("%.3f", d.attention_share),
                                     Fmt("%.3f", l.attention_share),
                                     Fmt("%.4f", l.stats.cost2()),
                                     Fmt("%.2f", l.first_step_s),
                                     Fmt("%.1f", kv_mib),
                                     Fmt("%.1f", index_mib)};
        if (ti) {
          const Run &t = runs[ti];
          row.insert(row.end(),
                     {Fmt("%.2f", t.tokens_per_s), Fmt("%.3f", t.tokens_per_s / l.tokens_per_s),
                      Fmt("%.3f", t.attention_share), Fmt("%.4f", t.stats.cost2())});
        }
        if (xi) {
          const Run &x = runs[xi];
          row.insert(row.end(),
                     {Fmt("%.2f", x.tokens_per_s), Fmt("%.4f", x.tokens_per_s / l.tokens_per_s),
                      Fmt("%.3f", x.tokens_per_s / d.tokens_per_s), Fmt("%.3f", x.attention_share),
                      Fmt("%.4f", x.stats.cost2()), Fmt("%.2f", x.first_step_s),
                      Fmt("%.2f", double(x.stats.hash_bytes) / 1048576.0)});
        }
        csv->row(row);
      }
    }
    if (d2i) {
      const std::string a = lsh::to_string(o.kv), b = lsh::to_string(*o.kv2);
      std::vector<std::string> head{"context",
                                    "dense " + a + " tok/s",
                                    "dense " + b + " tok/s",
                                    "LSH " + a + " tok/s",
                                    "LSH " + b + " tok/s",
                                    "LSH " + b + " vs dense " + a,
                                    "LSH " + b + " vs dense " + b,
                                    "dense " + b + " vs " + a,
                                    "LSH " + b + " vs " + a,
                                    "KV MiB " + a,
                                    "KV MiB " + b,
                                    "index MiB"};
      std::string sep = "|";
      for (size_t i = 0; i < head.size(); ++i)
        sep += "---|";
      std::printf(
          "\nKV element types (--kv %s,%s), the same steps alternated with the above:\n%s\n%s\n",
          a.c_str(), b.c_str(), row_of(head).c_str(), sep.c_str());
      for (const std::string &r : kv_rows)
        std::printf("%s\n", r.c_str());
      csv_kv.reset();
    }
    if (xi && !x_vs_lsh.empty()) {
      // The target: hashing in the fitted space within 5 % of plain magicpig's speed.
      std::string per;
      double log_sum = 0;
      for (const auto &[ctx, r] : x_vs_lsh) {
        per += (per.empty() ? "" : ", ") + std::to_string(ctx) + ": " + Fmt("%.3fx", r);
        log_sum += std::log(r);
      }
      const double geo = std::exp(log_sum / double(x_vs_lsh.size()));
      std::printf("\n%s vs magicpig (LSH), decode tok/s: %s; geometric mean %.3fx (%s 5 %% of "
                  "magicpig's speed)\n",
                  xl.c_str(), per.c_str(), geo, geo >= 0.95 ? "within" : "NOT within");
    }
    if (csv) {
      csv.reset(); // flushed before gnuplot reads it
      const std::string data = "'" + o.out + "/speed.csv' every ::1 using 1:";
      const std::string xtitle = xl + " (--transform)";
      pig::eval::WriteFile(
          o.out + "/speed.gp",
          "set datafile separator ','\n"
          "set terminal pngcairo size 1000,420 noenhanced font ',10'\n"
          "set output '" +
              o.out +
              "/speed.png'\n"
              "set multiplot layout 1,2 title 'SmolLM2-135M decode, bf16 KV, " +
              std::to_string(pool.size()) +
              " threads (pig-bench-context)'\n"
              "set logscale x 2\nset grid\nset key top right\nset xlabel 'context (tokens)'\n"
              "set ylabel 'decode tokens/s'\nset title 'speed'\n"
              "plot " +
              data + "2 with linespoints title 'dense', " + data +
              "3 with linespoints title 'LSH sampling (10,150)'" +
              (ti ? ", " + data + "11 with linespoints title 'tuned (--tuning)'" : "") +
              (xi ? ", " + data + std::to_string(xcol) + " with linespoints title '" + xtitle + "'"
                  : "") +
              "\n"
              "set ylabel 'share of a step in attention'\nset title 'attention share'\n"
              "set yrange [0:1]\n"
              "plot " +
              data + "5 with linespoints title 'dense', " + data +
              "6 with linespoints title 'LSH sampling (10,150)'" +
              (ti ? ", " + data + "13 with linespoints title 'tuned (--tuning)'" : "") +
              (xi ? ", " + data + std::to_string(xcol + 3) + " with linespoints title '" + xtitle +
                        "'"
                  : "") +
              "\n"
              "unset multiplot\n");
      if (pig::eval::RunGnuplot(o.out + "/speed.gp"))
        std::printf("\nwrote %s/speed.csv and %s/speed.png\n", o.out.c_str(), o.out.c_str());
    }
    // Which kernel sets served LSH and, with --tuning, the point's configurations.
    const AttentionShape probe_shape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, 16};
    std::printf("\nkernels: %s\n", MakeAttention(lsh, probe_shape)->stats().kernels.c_str());
    if (ti)
      std::printf("tuned kernels: %s\n",
                  MakeAttention(specs[ti], probe_shape)->stats().kernels.c_str());
    if (xi)
      std::printf("%s kernels: %s\n", xl.c_str(),
                  MakeAttention(specs[xi], probe_shape)->stats().kernels.c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-bench-context: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
