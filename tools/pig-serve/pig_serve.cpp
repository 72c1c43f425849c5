// pig-serve: an OpenAI-compatible HTTP server over pig's runtime, with continuous batching and
// pig's attention methods per request (serve/: the engine, the HTTP front, the protocol).
//   pig-serve [--model FILE] [--host 127.0.0.1] [--port 8080] [--parallel 8] [--max-queue 64]
//             [--memory-budget 12G] [--prefill-chunk 64] [--api-key-file F] [pig-run's attention
//             options: --attention, --lsh, --kv, --sink, --local, --dense-layers, --tuning FILE]
// Binds first (GET /health answers 503 while the model loads), then loads the model and serves
// until SIGINT or SIGTERM: it stops accepting, lets the running requests finish for --grace
// seconds, cancels the rest and exits 0. README's "Serving" section shows the API.
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "pig/app/kernels.h"
#include "pig/app/options.h"
#include "pig/app/tuning.h"
#include "pig/runtime/model.h"
#include "pig/serve/engine.h"
#include "pig/serve/http.h"
#include "pig/serve/openai.h"
#include "pig/spec/method.h"

namespace {

using namespace pig;

constexpr const char *kAbout =
    "pig-serve: an OpenAI-compatible HTTP server (POST /v1/completions, /v1/chat/completions,\n"
    "GET /v1/models, /health, /metrics, POST /tokenize, /detokenize) over pig's runtime, with\n"
    "continuous batching: every step decodes one token of every running request and prefills\n"
    "one chunk of a new one. The attention options are pig-run's and give each request's\n"
    "defaults; a request may choose its own in a \"pig\" object, e.g.\n"
    "  {\"pig\": {\"attention\": \"magicpig\", \"lsh\": \"K=10,L=150,t=2\", \"kv\": \"q8\"}}\n"
    "It binds loopback addresses only (127.0.0.1, ::1; put a proxy in front to expose it).\n"
    "SIGINT or SIGTERM: stop accepting, finish (or after --grace seconds cancel) the running\n"
    "requests, exit 0.";

struct Options {
  app::ModelOptions model;
  size_t threads = 0;
  runtime::AttentionSpec attention;
  app::TuningOptions tuning;
  bool schedule_set = false;
  serve::HttpOptions http;
  serve::EngineOptions engine;
  double grace_s = 30;
  std::string memory_budget = "auto";
  std::string api_key_file;
};

bool IsLoopback(const std::string &host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// "12G", "512M", "64K", "1000" (bytes), "0" (no limit), "auto" (half the physical memory).
bool ParseBytes(const std::string &text, size_t &out) {
  if (text == "auto") {
    out = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE)) / 2;
    return true;
  }
  size_t i = 0;
  unsigned long long v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (1ull << 50))
      return false;
    v = v * 10 + unsigned(text[i++] - '0');
  }
  if (i == 0)
    return false;
  const std::string unit = text.substr(i);
  int shift = 0;
  if (unit == "K" || unit == "KiB")
    shift = 10;
  else if (unit == "M" || unit == "MiB")
    shift = 20;
  else if (unit == "G" || unit == "GiB")
    shift = 30;
  else if (!unit.empty() && unit != "B")
    return false;
  if (v > (1ull << (60 - shift)))
    return false;
  out = size_t(v) << shift;
  return true;
}

