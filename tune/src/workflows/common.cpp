#include "common.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

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

LoadedRecords LoadRecords(const std::string &path) {
  LoadedRecords r = load_records(path);
  for (const auto &p : r.problems)
    std::fprintf(stderr, "pig-tune: warning: %s: skipped %s\n", path.c_str(), p.c_str());
  return r;
}

} // namespace pig::tune::workflow
