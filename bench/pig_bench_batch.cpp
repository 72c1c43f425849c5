// pig-bench-batch: batched decode throughput of the real model (LlamaBatch), dense against LSH
// sampling attention, at each batch size and context, every B's throughput as a ratio to B = 1
// measured in the same run, beside the step's floors (bytes over the measured bandwidth, weight
// multiply-accumulates over the measured kernel rate); then prefill tokens/s.
//
// The contexts are made like pig-bench-context's: one dense prefill of the longest context's tokens
// of distinct text, kept on disk (--kv-cache-dir), each context its first tokens; or, with --tile,
// a --prefill of real text whose keys and values repeat up to each context. Every sequence of a
// batch loads the tiled cache and decodes the same tokens; a batch whose Attentions do not fit
// --memory-budget is refused by LlamaBatch and the row says so. The first step of each batch (which
// builds the LSH indexes) is reported apart; the next --steps are timed. Usage: pig-bench-batch
// [--model FILE] [--batches 1,2,4,8,16,32] [--contexts 1024,8192,16384]
//                        [--steps N] [--tile --prefill N] [--prompts 512,4096] [--memory-budget
//                        GIB]
//                        [--text FILE] [--kv-cache-dir DIR]
//                        [--threads N] [attention options: --attention magicpig --lsh ... --kv]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/report.h"
#include "pig/app/text.h"
#include "pig/app/tiled_decode.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

namespace {

using namespace pig::runtime;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  pig::app::ModelOptions model;
  pig::app::LongContextOptions ctx; // --text, --tile --prefill, --kv-cache-dir
  size_t steps = 4, threads = 0;
  std::vector<size_t> batches{1, 2, 4, 8, 16, 32}, contexts{1024, 8192, 16384}, prompts{512, 4096};
  double budget_gib = 10;
  MatMulPath decode_path = MatMulPath::kInteger;
  bool batch_hash = true;
  AttentionSpec lsh;
};

void ListOption(CLI::App &app, const std::string &name, std::vector<size_t> &list,
                const std::string &what, size_t lo, size_t hi) {
  std::string shown;
  for (size_t v : list)
    shown += (shown.empty() ? "" : ",") + std::to_string(v);
  app.add_option_function<std::string>(
         name,
         [&list](const std::string &v) {
           list.clear();
           for (size_t x : pig::app::ParseList(v))
             list.push_back(x);
         },
         what + " (default " + shown + ")")
      ->check(pig::app::IntegerList(lo, hi))
      ->type_name("LIST");
}

Options ParseOptions(int argc, char **argv) {
  Options o;
  o.lsh.method = pig::spec::Method::magicpig;
  o.lsh.dense_below = AttentionSpec::kDenseBelowMeasured; // short contexts decode densely
  CLI::App app{"Batched decode throughput (LlamaBatch), dense against LSH sampling attention, at "
               "each batch size and context: each B as a ratio to B = 1 of the same run, beside "
               "the step's byte and compute floors; then prefill tokens/s.",
               "pig-bench-batch"};
  pig::app::Init(app);
  pig::app::AddModelOptions(app, o.model, false, /*rope=*/true);
  pig::app::AddThreadsOption(app, o.threads);
  pig::app::AddAttentionOptions(app, o.lsh);
  pig::app::AddKvOption(app, o.lsh.kv_dtype);
  ListOption(app, "--batches", o.batches, "batch sizes", 1, LlamaBatch::Options{}.max_rows);
  ListOption(app, "--contexts", o.contexts, "context lengths", 1, size_t(1) << 24);
  ListOption(app, "--prompts", o.prompts, "prefill lengths measured at the end (0: none)", 0,
             size_t(1) << 20);
  app.add_option("--steps", o.steps, "timed decode steps per batch (after the first)")
      ->check(pig::app::Integer(1, 1 << 16))
      ->capture_default_str();
  o.ctx.prefill = 1024;
  pig::app::AddLongContextOptions(app, o.ctx);
  app.add_option("--memory-budget", o.budget_gib,
                 "GiB of KV caches and indexes a batch may hold (LlamaBatch::Options)")
      ->check(pig::app::Number(0, 1 << 20, true))
      ->capture_default_str();
  app.add_flag("--batch-hash,!--no-batch-hash", o.batch_hash,
               "decode rows of all sequences hash their keys and queries in one encode per layer "
               "(the default; LlamaBatchOptions::batch_hash), or each sequence its own")
      ->capture_default_str();
  app.add_option("--decode-path", o.decode_path,
                 "decode rows' weight kernels: integer (logits of decoding alone) or float "
                 "(faster at large batches on AVX2; LlamaBatchOptions::decode_path)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, MatMulPath>{{"integer", MatMulPath::kInteger},
                                            {"float", MatMulPath::kFloat}},
          CLI::ignore_case))
      ->default_str("integer");
  pig::app::Parse(app, argc, argv);
  if (o.lsh.method == pig::spec::Method::dense)
    pig::app::UsageError(app, "--attention: dense is always measured; name the method beside it");
  return o;
}

