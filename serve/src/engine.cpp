#include "pig/serve/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pig/app/text.h"

namespace pig::serve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A running estimate that follows changes within a few steps (requests join and leave, contexts
// grow).
double Ema(double old, double sample) { return old > 0 ? 0.7 * old + 0.3 * sample : sample; }

// The smallest prompt chunk a step takes while others decode (PrefillChunk needs 3 to avoid a
// one-token tail; a few more rows cost little beside the decode rows' weight pass).
constexpr size_t kMinChunk = 4;

std::string MiB(size_t bytes) { return app::Format("%.1f MiB", app::MiB(bytes)); }

// log-softmax of the chosen token and the `top` most likely ones (the model's distribution, not
// the sampler's: temperature and top-p do not change it, as in OpenAI's and vLLM's servers).
TokenLogprob LogProbs(const float *logits, size_t n, int32_t token, int top) {
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i)
    mx = std::max(mx, logits[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += std::exp(double(logits[i]) - double(mx));
  const float lse = mx + float(std::log(sum));
  TokenLogprob lp;
  lp.id = token;
  lp.logprob = logits[token] - lse;
  if (top > 0) {
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i)
      ids[i] = int32_t(i);
    const size_t k = std::min(size_t(top), n);
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    for (size_t i = 0; i < k; ++i)
      lp.top.emplace_back(ids[i], logits[ids[i]] - lse);
  }
  return lp;
}

} // namespace

const char *FinishReason(Finish f) {
  switch (f) {
  case Finish::kStop:
    return "stop";
  case Finish::kLength:
    return "length";
  case Finish::kCancelled:
    return "cancelled";
  case Finish::kError:
    return "error";
  case Finish::kNone:
    break;
  }
  return "none";
}

// --- Request -------------------------------------------------------------------------------------

Request::Request(GenerationParams params, std::string method)
    : params_(std::move(params)), method_(std::move(method)) {}

RequestUpdate Request::Take(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (delivered_)
    return {};
  cv_.wait_for(lock, wait,
               [&] { return closed_ || !pending_.text.empty() || !pending_.tokens.empty(); });
  RequestUpdate out;
  std::swap(out, pending_);
  if (closed_)
    delivered_ = true;
  return out;
}

bool Request::finished() const {
  std::lock_guard lock(mu_);
  return closed_;
}

RequestSummary Request::summary() const {
  std::lock_guard lock(mu_);
  return summary_;
}

void Request::Publish(const std::string &text, int32_t token, const TokenLogprob *lp) {
  {
    std::lock_guard lock(mu_);
    pending_.text += text;
    pending_.tokens.push_back(token);
    if (lp)
      pending_.logprobs.push_back(*lp);
  }
  cv_.notify_all();
}

void Request::Flush(const std::string &text) {
  if (text.empty())
    return;
  {
    std::lock_guard lock(mu_);
    pending_.text += text;
  }
  cv_.notify_all();
}

void Request::Close(Finish f, RequestSummary s, std::string error, int status) {
  {
    std::lock_guard lock(mu_);
    pending_.finish = f;
    pending_.error = std::move(error);
    pending_.error_status = status;
    summary_ = std::move(s);
    closed_ = true;
  }
  cv_.notify_all();
}

// --- Engine --------------------------------------------------------------------------------------

namespace {
runtime::LlamaBatch::Options BatchOptions(const EngineOptions &o) {
  runtime::LlamaBatch::Options b;
  b.max_rows = std::max({o.max_running, o.prefill_chunk, o.prefill_chunk_alone});
  b.decode_path = runtime::MatMulPath::kInteger;
  b.prefix_cache = o.prefix_cache;
  b.prefix_cache_bytes = o.prefix_cache_bytes;
  b.prefix_cache_dir = o.prefix_cache ? o.cache_dir : std::string();
  b.prefix_cache_disk_bytes = o.cache_dir_bytes;
  b.model_id = o.model_id;
  return b;
}
} // namespace

