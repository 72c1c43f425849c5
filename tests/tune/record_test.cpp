#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "pig/tune/record.h"

namespace pig::tune {
namespace {

Record speed_record() {
  Record r;
  r.kind = RecordKind::speed;
  r.kernel = "K=10 L=150 d=64 bf16";
  r.t = 2;
  r.layer = 12;
  r.schedule = "gqa=per_head block=32 prefetch=8 dense_prefetch=64 tables_ahead=8 parts=0";
  r.workload = {32768, 3, 2};
  r.fingerprint = Fingerprint{"Intel(R) Xeon(R) Processor", "AVX3_DL", 2, 2, 272629760};
  r.time = Timing{0.0123, 0.0004, 9, "interleaved round-robin vs default"};
  r.pig_version = "ef8f2d7";
  r.timestamp = "2026-12-02T03:40:00Z";
  return r;
}

Record quality_record() {
  Record r;
  r.kind = RecordKind::quality;
  r.kernel = "K=8 L=75 d=64 bf16";
  r.layer = -1;
  r.workload = {8192, 3, 1};
  r.quality = Quality{"rel_l2", 0.1, 0.02, 0.2, 0.031, {1, 2}, "sha256:abc", "0123456789abcdef"};
  r.pig_version = "ef8f2d7";
  r.timestamp = "2026-12-02T03:41:00Z";
  return r;
}

std::string temp_path(const char *name) {
  return testing::TempDir() + "/pig_tune_" + std::to_string(::getpid()) + "_" + name;
}

TEST(Record, RoundTripIsExactAndDeterministic) {
  for (const Record &r : {speed_record(), quality_record()}) {
    const std::string line = to_json_line(r);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    const Record back = parse_record(line);
    EXPECT_EQ(back, r) << line;
    EXPECT_EQ(to_json_line(back), line);
  }
}

TEST(Record, FieldsAreCheckedWithMessages) {
  const std::string good = to_json_line(speed_record());
  auto expect_error = [](const std::string &line, const std::string &want) {
    try {
      (void)parse_record(line);
      ADD_FAILURE() << "accepted: " << line;
    } catch (const RecordError &e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  auto with = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  expect_error("", "not JSON");
  expect_error("[1,2]", "a record is a JSON object, not array");
  expect_error(with("\"schema\":1", "\"schema\":2"), "schema 2 is not one this build reads");
  expect_error(with("\"kind\":\"speed\"", "\"kind\":\"fast\""), "field 'kind' must be");
  expect_error(with("\"t\":2", "\"t\":\"2\""), "field 't' has the wrong type (string)");
  expect_error(with("\"layer\":12", "\"layer\":-2"), "field 'layer' must be >= -1");
  expect_error(with("\"kernel\":\"K=10 L=150 d=64 bf16\",", ""), "missing field 'kernel'");
  expect_error(with("\"median_s\":0.0123", "\"median_s\":null"),
               "time: field 'median_s' must be a number");
  expect_error(with("\"threads\":2}", "\"threads\":2"), "not JSON"); // unbalanced
  // A speed record that claims ok needs its time and fingerprint.
  Record r = speed_record();
  r.time.reset();
  expect_error(to_json_line(r), "a speed record with status ok needs 'time' and 'fingerprint'");
  r.status = "failed: timed out";
  EXPECT_EQ(parse_record(to_json_line(r)), r); // a failed measurement is still a record
}

TEST(Record, SpeedRecordsApplyOnTheirOwnFingerprintOnly) {
  const Record s = speed_record();
  Fingerprint here = *s.fingerprint;
  EXPECT_TRUE(s.usable_on(here));
  here.target = "AVX2";
  EXPECT_FALSE(s.usable_on(here));
  EXPECT_TRUE(quality_record().usable_on(here)); // quality does not depend on the machine
}

TEST(Record, AppendAndLoadSkipCorruptAndTruncatedLines) {
  const std::string path = temp_path("append.jsonl");
  std::remove(path.c_str());
  EXPECT_TRUE(load_records(path).records.empty()); // a missing file is no records
  append_record(path, speed_record());
  { // a corrupt line, then an interrupted append (no newline)
    std::ofstream out(path, std::ios::app);
    out << "{\"schema\": 1, \"kind\": \n";
    const std::string half = to_json_line(quality_record());
    out << half.substr(0, half.size() / 2);
  }
  LoadedRecords l = load_records(path);
  ASSERT_EQ(l.records.size(), 1u);
  EXPECT_EQ(l.records[0], speed_record());
  ASSERT_EQ(l.problems.size(), 2u);
  EXPECT_NE(l.problems[0].find(":2: not JSON"), std::string::npos) << l.problems[0];
  EXPECT_NE(l.problems[1].find(":3: truncated last line"), std::string::npos) << l.problems[1];
  // The next append ends the truncated line first: its record is intact.
  append_record(path, quality_record());
  l = load_records(path);
  ASSERT_EQ(l.records.size(), 2u);
  EXPECT_EQ(l.records[1], quality_record());
  EXPECT_EQ(l.problems.size(), 2u);
  std::remove(path.c_str());
}

TEST(Record, UnreadableOrUnwritablePathsAreErrors) {
  EXPECT_THROW(load_records("/proc/self/mem/none"), RecordError);
  EXPECT_THROW(append_record("/nonexistent-dir/records.jsonl", speed_record()), RecordError);
}

// Seeded fuzz: mutated and truncated records never crash the parser (also under ASan/UBSan);
// each either parses into a record that round-trips or is refused with a RecordError.
TEST(Record, FuzzMutatedLines) {
  const std::string seeds[] = {to_json_line(speed_record()), to_json_line(quality_record())};
  std::mt19937_64 rng(20261202);
  const char alphabet[] = "{}[]\":,0123456789.-eEtrufalsn \\x";
  std::size_t parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = seeds[rng() % 2];
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const std::size_t at = rng() % s.size();
      switch (rng() % 4) {
      case 0:
        s[at] = alphabet[rng() % (sizeof alphabet - 1)];
        break;
      case 1:
        s.erase(at, 1 + rng() % 8);
        break;
      case 2:
        s.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]);
        break;
      default:
        s.resize(at); // truncation
      }
    }
    try {
      const Record r = parse_record(s);
      EXPECT_EQ(parse_record(to_json_line(r)), r);
      ++parsed;
    } catch (const RecordError &) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 10000u);
  EXPECT_GT(parsed, 50u); // some mutations keep a valid record (a digit changed)
}

} // namespace
} // namespace pig::tune
