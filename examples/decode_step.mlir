// One decode step of one sparse layer, described once and specialised per deployment.
//
// 4 query heads share 2 kv-heads (GQA groups of 2), head dim 128, bf16 KV; K and L are left
// generic (`?`) and folded by pig-specialize. The fused CPU pipeline:
//
//   pig-opt examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" \
//       --pig-partition=target=cpu --pig-fuse
//
// With a GPU (hashing and the static-token attention on the GPU, retrieval and the sampled
// softmax on the CPU, explicit pig.transfer ops between them):
//
//   pig-opt examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" \
//       --pig-partition=target=cpu+gpu --pig-fuse
//
// Then pig-schedule attaches the kernels' schedule (#pig.schedule: GQA strategy, softmax block,
// prefetch distances, parts) from an explicit schedule, a tuning record for this machine or the
// default heuristic (docs/SCHEDULES.md), which pig-translate compiles in:
//
//   pig-opt examples/decode_step.mlir --pig-decompose --pig-specialize="k=10 l=150" \
//       --pig-partition=target=cpu --pig-fuse --pig-schedule="schedule=gqa=union,block=32"
//
// Checked by tests/passes/decode_step.test.
func.func @decode_step(%q: tensor<4x128xbf16>, %k: tensor<2x?x128xbf16>, %v: tensor<2x?x128xbf16>)
    -> (tensor<4x128xf32>, tensor<4xf32>) {
  %o, %lse = pig.sampled_attention %q, %k, %v {
      lsh = #pig.lsh<k = ?, l = ?, t = 2, seed = 0>,
      static_tokens = #pig.static<sink = 4, local = 64>}
      : (tensor<4x128xbf16>, tensor<2x?x128xbf16>, tensor<2x?x128xbf16>)
      -> (tensor<4x128xf32>, tensor<4xf32>)
  return %o, %lse : tensor<4x128xf32>, tensor<4xf32>
}
