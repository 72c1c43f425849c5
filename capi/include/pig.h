/* pig.h: pig's C interface. LSH sampling attention (MagicPIG) over one kv-head's key and value
 * rows, for engines that are not C++ (C, Rust, Go, a llama.cpp fork): build an LSH index over a
 * kv-head's keys, extend it as tokens arrive, retrieve the tokens a query group samples, attend
 * (sampled or dense), free. Link libpig.so (CMake: find_package(pig CONFIG), target pig::c;
 * pkg-config: pig-c). docs/C_API.md is the reference, with a worked example.
 *
 * Conventions
 * - Every function returns a pig_status; PIG_OK is 0. On failure the calling thread's message is
 *   pig_last_error() (until that thread's next call); no C++ exception crosses this interface.
 * - Handles are opaque (pig_index); the caller owns every buffer and keeps the rows an index was
 *   built from alive and unchanged while it uses the index (the index stores ids, not rows).
 * - Element types are explicit (pig_dtype); queries and outputs are float32.
 * - Threads: calls on one pig_index must not overlap (it holds the scratch of retrieval);
 *   different indexes may be used from different threads at once. pig_attend_dense,
 *   pig_lsh_config_default, pig_version and pig_last_error are thread-safe.
 */
#ifndef PIG_H
#define PIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define PIG_API
#else
#define PIG_API __attribute__((visibility("default")))
#endif

typedef enum pig_status {
  PIG_OK = 0,
  PIG_ERR_NULL = 1,    /* a required pointer or handle is NULL */
  PIG_ERR_INVALID = 2, /* an impossible configuration or argument (K, L, t, d, group, scale) */
  PIG_ERR_DTYPE = 3,   /* an element type pig does not read, or not the index's */
  PIG_ERR_RANGE = 4,   /* rows out of range: too few or too many, a block table too short,
                          a negative block, an output buffer too small */
  PIG_ERR_MEMORY = 5,  /* an allocation failed */
  PIG_ERR_INTERNAL = 6 /* anything else (a bug: the message says what) */
} pig_status;

typedef enum pig_dtype {
  PIG_F32 = 0,  /* float32 */
  PIG_BF16 = 1, /* bfloat16, as uint16_t bits */
  /* Not a type: makes the enum int-sized, so that any int a caller stores in a pig_dtype field is
   * a value pig can read and refuse (PIG_ERR_DTYPE), in C and C++ alike. */
  PIG_DTYPE_MAX_ENUM = 0x7fffffff
} pig_dtype;

/* n rows of d elements of one kv-head (keys, or values).
 * Contiguous (block_table NULL): row i starts at (char *)data + i * row_stride; row_stride 0 means
 *   d * element size (back to back).
 * Paged (block_table set, as vLLM's and pig's caches): row i is row i % block_tokens of block
 *   block_table[i / block_tokens], which starts at (char *)data + block * block_stride; a block's
 *   rows are back to back. n_blocks entries of block_table are readable, and must cover n rows. */
typedef struct pig_rows {
  const void *data;
  pig_dtype dtype;
  size_t d;
  size_t n;
  size_t row_stride;
  const int32_t *block_table;
  size_t n_blocks;
  size_t block_tokens;
  size_t block_stride;
} pig_rows;

/* MagicPIG's configuration: K bits per table, L tables, a token is sampled when it collides with
 * the query in at least t tables; the SimHash matrix's seed; sink and local tokens attended
 * exactly (never indexed); the centring mean over the first mean_window indexed keys (0: all). */
typedef struct pig_lsh_config {
  int K;
  int L;
  int t;
  uint64_t seed;
  size_t sink;
  size_t local;
  size_t mean_window;
} pig_lsh_config;

/* One kv-head's LSH index (opaque). */
typedef struct pig_index pig_index;

typedef struct pig_index_info {
  size_t n;        /* rows the index covers (indexed, sink and local) */
  size_t indexed;  /* of them, in the tables */
  size_t bytes;    /* the index's memory */
  size_t capacity; /* the most rows pig_index_extend may reach */
  int specialised; /* 1: kernels specialised for its (K, L, d, dtype) serve it; 0: generic */
} pig_index_info;

/* "0.1.0" */
PIG_API const char *pig_version(void);
/* The message of this thread's last failed call ("" if none). */
PIG_API const char *pig_last_error(void);
/* pig's defaults: K 10, L 150, t 2, pig's seed, sink 4, local 64, mean_window 0. */
PIG_API pig_status pig_lsh_config_default(pig_lsh_config *cfg);

/* Builds the index of keys' n rows (sink + local rows at least are not indexed), with room to
 * grow to `capacity` rows (0: n) without reallocating. *out is NULL on failure. */
PIG_API pig_status pig_index_build(const pig_lsh_config *cfg, const pig_rows *keys, size_t capacity,
                                   pig_index **out);
/* Extends the index to keys->n rows (they include the rows already indexed, unchanged; the local
 * window slides: rows leaving it are indexed). keys->n at most the capacity. */
PIG_API pig_status pig_index_extend(pig_index *index, const pig_rows *keys);
/* The tokens the `group` query heads q (group x d float32) sample: the union of their sample
 * sets, ascending, into tokens (at most capacity); masks (optional, may be NULL): bit h of
 * masks[i] set when head h sampled tokens[i]. *count is the union's size; when it exceeds
 * capacity, nothing is written and PIG_ERR_RANGE is returned with *count set. */
PIG_API pig_status pig_index_retrieve(pig_index *index, const float *q, size_t group,
                                      uint32_t *tokens, uint8_t *masks, size_t capacity,
                                      size_t *count);
/* MagicPIG attention of the group's heads: the sink and local rows exactly, the sampled tokens
 * weighted by 1 / their collision probability, in one softmax. keys and values: the index's n
 * rows, its dtype and d. scale 0: 1 / sqrt(d). out: group x d; lse (optional): group. */
PIG_API pig_status pig_attend_sampled(pig_index *index, const float *q, size_t group, float scale,
                                      const pig_rows *keys, const pig_rows *values, float *out,
                                      float *lse);
/* Exact attention of the group's heads over rows [begin, end) (end <= keys->n). */
PIG_API pig_status pig_attend_dense(const float *q, size_t group, float scale, const pig_rows *keys,
                                    const pig_rows *values, size_t begin, size_t end, float *out,
                                    float *lse);
PIG_API pig_status pig_index_info_get(const pig_index *index, pig_index_info *info);
/* Frees the index (NULL: nothing). */
PIG_API void pig_index_free(pig_index *index);

/* The kernel configurations served specialised, one manifest line each with every schedule knob
 * ("K=10 L=150 d=64 bf16 gqa=per_head block=64 ..."): those
 * built into libpig.so, then those pig_load_kernels loaded; into buf (at most len bytes,
 * NUL-terminated); *needed is the length with the NUL. Any other (K, L, d, dtype) runs pig's
 * generic kernels. */
PIG_API pig_status pig_kernel_configs(char *buf, size_t len, size_t *needed);
/* Loads a deployment's kernel library (a shared object built from tools/pig-kernel-tree's
 * output) and serves its configurations from then on, to indexes built after the call; *count:
 * how many (optional). The same path again loads nothing new. Fails with PIG_ERR_INVALID naming
 * the path when it cannot be loaded, has no pig_kernel_plugin entry point, or was built from
 * other pig headers. Not to be called while another thread uses pig. */
PIG_API pig_status pig_load_kernels(const char *path, size_t *count);

#ifdef __cplusplus
}
#endif
#endif /* PIG_H */
