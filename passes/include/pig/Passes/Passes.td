//===- Passes.td - pig passes ------------------------------*- tablegen -*-===//

#ifndef PIG_PASSES_PASSES_TD
#define PIG_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def PigDecompose : Pass<"pig-decompose", "::mlir::ModuleOp"> {
  let summary = "expand pig.sampled_attention into the primitive pig ops";
  let description = [{
    Per kv-head: center the keys, encode them, build the bucket index (without the static
    tokens). Per query head: encode, query, collision_prob, weighted_softmax over the sample
    set, dense_attention over the static tokens, merge; the results are inserted into the
    H x d output and the H log-sum-exps. `pig.sampled_attention` is illegal afterwards.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::tensor::TensorDialect"];
}

def PigSpecialize : Pass<"pig-specialize", "::mlir::ModuleOp"> {
  let summary = "fold (K, L, d, dtype) into the IR; reject what no kernel serves";
  let description = [{
    Picks one kernel configuration per function from the options and/or a manifest (lines
    `K=10 L=150 d=128 bf16`, optionally followed by schedule knobs, e.g. `gqa=union block=32`,
    which are checked here and attached by `pig-schedule`; lines that differ only in their
    schedule are one configuration; `#` comments): candidates must agree with everything the IR
    already fixes (K and L of `#pig.lsh`, head dim, element type of the keys and values).
    Exactly one must remain. The configuration is then checked against what kernels exist for
    (K in [1, 16], L in [1, 1024], t <= L, d in {64, 128}, f32, bf16 or q8; q8, the 8-bit
    `!pig.q8` keys and values of a step whose queries stay float, needs d a multiple of 32);
    an element type no kernel exists for (a manifest's `q4`) is an error naming the manifest
    line and the element types that exist. Every `?` K and L in
    attributes, codes and index types is replaced by its value, a `?` head dim (the last dim
    of the queries, keys and values) becomes d in the signature and every tensor derived from
    it (slices, pig op results, the function's results), and the function gets
    `pig.kernel = #pig.kernel<...>`.
  }];
  let options = [
    Option<"k", "k", "int64_t", "0", "bits per table K (0: from the IR or the manifest)">,
    Option<"l", "l", "int64_t", "0", "number of tables L (0: from the IR or the manifest)">,
    Option<"d", "d", "int64_t", "0", "head dim (0: from the IR or the manifest)">,
    Option<"dtype", "dtype", "std::string", "\"\"", "element type of keys and values: f32, bf16 or q8 (!pig.q8)">,
    Option<"manifest", "manifest", "std::string", "\"\"",
           "file listing the kernel configurations that exist">,
  ];
}

def PigPartition : Pass<"pig-partition", "::mlir::ModuleOp"> {
  let summary = "place each pig op on the cpu or the gpu and insert transfers";
  let description = [{
    `target=cpu`: every pig op gets `pig.device = #pig.device<cpu>`. `target=cpu+gpu` (or
    `gpu`): the paper's partition: center, encode, the dense attention over the static tokens
    and the merge run on the GPU; the index, retrieval and the sampled softmax on the CPU.
    A `pig.transfer` is inserted (once per value and destination) wherever a value produced on
    one device is used on the other. Function arguments and non-pig ops are not placed: the
    runtime makes arguments available where they are used.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"",
           "target description: cpu, or cpu+gpu (also written gpu)">,
  ];
}

def PigFuse : Pass<"pig-fuse", "::mlir::ModuleOp"> {
  let summary = "fuse what streams the same data";
  let description = [{
    - `pig.collision_prob` + `pig.weighted_softmax` over the same query and sample set, with
      keys centered by `pig.center`, become one `pig.sampled_softmax_fused`: one pass over the
      sampled rows.
    - The one-row `pig.encode`s of all query heads of a GQA group (slices of the same block,
      covering it) become one encode of the block; each `pig.query` then reads its row.
    Ops are fused only when they are placed on the same device.
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def PigSchedule : Pass<"pig-schedule", "::mlir::ModuleOp"> {
  let summary = "attach the kernels' schedule (#pig.schedule) to every specialised function";
  let description = [{
    Runs after `pig-specialize` (it needs the function's `pig.kernel`), usually last, after
    `pig-fuse`. Every function that uses pig ops gets `pig.schedule = #pig.schedule<...>`
    (an existing one is replaced), chosen from, in this order:
    1. `schedule=`: an explicit schedule, knobs as in a manifest line
       (`schedule=gqa=union,block=32`: `knob=value` items separated by commas or spaces; the
       others take their defaults);
    2. pig-tune's speed records in `record=<file>` (JSON Lines, docs/TUNING.md and
       spec/include/pig/spec/tuning_record.h) for the function's kernel key
       (`K=10 L=150 d=64 bf16`; element type f32, bf16 or q8), measured on this machine's
       hardware (CPU model, cores and L3 of the fingerprint; `machine=` overrides it): of the
       whole-step records at the largest context and thread count, the fastest;
    3. the default heuristic (`defaultSchedule` in passes/lib/Schedule.cpp), by head dim and
       GQA group size.
    A remark on each function says which schedule was chosen and from where. A record file that
    cannot be read or a record with an illegal knob is an error; a line that is not a record
    (pig-tune's loader skips the same lines) is a warning; records for the function's key but
    only for other hardware give a warning, and the default heuristic decides.
  }];
  let options = [
    Option<"record", "record", "std::string", "\"\"",
           "pig-tune's records (JSON Lines, docs/TUNING.md)">,
    Option<"schedule", "schedule", "std::string", "\"\"",
           "explicit schedule, e.g. gqa=union,block=32 (overrides records and the default)">,
    Option<"machine", "machine", "std::string", "\"\"",
           "cpu|target|cores|threads|l3_bytes; records must match its cpu, cores, L3 (default: this machine)">,
  ];
}

#endif // PIG_PASSES_PASSES_TD
