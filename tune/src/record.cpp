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
namespace f = spec::record_field;

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

std::string to_json_line(const Record &r) {
  json o = json::object();
  o[f::kSchema] = r.schema;
  o[f::kKind] = spec::RecordKindName(r.kind);
  o[f::kKernel] = r.kernel;
  o[f::kT] = r.t;
  o[f::kLayer] = r.layer;
  o[f::kDense] = r.dense;
  o[f::kSchedule] = r.schedule;
  o[f::kWorkload] = {{f::kContext, r.workload.context},
                     {f::kGroup, r.workload.group},
                     {f::kThreads, r.workload.threads}};
  if (r.fingerprint)
    o[f::kFingerprint] = {{f::kCpu, r.fingerprint->cpu},
                          {f::kTarget, r.fingerprint->target},
                          {f::kCores, r.fingerprint->cores},
                          {f::kThreads, r.fingerprint->threads},
                          {f::kL3Bytes, r.fingerprint->l3_bytes}};
  if (r.quality)
    o[f::kQuality] = {{f::kMetric, r.quality->metric},     {f::kValue, r.quality->value},
                      {f::kSpread, r.quality->spread},     {f::kP90, r.quality->p90},
                      {f::kCost2, r.quality->cost2},       {f::kSeeds, r.quality->seeds},
                      {f::kDataHash, r.quality->data_hash}};
  if (r.quality && !r.quality->model_hash.empty())
    o[f::kQuality][f::kModelHash] = r.quality->model_hash;
  if (r.time)
    o[f::kTime] = {{f::kMedianS, r.time->median_s},
                   {f::kMadS, r.time->mad_s},
                   {f::kRounds, r.time->rounds},
                   {f::kMethod, r.time->method}};
  o[f::kStatus] = r.status;
  o[f::kPigVersion] = r.pig_version;
  o[f::kTimestamp] = r.timestamp;
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
  r.schema = get<int>(o, f::kSchema, w);
  if (r.schema < 1 || r.schema > kRecordSchema) // before the fields a newer schema may lack
    throw RecordError(spec::CheckRecord(r));
  const std::string kind = get<std::string>(o, f::kKind, w);
  if (const auto k = spec::RecordKindFromName(kind))
    r.kind = *k;
  else
    throw RecordError("field 'kind' must be \"quality\" or \"speed\", not \"" + kind + "\"");
  r.kernel = get<std::string>(o, f::kKernel, w);
  r.t = get<int>(o, f::kT, w);
  r.layer = get<int>(o, f::kLayer, w);
  r.dense = get<bool>(o, f::kDense, w);
  r.schedule = get<std::string>(o, f::kSchedule, w);
  const json &wl = object(o, f::kWorkload, w);
  r.workload.context = get<std::size_t>(wl, f::kContext, "workload: ");
  r.workload.group = get<int>(wl, f::kGroup, "workload: ");
  r.workload.threads = get<int>(wl, f::kThreads, "workload: ");
  if (o.contains(f::kFingerprint)) {
    const json &f = object(o, f::kFingerprint, w);
    Fingerprint fp;
    fp.cpu = get<std::string>(f, f::kCpu, "fingerprint: ");
    fp.target = get<std::string>(f, f::kTarget, "fingerprint: ");
    fp.cores = get<int>(f, f::kCores, "fingerprint: ");
    fp.threads = get<int>(f, f::kThreads, "fingerprint: ");
    fp.l3_bytes = get<std::uint64_t>(f, f::kL3Bytes, "fingerprint: ");
    r.fingerprint = fp;
  }
  if (o.contains(f::kQuality)) {
    const json &q = object(o, f::kQuality, w);
    Quality x;
    x.metric = get<std::string>(q, f::kMetric, "quality: ");
    x.value = get_number(q, f::kValue, "quality: ");
    x.spread = get_number(q, f::kSpread, "quality: ");
    x.p90 = get_number(q, f::kP90, "quality: ");
    x.cost2 = get_number(q, f::kCost2, "quality: ");
    x.seeds = get<std::vector<std::uint64_t>>(q, f::kSeeds, "quality: ");
    x.data_hash = get<std::string>(q, f::kDataHash, "quality: ");
    if (q.contains(f::kModelHash)) // optional: older records lack it
      x.model_hash = get<std::string>(q, f::kModelHash, "quality: ");
    r.quality = x;
  }
  if (o.contains(f::kTime)) {
    const json &t = object(o, f::kTime, w);
    Timing x;
    x.median_s = get_number(t, f::kMedianS, "time: ");
    x.mad_s = get_number(t, f::kMadS, "time: ");
    x.rounds = get<int>(t, f::kRounds, "time: ");
    x.method = get<std::string>(t, f::kMethod, "time: ");
    r.time = x;
  }
  r.status = get<std::string>(o, f::kStatus, w);
  r.pig_version = get<std::string>(o, f::kPigVersion, w);
  r.timestamp = get<std::string>(o, f::kTimestamp, w);
  if (const std::string problem = spec::CheckRecord(r); !problem.empty())
    throw RecordError(problem);
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
