// The attention fields: one table that every front end reads (llama.cpp's one table of options,
// gemma.cpp's VisitFields). A field has one name, one help text and one parser (spec's and
// runtime's: spec::parse_method, spec::LshParams::parse, runtime::ParseServedTransform,
// lsh::Schedule::parse, spec::HybridConfig::parse), so a tool's command line (options.h makes a
// CLI11 option of every field), a pig-serve request's "pig" object and the keywords of Python's
// AttentionSpec spell, document and check it the same way. Only the spelling of the name is the
// front end's: --dense-layers, pig.dense_layers, dense_layers=.
//
// A bad value is a std::invalid_argument whose message continues the field's name ("expects an
// integer in [0, 16777216], got 'x'") or follows it ("K = 0 is outside [1, 16]"); FieldMessage
// joins the two as every front end prints them ("--sink expects ...", "pig.lsh: K = 0 ...").
//
// CLI11-free (pig_app_core): pig_serve and the Python module read the table without the option
// library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/spec/hybrid_config.h"
#include "pig/spec/lsh_params.h"

namespace pig::app {

/// Who gives the fields: the spelling of their names and what they may do.
enum class Front {
  kCommandLine, ///< a tool's flags: --dense-layers; --hybrid may read @FILE
  kRequest,     ///< a pig-serve request's "pig" object: pig.dense_layers; reads no file
  kPython,      ///< pig.AttentionSpec's keywords: dense_layers=; reads no file
};

/// A value as its front end has it: text (a flag's, a JSON string, the text of a JSON number as
/// written) or a number (Python's int and float), never formatted to be parsed again.
using FieldValue = std::variant<std::string, std::uint64_t, double>;

struct FieldContext {
  Front front = Front::kCommandLine;
  /// A deprecated spelling's warning (naming the fields in `front`'s spelling); dropped if null.
  std::vector<std::string> *warnings = nullptr;
};

struct AttentionField {
  const char *name;      ///< a request's key, "dense_layers"; the flag is "--dense-layers"
  const char *python;    ///< Python's keyword, nullptr where AttentionSpec takes none
  bool request;          ///< a key of a request's "pig" object
  const char *type_name; ///< the value in --help
  std::string help;      ///< --help's text
  /// A value of fixed form: the command line refuses a malformed one even when a later one
  /// overrides it (CLI11 validates every value it is given).
  bool check_each;
  /// Parses `value` into its part of `spec` (a subset of --lsh's K, L, t keeps the rest); throws
  /// std::invalid_argument with a message that does not name the field.
  void (*apply)(runtime::AttentionSpec &spec, const FieldValue &value, const FieldContext &ctx);
  /// The default --help shows, from the spec the options write; nullptr: none shown.
  std::string (*shown)(const runtime::AttentionSpec &spec);
};

/// Every field, in --help's order.
const std::vector<AttentionField> &AttentionFields();
/// The field named `name` (AttentionField::name); throws std::logic_error if there is none.
const AttentionField &FieldNamed(std::string_view name);

/// The field whose key in `front` is `key` (KeyOf), nullptr if `front` takes none such.
const AttentionField *FieldOf(Front front, std::string_view key);

/// Whether `front` takes the field (the command line takes every one).
bool Takes(const AttentionField &f, Front front);
/// The field's key in `front`: "--dense-layers", "dense_layers" (a request), Python's keyword.
std::string KeyOf(const AttentionField &f, Front front);
/// The field as `front`'s messages name it: the key, "pig.dense_layers" for a request.
std::string SpellingOf(const AttentionField &f, Front front);

/// A field's error message as printed: "<spelling> expects ..." (a continuation: "expects ",
/// "needs ", "must "), the message itself if it names the field first, else "<spelling>: ...".
std::string FieldMessage(const std::string &spelling, const std::string &message);

/// Sets the fields that `values` name by their keys in `front` (request or Python; a front end
/// that gives each field once), in the table's order whatever the order of `values`. Throws
/// std::invalid_argument with FieldMessage's text naming the field in `front`'s spelling, or for a
/// key that is not one of `front`'s.
void ApplyFields(runtime::AttentionSpec &spec, Front front,
                 const std::vector<std::pair<std::string, FieldValue>> &values,
                 std::vector<std::string> *warnings = nullptr);

// --- the parsers the fields share with the rest of the command line (options.h) ----------------

/// A whole decimal number in [lo, hi]: "" or "expects an integer in [lo, hi], got 'x'".
std::string CheckInteger(const std::string &text, std::uint64_t lo, std::uint64_t hi);
/// A number (strtod, the whole text, finite) in [lo, hi] ((lo, hi] when lo_open): "" or
/// "expects a number in [lo, hi], got 'x'" (hi = +inf: "expects a number >= lo, ...").
std::string CheckNumber(const std::string &text, double lo, double hi, bool lo_open);
/// The range CheckNumber states: "[lo, hi]", "(lo, hi]", ">= lo", "> lo".
std::string NumberRange(double lo, double hi, bool lo_open);
/// Comma-separated whole numbers in [lo, hi] ("none" when allow_none): "" or "expects integers
/// in [lo, hi] separated by commas[ (or none)], got 'x'".
std::string CheckIntegerList(const std::string &text, std::uint64_t lo, std::uint64_t hi,
                             bool allow_none);
/// The numbers of a list CheckIntegerList accepted ("none": none).
std::vector<std::size_t> ParseList(const std::string &text);

/// One configuration of --lsh (`name`: how the warning names it) in the one spelling or an
/// alias ("10:150", "10,150,2"; with allow_list "10:150,8:75"), over `base`'s values; the alias'
/// warning (naming the new spelling) in *warning, "" for the one spelling. Throws
/// std::invalid_argument with a message that does not name the field.
std::vector<spec::LshParams> ParseLshText(const std::string &name, const std::string &text,
                                          std::string *warning, const spec::LshParams &base = {},
                                          bool allow_list = true);

/// --hybrid's SPEC: key=value pairs joined by ':' (spec::HybridConfig::parse), or "@FILE" or
/// "@FILE:pairs": the spec of a hybrid point file (pig-tune hybrid; FILE without ':'), then
/// pairs that override it (e.g. "@pig-tune-hybrid.json:budget=3%"). files = false refuses "@"
/// (a request must not make the server read its files, nor quote them back in an error).
/// Throws std::invalid_argument naming what is wrong.
spec::HybridConfig ParseHybridSpec(const std::string &text, bool files = true);

} // namespace pig::app
