/* kernel_tree_check LIBRARY: a deployment's kernel library (pig-kernel-tree's tree, built on its
 * own) loaded through pig.h serves its configurations: pig_load_kernels registers both lines of
 * the test's manifest (K=9 L=120 d=64 bf16, K=12 L=50 d=128 f32), pig_kernel_configs lists them,
 * an index of each configuration built after the load runs specialised kernels where one built
 * before ran the generic ones, and both give the same MagicPIG output within rounding. Loading a
 * file that is not a kernel library fails with a message naming it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pig.h"

static int failures = 0;
/* Counts a failed check and prints it with pig's last message. */
static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (%s)\n", what, pig_last_error());
    ++failures;
  }
}

static unsigned long long state = 1234567ull;
static float uniform(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (float)((state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static unsigned short bf16(float x) {
  unsigned int u;
  memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (unsigned short)(u >> 16);
}

/* MagicPIG of a 2-head group over n rows with (K, L); *specialised: whether specialised kernels
 * served it. */
static void attend(int K, int L, pig_dtype t, size_t d, const void *k, const void *v, size_t n,
                   const float *q, float *out, int *specialised) {
  pig_lsh_config cfg;
  pig_lsh_config_default(&cfg);
  cfg.K = K;
  cfg.L = L;
  pig_rows keys = {k, t, d, n, 0, NULL, 0, 0, 0}, values = keys;
  values.data = v;
  pig_index *ix = NULL;
  check(pig_index_build(&cfg, &keys, 0, &ix) == PIG_OK, "pig_index_build");
  if (!ix)
    return;
  check(pig_attend_sampled(ix, q, 2, 0.0f, &keys, &values, out, NULL) == PIG_OK,
        "pig_attend_sampled");
  pig_index_info info;
  pig_index_info_get(ix, &info);
  *specialised = info.specialised;
  pig_index_free(ix);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: kernel_tree_check LIBRARY\n");
    return 2;
  }
  enum { N = 1500 };
  static float k64[N * 64], v64[N * 64], k128[N * 128], v128[N * 128], q[2 * 128];
  static unsigned short kb[N * 64], vb[N * 64];
  for (size_t i = 0; i < N * 128; ++i) {
    k128[i] = (float)(i % 128) / 128.0f + uniform();
    v128[i] = uniform();
  }
  for (size_t i = 0; i < N * 64; ++i) {
    k64[i] = k128[i];
    v64[i] = v128[i];
    kb[i] = bf16(k64[i]);
    vb[i] = bf16(v64[i]);
  }
  for (int j = 0; j < 2 * 128; ++j)
    q[j] = 0.5f * uniform();

  float before9[2 * 64], after9[2 * 64], before12[2 * 128], after12[2 * 128];
  int s_before9 = -1, s_after9 = -1, s_before12 = -1, s_after12 = -1;
  attend(9, 120, PIG_BF16, 64, kb, vb, N, q, before9, &s_before9);
  attend(12, 50, PIG_F32, 128, k128, v128, N, q, before12, &s_before12);

  size_t count = 0;
  check(pig_load_kernels(argv[1], &count) == PIG_OK, "pig_load_kernels");
  check(count == 2, "the library serves the manifest's 2 configurations");
  size_t needed = 0;
  char list[4096];
  check(pig_kernel_configs(list, sizeof list, &needed) == PIG_OK, "pig_kernel_configs");
  check(strstr(list, "K=9 L=120 d=64 bf16") && strstr(list, "K=12 L=50 d=128 f32"),
        "pig_kernel_configs lists the library's configurations");

  attend(9, 120, PIG_BF16, 64, kb, vb, N, q, after9, &s_after9);
  attend(12, 50, PIG_F32, 128, k128, v128, N, q, after12, &s_after12);
  check(s_before9 == 0 && s_after9 == 1,
        "K=9 L=120 d=64 bf16: generic kernels before the load, specialised after");
  check(s_before12 == 0 && s_after12 == 1,
        "K=12 L=50 d=128 f32: generic kernels before the load, specialised after");
  double worst = 0;
  for (int j = 0; j < 2 * 64; ++j)
    worst = fmax(worst, fabs(before9[j] - after9[j]) / (1 + fabs(before9[j])));
  for (int j = 0; j < 2 * 128; ++j)
    worst = fmax(worst, fabs(before12[j] - after12[j]) / (1 + fabs(before12[j])));
  check(worst <= 1e-4, "specialised and generic kernels agree within 1e-4");

  /* the same library again: nothing new; something else: refused by name */
  check(pig_load_kernels(argv[1], &count) == PIG_OK && count == 2, "a second load");
  check(pig_load_kernels("/nonexistent/libkernels.so", NULL) == PIG_ERR_INVALID &&
            strstr(pig_last_error(), "/nonexistent/libkernels.so"),
        "a missing library is refused by name");
  printf("loaded 2 configurations; specialised after the load: %d, %d; max |specialised - "
         "generic| / (1 + |generic|) = %.3g\n%s",
         s_after9, s_after12, worst, list);
  printf(failures ? "%d check(s) failed\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}
