#include "pig/runtime/thread_pool.h"

#include <chrono>

namespace pig::runtime {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Decode issues a few hundred small parallel ops per token: workers spin this long for the
// next one before they sleep, which keeps wake-up latency off the critical path without
// burning a core when the pool is idle.
constexpr auto kSpin = std::chrono::microseconds(100);

} // namespace

ThreadPool::ThreadPool(size_t n_threads) {
  if (n_threads == 0)
    n_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  for (size_t t = 1; t < n_threads; ++t)
    workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto &w : workers_)
    w.join();
}

// Claims and runs items of `generation` until none is left. Items are counted as done only
// after they ran, so ParallelFor never waits for a worker that has nothing to do.
void ThreadPool::RunItems(uint64_t generation, size_t thread) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((c >> 32) != (generation & 0xFFFFFFFFu) || (c & 0xFFFFFFFFu) >= n_items_)
      return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel))
      continue;
    (*fn_)(size_t(c & 0xFFFFFFFFu), thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::ParallelFor(size_t n_items, const std::function<void(size_t, size_t)> &fn) {
  if (n_items == 0)
    return;
  if (workers_.empty() || n_items == 1) {
    for (size_t i = 0; i < n_items; ++i)
      fn(i, 0);
    return;
  }
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_items_ = n_items;
    done_.store(0, std::memory_order_relaxed);
    gen = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store((gen & 0xFFFFFFFFu) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  RunItems(gen, 0);
  const auto start = std::chrono::steady_clock::now();
  while (done_.load(std::memory_order_acquire) != n_items) {
    if (std::chrono::steady_clock::now() - start < kSpin) {
      CpuRelax();
    } else {
      std::this_thread::yield(); // let a descheduled worker finish its item
    }
  }
}

void ThreadPool::WorkerLoop(size_t thread) {
  uint64_t seen = 0;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    while (generation_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() - start < kSpin) {
      CpuRelax();
    }
    uint64_t gen;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      if (stop_)
        return;
      gen = seen = generation_.load();
    }
    RunItems(gen, thread);
  }
}

} // namespace pig::runtime
