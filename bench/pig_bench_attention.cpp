// pig-bench-attention: the LSH kernels measured the way a decode step sees memory (Google
// Benchmark; the benchmarks are in attention_benchmarks.cpp, which says how they are measured).
//
//   build/bin/pig-bench-attention                            # full run (~3-5 minutes)
//   build/bin/pig-bench-attention --benchmark_filter=dense   # a subset
//   build/bin/pig-bench-attention --schedule block=32        # the knob pairs of one variant
//
// The command line is split: the --benchmark_* flags (and --v=) go to benchmark::Initialize, the
// others to CLI11 (pig::app), so that --help, an unknown flag and a bad value read as in the
// other tools.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "pig/app/options.h"
#include "pig/runtime/lsh_schedule.h"

#include "attention_benchmarks.h"
#include "schedule_variants.h"

namespace {

namespace lsh = pig::runtime::lsh;

constexpr const char *kAbout =
    "pig-bench-attention: the LSH kernels measured the way a decode step sees memory (dense vs\n"
    "streaming bandwidth, sampled vs dense, our retrieval vs the public implementation's,\n"
    "specialised vs generic kernels, the schedule knobs), each ratio also as an interleaved pair.\n"
    "PIG_BENCH_WORKING_SET_MIB=N sets the working set per benchmark (default: twice the LLC).\n"
    "\n"
    "Google Benchmark's flags are passed to it, written --benchmark_NAME=VALUE: e.g.\n"
    "--benchmark_filter=REGEX, --benchmark_min_time=SECONDS, --benchmark_repetitions=N,\n"
    "--benchmark_format=console|json|csv, --benchmark_out=FILE, --benchmark_list_tests=true.";

// Google Benchmark's arguments: its --benchmark_* flags and --v=N.
bool ForBenchmark(const std::string &arg) {
  return arg.rfind("--benchmark_", 0) == 0 || arg.rfind("--v=", 0) == 0;
}

// --schedule KNOBS: the knob pairs of that one variant only. It must be one of those compiled in
// schedule_variants.cpp; the others take a manifest line and pig-translate.
std::optional<lsh::Schedule> Parse(int argc, const char *const *argv) {
  CLI::App app{kAbout, "pig-bench-attention"};
  pig::app::Init(app);
  lsh::Schedule schedule;
  CLI::Option *opt = pig::app::AddScheduleOption(
      app, schedule,
      "the knob pairs of this variant only, e.g. block=32 (one of schedule_variants.cpp's)");
  pig::app::Parse(app, argc, argv);
  if (!opt->count())
    return std::nullopt;
  bool compiled = false;
  std::string list;
  for (const lsh::LshKernelSet &v : pig::bench::schedule_variant_sets()) {
    compiled = compiled || v.key.schedule == schedule;
    list += "\n  " + v.key.schedule.str();
  }
  if (!compiled)
    pig::app::UsageError(app, "--schedule: " + schedule.str() +
                                  " is not among the compiled variants:" + list);
  return schedule;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<char *> ours{argv[0]}, theirs{argv[0]};
  for (int i = 1; i < argc; ++i)
    (ForBenchmark(argv[i]) ? theirs : ours).push_back(argv[i]);
  const std::optional<lsh::Schedule> only = Parse(int(ours.size()), ours.data());
  pig::bench::RegisterAttentionBenchmarks(only);
  int bench_argc = int(theirs.size());
  benchmark::Initialize(&bench_argc, theirs.data());
  if (benchmark::ReportUnrecognizedArguments(bench_argc, theirs.data()))
    return 1;
  pig::bench::RunAttentionBenchmarks();
  benchmark::Shutdown();
  return 0;
}
