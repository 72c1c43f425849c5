// The CUDA kernels of one LSH sampling attention step, as templates on compile-time K, L and
// head dim D (0 = taken at run time), and their launchers. Included by runtime/cuda/src (the
// generic instantiations) and by the .cu files pig-translate emits (--emit=cuda), which
// instantiate make_cuda_kernel_set<K, L, D, T>() for each manifest configuration.
//
// The arithmetic of every element lives in lsh_math.h (host-testable); this file only lays
// threads over it. Layouts (all row-major, device pointers):
//   keys / values  Hkv x n x D (T = float or bf16), queries H x D (T), W  D x ld (float),
//   codes          rows x L uint16, token-major (pig::ref::encode_rows),
//   index          offsets L x (2^K + 1) int32, ids L x count int32 (bucket-sorted per table,
//                  ascending inside a bucket),
//   outputs        H x D float, lse H float (natural log).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pig/cuda/lsh_cuda.h"
#include "pig/cuda/lsh_math.h"

namespace pig::cuda {

namespace detail {
template <int kStatic> __device__ __forceinline__ int dim(int runtime) {
  return kStatic > 0 ? kStatic : runtime;
}
inline int ceil_div(std::int64_t a, std::int64_t b) { return int((a + b - 1) / b); }
} // namespace detail

// --- Centering: mean over the indexed tokens ----------------------------------------------

/// Rows per block of the column sums (each block writes one partial sum per column).
inline constexpr int kMeanRowsPerBlock = 256;

/// partial[b * D + c] = sum over rows [begin + b*R, ...) of keys[row, c], in double.
template <int kD, typename T>
__global__ void column_sum_kernel(const T *__restrict__ keys, std::int64_t begin, std::int64_t end,
                                  int d, double *__restrict__ partial) {
  const int D = detail::dim<kD>(d);
  const std::int64_t first = begin + std::int64_t(blockIdx.x) * kMeanRowsPerBlock;
  const std::int64_t last = first + kMeanRowsPerBlock < end ? first + kMeanRowsPerBlock : end;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    double sum = 0.0;
    for (std::int64_t r = first; r < last; ++r)
      sum += double(to_float(keys[r * D + c]));
    partial[std::int64_t(blockIdx.x) * D + c] = sum;
  }
}

/// mean[c] = (sum of the partials of column c, in block order) / count, rounded once.
/// (A template only so that every TU including this header may instantiate it.)
template <int = 0>
__global__ void mean_kernel(const double *__restrict__ partial, int blocks, int d,
                            std::int64_t count, float *__restrict__ mean) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= d)
    return;
  double sum = 0.0;
  for (int b = 0; b < blocks; ++b)
    sum += partial[std::int64_t(b) * d + c];
  mean[c] = mean_from_sum(sum, count);
}

template <int kD, typename T>
cudaError_t launch_center_mean(const T *keys, std::int64_t begin, std::int64_t end, int d,
                               float *mean, cudaStream_t stream) {
  const int D = kD > 0 ? kD : d;
  if (end <= begin)
    return cudaErrorInvalidValue;
  const int blocks = detail::ceil_div(end - begin, kMeanRowsPerBlock);
  double *partial = nullptr;
  if (cudaError_t e = cudaMallocAsync(&partial, sizeof(double) * blocks * D, stream))
    return e;
  const int threads = D < 128 ? 128 : D;
  column_sum_kernel<kD, T><<<blocks, threads, 0, stream>>>(keys, begin, end, D, partial);
  mean_kernel<>
      <<<detail::ceil_div(D, 128), 128, 0, stream>>>(partial, blocks, D, end - begin, mean);
  cudaFreeAsync(partial, stream);
  return cudaGetLastError();
}

// --- SimHash encoding ----------------------------------------------------------------------

/// Largest bytes of staged sign bits per block; rows per block shrink as K*L grows.
inline constexpr int kEncodeBitBytes = 24 * 1024;
inline int encode_rows_per_block(int columns) {
  const int rows = kEncodeBitBytes / columns;
  return rows < 1 ? 1 : rows > 8 ? 8 : rows;
}

