//===- PigTypes.td - pig types -----------------------------*- tablegen -*-===//

#ifndef PIG_DIALECT_PIGTYPES_TD
#define PIG_DIALECT_PIGTYPES_TD

include "mlir/IR/AttrTypeBase.td"
include "pig/Dialect/PigDialect.td"

class Pig_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Pig_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Pig_CodesType : Pig_Type<"Codes", "codes"> {
  let summary = "SimHash codes: rows x L tables x K bits";
  let description = [{
    One K-bit bucket id per (vector, table), stored as uint16: K is in [1, 16], L in
    [1, 1024]. Any dimension may be `?` (rows usually is for keys).

    ```mlir
    !pig.codes<?x150x10>   // the codes of n keys
    !pig.codes<4x150x10>   // the codes of the 4 query heads of a GQA group
    ```
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$tables, "int64_t":$bits);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Pig_BucketIndexType : Pig_Type<"BucketIndex", "index"> {
  let summary = "bucket index of one kv-head: L tables of 2^K buckets of token ids";
  let description = [{
    Per table, 2^K bucket start offsets into an array of int32 token ids sorted by bucket.

    ```mlir
    !pig.index<150x10>
    ```
  }];
  let parameters = (ins "int64_t":$tables, "int64_t":$bits);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Pig_Q8Type : Pig_Type<"Q8", "q8"> {
  let summary = "8-bit KV element: int8 in blocks of 32 with a bf16 scale per block";
  let description = [{
    The element type of 8-bit keys and values (the KV cache's "q8" rows,
    `spec/include/pig/spec/kv_type.h`, docs/KV8.md): a row of d elements is
    d / 32 blocks of 34 bytes, a bf16 scale s followed by 32 int8 values q_i, and element i
    of a block is `q_i * s`. It is an element type of keys and values only: queries, means,
    outputs and log-sum-exps stay floating point (a step over q8 keys takes f32, bf16 or f16
    queries). The head dim of a q8 tensor must be a multiple of 32 (whole blocks).

    ```mlir
    %o, %lse = pig.dense_attention %q, %k, %v
        : (tensor<4x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>)
        -> (tensor<4x64xf32>, tensor<4xf32>)
    ```
  }];
}

#endif // PIG_DIALECT_PIGTYPES_TD
