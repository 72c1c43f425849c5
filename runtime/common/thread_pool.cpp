#include "pig/runtime/thread_pool.h"

#include <chrono>
#include <string>
#include <system_error>
#include <utility>

namespace pig::runtime {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Decode issues a few hundred small parallel ops per token: workers spin this long for the
// next one before they sleep, and a caller this long for the last item before it sleeps, which
// keeps wake-up latency off the critical path without burning a core when the pool is idle or
// an item is long (a caller used to yield in a loop instead: a core spent on sched_yield and
// clock_gettime for as long as the slowest item ran, taken from any other process).
constexpr auto kSpin = std::chrono::microseconds(100);

} // namespace

ThreadPool::ThreadPool(size_t n_threads) {
  if (n_threads == 0)
    n_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  // A thread that cannot start (EAGAIN: out of address space for its stack, or a process limit)
  // throws std::system_error here. The workers already started must be stopped and joined before
  // it leaves: no destructor runs for a half-built pool, and destroying cv_ while they wait on it
  // blocked for ever in pthread_cond_destroy (a Python session(threads=1500) under `ulimit -v`
  // hung), or ~vector<std::thread> of joinable threads would have terminated the process.
  try {
    workers_.reserve(n_threads - 1);
    for (size_t t = 1; t < n_threads; ++t)
      workers_.emplace_back([this, t] { WorkerLoop(t); });
  } catch (const std::system_error &e) {
    const size_t started = workers_.size() + 1;
    Stop();
    throw std::system_error(e.code(), "thread pool: " + std::to_string(n_threads) +
                                          " threads requested, only " + std::to_string(started) +
                                          " could start");
  } catch (...) {
    Stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto &w : workers_)
    w.join();
  workers_.clear();
}

// Claims and runs items of `generation` until none is left. Items are counted as done only
// after they ran, so ParallelFor never waits for a worker that has nothing to do.
//
// n_items and fn are the generation's own, read together with it (under mu_ by a worker): a
// worker still in here for the previous generation must not see the next call's n_items_. It
// used to read the member: after the caller saw the last item done and began the next
// ParallelFor with more items, a late worker could claim index n_old of the finished generation
// (n_old < the new n_items_) before claim_ was reset, run the new fn on it and add a stray count
// to done_, which then never equalled n_items: the caller spun forever (seen as a hang of
// the parity test, and reproduced by ThreadPoolTest.BackToBackCallsOfGrowingSize).
//
// An item that throws must not leave this thread (a worker would terminate the process, and the
// caller would return while workers still run fn): the first exception is kept in error_, and
// the items claimed after it are skipped but still counted, so ParallelFor's wait ends as usual.
// error_ is written before this thread's done_ increment, which the caller's acquire load of the
// final count synchronises with.
void ThreadPool::RunItems(uint64_t generation, size_t n_items,
                          const std::function<void(size_t, size_t)> &fn, size_t thread) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((c >> 32) != (generation & 0xFFFFFFFFu) || (c & 0xFFFFFFFFu) >= n_items)
      return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel))
      continue;
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        fn(size_t(c & 0xFFFFFFFFu), thread);
      } catch (...) {
        if (!failed_.exchange(true, std::memory_order_relaxed))
          error_ = std::current_exception();
      }
    }
    // The last item wakes a caller asleep on done_ (notify costs no system call when nobody
    // waits: libstdc++ counts the waiters).
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_items)
      done_.notify_all();
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
    failed_.store(false, std::memory_order_relaxed);
    gen = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store((gen & 0xFFFFFFFFu) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  RunItems(gen, n_items, fn, 0);
  calls_.fetch_add(1, std::memory_order_relaxed);
  uint32_t d = done_.load(std::memory_order_acquire);
  if (d != n_items) {
    const auto start = std::chrono::steady_clock::now();
    bool slept = false;
    while ((d = done_.load(std::memory_order_acquire)) != n_items) {
      if (!slept && std::chrono::steady_clock::now() - start < kSpin) {
        CpuRelax();
      } else {
        done_.wait(d, std::memory_order_acquire); // woken by the last item (or d changed)
        slept = true;
      }
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    waits_.fetch_add(1, std::memory_order_relaxed);
    sleeps_.fetch_add(slept ? 1 : 0, std::memory_order_relaxed);
    wait_ns_.fetch_add(uint64_t(ns), std::memory_order_relaxed);
  }
  if (failed_.load(std::memory_order_relaxed))
    std::rethrow_exception(std::exchange(error_, nullptr));
}

ThreadPool::WaitStats ThreadPool::wait_stats() const {
  WaitStats s;
  s.calls = calls_.load(std::memory_order_relaxed);
  s.waits = waits_.load(std::memory_order_relaxed);
  s.sleeps = sleeps_.load(std::memory_order_relaxed);
  s.seconds = double(wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return s;
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
    size_t n_items;
    const std::function<void(size_t, size_t)> *fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      if (stop_)
        return;
      gen = seen = generation_.load();
      n_items = n_items_;
      fn = fn_;
    }
    RunItems(gen, n_items, *fn, thread);
  }
}

} // namespace pig::runtime
