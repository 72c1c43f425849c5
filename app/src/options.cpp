#include "pig/app/options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "pig/spec/method.h"
#include "pig/tune/hybrid.h"
#include "pig/tune/record.h"

namespace pig::app {
namespace {

bool StartsWith(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

std::string Bound(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::optional<std::uint64_t> ReadInteger(const std::string &s) {
  std::uint64_t v = 0;
  const char *end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, v);
  if (s.empty() || s[0] == '+' || s[0] == '-' || r.ec != std::errc() || r.ptr != end)
    return std::nullopt;
  return v;
}

std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos)
      return out;
    start = end + 1;
  }
}

// The tool's name: the root's, for options of a subcommand too ("pig-tune", not "speed").
std::string ToolName(const CLI::App &app) {
  const CLI::App *root = &app;
  while (root->get_parent())
    root = root->get_parent();
  return root->get_name();
}

// Where the warnings of an option parse go: stderr, or ParseAttentionArgs' caller (a server
// decides whether and how to log what a request's text made us say).
thread_local std::vector<std::string> *g_warnings = nullptr;

void Warn(const std::string &tool, const std::string &message) {
  if (g_warnings)
    g_warnings->push_back(message);
  else
    std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), message.c_str());
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
    const std::string name = what.substr(0, colon), msg = what.substr(colon + 2);
    if (StartsWith(msg, (name + " ").c_str())) // a message that names the flag itself
      return msg;
    if (StartsWith(msg, "expects ") || StartsWith(msg, "needs ") || StartsWith(msg, "must "))
      return name + " " + msg;
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

runtime::AttentionSpec ParseAttentionArgs(const std::vector<std::string> &args,
                                          runtime::AttentionSpec base,
                                          std::vector<std::string> *warnings) {
  CLI::App app{"attention", "pig"};
  Init(app);
  AddAttentionOptions(app, base, /*files=*/false);
  AddKvOption(app, base.kv_dtype);
  std::vector<std::string> reversed(args.rbegin(), args.rend()); // CLI11 takes the last first
  struct Collect {
    std::vector<std::string> *saved = g_warnings;
    explicit Collect(std::vector<std::string> *w) {
      if (w)
        g_warnings = w;
    }
    ~Collect() { g_warnings = saved; }
  } collect(warnings);
  try {
    app.parse(reversed);
  } catch (const CLI::Error &e) {
    throw std::invalid_argument(UsageMessage(e));
  }
  if (!app.remaining().empty())
    throw std::invalid_argument("unknown argument '" + app.remaining().front() + "'");
  return base;
}

CLI::Validator Integer(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string &s) -> std::string {
        const auto v = ReadInteger(s);
        if (!v || *v < lo || *v > hi)
          return "expects an integer in " + range + ", got '" + s + "'";
        return "";
      },
      range);
}

CLI::Validator Number(double lo, double hi, bool lo_open) {
  const std::string range =
      std::isinf(hi) ? std::string(lo_open ? "> " : ">= ") + Bound(lo)
                     : std::string(lo_open ? "(" : "[") + Bound(lo) + ", " + Bound(hi) + "]";
  const std::string what = std::isinf(hi) ? "a number " + range : "a number in " + range;
  return CLI::Validator(
      [lo, hi, lo_open, what](std::string &s) -> std::string {
        char *end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || (lo_open && v == lo) ||
            v > hi)
          return "expects " + what + ", got '" + s + "'";
        return "";
      },
      range);
}

CLI::Validator IntegerList(std::uint64_t lo, std::uint64_t hi, bool allow_none) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range, allow_none](std::string &s) -> std::string {
        if (allow_none && s == "none")
          return "";
        for (const std::string &item : Split(s, ',')) {
          const auto v = ReadInteger(item);
          if (!v || *v < lo || *v > hi)
            return "expects integers in " + range + " separated by commas" +
                   (allow_none ? " (or none)" : "") + ", got '" + s + "'";
        }
        return "";
      },
      "");
}

std::vector<std::size_t> ParseList(const std::string &text) {
  std::vector<std::size_t> out;
  if (text == "none")
    return out;
  for (const std::string &item : Split(text, ','))
    out.push_back(std::size_t(ReadInteger(item).value_or(0)));
  return out;
}

