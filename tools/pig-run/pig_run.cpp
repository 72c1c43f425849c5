// pig-run: decode a Llama-family GGUF model on the CPU, with dense attention or LSH sampling
// attention (MagicPIG) or one of the paper's baselines.
//   pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N
//           [--attention dense|magicpig|topk|quest|oracle] [--lsh K=10,L=150,t=2,transform=..]
//           [--sink 4 --local 64 --dense-layers 0,15] [--budget F] [--kv bf16|f32|q8]
//           [--temperature T --top-p P --seed S] [--chat] [--threads N] [--ctx N]
//           [--expect TEXT] [--rate-steps N] [--schedule KNOBS] [--tuning FILE [--max-error E]]
//   pig-run --demo [--demo-text FILE] [--demo-seed S] [--demo-bytes N]   (what ./pig run runs)
// Streams the generated text to stdout, then prints a summary to stderr: prefill and decode
// speed, the sampled fraction (cost2) and index traffic (cost1), KV and index memory, and which
// kernels served. Without --model it uses the default model that ./pig installs.
// Parse reads the command line (pig::app's option groups and pig-run's own); the runs are in
// run.cpp, compare.cpp and batch.cpp, the decode loop in pig::app (generate.h).
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/app/options.h"
#include "pig/app/text.h"
#include "pig/runtime/model.h"
#include "pig/spec/files.h"
#include "pig/spec/method.h"

#include "demo.h"
#include "run.h"

