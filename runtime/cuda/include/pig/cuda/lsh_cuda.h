// Host interface of the CUDA LSH kernels (pig_cuda). Plain C++: no CUDA header needed, so the
// runtime and the tests include it with the host compiler.
//
// Kernels are grouped per configuration (K, L, head dim, element type) in a CudaKernelSet of
// function pointers taking device pointers. The generic set (K, L, d at run time) is always
// there; the .cu files pig-translate emits (--emit=cuda) register specialised sets, which
// resolve_cuda_kernels() prefers. Entry points return a cudaError_t value (0 = success) and
// take the stream as `void *` (a cudaStream_t; null = the default stream).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pig/spec/kv_type.h"
#include "pig/spec/lsh_params.h"

namespace pig::cuda {

/// Number of usable CUDA devices; 0 on ANY error (no driver, insufficient driver: error 35 on
/// machines without a GPU, where cudaGetDeviceCount leaves its output untouched).
int device_count();

/// pig::spec's element types (pig/spec/kv_type.h). The CUDA kernels serve f32 and bf16 rows only:
/// there are no q8 kernels, and resolve_cuda_kernels refuses a q8 key.
using spec::DType;

/// (K, L) in the LshHash base (pig/spec/lsh_params.h); {K, L, d, dtype} initialises, as the
/// generated registrations write it.
struct CudaKernelKey : spec::LshHash {
  int d = 128;
  DType dtype = DType::bf16;
  friend bool operator==(const CudaKernelKey &, const CudaKernelKey &) = default;
  std::string str() const; ///< "K=10 L=150 d=128 bf16 cuda"
};

struct CudaKernelSet {
  bool specialised = false;
  /// mean[c] of rows [begin, end) of the n x d keys (double sums, rounded once).
  int (*center_mean)(const void *keys, std::int64_t begin, std::int64_t end, int d, float *mean,
                     void *stream) = nullptr;
  /// codes (n x L, token-major) of the rows of x (n x d), centered by `mean` when not null.
  /// W is d x ld (ld >= K*L), bit j of table l = x . W[:, l*K + j] > 0 (= pig::ref::encode).
  int (*encode)(const void *x, std::int64_t n, const float *mean, const float *W, std::int64_t ld,
                std::uint16_t *codes, int k, int l, int d, void *stream) = nullptr;
  /// Counting sort per table of `count` tokens' codes: offsets L x (2^K + 1), ids L x count
  /// (id_base + token, ascending inside a bucket).
  int (*build_index)(const std::uint16_t *codes, std::int64_t count, int k, int l,
                     std::int32_t id_base, std::int32_t *offsets, std::int32_t *ids,
                     void *stream) = nullptr;
  /// Exact attention of `heads` query rows (H x d) over kv-head h / (H / Hkv) of keys and values
  /// (Hkv x n x d): over the sink and local tokens when `windowed`, else all n. out H x d,
  /// lse H (natural log; -inf and a zero row when nothing is attended).
  int (*dense_attention)(const void *q, const void *keys, const void *values, int heads,
                         int kv_heads, std::int64_t n, int d, std::int64_t sink, std::int64_t local,
                         bool windowed, float *out, float *lse, void *stream) = nullptr;
  /// o = (e^a o_a + e^b o_b) / (e^a + e^b) per head (heads x d; out may alias out_a).
  int (*merge)(const float *out_a, const float *lse_a, const float *out_b, const float *lse_b,
               int heads, int d, float *out, float *lse, void *stream) = nullptr;
};

/// Registers a specialised set (a later registration of the same key replaces it).
void register_cuda_kernels(const CudaKernelKey &key, const CudaKernelSet &set);
/// The specialised set of `key` when registered, else the generic set of its dtype. Throws
/// std::invalid_argument for q8 (no CUDA kernels).
CudaKernelSet resolve_cuda_kernels(const CudaKernelKey &key);
std::vector<CudaKernelKey> registered_cuda_kernels();

/// Host-memory conveniences over resolve_cuda_kernels(key) (copy in, run, copy out, sync), for
/// tests and one-off use. They throw std::runtime_error with the CUDA error's text.
namespace host {
std::vector<float> center_mean(const CudaKernelKey &key, const void *keys, std::int64_t n,
                               std::int64_t begin, std::int64_t end);
std::vector<std::uint16_t> encode(const CudaKernelKey &key, const void *x, std::int64_t n,
                                  const float *mean, const float *W, std::int64_t ld);
struct BucketIndex {
  std::vector<std::int32_t> offsets; ///< L x (2^K + 1)
  std::vector<std::int32_t> ids;     ///< L x count
};
BucketIndex build_index(const CudaKernelKey &key, const std::uint16_t *codes, std::int64_t count,
                        std::int32_t id_base);
struct Attention {
  std::vector<float> out; ///< heads x d
  std::vector<float> lse; ///< heads
};
Attention dense_attention(const CudaKernelKey &key, const void *q, const void *keys,
                          const void *values, int heads, int kv_heads, std::int64_t n,
                          std::int64_t sink, std::int64_t local, bool windowed);
Attention merge(const CudaKernelKey &key, const Attention &a, const Attention &b);
} // namespace host

} // namespace pig::cuda
