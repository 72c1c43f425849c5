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
//   pig-tune hybrid          lsh-hybrid's knobs on the model's real KV caches at MagicPIG's cost2
//                            (a hybrid point for --hybrid @FILE)
//
// Every measurement is one JSON Lines record appended atomically to --records (pig-tune.jsonl):
// Ctrl-C keeps every record written so far, and a rerun skips what is already measured. select,
// emit-manifest and show only read records (replay: no model, no measurement).
//
// This main parses the command line (pig::app's shared groups and validators on CLI11); the
// subcommands are pig_tune_workflows' (workflows.h, beside this file).
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/runtime/model.h"
#include "workflows.h"

namespace {

namespace tune = pig::tune;

// Ctrl-C: the first asks every loop to stop after the record it is writing (records so far
// stay); the second exits at once.
std::atomic<bool> g_stop{false};
extern "C" void OnSigint(int) {
  if (g_stop.exchange(true))
    std::_Exit(130);
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// --contexts LIST: KV cache lengths.
void AddContexts(CLI::App &sub, std::vector<size_t> &contexts, const std::string &description) {
  std::string def;
  for (size_t c : contexts)
    def += (def.empty() ? "" : ",") + std::to_string(c);
  sub.add_option_function<std::string>(
         "--contexts", [&contexts](const std::string &s) { contexts = pig::app::ParseList(s); },
         description)
      ->check(pig::app::IntegerList(1, size_t(1) << 24))
      ->type_name("LIST")
      ->default_str(def);
}

// --drop-ratio R: a number >= 1, or inf (never drop); nan and ratios below 1 are usage errors
// (the harness refused them only after the model had loaded).
CLI::Validator DropRatio() {
  const CLI::Validator number = pig::app::Number(1, kInf);
  return CLI::Validator(
      [number](std::string &s) -> std::string {
        if (s == "inf")
          return "";
        std::string copy = s;
        return number(copy).empty() ? "" : "expects a number >= 1 or inf, got '" + s + "'";
      },
      ">= 1 or inf");
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"pig-tune: operating points per model and per machine (docs/TUNING.md)", "pig-tune"};
  pig::app::Init(app);
  app.fallthrough(); // the shared options may follow the command
  app.require_subcommand(1);
  tune::CommonOptions common;
  common.stop = &g_stop;
  pig::app::ModelOptions model;
  pig::app::AddModelOptions(app, model);
  pig::app::AddThreadsOption(app, common.threads);
  app.add_option("--records", common.records, "tuning records, JSON Lines (appended)")
      ->capture_default_str();

  tune::AccuracyOptions ao;
  auto *acc = app.add_subcommand("accuracy", "per-layer attention error and cost2 of LSH "
                                             "candidates on the model's real KV caches");
  acc->add_option("--text", ao.text, "text prefilled (densely) to build the KV caches")
      ->capture_default_str();
  AddContexts(*acc, ao.contexts, "KV cache lengths measured");
  acc->add_option("--positions", ao.positions, "decode positions per context")
      ->capture_default_str()
      ->check(pig::app::Integer(1, 64));
  // The grid's values (K, L, t: whole numbers; their limits are checked with the candidates).
  for (auto [name, values, what] :
       {std::tuple{"--K", &ao.Ks, "bits per table"}, std::tuple{"--L", &ao.Ls, "tables"},
        std::tuple{"--t", &ao.ts, "collision thresholds"}})
    acc->add_option(name, *values, what)
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(pig::app::Integer(0, 1u << 16))
        ->capture_default_str();
  acc->add_option("--max-evals", ao.max_evals, "candidates measured at most (0: no limit)")
      ->check(pig::app::Integer(0, size_t(1) << 30))
      ->capture_default_str();
  acc->add_option("--time-limit", ao.time_limit, "seconds; stops starting new candidates")
      ->check(pig::app::Number(0, 1e9))
      ->capture_default_str();
  acc->add_flag("--exhaustive", ao.exhaustive,
                "measure every candidate (no pruning of those that cannot improve the frontier)");

  tune::SpeedRunOptions sc;
  auto *spd = app.add_subcommand("speed", "decode-step time of candidates and tuned points on "
                                          "this machine, interleaved against the default");
  spd->add_option("--text", sc.text, "text prefilled densely, then tiled")->capture_default_str();
  AddContexts(*spd, sc.contexts, "contexts");
  spd->add_option("--prefill", sc.prefill, "tokens prefilled (tiled up to each context)")
      ->check(pig::app::Integer(1, size_t(1) << 24))
      ->capture_default_str();
  pig::app::AddLshListOption(*spd, sc.lsh, "uniform candidates (repeatable)");
  spd->add_option("--point", sc.points, "operating point files (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  spd->add_option("--max-errors", sc.max_errors,
                  "per-layer points selected from the quality records at these errors")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(pig::app::Number(0, kInf));
  spd->add_option("--schedules", sc.schedules,
                  "measure each candidate under each schedule ('' = default; repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  spd->add_flag("--per-layer", sc.per_layer,
                "per-layer attention times of the per-layer frontiers' candidates and of dense "
                "attention (for select --cost time); with --point: the point's layers timed in "
                "the mix against those times (prints only)");
  spd->add_option("--max-per-layer", sc.max_per_layer,
                  "with --per-layer: candidates timed at most (0: every frontier candidate)")
      ->check(pig::app::Integer(0, size_t(1) << 20));
  spd->add_option("--min-rounds", sc.harness.min_rounds)
      ->check(pig::app::Integer(1, 1u << 20))
      ->capture_default_str();
  spd->add_option("--max-rounds", sc.harness.max_rounds)
      ->check(pig::app::Integer(1, 1u << 20))
      ->capture_default_str();
  spd->add_option("--min-time", sc.harness.min_time_s, "seconds measured per candidate at least")
      ->check(pig::app::Number(0, 1e9))
      ->capture_default_str();
  spd->add_option("--drop-ratio", sc.harness.drop_ratio,
                  "drop a candidate slower than this times the best (inf: never)")
      ->check(DropRatio())
      ->capture_default_str();
  spd->add_option("--time-limit", sc.harness.time_limit_s, "seconds per context (0: none)")
      ->check(pig::app::Number(0, 1e9))
      ->capture_default_str();

  tune::SelectOptions so;
  auto *sel = app.add_subcommand("select", "an operating point from the records (no measuring)");
  auto *me = sel->add_option("--max-error", so.max_error,
                             "cheapest point whose mean attention error is at most E")
                 ->check(pig::app::Number(0, kInf, true));
  auto *mc = sel->add_option("--max-cost2", so.max_cost2,
                             "most accurate point whose mean cost2 is at most C")
                 ->check(pig::app::Number(0, 1, true));
  auto *ms = sel->add_option("--min-speedup", so.min_speedup,
                             "most accurate measured point at least S x the default's speed")
                 ->check(pig::app::Number(0, kInf, true));
  me->excludes(mc)->excludes(ms);
  mc->excludes(ms);
  sel->add_flag("--uniform", so.uniform, "one (K, L, t) on every sparse layer (with --max-error)");
  sel->add_option("--cost", so.cost,
                  "what the point minimises or bounds: cost2 (any machine) or time (this "
                  "machine's per-layer times, pig-tune speed --per-layer)")
      ->check(CLI::IsMember({"cost2", "time"}))
      ->capture_default_str();
  sel->add_option("--context", so.context, "context of the speed records (0: the largest)")
      ->check(pig::app::Integer(0, size_t(1) << 24));
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
  sh->add_option("--context", sho.select.context, "context of the speed records (0: the largest)")
      ->check(pig::app::Integer(0, size_t(1) << 24));
  sh->add_option("--as-machine", sho.select.as_machine, "replay as another machine (tests)")
      ->group("");

  tune::HybridTuneOptions ho;
  auto *hyb = app.add_subcommand("hybrid", "lsh-hybrid's knobs (head share, floor, ranker bits, "
                                           "epsilon) on the model's real KV caches");
  hyb->add_option("--text", ho.text, "text prefilled (densely) to build the KV caches")
      ->capture_default_str();
  AddContexts(*hyb, ho.contexts, "KV cache lengths measured");
  hyb->add_option_function<std::string>(
         "--layers",
         [&ho](const std::string &s) {
           for (size_t l : pig::app::ParseList(s))
             ho.layers.push_back(l);
         },
         "layers whose decode-step queries are measured (default: 2,5,8,12,16,20,24,28)")
      ->check(pig::app::IntegerList(0, 1u << 16))
      ->type_name("LIST");
  pig::app::AddLshOption(*hyb, "--lsh", ho.lsh, "the index the configurations rank with");
  hyb->add_option("--budget", ho.budget,
                  "cost2 of every sample (default 0: MagicPIG's measured cost on that sample)")
      ->check(pig::app::Number(0, 1))
      ->capture_default_str();
  for (auto [name, values, what] :
       {std::tuple{"--head", &ho.heads, "shares of the budget attended exactly"},
        std::tuple{"--floor", &ho.floors, "uniform floors of the tail's proposal"},
        std::tuple{"--eps", &ho.epsilons, "target relative errors of the growing tail (0: off)"}})
    hyb->add_option(name, *values, what)
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(pig::app::Number(0, 1))
        ->capture_default_str();
  hyb->add_option("--bits", ho.bits, "ranker bits (0: all K L)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(pig::app::Integer(0, 1u << 20))
      ->capture_default_str();
  hyb->add_option("--rank", ho.ranks, "rankers: hamming, collisions, quant (docs/HYBRID.md)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  hyb->add_option("--out", ho.out, "hybrid point written")->capture_default_str();

  // A bad command line exits 2 naming the flag, as the project's other tools do (--help: 0).
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](const CLI::App *c) { return c->check_name(argv[1]); }).empty())
    pig::app::UsageError(app, "unknown command '" + std::string(argv[1]) + "'");
  pig::app::Parse(app, argc, argv);
  common.model = model.path;
  if (*sel && !so.max_error && !so.max_cost2 && !so.min_speedup)
    pig::app::UsageError(app, "select needs a bound: give --max-error, --max-cost2 or "
                              "--min-speedup");
  std::signal(SIGINT, OnSigint);
  try {
    pig::app::RegisterKernels();
    if (*acc)
      return tune::RunAccuracy(common, ao);
    if (*spd)
      return tune::RunSpeed(common, sc);
    if (*sel)
      return tune::RunSelect(common, so);
    if (*em)
      return tune::RunEmitManifest(eo);
    if (*sh)
      return tune::RunShow(common, sho);
    if (*hyb)
      return tune::RunHybrid(common, ho);
  } catch (const tune::UsageError &e) {
    // A bad option value found while running: reported as a bad command line.
    pig::app::UsageError(app, e.what());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-tune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
