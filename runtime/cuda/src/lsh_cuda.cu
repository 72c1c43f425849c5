// pig_cuda: the generic kernel sets (K, L, d at run time), the CUDA kernel registry, the
// device-count helper and the host-memory conveniences. One TU on purpose: every .cu file is
// compiled for two architectures, which dominates the build time.
#include "pig/cuda/lsh_kernels.cuh"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace pig::cuda {

int device_count() {
  int count = 0; // cudaGetDeviceCount leaves it untouched on error 35 (no usable driver)
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky error so later calls do not report it
    return 0;
  }
  return count;
}

std::string CudaKernelKey::str() const {
  return "K=" + std::to_string(K) + " L=" + std::to_string(L) + " d=" + std::to_string(d) + " " +
         spec::name(dtype) + " cuda";
}

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<std::pair<CudaKernelKey, CudaKernelSet>> entries;
};
Registry &registry() {
  static Registry r;
  return r;
}
} // namespace

void register_cuda_kernels(const CudaKernelKey &key, const CudaKernelSet &set) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto &entry : r.entries)
    if (entry.first == key) {
      entry.second = set;
      return;
    }
  r.entries.emplace_back(key, set);
}

CudaKernelSet resolve_cuda_kernels(const CudaKernelKey &key) {
  {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto &entry : r.entries)
      if (entry.first == key)
        return entry.second;
  }
  if (key.dtype == DType::q8)
    throw std::invalid_argument("pig::cuda: no CUDA kernels for q8 rows (" + key.str() + ")");
  return key.dtype == DType::f32 ? make_cuda_kernel_set<0, 0, 0, float>()
                                 : make_cuda_kernel_set<0, 0, 0, bf16>();
}

std::vector<CudaKernelKey> registered_cuda_kernels() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<CudaKernelKey> keys;
  for (const auto &entry : r.entries)
    keys.push_back(entry.first);
  return keys;
}

namespace host {
namespace {
void check(int error, const char *what) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("pig::cuda::") + what + ": " +
                             cudaGetErrorString(cudaError_t(error)));
}

/// A device allocation that frees itself.
template <typename U> class Buffer {
public:
  explicit Buffer(std::size_t count) : count_(count) {
    check(cudaMalloc(&data_, sizeof(U) * (count ? count : 1)), "cudaMalloc");
  }
  Buffer(const void *src, std::size_t count) : Buffer(count) {
    if (count)
      check(cudaMemcpy(data_, src, sizeof(U) * count, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~Buffer() { cudaFree(data_); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  U *get() const { return data_; }
  std::vector<U> read() const {
    std::vector<U> out(count_);
    if (count_)
      check(cudaMemcpy(out.data(), data_, sizeof(U) * count_, cudaMemcpyDeviceToHost),
            "cudaMemcpy");
    return out;
  }

private:
  U *data_ = nullptr;
  std::size_t count_;
};

std::size_t element_bytes(DType t) { return t == DType::f32 ? 4 : 2; }
} // namespace

std::vector<float> center_mean(const CudaKernelKey &key, const void *keys, std::int64_t n,
                               std::int64_t begin, std::int64_t end) {
  Buffer<std::uint8_t> k(keys, element_bytes(key.dtype) * n * key.d);
  Buffer<float> mean(key.d);
  check(resolve_cuda_kernels(key).center_mean(k.get(), begin, end, key.d, mean.get(), nullptr),
        "center_mean");
  check(cudaDeviceSynchronize(), "center_mean");
  return mean.read();
}

std::vector<std::uint16_t> encode(const CudaKernelKey &key, const void *x, std::int64_t n,
                                  const float *mean, const float *W, std::int64_t ld) {
  Buffer<std::uint8_t> dx(x, element_bytes(key.dtype) * n * key.d);
  Buffer<float> dw(W, std::size_t(key.d) * ld);
  Buffer<float> dmean(mean, mean ? key.d : 0);
  Buffer<std::uint16_t> codes(std::size_t(n) * key.L);
  check(resolve_cuda_kernels(key).encode(dx.get(), n, mean ? dmean.get() : nullptr, dw.get(), ld,
                                         codes.get(), key.K, key.L, key.d, nullptr),
        "encode");
  check(cudaDeviceSynchronize(), "encode");
  return codes.read();
}

BucketIndex build_index(const CudaKernelKey &key, const std::uint16_t *codes, std::int64_t count,
                        std::int32_t id_base) {
  Buffer<std::uint16_t> dcodes(codes, std::size_t(count) * key.L);
  Buffer<std::int32_t> offsets(std::size_t(key.L) * std::size_t(offsets_per_table(key.K)));
  Buffer<std::int32_t> ids(std::size_t(key.L) * count);
  check(resolve_cuda_kernels(key).build_index(dcodes.get(), count, key.K, key.L, id_base,
                                              offsets.get(), ids.get(), nullptr),
        "build_index");
  check(cudaDeviceSynchronize(), "build_index");
  return {offsets.read(), ids.read()};
}

Attention dense_attention(const CudaKernelKey &key, const void *q, const void *keys,
                          const void *values, int heads, int kv_heads, std::int64_t n,
                          std::int64_t sink, std::int64_t local, bool windowed) {
  const std::size_t bytes = element_bytes(key.dtype);
  Buffer<std::uint8_t> dq(q, bytes * heads * key.d);
  Buffer<std::uint8_t> dk(keys, bytes * kv_heads * n * key.d);
  Buffer<std::uint8_t> dv(values, bytes * kv_heads * n * key.d);
  Buffer<float> out(std::size_t(heads) * key.d), lse(heads);
  check(resolve_cuda_kernels(key).dense_attention(dq.get(), dk.get(), dv.get(), heads, kv_heads, n,
                                                  key.d, sink, local, windowed, out.get(),
                                                  lse.get(), nullptr),
        "dense_attention");
  check(cudaDeviceSynchronize(), "dense_attention");
  return {out.read(), lse.read()};
}
Attention merge(const CudaKernelKey &key, const Attention &a, const Attention &b) {
  const int heads = int(a.lse.size());
  Buffer<float> oa(a.out.data(), a.out.size()), la(a.lse.data(), a.lse.size());
  Buffer<float> ob(b.out.data(), b.out.size()), lb(b.lse.data(), b.lse.size());
  Buffer<float> out(a.out.size()), lse(a.lse.size());
  check(resolve_cuda_kernels(key).merge(oa.get(), la.get(), ob.get(), lb.get(), heads, key.d,
                                        out.get(), lse.get(), nullptr),
        "merge");
  check(cudaDeviceSynchronize(), "merge");
  return {out.read(), lse.read()};
}
} // namespace host

} // namespace pig::cuda
