// The command-line option groups every tool shares (llama.cpp's common/ in spirit), on CLI11.
//
// A tool builds a CLI::App, calls Init(app), adds the groups it takes (AddModelOptions,
// AddAttentionOptions, AddKvOption, AddTuningOptions, AddThreadsOption) and its own options (with
// the validators below), then Parse(app, argc, argv). The shared options read the same in every
// tool's --help: the same group names (kModelGroup, ...) and the same texts.
//
// A bad command line is a usage error: Parse prints "<tool>: <message naming the flag>" on stderr
// and exits 2 (CLI11's own exit codes are not 2); --help prints the help on stdout and exits 0.
// Every number is range-checked before it is converted (no wrap-around: --threads -1 or
// --lsh K=4294967306 is an error naming the flag). A repeated option takes its last value,
// except those that collect (--lsh of AddLshListOption).
//
// Messages: a validator of this file says what the flag expects ("expects an integer in [1, 64],
// got 'x'"); Parse joins it to the flag's name ("--n expects ..."). Other messages read as
// "--flag: what is wrong".
//
// The attention options are made from the table of attention fields (attention_fields.h), which
// pig-serve's requests and Python's AttentionSpec read too. This file is the CLI11 layer
// (pig_app): what links it links CLI11; the table and the rest of app/ (pig_app_core) do not.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pig/app/attention_fields.h"
#include "pig/app/tiled_decode.h"
#include "pig/app/tuning.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/spec/lsh_params.h"

