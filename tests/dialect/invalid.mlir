// RUN: pig-opt %s -split-input-file -verify-diagnostics

// Every verifier error of the pig dialect, one case per split.

//===----------------------------------------------------------------------===//
// Attributes and types: K in [1, 16] (uint16 codes), L in [1, 1024], t in [1, L].
//===----------------------------------------------------------------------===//

func.func @k_too_large(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{K = 17 is outside [1, 16]}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 17, l = 150, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x17>
  return
}

// -----

func.func @k_zero(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{K = 0 is outside [1, 16]}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 0, l = 150, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @l_too_large(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{L = 1025 is outside [1, 1024]}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 1025, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @l_below_t(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{L = 1 is smaller than the collision threshold t = 2}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 1, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x1x10>
  return
}

// -----

func.func @t_zero(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{collision threshold t = 0 must be at least 1}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 0, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

// expected-error @+1 {{K = 17 is outside [1, 16]}}
func.func @codes_k_too_large(%c: !pig.codes<?x150x17>) {
  return
}

// -----

// expected-error @+1 {{L = 0 is outside [1, 1024]}}
func.func @index_no_tables(%i: !pig.index<0x10>) {
  return
}

// -----

// expected-error @+1 {{expected 3 dimensions}}
func.func @codes_rank(%c: !pig.codes<150x10>) {
  return
}

// -----

func.func @negative_static(%c: !pig.codes<?x150x10>) {
  // expected-error @+1 {{static token counts must be non-negative}}
  %i = pig.build_index %c {static_tokens = #pig.static<sink = -1, local = 64>} : !pig.codes<?x150x10> -> !pig.index<150x10>
  return
}

// -----

func.func @unknown_device(%c: !pig.codes<?x150x10>) {
  // expected-error @+1 {{unknown device 'tpu' (expected cpu or gpu)}}
  %m = pig.transfer %c {from = #pig.device<tpu>, to = #pig.device<cpu>} : !pig.codes<?x150x10>
  return
}

// -----

func.func @device_attr_kind(%c: !pig.codes<?x150x10>) {
  // expected-error @+1 {{'pig.device' must be a #pig.device attribute}}
  %i = pig.build_index %c {pig.device = "gpu"} : !pig.codes<?x150x10> -> !pig.index<150x10>
  return
}

// -----

// expected-error @+1 {{'pig.kernel' must be a #pig.kernel attribute}}
func.func @kernel_attr_kind() attributes {pig.kernel = 3} {
  return
}

// -----

// expected-error @+1 {{unknown pig attribute 'pig.colour'}}
func.func @unknown_pig_attr() attributes {pig.colour = 3} {
  return
}

// -----

//===----------------------------------------------------------------------===//
// #pig.schedule: every knob's legal values (runtime/include/pig/runtime/lsh_schedule.h).
//===----------------------------------------------------------------------===//

// expected-error @+1 {{schedule knob 'block' = 48 is illegal (rows per softmax block: 16, 32, 64 or 128)}}
func.func @block_not_pow2() attributes {pig.schedule = #pig.schedule<block = 48>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'block' = 256 is illegal (rows per softmax block: 16, 32, 64 or 128)}}
func.func @block_too_large() attributes {pig.schedule = #pig.schedule<block = 256>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'gqa' = 2 is illegal (0 = per_head, 1 = union: how a GQA group attends its sampled rows)}}
func.func @gqa_out_of_range() attributes {pig.schedule = #pig.schedule<gqa = 2>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'prefetch' = 65 is illegal (sampled rows prefetched ahead, 0..64)}}
func.func @prefetch_too_far() attributes {pig.schedule = #pig.schedule<prefetch = 65>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'prefetch' = 5000000000 is illegal (sampled rows prefetched ahead, 0..64)}}
func.func @prefetch_beyond_int() attributes {pig.schedule = #pig.schedule<prefetch = 5000000000>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'dense_prefetch' = -1 is illegal (dense rows prefetched ahead, 0..256)}}
func.func @dense_prefetch_negative() attributes {pig.schedule = #pig.schedule<dense_prefetch = -1>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'tables_ahead' = 65 is illegal (bucket lists prefetched ahead in retrieval, 0..64)}}
func.func @tables_ahead_too_far() attributes {pig.schedule = #pig.schedule<tables_ahead = 65>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'parts' = 9 is illegal (ranges of one kv-head's sampled pass, 0 = automatic, 1..8)}}
func.func @parts_too_many() attributes {pig.schedule = #pig.schedule<parts = 9>} {
  return
}

// -----

// expected-error @+1 {{unknown schedule knob 'colour' (gqa, block, prefetch, dense_prefetch, tables_ahead, parts)}}
func.func @unknown_knob() attributes {pig.schedule = #pig.schedule<colour = 3>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'block' is given twice}}
func.func @knob_twice() attributes {pig.schedule = #pig.schedule<block = 32, block = 64>} {
  return
}

// -----

// expected-error @+1 {{schedule knob 'gqa' expects per_head or union, got 'shared'}}
func.func @gqa_unknown_strategy() attributes {pig.schedule = #pig.schedule<gqa = shared>} {
  return
}

// -----

// expected-error @+1 {{'pig.schedule' must be a #pig.schedule attribute}}
func.func @schedule_attr_kind() attributes {pig.schedule = #pig.kernel<k = 10, l = 150, d = 128, dtype = bf16>} {
  return
}

// -----

func.func @schedule_on_an_op(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{'pig.schedule' belongs on a function (the schedule of its kernels)}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, pig.schedule = #pig.schedule<>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

//===----------------------------------------------------------------------===//
// pig.center
//===----------------------------------------------------------------------===//

// -----

func.func @center_rank(%k: tensor<2x?x64xbf16>) {
  // expected-error @+1 {{keys must have rank 2}}
  %c, %m = pig.center %k : tensor<2x?x64xbf16> -> tensor<2x?x64xbf16>, tensor<1x64xf32>
  return
}

// -----

func.func @center_type(%k: tensor<?x64xbf16>) {
  // expected-error @+1 {{centered keys must have the type of the keys}}
  %c, %m = pig.center %k : tensor<?x64xbf16> -> tensor<?x64xf32>, tensor<1x64xf32>
  return
}

// -----

func.func @center_mean(%k: tensor<?x64xbf16>) {
  // expected-error @+1 {{mean must be 1 x d}}
  %c, %m = pig.center %k : tensor<?x64xbf16> -> tensor<?x64xbf16>, tensor<1x128xf32>
  return
}

//===----------------------------------------------------------------------===//
// pig.encode, pig.build_index, pig.query
//===----------------------------------------------------------------------===//

// -----

func.func @encode_element_type(%x: tensor<1x64xf64>) {
  // expected-error @+1 {{input has unsupported element type 'f64' (supported: f32, bf16, f16, !pig.q8)}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xf64> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @encode_rows(%x: tensor<4x64xf32>) {
  // expected-error @+1 {{produces 1 rows of codes for 4 input rows}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<4x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @encode_config(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{result has L = 150, K = 8 but expected L = 150, K = 10}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : tensor<1x64xf32> -> !pig.codes<1x150x8>
  return
}

// -----

func.func @build_index_config(%c: !pig.codes<?x150x10>) {
  // expected-error @+1 {{index has L = 75, K = 10 but expected L = 150, K = 10}}
  %i = pig.build_index %c : !pig.codes<?x150x10> -> !pig.index<75x10>
  return
}

// -----

func.func @query_config(%i: !pig.index<150x10>, %c: !pig.codes<1x150x9>) {
  // expected-error @+1 {{query codes has L = 150, K = 9 but expected L = 150, K = 10}}
  %ids = pig.query %i, %c[0] threshold 2 : (!pig.index<150x10>, !pig.codes<1x150x9>) -> tensor<?xi32>
  return
}

// -----

func.func @query_l_below_t(%i: !pig.index<2x10>, %c: !pig.codes<1x2x10>) {
  // expected-error @+1 {{L = 2 is smaller than the collision threshold t = 3}}
  %ids = pig.query %i, %c[0] threshold 3 : (!pig.index<2x10>, !pig.codes<1x2x10>) -> tensor<?xi32>
  return
}

// -----

func.func @query_t_zero(%i: !pig.index<150x10>, %c: !pig.codes<1x150x10>) {
  // expected-error @+1 {{collision threshold t = 0 must be at least 1}}
  %ids = pig.query %i, %c[0] threshold 0 : (!pig.index<150x10>, !pig.codes<1x150x10>) -> tensor<?xi32>
  return
}

// -----

func.func @query_row(%i: !pig.index<150x10>, %c: !pig.codes<2x150x10>) {
  // expected-error @+1 {{row 2 is outside the 2 rows of the query codes}}
  %ids = pig.query %i, %c[2] threshold 2 : (!pig.index<150x10>, !pig.codes<2x150x10>) -> tensor<?xi32>
  return
}

//===----------------------------------------------------------------------===//
// pig.collision_prob, pig.weighted_softmax, pig.sampled_softmax_fused
//===----------------------------------------------------------------------===//

// -----

func.func @prob_rows(%q: tensor<2x64xf32>, %k: tensor<?x64xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{query must be one row (1 x d)}}
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<2x64xf32>, tensor<?x64xf32>, tensor<?xi32>) -> tensor<?xf32>
  return
}

// -----

func.func @prob_head_dims(%q: tensor<1x64xf32>, %k: tensor<?x128xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{head dims disagree: query 64, keys 128}}
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x128xf32>, tensor<?xi32>) -> tensor<?xf32>
  return
}

// -----

func.func @prob_count(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %ids: tensor<8xi32>) {
  // expected-error @+1 {{needs one probability per sampled id}}
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<8xi32>) -> tensor<7xf32>
  return
}

// -----

func.func @softmax_value_dim(%q: tensor<1x64xbf16>, %k: tensor<?x64xbf16>, %v: tensor<?x128xbf16>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{head dims disagree: query 64, keys 64, values 128}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xbf16>, tensor<?x64xbf16>, tensor<?x128xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

func.func @softmax_mixed_types(%q: tensor<1x64xf32>, %k: tensor<?x64xbf16>, %v: tensor<?x64xbf16>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{query, keys and values must share one element type}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

// q8 keys and values take float queries, but keys and values agree with each other.
func.func @softmax_q8_keys_bf16_values(%q: tensor<1x64xf32>, %k: tensor<?x64x!pig.q8>, %v: tensor<?x64xbf16>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{query, keys and values must share one element type (or keys and values be !pig.q8), got 'f32', '!pig.q8', 'bf16'}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64x!pig.q8>, tensor<?x64xbf16>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

// Queries are never 8-bit.
func.func @softmax_q8_query(%q: tensor<1x64x!pig.q8>, %k: tensor<?x64x!pig.q8>, %v: tensor<?x64x!pig.q8>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{query has unsupported element type '!pig.q8' (supported: f32, bf16, f16; !pig.q8 is for keys and values only)}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<?x64x!pig.q8>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

func.func @softmax_tokens(%q: tensor<1x64xf32>, %k: tensor<10x64xf32>, %v: tensor<12x64xf32>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{disagree on their leading dims}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<10x64xf32>, tensor<12x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

func.func @softmax_output(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{output must be 1x64 (query rows x head dim)}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x32xf32>, tensor<1xf32>)
  return
}

// -----

func.func @softmax_lse(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %ids: tensor<?xi32>, %u: tensor<?xf32>) {
  // expected-error @+1 {{lse must have one entry per query row (1)}}
  %o, %l = pig.weighted_softmax %q, %k, %v, %ids, %u : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?xi32>, tensor<?xf32>) -> (tensor<1x64xf32>, tensor<2xf32>)
  return
}

// -----

func.func @fused_mean(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %m: tensor<1x128xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{mean must be 1 x 64}}
  %o, %l = pig.sampled_softmax_fused %q, %k, %v, %m, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<1x128xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

//===----------------------------------------------------------------------===//
// pig.dense_attention, pig.merge, pig.sampled_attention
//===----------------------------------------------------------------------===//

// -----

func.func @dense_rows(%q: tensor<4x64xf16>, %k: tensor<?x64xf16>, %v: tensor<?x64xf16>) {
  // expected-error @+1 {{output must be 4x64}}
  %o, %l = pig.dense_attention %q, %k, %v : (tensor<4x64xf16>, tensor<?x64xf16>, tensor<?x64xf16>) -> (tensor<1x64xf32>, tensor<4xf32>)
  return
}

// -----

func.func @dense_element_type(%q: tensor<4x64xi8>, %k: tensor<?x64xi8>, %v: tensor<?x64xi8>) {
  // expected-error @+1 {{query has unsupported element type 'i8'}}
  %o, %l = pig.dense_attention %q, %k, %v : (tensor<4x64xi8>, tensor<?x64xi8>, tensor<?x64xi8>) -> (tensor<4x64xf32>, tensor<4xf32>)
  return
}

// -----

// q8 rows are whole blocks of 32: a head dim of 80 cannot be stored.
func.func @dense_q8_head_dim(%q: tensor<4x80xf32>, %k: tensor<?x80x!pig.q8>, %v: tensor<?x80x!pig.q8>) {
  // expected-error @+1 {{keys is '!pig.q8': its head dim must be a multiple of 32 (whole q8 blocks), got 'tensor<?x80x!pig.q8>'}}
  %o, %l = pig.dense_attention %q, %k, %v : (tensor<4x80xf32>, tensor<?x80x!pig.q8>, tensor<?x80x!pig.q8>) -> (tensor<4x80xf32>, tensor<4xf32>)
  return
}

// -----

func.func @center_q8_head_dim(%k: tensor<?x80x!pig.q8>) {
  // expected-error @+1 {{keys is '!pig.q8': its head dim must be a multiple of 32}}
  %c, %m = pig.center %k : tensor<?x80x!pig.q8> -> tensor<?x80x!pig.q8>, tensor<1x80xf32>
  return
}

// -----

func.func @sampled_q8_head_dim(%q: tensor<8x80xf32>, %k: tensor<2x?x80x!pig.q8>, %v: tensor<2x?x80x!pig.q8>) {
  // expected-error @+1 {{keys is '!pig.q8': its head dim must be a multiple of 32 (whole q8 blocks), got 'tensor<2x?x80x!pig.q8>'}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x80xf32>, tensor<2x?x80x!pig.q8>, tensor<2x?x80x!pig.q8>) -> (tensor<8x80xf32>, tensor<8xf32>)
  return
}

// -----

func.func @merge_rank(%o: tensor<64xf32>, %l: tensor<1xf32>) {
  // expected-error @+1 {{partial outputs must be rows x d}}
  %r, %rl = pig.merge %o, %l, %o, %l : tensor<64xf32>, tensor<1xf32>
  return
}

// -----

func.func @merge_lse(%o: tensor<2x64xf32>, %l: tensor<1xf32>) {
  // expected-error @+1 {{lse must have one entry per query row (2)}}
  %r, %rl = pig.merge %o, %l, %o, %l : tensor<2x64xf32>, tensor<1xf32>
  return
}

// -----

func.func @gqa_divides(%q: tensor<9x64xbf16>, %k: tensor<2x?x64xbf16>, %v: tensor<2x?x64xbf16>) {
  // expected-error @+1 {{GQA: 9 query heads cannot be grouped over 2 kv-heads (the group size must divide)}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<9x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<9x64xf32>, tensor<9xf32>)
  return
}

// -----

func.func @composite_head_dims(%q: tensor<8x64xbf16>, %k: tensor<2x?x128xbf16>, %v: tensor<2x?x128xbf16>) {
  // expected-error @+1 {{head dims disagree: query 64, keys 128, values 128}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x64xbf16>, tensor<2x?x128xbf16>, tensor<2x?x128xbf16>) -> (tensor<8x64xf32>, tensor<8xf32>)
  return
}

// -----

func.func @composite_dynamic_heads(%q: tensor<?x64xbf16>, %k: tensor<2x?x64xbf16>, %v: tensor<2x?x64xbf16>) {
  // expected-error @+1 {{needs static head counts}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<?x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<?x64xf32>, tensor<?xf32>)
  return
}

// -----

func.func @composite_kv_rank(%q: tensor<8x64xbf16>, %k: tensor<?x64xbf16>, %v: tensor<?x64xbf16>) {
  // expected-error @+1 {{keys must have rank 3}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0>, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>) -> (tensor<8x64xf32>, tensor<8xf32>)
  return
}

//===----------------------------------------------------------------------===//
// #pig.lsh's hash transform: a pig::ref::TransformSpec, valid for the head dim of the op.
//===----------------------------------------------------------------------===//

// -----

func.func @transform_unknown(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{hash transform 'rotate': unknown transform 'rotate' (accepted: plain, pca:r=R, whiten[:a=A], mips[:q=Q]}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "rotate">} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @transform_whiten_out_of_range(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{hash transform 'whiten:a=2': a must be in (0, 1]}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "whiten:a=2">} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @transform_mips_first(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{hash transform 'mips:q=0.9+whiten:a=0.25': mips must come last}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "mips:q=0.9+whiten:a=0.25">} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @transform_not_a_string(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{expected string}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = whiten>} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @transform_other_keyword(%x: tensor<1x64xf32>) {
  // expected-error @+1 {{expected 'transform'}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, space = "whiten">} : tensor<1x64xf32> -> !pig.codes<1x150x10>
  return
}

// -----

func.func @transform_pca_rank_above_d_encode(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{'pig.encode' op hash transform "pca:r=65" is invalid for head dim d = 64: hash transform pca: r must be in [1, 64] (the head dim), got 65}}
  %c = pig.encode %x {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=65">} : tensor<?x64xf32> -> !pig.codes<?x150x10>
  return
}

// -----

func.func @transform_pca_rank_above_d_collision_prob(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'pig.collision_prob' op hash transform "pca:r=65+mips:q=0.9" is invalid for head dim d = 64}}
  %u = pig.collision_prob %q, %k, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=65+mips:q=0.9">} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?xi32>) -> tensor<?xf32>
  return
}

// -----

func.func @transform_pca_rank_above_d_fused(%q: tensor<1x64xf32>, %k: tensor<?x64xf32>, %v: tensor<?x64xf32>, %m: tensor<1x64xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{'pig.sampled_softmax_fused' op hash transform "pca:r=128" is invalid for head dim d = 64}}
  %o, %l = pig.sampled_softmax_fused %q, %k, %v, %m, %ids {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=128">} : (tensor<1x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<1x64xf32>, tensor<?xi32>) -> (tensor<1x64xf32>, tensor<1xf32>)
  return
}

// -----

func.func @transform_pca_rank_above_d_composite(%q: tensor<8x64xbf16>, %k: tensor<2x?x64xbf16>, %v: tensor<2x?x64xbf16>) {
  // expected-error @+1 {{'pig.sampled_attention' op hash transform "pca:r=100" is invalid for head dim d = 64}}
  %o, %l = pig.sampled_attention %q, %k, %v {lsh = #pig.lsh<k = 10, l = 150, t = 2, seed = 0, transform = "pca:r=100">, static_tokens = #pig.static<sink = 4, local = 64>} : (tensor<8x64xbf16>, tensor<2x?x64xbf16>, tensor<2x?x64xbf16>) -> (tensor<8x64xf32>, tensor<8xf32>)
  return
}

//===----------------------------------------------------------------------===//
// pig.hybrid_select
//===----------------------------------------------------------------------===//

// -----

func.func @hybrid_codes_mismatch(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x9>, %n: tensor<?xf32>) {
  // expected-error @+1 {{token codes has L = 150, K = 9 but expected L = 150, K = 10}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x9>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_row(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{row 1 is outside the 1 rows of the query codes}}
  %ids, %pi = pig.hybrid_select %qc[1], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_norms(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<8x150x10>, %n: tensor<7xf32>) {
  // expected-error @+1 {{needs one norm per token: 8 tokens}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<8x150x10>, tensor<7xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_budget(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{budget must be in (0, 1], got 1.5}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 1.5 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_head(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{head share must be in [0, 1], got -5.000000e-01}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = -0.5 : f64, floor = 0.1 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_floor(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{floor must be in (0, 1], got 0}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.0 : f64, rank = "hamming", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_rank(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{rank must be "hamming" or "collisions", got "cosine"}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "cosine", bits = 0 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_bits_collisions(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{bits must be >= 0 and only with rank "hamming", got 64}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "collisions", bits = 64 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @hybrid_bits_above_kl(%qc: !pig.codes<1x150x10>, %kc: !pig.codes<?x150x10>, %n: tensor<?xf32>) {
  // expected-error @+1 {{bits = 1501 but the codes hold K L = 1500}}
  %ids, %pi = pig.hybrid_select %qc[0], %kc, %n {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, rank = "hamming", bits = 1501 : i64, seed = 1 : i64} : (!pig.codes<1x150x10>, !pig.codes<?x150x10>, tensor<?xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

//===----------------------------------------------------------------------===//
// pig.quant_select
//===----------------------------------------------------------------------===//

// -----

func.func @quant_kbits(%q: tensor<1x64xf32>, %c: tensor<?x64xf32>) {
  // expected-error @+1 {{'pig.quant_select' op kbits must be 4 or 8, got 5}}
  %ids, %pi = pig.quant_select %q, %c {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, kbits = 5 : i64, seed = 1 : i64} : (tensor<1x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @quant_dims(%q: tensor<1x64xf32>, %c: tensor<?x32xf32>) {
  // expected-error @+1 {{'pig.quant_select' op head dims disagree: query 64, centered keys 32}}
  %ids, %pi = pig.quant_select %q, %c {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, kbits = 4 : i64, seed = 1 : i64} : (tensor<1x64xf32>, tensor<?x32xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @quant_two_rows(%q: tensor<2x64xf32>, %c: tensor<?x64xf32>) {
  // expected-error @+1 {{'pig.quant_select' op query must be one row (1 x d), got 'tensor<2x64xf32>'}}
  %ids, %pi = pig.quant_select %q, %c {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.1 : f64, kbits = 4 : i64, seed = 1 : i64} : (tensor<2x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}

// -----

func.func @quant_floor(%q: tensor<1x64xf32>, %c: tensor<?x64xf32>) {
  // expected-error @+1 {{'pig.quant_select' op floor must be in (0, 1], got 0}}
  %ids, %pi = pig.quant_select %q, %c {budget = 0.05 : f64, head = 0.25 : f64, floor = 0.0 : f64, kbits = 4 : i64, seed = 1 : i64} : (tensor<1x64xf32>, tensor<?x64xf32>) -> (tensor<?xi32>, tensor<?xf32>)
  return
}