Engine::Engine(const runtime::LlamaModel &model, EngineOptions options)
    : model_(model), opts_(options), pool_(options.threads),
      batch_(model, pool_, BatchOptions(options)) {
  if (opts_.max_running == 0)
    throw std::invalid_argument("the engine needs at least one running slot");
  if (opts_.prefill_chunk < 3 || opts_.prefill_chunk_alone < 3)
    throw std::invalid_argument("a prefill chunk has at least 3 tokens (no one-token tail)");
  if (opts_.context == 0)
    opts_.context = model.config().context_length;
  logits_.resize((opts_.max_running + 1) * model.config().vocab);
  metrics_.memory_budget = opts_.memory_budget;
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  if (thread_.joinable())
    Drain(std::chrono::milliseconds(0));
}

size_t Engine::ReservedBytes(const GenerationParams &p) const {
  const runtime::LlamaConfig &c = model_.config();
  const runtime::AttentionShape shape = c.Shape(p.prompt.size() + p.max_tokens);
  try {
    return runtime::ReservedBytesOf(p.attention, shape);
  } catch (const std::invalid_argument &e) {
    throw ApiError(400, std::string("pig: ") + e.what(), "invalid_request_error", "pig");
  } catch (const std::length_error &e) {
    throw ApiError(400, std::string("the request's memory: ") + e.what(), "invalid_request_error",
                   "max_tokens");
  }
}

std::shared_ptr<Request> Engine::Submit(GenerationParams p) {
  const std::string method = spec::name(p.attention.method);
  auto reject = [&](const char *reason, ApiError e) -> ApiError {
    std::lock_guard lock(mu_);
    ++metrics_.rejected[reason];
    return e;
  };
  if (p.prompt.empty())
    throw reject("invalid",
                 ApiError(400, "the prompt is empty", "invalid_request_error", "prompt"));
  if (p.max_tokens == 0)
    throw reject("invalid", ApiError(400, "max_tokens must be at least 1", "invalid_request_error",
                                     "max_tokens"));
  if (p.prompt.size() > opts_.context || p.max_tokens > opts_.context - p.prompt.size()) {
    throw reject("invalid", ApiError(400,
                                     "the prompt (" + std::to_string(p.prompt.size()) +
                                         " tokens) + max_tokens (" + std::to_string(p.max_tokens) +
                                         ") exceeds the context of " +
                                         std::to_string(opts_.context) + " tokens",
                                     "invalid_request_error",
                                     p.prompt.size() >= opts_.context ? "prompt" : "max_tokens"));
  }
  const size_t vocab = model_.config().vocab;
  for (const int32_t t : p.prompt)
    if (t < 0 || size_t(t) >= vocab)
      throw reject("invalid",
                   ApiError(400,
                            "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                std::to_string(vocab) + ")",
                            "invalid_request_error", "prompt"));
  size_t reserved = 0;
  try {
    reserved = ReservedBytes(p);
  } catch (const ApiError &e) {
    throw reject("invalid", e);
  }
  if (opts_.memory_budget && reserved > opts_.memory_budget) {
    throw reject("too_large",
                 ApiError(400,
                          "the request needs " + MiB(reserved) + " (KV cache and index for " +
                              std::to_string(p.prompt.size() + p.max_tokens) +
                              " tokens), more than the server's memory budget of " +
                              MiB(opts_.memory_budget),
                          "invalid_request_error", "max_tokens"));
  }
  auto req = std::make_shared<Request>(std::move(p), method);
  {
    std::lock_guard lock(mu_);
    if (draining_) {
      ++metrics_.rejected["draining"];
      ApiError e(503, "the server is shutting down", "server_error");
      throw e;
    }
    if (waiting_.size() >= opts_.max_queue) {
      ++metrics_.rejected["queue_full"];
      ApiError e(503,
                 "the server is busy: " + std::to_string(waiting_.size()) +
                     " requests are waiting (--max-queue); retry later",
                 "server_error");
      e.retry_after = 1;
      throw e;
    }
    waiting_.push_back(Waiting{req, reserved, Clock::now()});
    ++metrics_.methods[method].waiting;
  }
  cv_.notify_all();
  return req;
}

