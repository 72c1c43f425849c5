// pig-tune emit-manifest: the configs/kernels.txt lines of an operating point.
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "pig/eval/report.h" // WriteFile
#include "pig/spec/files.h"
#include "pig/tune/point.h"
#include "workflows.h"

namespace pig::tune {
namespace {

// Whitespace-normalised manifest line (comments dropped): how two lines are compared.
std::string ManifestKey(const std::string &line) {
  std::istringstream in(line.substr(0, line.find('#')));
  std::string w, key;
  while (in >> w)
    key += (key.empty() ? "" : " ") + w;
  return key;
}

} // namespace

// The point's configs/kernels.txt lines: one per distinct (K, L) of its LSH layers (head dim and
// KV type from the records, the schedule when not the default). With a manifest, only the lines
// it lacks (the build refuses a line listed twice); --append adds them to it.
int RunEmitManifest(const EmitManifestOptions &o) {
  const std::string &point_file = o.point, &out = o.out, &manifest = o.manifest;
  const bool append = o.append;
  if (append && manifest.empty()) // before the point is read
    throw UsageError("--append", "needs --manifest FILE");
  const OperatingPoint p = load_point(point_file);
  if (p.kernel_tail.empty())
    throw std::runtime_error(point_file + " does not name its head dim and KV type (\"kernel\")");
  std::set<std::string> present;
  std::string listed; // the manifest's text
  if (!manifest.empty()) {
    try {
      listed = pig::spec::ReadFile(manifest);
    } catch (const std::runtime_error &) {
      throw std::runtime_error("cannot read the manifest " + manifest);
    }
    std::istringstream in(listed);
    for (std::string line; std::getline(in, line);)
      if (!ManifestKey(line).empty())
        present.insert(ManifestKey(line));
  }
  std::ostringstream s;
  s << "# pig-tune emit-manifest " << point_file << ": " << p.criterion << " (data " << p.data_hash
    << ")\n";
  std::set<std::pair<int, int>> seen;
  size_t added = 0, already = 0;
  for (const auto &l : p.layers) {
    if (l.c.dense || !seen.insert({l.c.K, l.c.L}).second)
      continue;
    std::string line =
        "K=" + std::to_string(l.c.K) + " L=" + std::to_string(l.c.L) + " " + p.kernel_tail;
    if (!p.schedule.empty())
      line += " " + p.schedule;
    if (present.count(ManifestKey(line))) {
      ++already;
      continue;
    }
    s << line << "\n";
    ++added;
  }
  if (append) {
    if (added) // the whole manifest rewritten atomically: a failure leaves it as it was
      pig::spec::WriteFileAtomically(manifest, listed + "\n" + s.str());
    std::printf("%s: %zu line(s) added, %zu already listed; rebuild (./pig build) to generate "
                "them\n",
                manifest.c_str(), added, already);
  } else if (out.empty()) {
    std::fputs(s.str().c_str(), stdout);
    if (!manifest.empty())
      std::printf("# %zu configuration(s) of the point already in %s\n", already, manifest.c_str());
  } else {
    pig::spec::WriteFileAtomically(out, s.str());
    std::printf("wrote %s: %zu kernel configuration(s) (%zu already in the manifest)\n",
                out.c_str(), added, already);
  }
  return 0;
}

} // namespace pig::tune
