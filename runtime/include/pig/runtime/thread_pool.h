// A fixed pool of worker threads that every parallel op shares (never a thread per op). The
// caller takes part in the work, so a pool of size 1 runs everything inline. An exception thrown
// by an item (on a worker or on the caller) is carried back to the caller of ParallelFor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pig::runtime {

class ThreadPool {
public:
  // n_threads == 0: one per hardware thread. Throws std::system_error when a thread cannot start
  // (the ones started are joined first).
  explicit ThreadPool(size_t n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Runs fn(item, thread) for every item in [0, n_items), items handed out dynamically;
  // `thread` is in [0, size()). Returns when all items are done.
  //
  // If an item throws, the items not yet started are skipped, the ones running finish, and
  // then the first exception thrown is rethrown here (the others are dropped). The pool is
  // usable again afterwards.
  void ParallelFor(size_t n_items, const std::function<void(size_t, size_t)> &fn);

  // What the callers of ParallelFor waited: after running what items they could claim, a caller
  // waits for the items other threads still run. It spins for a short while (kSpin), then sleeps
  // on a futex (std::atomic::wait) until the last item's thread wakes it. The counters grow for
  // the pool's life; read them before and after what you measure.
  struct WaitStats {
    uint64_t calls = 0;  ///< ParallelFor calls that used the workers
    uint64_t waits = 0;  ///< ... whose caller had to wait for another thread's items
    uint64_t sleeps = 0; ///< ... and slept on the futex after spinning
    double seconds = 0;  ///< the callers' time waiting (spinning and asleep)
  };
  WaitStats wait_stats() const;

private:
  // Wakes every worker with stop_ set and joins them.
  void Stop();
  void WorkerLoop(size_t thread);
  void RunItems(uint64_t generation, size_t n_items, const std::function<void(size_t, size_t)> &fn,
                size_t thread);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  // Claims are (generation << 32 | next item): a worker that wakes up late for a finished
  // ParallelFor cannot claim items of the next one by mistake.
  std::atomic<uint64_t> claim_{0};
  // Items run or skipped in this call; the caller sleeps on it (a 32-bit futex word).
  std::atomic<uint32_t> done_{0};
  std::atomic<uint64_t> calls_{0}, waits_{0}, sleeps_{0}, wait_ns_{0};
  // Set by the first item of the current call that throws, which also stores error_; read by
  // the caller only once done_ says every item was run or skipped.
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  size_t n_items_ = 0;
  const std::function<void(size_t, size_t)> *fn_ = nullptr;
  bool stop_ = false;
};

} // namespace pig::runtime
