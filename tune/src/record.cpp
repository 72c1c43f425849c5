#include "pig/tune/record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace pig::tune {
namespace {

using json = nlohmann::json;

const char *kind_name(RecordKind k) { return k == RecordKind::quality ? "quality" : "speed"; }

// Typed field access with messages that name the field.
const json &field(const json &o, const char *name, const std::string &where) {
  auto it = o.find(name);
  if (it == o.end())
    throw RecordError(where + "missing field '" + name + "'");
  return *it;
}
template <typename T> T get(const json &o, const char *name, const std::string &where) {
  const json &v = field(o, name, where);
  try {
    return v.get<T>();
  } catch (const json::exception &) {
    throw RecordError(where + "field '" + name + "' has the wrong type (" + v.type_name() + ")");
  }
}
double get_number(const json &o, const char *name, const std::string &where) {
  const json &v = field(o, name, where);
  if (!v.is_number())
    throw RecordError(where + "field '" + name + "' must be a number, not " + v.type_name());
  return v.get<double>();
}
const json &object(const json &o, const char *name, const std::string &where) {
  const json &v = field(o, name, where);
  if (!v.is_object())
    throw RecordError(where + "field '" + name + "' must be an object, not " + v.type_name());
  return v;
}

} // namespace

std::string Fingerprint::str() const {
  std::string s = cpu;
  s.append(", ").append(target).append(", ").append(std::to_string(cores)).append(" cores, ");
  s.append(std::to_string(threads)).append(" threads, L3 ");
  s.append(std::to_string(l3_bytes >> 20)).append(" MiB");
  return s;
}

bool Record::usable_on(const Fingerprint &here) const {
  if (kind == RecordKind::quality)
    return true;
  return fingerprint && *fingerprint == here;
}

std::string to_json_line(const Record &r) {
  json o = json::object();
  o["schema"] = r.schema;
  o["kind"] = kind_name(r.kind);
  o["kernel"] = r.kernel;
  o["t"] = r.t;
  o["layer"] = r.layer;
  o["dense"] = r.dense;
  o["schedule"] = r.schedule;
  o["workload"] = {{"context", r.workload.context},
                   {"group", r.workload.group},
                   {"threads", r.workload.threads}};
  if (r.fingerprint)
    o["fingerprint"] = {{"cpu", r.fingerprint->cpu},
                        {"target", r.fingerprint->target},
                        {"cores", r.fingerprint->cores},
                        {"threads", r.fingerprint->threads},
                        {"l3_bytes", r.fingerprint->l3_bytes}};
  if (r.quality)
    o["quality"] = {{"metric", r.quality->metric},      {"value", r.quality->value},
                    {"spread", r.quality->spread},      {"p90", r.quality->p90},
                    {"cost2", r.quality->cost2},        {"seeds", r.quality->seeds},
                    {"data_hash", r.quality->data_hash}};
  if (r.time)
    o["time"] = {{"median_s", r.time->median_s},
                 {"mad_s", r.time->mad_s},
                 {"rounds", r.time->rounds},
                 {"method", r.time->method}};
  o["status"] = r.status;
  o["pig_version"] = r.pig_version;
  o["timestamp"] = r.timestamp;
  return o.dump(); // keys sorted (nlohmann's object is a std::map): deterministic bytes
}

