#include "pig/serve/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace pig::serve {
namespace {

TEST(Histogram, BucketsAreCumulativeAndEndWithInf) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.1); // on a bound: counted in it (le)
  h.Observe(0.5);
  h.Observe(7);
  std::string out;
  h.Render(out, "x", "m=\"a\"");
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"0.1\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{m=\"a\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{m=\"a\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{m=\"a\"} 7.65\n"), std::string::npos) << out;
}

// Every line is a comment (# HELP / # TYPE) or `name{labels} value`, every metric has its TYPE
// before its samples, and the per-method series carry the method label.
TEST(ServerMetrics, RenderIsPrometheusText) {
  ServerMetrics m;
  m.methods["magicpig"].running = 2;
  m.methods["magicpig"].generated_tokens = 17;
  m.methods["magicpig"].finished["stop"] = 3;
  m.methods["magicpig"].ttft.Observe(0.3);
  m.methods["dense"].waiting = 1;
  m.rejected["queue_full"] = 4;
  m.memory_budget = 1000;
  const std::string text = m.Render();
  std::istringstream in(text);
  std::string line, typed;
  int samples = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# TYPE ", 0) == 0) {
      typed = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0)
      continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    ASSERT_EQ(name.rfind(typed, 0), 0u) << "sample before its TYPE: " << line;
    const std::string value = line.substr(line.rfind(' ') + 1);
    ASSERT_FALSE(value.empty()) << line;
    std::size_t used = 0;
    (void)std::stod(value, &used);
    ASSERT_TRUE(used == value.size() || value == "+Inf") << line;
    ++samples;
  }
  EXPECT_GT(samples, 20);
  EXPECT_NE(text.find("pig_requests_running{method=\"magicpig\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("pig_requests_waiting{method=\"dense\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("pig_generation_tokens_total{method=\"magicpig\"} 17\n"), std::string::npos);
  EXPECT_NE(text.find("pig_requests_finished_total{method=\"magicpig\",reason=\"stop\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("pig_requests_rejected_total{reason=\"queue_full\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("pig_time_to_first_token_seconds_count{method=\"magicpig\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("pig_memory_budget_bytes 1000\n"), std::string::npos);
}

} // namespace
} // namespace pig::serve
