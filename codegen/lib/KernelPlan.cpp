//===- KernelPlan.cpp - read the kernel configuration of pig IR ---------===//

#include "pig/Codegen/Codegen.h"
#include "pig/Dialect/PigOps.h"
#include "pig/Dialect/PigSchedule.h"
#include "pig/spec/lsh_params.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>

using namespace mlir;
using namespace mlir::pig;

::pig::spec::KernelKey KernelPlan::key() const {
  return {{static_cast<int>(k), static_cast<int>(l)},
          static_cast<int>(d),
          ::pig::spec::parse_dtype(dtype).value_or(::pig::spec::DType::bf16),
          schedule};
}

std::string KernelPlan::keySymbol() const { return key().symbol(); }

std::string KernelPlan::symbol() const {
  std::string s = keySymbol();
  s.append("_").append(schedule.symbol());
  return s;
}

std::string KernelPlan::str() const { return key().str(); }

std::string KernelPlan::strWithSchedule() const { return key().str_with_schedule(); }

namespace {
bool isPigOp(Operation *op) { return op->getDialect() && isa<PigDialect>(op->getDialect()); }

/// Why `op` cannot be translated at all (empty when it can): ops the pipeline should have
/// removed before translation.
std::string untranslatable(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case<SampledAttentionOp>([](auto) {
        return "is a composite with no kernel: run --pig-decompose before pig-translate";
      })
      .Case<CollisionProbOp, WeightedSoftmaxOp>([](auto) {
        return "has no kernel of its own (it is served fused with its partner): run --pig-fuse "
               "before pig-translate";
      })
      .Case<CenterOp, EncodeOp, BuildIndexOp, QueryOp, SampledSoftmaxFusedOp, DenseAttentionOp,
            MergeOp, TransferOp>([](auto) { return std::string(); })
      .Default([](Operation *) { return "is not supported by pig-translate"; });
}

struct Checker {
  KernelPlan &plan;
  /// The first op of the module carrying a #pig.lsh: it fixed plan.transform.
  Operation *&firstLsh;
  bool ok = true;

  InFlightDiagnostic fail(Operation *op) {
    ok = false;
    return op->emitError();
  }

  void checkLsh(Operation *op, LshAttr lsh) {
    if (!lsh.isStatic()) {
      fail(op) << "'" << op->getName() << "' has unspecialised " << lsh
               << ": run --pig-specialize before pig-translate";
      return;
    }
    if (lsh.getK() != plan.k || lsh.getL() != plan.l)
      fail(op) << "'" << op->getName() << "' uses " << lsh << " but the function's kernel is "
               << plan.str();
    checkTransform(op, lsh);
  }

  /// Keys and queries of one step are hashed in one space: every #pig.lsh of the module names
  /// the same transform (the first one fixes the plan's).
  void checkTransform(Operation *op, LshAttr lsh) {
    if (!firstLsh) {
      firstLsh = op;
      plan.transform = lsh.getTransform().str();
      return;
    }
    if (lsh.getTransform() == plan.transform)
      return;
    auto function = firstLsh->getParentOfType<func::FuncOp>();
    InFlightDiagnostic diag = fail(op);
    diag << "'" << op->getName() << "' hashes with transform \"" << lsh.getTransform() << "\" but '"
         << firstLsh->getName() << "'"
         << (function ? " in @" + function.getSymName().str() : std::string()) << " hashes with \""
         << plan.transform
         << "\": one hash transform per module (keys and queries of a step are hashed in one "
            "space)";
    diag.attachNote(firstLsh->getLoc())
        << "the transform \"" << plan.transform << "\" is fixed here";
  }

  void checkType(Operation *op, Type type) {
    if (auto codes = dyn_cast<CodesType>(type)) {
      if (ShapedType::isDynamic(codes.getTables()) || ShapedType::isDynamic(codes.getBits()))
        fail(op) << "'" << op->getName() << "' has unspecialised codes type " << type
                 << ": run --pig-specialize before pig-translate";
      else if (codes.getTables() != plan.l || codes.getBits() != plan.k)
        fail(op) << "'" << op->getName() << "' has codes type " << type
                 << " but the function's kernel is " << plan.str();
    } else if (auto index = dyn_cast<BucketIndexType>(type)) {
      if (ShapedType::isDynamic(index.getTables()) || ShapedType::isDynamic(index.getBits()))
        fail(op) << "'" << op->getName() << "' has unspecialised index type " << type
                 << ": run --pig-specialize before pig-translate";
      else if (index.getTables() != plan.l || index.getBits() != plan.k)
        fail(op) << "'" << op->getName() << "' has index type " << type
                 << " but the function's kernel is " << plan.str();
    } else if (auto tensor = dyn_cast<RankedTensorType>(type)) {
      if (tensor.getRank() < 2 ||
          !(isa<FloatType>(tensor.getElementType()) || isQ8(tensor.getElementType())))
        return;
      if (ShapedType::isDynamic(tensor.getShape().back()))
        fail(op) << "'" << op->getName() << "' has a dynamic head dim in " << type
                 << ": run --pig-specialize before pig-translate";
      else if (tensor.getShape().back() != plan.d)
        fail(op) << "'" << op->getName() << "' has head dim " << tensor.getShape().back()
                 << " but the function's kernel is " << plan.str();
    }
  }

