// pig-eval: accuracy of LSH sampling attention (MagicPIG) and its baselines on a real model:
// attention-error (real KV caches vs pig::ref), downstream (perplexity and tasks decoding with each
// runtime Attention), all (both, one prefill), kv-formats (8-bit KV formats). This main parses the
// options (pig::app's groups on CLI11); the workflows and their reports are the eval library
// (eval/, pig/eval/run.h).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/text.h"
#include "pig/eval/probe_report.h"
#include "pig/eval/run.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

namespace {

using namespace pig::runtime;

// The set of docs/RESULTS.md section 1b (`--transforms default` reproduces its tables).
const char *const kDefaultTransforms =
    "plain,pca:r=48,pca:r=32,whiten:a=0.1,whiten:a=0.15,whiten:a=0.25,whiten:a=0.35,"
    "whiten:a=0.5,mips:q=0.9";

const char *const kAbout =
    "pig-eval: accuracy of LSH sampling attention (magicpig) and its baselines on a real model.\n"
    "  pig-eval (attention-error | downstream | all | kv-formats) [options]\n"
    "Results: docs/RESULTS.md (--update-doc rewrites its pig-eval sections).";

const char *const kFooter =
    "LIST: comma-separated values, or none. --lsh takes K=10,L=150 (repeated, or several after\n"
    "one --lsh; t is 2). Old spellings, accepted for one release with a warning: --lsh "
    "10:150,8:75\n"
    "and --transform-grid 8:75,10:150 (now K=8,L=75 K=10,L=150), --lsh-transform SPEC (now\n"
    "--transform SPEC).";

// The command and its options, as the library takes them.
struct Options {
  std::string command;
  pig::eval::EvalOptions eval;
  pig::eval::AttentionErrorOptions error;
  pig::eval::DownstreamOptions down;
};

std::vector<std::string> Split(const std::string &s) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= s.size();) {
    const size_t end = std::min(s.find(',', start), s.size());
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<pig::spec::LshParams> ToLsh(const std::vector<pig::eval::KL> &kls) {
  std::vector<pig::spec::LshParams> out;
  for (const pig::eval::KL &kl : kls)
    out.push_back({kl.K, kl.L, 2});
  return out;
}

std::string Spelling(const std::vector<pig::spec::LshParams> &list) {
  std::string s;
  for (const pig::spec::LshParams &p : list)
    s += (s.empty() ? "K=" : " K=") + std::to_string(p.K) + ",L=" + std::to_string(p.L);
  return s;
}

// (K, L) pairs: pig-eval's configurations all count t = 2 collisions.
std::vector<pig::eval::KL> ToKL(const CLI::App &app, const std::string &flag,
                                const std::vector<pig::spec::LshParams> &list) {
  std::vector<pig::eval::KL> out;
  for (const pig::spec::LshParams &p : list) {
    if (p.t != 2)
      pig::app::UsageError(app, flag + " measures K and L at t = 2, got " + p.str());
    out.push_back({p.K, p.L});
  }
  return out;
}

// --quick: CI smoke sizes, set before the flags are read so that explicit flags still win.
void Quick(Options &o) {
  o.error.contexts = {256, 512};
  o.eval.layers = {2};
  o.down.ppl_contexts = {256};
  o.down.ppl_tokens = 8;
  o.down.task_contexts = {300};
  o.down.instances = 1;
  o.down.lsh = {{10, 150}, {8, 75}};
}

// A LIST option of whole numbers in [lo, hi], or none.
void AddList(CLI::App &app, const std::string &name, std::vector<size_t> &list, size_t lo,
             size_t hi, const std::string &description) {
  std::string def;
  for (size_t v : list)
    def += (def.empty() ? "" : ",") + std::to_string(v);
  app.add_option_function<std::string>(
         name, [&list](const std::string &s) { list = pig::app::ParseList(s); }, description)
      ->check(pig::app::IntegerList(lo, hi, true))
      ->type_name("LIST")
      ->default_str(def.empty() ? "none" : def)
      ->group("Evaluation");
}

void Check(const CLI::App &app, const Options &o, const std::string &transform_flag) {
  auto usage = [&](const std::string &m) { pig::app::UsageError(app, m); };
  if (!o.down.tuning.empty() && o.command == "attention-error")
    usage("--tuning adds the method \"tuned\" to downstream; attention-error measures fixed "
          "configurations (pig-tune accuracy measures a point's error)");
  if (!o.down.tuning.empty() && o.down.dense_only)
    usage("--tuning and --dense-only do not combine");
  if (o.down.lsh_transform && o.command == "attention-error")
    usage(transform_flag +
          " adds the method \"magicpig+SPEC\" to downstream; attention-error compares transforms "
          "with --transforms");
  if (o.down.lsh_transform && o.down.dense_only)
    usage(transform_flag + " and --dense-only do not combine");
  if (!o.error.probes.empty() && o.command == "downstream")
    usage("--probes compares attention errors: use attention-error or all");
  if (!o.error.transforms.empty()) {
    if (o.command == "downstream")
      usage("--transforms compares attention errors: use attention-error or all");
    if (std::none_of(o.error.transform_grid.begin(), o.error.transform_grid.end(),
                     [](pig::eval::KL kl) { return kl.K == 10 && kl.L == 150; }))
      usage("--transform-grid must contain 10:150 (K=10,L=150), plain MagicPIG's configuration "
            "the transforms are matched to");
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  o.eval.command_line = "build/bin/pig-eval"; // then the arguments (GCC 12: no `" " + string`)
  for (int i = 1; i < argc; ++i)
    o.eval.command_line.append(" ").append(argv[i]);
  if (std::count(argv + 1, argv + argc, std::string("--quick")))
    Quick(o);

  CLI::App app{kAbout, "pig-eval"};
  pig::app::Init(app);
  app.footer(kFooter);
  app.fallthrough(); // the options may follow the command
  const std::vector<std::string> commands = {"attention-error", "downstream", "all", "kv-formats"};
  const std::vector<std::string> about = {
      "relative L2 error of TopK, oracle sampling, Quest and MagicPIG vs exact attention on "
      "the model's real KV caches (pig::ref)",
      "perplexity, needle retrieval, common/frequent-words extraction with dense, magicpig (K, L) "
      "and topk/quest at magicpig's measured cost2",
      "both (one prefill of the text serves both)",
      "error of exact attention with 8-bit KV formats (q8: a scale per 32 elements; a scale per "
      "row; per-channel keys) and bf16 against f32 rows, at --error-contexts and --layers "
      "(docs/KV8.md)"};
  // --help after a command: the tool's help (every option is the tool's).
  for (size_t i = 0; i < commands.size(); ++i)
    app.add_subcommand(commands[i], about[i])
        ->formatter_fn([&app](const CLI::App *, std::string, CLI::AppFormatMode mode) {
          return app.get_formatter()->make_help(&app, app.get_name(), mode);
        });
  if (argc > 1 && argv[1][0] != '-' &&
      std::find(commands.begin(), commands.end(), argv[1]) == commands.end())
    pig::app::UsageError(app, "unknown command '" + std::string(argv[1]) + "'");

  pig::app::ModelOptions model;
  model.path = o.eval.model;
  pig::app::AddModelOptions(app, model, false, /*rope=*/true);
  pig::app::AddThreadsOption(app, o.eval.threads, 1);
  pig::app::AddKvOption(app, o.eval.kv);
  std::vector<pig::spec::LshParams> lsh = ToLsh(o.down.lsh), grid = ToLsh(o.error.transform_grid);
  pig::app::AddLshListOption(app, lsh, "downstream: the magicpig configurations (K, L)")
      ->default_str(Spelling(lsh));
  pig::ref::TransformSpec transform;
  CLI::Option *transform_new = pig::app::AddTransformOption(
      app, transform,
      "downstream also decodes each --lsh configuration hashing in a space fitted to the keys, "
      "rows \"magicpig+SPEC\" (whiten:a=A)");
  CLI::Option *transform_old =
      app.add_option_function<std::string>(
             "--lsh-transform",
             [&transform](const std::string &text) {
               try {
                 transform = ParseServedTransform(text);
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--lsh-transform", e.what());
               }
               std::fprintf(stderr,
                            "pig-eval: warning: --lsh-transform %s is a deprecated spelling "
                            "(accepted for one release): write --transform %s\n",
                            text.c_str(), text.c_str());
             },
             "old spelling of --transform")
          ->group("");
  pig::app::TuningOptions tuning;
  pig::app::AddTuningOptions(app, tuning);

  const char *kEval = "Evaluation";
  bool quick = false; // (read before the flags: Quick)
  app.add_flag("--quick", quick, "CI smoke sizes (contexts of a few hundred tokens)")->group(kEval);
  app.add_option("--out", o.eval.out, "CSV, PNG and markdown output")
      ->capture_default_str()
      ->group(kEval);
  app.add_option("--update-doc", o.eval.update_doc,
                 "rewrite the pig-eval sections of FILE (docs/RESULTS.md)")
      ->type_name("FILE")
      ->group(kEval);
  app.add_option("--text", o.eval.text,
                 std::string("perplexity text, .gz allowed (Debian package ") +
                     pig::app::kDefaultTextPackage + ")")
      ->capture_default_str()
      ->group(kEval);
  app.add_option("--seed", o.eval.seed, "task instances and sampling seeds")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str()
      ->group(kEval);
  app.add_option_function<std::uint64_t>(
         "--lsh-seed", [&o](std::uint64_t s) { o.down.lsh_seed = s; },
         "downstream: SimHash matrices from seed S (default the runtime's)")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->type_name("S")
      ->group(kEval);
  app.add_option("--mean-window", o.eval.mean_window,
                 "magicpig: centre keys on the mean of the first N indexed keys (0: all of them; "
                 "pig-serve's default is 1024)")
      ->check(pig::app::Integer(0, 1 << 24))
      ->capture_default_str()
      ->group(kEval);
  AddList(app, "--error-contexts", o.error.contexts, 128, 1 << 20,
          "KV cache lengths of attention-error and kv-formats");
  AddList(app, "--layers", o.eval.layers, 0, 1024, "layers of attention-error and kv-formats");
  AddList(app, "--ppl-contexts", o.down.ppl_contexts, 128, 1 << 20, "perplexity context lengths");
  app.add_option("--ppl-tokens", o.down.ppl_tokens, "tokens scored after each context")
      ->check(pig::app::Integer(1, 4096))
      ->capture_default_str()
      ->group(kEval);
  AddList(app, "--task-contexts", o.down.task_contexts, 128, 1 << 20,
          "prompt lengths of the tasks");
  app.add_option("--instances", o.down.instances, "instances per task and context")
      ->check(pig::app::Integer(1, 1000))
      ->capture_default_str()
      ->group(kEval);
  app.add_option_function<std::string>(
         "--tasks", [&o](const std::string &s) { o.down.tasks = Split(s); },
         "of needle,multikey,vt,count,cwe,fwe (multikey: 4 keys, one asked; vt: a 4-hop variable "
         "chain and a distractor chain; count: how often a sentence repeats, 2 to 9)")
      ->check(CLI::Validator(
          [](std::string &s) -> std::string {
            for (const std::string &t : Split(s))
              if (t != "needle" && t != "multikey" && t != "vt" && t != "count" && t != "cwe" &&
                  t != "fwe")
                return "expects tasks of needle, multikey, vt, count, cwe, fwe separated by "
                       "commas, "
                       "got '" +
                       s + "'";
            return "";
          },
          ""))
      ->type_name("LIST")
      ->default_str("needle,cwe,fwe")
      ->group(kEval);
  app.add_option_function<size_t>(
         "--cwe-share", [&o](size_t pct) { o.down.cwe_share = double(pct) / 100.0; },
         "percent of the CWE list taken by its 3 common words")
      ->check(pig::app::Integer(5, 90))
      ->type_name("PCT")
      ->default_str("50")
      ->group(kEval);
  app.add_option_function<std::vector<std::string>>(
         "--downstream-hybrid",
         [&o](const std::vector<std::string> &v) {
           o.down.hybrid.clear();
           for (const std::string &h : v)
             if (h != "none")
               try {
                 o.down.hybrid.push_back(pig::app::ParseHybridSpec(h));
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--downstream-hybrid", e.what());
               }
         },
         "downstream: lsh-hybrid's configurations, each at every magicpig configuration's cost2 "
         "(repeatable; e.g. head=0.5, @FILE of pig-tune hybrid, \"none\")")
      ->type_name("SPEC")
      ->default_str("head=0.25:floor=0.1:rank=hamming")
      ->group(kEval);
  app.add_flag("--dense-only", o.down.dense_only,
               "downstream with dense attention only (to size the tasks)")
      ->group(kEval);
  app.add_option_function<std::string>(
         "--transforms",
         [&o](std::string v) {
           if (v == "default")
             v = kDefaultTransforms;
           o.error.transforms.clear();
           if (v != "none")
             for (const std::string &t : Split(v))
               try {
                 o.error.transforms.push_back(pig::ref::TransformSpec::parse(t));
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--transforms", e.what());
               }
           // Plain first: the others are matched to it.
           std::erase_if(o.error.transforms, [](const auto &t) { return t.identity(); });
           if (!o.error.transforms.empty())
             o.error.transforms.insert(o.error.transforms.begin(), pig::ref::TransformSpec{});
         },
         std::string("attention-error also compares plain MagicPIG with hashing in spaces fitted "
                     "to the keys at matched cost2 (plain, pca:r=R, whiten:a=A, mips:q=Q, "
                     "whiten:a=A+mips:q=Q; \"default\": ") +
             kDefaultTransforms + ")")
      ->type_name("LIST")
      ->group(kEval);
  app.add_option_function<std::vector<std::string>>(
         "--hybrid",
         [&o](const std::vector<std::string> &v) {
           o.error.hybrid.clear();
           for (const std::string &h : v)
             if (h != "none")
               try {
                 o.error.hybrid.push_back(pig::app::ParseHybridSpec(h));
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--hybrid", e.what());
               }
         },
         "attention-error: the LSH-hybrid variants, each at every budget and at MagicPIG's cost "
         "(repeatable; e.g. head=0.5:floor=0.1:rank=collisions, cand=1, rank=lowrank:dims=32, "
         "@FILE of pig-tune hybrid, \"none\")")
      ->type_name("SPEC")
      ->default_str("head=0.25:floor=0.1:rank=hamming")
      ->group(kEval);
  app.add_option_function<std::vector<std::string>>(
         "--probes",
         [&o](const std::vector<std::string> &v) {
           o.error.probes.clear();
           for (const std::string &item : v) {
             if (item == "none")
               continue;
             if (item == "default") {
               const auto g = pig::eval::DefaultProbeGrid();
               o.error.probes.insert(o.error.probes.end(), g.begin(), g.end());
               continue;
             }
             std::string err;
             const auto p = pig::spec::LshParams::parse(item, &err);
             if (!p)
               throw CLI::ValidationError("--probes", err);
             o.error.probes.push_back(*p);
           }
           // The reference the others are matched to: plain (10, 150), t = 2.
           if (!o.error.probes.empty() && std::find(o.error.probes.begin(), o.error.probes.end(),
                                                    pig::spec::LshParams{}) == o.error.probes.end())
             o.error.probes.insert(o.error.probes.begin(), pig::spec::LshParams{});
         },
         "attention-error also compares multi-probe MagicPIG (fewer tables, buckets within r bits "
         "probed) with plain (10, 150) at matched cost2, beside each index's bytes per token "
         "(space-separated K=..,L=..,t=..,r=..; \"default\": K 8-11 x L 75-150 plain, K 11-13 x L "
         "40-75 at r = 1, K 14-15 x L 25-35 at r = 2; docs/RESULTS.md section 1d)")
      ->type_name("LIST")
      ->group(kEval);
  pig::app::AddLshListOption(app, grid, "the (K, L) grid of --transforms", "--transform-grid")
      ->default_str("K 7-14 x L 75,150,300")
      ->group(kEval);

  pig::app::Parse(app, argc, argv);
  for (const CLI::App *sub : app.get_subcommands())
    o.command = sub->get_name();
  if (o.command.empty())
    pig::app::UsageError(app, "give a command: attention-error, downstream, all or kv-formats");
  o.eval.model = model.path;
  o.eval.model_overrides = model.overrides;
  o.down.lsh = ToKL(app, "--lsh", lsh);
  o.error.transform_grid = ToKL(app, "--transform-grid", grid);
  if (transform_new->count() && transform_old->count())
    pig::app::UsageError(app, "--lsh-transform is the old spelling of --transform: give one");
  const std::string transform_flag = transform_old->count() ? "--lsh-transform" : "--transform";
  if (transform_new->count() || transform_old->count())
    o.down.lsh_transform = transform;
  pig::app::CheckTuningOptions(app, tuning);
  o.down.tuning = tuning.file;
  o.down.max_error = tuning.max_error;
  o.down.force_tuning = tuning.force;
  Check(app, o, transform_flag);

  try {
    pig::app::RegisterKernels();
    if (o.command == "attention-error")
      pig::eval::RunAttentionError(o.eval, o.error);
    else if (o.command == "downstream")
      pig::eval::RunDownstream(o.eval, o.down);
    else if (o.command == "all")
      pig::eval::RunAll(o.eval, o.error, o.down);
    else
      pig::eval::RunKvFormats(o.eval, pig::eval::KvFormatsOptions{o.error.contexts});
    return 0;
  } catch (const pig::eval::UsageError &e) {
    pig::app::UsageError(app, e.what()); // what only the loaded model refuses: a usage error
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-eval: error: %s\n", e.what());
    return 1;
  }
}