Options Parse(int argc, char **argv) {
  Options o;
  CLI::App app{kAbout, "pig-serve"};
  app::Init(app);
  app::AddModelOptions(app, o.model, true, /*rope=*/true);
  app::AddThreadsOption(app, o.threads);
  // A server shares prefixes: magicpig centring on the mean of a request's cached prefix makes
  // their indexes shareable too (index_share.h). pig-run keeps the paper's mean of every key.
  // And a sequence shorter than where sampling pays (timed once at start) decodes densely.
  o.attention.mean_window = runtime::AttentionSpec::kMeanOfPrefix;
  o.attention.dense_below = runtime::AttentionSpec::kDenseBelowMeasured;
  const app::AttentionFlags af = app::AddAttentionOptions(app, o.attention);
  app::AddKvOption(app, o.attention.kv_dtype);
  app::AddTuningOptions(app, o.tuning);
  const char *kServe = "Serving";
  app.add_option("--host", o.http.host, "address to bind: loopback only (127.0.0.1, ::1)")
      ->check(CLI::Validator(
          [](std::string &h) {
            return IsLoopback(h) ? std::string()
                                 : "expects a loopback address (127.0.0.1, ::1 or localhost), "
                                   "got '" +
                                       h + "'";
          },
          "ADDRESS"))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--port", o.http.port, "TCP port (0: any free one, printed at start)")
      ->check(app::Integer(0, 65535))
      ->capture_default_str()
      ->group(kServe);
  CLI::Option *key_opt =
      app.add_option("--api-key", o.http.api_key,
                     "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize (on "
                     "a command line every local user can read it: prefer --api-key-file or "
                     "PIG_API_KEY)")
          ->type_name("KEY")
          ->group(kServe);
  app.add_option("--api-key-file", o.api_key_file,
                 "the API key: the first line of FILE (trailing whitespace dropped)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile)
      ->excludes(key_opt)
      ->group(kServe);
  app.add_option("--alias", o.http.model_id, "the model's id in /v1/models and responses")
      ->type_name("NAME")
      ->group(kServe);
  app.add_option("--parallel", o.engine.max_running, "requests decoded together (slots)")
      ->check(app::Integer(1, 256))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--max-queue", o.engine.max_queue,
                 "requests waiting for a slot or memory; beyond, 503 with Retry-After")
      ->check(app::Integer(0, 1u << 20))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--memory-budget", o.memory_budget,
                 "KV cache + LSH index bytes all running requests may reserve, e.g. 8G, 512M; "
                 "0: no limit; auto: half the physical memory")
      ->check(CLI::Validator(
          [](std::string &t) {
            size_t b = 0;
            return ParseBytes(t, b) ? std::string()
                                    : "expects a size like 8G, 512M, 4096 or auto, got '" + t + "'";
          },
          "SIZE"))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--prefill-chunk", o.engine.prefill_chunk,
                 "prompt tokens per step at most while other requests decode")
      ->check(app::Integer(3, 4096))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--prefill-chunk-idle", o.engine.prefill_chunk_alone,
                 "prompt tokens per step while no request decodes")
      ->check(app::Integer(3, 4096))
      ->capture_default_str()
      ->group(kServe);
  app.add_flag("--prefix-cache,!--no-prefix-cache", o.engine.prefix_cache,
               "share the KV blocks of prompt prefixes across requests (a document asked about "
               "again is not prefilled again; usage.prompt_tokens_details.cached_tokens counts "
               "them)")
      ->capture_default_str()
      ->group(kServe);
  size_t prefix_mib = o.engine.prefix_cache_bytes >> 20;
  app.add_option("--prefix-cache-mib", prefix_mib,
                 "KV MiB the prefix cache holds at most (least recently used blocks no request "
                 "holds are evicted; with --memory-budget they count against it)")
      ->check(app::Integer(1, size_t(1) << 30))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--cache-dir", o.engine.cache_dir,
                 "the prefix cache's disk tier: cached prompt blocks are also written to DIR and "
                 "read back on a later hit, also after a restart (bad files are a logged miss)")
      ->type_name("DIR")
      ->group(kServe);
  size_t cache_dir_mib = o.engine.cache_dir_bytes >> 20;
  app.add_option("--cache-dir-mib", cache_dir_mib,
                 "MiB of files the disk tier keeps at most (the oldest are removed)")
      ->check(app::Integer(1, size_t(1) << 30))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--prefill-share", o.engine.prefill_share,
                 "while others decode, a step's prefill work (a prompt chunk, a slice of an LSH "
                 "index build) takes about F times their decode rows' time (0: no limit but "
                 "--prefill-chunk)")
      ->check(app::Number(0, 1e6))
      ->type_name("F")
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--max-body", o.http.max_body, "request body bytes at most (beyond: 413)")
      ->check(app::Integer(1024, size_t(1) << 30))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--http-threads", o.http.threads,
                 "threads for the generation and tokenizer requests (0: parallel + max-queue "
                 "+ 8; /health and /metrics have threads of their own)")
      ->check(app::Integer(0, 4096))
      ->group(kServe);
  app.add_option("--max-connections", o.http.max_connections,
                 "open connections at most; beyond, the one that has waited longest for its "
                 "request is closed (503 if all run requests)")
      ->check(app::Integer(1, 1u << 16))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--idle-timeout", o.http.idle_timeout_s,
                 "seconds a connection may wait for its next request")
      ->check(app::Number(0.05, 3600))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--header-timeout", o.http.header_timeout_s,
                 "seconds a request's headers may take to arrive (from their first byte)")
      ->check(app::Number(0.05, 3600))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--body-timeout", o.http.body_timeout_s,
                 "seconds a request's body may take to arrive (after its headers)")
      ->check(app::Number(0.05, 3600))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--write-timeout", o.http.write_timeout_s,
                 "seconds one write of a response may wait for a client that does not read")
      ->check(app::Number(0.05, 3600))
      ->capture_default_str()
      ->group(kServe);
  app.add_option("--grace", o.grace_s, "seconds running requests get to finish at SIGTERM")
      ->check(app::Number(0, 86400))
      ->capture_default_str()
      ->group(kServe);
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no line per request on stderr")->group(kServe);
  app::Parse(app, argc, argv);
  o.engine.prefix_cache_bytes = prefix_mib << 20;
  o.engine.cache_dir_bytes = cache_dir_mib << 20;
  o.http.log_requests = !quiet;
  // The API key, from one of three places; never echoed.
  if (!o.api_key_file.empty()) {
    std::ifstream in(o.api_key_file);
    std::string line;
    if (!in || !std::getline(in, line))
      app::UsageError(app, "--api-key-file: cannot read a key from '" + o.api_key_file + "'");
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.pop_back();
    if (line.empty())
      app::UsageError(app, "--api-key-file: the first line of '" + o.api_key_file + "' is empty");
    o.http.api_key = line;
  } else if (o.http.api_key.empty()) {
    if (const char *env = std::getenv("PIG_API_KEY"); env && *env)
      o.http.api_key = env;
  }
  o.schedule_set = af.schedule->count() > 0;
  app::CheckTuningOptions(app, o.tuning);
  if (!o.tuning.file.empty()) {
    if (af.lsh->count())
      app::UsageError(app, "--tuning and --lsh conflict: the operating point gives each "
                           "layer's K, L, t");
    if (o.attention.dense_layers_set)
      app::UsageError(app, "--tuning and --dense-layers conflict: the operating point gives "
                           "the dense layers");
  }
  ParseBytes(o.memory_budget, o.engine.memory_budget);
  if (o.http.threads == 0)
    o.http.threads = o.engine.max_running + o.engine.max_queue + 8;
  o.engine.threads = o.threads;
  if (o.http.model_id.empty())
    o.http.model_id = std::filesystem::path(o.model.path).stem().string();
  return o;
}

} // namespace

