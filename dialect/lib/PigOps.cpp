//===- PigOps.cpp - pig op verifiers, folders and canonicalizations -------===//

#include "pig/Dialect/PigOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::pig;

//===----------------------------------------------------------------------===//
// Verifier helpers
//===----------------------------------------------------------------------===//

namespace {
bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string dimString(int64_t d) { return ShapedType::isDynamic(d) ? "?" : std::to_string(d); }

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// What an operand may hold: queries are floating point, keys and values may also be !pig.q8.
enum class Role { Query, KeysOrValues };

/// `value` must be a rank-`rank` tensor of f32, bf16 or f16 (or, for keys and values, !pig.q8
/// with a head dim that is a multiple of 32).
LogicalResult checkOperand(Operation *op, StringRef name, Value value, int64_t rank, Role role) {
  RankedTensorType type = tensorType(value);
  if (type.getRank() != rank)
    return op->emitOpError() << name << " must have rank " << rank << ", got " << type;
  Type element = type.getElementType();
  if (role == Role::Query && !isSupportedElementType(element))
    return op->emitOpError() << name << " has unsupported element type " << element
                             << " (supported: f32, bf16, f16"
                             << (isQ8(element) ? "; !pig.q8 is for keys and values only" : "")
                             << ")";
  if (role == Role::KeysOrValues && !isKvElementType(element))
    return op->emitOpError() << name << " has unsupported element type " << element
                             << " (supported: f32, bf16, f16, !pig.q8)";
  int64_t d = type.getShape().back();
  if (isQ8(element) && !ShapedType::isDynamic(d) && d % kQ8BlockElements != 0)
    return op->emitOpError() << name << " is " << element << ": its head dim must be a multiple of "
                             << kQ8BlockElements << " (whole q8 blocks), got " << type;
  return success();
}

/// Query (`qRank`, last dim d), keys and values (`kvRank`, last dim d, same token count):
/// ranks, element types and head dims. Keys and values share one element type; the query has
/// it too, or is floating point when keys and values are !pig.q8. Returns d (possibly dynamic).
FailureOr<int64_t> checkQKV(Operation *op, Value q, Value k, Value v, int64_t qRank,
                            int64_t kvRank) {
  if (failed(checkOperand(op, "query", q, qRank, Role::Query)) ||
      failed(checkOperand(op, "keys", k, kvRank, Role::KeysOrValues)) ||
      failed(checkOperand(op, "values", v, kvRank, Role::KeysOrValues)))
    return failure();
  RankedTensorType qt = tensorType(q), kt = tensorType(k), vt = tensorType(v);
  if (vt.getElementType() != kt.getElementType() ||
      (!isQ8(kt.getElementType()) && kt.getElementType() != qt.getElementType()))
    return op->emitOpError() << "query, keys and values must share one element type (or keys "
                                "and values be !pig.q8), got "
                             << qt.getElementType() << ", " << kt.getElementType() << ", "
                             << vt.getElementType();
  int64_t dq = qt.getShape().back(), dk = kt.getShape().back(), dv = vt.getShape().back();
  if (!compatible(dq, dk) || !compatible(dq, dv) || !compatible(dk, dv))
    return op->emitOpError() << "head dims disagree: query " << dimString(dq) << ", keys "
                             << dimString(dk) << ", values " << dimString(dv);
  for (int64_t i = 0; i + 1 < kvRank; ++i)
    if (!compatible(kt.getDimSize(i), vt.getDimSize(i)))
      return op->emitOpError() << "keys " << kt << " and values " << vt
                               << " disagree on their leading dims";
  return ShapedType::isDynamic(dq) ? dk : dq;
}

/// Output `rows x d` f32 and LSE `rows` f32.
LogicalResult checkResults(Operation *op, Value output, Value lse, int64_t rows, int64_t d) {
  RankedTensorType ot = tensorType(output), lt = tensorType(lse);
  if (ot.getRank() != 2 || !compatible(ot.getDimSize(0), rows) || !compatible(ot.getDimSize(1), d))
    return op->emitOpError() << "output must be " << dimString(rows) << "x" << dimString(d)
                             << " (query rows x head dim), got " << ot;
  if (lt.getRank() != 1 || !compatible(lt.getDimSize(0), rows))
    return op->emitOpError() << "lse must have one entry per query row (" << dimString(rows)
                             << "), got " << lt;
  return success();
}

LogicalResult checkSingleRow(Operation *op, Value q) {
  if (!compatible(tensorType(q).getDimSize(0), 1))
    return op->emitOpError() << "query must be one row (1 x d), got " << q.getType();
  return success();
}

// One query row (1 x d) and 2-D keys of the same head dim.
LogicalResult checkQueryRowAndKeys(Operation *op, Value q, Value k, StringRef keys) {
  if (failed(checkOperand(op, "query", q, 2, Role::Query)) ||
      failed(checkOperand(op, keys, k, 2, Role::KeysOrValues)) || failed(checkSingleRow(op, q)))
    return failure();
  int64_t dq = tensorType(q).getDimSize(1), dk = tensorType(k).getDimSize(1);
  if (!compatible(dq, dk))
    return op->emitOpError() << "head dims disagree: query " << dimString(dq) << ", " << keys << " "
                             << dimString(dk);
  return success();
}

// lsh-hybrid's selection ops: the ranges of pig::ref::HybridConfig::validate (NaN fails every
// comparison).
LogicalResult checkHybridRanges(Operation *op, const APFloat &budget_attr, const APFloat &head_attr,
                                const APFloat &floor_attr) {
  const double budget = budget_attr.convertToDouble(), head = head_attr.convertToDouble(),
               floor = floor_attr.convertToDouble();
  if (!(budget > 0 && budget <= 1))
    return op->emitOpError() << "budget must be in (0, 1], got " << budget;
  if (!(head >= 0 && head <= 1))
    return op->emitOpError() << "head share must be in [0, 1], got " << head;
  if (!(floor > 0 && floor <= 1))
    return op->emitOpError() << "floor must be in (0, 1], got " << floor;
  return success();
}

LogicalResult checkSampleSet(Operation *op, Value ids, Value prob) {
  RankedTensorType pt = tensorType(prob);
  if (pt.getRank() != 1 || !compatible(pt.getDimSize(0), tensorType(ids).getDimSize(0)))
    return op->emitOpError() << "needs one probability per sampled id, got " << ids.getType()
                             << " and " << prob.getType();
  return success();
}

/// The hash transform of `lsh` must be valid for head dim `d` (when d is known): pca:r=R needs
/// R <= d.
LogicalResult checkTransform(Operation *op, LshAttr lsh, int64_t d) {
  if (ShapedType::isDynamic(d) || lsh.isPlain())
    return success();
  if (std::string why = LshAttr::checkTransform(lsh.getTransform(), d); !why.empty())
    return op->emitOpError() << "hash transform \"" << lsh.getTransform()
                             << "\" is invalid for head dim d = " << d << ": " << why;
  return success();
}

LogicalResult checkCodesAgainst(Operation *op, StringRef what, int64_t tables, int64_t bits,
                                int64_t wantTables, int64_t wantBits) {
  if (!compatible(tables, wantTables) || !compatible(bits, wantBits))
    return op->emitOpError() << what << " has L = " << dimString(tables)
                             << ", K = " << dimString(bits)
                             << " but expected L = " << dimString(wantTables)
                             << ", K = " << dimString(wantBits);
  return success();
}
} // namespace

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult CenterOp::verify() {
  if (failed(checkOperand(*this, "keys", getKeys(), 2, Role::KeysOrValues)))
    return failure();
  if (getCentered().getType() != getKeys().getType())
    return emitOpError() << "centered keys must have the type of the keys";
  RankedTensorType mt = getMean().getType();
  if (mt.getRank() != 2 || mt.getDimSize(0) != 1 ||
      !compatible(mt.getDimSize(1), tensorType(getKeys()).getDimSize(1)))
    return emitOpError() << "mean must be 1 x d, got " << mt;
  return success();
}

