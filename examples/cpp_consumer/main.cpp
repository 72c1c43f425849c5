// An installed pig from another program: dense and MagicPIG attention over a paged KV cache
// (pig::runtime), each checked against pig's scalar reference of the same algorithm (pig::ref).
// Prints what it measured and exits non-zero when an answer is off. Built by
// examples/cpp_consumer/CMakeLists.txt (find_package) or with pkg-config: c++ main.cpp $(pkg-config
// --cflags --libs pig).
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "pig/reference/reference.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/thread_pool.h"
#ifdef PIG_CONSUMER_GENERATED
#include "pig/runtime/generated_kernels.h"
#endif

namespace rt = pig::runtime;

int main() {
#ifdef PIG_CONSUMER_GENERATED
  std::printf("generated kernel configurations registered: %d\n", pig_register_generated_kernels());
#endif
  const size_t heads = 4, kv_heads = 2, d = 64, n = 2048;
  const rt::AttentionShape shape{1, heads, kv_heads, d, n};
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(n * kv_heads * d), v(k.size()), q(n * heads * d), out(q.size());
  for (auto *x : {&k, &v, &q})
    for (float &e : *x)
      e = nd(rng);
  rt::ThreadPool pool(2);
  int failures = 0;
  for (pig::spec::Method m : {pig::spec::Method::dense, pig::spec::Method::magicpig}) {
    rt::AttentionSpec spec;
    spec.method = m;
    spec.kv_dtype = rt::lsh::DType::f32;
    spec.dense_layers_set = true; // the one layer samples
    spec.dense_below = 0;
    spec.mean_window = 512; // the centring mean of the first 512 indexed keys, as pig::ref below
    auto attn = rt::MakeAttention(spec, shape);
    // A prompt of n - 1 positions, then one decode step (magicpig: its index built and used).
    attn->Forward(0, 0, n - 1, q.data(), k.data(), v.data(), out.data(), pool);
    const size_t last = n - 1;
    attn->Forward(0, last, 1, &q[last * heads * d], &k[last * kv_heads * d],
                  &v[last * kv_heads * d], out.data(), pool);
    const pig::ref::OwnedMatrix W = pig::ref::simhash_matrix(spec.seed, d, spec.K, spec.L);
    double worst = 0; // relative to 1 + |expected|
    for (size_t h = 0; h < heads; ++h) {
      pig::ref::OwnedMatrix K(n, d), V(n, d);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < d; ++j) {
          K.at(i, j) = k[(i * kv_heads + h / 2) * d + j];
          V.at(i, j) = v[(i * kv_heads + h / 2) * d + j];
        }
      const std::span<const float> qh{&q[(last * heads + h) * d], d};
      const std::vector<float> expect =
          m == pig::spec::Method::dense
              ? pig::ref::dense_attention(qh, K.view(), V.view()).out
              : pig::ref::magicpig_attention(
                    qh, K.view(), V.view(), W.view(),
                    pig::ref::LshConfig{spec.K, spec.L, spec.t, spec.seed},
                    pig::ref::StaticConfig{spec.sink, spec.local, spec.mean_window})
                    .attention.out;
      for (size_t j = 0; j < d; ++j)
        worst = std::max(worst, std::abs(double(out[h * d + j]) - double(expect[j])) /
                                    (1.0 + std::abs(double(expect[j]))));
    }
    const rt::AttentionStats st = attn->stats();
    // The kernels compute the reference's estimator in f32: rounding apart, the same output.
    std::printf("%-8s max |out - pig::ref| / (1 + |ref|) = %.3g (bound 2e-4), cost2 %.4f\n",
                pig::spec::name(m), worst, st.cost2());
    if (!(worst <= 2e-4))
      ++failures;
  }
  const auto set = rt::lsh::KernelRegistry::global().resolve(
      rt::lsh::KernelKey{10, 150, int(d), rt::lsh::DType::bf16, rt::lsh::Target::cpu});
  std::printf("kernels for K=10 L=150 d=64 bf16: %s\n",
              rt::lsh::KernelRegistry::describe(set).c_str());
  return failures == 0 ? 0 : 1;
}
