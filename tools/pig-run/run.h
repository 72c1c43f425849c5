// pig-run's runs, after Parse (pig_run.cpp): one sequence (run.cpp), --compare (compare.cpp) and
// --batch (batch.cpp), and what they share: the options and the loaded model and prompt.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pig/app/generate.h"
#include "pig/app/options.h"
#include "pig/app/tuning.h" // --tuning FILE
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"

#include "demo.h"

namespace pig::run {

struct Options {
  pig::app::ModelOptions model; // --model, --ctx, --long-context
  std::string prompt;
  bool have_prompt = false;
  // --then TEXT / --then-file F: further prompts run after the first, one after another, each a
  // new sequence that attaches the KV blocks of its prefix the prompts before it prefilled.
  std::vector<std::string> then;
  pig::app::GenerateOptions generate; // --max-new, --temperature, --top-p, --seed, --rate-steps
  bool chat = false;
  size_t threads = 0;
  bool print_ids = false;
  runtime::AttentionSpec attention;
  std::vector<spec::Method> compare; // --compare dense,magicpig
  size_t batch = 0;                  // --batch B
  std::string expect;                // --expect: the answer must contain this
  bool demo = false;                 // --demo: the planted-fact prompt of demo.h
  DemoOptions demo_opts;
  bool show_prompt = false; // --show-prompt: print the prompt (and expected answer), exit
  bool max_new_set = false, rate_steps_set = false;
  pig::app::TuningOptions tuning; // --tuning FILE [--max-error E]: pig-tune's operating point
  bool schedule_set = false;
};

// The model loaded, the prompt encoded and checked against the context, every method's
// attention validated: what a run needs before its (long) prefill.
struct Prepared {
  std::unique_ptr<runtime::LlamaModel> model;
  std::vector<int32_t> prompt;
  size_t ctx = 0;
  runtime::AttentionSpec attention;  // o.attention, with --tuning's point applied
  std::optional<app::Tuning> tuning; // --tuning
  // The spec of one --compare method: magicpig takes the point, the others ignore it.
  runtime::AttentionSpec ForMethod(const Options &o, spec::Method method) const;
};
Prepared Prepare(const Options &o);

// --tuning: what the point is and where it came from, and each warning of the loader.
void PrintTuning(const app::Tuning &t);

int Run(const Options &o);        // one sequence, streamed to stdout
int RunThen(const Options &o);    // --then: several prompts in turn, sharing their prefixes
int RunCompare(const Options &o); // --compare: one prefill, each method decodes, side by side
int RunBatch(const Options &o);   // --batch B: B sequences decoded together

} // namespace pig::run
