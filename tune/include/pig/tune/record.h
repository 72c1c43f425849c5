// Tuning records (pig-tune, issue "pig-tune: operating points"): one JSON object per line, one
// line per measured configuration, never keyed on a candidate list, so records from different
// runs, candidate sets and machines can share one file.
//
// The format (fields, spelling, rules) is spec's: pig/spec/tuning_record.h, shared with
// pig-schedule, which reads the same files; this is its JSON reader and writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pig/spec/tuning_record.h"

namespace pig::tune {

using spec::kRecordSchema;
using Fingerprint = spec::MachineFingerprint;
using spec::Quality;
using spec::RecordKind;
using spec::Timing;
using spec::Workload;
using Record = spec::TuningRecord;

/// A line that is not a valid record: the message names the field and the problem.
struct RecordError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One line of JSON (no newline). Deterministic: the same record gives the same bytes.
std::string to_json_line(const Record &r);
/// Parses one line; throws RecordError on malformed JSON, a missing or mistyped field, an
/// unknown kind, a schema newer than this build's, or a record without what its kind needs.
Record parse_record(std::string_view line);

/// The records of a file, with the problems of the lines that are not records (their line
/// numbers and messages: a truncated last line from an interrupted append, a corrupt line).
/// Throws RecordError when the file cannot be read (a missing file is no records, not an error).
struct LoadedRecords {
  std::vector<Record> records;
  std::vector<std::string> problems;
};
LoadedRecords load_records(const std::string &path);

/// Appends one record as one line with one write(2) on a descriptor opened O_APPEND, then
/// fsync: concurrent appenders never interleave within a line, and an interruption leaves at most
/// a truncated last line, which load_records() reports and skips. A file whose last line lacks
/// its newline (an earlier interrupted append) gets one first. Throws RecordError on I/O errors.
void append_record(const std::string &path, const Record &r);

} // namespace pig::tune
