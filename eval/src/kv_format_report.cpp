// kv-formats' report: per context and format, the output and logit errors of exact attention
// over the dequantised rows (kv_formats.md).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "pig/spec/files.h"
#include "reports.h"

namespace pig::eval {

void KvFormatReport::Measure(size_t P, const std::vector<size_t> &layers, size_t n_kv_heads,
                             const LoadGroup &load) {
  for (size_t layer : layers)
    for (size_t kvh = 0; kvh < n_kv_heads; ++kvh) {
      pig::ref::OwnedMatrix K, V;
      std::vector<std::vector<float>> qs;
      load(layer, kvh, K, V, qs);
      for (KvFormat f : AllKvFormats())
        for (const auto &e : MeasureKvFormat(f, qs, K, V))
          errs_[{P, int(f)}].push_back(e);
    }
  std::fprintf(stderr, "pig-eval: kv formats at %zu done\n", P);
}

void KvFormatReport::Finish(const EvalOptions &eval, size_t d) const {
  std::string md = "Exact attention over the dequantised rows against exact attention over the f32 "
                   "rows (relative L2 error of the output; scaled-logit error), real decode-step "
                   "queries, layers " +
                   JoinSizes(eval.layers) + ", every kv-head and query head. Command: `" +
                   eval.command_line +
                   "`\n\n| context | format | bytes/element | output error "
                   "mean | p95 | max | logit error rms (mean) | logit error max |\n"
                   "|---|---|---|---|---|---|---|---|\n";
  for (const auto &[key, v] : errs_) {
    std::vector<double> rel;
    double rms = 0, lmax = 0;
    for (const auto &e : v) {
      rel.push_back(e.out_rel);
      rms += e.logit_rms;
      lmax = std::max(lmax, e.logit_max);
    }
    std::sort(rel.begin(), rel.end());
    double mean = 0;
    for (double r : rel)
      mean += r;
    mean /= double(rel.size());
    const double p95 = rel[std::min(rel.size() - 1, size_t(0.95 * double(rel.size())))];
    const auto f = KvFormat(key.second);
    md += "| " + std::to_string(key.first) + " | " + to_string(f) + " | " +
          Fmt("%.3f", BytesPerElement(f, d)) + " | " + Fmt("%.2e", mean) + " | " +
          Fmt("%.2e", p95) + " | " + Fmt("%.2e", rel.back()) + " | " +
          Fmt("%.2e", rms / double(v.size())) + " | " + Fmt("%.2e", lmax) + " |\n";
  }
  std::printf("%s", md.c_str());
  spec::WriteFileAtomically(eval.out + "/kv_formats.md", md);
}

std::string KvFormatReport::JoinSizes(const std::vector<size_t> &v) {
  std::string s;
  for (size_t x : v) {
    if (!s.empty())
      s += ','; // apart: GCC 12 reports a false -Wrestrict on `"," + std::string` here
    s += std::to_string(x);
  }
  return s;
}

} // namespace pig::eval
