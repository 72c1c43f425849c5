#include "progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace pig::tune::workflow {

std::string Duration(double s) {
  if (s < 0 || !std::isfinite(s))
    return "?";
  char buf[32];
  if (s < 90)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 5400)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) / 60) % 60);
  return buf;
}

void Progress::Update(double done, const std::string &label) {
  const double f = total_ > 0 ? std::min(1.0, done / total_) : 1.0;
  const double el = Since(start_);
  const double left = f > 0 ? el * (1 - f) / f : -1;
  if (isatty(2)) {
    const int w = 30, fill = int(f * w);
    std::fprintf(stderr, "\r%s [%s%s] %3.0f%% %s elapsed, %s left %s\033[K", what_.c_str(),
                 std::string(size_t(fill), '#').c_str(), std::string(size_t(w - fill), '.').c_str(),
                 100 * f, Duration(el).c_str(), Duration(left).c_str(), label.c_str());
  } else if (int(f * 10) > last_decile_) {
    last_decile_ = int(f * 10);
    std::fprintf(stderr, "%s: %3.0f%% (%s elapsed, %s left) %s\n", what_.c_str(), 100 * f,
                 Duration(el).c_str(), Duration(left).c_str(), label.c_str());
  }
}

void Progress::Done() {
  if (isatty(2))
    std::fprintf(stderr, "\n");
}

} // namespace pig::tune::workflow