  void check(Operation *op) {
    if (std::string why = untranslatable(op); !why.empty()) {
      fail(op) << "'" << op->getName() << "' " << why;
      return;
    }
    for (NamedAttribute attr : op->getAttrs())
      if (auto lsh = dyn_cast<LshAttr>(attr.getValue()))
        checkLsh(op, lsh);
    for (Type type : op->getOperandTypes())
      checkType(op, type);
    for (Type type : op->getResultTypes())
      checkType(op, type);
  }
};

/// All uses of `codes` are pig.query ops, directly or through transfers (a query encode).
bool onlyQueried(Value codes) {
  return !codes.use_empty() && llvm::all_of(codes.getUsers(), [](Operation *user) {
    if (auto transfer = dyn_cast<TransferOp>(user))
      return onlyQueried(transfer.getOutput());
    return isa<QueryOp>(user);
  });
}

/// What pig-fuse decided in `func` (see KernelPlan).
void readFusion(func::FuncOp func, KernelPlan &plan) {
  func.walk([&](Operation *op) {
    if (auto encode = dyn_cast<EncodeOp>(op); encode && onlyQueried(encode.getCodes())) {
      ++plan.queryEncodes;
      int64_t rows = encode.getCodes().getType().getRows();
      if (!ShapedType::isDynamic(rows))
        plan.queryHeadsPerEncode = std::max(plan.queryHeadsPerEncode, rows);
    } else if (isa<QueryOp>(op)) {
      ++plan.queries;
    } else if (isa<SampledSoftmaxFusedOp>(op)) {
      ++plan.fusedSoftmaxes;
    }
  });
}
} // namespace

FailureOr<KernelPlan> mlir::pig::planKernels(ModuleOp module) {
  std::optional<KernelPlan> plan;
  Operation *firstLsh = nullptr;
  bool ok = true;
  for (auto func : module.getOps<func::FuncOp>()) {
    bool usesPig = false;
    func.walk([&](Operation *op) { usesPig |= isPigOp(op); });
    if (!usesPig)
      continue;
    auto kernel = func->getAttrOfType<KernelAttr>(kKernelAttrName);
    if (!kernel) {
      func.emitError() << "function @" << func.getSymName()
                       << " has no pig.kernel attribute: run --pig-specialize before "
                          "pig-translate";
      ok = false;
      continue;
    }
    KernelPlan here;
    here.k = kernel.getK();
    here.l = kernel.getL();
    here.d = kernel.getD();
    here.dtype = elementTypeName(kernel.getDtype());
    // No pig.schedule (pig-schedule not run): the default schedule, as the runtime's
    // unscheduled kernels run.
    if (auto schedule = func->getAttrOfType<ScheduleAttr>(kScheduleAttrName)) {
      here.schedule = toSchedule(schedule);
      here.scheduled = true;
    }
    // What the kernel templates serve: pig::spec::KernelKey::validate (K and L limits, head
    // dims the element type supports) for one of pig/spec/kv_type.h's element types.
    const std::optional<::pig::spec::DType> kvType = kvDType(kernel.getDtype());
    const bool inRange = [&] {
      for (int64_t v : {here.k, here.l, here.d})
        if (v < INT32_MIN || v > INT32_MAX)
          return false;
      return true;
    }();
    if (!kvType || !inRange ||
        !::pig::spec::KernelKey{
            {static_cast<int>(here.k), static_cast<int>(here.l)}, static_cast<int>(here.d), *kvType}
             .validate()
             .empty()) {
      func.emitError() << "function @" << func.getSymName() << " has kernel " << kernel
                       << " that no kernel template serves (K in [1, " << ::pig::spec::kMaxK
                       << "], L in [1, " << ::pig::spec::kMaxL << "], even d, "
                       << ::pig::spec::dtype_names(", ", " or ") << "; q8 needs d a multiple of "
                       << ::pig::spec::kQ8Block << ")";
      ok = false;
      continue;
    }
    if (plan && (plan->k != here.k || plan->l != here.l || plan->d != here.d ||
                 plan->dtype != here.dtype)) {
      func.emitError() << "function @" << func.getSymName() << " has kernel " << here.str()
                       << " but @" << plan->functions.front() << " has " << plan->str()
                       << ": one kernel configuration per module (one file per configuration)";
      ok = false;
      continue;
    }
    if (plan && plan->schedule != here.schedule) {
      func.emitError() << "function @" << func.getSymName() << " has schedule "
                       << here.schedule.str() << " but @" << plan->functions.front() << " has "
                       << plan->schedule.str()
                       << ": one schedule per module (one file per configuration and schedule)";
      ok = false;
      continue;
    }
    if (!plan)
      plan = here;
    plan->scheduled |= here.scheduled;
    readFusion(func, *plan);
    plan->functions.push_back(func.getSymName().str());

    Checker checker{*plan, firstLsh};
    func.walk([&](Operation *op) {
      if (!isPigOp(op))
        return;
      checker.check(op);
      if (isa<TransferOp>(op))
        return;
      auto device = op->getAttrOfType<DeviceAttr>(kDeviceAttrName);
      if (!device) {
        checker.fail(op) << "'" << op->getName()
                         << "' is not placed on a device: run --pig-partition before "
                            "pig-translate";
        return;
      }
      std::string name = op->getName().getStringRef().str();
      ++(device.isGpu() ? plan->gpuOps : plan->cpuOps)[name];
    });
    ok &= checker.ok;
  }
  if (!ok)
    return failure();
  if (!plan)
    return module.emitError() << "no function uses pig ops: nothing to translate", failure();
  return *plan;
}
