// pig-serve's engine: one scheduler thread owns the model and a LlamaBatch, and runs steps until
// it is stopped. A step is up to two forward passes: first the decode rows of every running
// request, then one piece of prefill work of one admitted request: a prompt chunk (the second
// pass) or a slice of the LSH index builds of a request about to decode
// (Attention::PrepareDecode). While others decode, that piece is sized to take about
// --prefill-share times their rows' pass (so a long new prompt never stalls the running streams
// for its whole prefill): that is why the rows run in a pass of their own, timed, though
// LlamaBatch could take them with the chunk in one. Requests join and leave at any step. Each
// request's end (sampling, end of generation, stop strings, max_tokens, the text shown) is its
// app::Generation's.
//
// Admission is by memory: a request reserves what its Attention can grow to (KV store and index at
// its full capacity, prompt + max_tokens: runtime::ReservedBytesOf) against the memory budget;
// when the budget or the running slots are full it waits in a bounded FIFO queue. A request that
// can never fit is refused at Submit.
//
// The HTTP side holds a Request (shared with the engine): it takes the generated text and tokens
// as they come (Take), and cancels it when the client goes away (Cancel: the engine frees its slot
// and memory at the start of its next step).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pig/app/generation.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/model.h"
#include "pig/runtime/sampler.h"
#include "pig/serve/metrics.h"

namespace pig::serve {

/// An error the client caused or can act on: the HTTP status and OpenAI's error type.
class ApiError : public std::runtime_error {
public:
  ApiError(int status, const std::string &message, std::string type = "invalid_request_error",
           std::string param = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)),
        param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string &type() const { return type_; }
  const std::string &param() const { return param_; } ///< the request field at fault, or ""
  /// Seconds a client should wait before retrying (Retry-After), 0: none.
  int retry_after = 0;

private:
  int status_;
  std::string type_, param_;
};

/// What to generate for one request.
struct GenerationParams {
  std::vector<int32_t> prompt;
  size_t max_tokens = 16;
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;
  int top_logprobs = -1;   ///< -1: no log-probabilities; 0..20: the token's and that many others'
  bool ignore_eos = false; ///< go on past the end-of-generation token (benchmarks)
  runtime::AttentionSpec attention;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top; ///< the most likely tokens, most likely first
};

enum class Finish { kNone, kStop, kLength, kCancelled, kError };
/// OpenAI's finish_reason: "stop", "length"; ours: "cancelled", "error".
const char *FinishReason(Finish f);

/// What a request produced since the last Take.
struct RequestUpdate {
  std::string text;
  std::vector<int32_t> tokens;        ///< every generated token (control tokens too)
  std::vector<TokenLogprob> logprobs; ///< per token when top_logprobs >= 0
  Finish finish = Finish::kNone;      ///< set once: the last update
  std::string error;                  ///< kError: the message
  int error_status = 0;               ///< kError: the HTTP status it stands for
};

/// A finished request's account (usage and pig's extension fields).
struct RequestSummary {
  size_t prompt_tokens = 0, completion_tokens = 0;
  size_t cached_tokens = 0; ///< prompt tokens whose KV came from the prefix cache
  double queue_s = 0;       ///< arrival to admission
  double ttft_s = 0;        ///< arrival to the first token
  double total_s = 0;       ///< arrival to the last token
  double decode_s = 0;      ///< first token to last
  std::string attention;    ///< AttentionSpec::str
  runtime::AttentionStats stats;
};

class Request {
public:
  Request(GenerationParams params, std::string method);
  const GenerationParams &params() const { return params_; }
  const std::string &method() const { return method_; } ///< the attention method's name

  /// Waits up to `wait` for news; returns what came (possibly nothing). After the update whose
  /// finish is set, every later call returns at once with an empty update and finish kNone.
  RequestUpdate Take(std::chrono::milliseconds wait);
  /// The client went away or gave up: the engine frees the request at its next step.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool finished() const;
  /// Valid once finished() (the final update has been published).
  RequestSummary summary() const;

  // The engine's side.
  void Publish(const std::string &text, int32_t token, const TokenLogprob *lp);
  void Flush(const std::string &text);
  void Close(Finish f, RequestSummary s, std::string error = {}, int status = 0);

private:
  GenerationParams params_;
  std::string method_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RequestUpdate pending_;
  bool closed_ = false, delivered_ = false;
  RequestSummary summary_;
};

