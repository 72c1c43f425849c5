/* An engine in C over pig.h: one kv-head's keys arrive as a paged cache (blocks of 16 rows in a
 * shuffled block table, as vLLM's), pig indexes them, the index is extended as decode steps add
 * rows, and each step attends a GQA group of 2 query heads with MagicPIG and exactly. Checks:
 * pig_attend_dense equals this file's scalar softmax (its own oracle), the sampled tokens are
 * in range and ascending, MagicPIG's output is finite and repeats bit for bit, and every error
 * return it provokes names its cause. Exits non-zero on any failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pig.h"

enum { D = 64, G = 2, BLOCK = 16, PROMPT = 1000, STEPS = 24, N = PROMPT + STEPS };
enum { BLOCKS = (N + BLOCK - 1) / BLOCK };

static unsigned long long state = 88172645463325252ull;
static float uniform(void) { /* xorshift64, in [-1, 1) */
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (float)((state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int failures = 0;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAILED: " __VA_ARGS__);                                                     \
      fprintf(stderr, " (%s)\n", pig_last_error());                                                \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* Softmax attention of q over rows [0, n) read through the block table: the oracle. */
static void oracle(const float *q, const float *k, const float *v, const int *table, size_t n,
                   double *out) {
  double mx = -INFINITY, sum = 0, *s = malloc(n * sizeof *s);
  for (size_t i = 0; i < n; ++i) {
    const float *ki = k + ((size_t)table[i / BLOCK] * BLOCK + i % BLOCK) * D;
    double dot = 0;
    for (int j = 0; j < D; ++j)
      dot += (double)q[j] * ki[j];
    s[i] = dot / sqrt((double)D);
    if (s[i] > mx)
      mx = s[i];
  }
  for (int j = 0; j < D; ++j)
    out[j] = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = exp(s[i] - mx);
    const float *vi = v + ((size_t)table[i / BLOCK] * BLOCK + i % BLOCK) * D;
    sum += p;
    for (int j = 0; j < D; ++j)
      out[j] += p * vi[j];
  }
  for (int j = 0; j < D; ++j)
    out[j] /= sum;
  free(s);
}

int main(void) {
  printf("pig %s\n", pig_version());
  /* the cache: BLOCKS blocks of BLOCK rows, handed out in a shuffled order */
  float *k = malloc(sizeof(float) * BLOCKS * BLOCK * D),
        *v = malloc(sizeof(float) * BLOCKS * BLOCK * D);
  int table[BLOCKS];
  for (int b = 0; b < BLOCKS; ++b)
    table[b] = b;
  for (int b = BLOCKS - 1; b > 0; --b) {
    const int j = (int)((uniform() + 1.0f) * 0.5f * (float)b), t = table[b];
    table[b] = table[j];
    table[j] = t;
  }
  float offset[D];
  for (int j = 0; j < D; ++j)
    offset[j] = 1.5f * uniform();
  for (size_t i = 0; i < (size_t)BLOCKS * BLOCK * D; ++i) {
    k[i] = offset[i % D] + uniform();
    v[i] = uniform();
  }
  pig_rows keys = {k, PIG_F32, D, PROMPT, 0, table, BLOCKS, BLOCK, BLOCK * D * sizeof(float)};
  pig_rows values = keys;
  values.data = v;

  pig_lsh_config cfg;
  pig_lsh_config_default(&cfg);
  pig_index *index = NULL;
  CHECK(pig_index_build(&cfg, &keys, N, &index) == PIG_OK, "pig_index_build");
  if (!index)
    return 1;

  float q[G * D], out[G * D], again[G * D], exact[G * D];
  uint32_t tokens[N];
  size_t count = 0, sampled = 0;
  double worst = 0;
  for (int step = 0; step < STEPS; ++step) {
    keys.n = values.n = PROMPT + (size_t)step + 1; /* the step's own row joins the cache */
    CHECK(pig_index_extend(index, &keys) == PIG_OK, "pig_index_extend at step %d", step);
    for (int j = 0; j < G * D; ++j)
      q[j] = 0.5f * uniform();
    CHECK(pig_attend_sampled(index, q, G, 0.0f, &keys, &values, out, NULL) == PIG_OK,
          "pig_attend_sampled");
    CHECK(pig_attend_sampled(index, q, G, 0.0f, &keys, &values, again, NULL) == PIG_OK &&
              memcmp(out, again, sizeof out) == 0,
          "MagicPIG repeats bit for bit");
    CHECK(pig_index_retrieve(index, q, G, tokens, NULL, N, &count) == PIG_OK, "retrieve");
    sampled += count;
    for (size_t i = 0; i < count; ++i)
      CHECK(tokens[i] < keys.n && (i == 0 || tokens[i - 1] < tokens[i]), "token %u", tokens[i]);
    for (int j = 0; j < G * D; ++j)
      CHECK(isfinite(out[j]), "MagicPIG's output is finite");
    CHECK(pig_attend_dense(q, G, 0.0f, &keys, &values, 0, keys.n, exact, NULL) == PIG_OK,
          "pig_attend_dense");
    for (int h = 0; h < G; ++h) {
      double want[D];
      oracle(q + h * D, k, v, table, keys.n, want);
      for (int j = 0; j < D; ++j) {
        const double e = fabs(exact[h * D + j] - want[j]);
        if (e > worst)
          worst = e;
      }
    }
  }
  CHECK(worst < 1e-5, "dense attention off by %g", worst);
  pig_index_info info;
  pig_index_info_get(index, &info);
  printf("%d steps over %zu rows: dense max |pig - oracle| %.3g; MagicPIG sampled %.1f%% of %zu "
         "indexed rows a step; index %zu bytes\n",
         STEPS, info.n, worst, 100.0 * (double)sampled / STEPS / (double)info.indexed, info.indexed,
         info.bytes);

  /* errors: each a status and a message */
  pig_rows short_table = keys;
  short_table.n_blocks = 3;
  CHECK(pig_index_extend(index, &short_table) == PIG_ERR_RANGE &&
            strstr(pig_last_error(), "block table") != NULL,
        "a too-short block table is refused");
  CHECK(pig_attend_sampled(NULL, q, G, 0.0f, &keys, &values, out, NULL) == PIG_ERR_NULL,
        "a NULL index is refused");
  pig_index_free(index);
  free(k);
  free(v);
  printf(failures ? "%d check(s) failed\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}