namespace {

using namespace pig::runtime;
using pig::run::Options;

constexpr const char *kAbout =
    "pig-run: decode a Llama-family GGUF model on the CPU, with dense attention, LSH sampling\n"
    "attention (magicpig) or one of the paper's baselines. Streams the text to stdout, then a\n"
    "summary to stderr (prefill and decode speed, cost2 and cost1, memory, the kernels).\n"
    "  pig-run [--model FILE] (--prompt TEXT | --prompt-file F) --max-new N [options]\n"
    "  pig-run --demo [--demo-text FILE] [--demo-seed S] [--demo-bytes N]   (./pig run)\n"
    "\n"
    "--demo is the main job (./pig run): it takes the first 12000 bytes of a text\n"
    "(default: the GPL-3 as Debian ships it, ~2.7k tokens), plants the sentence\n"
    "\"The author of this text lives in <city>.\" at a paragraph break that --demo-seed\n"
    "chooses, and asks \"In which city does the author of this text live?\". One dense\n"
    "prefill; then dense and LSH sampling attention (magicpig) each answer from that\n"
    "KV cache, side by side, and the table says whether each answer names the city.\n"
    "Each method decodes 48 steps for its rate (steps past the answer are timed, not\n"
    "shown). On your own text: --demo --demo-text FILE; your own question:\n"
    "  pig-run --chat --compare dense,magicpig --prompt-file F --expect ANSWER\n"
    "\n"
    "--tuning FILE decodes with magicpig as an operating point of pig-tune gives it, per\n"
    "layer: dense or (K, L, t) (docs/TUNING.md). It replaces --lsh and --dense-layers; with\n"
    "--compare (and --demo) the magicpig column decodes with the point. A --schedule given\n"
    "wins over the point's.\n"
    "\n"
    "--lsh takes K=10,L=150,t=2 (any subset). Old spellings, accepted for one release with\n"
    "a warning: --lsh ...,transform=SPEC (now --transform SPEC), --lsh 10:150 and\n"
    "--lsh 10,150,2 (now --lsh K=10,L=150,t=2).";

Options Parse(int argc, char **argv) {
  Options o;
  CLI::App app{kAbout, "pig-run"};
  pig::app::Init(app);
  pig::app::AddModelOptions(app, o.model, true, /*rope=*/true);
  pig::app::AddThreadsOption(app, o.threads);
  const pig::app::AttentionFlags af = pig::app::AddAttentionOptions(app, o.attention);
  pig::app::AddKvOption(app, o.attention.kv_dtype);
  pig::app::AddTuningOptions(app, o.tuning);
  const char *kRun = "Run";
  app.add_option_function<std::string>(
         "--prompt",
         [&o](const std::string &p) {
           o.prompt = p;
           o.have_prompt = true;
         },
         "the prompt")
      ->group(kRun);
  app.add_option_function<std::string>(
         "--prompt-file",
         [&o](const std::string &path) {
           try {
             o.prompt = pig::spec::ReadFile(path);
           } catch (const std::runtime_error &) {
             throw CLI::ValidationError("--prompt-file", "cannot read prompt file " + path);
           }
           o.have_prompt = true;
         },
         "the prompt, from a file")
      ->type_name("F")
      ->group(kRun);
  app.add_option_function<std::string>(
         "--then", [&o](const std::string &p) { o.then.push_back(p); },
         "a further prompt, run after the ones before it as a new sequence that shares the KV of "
         "its prefix with them (a document asked about again is not prefilled again); repeatable")
      ->group(kRun);
  app.add_option_function<std::string>(
         "--then-file",
         [&o](const std::string &path) {
           try {
             o.then.push_back(pig::spec::ReadFile(path));
           } catch (const std::runtime_error &) {
             throw CLI::ValidationError("--then-file", "cannot read prompt file " + path);
           }
         },
         "--then, from a file; repeatable")
      ->type_name("F")
      ->group(kRun);
  CLI::Option *max_new = app.add_option("--max-new", o.generate.max_new, "tokens generated at most")
                             ->check(pig::app::Integer(0, size_t(1) << 24))
                             ->capture_default_str()
                             ->group(kRun);
  app.add_option("--temperature", o.generate.sampling.temperature,
                 "sampling temperature (0: greedy)")
      ->check(pig::app::Number(0, 1e6))
      ->capture_default_str()
      ->group(kRun);
  app.add_option("--top-p", o.generate.sampling.top_p, "nucleus sampling mass")
      ->check(pig::app::Number(0, 1, true))
      ->capture_default_str()
      ->group(kRun);
  app.add_option("--seed", o.generate.sampling.seed, "sampling seed")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str()
      ->group(kRun);
  app.add_flag("--chat", o.chat, "apply the model's chat template")->group(kRun);
  app.add_option_function<std::string>(
         "--compare",
         [&o](const std::string &v) {
           o.compare.clear();
           std::stringstream ss(v);
           for (std::string m; std::getline(ss, m, ',');)
             o.compare.push_back(*pig::spec::parse_method(m)); // checked below
         },
         "one prefill, then each method decodes from it, side by side (e.g. dense,magicpig)")
      ->check(CLI::Validator(
          [](std::string &v) -> std::string {
            std::stringstream ss(v);
            size_t n = 0;
            for (std::string m; std::getline(ss, m, ','); ++n)
              if (!pig::spec::parse_method(m))
                return "expects methods of " + pig::spec::method_names() +
                       " separated by commas, got '" + m + "'";
            return n ? "" : "expects methods, e.g. dense,magicpig";
          },
          ""))
      ->type_name("METHODS")
      ->group(kRun);
  app.add_option("--batch", o.batch, "B sequences of different lengths, decoded together")
      ->check(pig::app::Integer(0, size_t(1) << 20))
      ->group(kRun);
  app.add_option("--expect", o.expect, "is each answer correct: does it contain TEXT")
      ->type_name("TEXT")
      ->group(kRun);
  CLI::Option *rate = app.add_option("--rate-steps", o.generate.rate_steps,
                                     "time N decode steps, past the answer's end")
                          ->check(pig::app::Integer(0, size_t(1) << 24))
                          ->group(kRun);
  app.add_flag("--print-ids", o.print_ids, "print the prompt's and the answer's token ids")
      ->group(kRun);
  const char *kDemo = "Demo (./pig run)";
  app.add_flag("--demo", o.demo, "the planted-fact question (see above)")->group(kDemo);
  app.add_option("--demo-text", o.demo_opts.text_file, "the text the fact is planted in")
      ->capture_default_str()
      ->group(kDemo);
  app.add_option("--demo-seed", o.demo_opts.seed, "chooses the city and where it is planted")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str()
      ->group(kDemo);
  app.add_option("--demo-bytes", o.demo_opts.max_bytes, "bytes of the text taken")
      ->check(pig::app::Integer(0, size_t(1) << 30))
      ->capture_default_str()
      ->group(kDemo);
  app.add_flag("--show-prompt", o.show_prompt, "print the prompt and the expected answer; exit")
      ->group(kDemo);
  pig::app::Parse(app, argc, argv);
  auto usage = [&](const std::string &m) { pig::app::UsageError(app, m); };
  o.max_new_set = max_new->count() > 0;
  o.rate_steps_set = rate->count() > 0;
  o.schedule_set = af.schedule->count() > 0;
  // One decode row per sequence: a batch is bounded by the rows a step takes.
  const size_t max_batch = LlamaBatch::Options{}.max_rows;
  if (app.count("--batch") && (o.batch == 0 || o.batch > max_batch))
    usage("--batch must be in [1, " + std::to_string(max_batch) + "]");
  if (app.count("--expect") && o.expect.empty())
    usage("--expect needs a non-empty answer");
  if (o.demo_opts.max_bytes == 0)
    usage("--demo-bytes must be positive");
  pig::app::CheckTuningOptions(app, o.tuning);
  if (!o.tuning.file.empty()) {
    if (af.lsh->count())
      usage("--tuning and --lsh conflict: the operating point gives each layer's K, L, t");
    if (o.attention.dense_layers_set)
      usage("--tuning and --dense-layers conflict: the operating point gives the dense layers");
    if (af.attention->count() && o.attention.method != pig::spec::Method::magicpig)
      usage(std::string("--tuning decodes with magicpig: it conflicts with --attention ") +
            o.attention.method_name());
    o.attention.method = pig::spec::Method::magicpig;
  }
  if (o.demo) {
    if (o.have_prompt)
      usage("--demo makes its own prompt: give --demo-text FILE instead of --prompt/--prompt-file");
    if (o.batch)
      usage("--demo and --batch do not combine");
    const pig::run::DemoPrompt d = pig::run::MakeDemoPrompt(o.demo_opts);
    o.prompt = d.prompt;
    o.have_prompt = true;
    o.chat = true;
    if (o.expect.empty())
      o.expect = d.expected;
    if (o.compare.empty())
      o.compare = {pig::spec::Method::dense, pig::spec::Method::magicpig};
    if (!o.max_new_set)
      o.generate.max_new = 24; // the answer is one sentence
    if (!o.rate_steps_set)
      o.generate.rate_steps = 48;
    std::fprintf(stderr,
                 "pig-run: demo: %zu bytes of %s; the fact (the author lives in %s) stands at "
                 "%.0f %% of the text (--demo-seed %llu)\n",
                 d.text_bytes, o.demo_opts.text_file.c_str(), d.expected.c_str(), 100 * d.depth,
                 static_cast<unsigned long long>(o.demo_opts.seed));
  }
  if (!o.tuning.file.empty() && !o.compare.empty() &&
      std::find(o.compare.begin(), o.compare.end(), pig::spec::Method::magicpig) == o.compare.end())
    usage("--tuning applies to magicpig, which --compare does not list");
  if (!o.have_prompt)
    usage("give --prompt TEXT or --prompt-file F (or --demo)");
  if (!o.compare.empty() && o.batch)
    usage("--compare and --batch do not combine");
  if (!o.then.empty() && (o.batch || !o.compare.empty() || o.demo))
    usage("--then runs prompts one after another: it does not combine with --batch, --compare "
          "or --demo");
  return o;
}

} // namespace

int main(int argc, char **argv) {
  try {
    const Options o = Parse(argc, argv);
    if (o.show_prompt) {
      std::printf("%s\n", o.prompt.c_str());
      if (!o.expect.empty())
        std::printf("\nexpected answer: %s\n", o.expect.c_str());
      return 0;
    }
    return o.batch             ? pig::run::RunBatch(o)
           : !o.then.empty()   ? pig::run::RunThen(o)
           : o.compare.empty() ? pig::run::Run(o)
                               : pig::run::RunCompare(o);
  } catch (const pig::app::TuningMismatch &e) { // a point made for another model: bad --tuning
    std::fprintf(stderr, "pig-run: error: %s\n", e.what());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-run: error: %s\n", e.what());
    return 1;
  }
}
