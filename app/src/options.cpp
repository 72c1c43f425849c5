#include "pig/app/options.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string_view>
#include <utility>

namespace pig::app {
namespace {

// The tool's name: the root's, for options of a subcommand too ("pig-tune", not "speed").
std::string ToolName(const CLI::App &app) {
  const CLI::App *root = &app;
  while (root->get_parent())
    root = root->get_parent();
  return root->get_name();
}

void Warn(const std::string &tool, const std::string &message) {
  std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), message.c_str());
}

// An option of one attention field (attention_fields.h): its flag, help and type name, its
// parser writing through `set`; `shown`, if not empty, the default --help shows.
CLI::Option *AddField(CLI::App &app, const AttentionField &f,
                      std::function<void(const std::string &, const FieldContext &)> set,
                      const std::string &shown, const std::string &help = {}) {
  const std::string flag = KeyOf(f, Front::kCommandLine), tool = ToolName(app);
  CLI::Option *o = app.add_option_function<std::string>(
                          flag,
                          [set = std::move(set), flag, tool](const std::string &text) {
                            std::vector<std::string> warnings;
                            try {
                              set(text, {Front::kCommandLine, &warnings});
                            } catch (const std::invalid_argument &e) {
                              throw CLI::ValidationError(flag, e.what());
                            }
                            for (const std::string &w : warnings)
                              Warn(tool, w);
                          },
                          help.empty() ? f.help : help)
                       ->type_name(f.type_name)
                       ->group(kAttentionGroup);
  if (f.check_each) // every value given, as CLI11 checks a validated option's
    o->check(CLI::Validator(
        [&f](std::string &s) -> std::string {
          runtime::AttentionSpec scratch;
          try {
            f.apply(scratch, s, {Front::kCommandLine, nullptr});
          } catch (const std::invalid_argument &e) {
            return e.what();
          }
          return "";
        },
        ""));
  if (!shown.empty())
    o->default_str(shown);
  return o;
}

// An option of one field of an AttentionSpec that writes only that field into `out`.
template <typename T>
CLI::Option *AddFieldOf(CLI::App &app, const char *name, T runtime::AttentionSpec::*member, T &out,
                        const std::string &help = {}) {
  const AttentionField &f = FieldNamed(name);
  runtime::AttentionSpec shown;
  shown.*member = out;
  return AddField(
      app, f,
      [&f, member, &out](const std::string &text, const FieldContext &ctx) {
        runtime::AttentionSpec s;
        f.apply(s, text, ctx);
        out = s.*member;
      },
      f.shown ? f.shown(shown) : "", help);
}

} // namespace

void Init(CLI::App &app) {
  app.get_formatter()->label("Usage", "usage");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras(true); // Parse names the first unknown argument
}

[[noreturn]] void UsageError(const CLI::App &app, const std::string &message) {
  const std::string tool = ToolName(app);
  std::fprintf(stderr, "%s: %s\n", tool.c_str(), message.c_str());
  std::fprintf(stderr, "run %s --help for the options\n", tool.c_str());
  std::exit(2);
}

std::string UsageMessage(const CLI::Error &e) {
  const std::string what = e.what();
  const std::size_t colon = what.find(": ");
  if (dynamic_cast<const CLI::ArgumentMismatch *>(&e) && colon != std::string::npos &&
      what.find(" required ", colon) != std::string::npos &&
      what.compare(what.size() - 8, 8, " missing") == 0)
    return what.substr(0, colon) + " needs a value";
  if (dynamic_cast<const CLI::ValidationError *>(&e) && colon != std::string::npos) {
    return FieldMessage(what.substr(0, colon), what.substr(colon + 2)); // as every front end's
  }
  return what;
}

void Parse(CLI::App &app, int argc, const char *const *argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  } catch (const CLI::CallForAllHelp &e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  } catch (const CLI::ParseError &e) {
    UsageError(app, UsageMessage(e));
  }
  const std::vector<std::string> extra = app.remaining();
  if (!extra.empty())
    UsageError(app, "unknown argument '" + extra.front() + "' (see --help)");
}

