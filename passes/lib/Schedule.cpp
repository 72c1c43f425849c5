//===- Schedule.cpp - attach the kernels' schedule ------------------------===//
//
// pig-schedule: every specialised function gets `pig.schedule = #pig.schedule<...>`, from an
// explicit schedule, else a tuning record for its kernel key and this machine, else the default
// heuristic. The knobs (names, ranges, defaults, messages) and the kernel key's spelling are
// pig::spec's (spec/include/pig/spec/schedule.h, kernel_key.h); the records are pig-tune's (the
// format, the machine fingerprint and the choice among records:
// spec/include/pig/spec/tuning_record.h).
//
//===----------------------------------------------------------------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"
#include "pig/Passes/Passes.h"
#include "pig/spec/kernel_key.h"
#include "pig/spec/machine.h"
#include "pig/spec/tuning_record.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace mlir::pig {
#define GEN_PASS_DEF_PIGSCHEDULE
#include "pig/Passes/Passes.h.inc"
} // namespace mlir::pig

using namespace mlir;
using namespace mlir::pig;
using ::pig::spec::Schedule;

namespace {
using Json = nlohmann::json;

/// The default schedule of a kernel when neither an explicit schedule nor a tuning record gives
/// one: by head dim d and GQA group size (query heads per kv-head). This is where measured
/// per-shape defaults go (issue 18's per-knob measurements, docs/PERFORMANCE.md); until a knob
/// has paid >= 1.1x for some shape on our machines, every shape gets the runtime's defaults
/// (kScheduleKnobs), which are the kernels' behaviour before schedules existed.
Schedule defaultSchedule(int64_t headDim, int64_t groupSize) {
  (void)headDim;
  (void)groupSize;
  return Schedule{};
}

/// "K=10 L=150 d=64 bf16" (or "... q8" for !pig.q8 keys and values): the function's kernel key
/// as records spell it (pig::spec::KernelKey::str; other element types as the dialect names them).
std::string keyString(KernelAttr kernel) {
  if (std::optional<::pig::spec::DType> dtype = kvDType(kernel.getDtype()))
    return ::pig::spec::KernelKey{
        {static_cast<int>(kernel.getK()), static_cast<int>(kernel.getL())},
        static_cast<int>(kernel.getD()),
        *dtype}
        .str();
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "K=" << kernel.getK() << " L=" << kernel.getL() << " d=" << kernel.getD() << " "
     << elementTypeName(kernel.getDtype());
  return s;
}

/// One of pig-tune's records (spec::TuningRecord, the fields pig-schedule reads) and its line.
struct Record {
  ::pig::spec::TuningRecord record;
  size_t line = 0;
};
/// Catches the parser's message (the build has no exceptions: nlohmann::json reports errors
/// through the SAX interface instead).
struct SyntaxCheck : nlohmann::json_sax<Json> {
  std::string error;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t &) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &ex) override {
    error = ex.what();
    return false;
  }
};

