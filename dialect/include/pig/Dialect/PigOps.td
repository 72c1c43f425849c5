//===- PigOps.td - pig operations --------------------------*- tablegen -*-===//
//
// The primitive ops of one LSH sampling attention step, the composite that pig-decompose
// expands, the fused op pig-fuse produces, and the explicit device transfer.
//
//===----------------------------------------------------------------------===//

#ifndef PIG_DIALECT_PIGOPS_TD
#define PIG_DIALECT_PIGOPS_TD

include "mlir/Interfaces/SideEffectInterfaces.td"
include "pig/Dialect/PigDialect.td"
include "pig/Dialect/PigAttrs.td"
include "pig/Dialect/PigTypes.td"

def Pig_IdsTensor : 1DTensorOf<[I32]>;
def Pig_F32Tensor : RankedTensorOf<[F32]>;

//===----------------------------------------------------------------------===//
// Index construction
//===----------------------------------------------------------------------===//

def Pig_CenterOp : Pig_Op<"center", [Pure]> {
  let summary = "subtract the mean key";
  let description = [{
    Returns `keys - mean(keys)` and the mean (f32, one row). Without centering almost no key
    collides with a query: keys and queries sit in opposite cones. Softmax is invariant to
    the shift, so scores may use either.

    ```mlir
    %centered, %mean = pig.center %keys
        : tensor<?x128xbf16> -> tensor<?x128xbf16>, tensor<1x128xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$keys);
  let results = (outs AnyRankedTensor:$centered, Pig_F32Tensor:$mean);
  let assemblyFormat =
      "$keys attr-dict `:` type($keys) `->` type($centered) `,` type($mean)";
  let hasVerifier = 1;
}

def Pig_EncodeOp : Pig_Op<"encode", [Pure]> {
  let summary = "SimHash vectors into L codes of K bits";
  let description = [{
    Bit j of the code of row x in table l is `x . W[:, l*K + j] > 0`, with W (d x K*L) drawn
    from the seed of `lsh`. Keys and queries are hashed with the same W.

    ```mlir
    %codes = pig.encode %keys {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>}
        : tensor<?x128xbf16> -> !pig.codes<?x150x10>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, Pig_LshAttr:$lsh);
  let results = (outs Pig_CodesType:$codes);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($codes))";
  let hasVerifier = 1;
}