LogicalResult EncodeOp::verify() {
  if (failed(checkOperand(*this, "input", getInput(), 2, Role::KeysOrValues)))
    return failure();
  CodesType codes = getCodes().getType();
  if (!compatible(codes.getRows(), tensorType(getInput()).getDimSize(0)))
    return emitOpError() << "produces " << dimString(codes.getRows()) << " rows of codes for "
                         << dimString(tensorType(getInput()).getDimSize(0)) << " input rows";
  if (failed(checkTransform(*this, getLsh(), tensorType(getInput()).getDimSize(1))))
    return failure();
  return checkCodesAgainst(*this, "result", codes.getTables(), codes.getBits(), getLsh().getL(),
                           getLsh().getK());
}

LogicalResult BuildIndexOp::verify() {
  CodesType codes = getCodes().getType();
  BucketIndexType index = getIndex().getType();
  return checkCodesAgainst(*this, "index", index.getTables(), index.getBits(), codes.getTables(),
                           codes.getBits());
}

LogicalResult QueryOp::verify() {
  CodesType codes = getCodes().getType();
  BucketIndexType index = getIndex().getType();
  if (failed(checkCodesAgainst(*this, "query codes", codes.getTables(), codes.getBits(),
                               index.getTables(), index.getBits())))
    return failure();
  int64_t t = getThreshold();
  if (t < 1)
    return emitOpError() << "collision threshold t = " << t << " must be at least 1";
  if (!ShapedType::isDynamic(index.getTables()) && index.getTables() < t)
    return emitOpError() << "L = " << index.getTables()
                         << " is smaller than the collision threshold t = " << t;
  int64_t row = getRow();
  if (row < 0 || (!ShapedType::isDynamic(codes.getRows()) && row >= codes.getRows()))
    return emitOpError() << "row " << row << " is outside the " << dimString(codes.getRows())
                         << " rows of the query codes";
  return success();
}