/// The fields of one line pig-schedule needs, into a spec::TuningRecord; "" or the problem,
/// worded as pig-tune's reader words it ("missing field 'kernel'", "time: field 'median_s' has
/// the wrong type (string)"). nlohmann reports type errors by aborting in this exception-free
/// build, so every field is checked before it is read.
std::string readRecord(const Json &o, ::pig::spec::TuningRecord &r) {
  namespace f = ::pig::spec::record_field;
  if (!o.is_object())
    return std::string("a record is a JSON object, not ") + o.type_name();
  std::string problem;
  auto field = [&](const Json &obj, const char *name, const char *where, auto isType,
                   const char *type) -> const Json * {
    if (!problem.empty())
      return nullptr;
    auto it = obj.find(name);
    if (it == obj.end())
      problem = std::string(where) + "missing field '" + name + "'";
    else if (!isType(*it))
      problem =
          std::string(where) + "field '" + name + "' must be " + type + ", not " + it->type_name();
    return problem.empty() ? &*it : nullptr;
  };
  auto isInt = [](const Json &v) { return v.is_number_integer(); };
  auto isString = [](const Json &v) { return v.is_string(); };
  auto isObject = [](const Json &v) { return v.is_object(); };
  auto isNumber = [](const Json &v) { return v.is_number(); };
  auto isBool = [](const Json &v) { return v.is_boolean(); };
  auto text = [&](const Json &obj, const char *name, const char *where, std::string &out) {
    if (const Json *v = field(obj, name, where, isString, "a string"))
      out = v->get<std::string>();
  };
  auto integer = [&](const Json &obj, const char *name, const char *where, auto &out) {
    if (const Json *v = field(obj, name, where, isInt, "an integer"))
      out = v->get<std::remove_reference_t<decltype(out)>>();
  };
  integer(o, f::kSchema, "", r.schema);
  if (problem.empty() && (r.schema < 1 || r.schema > ::pig::spec::kRecordSchema))
    return ::pig::spec::CheckRecord(r);
  std::string kind;
  text(o, f::kKind, "", kind);
  if (problem.empty()) {
    if (auto k = ::pig::spec::RecordKindFromName(kind))
      r.kind = *k;
    else
      problem = "field 'kind' must be \"quality\" or \"speed\", not \"" + kind + "\"";
  }
  text(o, f::kKernel, "", r.kernel);
  integer(o, f::kLayer, "", r.layer);
  if (const Json *v = field(o, f::kDense, "", isBool, "a boolean"))
    r.dense = v->get<bool>();
  text(o, f::kSchedule, "", r.schedule);
  text(o, f::kStatus, "", r.status);
  if (const Json *w = field(o, f::kWorkload, "", isObject, "an object")) {
    integer(*w, f::kContext, "workload: ", r.workload.context);
    integer(*w, f::kThreads, "workload: ", r.workload.threads);
  }
  if (problem.empty() && o.contains(f::kFingerprint)) {
    if (const Json *fp = field(o, f::kFingerprint, "", isObject, "an object")) {
      ::pig::spec::MachineFingerprint m;
      text(*fp, f::kCpu, "fingerprint: ", m.cpu);
      text(*fp, f::kTarget, "fingerprint: ", m.target);
      integer(*fp, f::kCores, "fingerprint: ", m.cores);
      integer(*fp, f::kThreads, "fingerprint: ", m.threads);
      integer(*fp, f::kL3Bytes, "fingerprint: ", m.l3_bytes);
      r.fingerprint = m;
    }
  }
  if (problem.empty() && o.contains(f::kTime)) {
    if (const Json *t = field(o, f::kTime, "", isObject, "an object")) {
      ::pig::spec::Timing timing;
      if (const Json *m = field(*t, f::kMedianS, "time: ", isNumber, "a number"))
        timing.median_s = m->get<double>();
      r.time = timing;
    }
  }
  if (problem.empty() && o.contains(f::kQuality)) {
    if (field(o, f::kQuality, "", isObject, "an object"))
      r.quality = ::pig::spec::Quality{}; // its values are not pig-schedule's
  }
  return problem.empty() ? ::pig::spec::CheckRecord(r) : problem;
}

/// Reads a file of pig-tune's records (JSON Lines). A line that is not a record (not JSON, a
/// field missing or mistyped, a newer schema: pig-tune's loader skips the same lines, e.g. the
/// truncated last line of an interrupted append) is a warning naming file:line, and skipped; an
/// unreadable file or an illegal schedule in a speed record fails with a message naming it.
FailureOr<std::vector<Record>> readRecords(StringRef path, std::string &error,
                                           std::vector<std::string> &warnings) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot read tuning records '" + path.str() + "': " + buffer.getError().message();
    return failure();
  }
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  std::vector<Record> out;
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string line = lines[n].trim().str();
    if (line.empty())
      continue;
    const std::string where = "tuning records '" + path.str() + "' line " + std::to_string(n + 1);
    SyntaxCheck check;
    if (!Json::sax_parse(line, &check)) {
      warnings.push_back(where + " is not a record (not JSON: " + check.error + "): skipped");
      continue;
    }
    Record record;
    record.line = n + 1;
    const std::string problem =
        readRecord(Json::parse(line, nullptr, /*allow_exceptions=*/false), record.record);
    if (!problem.empty()) {
      warnings.push_back(where + " is not a record (" + problem + "): skipped");
      continue;
    }
    if (!::pig::spec::KernelKey::parse(record.record.kernel))
      continue; // pig-tune's "point ..." and "non-attention" rows name no kernel set
    if (record.record.kind == ::pig::spec::RecordKind::speed) {
      std::string knobError;
      if (!Schedule::parse(record.record.schedule, &knobError)) {
        error = where + " (" + record.record.kernel + "): " + knobError;
        return failure();
      }
    }
    out.push_back(std::move(record));
  }
  return out;
}

