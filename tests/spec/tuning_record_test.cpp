// The one tuning-record format: its rules and pig-schedule's choice among pig-tune's records.
#include "pig/spec/tuning_record.h"

#include <gtest/gtest.h>

namespace {

using pig::spec::MachineFingerprint;
using pig::spec::RecordKind;
using pig::spec::TuningRecord;

const MachineFingerprint kHere{"CPU A", "AVX3_DL", 2, 2, 1 << 20};

TuningRecord Speed(const std::string &kernel, const std::string &schedule, double median_s,
                   std::size_t context = 16384, int threads = 2) {
  TuningRecord r;
  r.kind = RecordKind::speed;
  r.kernel = kernel;
  r.schedule = schedule;
  r.workload = {context, 3, threads};
  r.fingerprint = kHere;
  r.fingerprint->threads = threads;
  r.time = pig::spec::Timing{median_s, 0, 9, "interleaved"};
  return r;
}

TEST(TuningRecord, KindNames) {
  EXPECT_STREQ(pig::spec::RecordKindName(RecordKind::speed), "speed");
  EXPECT_EQ(pig::spec::RecordKindFromName("quality"), RecordKind::quality);
  EXPECT_FALSE(pig::spec::RecordKindFromName("fast"));
}

TEST(TuningRecord, Rules) {
  EXPECT_EQ(pig::spec::CheckRecord(Speed("K=10 L=150 d=64 bf16", "", 0.01)), "");
  TuningRecord r = Speed("K=10 L=150 d=64 bf16", "", 0.01);
  r.schema = 2;
  EXPECT_NE(pig::spec::CheckRecord(r).find("schema 2 is not one this build reads"),
            std::string::npos);
  r = Speed("", "", 0.01);
  EXPECT_EQ(pig::spec::CheckRecord(r), "field 'kernel' is empty");
  r = Speed("K=10 L=150 d=64 bf16", "", 0.01);
  r.layer = -2;
  EXPECT_NE(pig::spec::CheckRecord(r).find("'layer' must be >= -1"), std::string::npos);
  r.layer = -1;
  r.fingerprint.reset();
  EXPECT_NE(pig::spec::CheckRecord(r).find("needs 'time' and 'fingerprint'"), std::string::npos);
  r.status = "failed: timed out"; // a failed measurement needs neither
  EXPECT_EQ(pig::spec::CheckRecord(r), "");
  TuningRecord q;
  q.kernel = "K=10 L=150 d=64 bf16";
  EXPECT_NE(pig::spec::CheckRecord(q).find("needs 'quality'"), std::string::npos);
  EXPECT_TRUE(q.usable_on(kHere)); // quality does not depend on the machine (once it has it)
  MachineFingerprint other = kHere;
  other.threads = 4;
  EXPECT_TRUE(Speed("k", "", 1).usable_on(kHere));
  EXPECT_FALSE(Speed("k", "", 1).usable_on(other)); // pig-tune select: the whole fingerprint
}

TEST(TuningRecord, ChoiceIsTheFastestAtTheLargestWorkloadOnThisHardware) {
  const std::string key = "K=10 L=150 d=64 bf16";
  std::vector<TuningRecord> rs;
  rs.push_back(Speed(key, "", 0.020));                         // 0: default at 16k
  rs.push_back(Speed(key, "gqa=union block=32", 0.018));       // 1: faster at 16k
  rs.push_back(Speed(key, "block=16", 0.001, 4096));           // 2: fastest, but a smaller context
  rs.push_back(Speed("K=8 L=75 d=64 bf16", "parts=2", 0.001)); // 3: another kernel
  TuningRecord failed = Speed(key, "prefetch=0", 0.0001);
  failed.status = "failed: dropped (slower than 1.25x the best)";
  rs.push_back(failed); // 4: not ok
  TuningRecord layer = Speed(key, "prefetch=0", 0.0001);
  layer.layer = 3;
  rs.push_back(layer); // 5: one layer's time
  TuningRecord dense = Speed(key, "prefetch=0", 0.0001);
  dense.dense = true;
  rs.push_back(dense); // 6: dense attention
  TuningRecord quality;
  quality.kernel = key;
  quality.quality = pig::spec::Quality{};
  rs.push_back(quality); // 7: not a speed record
  MachineFingerprint elsewhere = kHere;
  elsewhere.cpu = "CPU B";
  TuningRecord foreign = Speed(key, "prefetch=0", 0.0001);
  foreign.fingerprint = elsewhere;
  rs.push_back(foreign); // 8: other hardware
  rs.push_back(foreign); // 9: the same other hardware, listed once
  // Built here: no target, no threads; the records' target and threads do not matter.
  const MachineFingerprint build{"CPU A", "", 2, 0, 1 << 20};
  std::size_t among = 0;
  std::vector<std::string> others;
  EXPECT_EQ(pig::spec::ChooseScheduleRecord(rs, key, build, &among, &others), 1u);
  EXPECT_EQ(among, 2u);
  EXPECT_EQ(others, (std::vector<std::string>{"CPU B, 2 cores, L3 1 MiB"}));
  // More threads at the same context is the larger workload.
  rs.push_back(Speed(key, "parts=4", 0.030, 16384, 4)); // 10
  EXPECT_EQ(pig::spec::ChooseScheduleRecord(rs, key, build, &among), 10u);
  EXPECT_EQ(among, 1u);
  // A tie goes to the earlier record.
  rs.push_back(Speed(key, "parts=3", 0.030, 16384, 4)); // 11
  EXPECT_EQ(pig::spec::ChooseScheduleRecord(rs, key, build), 10u);
  // On CPU B its own record is the choice; on a third machine there is none, both listed.
  EXPECT_EQ(pig::spec::ChooseScheduleRecord(rs, key, elsewhere), 8u);
  MachineFingerprint third = kHere;
  third.cpu = "CPU C";
  others.clear();
  EXPECT_FALSE(pig::spec::ChooseScheduleRecord(rs, key, third, &among, &others));
  EXPECT_EQ(others.size(), 2u);
  EXPECT_FALSE(pig::spec::ChooseScheduleRecord(rs, "K=9 L=120 d=64 bf16", build));
}

} // namespace
