// pig-eval: accuracy of LSH sampling attention (MagicPIG) and its baselines on a real model:
// attention-error (real KV caches vs pig::ref), downstream (perplexity and tasks decoding with each
// runtime Attention), all (both, one prefill), kv-formats (8-bit KV formats). This main parses the
// options; the workflows and their reports are the eval library (eval/, pig/eval/run.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/eval/run.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/tune/tuning.h" // --max-error's value
#ifdef PIG_HAVE_GENERATED_KERNELS
#include "pig/Codegen/GeneratedKernels.h"
#endif

namespace {

using namespace pig::runtime;

// The set of docs/RESULTS.md section 1b (`--transforms default` reproduces its tables).
const char *const kDefaultTransforms =
    "plain,pca:r=48,pca:r=32,whiten:a=0.1,whiten:a=0.15,whiten:a=0.25,whiten:a=0.35,"
    "whiten:a=0.5,mips:q=0.9";

// The command and its options, as the library takes them.
struct Options {
  std::string command;
  pig::eval::EvalOptions eval;
  pig::eval::AttentionErrorOptions error;
  pig::eval::DownstreamOptions down;
};

[[noreturn]] void Usage(const std::string &error) {
  if (!error.empty())
    std::fprintf(stderr, "pig-eval: %s\n", error.c_str());
  std::fprintf(
      error.empty() ? stdout : stderr,
      "usage: pig-eval (attention-error | downstream | all | kv-formats) [options]\n"
      "\n"
      "  attention-error   relative L2 error of TopK, oracle sampling, Quest and MagicPIG vs\n"
      "                    exact attention on the model's real KV caches (pig::ref)\n"
      "  downstream        perplexity, needle retrieval, common/frequent-words extraction with\n"
      "                    dense, magicpig (K,L) and topk/quest at magicpig's measured cost2\n"
      "  all               both (one prefill of the text serves both)\n"
      "  kv-formats        error of exact attention with 8-bit KV formats (q8: a scale per 32\n"
      "                    elements; a scale per row; per-channel keys) and bf16 against f32\n"
      "                    rows, at --error-contexts and --layers (docs/KV8.md)\n"
      "\n"
      "  --quick                 CI smoke sizes (contexts of a few hundred tokens)\n"
      "  --out DIR               CSV, PNG and markdown output (default eval-out)\n"
      "  --update-doc FILE       rewrite the pig-eval sections of FILE (docs/RESULTS.md)\n"
      "  --model FILE            GGUF model (default %s)\n"
      "  --text FILE             perplexity text, .gz allowed (default %s, Debian package %s)\n"
      "  --threads N             (default 1)\n"
      "  --seed S                task instances and sampling seeds (default 1)\n"
      "  --lsh-seed S            downstream: SimHash matrices from seed S (default the runtime's)\n"
      "  --error-contexts LIST   KV cache lengths of attention-error (default 2048,4096,8192)\n"
      "  --layers LIST           layers of attention-error (default 2,5,8,12,16,20,24,28)\n"
      "  --ppl-contexts LIST     perplexity context lengths (default 2048,4096)\n"
      "  --ppl-tokens M          tokens scored after each context (default 48)\n"
      "  --task-contexts LIST    prompt lengths of the tasks (default 2048)\n"
      "  --instances N           instances per task and context (default 3)\n"
      "  --tasks LIST            of needle,cwe,fwe (default all three)\n"
      "  --lsh LIST              MagicPIG configurations K:L,... (default 10:150,9:120,8:75)\n"
      "  --kv bf16|f32|q8        KV cache element type (default bf16; q8: 8-bit, docs/KV8.md)\n"
      "  --cwe-share PCT          percent of the CWE list taken by its 3 common words (50)\n"
      "  --dense-only            downstream with dense attention only (to size the tasks)\n"
      "  --tuning FILE           downstream also decodes with \"tuned\": magicpig with the\n"
      "                          operating point of pig-tune in FILE (per layer dense or K,L,t)\n"
      "  --max-error E           FILE is pig-tune's records: select the cheapest point with\n"
      "                          predicted mean attention error <= E\n"
      "  --lsh-transform SPEC    downstream also decodes each --lsh configuration hashing in a\n"
      "                          space fitted to the keys, rows \"magicpig+SPEC\" (whiten:a=A)\n"
      "  --transforms LIST       attention-error also compares plain MagicPIG with hashing in\n"
      "                          spaces fitted to the keys at matched cost2 (plain, pca:r=R,\n"
      "                          whiten:a=A, mips:q=Q, whiten:a=A+mips:q=Q; \"default\": %s)\n"
      "  --transform-grid LIST   their (K, L) grid, K:L,... (default K 7-14 x L 75,150,300)\n"
      "LIST: comma-separated values, or none.\n",
      DefaultModelPath(), pig::eval::kDefaultTextPath, pig::eval::kDefaultTextPackage,
      kDefaultTransforms);
  std::exit(error.empty() ? 0 : 2);
}

std::vector<std::string> Split(const std::string &s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos)
      end = s.size();
    if (end > start)
      out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

size_t ParseSize(const std::string &flag, const std::string &s, size_t lo, size_t hi) {
  char *end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi)
    Usage(flag + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "], got '" + s + "'");
  return size_t(v);
}