/// codes[i*L + l] for `rows_per_block` rows per block: x rows (centered by `mean` when given)
/// staged in shared memory as float, one thread per W column computes the projection sign of
/// every staged row (W read once per block), then one thread per (row, table) packs K bits.
template <int kK, int kL, int kD, typename T>
__global__ void encode_kernel(const T *__restrict__ x, std::int64_t n,
                              const float *__restrict__ mean, const float *__restrict__ W,
                              std::int64_t ld, std::uint16_t *__restrict__ codes,
                              int rows_per_block, int k, int l, int d) {
  const int K = detail::dim<kK>(k), L = detail::dim<kL>(l), D = detail::dim<kD>(d);
  const int columns = K * L;
  extern __shared__ float smem[];
  float *xs = smem;                                                       // rows_per_block x D
  auto *bits = reinterpret_cast<std::uint8_t *>(xs + rows_per_block * D); // rows x columns
  const std::int64_t row0 = std::int64_t(blockIdx.x) * rows_per_block;
  const int rows = n - row0 < rows_per_block ? int(n - row0) : rows_per_block;

  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    const T value = x[(row0 + r) * D + c];
    xs[i] = mean ? centered(value, mean[c]) : to_float(value);
  }
  __syncthreads();
  for (int col = threadIdx.x; col < columns; col += blockDim.x)
    for (int r = 0; r < rows; ++r)
      bits[r * columns + col] = code_bit(projection<kD>(xs + r * D, W, ld, col, D), 0) != 0;
  __syncthreads();
  for (int i = threadIdx.x; i < rows * L; i += blockDim.x) {
    const int r = i / L, table = i % L;
    codes[(row0 + r) * L + table] = pack_code<kK>(bits + r * columns, table, K);
  }
}

template <int kK, int kL, int kD, typename T>
cudaError_t launch_encode(const T *x, std::int64_t n, const float *mean, const float *W,
                          std::int64_t ld, std::uint16_t *codes, int k, int l, int d,
                          cudaStream_t stream) {
  const int K = kK > 0 ? kK : k, L = kL > 0 ? kL : l, D = kD > 0 ? kD : d;
  if (n == 0)
    return cudaSuccess;
  const int rows = encode_rows_per_block(K * L);
  const std::size_t shared = sizeof(float) * rows * D + std::size_t(rows) * K * L;
  encode_kernel<kK, kL, kD, T>
      <<<detail::ceil_div(n, rows), 256, shared, stream>>>(x, n, mean, W, ld, codes, rows, K, L, D);
  return cudaGetLastError();
}

// --- Bucket index: counting sort per table --------------------------------------------------

inline constexpr int kIndexThreads = 256;

/// One block per table l: histogram of the codes into offsets[l][1 + b], a block-wide scan
/// (offsets[l][b] = first position of bucket b, offsets[l][2^K] = count), then a stable scatter
/// of the token ids, one chunk of kIndexThreads tokens at a time (chunk_rank orders ties), with
/// `cursor` (L x 2^K scratch) holding each bucket's next free position.
template <int kK>
__global__ void
build_index_kernel(const std::uint16_t *__restrict__ codes, std::int64_t count, int L, int k,
                   std::int32_t id_base, std::int32_t *__restrict__ offsets,
                   std::int32_t *__restrict__ cursor, std::int32_t *__restrict__ ids) {
  const int K = detail::dim<kK>(k);
  const std::int64_t buckets = bucket_count(K);
  const int table = blockIdx.x, tid = threadIdx.x, threads = blockDim.x;
  std::int32_t *off = offsets + std::int64_t(table) * (buckets + 1);
  std::int32_t *cur = cursor + std::int64_t(table) * buckets;
  std::int32_t *out = ids + std::int64_t(table) * count;

  for (std::int64_t b = tid; b <= buckets; b += threads)
    off[b] = 0;
  __syncthreads();
  for (std::int64_t i = tid; i < count; i += threads)
    atomicAdd(&off[std::int64_t(codes[i * L + table]) + 1], 1);
  __syncthreads();

  // Inclusive scan of off[0 .. 2^K]: a contiguous segment per thread, then the segment totals.
  __shared__ std::int32_t carry[kIndexThreads];
  const std::int64_t per = (buckets + 1 + threads - 1) / threads;
  const std::int64_t seg_begin = tid * per;
  const std::int64_t seg_end = seg_begin + per < buckets + 1 ? seg_begin + per : buckets + 1;
  std::int32_t running = 0;
  for (std::int64_t b = seg_begin; b < seg_end; ++b) {
    running += off[b];
    off[b] = running;
  }
  carry[tid] = running;
  __syncthreads();
  if (tid == 0) {
    std::int32_t total = 0;
    for (int t = 0; t < threads; ++t) {
      const std::int32_t segment = carry[t];
      carry[t] = total;
      total += segment;
    }
  }
  __syncthreads();
  for (std::int64_t b = seg_begin; b < seg_end; ++b)
    off[b] += carry[tid];
  __syncthreads();
  for (std::int64_t b = tid; b < buckets; b += threads)
    cur[b] = off[b];
  __syncthreads();

  __shared__ std::uint16_t chunk[kIndexThreads];
  for (std::int64_t base = 0; base < count; base += threads) {
    const int size = count - base < threads ? int(count - base) : threads;
    if (tid < size)
      chunk[tid] = codes[(base + tid) * L + table];
    __syncthreads();
    ChunkRank r{0, false};
    if (tid < size) {
      r = chunk_rank(chunk, size, tid);
      out[cur[chunk[tid]] + r.rank] = id_base + std::int32_t(base + tid);
    }
    __syncthreads();
    if (tid < size && r.last)
      cur[chunk[tid]] += r.rank + 1;
    __syncthreads();
  }
}

