#include "context_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pig/app/text.h"
#include "pig/spec/files.h"
#include "pig/spec/kv_type.h"

namespace pig::bench {
namespace {

namespace lsh = pig::runtime::lsh;
using Run = pig::app::DecodeRun;

std::string Fmt(const char *f, double v) { return pig::app::Format(f, v); }

} // namespace

// The extra method's memory beside the KV cache: a transform's fitted hashing, or lsh-hybrid's
// index (its sketches), or --lsh2's LSH index.
double ContextTable::ExtraMib(const Run &x) const {
  return double(IndexKey() ? x.stats.index_bytes : x.stats.hash_bytes) / 1048576.0;
}

ContextTable::ContextTable(const ContextMethods &m, lsh::DType kv, std::optional<lsh::DType> kv2,
                           std::string out)
    : ti_(m.tuned), xi_(m.extra), d2i_(m.kv2), xl_(m.extra_name), xkey_(m.extra_key),
      xtarget_(m.extra_target), kv_(kv), kv2_(kv2), out_(std::move(out)),
      xcol_(11 + (ti_ ? 4 : 0)) {
  std::vector<std::string> head{"context", "dense tok/s", "LSH tok/s", "speed-up"};
  if (ti_)
    head.insert(head.end(), {"tuned tok/s", "tuned vs LSH"});
  if (xi_)
    head.insert(head.end(), {xl_ + " tok/s", xl_ + " vs LSH", xl_ + " vs dense"});
  head.push_back(std::string("attention share (dense / LSH") + (ti_ ? " / tuned" : "") +
                 (xi_ ? " / " + xl_ : "") + ")");
  head.push_back("cost2");
  if (ti_)
    head.push_back("tuned cost2");
  if (xi_)
    head.push_back(xl_ + " cost2");
  head.push_back("index build (s)");
  if (xi_)
    head.push_back(xl_ + " first step (s)");
  head.insert(head.end(), {"KV MiB", "index MiB"});
  if (xi_)
    head.push_back(xl_ + (IndexKey() ? " index MiB" : " hash MiB"));
  std::printf("\n%s\n", pig::app::MarkdownRow(head).c_str());
  std::printf("%s\n", pig::app::MarkdownSeparator(head.size()).c_str());
  if (!out_.empty()) {
    pig::spec::MakeDirs(out_);
    std::vector<std::string> columns{"context",  "dense_tok_s",           "lsh_tok_s",
                                     "speedup",  "dense_attention_share", "lsh_attention_share",
                                     "cost2",    "index_build_s",         "kv_mib",
                                     "index_mib"};
    if (ti_)
      columns.insert(columns.end(),
                     {"tuned_tok_s", "tuned_vs_lsh", "tuned_attention_share", "tuned_cost2"});
    if (xi_)
      for (const char *c :
           {"_tok_s", "_vs_lsh", "_vs_dense", "_attention_share", "_cost2", "_first_step_s"})
        columns.push_back(xkey_ + c);
    if (xi_)
      columns.push_back(xkey_ + (IndexKey() ? "_index_mib" : "_hash_mib"));
    csv_ = std::make_unique<pig::eval::Csv>(out_ + "/speed.csv", columns);
  }
  if (!out_.empty() && kv2_)
    csv_kv_ = std::make_unique<pig::eval::Csv>(
        out_ + "/kv.csv",
        std::vector<std::string>{"context", "dense_tok_s", "dense2_tok_s", "lsh_tok_s",
                                 "lsh2_tok_s", "lsh2_vs_dense", "lsh2_vs_dense2", "dense2_vs_dense",
                                 "lsh2_vs_lsh", "kv_mib", "kv2_mib"});
}

void ContextTable::Add(size_t ctx, const std::vector<Run> &runs,
                       const std::vector<std::unique_ptr<runtime::KvCache>> &tiled) {
  const Run &d = runs[0], &l = runs[1];
  const double kv_mib = double(tiled[0]->MemoryBytes()) / 1048576.0;
  if (d2i_) {
    const Run &d2 = runs[d2i_], &l2 = runs[d2i_ + 1];
    kv_rows_.push_back(pig::app::MarkdownRow(
        {std::to_string(ctx), Fmt("%.1f", d.tokens_per_s), Fmt("%.1f", d2.tokens_per_s),
         Fmt("%.1f", l.tokens_per_s), Fmt("%.1f", l2.tokens_per_s),
         Fmt("%.2fx", l2.tokens_per_s / d.tokens_per_s),
         Fmt("%.2fx", l2.tokens_per_s / d2.tokens_per_s),
         Fmt("%.2fx", d2.tokens_per_s / d.tokens_per_s),
         Fmt("%.2fx", l2.tokens_per_s / l.tokens_per_s), Fmt("%.0f", kv_mib),
         Fmt("%.0f", double(tiled[1]->MemoryBytes()) / 1048576.0),
         Fmt("%.0f", double(l2.stats.index_bytes) / 1048576.0)}));
    if (csv_kv_)
      csv_kv_->row({std::to_string(ctx), Fmt("%.2f", d.tokens_per_s), Fmt("%.2f", d2.tokens_per_s),
                    Fmt("%.2f", l.tokens_per_s), Fmt("%.2f", l2.tokens_per_s),
                    Fmt("%.3f", l2.tokens_per_s / d.tokens_per_s),
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
  if (ti_) {
    const Run &t = runs[ti_];
    cells.insert(cells.end(),
                 {Fmt("%.1f", t.tokens_per_s), Fmt("%.2fx", t.tokens_per_s / l.tokens_per_s)});
    share += " / " + Fmt("%.0f %%", 100 * t.attention_share);
  }
  if (xi_) {
    const Run &x = runs[xi_];
    cells.insert(cells.end(),
                 {Fmt("%.1f", x.tokens_per_s), Fmt("%.3fx", x.tokens_per_s / l.tokens_per_s),
                  Fmt("%.2fx", x.tokens_per_s / d.tokens_per_s)});
    share += " / " + Fmt("%.0f %%", 100 * x.attention_share);
    x_vs_lsh_.push_back({ctx, x.tokens_per_s / l.tokens_per_s});
  }
  cells.push_back(share);
  cells.push_back(Fmt("%.2f %%", 100 * l.stats.cost2()));
  if (ti_)
    cells.push_back(Fmt("%.2f %%", 100 * runs[ti_].stats.cost2()));
  if (xi_)
    cells.push_back(Fmt("%.2f %%", 100 * runs[xi_].stats.cost2()));
  cells.push_back(Fmt("%.2f", l.first_step_s));
  if (xi_)
    cells.push_back(Fmt("%.2f", runs[xi_].first_step_s));
  cells.insert(cells.end(), {Fmt("%.0f", kv_mib), Fmt("%.0f", index_mib)});
  if (xi_)
    cells.push_back(Fmt("%.1f", ExtraMib(runs[xi_])));
  std::printf("%s\n", pig::app::MarkdownRow(cells).c_str());
  std::fflush(stdout);
  if (csv_) {
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
    if (ti_) {
      const Run &t = runs[ti_];
      row.insert(row.end(),
                 {Fmt("%.2f", t.tokens_per_s), Fmt("%.3f", t.tokens_per_s / l.tokens_per_s),
                  Fmt("%.3f", t.attention_share), Fmt("%.4f", t.stats.cost2())});
    }
    if (xi_) {
      const Run &x = runs[xi_];
      row.insert(row.end(),
                 {Fmt("%.2f", x.tokens_per_s), Fmt("%.4f", x.tokens_per_s / l.tokens_per_s),
                  Fmt("%.3f", x.tokens_per_s / d.tokens_per_s), Fmt("%.3f", x.attention_share),
                  Fmt("%.4f", x.stats.cost2()), Fmt("%.2f", x.first_step_s),
                  Fmt("%.2f", ExtraMib(x))});
    }
    csv_->row(row);
  }
}

void ContextTable::Finish(size_t threads) {
  if (d2i_) {
    const std::string a = lsh::to_string(kv_), b = lsh::to_string(*kv2_);
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
    const std::string sep = pig::app::MarkdownSeparator(head.size());
    std::printf(
        "\nKV element types (--kv %s,%s), the same steps alternated with the above:\n%s\n%s\n",
        a.c_str(), b.c_str(), pig::app::MarkdownRow(head).c_str(), sep.c_str());
    for (const std::string &r : kv_rows_)
      std::printf("%s\n", r.c_str());
    csv_kv_.reset();
  }
  if (xi_ && !x_vs_lsh_.empty()) {
    // The target: e.g. hashing in a fitted space within 5 % of plain magicpig's speed.
    std::string per;
    double log_sum = 0;
    for (const auto &[ctx, r] : x_vs_lsh_) {
      per += (per.empty() ? "" : ", ") + std::to_string(ctx) + ": " + Fmt("%.3fx", r);
      log_sum += std::log(r);
    }
    const double geo = std::exp(log_sum / double(x_vs_lsh_.size()));
    std::printf("\n%s vs magicpig (LSH), decode tok/s: %s; geometric mean %.3fx", xl_.c_str(),
                per.c_str(), geo);
    if (xtarget_ > 0)
      std::printf(" (target %.2fx: %s)", xtarget_, geo >= xtarget_ ? "met" : "NOT met");
    std::printf("\n");
  }
  if (csv_) {
    csv_.reset(); // flushed before gnuplot reads it
    const std::string data = "'" + out_ + "/speed.csv' every ::1 using 1:";
    const std::string xtitle = xl_ + " (--" + xkey_ + ")";
    pig::spec::WriteFileAtomically(
        out_ + "/speed.gp",
        "set datafile separator ','\n"
        "set terminal pngcairo size 1000,420 noenhanced font ',10'\n"
        "set output '" +
            out_ +
            "/speed.png'\n"
            "set multiplot layout 1,2 title 'SmolLM2-135M decode, bf16 KV, " +
            std::to_string(threads) +
            " threads (pig-bench-context)'\n"
            "set logscale x 2\nset grid\nset key top right\nset xlabel 'context (tokens)'\n"
            "set ylabel 'decode tokens/s'\nset title 'speed'\n"
            "plot " +
            data + "2 with linespoints title 'dense', " + data +
            "3 with linespoints title 'LSH sampling (10,150)'" +
            (ti_ ? ", " + data + "11 with linespoints title 'tuned (--tuning)'" : "") +
            (xi_ ? ", " + data + std::to_string(xcol_) + " with linespoints title '" + xtitle + "'"
                 : "") +
            "\n"
            "set ylabel 'share of a step in attention'\nset title 'attention share'\n"
            "set yrange [0:1]\n"
            "plot " +
            data + "5 with linespoints title 'dense', " + data +
            "6 with linespoints title 'LSH sampling (10,150)'" +
            (ti_ ? ", " + data + "13 with linespoints title 'tuned (--tuning)'" : "") +
            (xi_ ? ", " + data + std::to_string(xcol_ + 3) + " with linespoints title '" + xtitle +
                       "'"
                 : "") +
            "\n"
            "unset multiplot\n");
    if (pig::eval::RunGnuplot(out_ + "/speed.gp"))
      std::printf("\nwrote %s/speed.csv and %s/speed.png\n", out_.c_str(), out_.c_str());
  }
}

void PrintStepParts(size_t ctx, const StepFloors &f, const std::vector<Run> &runs,
                    const std::vector<runtime::AttentionSpec> &specs,
                    const std::vector<std::pair<size_t, std::string>> &which) {
  struct Part {
    std::string name;
    std::vector<double> ms, floor_ms; // per method; floor < 0: none
  };
  std::vector<Part> rows{{"step (measured)", {}, {}},
                         {"weights and the rest (norms, RoPE, logits)", {}, {}},
                         {"dense attention (dense layers, short groups)", {}, {}},
                         {"query encode", {}, {}},
                         {"key encode and insert (index extension)", {}, {}},
                         {"retrieval (bucket walks)", {}, {}},
                         {"sampled pass (and merge)", {}, {}},
                         {"stall (an item waiting for its group)", {}, {}},
                         {"attention outside the parts (scheduling, imbalance)", {}, {}},
                         {"of the step: the pool's caller waiting", {}, {}}};
  const double T = double(f.threads), H = double(f.n_kv_heads);
  for (const auto &[i, name] : which) {
    const Run &r = runs[i];
    const runtime::AttentionSpec &s = specs[i];
    const double n = double(std::max<size_t>(r.steps, 1)), to_ms = 1e3 / n;
    const double row = double(pig::spec::row_bytes(s.kv_dtype, f.head_dim)) * 2; // K and V
    const bool dense = s.method == pig::spec::Method::dense;
    const double dense_layers =
        dense ? double(f.n_layers) : double(s.DenseLayers(f.n_layers).size());
    const double sparse = double(f.n_layers) - dense_layers;
    const runtime::StepParts &p = r.timed.parts;
    const double KLd = double(s.K) * double(s.L) * double(f.head_dim);
    auto ms = [&](double thread_s) { return thread_s / T * to_ms; };
    const double attn = r.attention_s * to_ms;
    const double in_parts = dense ? attn : ms(p.total());
    const double floors[] = {
        -1, 1e3 * f.weight_bytes / f.bandwidth,
        1e3 * dense_layers * H * double(ctx) * row / f.bandwidth,
        dense ? -1 : 1e3 * sparse * double(f.n_heads) * KLd / f.f32_macs,
        dense ? -1 : 1e3 * sparse * H * KLd / f.f32_macs,
        dense ? -1 : 1e3 * r.timed.index_bytes_read / n / f.bandwidth,
        // Rows read: a group's union (LSH) or, for methods whose heads read apart (lsh-hybrid:
        // gathered 0), every head's own.
        dense ? -1
              : 1e3 *
                    ((r.timed.gathered > 0 ? r.timed.gathered : r.timed.sampled) / n +
                     sparse * H * double(s.sink + s.local)) *
                    row / f.bandwidth,
        -1, -1, -1};
    const double times[] = {r.step_s * to_ms,
                            (r.step_s - r.attention_s) * to_ms,
                            dense ? attn : ms(p.dense),
                            ms(p.encode),
                            ms(p.extend),
                            ms(p.retrieve),
                            ms(p.sampled),
                            ms(p.stall),
                            attn - in_parts,
                            r.waits.seconds * to_ms};
    double floor_sum = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      rows[k].ms.push_back(times[k]);
      rows[k].floor_ms.push_back(floors[k]);
      floor_sum += std::max(floors[k], 0.0);
    }
    rows[0].floor_ms.back() = floor_sum;
  }
  std::printf("\nWhere a step's time goes at context %zu: ms per token over the timed steps; "
              "parts inside attention are thread-time / %zu threads; floors: bytes / %.1f GB/s "
              "and multiply-accumulates / %.1f GMAC/s (f32 FMA), both measured in this run; the "
              "step's floor is their sum\n",
              ctx, f.threads, f.bandwidth / 1e9, f.f32_macs / 1e9);
  std::vector<std::string> head{"part"};
  for (const auto &[i, name] : which)
    head.insert(head.end(), {name + " ms", name + " floor", name + " / floor"});
  std::printf("%s\n%s\n", pig::app::MarkdownRow(head).c_str(),
              pig::app::MarkdownSeparator(head.size()).c_str());
  for (const Part &p : rows) {
    std::vector<std::string> cells{p.name};
    bool any = false;
    for (size_t m = 0; m < which.size(); ++m) {
      const double t = p.ms[m], fl = p.floor_ms[m];
      any = any || std::abs(t) >= 0.005 || fl > 0;
      cells.push_back(Fmt("%.2f", t));
      cells.push_back(fl >= 0 ? Fmt("%.2f", fl) : "-");
      cells.push_back(fl > 0 ? Fmt("%.1fx", t / fl) : "-");
    }
    if (any)
      std::printf("%s\n", pig::app::MarkdownRow(cells).c_str());
  }
}

} // namespace pig::bench