CLI::Validator Integer(std::uint64_t lo, std::uint64_t hi) {
  return CLI::Validator([lo, hi](std::string &s) { return CheckInteger(s, lo, hi); },
                        "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator Number(double lo, double hi, bool lo_open) {
  return CLI::Validator(
      [lo, hi, lo_open](std::string &s) { return CheckNumber(s, lo, hi, lo_open); },
      NumberRange(lo, hi, lo_open));
}

CLI::Validator IntegerList(std::uint64_t lo, std::uint64_t hi, bool allow_none) {
  return CLI::Validator(
      [lo, hi, allow_none](std::string &s) { return CheckIntegerList(s, lo, hi, allow_none); }, "");
}

void AddModelOptions(CLI::App &app, ModelOptions &o, bool context, bool rope) {
  app.add_option("--model", o.path, "GGUF model")->capture_default_str()->group(kModelGroup);
  if (rope) {
    app.add_option("--rope-scaling", o.overrides.rope_scaling,
                   "RoPE scaling over the file's: none, linear or yarn (sets the trained context "
                   "to the factor times the original one)")
        ->check(CLI::IsMember({"none", "linear", "yarn"}))
        ->group(kModelGroup);
    app.add_option("--rope-scale", o.overrides.rope_scale,
                   "the RoPE scaling factor (default: the file's rope.scaling.factor)")
        ->check(CLI::Range(1e-3, 1024.0))
        ->group(kModelGroup);
    app.add_option("--yarn-orig-ctx", o.overrides.yarn_orig_ctx,
                   "YaRN's original (trained) context (default: the file's, else its "
                   "context_length)")
        ->check(Integer(1, std::size_t(1) << 24))
        ->group(kModelGroup);
  }
  if (!context)
    return;
  app.add_option("--ctx", o.ctx, "KV cache positions (0: the prompt plus what is decoded)")
      ->check(Integer(0, std::size_t(1) << 24))
      ->capture_default_str()
      ->group(kModelGroup);
  app.add_flag("--long-context", o.long_context,
               "run beyond the model's trained context (quality degrades)")
      ->group(kModelGroup);
}

void AddLongContextOptions(CLI::App &app, LongContextOptions &o) {
  app.add_option("--text", o.text, "text prefilled densely (.gz allowed)")->capture_default_str();
  CLI::Option *tile =
      app.add_flag("--tile", o.tile,
                   "prefill --prefill tokens and repeat their keys and values up to each context "
                   "(each key then appears context/prefill times: not long text)");
  app.add_option("--prefill", o.prefill, "with --tile: the tokens prefilled, then tiled")
      ->check(Integer(1, size_t(1) << 20))
      ->needs(tile)
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--kv-cache-dir", [&o](const std::string &v) { o.kv_cache_dir = v == "none" ? "" : v; },
         "where the prefilled KV rows are kept between runs (the prefix cache's disk files); "
         "none keeps nothing")
      ->default_str(o.kv_cache_dir)
      ->type_name("DIR|none");
}

CLI::Option *AddThreadsOption(CLI::App &app, std::size_t &threads, std::size_t min) {
  return app.add_option("--threads", threads, min == 0 ? "threads (0: every core)" : "threads")
      ->check(Integer(min, 1024))
      ->capture_default_str()
      ->group(kModelGroup);
}

std::vector<spec::LshParams> ParseLsh(const std::string &flag, const std::string &text,
                                      std::string *warning, const spec::LshParams &base,
                                      bool allow_list) {
  try {
    return ParseLshText(flag, text, warning, base, allow_list);
  } catch (const std::invalid_argument &e) {
    throw CLI::ValidationError(flag, e.what());
  }
}

AttentionFlags AddAttentionOptions(CLI::App &app, runtime::AttentionSpec &spec) {
  AttentionFlags flags;
  const std::pair<const char *, CLI::Option **> named[] = {
      {"attention", &flags.attention}, {"lsh", &flags.lsh},
      {"transform", &flags.transform}, {"sink", &flags.sink},
      {"local", &flags.local},         {"dense_layers", &flags.dense_layers},
      {"budget", &flags.budget},       {"hybrid", &flags.hybrid},
      {"schedule", &flags.schedule}};
  for (const AttentionField &f : AttentionFields()) {
    if (std::string_view(f.name) == "kv") // AddKvOption's: pig-eval takes it alone
      continue;
    CLI::Option *o = AddField(
        app, f,
        [&spec, &f](const std::string &text, const FieldContext &ctx) { f.apply(spec, text, ctx); },
        f.shown ? f.shown(spec) : "");
    for (const auto &[name, slot] : named)
      if (std::string_view(f.name) == name)
        *slot = o;
  }
  return flags;
}

