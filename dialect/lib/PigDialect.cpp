//===- PigDialect.cpp - the pig dialect, attributes and types -------------===//

#include "pig/Dialect/PigDialect.h"
#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include "pig/spec/kv_type.h"
#include "pig/spec/transform_spec.h"

#include <exception>
#include <string_view>

using namespace mlir;
using namespace mlir::pig;

#include "pig/Dialect/PigDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "pig/Dialect/PigAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "pig/Dialect/PigTypes.cpp.inc"

void PigDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "pig/Dialect/PigOps.cpp.inc"
      >();
}

void PigDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "pig/Dialect/PigAttrs.cpp.inc"
      >();
}

void PigDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "pig/Dialect/PigTypes.cpp.inc"
      >();
}

bool mlir::pig::isSupportedElementType(Type type) {
  return type.isF32() || type.isBF16() || type.isF16();
}

bool mlir::pig::isQ8(Type type) { return isa<Q8Type>(type); }

bool mlir::pig::isKvElementType(Type type) { return isSupportedElementType(type) || isQ8(type); }

std::optional<::pig::spec::DType> mlir::pig::kvDType(Type type) {
  using ::pig::spec::DType;
  if (type.isF32())
    return DType::f32;
  if (type.isBF16())
    return DType::bf16;
  if (isQ8(type))
    return DType::q8;
  return std::nullopt;
}

std::string mlir::pig::elementTypeName(Type type) {
  if (std::optional<::pig::spec::DType> t = kvDType(type))
    return ::pig::spec::name(*t);
  if (type.isF16())
    return "f16";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

Type mlir::pig::parseElementTypeName(MLIRContext *context, StringRef name) {
  if (name == "f16")
    return Float16Type::get(context);
  using ::pig::spec::DType;
  const std::optional<DType> t =
      ::pig::spec::parse_dtype(std::string_view(name.data(), name.size()));
  if (t == DType::f32)
    return Float32Type::get(context);
  if (t == DType::bf16)
    return BFloat16Type::get(context);
  if (t == DType::q8)
    return Q8Type::get(context);
  return {};
}

LogicalResult PigDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() == kDeviceAttrName) {
    if (!isa<DeviceAttr>(attr.getValue()))
      return op->emitError() << "'" << kDeviceAttrName << "' must be a #pig.device attribute";
    return success();
  }
  if (attr.getName() == kKernelAttrName) {
    if (!isa<KernelAttr>(attr.getValue()))
      return op->emitError() << "'" << kKernelAttrName << "' must be a #pig.kernel attribute";
    return success();
  }
  if (attr.getName() == kScheduleAttrName) {
    if (!isa<ScheduleAttr>(attr.getValue()))
      return op->emitError() << "'" << kScheduleAttrName << "' must be a #pig.schedule attribute";
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kScheduleAttrName
                             << "' belongs on a function (the schedule of its kernels)";
    return success();
  }
  return op->emitError() << "unknown pig attribute '" << attr.getName().getValue() << "'";
}

//===----------------------------------------------------------------------===//
// Shared range checks (attributes and types report the same messages)
//===----------------------------------------------------------------------===//

static LogicalResult verifyBitsAndTables(function_ref<InFlightDiagnostic()> emitError, int64_t bits,
                                         int64_t tables) {
  if (!ShapedType::isDynamic(bits) && (bits < kMinBits || bits > kMaxBits))
    return emitError() << "K = " << bits << " is outside [" << kMinBits << ", " << kMaxBits
                       << "]: codes are uint16, one 2^K-bucket table per table";
  if (!ShapedType::isDynamic(tables) && (tables < kMinTables || tables > kMaxTables))
    return emitError() << "L = " << tables << " is outside [" << kMinTables << ", " << kMaxTables
                       << "]";
  return success();
}

static ParseResult parseMaybeDynamic(AsmParser &parser, int64_t &value) {
  if (succeeded(parser.parseOptionalQuestion())) {
    value = ShapedType::kDynamic;
    return success();
  }
  return parser.parseInteger(value);
}

