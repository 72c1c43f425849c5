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
//
// This main parses the command line; the workflows are pig_tune_workflows'
// (pig/tune/workflows.h).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pig/runtime/model.h"
#include "pig/tune/workflows.h"

#ifdef PIG_HAVE_GENERATED_KERNELS
#include "pig/Codegen/GeneratedKernels.h"
#endif

namespace {

namespace tune = pig::tune;

// Ctrl-C: the first asks every loop to stop after the record it is writing (records so far
// stay); the second exits at once.
std::atomic<bool> g_stop{false};
extern "C" void OnSigint(int) {
  if (g_stop.exchange(true))
    std::_Exit(130);
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
  tune::CommonOptions common;
  common.model = pig::runtime::DefaultModelPath();
  common.stop = &g_stop;
  app.add_option("--records", common.records, "tuning records, JSON Lines (appended)")
      ->capture_default_str();
  app.add_option("--model", common.model, "GGUF model")->capture_default_str();
  app.add_option("--threads", common.threads, "threads (0: every core)")->capture_default_str();

  tune::AccuracyOptions ao;
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

  tune::SpeedRunOptions sc;
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
  spd->add_option("--min-rounds", sc.harness.min_rounds)->capture_default_str();
  spd->add_option("--max-rounds", sc.harness.max_rounds)->capture_default_str();
  spd->add_option("--min-time", sc.harness.min_time_s, "seconds measured per candidate at least")
      ->capture_default_str();
  spd->add_option("--drop-ratio", sc.harness.drop_ratio,
                  "drop a candidate slower than this times the best (inf: never)")
      ->capture_default_str();
  spd->add_option("--time-limit", sc.harness.time_limit_s, "seconds per context (0: none)")
      ->capture_default_str();

  tune::SelectOptions so;
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

  tune::EmitManifestOptions eo;
  auto *em = app.add_subcommand("emit-manifest", "the configs/kernels.txt lines of a point");
  em->add_option("point", eo.point, "operating point file")->required();
  em->add_option("--out", eo.out, "write here (default: stdout)");
  em->add_option("--manifest", eo.manifest,
                 "leave out the lines this manifest lists (configs/kernels.txt)");
  em->add_flag("--append", eo.append, "append the missing lines to --manifest");

  tune::ShowOptions sho;
  auto *sh = app.add_subcommand("show", "the frontier: tables and a PNG");
  sh->add_option("--out", sho.out, "directory for frontier.png and the CSVs");
  sh->add_option("--data-hash", sho.select.data_hash, "quality records of this data hash");
  sh->add_option("--context", sho.select.context, "context of the speed records (0: the largest)");
  sh->add_option("--as-machine", sho.select.as_machine, "replay as another machine (tests)")
      ->group("");

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
      return tune::RunAccuracy(common, ao);
    }
    if (*spd) {
      sc.contexts = SizeList(sctx);
      return tune::RunSpeed(common, sc);
    }
    if (*sel) {
      if (!so.max_error && !so.max_cost2 && !so.min_speedup)
        throw CLI::ValidationError("select", "give --max-error, --max-cost2 or --min-speedup");
      return tune::RunSelect(common, so);
    }
    if (*em)
      return tune::RunEmitManifest(eo);
    if (*sh)
      return tune::RunShow(common, sho);
  } catch (const CLI::ParseError &e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const tune::UsageError &e) {
    // A bad option value found while running: reported as a bad command line.
    return app.exit(CLI::ValidationError(e.option(), e.message())) == 0 ? 0 : 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-tune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