LogicalResult HybridSelectOp::verify() {
  CodesType q = getQueryCodes().getType(), k = getCodes().getType();
  if (failed(checkCodesAgainst(*this, "token codes", k.getTables(), k.getBits(), q.getTables(),
                               q.getBits())))
    return failure();
  int64_t row = getRow();
  if (row < 0 || (!ShapedType::isDynamic(q.getRows()) && row >= q.getRows()))
    return emitOpError() << "row " << row << " is outside the " << dimString(q.getRows())
                         << " rows of the query codes";
  RankedTensorType norms = tensorType(getNorms());
  if (norms.getRank() != 1 || !compatible(norms.getDimSize(0), k.getRows()))
    return emitOpError() << "needs one norm per token: " << dimString(k.getRows())
                         << " tokens, norms " << getNorms().getType();
  if (failed(checkHybridRanges(*this, getBudget(), getHead(), getFloor())))
    return failure();
  StringRef rank = getRank();
  if (rank != "hamming" && rank != "collisions")
    return emitOpError() << "rank must be \"hamming\" or \"collisions\", got \"" << rank << "\"";
  int64_t bits = getBits();
  if (bits < 0 || (bits > 0 && rank != "hamming"))
    return emitOpError() << "bits must be >= 0 and only with rank \"hamming\", got " << bits;
  if (!ShapedType::isDynamic(q.getTables()) && !ShapedType::isDynamic(q.getBits()) &&
      bits > q.getTables() * q.getBits())
    return emitOpError() << "bits = " << bits
                         << " but the codes hold K L = " << q.getTables() * q.getBits();
  return success();
}

LogicalResult QuantSelectOp::verify() {
  if (failed(checkQueryRowAndKeys(*this, getQuery(), getCentered(), "centered keys")) ||
      failed(checkHybridRanges(*this, getBudget(), getHead(), getFloor())))
    return failure();
  if (getKbits() != 4 && getKbits() != 8)
    return emitOpError() << "kbits must be 4 or 8, got " << getKbits();
  return success();
}

LogicalResult CollisionProbOp::verify() {
  if (failed(checkQueryRowAndKeys(*this, getQuery(), getKeys(), "keys")))
    return failure();
  int64_t dq = tensorType(getQuery()).getDimSize(1), dk = tensorType(getKeys()).getDimSize(1);
  if (failed(checkTransform(*this, getLsh(), ShapedType::isDynamic(dq) ? dk : dq)))
    return failure();
  return checkSampleSet(*this, getIds(), getProb());
}