CLI::Option *AddTransformOption(CLI::App &app, ref::TransformSpec &transform,
                                const std::string &description) {
  return AddFieldOf(app, "transform", &runtime::AttentionSpec::transform, transform, description);
}

CLI::Option *AddScheduleOption(CLI::App &app, runtime::lsh::Schedule &schedule,
                               const std::string &description) {
  return AddFieldOf(app, "schedule", &runtime::AttentionSpec::schedule, schedule, description);
}

CLI::Option *AddLshOption(CLI::App &app, const std::string &name, spec::LshParams &lsh,
                          const std::string &description) {
  const std::string tool = ToolName(app);
  return app
      .add_option_function<std::string>(
          name,
          [&lsh, tool, name](const std::string &text) {
            std::string warning;
            lsh = ParseLsh(name, text, &warning, lsh, false).front();
            if (!warning.empty())
              Warn(tool, warning);
          },
          description)
      ->type_name("K=..,L=..,t=..")
      ->group(kAttentionGroup);
}

CLI::Option *AddKvOption(CLI::App &app, runtime::lsh::DType &kv) {
  return AddFieldOf(app, "kv", &runtime::AttentionSpec::kv_dtype, kv);
}

CLI::Option *AddLshListOption(CLI::App &app, std::vector<spec::LshParams> &list,
                              const std::string &description, const std::string &name) {
  const std::string tool = ToolName(app);
  return app
      .add_option_function<std::vector<std::string>>(
          name,
          [&list, tool, name](const std::vector<std::string> &values) {
            list.clear();
            for (const std::string &v : values) {
              std::string warning;
              for (const spec::LshParams &p : ParseLsh(name, v, &warning))
                list.push_back(p);
              if (!warning.empty())
                Warn(tool, warning);
            }
          },
          description)
      ->type_name("K=..,L=..,t=..")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(kAttentionGroup);
}

void AddTuningOptions(CLI::App &app, TuningOptions &o) {
  app.add_option("--tuning", o.file,
                 "decode with pig-tune's operating point in FILE (per layer dense or K, L, t; "
                 "docs/TUNING.md), or select one from pig-tune's records with --max-error")
      ->check(CLI::Validator(
          [](std::string &s) -> std::string { return s.empty() ? "needs a file" : ""; }, ""))
      ->type_name("FILE")
      ->group(kTuningGroup);
  app.add_option_function<double>(
         "--max-error", [&o](double e) { o.max_error = e; },
         "with --tuning RECORDS: the cheapest point whose predicted mean attention error is at "
         "most E")
      ->check(Number(0, std::numeric_limits<double>::infinity(), true))
      ->type_name("E")
      ->group(kTuningGroup);
  app.add_flag("--force-tuning", o.force,
               "use a point made for another model, head dim or KV type (a warning, not an "
               "error)")
      ->group(kTuningGroup);
}

void CheckTuningOptions(const CLI::App &app, const TuningOptions &o) {
  if (o.max_error && o.file.empty())
    UsageError(app, "--max-error selects a point from --tuning FILE's records: give --tuning FILE");
  if (o.force && o.file.empty())
    UsageError(app, "--force-tuning applies to --tuning FILE: give --tuning FILE");
}

app::TuningTarget TuningTargetOf(const TuningOptions &o, const std::string &model_path,
                                 const runtime::LlamaConfig &cfg, runtime::lsh::DType kv) {
  app::TuningTarget t;
  t.n_layers = cfg.n_layers;
  t.head_dim = cfg.head_dim;
  t.kv = kv;
  t.model_path = model_path;
  t.force = o.force;
  return t;
}

} // namespace pig::app
