// What pig-tune's JSON files (operating points, hybrid points) share: the typed field readers,
// each throwing RecordError naming the field, prefixed by `where` ("operating point: "), and
// pig/spec/files.h's reading and atomic writing with RecordError for their failures.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "pig/spec/files.h"
#include "pig/tune/record.h"

namespace pig::tune::json_fields {

using json = nlohmann::json;

inline const json &need(const json &o, const char *name, const std::string &where) {
  if (!o.is_object())
    throw RecordError(where + "must be an object");
  auto it = o.find(name);
  if (it == o.end())
    throw RecordError(where + "missing field '" + name + "'");
  return *it;
}
inline double number(const json &o, const char *name, const std::string &where) {
  const json &v = need(o, name, where);
  if (!v.is_number())
    throw RecordError(where + "field '" + name + "' must be a number, not " + v.type_name());
  return v.get<double>();
}
inline int integer(const json &o, const char *name, const std::string &where) {
  const json &v = need(o, name, where);
  if (!v.is_number_integer())
    throw RecordError(where + "field '" + name + "' must be an integer, not " + v.type_name());
  // get<int>() would wrap 4294967306 to 10: a value outside int is refused, not cast.
  const bool fits = v.is_number_unsigned()
                        ? v.get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<int>::max())
                        : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                              v.get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!fits)
    throw RecordError(where + "field '" + name + "' = " + v.dump() + " is outside int");
  return v.get<int>();
}
inline std::string text(const json &o, const char *name, const std::string &where) {
  const json &v = need(o, name, where);
  if (!v.is_string())
    throw RecordError(where + "field '" + name + "' must be a string, not " + v.type_name());
  return v.get<std::string>();
}

/// parse(the contents of `path`); RecordError when it cannot be read ("cannot read `what` path"),
/// and parse's RecordError prefixed by the path.
template <class Parse> auto load_file(const std::string &path, const char *what, Parse parse) {
  std::string text;
  try {
    text = spec::ReadFile(path);
  } catch (const std::runtime_error &) {
    throw RecordError(std::string("cannot read ") + what + " " + path);
  }
  try {
    return parse(text);
  } catch (const RecordError &e) {
    throw RecordError(path + ": " + e.what());
  }
}

/// spec::WriteFileAtomically, its failures as RecordError.
inline void write_atomically(const std::string &path, const std::string &text) {
  try {
    spec::WriteFileAtomically(path, text);
  } catch (const std::runtime_error &e) {
    throw RecordError(e.what());
  }
}

} // namespace pig::tune::json_fields