Record parse_record(std::string_view line) {
  json o;
  try {
    o = json::parse(line);
  } catch (const json::exception &e) { // parse_error, and out_of_range for number overflows
    throw RecordError(std::string("not JSON: ") + e.what());
  }
  if (!o.is_object())
    throw RecordError(std::string("a record is a JSON object, not ") + o.type_name());
  const std::string w;
  Record r;
  r.schema = get<int>(o, "schema", w);
  if (r.schema < 1 || r.schema > kRecordSchema)
    throw RecordError("schema " + std::to_string(r.schema) + " is not one this build reads (1.." +
                      std::to_string(kRecordSchema) + ")");
  const std::string kind = get<std::string>(o, "kind", w);
  if (kind == "quality")
    r.kind = RecordKind::quality;
  else if (kind == "speed")
    r.kind = RecordKind::speed;
  else
    throw RecordError("field 'kind' must be \"quality\" or \"speed\", not \"" + kind + "\"");
  r.kernel = get<std::string>(o, "kernel", w);
  if (r.kernel.empty())
    throw RecordError("field 'kernel' is empty");
  r.t = get<int>(o, "t", w);
  r.layer = get<int>(o, "layer", w);
  if (r.layer < -1)
    throw RecordError("field 'layer' must be >= -1, got " + std::to_string(r.layer));
  r.dense = get<bool>(o, "dense", w);
  r.schedule = get<std::string>(o, "schedule", w);
  const json &wl = object(o, "workload", w);
  r.workload.context = get<std::size_t>(wl, "context", "workload: ");
  r.workload.group = get<int>(wl, "group", "workload: ");
  r.workload.threads = get<int>(wl, "threads", "workload: ");
  if (o.contains("fingerprint")) {
    const json &f = object(o, "fingerprint", w);
    Fingerprint fp;
    fp.cpu = get<std::string>(f, "cpu", "fingerprint: ");
    fp.target = get<std::string>(f, "target", "fingerprint: ");
    fp.cores = get<int>(f, "cores", "fingerprint: ");
    fp.threads = get<int>(f, "threads", "fingerprint: ");
    fp.l3_bytes = get<std::uint64_t>(f, "l3_bytes", "fingerprint: ");
    r.fingerprint = fp;
  }
  if (o.contains("quality")) {
    const json &q = object(o, "quality", w);
    Quality x;
    x.metric = get<std::string>(q, "metric", "quality: ");
    x.value = get_number(q, "value", "quality: ");
    x.spread = get_number(q, "spread", "quality: ");
    x.p90 = get_number(q, "p90", "quality: ");
    x.cost2 = get_number(q, "cost2", "quality: ");
    x.seeds = get<std::vector<std::uint64_t>>(q, "seeds", "quality: ");
    x.data_hash = get<std::string>(q, "data_hash", "quality: ");
    r.quality = x;
  }
  if (o.contains("time")) {
    const json &t = object(o, "time", w);
    Timing x;
    x.median_s = get_number(t, "median_s", "time: ");
    x.mad_s = get_number(t, "mad_s", "time: ");
    x.rounds = get<int>(t, "rounds", "time: ");
    x.method = get<std::string>(t, "method", "time: ");
    r.time = x;
  }
  r.status = get<std::string>(o, "status", w);
  r.pig_version = get<std::string>(o, "pig_version", w);
  r.timestamp = get<std::string>(o, "timestamp", w);
  if (r.ok()) {
    if (r.kind == RecordKind::quality && !r.quality)
      throw RecordError("a quality record with status ok needs 'quality'");
    if (r.kind == RecordKind::speed && (!r.time || !r.fingerprint))
      throw RecordError("a speed record with status ok needs 'time' and 'fingerprint'");
  }
  return r;
}

LoadedRecords load_records(const std::string &path) {
  LoadedRecords out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT)
      return out;
    throw RecordError(path + ": cannot be read: " + std::strerror(errno));
  }
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const bool last_unterminated = in.eof(); // getline hit the end without a newline
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    try {
      out.records.push_back(parse_record(line));
    } catch (const RecordError &e) {
      out.problems.push_back(
          path + ":" + std::to_string(n) + ": " +
          (last_unterminated ? "truncated last line (an interrupted append?): " : "") + e.what());
    }
  }
  if (in.bad())
    throw RecordError(path + ": read error");
  return out;
}

void append_record(const std::string &path, const Record &r) {
  std::string line = to_json_line(r);
  line.push_back('\n');
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw RecordError(path + ": cannot open for appending: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n')
      line.insert(line.begin(), '\n'); // end the interrupted line first, in the same write
  }
  const char *p = line.data();
  std::size_t left = line.size();
  while (left > 0) { // one write(2) in practice; a short write (disk full) is continued or fails
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      const int e = errno;
      ::close(fd);
      throw RecordError(path + ": append failed: " + std::strerror(e));
    }
    p += w;
    left -= std::size_t(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!synced)
    throw RecordError(path + ": fsync failed: " + std::strerror(e));
}

} // namespace pig::tune
