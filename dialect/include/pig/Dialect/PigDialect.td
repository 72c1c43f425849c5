//===- PigDialect.td - the pig dialect ---------------------*- tablegen -*-===//
//
// LSH sampling attention (MagicPIG): the dialect definition and the base op class.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_DIALECT_PIGDIALECT_TD
#define PIG_DIALECT_PIGDIALECT_TD

include "mlir/IR/OpBase.td"

def Pig_Dialect : Dialect {
  let name = "pig";
  let cppNamespace = "::mlir::pig";
  let summary = "LSH sampling attention (MagicPIG) for decoding";
  let description = [{
    The `pig` dialect describes one decode step of LSH sampling attention: keys are
    centered and hashed with SimHash into L tables of K bits, a bucket index maps codes to
    token ids, a query retrieves the tokens whose bucket matches its own in at least t tables,
    and a self-normalised importance-sampling softmax (scores minus log of the collision
    probability) over that sample set, together with the exactly attended static tokens
    (attention sink and local window), estimates the attention output.

    Value conventions:
    - a query block is `tensor<R x d x T>` (R query heads, head dim d);
    - keys and values of one kv-head are `tensor<n x d x T>`, n usually dynamic;
    - T is one of f32, bf16, f16 for queries; keys and values have the query's T or the 8-bit
      `!pig.q8` (int8 in blocks of 32 with a bf16 scale; d must then be a multiple of 32);
      outputs and log-sum-exps are f32 (the LSE is base e);
    - codes are `!pig.codes<R x L x K>`, bucket indexes `!pig.index<L x K>`, sample sets
      `tensor<? x i32>` of token ids.

    Codes are stored as one uint16 per (vector, table), so K is in [1, 16] and a bucket table
    has 2^K entries per table; L is in [1, 1024] and the collision threshold t in [1, L].

    Placement is the discardable attribute `pig.device = #pig.device<cpu|gpu>` set by
    `pig-partition`; `pig.transfer` moves a value between devices.

    Functions carry their kernel key, `pig.kernel = #pig.kernel<...>` (set by
    `pig-specialize`), and the schedule their kernels are compiled with,
    `pig.schedule = #pig.schedule<...>` (set by `pig-schedule`; see docs/SCHEDULES.md).
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
  }];
}

class Pig_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pig_Dialect, mnemonic, traits>;

#endif // PIG_DIALECT_PIGDIALECT_TD
