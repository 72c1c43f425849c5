// The one machine fingerprint: detection's text parsers, the command-line spelling, and which
// fields a build-time comparison uses.
#include "pig/spec/machine.h"

#include <gtest/gtest.h>

#include <fstream>

namespace {

using pig::spec::MachineFingerprint;

TEST(Machine, CpuModelFromCpuinfo) {
  // x86: the first "model name", spaces around the value trimmed.
  EXPECT_EQ(pig::spec::CpuModelFromCpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                                           "model name\t: Intel(R) Xeon(R) Processor \n\n"
                                           "processor\t: 1\nmodel name\t: Other\n"),
            "Intel(R) Xeon(R) Processor");
  // ARM without a model name: the first implementer and part.
  EXPECT_EQ(pig::spec::CpuModelFromCpuinfo("processor : 0\nCPU implementer : 0x41\n"
                                           "CPU part : 0xd0c\n\nprocessor : 1\n"
                                           "CPU implementer : 0x42\nCPU part : 0xd40\n"),
            "implementer 0x41 part 0xd0c");
  EXPECT_EQ(pig::spec::CpuModelFromCpuinfo("model name :\nflags : fpu\n"), "");
  EXPECT_EQ(pig::spec::CpuModelFromCpuinfo(""), "");
}

TEST(Machine, CountCpuListAndCacheSize) {
  EXPECT_EQ(pig::spec::CountCpuList("0-1,4,6-7\n"), 5);
  EXPECT_EQ(pig::spec::CountCpuList("0"), 1);
  EXPECT_EQ(pig::spec::CountCpuList("0-63"), 64);
  EXPECT_EQ(pig::spec::CountCpuList(""), 0);
  EXPECT_EQ(pig::spec::CountCpuList("3-1"), 0); // a backwards range counts nothing
  EXPECT_EQ(pig::spec::ParseCacheSize("266240K"), 266240ull << 10);
  EXPECT_EQ(pig::spec::ParseCacheSize("32M\n"), 32ull << 20);
  EXPECT_EQ(pig::spec::ParseCacheSize("1G"), 1ull << 30);
  EXPECT_EQ(pig::spec::ParseCacheSize("4096"), 4096u);
  EXPECT_EQ(pig::spec::ParseCacheSize("K"), 0u);
}

TEST(Machine, OneSpellingRoundTrips) {
  const MachineFingerprint m{"Intel(R) Xeon(R) Processor", "AVX3_DL", 2, 2, 272629760};
  EXPECT_EQ(pig::spec::FormatMachine(m), "Intel(R) Xeon(R) Processor|AVX3_DL|2|2|272629760");
  std::string err;
  auto back = pig::spec::ParseMachine(pig::spec::FormatMachine(m), &err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(*back, m);
  EXPECT_EQ(m.str(), "Intel(R) Xeon(R) Processor, AVX3_DL, 2 cores, 2 threads, L3 260 MiB");
  EXPECT_EQ(m.hardware_str(), "Intel(R) Xeon(R) Processor, 2 cores, L3 260 MiB");
  for (const char *bad : {"cpu|AVX2|2|2", "cpu|AVX2|two|2|0", "cpu|AVX2|2|-1|0", "cpu|AVX2|2|2|1e9",
                          "cpu|AVX2|2|2|0|extra"}) {
    EXPECT_FALSE(pig::spec::ParseMachine(bad, &err)) << bad;
    EXPECT_NE(err.find("cpu|target|cores|threads|l3_bytes"), std::string::npos) << err;
  }
}

TEST(Machine, SameHardwareIgnoresTargetAndThreads) {
  const MachineFingerprint a{"CPU A", "AVX3_DL", 16, 2, 1 << 20};
  MachineFingerprint b = a;
  b.target = "";
  b.threads = 0;
  EXPECT_TRUE(a.same_hardware(b));
  EXPECT_FALSE(a == b);
  for (auto change : {+[](MachineFingerprint &m) { m.cpu = "CPU B"; },
                      +[](MachineFingerprint &m) { m.cores = 8; },
                      +[](MachineFingerprint &m) { m.l3_bytes = 0; }}) {
    MachineFingerprint c = a;
    change(c);
    EXPECT_FALSE(a.same_hardware(c)) << c.str();
  }
}

TEST(Machine, DetectsThisMachineDeterministically) {
  if (!std::ifstream("/proc/cpuinfo"))
    GTEST_SKIP() << "/proc/cpuinfo unreadable";
  const MachineFingerprint f = pig::spec::DetectMachine("AVX2", 3);
  EXPECT_FALSE(f.cpu.empty());
  EXPECT_GE(f.cores, 1);
  EXPECT_EQ(f.target, "AVX2");
  EXPECT_EQ(f.threads, 3);
  EXPECT_EQ(f, pig::spec::DetectMachine("AVX2", 3));
  EXPECT_TRUE(pig::spec::DetectMachine().same_hardware(f)); // what pig-schedule compares
}

} // namespace
