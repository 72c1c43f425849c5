#include "pig/eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "pig/spec/files.h"

namespace pig::eval {

double Mean(const std::vector<double> &x) {
  double s = 0;
  for (double v : x)
    s += v;
  return x.empty() ? NAN : s / double(x.size());
}

double Median(std::vector<double> x) {
  if (x.empty())
    return NAN;
  std::sort(x.begin(), x.end());
  const std::size_t m = x.size() / 2;
  return x.size() % 2 ? x[m] : 0.5 * (x[m - 1] + x[m]);
}

Csv::Csv(const std::string &path, const std::vector<std::string> &header) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_)
    throw std::runtime_error("cannot write " + path);
  row(header);
}

Csv::~Csv() {
  if (f_)
    std::fclose(f_);
}

void Csv::row(const std::vector<std::string> &fields) {
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string &s = fields[i];
    if (i)
      std::fputc(',', f_);
    if (s.find_first_of(",\"\n") == std::string::npos) {
      std::fputs(s.c_str(), f_);
      continue;
    }
    std::fputc('"', f_);
    for (char c : s) {
      if (c == '"')
        std::fputc('"', f_); // a quote inside a quoted field is doubled
      std::fputc(c, f_);
    }
    std::fputc('"', f_);
  }
  std::fprintf(f_, "\n");
  std::fflush(f_); // a long run killed midway keeps what it measured
}

std::string Fmt(const char *format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

std::string Join(const std::vector<std::string> &parts, const std::string &sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i ? sep : "") + parts[i];
  return out;
}

bool RunGnuplot(const std::string &script) {
  if (std::system("gnuplot --version >/dev/null 2>&1") != 0) {
    std::fprintf(stderr,
                 "pig-eval: gnuplot not found (Debian package gnuplot-nox; ./pig setup installs "
                 "it): plots not drawn, script left at %s\n",
                 script.c_str());
    return false;
  }
  const std::string cmd = "gnuplot '" + script + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "pig-eval: gnuplot failed on %s\n", script.c_str());
    return false;
  }
  return true;
}

void UpdateMarkedSection(const std::string &path, const std::string &name,
                         const std::string &body) {
  std::string doc = spec::ReadFile(path);
  const std::string begin = "<!-- pig-eval:begin " + name + " -->";
  const std::string end = "<!-- pig-eval:end " + name + " -->";
  const std::size_t b = doc.find(begin);
  const std::size_t e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b)
    throw std::runtime_error(path + " has no section marked " + begin + " ... " + end);
  doc = doc.substr(0, b + begin.size()) + "\n" + body + doc.substr(e);
  spec::WriteFileAtomically(path, doc);
}

} // namespace pig::eval
