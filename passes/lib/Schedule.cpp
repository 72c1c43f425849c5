//===- Schedule.cpp - attach the kernels' schedule ------------------------===//
//
// pig-schedule: every specialised function gets `pig.schedule = #pig.schedule<...>`, from an
// explicit schedule, else a tuning record for its kernel key and this machine, else the default
// heuristic. The knobs (names, ranges, defaults, messages) and the kernel key's spelling are
// pig::spec's (spec/include/pig/spec/schedule.h, kernel_key.h); the record format is
// docs/SCHEDULES.md.
//
//===----------------------------------------------------------------------===//

#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"
#include "pig/Passes/Passes.h"
#include "pig/spec/kernel_key.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <nlohmann/json.hpp>
#include <sys/utsname.h>

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

/// Words separated by any whitespace, joined by one space ("K=10  L=150" -> "K=10 L=150").
std::string collapseSpaces(StringRef text) {
  SmallVector<StringRef> words;
  SplitString(text, words);
  return llvm::join(words, " ");
}

/// This machine, as tuning records name it: "<model name>; family <f> model <m>; <arch>" from
/// the first processor of /proc/cpuinfo and uname(2) (fields it lacks are left out). It depends
/// only on the hardware, never on the time, the load or the process.
std::string machineFingerprint() {
  std::string modelName, family, model;
  if (auto cpuinfo = llvm::MemoryBuffer::getFileAsStream("/proc/cpuinfo")) {
    SmallVector<StringRef> lines;
    (*cpuinfo)->getBuffer().split(lines, '\n');
    for (StringRef line : lines) {
      if (line.trim().empty() && !modelName.empty())
        break; // the end of the first processor
      auto [name, value] = line.split(':');
      name = name.trim();
      std::string *field = name == "model name"   ? &modelName
                           : name == "cpu family" ? &family
                           : name == "model"      ? &model
                                                  : nullptr;
      if (field && field->empty())
        *field = collapseSpaces(value);
    }
  }
  std::vector<std::string> parts;
  parts.push_back(modelName.empty() ? "unknown cpu" : modelName);
  if (!family.empty() && !model.empty())
    parts.push_back("family " + family + " model " + model);
  struct utsname names;
  if (uname(&names) == 0)
    parts.push_back(names.machine);
  return llvm::join(parts, "; ");
}

/// "K=10 L=150 d=64 bf16" (or "... q8" for !pig.q8 keys and values): the function's kernel key
/// as records spell it (pig::spec::KernelKey::str; other element types as the dialect names them).
std::string keyString(KernelAttr kernel) {
  if (std::optional<::pig::spec::DType> dtype = kvDType(kernel.getDtype()))
    return ::pig::spec::KernelKey{static_cast<int>(kernel.getK()), static_cast<int>(kernel.getL()),
                                  static_cast<int>(kernel.getD()), *dtype}
        .str();
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "K=" << kernel.getK() << " L=" << kernel.getL() << " d=" << kernel.getD() << " "
     << elementTypeName(kernel.getDtype());
  return s;
}

/// One tuning record (docs/SCHEDULES.md).
struct Record {
  std::string kernel;  ///< "K=10 L=150 d=64 bf16"
  std::string machine; ///< a machineFingerprint()
  Schedule schedule;
  size_t number = 0; ///< 1-based position in "records"
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

/// A record's "schedule": an object {"gqa": "union", "block": 32} or a string
/// "gqa=union block=32"; knobs left out take their defaults.
std::optional<Schedule> readSchedule(const Json &value, std::string &error) {
  std::string text;
  if (value.is_string()) {
    text = value.get<std::string>();
  } else if (value.is_object()) {
    for (const auto &[knob, knobValue] : value.items()) {
      text += " " + knob + "=";
      if (knobValue.is_string())
        text += knobValue.get<std::string>();
      else if (knobValue.is_number_integer())
        text += std::to_string(knobValue.get<int64_t>());
      else
        return error = "schedule knob '" + knob +
                       "' must be an integer (or per_head / union "
                       "for gqa), got " +
                       knobValue.dump(),
               std::nullopt;
    }
  } else {
    return error = "\"schedule\" must be an object of knobs or a string, got " + value.dump(),
           std::nullopt;
  }
  return Schedule::parse(text, &error);
}

/// Reads a tuning-record file; fails with a message naming the file (and the record).
FailureOr<std::vector<Record>> readRecords(StringRef path, std::string &error) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    error = "cannot read tuning records '" + path.str() + "': " + buffer.getError().message();
    return failure();
  }
  const std::string text = (*buffer)->getBuffer().str();
  SyntaxCheck check;
  if (!Json::sax_parse(text, &check)) {
    error = "tuning records '" + path.str() + "' are not valid JSON: " + check.error;
    return failure();
  }
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto fail = [&](const std::string &what) {
    error = "tuning records '" + path.str() + "': " + what + " (format: docs/SCHEDULES.md)";
    return failure();
  };
  if (!doc.is_object())
    return fail("the top level must be an object {\"version\": 1, \"records\": [...]}");
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() != 1)
    return fail("\"version\" must be 1");
  auto records = doc.find("records");
  if (records == doc.end() || !records->is_array())
    return fail("\"records\" must be an array");
  std::vector<Record> out;
  for (const Json &entry : *records) {
    Record record;
    record.number = out.size() + 1;
    const std::string where = "record " + std::to_string(record.number);
    if (!entry.is_object())
      return fail(where + " is not an object");
    for (auto [field, slot] : {std::pair{"kernel", &record.kernel}, {"machine", &record.machine}}) {
      auto it = entry.find(field);
      if (it == entry.end() || !it->is_string())
        return fail(where + " has no string \"" + field + "\"");
      *slot = collapseSpaces(it->get<std::string>());
    }
    if (std::string why; !::pig::spec::KernelKey::parse(record.kernel, &why))
      return fail(where + ": kernel " + why);
    auto schedule = entry.find("schedule");
    if (schedule == entry.end())
      return fail(where + " has no \"schedule\"");
    std::string knobError;
    std::optional<Schedule> parsed = readSchedule(*schedule, knobError);
    if (!parsed)
      return fail(where + " (" + record.kernel + "): " + knobError);
    record.schedule = *parsed;
    out.push_back(std::move(record)); // every other field (measurements) is ignored
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
    std::vector<Record> records;
    if (!record.empty()) {
      std::string error;
      auto read = readRecords(record, error);
      if (failed(read)) {
        module.emitError() << "pig-schedule: " << error;
        return signalPassFailure();
      }
      records = std::move(*read);
    }
    const std::string here = machine.empty() ? machineFingerprint() : collapseSpaces(machine);

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
        const Record *match = nullptr;
        std::vector<std::string> otherMachines;
        for (const Record &r : records) {
          if (r.kernel != key)
            continue;
          if (r.machine != here) {
            otherMachines.push_back("'" + r.machine + "'");
            continue;
          }
          if (match) {
            func.emitError() << "pig-schedule: tuning records '" << record << "' has records "
                             << match->number << " and " << r.number << " for " << key
                             << " on machine '" << here << "': keep one";
            return signalPassFailure();
          }
          match = &r;
        }
        if (match) {
          chosen = match->schedule;
          source = "record " + std::to_string(match->number) + " of '" + record + "' (machine '" +
                   here + "')";
        } else {
          if (!otherMachines.empty())
            mlir::emitWarning(func.getLoc())
                << "pig-schedule: tuning records '" << record << "' hold " << key
                << " only for machine " << llvm::join(otherMachines, ", ")
                << ", not for this machine '" << here << "': using the default heuristic";
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