/// Query heads per kv-head in a decomposed step: sampled softmaxes (fused or not) per bucket
/// index built; 1 when the function has no index (or the counts do not divide).
int64_t groupSize(func::FuncOp func) {
  int64_t indexes = 0, heads = 0;
  func.walk([&](Operation *op) {
    if (isa<BuildIndexOp>(op))
      ++indexes;
    else if (isa<SampledSoftmaxFusedOp, WeightedSoftmaxOp, SampledAttentionOp>(op))
      ++heads;
  });
  return indexes > 0 && heads % indexes == 0 && heads >= indexes ? heads / indexes : 1;
}

struct PigSchedule : mlir::pig::impl::PigScheduleBase<PigSchedule> {
  using PigScheduleBase::PigScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<Schedule> explicitSchedule;
    if (!schedule.empty()) {
      std::string error;
      explicitSchedule = Schedule::parse(schedule, &error);
      if (!explicitSchedule) {
        module.emitError() << "pig-schedule: schedule=\"" << schedule << "\": " << error;
        return signalPassFailure();
      }
    }
    std::vector<::pig::spec::TuningRecord> records;
    std::vector<size_t> lines; // of records[i] in the file
    if (!record.empty()) {
      std::string error;
      std::vector<std::string> warnings;
      auto read = readRecords(record, error, warnings);
      for (const std::string &w : warnings)
        mlir::emitWarning(module.getLoc()) << "pig-schedule: " << w;
      if (failed(read)) {
        module.emitError() << "pig-schedule: " << error;
        return signalPassFailure();
      }
      for (Record &r : *read) {
        records.push_back(std::move(r.record));
        lines.push_back(r.line);
      }
    }
    ::pig::spec::MachineFingerprint here;
    if (machine.empty()) {
      here = ::pig::spec::DetectMachine();
    } else {
      std::string error;
      auto parsed = ::pig::spec::ParseMachine(machine, &error);
      if (!parsed) {
        module.emitError() << "pig-schedule: machine=: " << error;
        return signalPassFailure();
      }
      here = *parsed;
    }
    const std::string hereName = here.hardware_str();

    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      bool usesPig = false;
      func.walk(
          [&](Operation *op) { usesPig |= op->getDialect() && isa<PigDialect>(op->getDialect()); });
      if (!usesPig)
        continue;
      auto kernel = func->getAttrOfType<KernelAttr>(kKernelAttrName);
      if (!kernel) {
        func.emitError() << "pig-schedule: function @" << func.getSymName()
                         << " has no pig.kernel: run --pig-specialize before --pig-schedule "
                            "(a schedule is chosen per kernel key)";
        return signalPassFailure();
      }
      const std::string key = keyString(kernel);
      const int64_t group = groupSize(func);
      Schedule chosen;
      std::string source;
      if (explicitSchedule) {
        chosen = *explicitSchedule;
        source = "the schedule option";
      } else {
        size_t among = 0;
        std::vector<std::string> otherMachines;
        const auto match =
            ::pig::spec::ChooseScheduleRecord(records, key, here, &among, &otherMachines);
        if (match) {
          const ::pig::spec::TuningRecord &r = records[*match];
          chosen = *Schedule::parse(r.schedule, nullptr); // checked when read
          source = "the record at line " + std::to_string(lines[*match]) + " of '" + record +
                   "' (the fastest of " + std::to_string(among) + " at context " +
                   std::to_string(r.workload.context) + ", " + std::to_string(r.workload.threads) +
                   " threads, on '" + r.fingerprint->str() + "')";
        } else {
          if (!otherMachines.empty())
            mlir::emitWarning(func.getLoc())
                << "pig-schedule: tuning records '" << record << "' hold " << key
                << " only for machine '" << llvm::join(otherMachines, "', '")
                << "', not for this machine '" << hereName << "': using the default heuristic";
          chosen = defaultSchedule(kernel.getD(), group);
          source = "the default heuristic (d=" + std::to_string(kernel.getD()) + ", group of " +
                   std::to_string(group) + ")";
        }
      }
      func->setAttr(kScheduleAttrName, getScheduleAttr(&getContext(), chosen));
      // On the location, not the op: the function's dump would follow every remark otherwise.
      mlir::emitRemark(func.getLoc()) << "pig-schedule: @" << func.getSymName() << " " << key
                                      << ": " << chosen.str() << " from " << source;
    }
  }
};
} // namespace
