#include "replay.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "common.h"
#include "pig/runtime/ops.h"
#include "pig/tune/speed.h"

namespace pig::tune::workflow {

Fingerprint HereFingerprint(const CommonOptions &common, const SelectOptions &o) {
  if (!o.as_machine.empty()) {
    std::vector<std::string> f;
    std::stringstream ss(o.as_machine);
    for (std::string x; std::getline(ss, x, '|');)
      f.push_back(x);
    // cores and threads in [1, 1 << 20], l3_bytes a whole number (no stoi: "x" threw).
    auto number = [&](size_t i, std::uint64_t lo,
                      std::uint64_t hi) -> std::optional<std::uint64_t> {
      std::uint64_t v = 0;
      if (i >= f.size())
        return std::nullopt;
      const char *b = f[i].data(), *e = b + f[i].size();
      const auto r = std::from_chars(b, e, v);
      if (f[i].empty() || r.ec != std::errc() || r.ptr != e || v < lo || v > hi)
        return std::nullopt;
      return v;
    };
    const auto cores = number(2, 1, 1u << 20), threads = number(3, 1, 1u << 20),
               l3 = number(4, 0, UINT64_MAX);
    if (f.size() != 5 || !cores || !threads || !l3)
      throw UsageError("--as-machine", "expects cpu|target|cores|threads|l3_bytes (cores and "
                                       "threads in [1, 1048576], l3_bytes a whole number), got '" +
                                           o.as_machine + "'");
    return Fingerprint{f[0], f[1], int(*cores), int(*threads), *l3};
  }
  const int threads =
      common.threads ? int(common.threads) : int(std::thread::hardware_concurrency());
  return DetectFingerprint(runtime::BestKernels().target, std::max(1, threads));
}

bool IsDefault(const Record &r) {
  Candidate c;
  if (std::sscanf(r.kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
    return false;
  c.t = r.t;
  return c == DefaultCandidate();
}

std::vector<SpeedRow> UsableSpeed(const std::vector<Record> &rs, const Fingerprint &fp,
                                  size_t &context, bool &foreign) {
  foreign = false;
  std::vector<const Record *> here;
  for (const auto &r : rs) {
    // Whole-step records only (per-layer times and the non-attention record are select
    // --cost time's).
    if (r.kind != RecordKind::speed || !r.time || r.layer != -1 || r.kernel == "non-attention")
      continue;
    if (!r.usable_on(fp)) {
      foreign = true;
      continue;
    }
    here.push_back(&r);
  }
  if (context == 0)
    for (const auto *r : here)
      context = std::max(context, r->workload.context);
  std::vector<SpeedRow> out;
  for (const auto *r : here) {
    if (r->workload.context != context || !r->ok())
      continue;
    // The default of the same run (same timestamp and context) is the reference of its ratio.
    const Record *ref = nullptr;
    for (const auto *x : here)
      if (x->timestamp == r->timestamp && x->workload.context == context && IsDefault(*x) &&
          x->schedule == r->schedule && x->time->method.find("the default") != std::string::npos)
        ref = x;
    if (!ref)
      continue;
    out.push_back({*r, ref->time->median_s / r->time->median_s});
  }
  return out;
}

std::vector<runtime::LayerLsh> ParseLayers(const std::string &s) {
  std::vector<runtime::LayerLsh> out;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    const auto colon = tok.find(':');
    if (colon == std::string::npos)
      throw std::runtime_error("bad layer run '" + tok + "' in '" + s + "'");
    const std::string range = tok.substr(0, colon), what = tok.substr(colon + 1);
    size_t b = 0, e = 0;
    const auto dash = range.find('-');
    b = std::stoul(range.substr(0, dash));
    e = dash == std::string::npos ? b : std::stoul(range.substr(dash + 1));
    runtime::LayerLsh c;
    if (what == "dense")
      c.dense = true;
    else {
      std::string l, t;
      in >> l >> t;
      if (what.rfind("K=", 0) != 0 || l.rfind("L=", 0) != 0 || t.rfind("t=", 0) != 0)
        throw std::runtime_error("bad layer choice in '" + s + "'");
      c.K = std::stoi(what.substr(2));
      c.L = std::stoi(l.substr(2));
      c.t = std::stoi(t.substr(2));
    }
    if (b != out.size() || e < b)
      throw std::runtime_error("layer runs out of order in '" + s + "'");
    out.insert(out.end(), e - b + 1, c);
  }
  return out;
}

std::optional<OperatingPoint> PointOfSpeedRecord(const Record &r, const QualityTable &t) {
  if (r.kernel.rfind("point ", 0) == 0) {
    const auto layers = ParseLayers(r.kernel.substr(6));
    if (layers.size() != t.layers.size())
      return std::nullopt;
    OperatingPoint p;
    p.data_hash = t.data_hash;
    p.model_hash = t.model_hash;
    p.kernel_tail = t.kernel_tail;
    double e = 0, k = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerChoice lc{int(l), {layers[l].K, layers[l].L, layers[l].t, layers[l].dense}, 0, 1};
      if (!lc.c.dense) {
        const auto &lt = t.layers[l];
        auto it = std::find(lt.candidates.begin(), lt.candidates.end(), lc.c);
        if (it == lt.candidates.end())
          return std::nullopt;
        lc.error = lt.error[size_t(it - lt.candidates.begin())];
        lc.cost2 = lt.cost2[size_t(it - lt.candidates.begin())];
      }
      e += lc.error;
      k += lc.cost2;
      p.layers.push_back(lc);
    }
    p.error = e / double(layers.size());
    p.cost2 = k / double(layers.size());
    p.schedule = r.schedule == runtime::lsh::Schedule{}.str() ? "" : r.schedule;
    return p;
  }
  Candidate c;
  if (std::sscanf(r.kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
    return std::nullopt;
  c.t = r.t;
  auto p = uniform_point(t, c, DefaultDense(t.layers.size()));
  if (p)
    p->schedule = r.schedule == runtime::lsh::Schedule{}.str() ? "" : r.schedule;
  return p;
}

std::optional<LayerTimes> LoadLayerTimes(const std::vector<Record> &rs, const Fingerprint &fp,
                                         size_t context, bool &foreign) {
  foreign = false;
  LayerTimes lt;
  lt.context = context;
  for (const auto &r : rs)
    if (r.kind == RecordKind::speed && r.time && r.ok() && r.kernel == "non-attention") {
      if (!r.usable_on(fp)) {
        foreign = true;
        continue;
      }
      if (context == 0)
        lt.context = std::max(lt.context, r.workload.context);
    }
  if (lt.context == 0)
    return std::nullopt;
  // One run's records only (the latest run at this context): every time of a run is
  // normalised to that run's default, so runs are not mixed.
  std::string run;
  for (const auto &r : rs)
    if (r.kind == RecordKind::speed && r.time && r.ok() && r.usable_on(fp) &&
        r.workload.context == lt.context && r.kernel == "non-attention" && r.timestamp >= run) {
      run = r.timestamp;
      lt.rest_s = r.time->median_s;
    }
  if (run.empty())
    return std::nullopt;
  std::map<std::tuple<std::string, int, int>, const Record *> latest;
  for (const auto &r : rs)
    if (r.kind == RecordKind::speed && r.time && r.ok() && r.usable_on(fp) &&
        r.workload.context == lt.context && r.timestamp == run && r.layer >= 0)
      latest[{r.kernel, r.t, r.layer}] = &r;
  for (const auto &[key, r] : latest) {
    Candidate c{{0, 0, 0}, r->dense};
    if (!r->dense && std::sscanf(r->kernel.c_str(), "K=%d L=%d", &c.K, &c.L) != 2)
      continue;
    if (!r->dense)
      c.t = r->t;
    lt.times.push_back({r->layer, c, r->time->median_s});
  }
  return lt;
}

} // namespace pig::tune::workflow