def Pig_BuildIndexOp : Pig_Op<"build_index", [Pure]> {
  let summary = "bucket index over the codes of the keys";
  let description = [{
    Sorts token ids by bucket, per table. Tokens covered by the optional `static_tokens` are
    left out: they are always attended and never sampled.

    ```mlir
    %index = pig.build_index %codes {static_tokens = #pig.static<sink = 4, local = 64>}
        : !pig.codes<?x150x10> -> !pig.index<150x10>
    ```
  }];
  let arguments = (ins Pig_CodesType:$codes,
                   OptionalAttr<Pig_StaticTokensAttr>:$static_tokens);
  let results = (outs Pig_BucketIndexType:$index);
  let assemblyFormat =
      "$codes attr-dict `:` qualified(type($codes)) `->` qualified(type($index))";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Retrieval and estimation
//===----------------------------------------------------------------------===//

def Pig_QueryOp : Pig_Op<"query", [Pure]> {
  let summary = "retrieve the sample set of one query row";
  let description = [{
    Walks the L buckets of row `row` of the query codes and returns the ids of the tokens
    whose bucket equals the query's in at least `threshold` tables (1 <= t <= L).

    ```mlir
    %ids = pig.query %index, %qcodes[0] threshold 2
        : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
    ```
  }];
  let arguments = (ins Pig_BucketIndexType:$index, Pig_CodesType:$codes,
                   I64Attr:$row, I64Attr:$threshold);
  let results = (outs Pig_IdsTensor:$ids);
  let assemblyFormat = [{
    $index `,` $codes `[` $row `]` `threshold` $threshold attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Pig_HybridSelectOp : Pig_Op<"hybrid_select", [Pure]> {
  let summary = "lsh-hybrid: rank by the codes, an exact head and a Horvitz-Thompson tail";
  let description = [{
    The selection of `lsh-hybrid` (docs/HYBRID.md) for row `row` of the query codes over n
    indexed tokens: each token's estimated logit from its codes (`rank = "hamming"`: the
    differing bits over the first `bits` columns, 0 for all K L; `"collisions"`: the equal
    codes) times its centred key norm `norms[i]`; the best `head` share of `budget * n`
    tokens with probability 1, and a Poisson draw of the others with inclusion
    probabilities `min(1, lambda ((1 - floor) softmax + floor / n))` summing to the rest of
    the budget, seeded by `seed`. Returns the selected ids (ascending within head and tail)
    and their inclusion probabilities, which `pig.weighted_softmax` takes as `u` (weight
    1 / pi: unbiased numerator and partition function whatever the hash does).

    ```mlir
    %ids, %pi = pig.hybrid_select %qcodes[0], %codes, %norms
        {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming",
         bits = 0 : i64, seed = 7 : i64}
        : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>)
        -> (tensor<?xi32>, tensor<?xf32>)
    ```
  }];
  let arguments = (ins Pig_CodesType:$query_codes, Pig_CodesType:$codes,
                   Pig_F32Tensor:$norms, I64Attr:$row, F64Attr:$budget, F64Attr:$head,
                   F64Attr:$floor, StrAttr:$rank, I64Attr:$bits, I64Attr:$seed);
  let results = (outs Pig_IdsTensor:$ids, Pig_F32Tensor:$prob);
  let assemblyFormat = [{
    $query_codes `[` $row `]` `,` $codes `,` $norms attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Pig_QuantSelectOp : Pig_Op<"quant_select", [Pure]> {
  let summary = "lsh-hybrid with rank=quant: rank by int4 keys, an exact head, a Horvitz-Thompson tail";
  let description = [{
    `pig.hybrid_select` with the ranker `rank=quant` (docs/HYBRID.md) instead of the codes: each
    indexed token's estimated logit is `scale s_q s_i sum_j y_j x_ij`, with `x_i` the centred
    key `centered[i]` rounded to `kbits` bits (4 or 8, one scale `s_i = max_j |k_ij| / (2^(kbits
    - 1) - 1)`) and `y` the query rounded to int8 (`s_q = max_j |q_j| / 127`). The head, the
    tail's inclusion probabilities and the seeded draw are `pig.hybrid_select`'s. Returns the
    selected ids and their inclusion probabilities, which `pig.weighted_softmax` takes as `u`.

    ```mlir
    %ids, %pi = pig.quant_select %q, %centered
        {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, kbits = 4 : i64, seed = 7 : i64}
        : (tensor<1x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$centered, F64Attr:$budget,
                   F64Attr:$head, F64Attr:$floor, I64Attr:$kbits, I64Attr:$seed);
  let results = (outs Pig_IdsTensor:$ids, Pig_F32Tensor:$prob);
  let assemblyFormat = "$query `,` $centered attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Pig_CollisionProbOp : Pig_Op<"collision_prob", [Pure]> {
  let summary = "probability u_i that token i is sampled";
  let description = [{
    With `p_i = 1 - acos(cos(q, k_i)) / pi` over the centered keys, one table collides with
    probability `p_i^K` and `u_i = 1 - (1-p^K)^L - L p^K (1-p^K)^(L-1)` for t = 2 (in general
    the tail of Binomial(L, p^K) from t). Returns one u per sampled id.

    ```mlir
    %u = pig.collision_prob %q, %centered, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>}
        : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?xi32>) -> tensor<?xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$keys, Pig_IdsTensor:$ids,
                   Pig_LshAttr:$lsh);
  let results = (outs Pig_F32Tensor:$prob);
  let assemblyFormat = "$query `,` $keys `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Pig_WeightedSoftmaxOp : Pig_Op<"weighted_softmax", [Pure]> {
  let summary = "importance-weighted softmax over the sample set";
  let description = [{
    `o = sum_{i in S} softmax_i(q.k_i / sqrt(d) - log u_i) v_i`, gathering rows `ids` of keys
    and values; with `static_tokens` the sink and local tokens join the softmax with u = 1.
    Returns the output (1 x d, f32) and its log-sum-exp (base e).

    ```mlir
    %o, %lse = pig.weighted_softmax %q, %k, %v, %ids, %u
        : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<?xi32>,
           tensor<?xf32>) -> (tensor<1x128xf32>, tensor<1xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$keys, AnyRankedTensor:$values,
                   Pig_IdsTensor:$ids, Pig_F32Tensor:$prob,
                   OptionalAttr<Pig_StaticTokensAttr>:$static_tokens);
  let results = (outs Pig_F32Tensor:$output, Pig_F32Tensor:$lse);
  let assemblyFormat = [{
    $query `,` $keys `,` $values `,` $ids `,` $prob attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Pig_SampledSoftmaxFusedOp : Pig_Op<"sampled_softmax_fused", [Pure]> {
  let summary = "collision probability, gather and weighted softmax in one pass";
  let description = [{
    Produced by `pig-fuse` from `pig.collision_prob` + `pig.weighted_softmax`: each sampled
    row of keys and values is read once; the centered dot product and norm needed for u_i
    come from the raw key and the `mean` of `pig.center`
    (`q.(k-mu) = q.k - q.mu`). Same results as the unfused pair.

    ```mlir
    %o, %lse = pig.sampled_softmax_fused %q, %k, %v, %mean, %ids
        {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>}
        : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<1x128xf32>,
           tensor<?xi32>) -> (tensor<1x128xf32>, tensor<1xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$keys, AnyRankedTensor:$values,
                   Pig_F32Tensor:$mean, Pig_IdsTensor:$ids, Pig_LshAttr:$lsh,
                   OptionalAttr<Pig_StaticTokensAttr>:$static_tokens);
  let results = (outs Pig_F32Tensor:$output, Pig_F32Tensor:$lse);
  let assemblyFormat = [{
    $query `,` $keys `,` $values `,` $mean `,` $ids attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Pig_DenseAttentionOp : Pig_Op<"dense_attention", [Pure]> {
  let summary = "exact attention, optionally restricted to the static tokens";
  let description = [{
    `softmax(q K^T / sqrt(d)) V` for each of the R query rows against all n keys, or only
    against the sink and local tokens when `window` is given. Returns the output (R x d, f32)
    and the log-sum-exp per row. An empty window (`sink = 0, local = 0`) attends to nothing:
    output 0, LSE -inf.

    ```mlir
    %o, %lse = pig.dense_attention %q, %k, %v {window = #pig.static<sink = 4, local = 64>}
        : (tensor<1x128xbf16>, tensor<?x128xbf16>, tensor<?x128xbf16>)
        -> (tensor<1x128xf32>, tensor<1xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$keys, AnyRankedTensor:$values,
                   OptionalAttr<Pig_StaticTokensAttr>:$window);
  let results = (outs Pig_F32Tensor:$output, Pig_F32Tensor:$lse);
  let assemblyFormat = [{
    $query `,` $keys `,` $values attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when the op attends to no token at all.
    bool isEmpty() { return getWindow() && getWindow()->isEmpty(); }
  }];
}

def Pig_MergeOp : Pig_Op<"merge", [Pure, AllTypesMatch<["out_a", "out_b", "output"]>,
                                   AllTypesMatch<["lse_a", "lse_b", "lse"]>]> {
  let summary = "merge two partial attention outputs by their log-sum-exps";
  let description = [{
    `o = (e^a o_a + e^b o_b) / (e^a + e^b)`, `lse = log(e^a + e^b)`, row by row. Exact: the
    parts may be computed on different devices. A merge with an empty part folds away.

    ```mlir
    %o, %lse = pig.merge %o_a, %lse_a, %o_b, %lse_b : tensor<1x128xf32>, tensor<1xf32>
    ```
  }];
  let arguments = (ins Pig_F32Tensor:$out_a, Pig_F32Tensor:$lse_a,
                   Pig_F32Tensor:$out_b, Pig_F32Tensor:$lse_b);
  let results = (outs Pig_F32Tensor:$output, Pig_F32Tensor:$lse);
  let assemblyFormat = [{
    $out_a `,` $lse_a `,` $out_b `,` $lse_b attr-dict `:` type($out_a) `,` type($lse_a)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Composite, placement
//===----------------------------------------------------------------------===//

def Pig_SampledAttentionOp : Pig_Op<"sampled_attention", [Pure]> {
  let summary = "LSH sampling attention of one layer (composite)";
  let description = [{
    All H query heads against the keys and values of Hkv kv-heads (GQA: query head h uses
    kv-head h / (H / Hkv); H must be a multiple of Hkv). `pig-decompose` expands it into
    center, encode, build_index, query, collision_prob, weighted_softmax, dense_attention over
    the static tokens and merge, per kv-head and query head.

    ```mlir
    %o, %lse = pig.sampled_attention %q, %k, %v {
        lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>,
        static_tokens = #pig.static<sink = 4, local = 64>}
        : (tensor<32x128xbf16>, tensor<8x?x128xbf16>, tensor<8x?x128xbf16>)
        -> (tensor<32x128xf32>, tensor<32xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$keys, AnyRankedTensor:$values,
                   Pig_LshAttr:$lsh, Pig_StaticTokensAttr:$static_tokens);
  let results = (outs Pig_F32Tensor:$output, Pig_F32Tensor:$lse);
  let assemblyFormat = [{
    $query `,` $keys `,` $values attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Pig_TransferOp : Pig_Op<"transfer", [Pure, AllTypesMatch<["input", "output"]>]> {
  let summary = "move a value from one device to another";
  let description = [{
    Inserted by `pig-partition` where a value produced on one device is used on another.
    A transfer to the device it comes from, or straight back, folds away.

    ```mlir
    %on_cpu = pig.transfer %codes {from = #pig.device<gpu>, to = #pig.device<cpu>}
        : !pig.codes<1x150x10>
    ```
  }];
  let arguments = (ins AnyType:$input, Pig_DeviceAttr:$from, Pig_DeviceAttr:$to);
  let results = (outs AnyType:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
}

#endif // PIG_DIALECT_PIGOPS_TD
