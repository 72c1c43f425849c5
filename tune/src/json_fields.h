// What pig-tune's JSON files (operating points, hybrid points) share: the typed field readers,
// each throwing RecordError naming the field, prefixed by `where` ("operating point: "), and the
// atomic write.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

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
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw RecordError(std::string("cannot read ") + what + " " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return parse(ss.str());
  } catch (const RecordError &e) {
    throw RecordError(path + ": " + e.what());
  }
}

/// Writes `text` to `path`.tmp, then renames it over `path`. On any failure (the temporary
/// cannot be created, written or renamed) it throws RecordError, `path` keeps its old contents
/// and no temporary it created is left.
inline void write_atomically(const std::string &path, const std::string &text) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) // nothing was created: whatever holds the name (a directory) is not ours to remove
    throw RecordError("cannot create " + tmp);
  out << text;
  out.close(); // flushes: a full disk shows here
  if (!out) {
    std::remove(tmp.c_str());
    throw RecordError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw RecordError("cannot rename " + tmp + " to " + path);
  }
}

} // namespace pig::tune::json_fields