static void printMaybeDynamic(AsmPrinter &printer, int64_t value) {
  if (ShapedType::isDynamic(value))
    printer << "?";
  else
    printer << value;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

bool LshAttr::isStatic() const {
  return !ShapedType::isDynamic(getK()) && !ShapedType::isDynamic(getL());
}

namespace {
/// TransformSpec::parse, its exception turned into a message.
FailureOr<::pig::spec::TransformSpec> parseTransform(StringRef text, std::string &error) {
  try {
    return ::pig::spec::TransformSpec::parse(std::string_view(text.data(), text.size()));
  } catch (const std::exception &e) {
    error = e.what();
    return failure();
  }
}
} // namespace

std::string LshAttr::canonicalTransform(StringRef spec) {
  std::string error;
  FailureOr<::pig::spec::TransformSpec> parsed = parseTransform(spec, error);
  return succeeded(parsed) ? parsed->str() : spec.str();
}

std::string LshAttr::checkTransform(StringRef transform, int64_t d) {
  std::string error;
  FailureOr<::pig::spec::TransformSpec> parsed = parseTransform(transform, error);
  if (failed(parsed))
    return error;
  if (d <= 0 || ShapedType::isDynamic(d))
    return {};
  try {
    parsed->validate(static_cast<std::size_t>(d));
  } catch (const std::exception &e) {
    return e.what();
  }
  return {};
}

LogicalResult LshAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t k, int64_t l,
                              int64_t t, uint64_t seed, StringRef transform) {
  if (failed(verifyBitsAndTables(emitError, k, l)))
    return failure();
  if (t < 1)
    return emitError() << "collision threshold t = " << t << " must be at least 1";
  if (!ShapedType::isDynamic(l) && l < t)
    return emitError() << "L = " << l << " is smaller than the collision threshold t = " << t
                       << ": no token could ever be sampled";
  std::string error;
  FailureOr<::pig::spec::TransformSpec> parsed = parseTransform(transform, error);
  if (failed(parsed))
    return emitError() << error; // "hash transform '<spec>': why (accepted: ...)"
  // The builders canonicalise; only a hand-made storage key could differ.
  if (std::string canonical = parsed->str(); canonical != transform)
    return emitError() << "hash transform \"" << transform << "\" is not in canonical form \""
                       << canonical << "\"";
  return success();
}

/// `<k = K, l = L, t = T, seed = S>`, optionally `, transform = "spec"` before the `>`.
Attribute LshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  int64_t k = 0, l = 0, t = 0;
  uint64_t seed = 0;
  std::string transform(kPlainTransform);
  if (parser.parseLess() || parser.parseKeyword("k") || parser.parseEqual() ||
      parseMaybeDynamic(parser, k) || parser.parseComma() || parser.parseKeyword("l") ||
      parser.parseEqual() || parseMaybeDynamic(parser, l) || parser.parseComma() ||
      parser.parseKeyword("t") || parser.parseEqual() || parser.parseInteger(t) ||
      parser.parseComma() || parser.parseKeyword("seed") || parser.parseEqual() ||
      parser.parseInteger(seed))
    return {};
  if (succeeded(parser.parseOptionalComma()) &&
      (parser.parseKeyword("transform") || parser.parseEqual() || parser.parseString(&transform)))
    return {};
  if (parser.parseGreater())
    return {};
  return LshAttr::getChecked([&] { return parser.emitError(loc); }, parser.getContext(), k, l, t,
                             seed, StringRef(transform));
}

void LshAttr::print(AsmPrinter &printer) const {
  printer << "<k = ";
  printMaybeDynamic(printer, getK());
  printer << ", l = ";
  printMaybeDynamic(printer, getL());
  printer << ", t = " << getT() << ", seed = " << getSeed();
  if (!isPlain()) {
    printer << ", transform = ";
    printer.printString(getTransform());
  }
  printer << ">";
}

LogicalResult StaticTokensAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t sink,
                                       int64_t local) {
  if (sink < 0 || local < 0)
    return emitError() << "static token counts must be non-negative (sink = " << sink
                       << ", local = " << local << ")";
  return success();
}

LogicalResult DeviceAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef kind) {
  if (kind != "cpu" && kind != "gpu")
    return emitError() << "unknown device '" << kind << "' (expected cpu or gpu)";
  return success();
}

Attribute DeviceAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  std::string kind;
  if (parser.parseLess() || parser.parseKeywordOrString(&kind) || parser.parseGreater())
    return {};
  return DeviceAttr::getChecked([&] { return parser.emitError(loc); }, parser.getContext(), kind);
}

void DeviceAttr::print(AsmPrinter &printer) const { printer << "<" << getKind() << ">"; }

// The schedule's knobs come from spec/include/pig/spec/schedule.h: names, legal values, defaults
// and the verifier's wording (Schedule::check_knob) are pig::spec's.
namespace {
using ::pig::spec::kScheduleKnobs;

/// "gqa, block, prefetch, dense_prefetch, tables_ahead, parts".
std::string knobNames() {
  std::string names;
  for (const auto &knob : kScheduleKnobs)
    names += (names.empty() ? "" : ", ") + std::string(knob.name);
  return names;
}
} // namespace

ScheduleAttr mlir::pig::getScheduleAttr(MLIRContext *context,
                                        const ::pig::spec::Schedule &schedule) {
  SmallVector<int64_t> values;
  for (size_t i = 0; i < kScheduleKnobs.size(); ++i)
    values.push_back(schedule.get(i));
  return ScheduleAttr::get(context, values);
}

::pig::spec::Schedule mlir::pig::toSchedule(ScheduleAttr attr) {
  ::pig::spec::Schedule schedule;
  for (auto [i, value] : llvm::enumerate(attr.getValues()))
    if (i < kScheduleKnobs.size())
      schedule.set(i, static_cast<int>(value));
  return schedule;
}