void Engine::Cancel(const std::shared_ptr<Request> &req) {
  req->Cancel();
  {
    std::lock_guard lock(mu_);
    const auto it = std::find_if(waiting_.begin(), waiting_.end(),
                                 [&](const Waiting &w) { return w.req == req; });
    if (it == waiting_.end())
      return; // running (the next step retires it), finished, or never queued
    --metrics_.methods[req->method()].waiting;
    ++metrics_.methods[req->method()].finished["cancelled"];
    RequestSummary s;
    s.prompt_tokens = req->params().prompt.size();
    s.queue_s = Seconds(it->arrival, Clock::now());
    req->Close(Finish::kCancelled, s);
    waiting_.erase(it);
  }
  cv_.notify_all(); // a request behind it may be admitted now
}

void Engine::Drain(std::chrono::milliseconds grace) {
  const auto deadline = Clock::now() + grace;
  {
    std::unique_lock lock(mu_);
    draining_ = true;
    stop_ = true; // the loop ends once nothing is left
    cv_.notify_all();
    cv_.wait_until(lock, deadline, [&] { return !thread_.joinable() || done_; });
    cancel_all_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

ServerMetrics Engine::Metrics() const {
  std::lock_guard lock(mu_);
  ServerMetrics m = metrics_;
  m.memory_reserved = reserved_;
  return m;
}

void Engine::Admit() {
  std::vector<Waiting> admit;
  {
    std::lock_guard lock(mu_);
    while (!waiting_.empty()) {
      Waiting &w = waiting_.front();
      if (w.req->cancelled() || cancel_all_) {
        --metrics_.methods[w.req->method()].waiting;
        ++metrics_.methods[w.req->method()].finished["cancelled"];
        RequestSummary s;
        s.prompt_tokens = w.req->params().prompt.size();
        s.queue_s = Seconds(w.arrival, Clock::now());
        w.req->Close(Finish::kCancelled, s);
        waiting_.pop_front();
        continue;
      }
      if (active_.size() + admit.size() >= opts_.max_running)
        break;
      if (opts_.memory_budget) {
        // Cached prefixes count against the budget too, with the indexes shared over them:
        // those no request holds make room (an index goes with its blocks).
        auto cached = [&] { return batch_.PrefixStats().bytes + batch_.SharedIndexStats().bytes; };
        if (const size_t c = cached(); reserved_ + w.reserved + c > opts_.memory_budget)
          batch_.EvictPrefix(reserved_ + w.reserved + c - opts_.memory_budget);
        if (reserved_ + w.reserved + cached() > opts_.memory_budget)
          break; // first come, first served: nothing overtakes the head of the queue
      }
      reserved_ += w.reserved;
      MethodMetrics &mm = metrics_.methods[w.req->method()];
      --mm.waiting;
      ++mm.running;
      mm.prompt_tokens += w.req->params().prompt.size();
      admit.push_back(std::move(w));
      waiting_.pop_front();
    }
  }
  const runtime::LlamaConfig &c = model_.config();
  for (Waiting &w : admit) {
    const GenerationParams &p = w.req->params();
    const runtime::AttentionShape shape = c.Shape(p.prompt.size() + p.max_tokens);
    auto a = std::make_unique<Active>(Active{
        w.req,
        0,
        w.reserved,
        0,
        Phase::kPrefill,
        0,
        app::Generation(model_.tokenizer(), {p.sampling, p.max_tokens, p.stop, p.ignore_eos}),
        w.arrival,
        Clock::now(),
        {},
        {}});
    try {
      a->seq = batch_.Add(
          runtime::MakeAttention(p.attention, shape, batch_.KvPoolOf(p.attention.kv_dtype)));
    } catch (const std::exception &e) {
      // Submit validated the spec: what is left is a failed allocation or a kernel that is missing.
      active_.push_back(std::move(a));
      const bool memory = dynamic_cast<const std::bad_alloc *>(&e) != nullptr;
      active_.back()->seq = std::numeric_limits<size_t>::max();
      Retire(active_.size() - 1, Finish::kError,
             std::string(memory ? "out of memory: " : "cannot start the request: ") + e.what(),
             memory ? 503 : 400);
      continue;
    }
    active_.push_back(std::move(a));
  }
}

void Engine::Retire(size_t i, Finish f, const std::string &error, int status) {
  // Out of the running set first, so that the metrics a client reads once its request closed
  // already show the request's memory given back.
  const std::unique_ptr<Active> owned = std::move(active_[i]);
  active_.erase(active_.begin() + std::ptrdiff_t(i));
  Active &a = *owned;
  if (f == Finish::kStop || f == Finish::kLength)
    a.req->Flush(a.gen.Finish());
  const auto now = Clock::now();
  RequestSummary s;
  s.prompt_tokens = a.req->params().prompt.size();
  s.cached_tokens = a.cached;
  const size_t generated = a.gen.generated();
  s.completion_tokens = generated;
  s.queue_s = Seconds(a.arrival, a.admitted);
  s.ttft_s = generated ? Seconds(a.arrival, a.first) : 0;
  s.total_s = Seconds(a.arrival, now);
  s.decode_s = generated > 1 ? Seconds(a.first, a.last) : 0;
  s.attention = a.req->params().attention.str(model_.config().n_layers);
  if (a.seq != std::numeric_limits<size_t>::max() && batch_.contains(a.seq)) {
    s.stats = batch_.attention(a.seq).stats();
    batch_.Remove(a.seq); // frees the KV store and the index
  }
  {
    // The memory gauges change with reserved_, under one lock: a client that sees the reserve
    // given back also sees the request's KV and index bytes gone (the test of a cancelled request
    // read pig_kv_bytes in between).
    const MemoryByMethod bytes = ActiveMemory();
    std::lock_guard lock(mu_);
    reserved_ -= a.reserved;
    MethodMetrics &mm = metrics_.methods[a.req->method()];
    --mm.running;
    ++mm.finished[FinishReason(f)];
    if (generated)
      mm.e2e.Observe(s.total_s);
    SetMemoryGauges(bytes);
  }
  a.req->Close(f, std::move(s), error, status);
}

Finish Engine::Emit(Active &a, const float *logits) {
  const size_t vocab = model_.config().vocab;
  const app::Generation::Token t = a.gen.Next(logits, vocab); // sampled before the clock reads
  const bool first = a.gen.generated() == 1;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    MethodMetrics &mm = metrics_.methods[a.req->method()];
    ++mm.generated_tokens;
    if (first)
      mm.ttft.Observe(Seconds(a.arrival, now));
    else
      mm.itl.Observe(Seconds(a.last, now));
  }
  if (first)
    a.first = now;
  a.last = now;
  const GenerationParams &p = a.req->params();
  std::optional<TokenLogprob> lp;
  if (p.top_logprobs >= 0)
    lp = LogProbs(logits, vocab, t.id, p.top_logprobs);
  a.req->Publish(t.text, t.id, lp ? &*lp : nullptr);
  a.next = t.id;
  switch (a.gen.stop()) {
  case app::StopReason::kNone:
    return Finish::kNone;
  case app::StopReason::kMaxTokens:
    return Finish::kLength;
  case app::StopReason::kEndOfGeneration:
  case app::StopReason::kStopString:
    break;
  }
  return Finish::kStop;
}

Engine::MemoryByMethod Engine::ActiveMemory() const {
  MemoryByMethod bytes;
  for (const auto &a : active_) {
    const runtime::LlamaBatch::SequenceMemory m = batch_.Memory(a->seq);
    auto &b = bytes[a->req->method()];
    b.first += m.kv;
    b.second += m.index;
  }
  return bytes;
}

void Engine::UpdateMemoryGauges() {
  const MemoryByMethod bytes = ActiveMemory();
  const size_t resident = batch_.KvResidentBytes();
  const runtime::PrefixCache::Stats prefix = batch_.PrefixStats();
  const runtime::IndexShare::Stats shared = batch_.SharedIndexStats();
  std::lock_guard lock(mu_);
  SetMemoryGauges(bytes);
  metrics_.kv_resident = resident;
  metrics_.prefix_lookups = prefix.lookups;
  metrics_.prefix_hits = prefix.hits;
  metrics_.prefix_hit_tokens = prefix.hit_tokens;
  metrics_.prefix_evictions = prefix.evictions;
  metrics_.prefix_bytes = prefix.bytes;
  metrics_.prefix_disk_reads = prefix.disk_reads;
  metrics_.prefix_disk_writes = prefix.disk_writes;
  metrics_.prefix_disk_rejected = prefix.disk_rejected;
  metrics_.prefix_disk_bytes = prefix.disk_bytes;
  metrics_.shared_index_bytes = shared.bytes;
  metrics_.shared_index_builds = shared.builds;
  metrics_.shared_index_hits = shared.hits;
  metrics_.shared_index_disk_reads = shared.disk_reads;
  metrics_.shared_index_disk_writes = shared.disk_writes;
  metrics_.shared_index_disk_rejected = shared.disk_rejected;
}

void Engine::SetMemoryGauges(const MemoryByMethod &bytes) {
  for (auto &[name, mm] : metrics_.methods) {
    const auto it = bytes.find(name);
    mm.kv_bytes = it == bytes.end() ? 0 : it->second.first;
    mm.index_bytes = it == bytes.end() ? 0 : it->second.second;
  }
}

// Runs work_ (owned by work_owner_); on failure retires every owner with a 500 and returns false.
// On success the memory gauges are updated before any token of the work is published, so a client
// that has its first token sees its request's KV in /metrics.
bool Engine::RunWork() {
  try {
    batch_.Run(work_.data(), work_.size());
    UpdateMemoryGauges();
    return true;
  } catch (const std::exception &e) {
    // LlamaBatch checks before it changes anything: a failure here is the server's fault.
    const std::string error = std::string("internal error: ") + e.what();
    for (Active *a : work_owner_) {
      const auto it =
          std::find_if(active_.begin(), active_.end(), [&](const auto &p) { return p.get() == a; });
      Retire(size_t(it - active_.begin()), Finish::kError, error, 500);
    }
    return false;
  }
}

bool Engine::Step() {
  for (size_t i = active_.size(); i-- > 0;)
    if (active_[i]->req->cancelled())
      Retire(i, Finish::kCancelled);
  if (active_.empty())
    return false;
  const auto t0 = Clock::now();
  const size_t vocab = model_.config().vocab;
  std::vector<Active *> decoding;
  Active *prefill = nullptr, *index = nullptr;
  for (const auto &a : active_) {
    if (a->phase == Phase::kDecode)
      decoding.push_back(a.get());
    else if (a->phase == Phase::kPrefill && !prefill)
      prefill = a.get();
    else if (a->phase == Phase::kIndex && !index)
      index = a.get();
  }
  std::vector<std::pair<Active *, Finish>> done;
  // 1. One decode row of every decoding request, timed: what the step's other work is sized by.
  if (!decoding.empty()) {
    work_.clear();
    work_owner_.clear();
    for (Active *a : decoding) {
      work_.push_back({a->seq, &a->next, 1, &logits_[work_.size() * vocab]});
      work_owner_.push_back(a);
    }
    const auto td = Clock::now();
    if (!RunWork())
      return true;
    const double pass_s = Seconds(td, Clock::now());
    decode_s_ = Ema(decode_s_, pass_s);
    {
      std::lock_guard lock(mu_);
      auto it = metrics_.decode_pass.find(decoding.size());
      if (it == metrics_.decode_pass.end())
        it = metrics_.decode_pass.emplace(decoding.size(), DecodePassHistogram()).first;
      it->second.Observe(pass_s);
    }
    for (size_t r = 0; r < decoding.size(); ++r) {
      Active &a = *decoding[r];
      const float *row = &logits_[r * vocab];
      if (const Finish f = Emit(a, row); f != Finish::kNone)
        done.emplace_back(&a, f);
    }
  }
  // 2. Then one piece of prefill work: a slice of a request's LSH index build (it is one step
  // from decoding), else a chunk of a prompt. While others decode, the piece is sized to take about
  // --prefill-share times their rows' time, so that their tokens keep coming; alone, it is as big
  // as is efficient.
  const bool others = !decoding.empty();
  const double budget_s = others && opts_.prefill_share > 0 ? opts_.prefill_share * decode_s_ : 0;
  if (index) {
    runtime::Attention &attn = batch_.attention(index->seq);
    const size_t before = attn.DecodeUnitsPending();
    size_t units = before;
    if (budget_s > 0)
      units = unit_s_ > 0 ? std::clamp(size_t(budget_s / unit_s_), size_t(1), before) : 1;
    const auto ti = Clock::now();
    const size_t left = attn.PrepareDecode(pool_, units);
    if (before > left)
      unit_s_ = Ema(unit_s_, Seconds(ti, Clock::now()) / double(before - left));
    if (left == 0)
      index->phase = Phase::kDecode;
  } else if (prefill) {
    if (!prefill->looked_up) {
      // When its prefill starts, not when it was admitted: requests on one document that arrive
      // together find the blocks the one before them has prefilled by then (every chunk caches
      // its full blocks), so the document is prefilled once, not once per request.
      prefill->looked_up = true;
      const std::vector<int32_t> &prompt = prefill->req->params().prompt;
      prefill->cached = batch_.AttachCachedPrefix(prefill->seq, prompt.data(), prompt.size());
      prefill->prefilled = prefill->cached;
      if (prefill->cached > 0) {
        // The attached blocks are the cache's, counted in its bytes while anyone holds them:
        // the request's reservation gives their share back, so shared bytes count once.
        const runtime::KvPool &kv = batch_.attention(prefill->seq).cache().pool();
        const size_t shared =
            std::min(prefill->reserved, prefill->cached / kv.block_tokens() * kv.BlockBytes());
        std::lock_guard lock(mu_);
        prefill->reserved -= shared;
        reserved_ -= shared;
      }
    }
    const size_t remaining = prefill->req->params().prompt.size() - prefill->prefilled;
    size_t most = others ? opts_.prefill_chunk : opts_.prefill_chunk_alone;
    if (budget_s > 0)
      most = prefill_token_s_ > 0 ? std::clamp(size_t(budget_s / prefill_token_s_), kMinChunk, most)
                                  : std::min(most, kMinChunk);
    const size_t chunk = runtime::PrefillChunk(remaining, most);
    const bool last = chunk == remaining;
    work_.clear();
    work_owner_.clear();
    work_.push_back({prefill->seq, prefill->req->params().prompt.data() + prefill->prefilled, chunk,
                     last ? logits_.data() : nullptr});
    work_owner_.push_back(prefill);
    const auto tp = Clock::now();
    if (RunWork()) {
      prefill_token_s_ = Ema(prefill_token_s_, Seconds(tp, Clock::now()) / double(chunk));
      prefill->prefilled += chunk;
      const std::vector<int32_t> &prompt = prefill->req->params().prompt;
      batch_.CachePrompt(prefill->seq, prompt.data(), prefill->prefilled); // its full blocks
      if (last) {
        const float *row = logits_.data();
        if (const Finish f = Emit(*prefill, row); f != Finish::kNone)
          done.emplace_back(prefill, f);
        else
          prefill->phase = batch_.attention(prefill->seq).DecodeUnitsPending() > 0 ? Phase::kIndex
                                                                                   : Phase::kDecode;
      }
    }
  }
  for (auto &[a, f] : done) {
    const auto it =
        std::find_if(active_.begin(), active_.end(), [&](const auto &p) { return p.get() == a; });
    if (it != active_.end())
      Retire(size_t(it - active_.begin()), f);
  }
  UpdateMemoryGauges();
  std::lock_guard lock(mu_);
  ++metrics_.steps;
  metrics_.step_seconds += Seconds(t0, Clock::now());
  return true;
}

void Engine::Loop() {
  for (;;) {
    Admit();
    const bool did = Step();
    std::unique_lock lock(mu_);
    if (cancel_all_) {
      for (const auto &a : active_)
        a->req->Cancel();
      for (const Waiting &w : waiting_)
        w.req->Cancel();
    }
    if (stop_ && active_.empty() && waiting_.empty()) {
      done_ = true;
      break;
    }
    if (!did) {
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] {
        return cancel_all_ || (!waiting_.empty() && active_.size() < opts_.max_running) ||
               (stop_ && waiting_.empty());
      });
    }
  }
  cv_.notify_all();
}

} // namespace pig::serve