std::vector<size_t> ParseList(const std::string &flag, const std::string &s, size_t lo, size_t hi) {
  std::vector<size_t> out;
  if (s == "none")
    return out;
  for (const std::string &p : Split(s, ','))
    out.push_back(ParseSize(flag, p, lo, hi));
  if (out.empty())
    Usage(flag + " needs at least one value (or none)");
  return out;
}

Options Parse(int argc, char **argv) {
  Options o;
  o.eval.command_line = "build/bin/pig-eval"; // then the arguments (GCC 12: no `" " + string`)
  for (int i = 1; i < argc; ++i)
    o.eval.command_line.append(" ").append(argv[i]);
  if (argc < 2)
    Usage("give a command: attention-error, downstream, all or kv-formats");
  o.command = argv[1];
  if (o.command == "-h" || o.command == "--help")
    Usage("");
  if (o.command != "attention-error" && o.command != "downstream" && o.command != "all" &&
      o.command != "kv-formats")
    Usage("unknown command '" + o.command + "'");
  // --quick first, so that explicit flags after it still win.
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") {
      o.error.contexts = {256, 512};
      o.eval.layers = {2};
      o.down.ppl_contexts = {256};
      o.down.ppl_tokens = 8;
      o.down.task_contexts = {300};
      o.down.instances = 1;
      o.down.lsh = {{10, 150}, {8, 75}};
    }
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {
    } else if (a == "--cwe-share") {
      o.down.cwe_share = double(ParseSize(a, value(), 5, 90)) / 100.0;
    } else if (a == "--dense-only") {
      o.down.dense_only = true;
    } else if (a == "--out") {
      o.eval.out = value();
    } else if (a == "--update-doc") {
      o.eval.update_doc = value();
    } else if (a == "--model") {
      o.eval.model = value();
    } else if (a == "--text") {
      o.eval.text = value();
    } else if (a == "--threads") {
      o.eval.threads = ParseSize(a, value(), 1, 256);
    } else if (a == "--seed") {
      o.eval.seed = ParseSize(a, value(), 0, ~size_t(0));
    } else if (a == "--lsh-seed") {
      o.down.lsh_seed = ParseSize(a, value(), 0, ~size_t(0));
    } else if (a == "--error-contexts") {
      o.error.contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--layers") {
      o.eval.layers = ParseList(a, value(), 0, 1024);
    } else if (a == "--ppl-contexts") {
      o.down.ppl_contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--ppl-tokens") {
      o.down.ppl_tokens = ParseSize(a, value(), 1, 4096);
    } else if (a == "--task-contexts") {
      o.down.task_contexts = ParseList(a, value(), 128, 1 << 20);
    } else if (a == "--instances") {
      o.down.instances = ParseSize(a, value(), 1, 1000);
    } else if (a == "--tasks") {
      o.down.tasks = Split(value(), ',');
      for (const std::string &t : o.down.tasks)
        if (t != "needle" && t != "cwe" && t != "fwe")
          Usage("unknown task '" + t + "' (needle, cwe, fwe)");
    } else if (a == "--lsh") {
      o.down.lsh.clear();
      for (const std::string &p : Split(value(), ',')) {
        const std::vector<std::string> kl = Split(p, ':');
        if (kl.size() != 2)
          Usage("--lsh expects K:L pairs, got '" + p + "'");
        o.down.lsh.push_back({int(ParseSize(a, kl[0], 1, 16)), int(ParseSize(a, kl[1], 1, 1024))});
      }
    } else if (a == "--transforms") {
      std::string v = value();
      if (v == "default")
        v = kDefaultTransforms;
      o.error.transforms.clear();
      if (v != "none")
        for (const std::string &p : Split(v, ',')) {
          try {
            o.error.transforms.push_back(pig::ref::TransformSpec::parse(p));
          } catch (const std::invalid_argument &e) {
            Usage(std::string("--transforms: ") + e.what());
          }
        }
      // Plain first: the others are matched to it.
      std::erase_if(o.error.transforms, [](const auto &t) { return t.identity(); });
      if (!o.error.transforms.empty())
        o.error.transforms.insert(o.error.transforms.begin(), pig::ref::TransformSpec{});
    } else if (a == "--transform-grid") {
      o.error.transform_grid.clear();
      for (const std::string &p : Split(value(), ',')) {
        const std::vector<std::string> kl = Split(p, ':');
        if (kl.size() != 2)
          Usage("--transform-grid expects K:L pairs, got '" + p + "'");
        o.error.transform_grid.push_back(
            {int(ParseSize(a, kl[0], 1, 16)), int(ParseSize(a, kl[1], 1, 1024))});
      }
    } else if (a == "--kv") {
      const std::string v = value();
      if (!lsh::parse_dtype(v, o.eval.kv))
        Usage("--kv expects bf16, f32 or q8, got '" + v + "'");
    } else if (a == "--tuning") {
      o.down.tuning = value();
      if (o.down.tuning.empty())
        Usage("--tuning needs a file");
    } else if (a == "--max-error") {
      const std::string v = value();
      o.down.max_error = pig::tools::ParseMaxError(v);
      if (!o.down.max_error)
        Usage("--max-error expects a number >= 0, got '" + v + "'");
    } else if (a == "--lsh-transform") {
      // A bad spec or one the runtime does not serve: a usage error before the model is read.
      try {
        o.down.lsh_transform = pig::runtime::ParseServedTransform(value());
      } catch (const std::invalid_argument &e) {
        Usage(std::string("--lsh-transform: ") + e.what());
      }
    } else if (a == "-h" || a == "--help") {
      Usage("");
    } else {
      Usage("unknown argument '" + a + "'");
    }
  }
  if (o.down.max_error && o.down.tuning.empty())
    Usage("--max-error selects a point from --tuning FILE's records: give --tuning FILE");
  if (!o.down.tuning.empty() && o.command == "attention-error")
    Usage("--tuning adds the method \"tuned\" to downstream; attention-error measures fixed "
          "configurations (pig-tune accuracy measures a point's error)");
  if (!o.down.tuning.empty() && o.down.dense_only)
    Usage("--tuning and --dense-only do not combine");
  if (o.down.lsh_transform && o.command == "attention-error")
    Usage("--lsh-transform adds the method \"magicpig+SPEC\" to downstream; attention-error "
          "compares transforms with --transforms");
  if (o.down.lsh_transform && o.down.dense_only)
    Usage("--lsh-transform and --dense-only do not combine");
  if (!o.error.transforms.empty()) {
    if (o.command == "downstream")
      Usage("--transforms compares attention errors: use attention-error or all");
    if (std::none_of(o.error.transform_grid.begin(), o.error.transform_grid.end(),
                     [](pig::eval::KL kl) { return kl.K == 10 && kl.L == 150; }))
      Usage("--transform-grid must contain 10:150, plain MagicPIG's configuration the "
            "transforms are matched to");
  }
  return o;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = Parse(argc, argv);
  try {
#ifdef PIG_HAVE_GENERATED_KERNELS
    pig_register_generated_kernels();
#endif
    if (o.command == "attention-error")
      pig::eval::RunAttentionError(o.eval, o.error);
    else if (o.command == "downstream")
      pig::eval::RunDownstream(o.eval, o.down);
    else if (o.command == "all")
      pig::eval::RunAll(o.eval, o.error, o.down);
    else
      pig::eval::RunKvFormats(o.eval, pig::eval::KvFormatsOptions{o.error.contexts});
    return 0;
  } catch (const pig::eval::UsageError &e) {
    Usage(e.what()); // what only the loaded model refuses: a usage error all the same
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-eval: error: %s\n", e.what());
    return 1;
  }
}