LogicalResult ScheduleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<int64_t> values) {
  if (values.size() != kScheduleKnobs.size())
    return emitError() << "a schedule has " << kScheduleKnobs.size() << " knobs (" << knobNames()
                       << "), got " << values.size() << " values";
  for (auto [i, value] : llvm::enumerate(values)) {
    const auto &knob = kScheduleKnobs[i];
    // check_knob takes an int: a value beyond int is illegal for every knob, same wording.
    std::string error = value < knob.min || value > knob.max
                            ? "schedule knob '" + std::string(knob.name) +
                                  "' = " + std::to_string(value) + " is illegal (" + knob.help + ")"
                            : ::pig::spec::Schedule::check_knob(i, static_cast<int>(value));
    if (!error.empty())
      return emitError() << error;
  }
  return success();
}

/// `<` (knob `=` value) separated by `,` `>`, any subset in any order; `<>` is the default.
Attribute ScheduleAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> values;
  for (const auto &knob : kScheduleKnobs)
    values.push_back(knob.def);
  SmallVector<bool> seen(kScheduleKnobs.size(), false);
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    do {
      SMLoc knobLoc = parser.getCurrentLocation();
      std::string name;
      if (parser.parseKeywordOrString(&name))
        return {};
      size_t i = 0;
      while (i < kScheduleKnobs.size() && name != kScheduleKnobs[i].name)
        ++i;
      if (i == kScheduleKnobs.size())
        return parser.emitError(knobLoc)
                   << "unknown schedule knob '" << name << "' (" << knobNames() << ")",
               Attribute();
      if (seen[i])
        return parser.emitError(knobLoc) << "schedule knob '" << name << "' is given twice",
               Attribute();
      seen[i] = true;
      if (parser.parseEqual())
        return {};
      SMLoc valueLoc = parser.getCurrentLocation();
      // gqa is written per_head or union (the integers 0 and 1 are read too).
      StringRef word;
      if (i == 0 && succeeded(parser.parseOptionalKeyword(&word))) {
        if (word != "per_head" && word != "union")
          return parser.emitError(valueLoc)
                     << "schedule knob 'gqa' expects per_head or union, got '" << word << "'",
                 Attribute();
        values[i] = word == "union" ? 1 : 0;
      } else if (parser.parseInteger(values[i])) {
        return {};
      }
    } while (succeeded(parser.parseOptionalComma()));
    if (parser.parseGreater())
      return {};
  }
  return ScheduleAttr::getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                                  values);
}

void ScheduleAttr::print(AsmPrinter &printer) const {
  printer << "<";
  for (auto [i, value] : llvm::enumerate(getValues())) {
    if (i)
      printer << ", ";
    printer << (i < kScheduleKnobs.size() ? kScheduleKnobs[i].name : "?") << " = ";
    if (i == 0 && (value == 0 || value == 1))
      printer << ::pig::spec::Schedule::gqa_name(::pig::spec::GqaStrategy(value));
    else
      printer << value;
  }
  printer << ">";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

static void printDims(AsmPrinter &printer, ArrayRef<int64_t> dims) {
  printer << "<";
  llvm::interleave(
      dims, printer, [&](int64_t d) { printMaybeDynamic(printer, d); }, "x");
  printer << ">";
}

static ParseResult parseDims(AsmParser &parser, SmallVectorImpl<int64_t> &dims, size_t count) {
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseDimensionList(dims, /*allowDynamic=*/true, /*withTrailingX=*/false) ||
      parser.parseGreater())
    return failure();
  if (dims.size() != count)
    return parser.emitError(loc) << "expected " << count << " dimensions";
  return success();
}

LogicalResult CodesType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t rows,
                                int64_t tables, int64_t bits) {
  if (!ShapedType::isDynamic(rows) && rows < 0)
    return emitError() << "negative row count " << rows;
  return verifyBitsAndTables(emitError, bits, tables);
}

Type CodesType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t, 3> dims;
  if (failed(parseDims(parser, dims, 3)))
    return {};
  return CodesType::getChecked([&] { return parser.emitError(loc); }, parser.getContext(), dims[0],
                               dims[1], dims[2]);
}

void CodesType::print(AsmPrinter &printer) const {
  printDims(printer, {getRows(), getTables(), getBits()});
}

LogicalResult BucketIndexType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t tables,
                                      int64_t bits) {
  return verifyBitsAndTables(emitError, bits, tables);
}

Type BucketIndexType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t, 2> dims;
  if (failed(parseDims(parser, dims, 2)))
    return {};
  return BucketIndexType::getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                                     dims[0], dims[1]);
}

void BucketIndexType::print(AsmPrinter &printer) const {
  printDims(printer, {getTables(), getBits()});
}