template <int kK>
cudaError_t launch_build_index(const std::uint16_t *codes, std::int64_t count, int k, int l,
                               std::int32_t id_base, std::int32_t *offsets, std::int32_t *ids,
                               cudaStream_t stream) {
  const int K = kK > 0 ? kK : k;
  std::int32_t *cursor = nullptr;
  if (cudaError_t e = cudaMallocAsync(&cursor, sizeof(std::int32_t) * l * bucket_count(K), stream))
    return e;
  build_index_kernel<kK>
      <<<l, kIndexThreads, 0, stream>>>(codes, count, l, K, id_base, offsets, cursor, ids);
  cudaFreeAsync(cursor, stream);
  return cudaGetLastError();
}

// --- Dense attention over the static tokens, with LSE ---------------------------------------

inline constexpr int kAttentionChunk = 64;

/// One block per query head h (kv-head h / (H / Hkv)): scores of a chunk of tokens, a warp per
/// token, into shared memory; then every thread replays the same online softmax over the chunk
/// and accumulates its own output dims. `windowed`: only the sink and local tokens
/// (static_token), else all n.
template <int kD, typename T>
__global__ void dense_attention_kernel(const T *__restrict__ q, const T *__restrict__ keys,
                                       const T *__restrict__ values, int heads, int kv_heads,
                                       std::int64_t n, std::int64_t sink, std::int64_t local,
                                       int windowed, float scale, float *__restrict__ out,
                                       float *__restrict__ lse, int d) {
  const int D = detail::dim<kD>(d);
  const int h = blockIdx.x, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
  const int kvh = h / (heads / kv_heads);
  const T *K = keys + std::int64_t(kvh) * n * D;
  const T *V = values + std::int64_t(kvh) * n * D;
  extern __shared__ float qs[]; // D, then kAttentionChunk scores
  float *scores = qs + D;
  for (int c = tid; c < D; c += blockDim.x)
    qs[c] = to_float(q[std::int64_t(h) * D + c]);
  __syncthreads();

  const std::int64_t total = windowed ? static_token_count(n, sink, local) : n;
  SoftmaxState st = softmax_init();
  float acc = 0.0f; // output dim `tid`
  for (std::int64_t base = 0; base < total; base += kAttentionChunk) {
    const int size = total - base < kAttentionChunk ? int(total - base) : kAttentionChunk;
    for (int t = warp; t < size; t += warps) {
      const std::int64_t token = windowed ? static_token(base + t, n, sink, local) : base + t;
      float partial = 0.0f;
      for (int c = lane; c < D; c += 32)
        partial += qs[c] * to_float(K[token * D + c]);
      for (int offset = 16; offset > 0; offset /= 2)
        partial += __shfl_xor_sync(0xffffffffu, partial, offset);
      if (lane == 0)
        scores[t] = partial * scale;
    }
    __syncthreads();
    for (int t = 0; t < size; ++t) {
      const std::int64_t token = windowed ? static_token(base + t, n, sink, local) : base + t;
      float rescale;
      const float w = softmax_push(st, scores[t], rescale);
      if (tid < D)
        acc = acc * rescale + w * to_float(V[token * D + tid]);
    }
    __syncthreads();
  }
  if (tid < D)
    out[std::int64_t(h) * D + tid] = st.s > 0.0f ? acc / st.s : 0.0f;
  if (tid == 0)
    lse[h] = softmax_lse(st);
}

template <int kD, typename T>
cudaError_t launch_dense_attention(const T *q, const T *keys, const T *values, int heads,
                                   int kv_heads, std::int64_t n, int d, std::int64_t sink,
                                   std::int64_t local, bool windowed, float *out, float *lse,
                                   cudaStream_t stream) {
  const int D = kD > 0 ? kD : d;
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || D > 1024)
    return cudaErrorInvalidValue;
  const int threads = D < 64 ? 64 : (D + 31) / 32 * 32;
  const float scale = 1.0f / sqrtf(float(D));
  const std::size_t shared = sizeof(float) * (D + kAttentionChunk);
  dense_attention_kernel<kD, T><<<heads, threads, shared, stream>>>(
      q, keys, values, heads, kv_heads, n, sink, local, windowed ? 1 : 0, scale, out, lse, D);
  return cudaGetLastError();
}