// One batch: B sequences at `context`, each loaded from the tiled cache.
struct BatchRun {
  bool refused = false;
  std::string why;
  double tokens_per_s = 0, first_step_s = 0, step_s = 0;
  double kv_read = 0; // bytes of K, V and index read per step (all sequences)
  size_t memory = 0;  // the batch's Attentions
};

BatchRun RunBatch(const LlamaModel &model, ThreadPool &pool, const AttentionSpec &spec,
                  const KvCache &tiled, size_t context, size_t b, const std::vector<int32_t> &feed,
                  size_t budget, MatMulPath path, bool batch_hash) {
  const LlamaConfig &c = model.config();
  const AttentionShape shape = c.Shape(context + feed.size());
  BatchRun r;
  LlamaBatch batch(model, pool,
                   LlamaBatch::Options{std::max<size_t>(b, 1), budget, path, batch_hash});
  std::vector<size_t> seqs;
  try {
    for (size_t i = 0; i < b; ++i) {
      std::unique_ptr<Attention> a = MakeAttention(spec, shape, batch.KvPoolOf(spec.kv_dtype));
      a->LoadPrefix(tiled, context);
      seqs.push_back(batch.Add(std::move(a)));
      batch.SetPosition(seqs.back(), context);
    }
  } catch (const std::length_error &e) {
    r.refused = true;
    r.why = e.what();
    return r;
  }
  std::vector<int32_t> tokens(b);
  auto step = [&](size_t i) {
    std::fill(tokens.begin(), tokens.end(), feed[i]);
    const auto t0 = Clock::now();
    batch.Step(tokens.data(), seqs.data(), b, nullptr);
    return Since(t0);
  };
  r.first_step_s = step(0);
  CostCounters before;
  for (size_t s : seqs)
    before += batch.attention(s).stats();
  double total = 0;
  for (size_t i = 1; i < feed.size(); ++i)
    total += step(i);
  CostCounters after;
  for (size_t s : seqs)
    after += batch.attention(s).stats();
  const size_t timed = feed.size() - 1;
  r.step_s = total / double(timed);
  r.tokens_per_s = double(b * timed) / total;
  // Bytes read per step: dense layers read every cached row; sampled layers their index traffic
  // and the rows of the sample sets' unions (the static window's rows are not counted).
  const size_t row = pig::spec::row_bytes(spec.kv_dtype, c.head_dim) * 2; // K and V
  const size_t dense_layers =
      spec.method == pig::spec::Method::dense ? c.n_layers : spec.DenseLayers(c.n_layers).size();
  r.kv_read = double(b * dense_layers * c.n_kv_heads * context * row) +
              (after.index_bytes_read - before.index_bytes_read +
               (after.gathered - before.gathered) * double(row)) /
                  double(timed);
  r.memory = batch.MemoryBytes();
  return r;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = ParseOptions(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // each row as it is measured, into a file too
  try {
    pig::app::RegisterKernels();
    auto model = LlamaModel::Load(o.model.path, o.model.overrides);
    const LlamaConfig &c = model->config();
    o.lsh.Validate(c.n_layers);
    ThreadPool pool(o.threads);
    const double bw = pig::app::MeasureReadBandwidth(pool);
    const double macs = pig::app::MeasureWeightMacRate(pool);
    const double weight_bytes = double(model->WeightBytesPerToken());
    double params = 0; // multiply-accumulates of one token through every matrix
    for (size_t l = 0; l < c.n_layers; ++l) {
      const LayerWeights &w = model->layer(l);
      for (const WeightMatrix *m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down})
        params += double(m->rows * m->cols);
    }
    params += double(model->output().rows * model->output().cols);

    // Distinct text: the longest context's tokens are prefilled, each context's sequences decode
    // the text's tokens after its end. Tiled: --prefill tokens, then the next ones.
    const size_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
    const size_t n_pre = o.ctx.Prefilled(max_ctx);
    size_t need = n_pre + o.steps + 1;
    for (size_t n : o.prompts)
      need = std::max(need, n);
    const std::vector<int32_t> text =
        pig::app::LongText(model->tokenizer(), o.ctx.text, need, o.ctx.tile);
    auto feed_of = [&](size_t ctx) {
      const size_t at = o.ctx.FeedStart(ctx);
      return std::vector<int32_t>(text.begin() + std::ptrdiff_t(at),
                                  text.begin() + std::ptrdiff_t(at + o.steps + 1));
    };
    AttentionSpec dense;
    dense.kv_dtype = o.lsh.kv_dtype;
    const pig::app::KeptPrefill pre = pig::app::PrefillKept(
        *model, o.model.path, pool,
        std::vector<int32_t>(text.begin(), text.begin() + std::ptrdiff_t(n_pre)), dense.kv_dtype,
        o.ctx.kv_cache_dir);

    std::printf("pig-bench-batch: %s, %zu threads, kernels %s, KV %s, decode path %s, %s\n",
                o.model.path.c_str(), pool.size(), BestKernels().target,
                lsh::to_string(o.lsh.kv_dtype),
                o.decode_path == MatMulPath::kFloat ? "float" : "integer",
                o.batch_hash ? "one encode per layer" : "an encode per sequence");
    std::printf("contexts: %s\n", o.ctx.Describe(pre, n_pre).c_str());
    const Kernels &k = BestKernels();
    const double int8_peak = pig::app::MeasurePeakMacRate(pool, k.int8_peak_loop);
    const double f32_peak = pig::app::MeasurePeakMacRate(pool, k.f32_peak_loop);
    std::printf("machine: read bandwidth %.1f GB/s, weight kernels %.1f GMAC/s (measured here)\n",
                bw / 1e9, macs / 1e9);
    std::printf("peaks (register-only loops, %zu threads): integer path %s %.1f GMAC/s; f32 path "
                "FMA %.1f GMAC/s\n",
                pool.size(), k.int8_instruction, int8_peak / 1e9, f32_peak / 1e9);
    std::printf("weight kernels by rows (GMAC/s and share of their instruction's peak, "
                "cache-resident Q4_1 576 columns):\n");
    std::printf("%-5s %9s %6s %9s %6s\n", "rows", "integer", "peak", "f32", "peak");
    for (size_t rows : {1, 2, 4, 8, 16, 32, 64}) {
      const double ri = pig::app::MeasureWeightMacRate(pool, MatMulPath::kInteger, rows);
      const double rf = pig::app::MeasureWeightMacRate(pool, MatMulPath::kFloat, rows);
      std::printf("%-5zu %9.1f %5.0f%% %9.1f %5.0f%%\n", rows, ri / 1e9, 100 * ri / int8_peak,
                  rf / 1e9, 100 * rf / f32_peak);
    }
    std::printf("weights: %.1f MB and %.1f M multiply-accumulates per token; %s\n",
                weight_bytes / 1e6, params / 1e6, o.lsh.str(c.n_layers).c_str());
    std::printf("packed at load for the integer path: %.1f MB in %.2f s\n",
                double(model->PackedBytes()) / 1e6, model->PackSeconds());
    std::printf("floors per step: bytes = (weights + K/V/index read) / bandwidth, compute = "
                "B x weight MACs / kernel rate; floor = the larger (attention compute not "
                "counted)\n");
    const size_t budget = size_t(o.budget_gib * double(1ull << 30));
    std::unique_ptr<KvCache> tiled; // distinct text: the prefill's own cache
    if (o.ctx.tile)
      tiled = pig::app::TileCache(pre.kv(), n_pre, max_ctx, o.lsh.kv_dtype);
    const KvCache &source = tiled ? *tiled : pre.kv();
    const AttentionSpec *specs[2] = {&dense, &o.lsh};
    for (size_t ctx : o.contexts) {
      // Each B runs dense, then the sampling method, before the next B: the two tables' rows of
      // one B are measured minutes apart at most, and their ratio is printed with the second.
      std::vector<BatchRun> runs[2];
      for (size_t b : o.batches)
        for (size_t m = 0; m < 2; ++m) {
          std::fprintf(stderr, "pig-bench-batch: context %zu, %s, B = %zu\n", ctx,
                       specs[m]->method_name(), b);
          runs[m].push_back(RunBatch(*model, pool, *specs[m], source, ctx, b, feed_of(ctx), budget,
                                     o.decode_path, o.batch_hash));
        }
      for (size_t m = 0; m < 2; ++m) {
        std::printf("\ncontext %zu, %s\n", ctx, specs[m]->method_name());
        std::printf("%-4s %11s %7s %9s %11s %11s %8s %10s %9s%s\n", "B", "tokens/s", "vs B=1",
                    "step ms", "bytes ms", "compute ms", "floor", "first s", "MiB",
                    m ? "  vs dense" : "");
        double base = 0;
        for (size_t i = 0; i < o.batches.size(); ++i) {
          const size_t b = o.batches[i];
          const BatchRun &r = runs[m][i];
          if (r.refused) {
            std::printf("%-4zu refused: %s\n", b, r.why.c_str());
            continue;
          }
          if (b == 1)
            base = r.tokens_per_s;
          const double bytes_ms = 1e3 * (weight_bytes + r.kv_read) / bw;
          const double compute_ms = 1e3 * double(b) * params / macs;
          const double floor_ms = std::max(bytes_ms, compute_ms);
          const std::string ratio =
              base > 0 ? pig::app::Format("%.2fx", r.tokens_per_s / base) : std::string("-");
          const BatchRun &d = runs[0][i];
          const std::string vs =
              m && !d.refused ? pig::app::Format("  %.2fx", r.tokens_per_s / d.tokens_per_s) : "";
          std::printf("%-4zu %11.1f %7s %9.1f %11.1f %11.1f %7.0f%% %10.2f %9.0f%s\n", b,
                      r.tokens_per_s, ratio.c_str(), 1e3 * r.step_s, bytes_ms, compute_ms,
                      100 * floor_ms / (1e3 * r.step_s), r.first_step_s, pig::app::MiB(r.memory),
                      vs.c_str());
        }
      }
    }
    std::printf("\n(floor: the share of the step the larger floor accounts for; 100%% is the "
                "machine's limit)\n");
    // Each path's kernel rate at its best row count (64 f32, 16 integer), measured once: the
    // prefill lines print the tokens/s the weights alone would allow at that rate.
    double path_rate[2] = {0, 0};
    if (std::any_of(o.prompts.begin(), o.prompts.end(), [](size_t n) { return n > 0; })) {
      path_rate[0] = pig::app::MeasureWeightMacRate(pool, MatMulPath::kFloat, 64);
      path_rate[1] = pig::app::MeasureWeightMacRate(pool, MatMulPath::kInteger, 16);
    }
    for (size_t n : o.prompts) {
      if (n == 0)
        continue;
      const std::vector<int32_t> prompt(text.begin(), text.begin() + std::ptrdiff_t(n));
      for (MatMulPath path : {MatMulPath::kFloat, MatMulPath::kInteger}) {
        LlamaSession s(*model, pool, n, MakeAttention(dense, c.Shape(n)));
        s.set_prefill_path(path);
        const auto t0 = Clock::now();
        s.Forward(prompt.data(), n, nullptr);
        const double sec = Since(t0);
        const bool f32 = path == MatMulPath::kFloat;
        std::printf("prefill %zu tokens, %s path: %.1f tokens/s (%.2f s; the weights alone at "
                    "the kernel's rate: %.1f tokens/s)\n",
                    n, f32 ? "f32" : "integer", double(n) / sec, sec,
                    path_rate[f32 ? 0 : 1] / params);
      }
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-bench-batch: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