LogicalResult WeightedSoftmaxOp::verify() {
  FailureOr<int64_t> d = checkQKV(*this, getQuery(), getKeys(), getValues(), 2, 2);
  if (failed(d) || failed(checkSingleRow(*this, getQuery())) ||
      failed(checkSampleSet(*this, getIds(), getProb())))
    return failure();
  return checkResults(*this, getOutput(), getLse(), 1, *d);
}

LogicalResult SampledSoftmaxFusedOp::verify() {
  FailureOr<int64_t> d = checkQKV(*this, getQuery(), getKeys(), getValues(), 2, 2);
  if (failed(d) || failed(checkSingleRow(*this, getQuery())) ||
      failed(checkTransform(*this, getLsh(), *d)))
    return failure();
  RankedTensorType mt = getMean().getType();
  if (mt.getRank() != 2 || mt.getDimSize(0) != 1 || !compatible(mt.getDimSize(1), *d))
    return emitOpError() << "mean must be 1 x " << dimString(*d) << ", got " << mt;
  return checkResults(*this, getOutput(), getLse(), 1, *d);
}

LogicalResult DenseAttentionOp::verify() {
  FailureOr<int64_t> d = checkQKV(*this, getQuery(), getKeys(), getValues(), 2, 2);
  if (failed(d))
    return failure();
  return checkResults(*this, getOutput(), getLse(), tensorType(getQuery()).getDimSize(0), *d);
}

LogicalResult MergeOp::verify() {
  RankedTensorType ot = getOutA().getType();
  if (ot.getRank() != 2)
    return emitOpError() << "partial outputs must be rows x d, got " << ot;
  return checkResults(*this, getOutA(), getLseA(), ot.getDimSize(0), ot.getDimSize(1));
}

LogicalResult SampledAttentionOp::verify() {
  FailureOr<int64_t> d = checkQKV(*this, getQuery(), getKeys(), getValues(), 2, 3);
  if (failed(d) || failed(checkTransform(*this, getLsh(), *d)))
    return failure();
  int64_t heads = tensorType(getQuery()).getDimSize(0);
  int64_t kvHeads = tensorType(getKeys()).getDimSize(0);
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(kvHeads))
    return emitOpError() << "needs static head counts, got " << dimString(heads)
                         << " query heads and " << dimString(kvHeads) << " kv-heads";
  if (kvHeads < 1 || heads % kvHeads != 0)
    return emitOpError() << "GQA: " << heads << " query heads cannot be grouped over " << kvHeads
                         << " kv-heads (the group size must divide)";
  return checkResults(*this, getOutput(), getLse(), heads, *d);
}

//===----------------------------------------------------------------------===//
// Folders and canonicalization
//===----------------------------------------------------------------------===//

OpFoldResult TransferOp::fold(FoldAdaptor) {
  if (getFrom() == getTo())
    return getInput();
  // Straight back: a -> b -> a.
  if (auto previous = getInput().getDefiningOp<TransferOp>())
    if (previous.getFrom() == getTo())
      return previous.getInput();
  return {};
}

namespace {
/// True when `value` is the output or LSE of an attention over no token at all.
bool isEmptyPart(Value value) {
  while (auto transfer = value.getDefiningOp<TransferOp>())
    value = transfer.getInput();
  auto dense = value.getDefiningOp<DenseAttentionOp>();
  return dense && dense.isEmpty();
}

/// merge(x, empty) -> x: the empty part has LSE -inf and weight 0.
struct MergeWithEmptyPart : OpRewritePattern<MergeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MergeOp op, PatternRewriter &rewriter) const override {
    if (isEmptyPart(op.getOutB()) && isEmptyPart(op.getLseB())) {
      rewriter.replaceOp(op, {op.getOutA(), op.getLseA()});
      return success();
    }
    if (isEmptyPart(op.getOutA()) && isEmptyPart(op.getLseA())) {
      rewriter.replaceOp(op, {op.getOutB(), op.getLseB()});
      return success();
    }
    return failure();
  }
};
} // namespace

void MergeOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<MergeWithEmptyPart>(context);
}

#define GET_OP_CLASSES
#include "pig/Dialect/PigOps.cpp.inc"
