// The schedule of the LSH kernels: the decisions that change how a kernel set runs, not what it
// computes (every schedule gives the same estimator, tested against pig::ref). A schedule is part
// of a kernel set's key (pig/runtime/lsh_kernels.h), a compile-time parameter of the kernel
// templates (runtime/kernels/lsh-inl.h), and an attribute in the IR (#pig.schedule,
// docs/dialect/).
//
// Header-only and dependent on the standard library alone: the dialect's verifier, pig-schedule,
// pig-translate and the runtime read the same table of knobs, names, ranges and defaults
// (pig/runtime/lsh_schedule.h keeps the runtime's names for them).
//
// The knobs, what each decides, and why it is one (docs/PERFORMANCE.md, "Schedules"):
//   gqa            how a GQA group's sampled rows are attended: per_head (each head takes its own
//                  members of the group's union through the one-head pipeline, the heads back to
//                  back) or union (every union row scored once for all heads, non-members
//                  weighted to zero)
//   block          rows per softmax block (the chain at the end of a block is amortised over it)
//   prefetch       sampled K/V rows prefetched ahead of the row being scored (0: none)
//   dense_prefetch dense K/V rows prefetched ahead (0: the hardware prefetchers alone)
//   tables_ahead   bucket lists (tables) whose ids are prefetched ahead in retrieval (0: none)
//   parts          ranges one kv-head's sampled pass is split into across threads (0: automatic,
//                  2 when the kv-heads do not divide evenly among the threads, else 1)
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pig/spec/text.h"

namespace pig::spec {

enum class GqaStrategy : std::uint8_t { per_head = 0, union_rows = 1 };

/// One knob: its name in keys, manifests, tuning records and the IR, its legal values (an
/// integer range; `pow2`: powers of two only), its default.
struct KnobInfo {
  const char *name;
  int min, max, def;
  bool pow2;
  const char *help;
};

inline constexpr std::array<KnobInfo, 6> kScheduleKnobs = {{
    {"gqa", 0, 1, 0, false, "0 = per_head, 1 = union: how a GQA group attends its sampled rows"},
    {"block", 16, 128, 64, true, "rows per softmax block: 16, 32, 64 or 128"},
    {"prefetch", 0, 64, 8, false, "sampled rows prefetched ahead, 0..64"},
    {"dense_prefetch", 0, 256, 64, false, "dense rows prefetched ahead, 0..256"},
    {"tables_ahead", 0, 64, 8, false, "bucket lists prefetched ahead in retrieval, 0..64"},
    {"parts", 0, 8, 0, false, "ranges of one kv-head's sampled pass, 0 = automatic, 1..8"},
}};

/// A structural type: usable as a template argument (MakeKernelSet<K, L, d, T, Schedule{...}>).
struct Schedule {
  GqaStrategy gqa = GqaStrategy::per_head;
  int block = 64;
  int prefetch = 8;
  int dense_prefetch = 64;
  int tables_ahead = 8;
  int parts = 0;

  friend constexpr bool operator==(const Schedule &, const Schedule &) = default;

  /// Knob i's value (in kScheduleKnobs order), and setting it.
  constexpr int get(std::size_t i) const {
    switch (i) {
    case 0:
      return int(gqa);
    case 1:
      return block;
    case 2:
      return prefetch;
    case 3:
      return dense_prefetch;
    case 4:
      return tables_ahead;
    default:
      return parts;
    }
  }
  constexpr void set(std::size_t i, int v) {
    switch (i) {
    case 0:
      gqa = GqaStrategy(v);
      break;
    case 1:
      block = v;
      break;
    case 2:
      prefetch = v;
      break;
    case 3:
      dense_prefetch = v;
      break;
    case 4:
      tables_ahead = v;
      break;
    default:
      parts = v;
      break;
    }
  }

  /// "" when every knob is legal, else a message naming the first illegal knob, its value and
  /// its legal values.
  std::string validate() const {
    for (std::size_t i = 0; i < kScheduleKnobs.size(); ++i)
      if (std::string e = check_knob(i, get(i)); !e.empty())
        return e;
    return "";
  }

  /// "" when `v` is a legal value of knob i, else the message.
  static std::string check_knob(std::size_t i, int v) {
    const KnobInfo &k = kScheduleKnobs[i];
    const bool ok = v >= k.min && v <= k.max && (!k.pow2 || (v & (v - 1)) == 0);
    if (ok)
      return "";
    return cat("schedule knob '", k.name, "' = ", std::to_string(v), " is illegal (", k.help, ")");
  }

  /// "gqa=per_head block=64 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0": every knob,
  /// in table order (a manifest's or a key's spelling; parse() reads it back).
  std::string str() const {
    std::string s;
    for (std::size_t i = 0; i < kScheduleKnobs.size(); ++i) {
      if (i)
        s += ' ';
      s += kScheduleKnobs[i].name;
      s += '=';
      s += i == 0 ? gqa_name(gqa) : std::to_string(get(i));
    }
    return s;
  }

  /// "g0_b64_p8_dp64_ta8_pa0": the suffix of generated namespaces and file names.
  std::string symbol() const {
    return cat("g", std::to_string(int(gqa)), "_b", std::to_string(block), "_p",
               std::to_string(prefetch), "_dp", std::to_string(dense_prefetch), "_ta",
               std::to_string(tables_ahead), "_pa", std::to_string(parts));
  }

  static const char *gqa_name(GqaStrategy g) {
    return g == GqaStrategy::per_head ? "per_head" : "union";
  }

  /// Parses "knob=value" items separated by spaces or commas (any subset, any order; the others
  /// keep their defaults). gqa takes per_head or union. Returns nullopt and sets *error to a
  /// message naming the item on an unknown knob, a malformed or an illegal value, or a knob
  /// given twice.
  static std::optional<Schedule> parse(std::string_view text, std::string *error) {
    Schedule s;
    unsigned seen = 0;
    auto fail = [&](const std::string &m) -> std::optional<Schedule> {
      if (error)
        *error = m;
      return std::nullopt;
    };
    std::size_t p = 0;
    while (p < text.size()) {
      if (text[p] == ' ' || text[p] == ',' || text[p] == '\t') {
        ++p;
        continue;
      }
      std::size_t e = p;
      while (e < text.size() && text[e] != ' ' && text[e] != ',' && text[e] != '\t')
        ++e;
      const std::string_view item = text.substr(p, e - p);
      p = e;
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos)
        return fail(cat("schedule item '", item, "' is not knob=value"));
      const std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
      std::size_t i = 0;
      while (i < kScheduleKnobs.size() && name != kScheduleKnobs[i].name)
        ++i;
      if (i == kScheduleKnobs.size())
        return fail(cat("unknown schedule knob '", name,
                        "' (gqa, block, prefetch, dense_prefetch, tables_ahead, parts)"));
      if (seen & (1u << i))
        return fail(cat("schedule knob '", name, "' is given twice"));
      seen |= 1u << i;
      int v = 0;
      if (i == 0 && value == "per_head") {
        v = 0;
      } else if (i == 0 && value == "union") {
        v = 1;
      } else {
        const auto r = std::from_chars(value.data(), value.data() + value.size(), v);
        if (r.ec != std::errc() || r.ptr != value.data() + value.size() || value.empty())
          return fail(cat("schedule knob '", name, "' expects ",
                          i == 0 ? "per_head or union" : "an integer", ", got '", value, "'"));
      }
      if (std::string m = check_knob(i, v); !m.empty())
        return fail(m);
      s.set(i, v);
    }
    return s;
  }
};

} // namespace pig::spec