int main(int argc, char **argv) {
  const Options o = Parse(argc, argv);
  // Signals go to one thread (sigwait), which asks the main thread to drain; every thread started
  // below inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  serve::HttpServer http(o.http);
  try {
    http.Bind();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-serve: error: %s\n", e.what());
    return 1;
  }
  http.Start();
  std::fprintf(stderr, "pig-serve: listening on http://%s:%d (loading the model)\n",
               o.http.host.find(':') != std::string::npos ? ("[" + o.http.host + "]").c_str()
                                                          : o.http.host.c_str(),
               http.Port());

  std::unique_ptr<runtime::LlamaModel> model;
  std::unique_ptr<serve::Engine> engine;
  try {
    app::RegisterKernels();
    model = runtime::LlamaModel::Load(o.model.path, o.model.overrides);
    const runtime::LlamaConfig &cfg = model->config();
    serve::Defaults d;
    d.attention = o.attention;
    if (!o.tuning.file.empty()) {
      const app::Tuning t =
          app::LoadTuning(o.tuning.file, o.tuning.max_error,
                          app::TuningTargetOf(o.tuning, o.model.path, cfg, o.attention.kv_dtype));
      for (const std::string &w : t.warnings)
        std::fprintf(stderr, "pig-serve: warning: %s\n", w.c_str());
      runtime::AttentionSpec tuned = app::ApplyTuning(o.attention, t.point);
      if (o.schedule_set)
        tuned.schedule = o.attention.schedule;
      tuned.method = spec::Method::magicpig;
      tuned.Validate(cfg.n_layers);
      d.tuned = tuned;
    }
    d.attention.Validate(cfg.n_layers);
    serve::EngineOptions eo = o.engine;
    eo.context = o.model.ctx ? o.model.ctx : cfg.context_length;
    if (eo.context > cfg.context_length && !o.model.long_context)
      throw std::runtime_error("--ctx " + std::to_string(eo.context) +
                               " exceeds the model's trained context of " +
                               std::to_string(cfg.context_length) +
                               " tokens (--long-context serves it anyway; quality degrades)");
    // The default attention must be buildable for this model (kernels for its head dim).
    runtime::MakeAttention(d.tuned && d.attention.method == spec::Method::magicpig ? *d.tuned
                                                                                   : d.attention,
                           cfg.Shape(8));
    // dense_below = measured: timed now (remembered for the process), not in the first
    // magicpig request's time to first token.
    if (d.attention.dense_below == runtime::AttentionSpec::kDenseBelowMeasured) {
      runtime::AttentionSpec m = d.tuned ? *d.tuned : d.attention;
      m.method = spec::Method::magicpig;
      const auto t0 = std::chrono::steady_clock::now();
      const size_t n = runtime::MeasuredDenseCrossover(m, cfg.Shape(0));
      std::fprintf(stderr,
                   "pig-serve: magicpig decodes sequences shorter than %zu positions densely "
                   "(measured in %.2f s; --dense-below N pins it)\n",
                   n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!eo.cache_dir.empty() && eo.prefix_cache)
      eo.model_id = runtime::FileHash(o.model.path); // names the disk tier's blocks
    engine = std::make_unique<serve::Engine>(*model, eo);
    http.SetEngine(engine.get(), d);
    char budget[64] = "no limit";
    if (eo.memory_budget)
      std::snprintf(budget, sizeof budget, "%.0f MiB", double(eo.memory_budget) / 1048576.0);
    std::fprintf(stderr,
                 "pig-serve: ready: %s (%s), %zu threads, %s kernels; %zu slots, queue %zu, "
                 "memory budget %s, context %zu; attention %s%s\n",
                 o.model.path.c_str(), model->WeightTypesSummary().c_str(), engine->threads(),
                 engine->kernels().target, eo.max_running, eo.max_queue, budget, eo.context,
                 d.attention.str(cfg.n_layers).c_str(),
                 d.tuned ? " (magicpig requests: --tuning's point)" : "");
  } catch (const app::TuningMismatch &e) {
    std::fprintf(stderr, "pig-serve: error: %s\n", e.what());
    http.Stop();
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "pig-serve: error: %s\n", e.what());
    http.Stop();
    return 1;
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "pig-serve: %s: draining (grace %.0f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.grace_s);
  http.BeginDrain();
  engine->Drain(std::chrono::milliseconds(long(o.grace_s * 1000)));
  http.Stop();
  std::fprintf(stderr, "pig-serve: stopped\n");
  return 0;
}
