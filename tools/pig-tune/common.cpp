#include "common.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>
#include <string>

namespace pig::tune::workflow {

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string Fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string KernelKey(const Candidate &c, size_t d, runtime::lsh::DType dt) {
  std::string s = "K=";
  s.append(std::to_string(c.K)).append(" L=").append(std::to_string(c.L)).append(" d=");
  s.append(std::to_string(d)).append(" ").append(runtime::lsh::to_string(dt));
  return s;
}

std::string CandStr(const Candidate &c) {
  if (c.dense)
    return "dense";
  return "K=" + std::to_string(c.K) + " L=" + std::to_string(c.L) + " t=" + std::to_string(c.t);
}

std::vector<size_t> DefaultDense(size_t n_layers) {
  return runtime::AttentionSpec{}.DenseLayers(n_layers);
}

Candidate DefaultCandidate() {
  const runtime::AttentionSpec d;
  return {d.K, d.L, d.t};
}

size_t LayersOf(const std::vector<Record> &rs) {
  int m = -1;
  for (const auto &r : rs)
    if (r.kind == RecordKind::quality)
      m = std::max(m, r.layer);
  if (m < 0)
    throw std::runtime_error("the records hold no quality measurement (run pig-tune accuracy)");
  return size_t(m) + 1;
}

QualityTable QualityTableOf(const std::vector<Record> &rs, size_t n_layers,
                            const std::string &data_hash) {
  std::set<std::string> hashes; // as build_quality_table counts them
  for (const Record &r : rs)
    if (r.kind == RecordKind::quality && r.ok() && r.quality && !r.dense)
      hashes.insert(r.quality->data_hash);
  std::string held;
  for (const std::string &h : hashes)
    held += (held.empty() ? "" : ", ") + h;
  if (!data_hash.empty() && !hashes.count(data_hash))
    throw UsageError("--data-hash", "no quality record has data hash '" + data_hash +
                                        "' (the records hold " + (held.empty() ? "none" : held) +
                                        ")");
  if (data_hash.empty() && hashes.size() > 1)
    throw UsageError("--data-hash",
                     "the records hold quality measurements of " + std::to_string(hashes.size()) +
                         " different (model, text, contexts): name one (" + held + ")");
  return build_quality_table(rs, n_layers, data_hash);
}

LoadedRecords LoadRecords(const std::string &path) {
  LoadedRecords r = load_records(path);
  for (const auto &p : r.problems)
    std::fprintf(stderr, "pig-tune: warning: %s: skipped %s\n", path.c_str(), p.c_str());
  return r;
}

} // namespace pig::tune::workflow
