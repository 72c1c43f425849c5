//===- PigAttrs.td - pig attributes ------------------------*- tablegen -*-===//

#ifndef PIG_DIALECT_PIGATTRS_TD
#define PIG_DIALECT_PIGATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "pig/Dialect/PigDialect.td"

class Pig_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Pig_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Pig_LshAttr : Pig_Attr<"Lsh", "lsh"> {
  let summary = "LSH configuration: K bits per table, L tables, threshold t, seed of W";
  let description = [{
    SimHash with one Gaussian matrix W (d x K*L) drawn from `seed`: table l uses columns
    [l*K, (l+1)*K) and a token is sampled when its bucket equals the query's in at least `t`
    of the `l` tables. K (`k`) is in [1, 16] (codes are uint16), L in [1, 1024], t in [1, L].
    `k` and `l` may be `?` in a generic description; `pig-specialize` folds them.

    `transform` is the space keys and queries are hashed in (`pig::spec::TransformSpec`,
    spec/include/pig/spec/transform_spec.h): `plain` (the default: plain MagicPIG, not
    printed), `pca:r=R`, `whiten:a=A`, `mips:q=Q` or `whiten:a=A+mips:q=Q`, fitted to the keys
    per (layer, kv-head). It is stored in canonical form (`whiten` reads as `whiten:a=0.5`) and
    must be valid for the head dim of the ops carrying it (`pca:r=R` needs R <= d). Like K and L,
    the ops of one step must agree on it. It is data to the kernels (the key and query maps,
    stored key norms), not code: every transform is served by the same kernels, and it is not
    part of the kernel key (`#pig.kernel`).

    ```mlir
    #pig.lsh<k = 10, l = 150, t = 2, seed = 0>
    #pig.lsh<k = ?, l = ?, t = 2, seed = 0>
    #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=0.25">
    ```
  }];
  let parameters = (ins "int64_t":$k, "int64_t":$l, "int64_t":$t, "uint64_t":$seed,
                        StringRefParameter<"hash transform, canonical TransformSpec::str()",
                                           [{"plain"}]>:$transform);
  // The builders canonicalise `transform` (TransformSpec::parse(...).str()); a spec that does
  // not parse is kept as given, for the verifier to report.
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "int64_t":$k, "int64_t":$l, "int64_t":$t, "uint64_t":$seed,
                     CArg<"::llvm::StringRef", "\"plain\"">:$transform), [{
      return $_get($_ctxt, k, l, t, seed, canonicalTransform(transform));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True when K and L are both known.
    bool isStatic() const;
    /// True when keys and queries are hashed as they are (plain MagicPIG).
    bool isPlain() const { return getTransform() == kPlainTransform; }
    /// The default transform.
    static constexpr ::llvm::StringLiteral kPlainTransform = "plain";
    /// TransformSpec::parse(spec).str(), or `spec` itself when it does not parse.
    static std::string canonicalTransform(::llvm::StringRef spec);
    /// Empty when `transform` is a valid TransformSpec for head dim d, else why not (the
    /// message of TransformSpec::parse or validate).
    static std::string checkTransform(::llvm::StringRef transform, int64_t d);
  }];
}

def Pig_StaticTokensAttr : Pig_Attr<"StaticTokens", "static"> {
  let summary = "static tokens: the attention sink and the local window";
  let description = [{
    The first `sink` tokens and the last `local` tokens are always attended exactly (with
    collision probability 1) and never sampled.

    ```mlir
    #pig.static<sink = 4, local = 64>
    ```
  }];
  let parameters = (ins "int64_t":$sink, "int64_t":$local);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isEmpty() const { return getSink() == 0 && getLocal() == 0; }
  }];
}

def Pig_DeviceAttr : Pig_Attr<"Device", "device"> {
  let summary = "where an op runs: `cpu` or `gpu`";
  let description = [{
    ```mlir
    %ids = pig.query %index, %codes[0] threshold 2 {pig.device = #pig.device<cpu>}
        : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
    ```
  }];
  let parameters = (ins StringRefParameter<"device kind">:$kind);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool isGpu() const { return getKind() == "gpu"; }
  }];
}

def Pig_KernelAttr : Pig_Attr<"Kernel", "kernel"> {
  let summary = "the kernel configuration a function was specialised for";
  let description = [{
    Set on a function by `pig-specialize`: the key (K, L, d, element type) under which code
    generators emit and the runtime looks up kernels. The element type is that of the keys and
    values: `f32`, `bf16` or `!pig.q8` (8-bit rows; the queries of a q8 step stay float).

    ```mlir
    func.func @step(...) attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>}
    func.func @step8(...) attributes {pig.kernel = #pig.kernel<k = 10, l = 150, d = 64, dtype = !pig.q8>}
    ```
  }];
  let parameters = (ins "int64_t":$k, "int64_t":$l, "int64_t":$d, "::mlir::Type":$dtype);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Pig_ScheduleAttr : Pig_Attr<"Schedule", "schedule"> {
  let summary = "how the LSH kernels of a function run: GQA strategy, block, prefetch, parts";
  let description = [{
    The schedule of the CPU kernels a function is compiled to: decisions that change how fast
    the kernels run, never what they compute. Set on a function as `pig.schedule` by
    `pig-schedule`; `pig-translate --emit=cpu` passes the knobs to
    `MakeKernelSet<K, L, d, T, Schedule{...}>` and registers the kernel set under its key and
    schedule. A function without `pig.schedule` is compiled with the default schedule.

    The knobs, their legal values and defaults are those of
    `spec/include/pig/spec/schedule.h` (`kScheduleKnobs`), which the parser, the
    printer and the verifier read; a knob added there is accepted here without a change:

    | knob | legal values | default | decides |
    |---|---|---|---|
    | `gqa` | `per_head`, `union` | `per_head` | a GQA group's sampled rows: each head through the one-head pipeline, or the group's union scored once for all heads |
    | `block` | 16, 32, 64, 128 | 64 | rows per softmax block |
    | `prefetch` | 0..64 | 8 | sampled K/V rows prefetched ahead |
    | `dense_prefetch` | 0..256 | 64 | dense K/V rows prefetched ahead |
    | `tables_ahead` | 0..64 | 8 | bucket lists prefetched ahead in retrieval |
    | `parts` | 0..8 | 0 | ranges one kv-head's sampled pass is split into (0: automatic) |

    Knobs may be given in any order and omitted (they then take their defaults); the printer
    writes every knob, in the order of the table. `gqa` is written `per_head` or `union` (an
    integer, 0 or 1, is read too).

    ```mlir
    func.func @step(...) attributes {pig.schedule = #pig.schedule<gqa = union, block = 32>}
    // printed:
    //   #pig.schedule<gqa = union, block = 32, prefetch = 8, dense_prefetch = 64,
    //                 tables_ahead = 8, parts = 0>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t", "knob values, in kScheduleKnobs order">:$values);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  // To and from pig::spec's Schedule value: pig/Dialect/PigSchedule.h (kept out of this
  // class so that PigDialect.h does not pull the knob table into every user).
}

#endif // PIG_DIALECT_PIGATTRS_TD