struct EngineOptions {
  size_t threads = 0;         ///< compute threads (0: every core)
  size_t max_running = 8;     ///< requests admitted at once (rows of a decode step)
  size_t max_queue = 64;      ///< requests waiting for admission; beyond: 503
  size_t memory_budget = 0;   ///< bytes every admitted request's Attention may reserve; 0: none
  size_t prefill_chunk = 256; ///< prompt tokens per step at most while others decode
  size_t prefill_chunk_alone = 512; ///< ... while none does (a bigger chunk is faster)
  /// While others decode, a step's prefill work (a prompt chunk or a slice of an LSH index
  /// build) is sized to take about this times their decode rows' time (measured); 0: no
  /// time limit (the chunk is prefill_chunk).
  double prefill_share = 1.0;
  size_t context = 0; ///< the most positions a request may hold (prompt + max_tokens)
  /// A request attaches the KV blocks of its prompt's longest cached prefix (runtime::
  /// PrefixCache) and its prompt is cached once prefilled (--no-prefix-cache: off).
  bool prefix_cache = true;
  /// The most KV bytes the prefix cache holds; with a memory budget, admission also evicts
  /// cached blocks no request holds to make room (they count against the budget).
  size_t prefix_cache_bytes = size_t(1) << 30;
  /// The prefix cache's disk tier ("": none; runtime::PrefixCache::SetDisk), its size limit, and
  /// the model file's hash (runtime::FileHash) that names its blocks.
  std::string cache_dir = {};
  size_t cache_dir_bytes = size_t(4) << 30;
  std::uint64_t model_id = 0;
};

class Engine {
public:
  /// Starts the scheduler thread. The model outlives the engine.
  Engine(const runtime::LlamaModel &model, EngineOptions options);
  ~Engine(); ///< cancels whatever runs and joins

  /// Queues a request. Throws ApiError: 400 for one that can never run (empty prompt, prompt +
  /// max_tokens past the context, a token outside the vocabulary, an invalid attention spec, more
  /// memory than the whole budget), 503 when the queue is full or the server is draining.
  std::shared_ptr<Request> Submit(GenerationParams p);

  /// The client of `req` went away: a waiting request leaves the queue at once (its place and
  /// the queue slot are free for the next Submit), a running one is freed at the next step.
  void Cancel(const std::shared_ptr<Request> &req);

  /// Stops admitting (Submit: 503); lets the running and waiting requests finish for up to
  /// `grace`, cancels the rest, and returns when the scheduler has stopped.
  void Drain(std::chrono::milliseconds grace);

  /// What a request reserves (KV + index at its capacity); throws ApiError 400 like Submit.
  size_t ReservedBytes(const GenerationParams &p) const;

  ServerMetrics Metrics() const;
  const EngineOptions &options() const { return opts_; }
  const runtime::LlamaModel &model() const { return model_; }
  const runtime::Kernels &kernels() const { return batch_.kernels(); }
  size_t threads() const { return pool_.size(); }

private:
  enum class Phase { kPrefill, kIndex, kDecode };
  struct Active {
    std::shared_ptr<Request> req;
    size_t seq = 0, reserved = 0, prefilled = 0;
    Phase phase = Phase::kPrefill;
    int32_t next = 0; ///< the token the next decode row feeds
    app::Generation gen;
    std::chrono::steady_clock::time_point arrival, admitted, first, last;
    size_t cached = 0;      ///< prompt tokens attached from the prefix cache
    bool looked_up = false; ///< the prefix cache was asked (when the prefill starts)
  };
  struct Waiting {
    std::shared_ptr<Request> req;
    size_t reserved = 0;
    std::chrono::steady_clock::time_point arrival;
  };

  void Loop();
  void Admit();   // moves waiting requests into the batch while they fit
  bool Step();    // one step; false when there was nothing to do
  bool RunWork(); // batch_.Run(work_); a failure retires the owners
  // Samples the request's next token from `logits` and publishes it; returns how the request
  // finished with it (kNone: it goes on).
  Finish Emit(Active &a, const float *logits);
  void Retire(size_t i, Finish f, const std::string &error = {}, int status = 0);
  // KV and index bytes of the active requests, per method: {kv, index}.
  using MemoryByMethod = std::map<std::string, std::pair<uint64_t, uint64_t>>;
  MemoryByMethod ActiveMemory() const;
  void UpdateMemoryGauges();
  void SetMemoryGauges(const MemoryByMethod &bytes); // mu_ held

  const runtime::LlamaModel &model_;
  EngineOptions opts_;
  runtime::ThreadPool pool_;
  runtime::LlamaBatch batch_;
  std::vector<std::unique_ptr<Active>> active_; // the scheduler thread's only
  std::vector<float> logits_;
  std::vector<runtime::LlamaBatch::Work> work_;
  std::vector<Active *> work_owner_;
  // Measured (0: not yet): seconds per index-build unit, per prompt token of a chunk, and of the
  // decode rows' pass.
  double unit_s_ = 0, prefill_token_s_ = 0, decode_s_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  size_t reserved_ = 0; // bytes of admitted requests
  bool draining_ = false, cancel_all_ = false, stop_ = false, done_ = false;
  ServerMetrics metrics_;
  std::thread thread_;
};

} // namespace pig::serve
