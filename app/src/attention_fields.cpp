#include "pig/app/attention_fields.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "pig/spec/method.h"
#include "pig/tune/hybrid.h"
#include "pig/tune/record.h"

namespace pig::app {
namespace {

using runtime::AttentionSpec;

std::string Bound(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The shortest text that reads back as v: how a number that was never text is quoted.
std::string Shortest(double v) {
  char b[64];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
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

[[noreturn]] void Fail(const std::string &message) { throw std::invalid_argument(message); }

// A field that takes text: Python and the command line give strings, a request the text of its
// JSON value.
const std::string &Text(const FieldValue &v) {
  if (const auto *s = std::get_if<std::string>(&v))
    return *s;
  Fail("expects text, got a number");
}

std::string Quoted(const FieldValue &v) {
  if (const auto *s = std::get_if<std::string>(&v))
    return *s;
  if (const auto *u = std::get_if<std::uint64_t>(&v))
    return std::to_string(*u);
  return Shortest(std::get<double>(v));
}

std::size_t Integer(const FieldValue &v, std::uint64_t lo, std::uint64_t hi) {
  std::optional<std::uint64_t> x;
  if (const auto *s = std::get_if<std::string>(&v))
    x = ReadInteger(*s);
  else if (const auto *u = std::get_if<std::uint64_t>(&v))
    x = *u;
  if (!x || *x < lo || *x > hi)
    Fail("expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
         Quoted(v) + "'");
  return std::size_t(*x);
}

double Number(const FieldValue &v, double lo, double hi, bool lo_open) {
  if (const auto *s = std::get_if<std::string>(&v)) {
    if (const std::string e = CheckNumber(*s, lo, hi, lo_open); !e.empty())
      Fail(e);
    return double(std::strtold(s->c_str(), nullptr)); // as CLI11 converts a FLOAT option
  }
  const double x =
      std::holds_alternative<double>(v) ? std::get<double>(v) : double(std::get<std::uint64_t>(v));
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
    Fail("expects a number " + std::string(std::isinf(hi) ? "" : "in ") +
         NumberRange(lo, hi, lo_open) + ", got '" + Quoted(v) + "'");
  return x;
}

// --- the fields ----------------------------------------------------------------------------------

constexpr std::uint64_t kMaxPositions = std::uint64_t(1) << 24;

void ApplyMethod(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  const std::string &text = Text(v);
  const auto m = spec::parse_method(text);
  if (!m)
    Fail("expects one of " + spec::method_names() + ", got '" + text + "'");
  s.method = *m;
}

void ApplyLsh(AttentionSpec &s, const FieldValue &v, const FieldContext &ctx) {
  const std::string lsh = SpellingOf(FieldNamed("lsh"), ctx.front);
  auto warn = [&ctx](const std::string &w) {
    if (ctx.warnings)
      ctx.warnings->push_back(w);
  };
  std::string rest;
  for (const std::string &item : Split(Text(v), ',')) {
    if (item.starts_with("transform=")) { // the old transform=SPEC item: the transform field now
      const std::string t = item.substr(10);
      s.transform = runtime::ParseServedTransform(t);
      warn(lsh + " ...,transform=" + t +
           " is a deprecated spelling (accepted for one release): write " +
           SpellingOf(FieldNamed("transform"), ctx.front) + " " + t);
      continue;
    }
    rest += (rest.empty() ? "" : ",") + item;
  }
  if (rest.empty())
    return;
  std::string warning;
  const spec::LshParams p = ParseLshText(lsh, rest, &warning, s, false).front();
  if (!warning.empty())
    warn(warning);
  static_cast<spec::LshParams &>(s) = p;
}

void ApplyTransform(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.transform = runtime::ParseServedTransform(Text(v));
}

void ApplySink(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.sink = Integer(v, 0, kMaxPositions);
}

void ApplyLocal(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.local = Integer(v, 0, kMaxPositions);
}

// A number of positions in [0, kMaxPositions], or `word` (which stands for `word_value`).
size_t PositionsOr(const FieldValue &v, const char *word, size_t word_value) {
  if (const auto *t = std::get_if<std::string>(&v)) {
    if (*t == word)
      return word_value;
    if (!ReadInteger(*t))
      Fail("expects an integer in [0, " + std::to_string(kMaxPositions) + "] or '" + word +
           "', got '" + *t + "'");
  }
  return Integer(v, 0, kMaxPositions);
}

void ApplyMeanWindow(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.mean_window = PositionsOr(v, "prefix", AttentionSpec::kMeanOfPrefix);
}

void ApplyDenseBelow(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.dense_below = PositionsOr(v, "measured", AttentionSpec::kDenseBelowMeasured);
}

void ApplyDenseLayers(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  const std::string &text = Text(v);
  if (const std::string e = CheckIntegerList(text, 0, 1u << 16, true); !e.empty())
    Fail(e);
  s.dense_layers = ParseList(text);
  s.dense_layers_set = true;
}

void ApplyBudget(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  s.budget = Number(v, 0, 1, true);
}

void ApplyHybrid(AttentionSpec &s, const FieldValue &v, const FieldContext &ctx) {
  s.hybrid = ParseHybridSpec(Text(v), /*files=*/ctx.front == Front::kCommandLine);
}

void ApplySchedule(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  std::string err;
  const auto schedule = runtime::lsh::Schedule::parse(Text(v), &err);
  if (!schedule)
    Fail(err);
  s.schedule = *schedule;
}

void ApplyKv(AttentionSpec &s, const FieldValue &v, const FieldContext &) {
  const std::string &text = Text(v);
  if (!runtime::lsh::parse_dtype(text, s.kv_dtype))
    Fail("expects bf16, f32 or q8 (8-bit, a scale per 32 elements), got '" + text + "'");
}

// The defaults --help shows, as CLI11 shows a variable's (operator<<).
template <typename T> std::string Streamed(const T &v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::vector<AttentionField> MakeFields() {
  static_assert(kMaxPositions == 16777216, "the positions' type name below states the range");
  return {
      {"attention", "method", true, "TEXT:METHOD", "method: " + spec::method_names(), true,
       ApplyMethod, [](const AttentionSpec &s) -> std::string { return spec::name(s.method); }},
      {"lsh", "lsh", true, "K=..,L=..,t=..,r=..",
       "magicpig: K bits per table, L tables, threshold t, multi-probe radius r (any subset; "
       "default K=10,L=150,t=2,r=0)",
       false, ApplyLsh, nullptr},
      {"transform", "transform", true, "SPEC",
       "magicpig: hash keys and queries in a space fitted to each (layer, kv-head)'s keys: plain "
       "(SimHash, the default) or whiten:a=A, A in (0, 1] (docs/HASHING.md)",
       false, ApplyTransform, nullptr},
      {"sink", "sink", true, "UINT:[0, 16777216]", "first positions always attended", true,
       ApplySink, [](const AttentionSpec &s) { return Streamed(s.sink); }},
      {"local", "local", true, "UINT:[0, 16777216]", "last positions always attended", true,
       ApplyLocal, [](const AttentionSpec &s) { return Streamed(s.local); }},
      {"mean_window", "mean_window", true, "UINT|prefix",
       "magicpig: centre keys on the mean of the first N indexed keys (0: all, the paper's rule; "
       "prefix: those of the cached prefix a request attached); requests whose cached prefixes "
       "hold those keys share one LSH index over them (docs/SERVING.md)",
       true, ApplyMeanWindow, [](const AttentionSpec &s) { return s.MeanWindowName(); }},
      {"dense_below", "dense_below", true, "UINT|measured",
       "magicpig: a sequence shorter than N positions decodes densely (0: never, the paper's "
       "rule; measured: from where sampling is timed faster on this machine, once per process)",
       true, ApplyDenseBelow, [](const AttentionSpec &s) { return s.DenseBelowName(); }},
      {"dense_layers", "dense_layers", true, "LIST|none",
       "layers that stay dense, e.g. 0,15 or none (default: the first and the middle one)", true,
       ApplyDenseLayers, nullptr},
      {"budget", "budget", true, "FLOAT:(0, 1]",
       "topk, quest, oracle, lsh-hybrid: tokens read, a fraction of the indexed ones", true,
       ApplyBudget, [](const AttentionSpec &s) { return Streamed(s.budget); }},
      // Not a request's field: a request's lsh-hybrid runs the server's --hybrid (and a request
      // reads no file); Python's refuses @FILE.
      {"hybrid", "hybrid", false, "SPEC",
       "lsh-hybrid: head=SHARE:floor=F:rank=hamming|collisions:bits=B:cand=T:vnorm=0|1:eps=E:"
       "delta=D:cap=C (default head=0.25:floor=0.1:rank=hamming; docs/HYBRID.md), or "
       "@FILE[:pairs]: the spec pig-tune hybrid chose",
       false, ApplyHybrid, nullptr},
      // Not Python's: its AttentionSpec never took a schedule.
      {"schedule", nullptr, true, "KNOBS",
       "magicpig: the LSH kernels' schedule, e.g. 'block=32 gqa=union' (docs/SCHEDULES.md)", false,
       ApplySchedule, nullptr},
      {"kv", "kv", true, "bf16|f32|q8",
       "the KV cache's element type: bf16, f32 or q8 (8-bit, docs/KV8.md)", false, ApplyKv,
       [](const AttentionSpec &s) -> std::string { return runtime::lsh::to_string(s.kv_dtype); }},
  };
}

} // namespace

const std::vector<AttentionField> &AttentionFields() {
  static const std::vector<AttentionField> fields = MakeFields();
  return fields;
}

const AttentionField &FieldNamed(std::string_view name) {
  for (const AttentionField &f : AttentionFields())
    if (name == f.name)
      return f;
  throw std::logic_error("no attention field '" + std::string(name) + "'");
}

const AttentionField *FieldOf(Front front, std::string_view key) {
  for (const AttentionField &f : AttentionFields())
    if (Takes(f, front) && KeyOf(f, front) == key)
      return &f;
  return nullptr;
}

bool Takes(const AttentionField &f, Front front) {
  switch (front) {
  case Front::kCommandLine:
    return true;
  case Front::kRequest:
    return f.request;
  case Front::kPython:
    return f.python != nullptr;
  }
  return false;
}

std::string KeyOf(const AttentionField &f, Front front) {
  switch (front) {
  case Front::kCommandLine: {
    std::string flag = std::string("--") + f.name;
    for (char &c : flag)
      if (c == '_')
        c = '-';
    return flag;
  }
  case Front::kRequest:
    return f.name;
  case Front::kPython:
    return f.python ? f.python : "";
  }
  return "";
}

std::string SpellingOf(const AttentionField &f, Front front) {
  return front == Front::kRequest ? "pig." + KeyOf(f, front) : KeyOf(f, front);
}

std::string FieldMessage(const std::string &spelling, const std::string &message) {
  if (message.starts_with(spelling + " ")) // a message that names the field itself
    return message;
  for (const char *continuation : {"expects ", "needs ", "must "})
    if (message.starts_with(continuation))
      return spelling + " " + message;
  return spelling + ": " + message;
}

void ApplyFields(runtime::AttentionSpec &spec, Front front,
                 const std::vector<std::pair<std::string, FieldValue>> &values,
                 std::vector<std::string> *warnings) {
  for (const auto &[key, value] : values)
    if (!FieldOf(front, key))
      throw std::invalid_argument("unknown field '" + key + "'");
  const FieldContext ctx{front, warnings};
  for (const AttentionField &f : AttentionFields()) {
    if (!Takes(f, front))
      continue;
    for (const auto &[key, value] : values) {
      if (key != KeyOf(f, front))
        continue;
      try {
        f.apply(spec, value, ctx);
      } catch (const std::invalid_argument &e) {
        throw std::invalid_argument(FieldMessage(SpellingOf(f, front), e.what()));
      }
    }
  }
}

std::string CheckInteger(const std::string &text, std::uint64_t lo, std::uint64_t hi) {
  const auto v = ReadInteger(text);
  if (!v || *v < lo || *v > hi)
    return "expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
           text + "'";
  return "";
}

std::string NumberRange(double lo, double hi, bool lo_open) {
  return std::isinf(hi) ? std::string(lo_open ? "> " : ">= ") + Bound(lo)
                        : std::string(lo_open ? "(" : "[") + Bound(lo) + ", " + Bound(hi) + "]";
}

std::string CheckNumber(const std::string &text, double lo, double hi, bool lo_open) {
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    return "expects a number " + std::string(std::isinf(hi) ? "" : "in ") +
           NumberRange(lo, hi, lo_open) + ", got '" + text + "'";
  return "";
}

std::string CheckIntegerList(const std::string &text, std::uint64_t lo, std::uint64_t hi,
                             bool allow_none) {
  if (allow_none && text == "none")
    return "";
  for (const std::string &item : Split(text, ',')) {
    const auto v = ReadInteger(item);
    if (!v || *v < lo || *v > hi)
      return "expects integers in [" + std::to_string(lo) + ", " + std::to_string(hi) +
             "] separated by commas" + (allow_none ? " (or none)" : "") + ", got '" + text + "'";
  }
  return "";
}

std::vector<std::size_t> ParseList(const std::string &text) {
  std::vector<std::size_t> out;
  if (text == "none")
    return out;
  for (const std::string &item : Split(text, ','))
    out.push_back(std::size_t(ReadInteger(item).value_or(0)));
  return out;
}

std::vector<spec::LshParams> ParseLshText(const std::string &name, const std::string &text,
                                          std::string *warning, const spec::LshParams &base,
                                          bool allow_list) {
  auto one = [&](const std::string &spelling) {
    std::string err;
    const auto p = spec::LshParams::parse(spelling, &err, base);
    if (!p)
      Fail(err);
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
      Fail("takes one configuration, got '" + text + "'");
    for (const std::string &item : items) {
      const std::vector<std::string> kl = Split(item, ':');
      if (kl.size() != 2)
        Fail("expects K=..,L=..,t=.. (e.g. K=10,L=150,t=2), got '" + text + "'");
      out.push_back(one("K=" + kl[0] + ",L=" + kl[1]));
      if (!new_spelling.empty())
        new_spelling += ' ';
      new_spelling += out.back().str();
    }
  } else { // the old "10,150,2"
    const std::vector<std::string> klt = Split(text, ',');
    if (klt.size() != 3)
      Fail("expects K=..,L=..,t=.. (e.g. K=10,L=150,t=2), got '" + text + "'");
    out.push_back(one("K=" + klt[0] + ",L=" + klt[1] + ",t=" + klt[2]));
    new_spelling = out.back().str();
  }
  if (warning)
    *warning = name + " " + text + " is a deprecated spelling (accepted for one release): write " +
               name + " " + new_spelling;
  return out;
}

spec::HybridConfig ParseHybridSpec(const std::string &text, bool files) {
  if (!text.starts_with('@'))
    return spec::HybridConfig::parse(text);
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
  return spec::HybridConfig::parse(colon == std::string::npos ? spec : spec + text.substr(colon));
}

} // namespace pig::app
