// ThreadPool: every item runs once, back-to-back calls, and exceptions thrown by items (on a
// worker or on the caller) carried back to the caller of ParallelFor with the pool still usable;
// a pool whose threads cannot all start throws.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "pig/runtime/thread_pool.h"

namespace pig::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Spins until `flag` is set or 10 s passed (a broken pool fails the test instead of hanging).
bool WaitFor(const std::atomic<bool> &flag) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!flag.load()) {
    if (Clock::now() > deadline)
      return false;
    std::this_thread::yield();
  }
  return true;
}

// Every item runs exactly once (used after a throw, to show the pool still works).
void ExpectEveryItemOnce(ThreadPool &pool, size_t n) {
  std::vector<std::atomic<int>> hits(n);
  pool.ParallelFor(n, [&](size_t i, size_t) { hits[i].fetch_add(1); });
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[i].load(), 1) << "item " << i;
}

TEST(ThreadPoolTest, RunsEveryItemOnce) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> hits(97);
    pool.ParallelFor(hits.size(), [&](size_t i, size_t t) {
      ASSERT_LT(t, pool.size());
      hits[i].fetch_add(1);
    });
    for (auto &h : hits)
      ASSERT_EQ(h.load(), 1);
  }
}

// Calls that follow each other at once, each with more items than the last: a worker that is
// still leaving the previous call while the next one is being set up must not take an item of
// it (this once ran an item twice, and the extra completion count left the caller waiting
// forever). Every item must run exactly once in every call.
TEST(ThreadPoolTest, BackToBackCallsOfGrowingSize) {
  for (size_t threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(64);
    for (int rep = 0; rep < 20000; ++rep) {
      const size_t n = 2 + size_t(rep) % 31;
      for (size_t i = 0; i < n; ++i)
        hits[i].store(0, std::memory_order_relaxed);
      pool.ParallelFor(n, [&](size_t i, size_t) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "call " << rep << " item " << i << " of " << n;
    }
  }
}

// A worker's item throws while the caller's item waits for it: the exception (its type and
// message) reaches the caller, and ParallelFor returns only once every started item finished.
TEST(ThreadPoolTest, WorkerExceptionReachesTheCaller) {
  ThreadPool pool(4);
  std::atomic<bool> thrown{false};
  std::atomic<int> started{0}, finished{0};
  std::string what;
  try {
    pool.ParallelFor(64, [&](size_t i, size_t t) {
      started.fetch_add(1);
      if (t == 0) {
        WaitFor(thrown); // the caller holds an item until a worker has thrown
      } else if (!thrown.exchange(true)) {
        finished.fetch_add(1);
        throw std::runtime_error("item " + std::to_string(i) + " failed");
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      finished.fetch_add(1);
    });
    FAIL() << "ParallelFor returned normally";
  } catch (const std::runtime_error &e) {
    what = e.what();
  }
  EXPECT_TRUE(thrown.load());
  EXPECT_EQ(what.rfind("item ", 0), 0u) << what;
  EXPECT_EQ(started.load(), finished.load()) << "returned while items still ran";
  ExpectEveryItemOnce(pool, 97);
}

// The caller's own share throws while every worker holds an item: the caller still waits for the
// workers' items (fn must outlive them) and then rethrows its exception.
TEST(ThreadPoolTest, CallerExceptionIsRethrownAfterTheWorkers) {
  ThreadPool pool(4);
  std::atomic<bool> thrown{false};
  std::atomic<int> started{0}, finished{0};
  EXPECT_THROW(pool.ParallelFor(64,
                                [&](size_t, size_t t) {
                                  started.fetch_add(1);
                                  if (t == 0) {
                                    finished.fetch_add(1);
                                    thrown.store(true);
                                    throw std::invalid_argument("caller item");
                                  }
                                  WaitFor(thrown);
                                  std::this_thread::sleep_for(std::chrono::milliseconds(5));
                                  finished.fetch_add(1);
                                }),
               std::invalid_argument);
  EXPECT_TRUE(thrown.load());
  EXPECT_EQ(started.load(), finished.load()) << "returned while workers still ran";
  ExpectEveryItemOnce(pool, 97);
}

// Every item throws, with many more items than threads, call after call: one exception per call
// comes back, the items not started are skipped, nothing hangs, and normal calls in between
// still run every item.
TEST(ThreadPoolTest, EveryItemThrowsManyTimes) {
  for (size_t threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {
      const size_t n = 1 + size_t(rep) % 300;
      std::atomic<int> ran{0};
      EXPECT_THROW(pool.ParallelFor(n,
                                    [&](size_t i, size_t) {
                                      ran.fetch_add(1);
                                      throw int(i);
                                    }),
                   int)
          << threads << " threads, " << n << " items";
      EXPECT_GE(ran.load(), 1);
      // Each thread sees the failure (its own at the latest) before its next item, so none runs
      // more than one: the rest of the items are skipped.
      EXPECT_LE(ran.load(), int(std::min(n, threads)));
      if (rep % 10 == 0)
        ExpectEveryItemOnce(pool, n);
    }
  }
}

// The first exception wins: with one failing item per thread, the caller gets exactly one of
// them and the others are dropped (no terminate from a second exception in flight).
TEST(ThreadPoolTest, OnlyTheFirstExceptionIsKept) {
  ThreadPool pool(3);
  std::atomic<int> throws{0};
  try {
    pool.ParallelFor(3000, [&](size_t i, size_t) {
      if (i % 7 == 0) {
        throws.fetch_add(1);
        throw std::runtime_error("item " + std::to_string(i));
      }
    });
    FAIL() << "ParallelFor returned normally";
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()).rfind("item ", 0), 0u);
  }
  EXPECT_GE(throws.load(), 1);
  ExpectEveryItemOnce(pool, 3000);
}

#if defined(__SANITIZE_ADDRESS__)
#define PIG_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PIG_TEST_ASAN 1
#endif
#endif

#ifndef PIG_TEST_ASAN
// In a child process: an address space that holds a few thread stacks, and a pool of 1000.
[[noreturn]] void StartTooManyThreads() {
  alarm(30); // a hang fails the test instead of running into the suite's timeout
  long pages = 0;
  if (std::FILE *f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1)
      pages = 0;
    std::fclose(f);
  }
  // what the process maps now plus 256 MiB: far less than 1000 thread stacks of 8 MiB
  const rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(256) << 20);
  rlimit rl{};
  rl.rlim_cur = rl.rlim_max = limit;
  if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0)
    std::_Exit(3);
  try {
    ThreadPool pool(1000);
  } catch (const std::system_error &e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(0);
  }
  std::_Exit(2); // every thread started: the limit did not bite
}
#endif

// A pool whose threads cannot all start (here: too little address space for their stacks, as
// under `ulimit -v`) throws std::system_error with the started ones joined. It used to hang in
// the half-built pool's cleanup (pthread_cond_destroy waiting for the parked workers).
TEST(ThreadPoolTest, AThreadThatCannotStartThrowsInsteadOfHanging) {
#ifdef PIG_TEST_ASAN
  GTEST_SKIP() << "ASan reserves its shadow memory: an address-space limit breaks it, not us";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(StartTooManyThreads(), ::testing::ExitedWithCode(0),
              "thread pool: 1000 threads requested, only [0-9]+ could start");
#endif
}

} // namespace
} // namespace pig::runtime
