// pig-compare: how close each sparse attention estimator gets to exact attention, and what it
// reads, on synthetic decode-step attention shaped like the MagicPIG paper's. Everything is
// computed by the scalar reference library (pig::ref), so this is the accuracy ground truth that
// optimised kernels are later held to, not a speed benchmark.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "pig/app/options.h"
#include "pig/eval/accuracy.h" // Recode, OracleBudget (shared with pig-eval)
#include "pig/reference/reference.h"
#include "pig/spec/lsh_params.h"

namespace {

using namespace pig::ref;
using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t n = 16384;
  std::size_t d = 128;
  std::uint64_t seed = 1;
  std::size_t instances = 4;
};

constexpr std::size_t kQuestPage = 16;
constexpr double kBudgets[] = {0.01, 0.02, 0.05, 0.10};
using KL = pig::spec::LshHash;
constexpr KL kMagicPigConfigs[] = {{10, 150}, {9, 120}, {8, 75}, {7, 64}};
constexpr int kThreshold = 2; // a token is sampled when it collides in >= 2 of L tables

// One line of the table, averaged over instances.
struct Row {
  std::string group; // rows of one group are printed together, groups separated by a blank line
  std::string method;
  std::string config;
  double cost2 = 0.0; // the method's own cost measure (fraction)
  double read = 0.0;  // distinct tokens whose K/V rows were read / n
  double err = 0.0, err2 = 0.0;
  double seconds = 0.0;
  int count = 0;

  void add(double c, double r, double e, double s) {
    cost2 += c;
    read += r;
    err += e;
    err2 += e * e;
    seconds += s;
    ++count;
  }
};

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * x);
  return buf;
}

void print_header(const Options &opt) {
  std::printf(
      "pig-compare: sparse attention estimators vs exact attention (scalar reference)\n"
      "  synthetic decode step: n = %zu tokens, head dim d = %zu, %zu instances (query "
      "heads), seed %llu\n"
      "  shape: token 0 is a sink holding 30%% of the softmax mass; the other logits are\n"
      "  Gaussian (sd 2, a long log-normal tail); keys sit in a cone whose axis has cosine\n"
      "  -0.8 with the query and drift slowly along the sequence (high scores come in runs);\n"
      "  values share a mean and grow with their score.\n"
      "  error: relative L2 error of the output vs exact attention, mean (sd) over "
      "instances.\n"
      "  cost:  TopK m/n; Quest tokens of the kept pages / n (pages of %zu); oracle\n"
      "         sampling unique draws / n; MagicPIG Cost2 = |S| / indexed tokens (t = %d,\n"
      "         4 sink + 64 local tokens always attended). 'read' counts every token\n"
      "         whose K/V row is read, static ones included.\n"
      "  ms/inst: wall time per instance; the first MagicPIG row includes building the\n"
      "  LSH index (one W, one index, shared by the four configurations).\n\n",
      opt.n, opt.d, opt.instances, (unsigned long long)opt.seed, kQuestPage, kThreshold);
}

// Rows in a fixed order, filled instance after instance.
class Table {
public:
  Row &at(std::size_t index, std::string group, std::string method, std::string config) {
    if (rows_.size() <= index)
      rows_.resize(index + 1);
    Row &r = rows_[index];
    if (r.method.empty()) {
      r.group = std::move(group);
      r.method = std::move(method);
      r.config = std::move(config);
    }
    return r;
  }

  void print() const {
    std::printf("%-16s %-22s %9s %9s %12s %9s\n", "method", "config", "cost", "read", "rel-L2 err",
                "ms/inst");
    std::printf("%-16s %-22s %9s %9s %12s %9s\n", "------", "------", "----", "----", "----------",
                "-------");
    std::string group;
    for (const Row &x : rows_) {
      if (!group.empty() && x.group != group)
        std::printf("\n");
      group = x.group;
      const double k = x.count;
      const double mean = x.err / k;
      const double sd = std::sqrt(std::max(0.0, x.err2 / k - mean * mean));
      char err[32];
      std::snprintf(err, sizeof err, "%.4f (%.3f)", mean, sd);
      std::printf("%-16s %-22s %8.2f%% %8.2f%% %15s %9.1f\n", x.method.c_str(), x.config.c_str(),
                  100.0 * x.cost2 / k, 100.0 * x.read / k, err, 1e3 * x.seconds / k);
    }
  }

private:
  std::vector<Row> rows_;
};