// --- Merge of two partial results by their LSEs ------------------------------------------

/// One block per head, one thread per output dim (out may alias out_a).
template <int kD>
__global__ void merge_kernel(const float *out_a, const float *lse_a, const float *out_b,
                             const float *lse_b, int d, float *out, float *lse) {
  const int D = detail::dim<kD>(d);
  const int h = blockIdx.x;
  const float a = lse_a[h], b = lse_b[h];
  const float wa = merge_weight_a(a, b);
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const std::int64_t i = std::int64_t(h) * D + c;
    // An empty part's row may hold anything (it is weightless): never multiply it.
    const float va = wa > 0.0f ? wa * out_a[i] : 0.0f;
    const float vb = wa < 1.0f ? (1.0f - wa) * out_b[i] : 0.0f;
    out[i] = va + vb;
  }
  __syncthreads(); // every thread read lse_a / lse_b before they may be overwritten (aliasing)
  if (threadIdx.x == 0)
    lse[h] = merge_lse(a, b);
}

template <int kD>
cudaError_t launch_merge(const float *out_a, const float *lse_a, const float *out_b,
                         const float *lse_b, int heads, int d, float *out, float *lse,
                         cudaStream_t stream) {
  const int D = kD > 0 ? kD : d;
  if (heads == 0)
    return cudaSuccess;
  const int threads = D < 1024 ? (D + 31) / 32 * 32 : 1024;
  merge_kernel<kD><<<heads, threads, 0, stream>>>(out_a, lse_a, out_b, lse_b, D, out, lse);
  return cudaGetLastError();
}

// --- A configuration's kernel set (what generated .cu files instantiate) --------------------

template <int kK, int kL, int kD, typename T> struct CudaKernels {
  static int center_mean(const void *keys, std::int64_t begin, std::int64_t end, int d, float *mean,
                         void *stream) {
    return launch_center_mean<kD>(static_cast<const T *>(keys), begin, end, d, mean,
                                  static_cast<cudaStream_t>(stream));
  }
  static int encode(const void *x, std::int64_t n, const float *mean, const float *W,
                    std::int64_t ld, std::uint16_t *codes, int k, int l, int d, void *stream) {
    return launch_encode<kK, kL, kD>(static_cast<const T *>(x), n, mean, W, ld, codes, k, l, d,
                                     static_cast<cudaStream_t>(stream));
  }
  static int build_index(const std::uint16_t *codes, std::int64_t count, int k, int l,
                         std::int32_t id_base, std::int32_t *offsets, std::int32_t *ids,
                         void *stream) {
    return launch_build_index<kK>(codes, count, k, l, id_base, offsets, ids,
                                  static_cast<cudaStream_t>(stream));
  }
  static int dense_attention(const void *q, const void *keys, const void *values, int heads,
                             int kv_heads, std::int64_t n, int d, std::int64_t sink,
                             std::int64_t local, bool windowed, float *out, float *lse,
                             void *stream) {
    return launch_dense_attention<kD>(static_cast<const T *>(q), static_cast<const T *>(keys),
                                      static_cast<const T *>(values), heads, kv_heads, n, d, sink,
                                      local, windowed, out, lse, static_cast<cudaStream_t>(stream));
  }
  static int merge(const float *out_a, const float *lse_a, const float *out_b, const float *lse_b,
                   int heads, int d, float *out, float *lse, void *stream) {
    return launch_merge<kD>(out_a, lse_a, out_b, lse_b, heads, d, out, lse,
                            static_cast<cudaStream_t>(stream));
  }
};

/// The kernel set of configuration (kK, kL, kD, T); 0 = taken at run time (the generic set).
template <int kK, int kL, int kD, typename T> CudaKernelSet make_cuda_kernel_set() {
  using Impl = CudaKernels<kK, kL, kD, T>;
  CudaKernelSet set;
  set.specialised = kK > 0 && kL > 0 && kD > 0;
  set.center_mean = &Impl::center_mean;
  set.encode = &Impl::encode;
  set.build_index = &Impl::build_index;
  set.dense_attention = &Impl::dense_attention;
  set.merge = &Impl::merge;
  return set;
}

} // namespace pig::cuda
