#include "pig/app/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pig::app {

std::string FormatDuration(double s) {
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

Progress::Progress(std::string what, double total, int terminal)
    : what_(std::move(what)), total_(total), terminal_(terminal < 0 ? isatty(2) != 0 : terminal) {}

namespace {
double Fraction(double done, double total) {
  return total > 0 ? std::clamp(done / total, 0.0, 1.0) : 1.0;
}
} // namespace

std::string Progress::Line(double done, const std::string &label) const {
  const double f = Fraction(done, total_);
  const double el =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double left = f > 0 ? el * (1 - f) / f : -1;
  const int w = 30, fill = int(f * w);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3.0f%%", 100 * f);
  return what_ + " [" + std::string(size_t(fill), '#') + std::string(size_t(w - fill), '.') + "] " +
         pct + " " + FormatDuration(el) + " elapsed, " + FormatDuration(left) + " left" +
         (label.empty() ? "" : " " + label);
}

void Progress::Update(double done, const std::string &label) {
  const double f = Fraction(done, total_);
  if (terminal_) {
    std::fprintf(stderr, "\r%s\033[K", Line(done, label).c_str());
  } else if (int(f * 10) > last_decile_) {
    last_decile_ = int(f * 10);
    const double el =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double left = f > 0 ? el * (1 - f) / f : -1;
    std::fprintf(stderr, "%s: %3.0f%% (%s elapsed, %s left)%s%s\n", what_.c_str(), 100 * f,
                 FormatDuration(el).c_str(), FormatDuration(left).c_str(), label.empty() ? "" : " ",
                 label.c_str());
  }
}

void Progress::Done() {
  if (terminal_)
    std::fprintf(stderr, "\n");
}

} // namespace pig::app