namespace pig::app {

/// The groups of the shared options in --help.
inline constexpr const char *kModelGroup = "Model";
inline constexpr const char *kAttentionGroup = "Attention";
inline constexpr const char *kTuningGroup = "Tuning (pig-tune's operating points)";

/// The project's CLI11 settings: "usage:" in the help, a repeated option takes its last value,
/// unknown arguments are reported by Parse (one message naming the first). Call first.
void Init(CLI::App &app);

/// Parses argv (see above): returns on success; exits 0 after --help, 2 on a usage error.
void Parse(CLI::App &app, int argc, const char *const *argv);

/// A usage error found after Parse (flags that conflict): prints "<tool>: <message>", exits 2.
[[noreturn]] void UsageError(const CLI::App &app, const std::string &message);

/// The message Parse prints for a CLI11 error (without the tool's name): tests and tools that
/// parse themselves.
std::string UsageMessage(const CLI::Error &e);

// --- validators (the message is a continuation of the flag's name) -----------------------------

/// A whole decimal number in [lo, hi]: "expects an integer in [lo, hi], got 'x'".
CLI::Validator Integer(std::uint64_t lo, std::uint64_t hi);
/// A number (strtod, the whole text, finite) in [lo, hi] ((lo, hi] when lo_open): "expects a
/// number in [lo, hi], got 'x'"; hi = +inf reads "expects a number >= lo".
CLI::Validator Number(double lo, double hi, bool lo_open = false);
/// A comma-separated list of whole numbers in [lo, hi] ("none" when allow_none): validates the
/// whole list; ParseList (attention_fields.h) reads it.
CLI::Validator IntegerList(std::uint64_t lo, std::uint64_t hi, bool allow_none = false);

// --- the groups --------------------------------------------------------------------------------

struct ModelOptions {
  std::string path = runtime::DefaultModelPath(); ///< --model
  std::size_t ctx = 0;                            ///< --ctx (0: what the run needs)
  bool long_context = false;                      ///< --long-context
  runtime::ModelOverrides overrides;              ///< --rope-scaling, --rope-scale, --yarn-orig-ctx
};
/// --model FILE; with context also --ctx N and --long-context; with rope also --rope-scaling
/// none|linear|yarn, --rope-scale F and --yarn-orig-ctx N (over the file's RoPE scaling; the
/// tool passes o.overrides to LlamaModel::Load).
void AddModelOptions(CLI::App &app, ModelOptions &o, bool context = false, bool rope = false);

/// --text FILE, --tile, --prefill N (with --tile) and --kv-cache-dir DIR|none: where a
/// long-context benchmark's contexts come from.
void AddLongContextOptions(CLI::App &app, LongContextOptions &o);

/// --threads N (0: every core), N in [min, 1024].
CLI::Option *AddThreadsOption(CLI::App &app, std::size_t &threads, std::size_t min = 0);

/// What of AddAttentionOptions' options the command line gave (for conflicts).
struct AttentionFlags {
  CLI::Option *attention = nullptr, *lsh = nullptr, *transform = nullptr, *sink = nullptr,
              *local = nullptr, *dense_layers = nullptr, *budget = nullptr, *schedule = nullptr,
              *hybrid = nullptr;
};
/// The attention fields (attention_fields.h) but --kv, as options: --attention METHOD (pig::spec's
/// names), --lsh K=..,L=..,t=.. (spec::LshParams; aliases below), --transform SPEC
/// (runtime::ParseServedTransform), --sink N, --local N, --dense-layers LIST|none, --budget F,
/// --hybrid SPEC (ParseHybridSpec, @FILE too; its budget is --budget's), --schedule KNOBS. Each
/// writes its field of `spec` (dense_layers_set too).
/// Aliases of --lsh for one release (a warning on stderr names the new spelling): "10:150"
/// (K:L), "10,150,2" (K,L,t) and a transform=SPEC item ("K=8,transform=whiten:a=0.25").
AttentionFlags AddAttentionOptions(CLI::App &app, runtime::AttentionSpec &spec);

/// --transform SPEC alone (AddAttentionOptions adds it): runtime::ParseServedTransform into
/// `transform`; a tool where it means something else passes its own description.
CLI::Option *AddTransformOption(CLI::App &app, ref::TransformSpec &transform,
                                const std::string &description = {});

/// --schedule KNOBS alone (AddAttentionOptions adds it): spec::Schedule::parse into `schedule`;
/// an illegal knob is an error naming --schedule.
CLI::Option *AddScheduleOption(CLI::App &app, runtime::lsh::Schedule &schedule,
                               const std::string &description = {});

/// One configuration in the one spelling (or an alias, with the warning) over `lsh`'s values,
/// e.g. pig-bench-context's --transform-lsh.
CLI::Option *AddLshOption(CLI::App &app, const std::string &name, spec::LshParams &lsh,
                          const std::string &description);

/// --kv bf16|f32|q8 (the KV cache's element type).
CLI::Option *AddKvOption(CLI::App &app, runtime::lsh::DType &kv);

/// --lsh of tools that take several configurations: repeated (--lsh K=10,L=150 --lsh K=8,L=75)
/// or several values after one --lsh; the first --lsh replaces `list`'s defaults. The aliases
/// of AddAttentionOptions (without transform=), plus "10:150,8:75" (a list of K:L) and
/// "10,150,2" (one K,L,t), with the warning. `name` may be another flag (--transform-lsh).
CLI::Option *AddLshListOption(CLI::App &app, std::vector<spec::LshParams> &list,
                              const std::string &description, const std::string &name = "--lsh");

/// One configuration in the one spelling or an alias; the alias' warning (naming the new
/// spelling) in *warning, "" for the one spelling. Throws CLI::ValidationError naming `flag`.
std::vector<spec::LshParams> ParseLsh(const std::string &flag, const std::string &text,
                                      std::string *warning, const spec::LshParams &base = {},
                                      bool allow_list = true);

struct TuningOptions {
  std::string file;                ///< --tuning FILE: an operating point or records of pig-tune
  std::optional<double> max_error; ///< --max-error E: selects the point from a records file
  bool force = false; ///< --force-tuning: a point made for another model or KV type only warns
};
/// --tuning FILE, --max-error E, --force-tuning. After Parse, CheckTuningOptions.
void AddTuningOptions(CLI::App &app, TuningOptions &o);
/// --max-error or --force-tuning without --tuning: a usage error.
void CheckTuningOptions(const CLI::App &app, const TuningOptions &o);
/// What a --tuning point must have been made for in this run (app::LoadTuning's target): the
/// model's layers and head dim, the run's KV type, the model file and --force-tuning. A point made
/// for something else throws app::TuningMismatch, which a tool reports as a bad --tuning value
/// (exit 2).
app::TuningTarget TuningTargetOf(const TuningOptions &o, const std::string &model_path,
                                 const runtime::LlamaConfig &cfg, runtime::lsh::DType kv);

} // namespace pig::app