// Every method at every budget on one synthetic instance.
void measure_instance(const Options &opt, const OwnedMatrix &W, std::uint64_t seed, Table &table,
                      double &setup_seconds) {
  auto t0 = Clock::now();
  SyntheticConfig sc;
  sc.n = opt.n;
  sc.d = opt.d;
  sc.seed = seed;
  const AttentionProblem p = synthetic_problem(sc);
  const Attention exact = dense_attention(p.q, p.K, p.V);
  const std::vector<double> w = attention_weights(p.q, p.K);
  setup_seconds += since(t0);
  const double n = double(opt.n);
  std::size_t r = 0;
  auto add = [&](std::string group, std::string method, std::string config,
                 const SparseEstimate &e) {
    table.at(r++, std::move(group), std::move(method), std::move(config))
        .add(e.cost(), e.cost(), relative_l2_error(e.attention.out, exact.out), since(t0));
  };
  auto topk = [&](double fraction) {
    const auto m = std::max<std::size_t>(1, std::size_t(std::lround(fraction * n)));
    return topk_attention(p.q, p.K, p.V, std::min(m, opt.n));
  };
  const std::size_t pages = (opt.n + kQuestPage - 1) / kQuestPage;
  auto quest = [&](double fraction) {
    const std::size_t kept =
        std::clamp<std::size_t>(std::size_t(std::lround(fraction * n / kQuestPage)), 1, pages);
    return quest_attention(p.q, p.K, p.V, kQuestPage, kept);
  };

  for (double b : kBudgets) {
    t0 = Clock::now();
    add("TopK", "TopK", "m = " + percent(b), topk(b));
  }
  for (double b : kBudgets) {
    t0 = Clock::now();
    add("Quest", "Quest", "pages = " + percent(b), quest(b));
  }
  for (double b : kBudgets) {
    t0 = Clock::now();
    const std::size_t B = pig::eval::OracleBudget(w, b * n);
    add("Oracle", "Oracle sampling", "E|S| = " + percent(b),
        oracle_sampling(p.q, p.K, p.V, B, seed ^ 0x5eed));
  }

  // The index is built once, for the widest configuration; the narrower ones read their codes
  // out of it (see pig::eval::Recode), as a deployment sharing one W can. This saves most of the
  // scalar hashing time. Index time is reported on the first MagicPIG row.
  t0 = Clock::now();
  const LshConfig widest{10, 150, kThreshold, opt.seed};
  const LshIndex wide = build_index(p.K, W, widest);
  std::vector<double> magicpig_read;
  for (KL kl : kMagicPigConfigs) {
    const LshConfig cfg{kl.K, kl.L, kThreshold, opt.seed};
    LshIndex index = wide;
    index.cfg = cfg;
    index.codes = pig::eval::Recode(wide.codes, widest, cfg);
    const MagicPigResult e = magicpig_attention(p.q, p.K, p.V, W, index);
    const double read = double(e.sample.size() + e.static_tokens) / n;
    magicpig_read.push_back(read);
    table
        .at(r++, "MagicPIG", "MagicPIG",
            "K=" + std::to_string(kl.K) + " L=" + std::to_string(kl.L) +
                " t=" + std::to_string(kThreshold))
        .add(e.cost(), read, relative_l2_error(e.attention.out, exact.out), since(t0));
    t0 = Clock::now();
  }

  // TopK and Quest given as many tokens as each MagicPIG configuration read.
  for (std::size_t c = 0; c < std::size(kMagicPigConfigs); ++c) {
    const KL kl = kMagicPigConfigs[c];
    const std::string tag = "= MagicPIG " + std::to_string(kl.K) + "," + std::to_string(kl.L);
    t0 = Clock::now();
    add(tag, "TopK", "read " + tag, topk(magicpig_read[c]));
    t0 = Clock::now();
    add(tag, "Quest", "read " + tag, quest(magicpig_read[c]));
  }
}

void run(const Options &opt) {
  const auto start = Clock::now();
  print_header(opt);
  // One W for every configuration: W(K, L) is the leading K*L columns of W(10, 150).
  const OwnedMatrix W = simhash_matrix(opt.seed, opt.d, 10, 150);
  Table table;
  double setup_seconds = 0.0;
  for (std::size_t i = 0; i < opt.instances; ++i)
    measure_instance(opt, W, opt.seed * 1000003 + i, table, setup_seconds);
  table.print();
  std::printf("\ntime: %.2f s total (%.2f s building instances and exact attention)\n",
              since(start), setup_seconds);
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  CLI::App app{
      "Relative L2 error of TopK, oracle sampling, Quest and MagicPIG against exact\n"
      "attention, at matched costs, on synthetic attention shaped like the MagicPIG\n"
      "paper's (a strong sink, a long log-normal tail, keys in a cone opposite the query,\n"
      "values correlated with scores). Scalar reference code: keep n * instances modest.",
      "pig-compare"};
  pig::app::Init(app);
  app.add_option("--n", opt.n, "tokens per instance")
      ->check(pig::app::Integer(256, 1u << 22))
      ->capture_default_str();
  app.add_option("--d", opt.d, "head dimension")
      ->check(pig::app::Integer(2, 1024))
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the instances and of the SimHash matrix")
      ->check(pig::app::Integer(0, UINT64_MAX))
      ->capture_default_str();
  app.add_option("--instances", opt.instances, "independent instances (query heads) averaged")
      ->check(pig::app::Integer(1, 64))
      ->capture_default_str();
  pig::app::Parse(app, argc, argv);
  try {
    run(opt);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-compare: %s\n", e.what());
    return 1;
  }
  return 0;
}