void AddModelOptions(CLI::App &app, ModelOptions &o, bool context) {
  app.add_option("--model", o.path, "GGUF model")->capture_default_str()->group(kModelGroup);
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

CLI::Option *AddThreadsOption(CLI::App &app, std::size_t &threads, std::size_t min) {
  return app.add_option("--threads", threads, min == 0 ? "threads (0: every core)" : "threads")
      ->check(Integer(min, 1024))
      ->capture_default_str()
      ->group(kModelGroup);
}

std::vector<spec::LshParams> ParseLsh(const std::string &flag, const std::string &text,
                                      std::string *warning, const spec::LshParams &base,
                                      bool allow_list) {
  auto fail = [&](const std::string &m) { throw CLI::ValidationError(flag, m); };
  auto one = [&](const std::string &spelling) {
    std::string err;
    const auto p = spec::LshParams::parse(spelling, &err, base);
    if (!p)
      fail(err);
    return *p;
  };
  if (warning)
    warning->clear();
  if (text.find('=') != std::string::npos)
    return {one(text)};
  std::vector<spec::LshParams> out;
  std::string new_spelling;
  if (text.find(':') != std::string::npos) { // the old "10:150[,8:75...]"
    const std::vector<std::string> items = Split(text, ',');
    if (items.size() > 1 && !allow_list)
      fail("takes one configuration, got '" + text + "'");
    for (const std::string &item : items) {
      const std::vector<std::string> kl = Split(item, ':');
      if (kl.size() != 2)
        fail("expects K=..,L=..,t=.. (e.g. K=10,L=150,t=2), got '" + text + "'");
      out.push_back(one("K=" + kl[0] + ",L=" + kl[1]));
      new_spelling += (new_spelling.empty() ? "" : " ") + out.back().str();
    }
  } else { // the old "10,150,2"
    const std::vector<std::string> klt = Split(text, ',');
    if (klt.size() != 3)
      fail("expects K=..,L=..,t=.. (e.g. K=10,L=150,t=2), got '" + text + "'");
    out.push_back(one("K=" + klt[0] + ",L=" + klt[1] + ",t=" + klt[2]));
    new_spelling = out.back().str();
  }
  if (warning)
    *warning = flag + " " + text + " is a deprecated spelling (accepted for one release): write " +
               flag + " " + new_spelling;
  return out;
}

ref::HybridConfig ParseHybridSpec(const std::string &text, bool files) {
  if (!text.starts_with('@'))
    return ref::HybridConfig::parse(text);
  if (!files)
    throw std::invalid_argument("@FILE is read only from a tool's command line; give the spec "
                                "(key=value pairs)");
  const std::size_t colon = text.find(':');
  const std::string path = text.substr(1, colon == std::string::npos ? colon : colon - 1);
  if (path.empty())
    throw std::invalid_argument("'@' names no file");
  std::string spec;
  try {
    spec = tune::load_hybrid_point(path).spec;
  } catch (const tune::RecordError &e) {
    throw std::invalid_argument(e.what());
  }
  return ref::HybridConfig::parse(colon == std::string::npos ? spec : spec + text.substr(colon));
}

AttentionFlags AddAttentionOptions(CLI::App &app, runtime::AttentionSpec &spec, bool files) {
  AttentionFlags f;
  const std::string tool = ToolName(app);
  f.attention =
      app.add_option_function<std::string>(
             "--attention", [&spec](const std::string &s) { spec.method = *spec::parse_method(s); },
             "method: " + spec::method_names())
          ->check(CLI::Validator(
              [](std::string &s) -> std::string {
                return spec::parse_method(s)
                           ? ""
                           : "expects one of " + spec::method_names() + ", got '" + s + "'";
              },
              "METHOD"))
          ->default_str(spec::name(spec.method))
          ->group(kAttentionGroup);
  f.lsh = app.add_option_function<std::string>(
                 "--lsh",
                 [&spec, tool](const std::string &text) {
                   // The old transform=SPEC item: --transform now.
                   std::string rest;
                   for (const std::string &item : Split(text, ',')) {
                     if (StartsWith(item, "transform=")) {
                       const std::string t = item.substr(10);
                       try {
                         spec.transform = runtime::ParseServedTransform(t);
                       } catch (const std::invalid_argument &e) {
                         throw CLI::ValidationError("--lsh", e.what());
                       }
                       Warn(tool, "--lsh ...,transform=" + t +
                                      " is a deprecated spelling (accepted for one release): "
                                      "write --transform " +
                                      t);
                       continue;
                     }
                     rest += (rest.empty() ? "" : ",") + item;
                   }
                   if (rest.empty())
                     return;
                   std::string warning;
                   const spec::LshParams p =
                       ParseLsh("--lsh", rest, &warning, {spec.K, spec.L, spec.t}, false).front();
                   if (!warning.empty())
                     Warn(tool, warning);
                   spec.K = p.K;
                   spec.L = p.L;
                   spec.t = p.t;
                 },
                 "magicpig: K bits per table, L tables, threshold t (any subset; default "
                 "K=10,L=150,t=2)")
              ->type_name("K=..,L=..,t=..")
              ->group(kAttentionGroup);
  f.transform = AddTransformOption(app, spec.transform);
  f.sink = app.add_option("--sink", spec.sink, "first positions always attended")
               ->check(Integer(0, std::size_t(1) << 24))
               ->capture_default_str()
               ->group(kAttentionGroup);
  f.local = app.add_option("--local", spec.local, "last positions always attended")
                ->check(Integer(0, std::size_t(1) << 24))
                ->capture_default_str()
                ->group(kAttentionGroup);
  f.dense_layers =
      app.add_option_function<std::string>(
             "--dense-layers",
             [&spec](const std::string &text) {
               spec.dense_layers.clear();
               for (std::size_t l : ParseList(text))
                 spec.dense_layers.push_back(l);
               spec.dense_layers_set = true;
             },
             "layers that stay dense, e.g. 0,15 or none (default: the first and the middle one)")
          ->check(IntegerList(0, 1u << 16, true))
          ->type_name("LIST|none")
          ->group(kAttentionGroup);
  f.budget = app.add_option("--budget", spec.budget,
                            "topk, quest, oracle, lsh-hybrid: tokens read, a fraction of the "
                            "indexed ones")
                 ->check(Number(0, 1, true))
                 ->capture_default_str()
                 ->group(kAttentionGroup);
  f.hybrid =
      app.add_option_function<std::string>(
             "--hybrid",
             [&spec, files](const std::string &text) {
               try {
                 spec.hybrid = ParseHybridSpec(text, files);
               } catch (const std::invalid_argument &e) {
                 throw CLI::ValidationError("--hybrid", e.what());
               }
             },
             "lsh-hybrid: head=SHARE:floor=F:rank=hamming|collisions:bits=B:cand=T:vnorm=0|1:"
             "eps=E:delta=D:cap=C (default head=0.25:floor=0.1:rank=hamming; docs/HYBRID.md), "
             "or @FILE[:pairs]: the spec pig-tune hybrid chose")
          ->type_name("SPEC")
          ->group(kAttentionGroup);
  f.schedule = AddScheduleOption(app, spec.schedule);
  return f;
}

CLI::Option *AddTransformOption(CLI::App &app, ref::TransformSpec &transform,
                                const std::string &description) {
  return app
      .add_option_function<std::string>(
          "--transform",
          [&transform](const std::string &text) {
            try {
              transform = runtime::ParseServedTransform(text);
            } catch (const std::invalid_argument &e) {
              throw CLI::ValidationError("--transform", e.what());
            }
          },
          description.empty()
              ? "magicpig: hash keys and queries in a space fitted to each (layer, kv-head)'s "
                "keys: plain (SimHash, the default) or whiten:a=A, A in (0, 1] (docs/HASHING.md)"
              : description)
      ->type_name("SPEC")
      ->group(kAttentionGroup);
}

CLI::Option *AddScheduleOption(CLI::App &app, runtime::lsh::Schedule &schedule,
                               const std::string &description) {
  return app
      .add_option_function<std::string>(
          "--schedule",
          [&schedule](const std::string &text) {
            std::string err;
            const auto s = runtime::lsh::Schedule::parse(text, &err);
            if (!s)
              throw CLI::ValidationError("--schedule", err);
            schedule = *s;
          },
          description.empty()
              ? "magicpig: the LSH kernels' schedule, e.g. 'block=32 gqa=union' (docs/SCHEDULES.md)"
              : description)
      ->type_name("KNOBS")
      ->group(kAttentionGroup);
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
  return app
      .add_option_function<std::string>(
          "--kv",
          [&kv](const std::string &text) {
            if (!runtime::lsh::parse_dtype(text, kv))
              throw CLI::ValidationError("--kv", "expects bf16, f32 or q8 (8-bit, a scale per 32 "
                                                 "elements), got '" +
                                                     text + "'");
          },
          "the KV cache's element type: bf16, f32 or q8 (8-bit, docs/KV8.md)")
      ->type_name("bf16|f32|q8")
      ->default_str(runtime::lsh::to_string(kv))
      ->group(kAttentionGroup);
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
