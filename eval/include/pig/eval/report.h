// Output helpers of pig-eval: CSV files, gnuplot plots, markdown fragments and the in-place
// update of a marked section of docs/RESULTS.md. Whole files are written (atomically) and
// directories made by pig/spec/files.h.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace pig::eval {

/// Running mean and standard deviation (Welford).
struct Stat {
  std::size_t n = 0;
  double mean = 0, m2 = 0;
  void add(double x) {
    ++n;
    const double d = x - mean;
    mean += d / double(n);
    m2 += d * (x - mean);
  }
  double sd() const { return n > 1 ? std::sqrt(m2 / double(n - 1)) : 0.0; }
  double se() const { return n > 0 ? sd() / std::sqrt(double(n)) : 0.0; }
};

/// A CSV file written row by row (fields quoted only when they need it).
class Csv {
public:
  Csv(const std::string &path, const std::vector<std::string> &header);
  ~Csv();
  Csv(const Csv &) = delete;
  Csv &operator=(const Csv &) = delete;
  void row(const std::vector<std::string> &fields);

private:
  std::FILE *f_ = nullptr;
};

/// The mean and the median of x (NaN when empty).
double Mean(const std::vector<double> &x);
double Median(std::vector<double> x);

std::string Fmt(const char *format, double x);
std::string Join(const std::vector<std::string> &parts, const std::string &sep);

/// Runs gnuplot on `script` (a file). Returns false, with a message on stderr, when gnuplot is
/// missing or fails: the CSVs and the script stay for a later run.
bool RunGnuplot(const std::string &script);

/// Replaces the text between "<!-- pig-eval:begin NAME -->" and "<!-- pig-eval:end NAME -->"
/// in the file at `path` with `body` (the markers stay). Throws when the markers are missing.
void UpdateMarkedSection(const std::string &path, const std::string &name, const std::string &body);

} // namespace pig::eval
