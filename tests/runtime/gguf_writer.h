// Builds GGUF images in memory for tests (the runtime itself only reads GGUF).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace pig::runtime::testing {

class GgufWriter {
public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  template <typename T> static void Put(std::vector<uint8_t> &b, T v) {
    const auto *p = reinterpret_cast<const uint8_t *>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  static void PutStr(std::vector<uint8_t> &b, std::string_view s) {
    Put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
  }

  // Raw key/value: `payload` is the encoded value after its type id.
  void Kv(std::string_view key, uint32_t type, const std::vector<uint8_t> &payload) {
    PutStr(kv_, key);
    Put<uint32_t>(kv_, type);
    kv_.insert(kv_.end(), payload.begin(), payload.end());
    ++n_kv_;
  }
  template <typename T> void Scalar(std::string_view key, uint32_t type, T v) {
    std::vector<uint8_t> p;
    Put<T>(p, v);
    Kv(key, type, p);
  }
  void U32(std::string_view key, uint32_t v) { Scalar(key, 4, v); }
  void F32(std::string_view key, float v) { Scalar(key, 6, v); }
  void Str(std::string_view key, std::string_view v) {
    std::vector<uint8_t> p;
    PutStr(p, v);
    Kv(key, 8, p);
  }
  void StrArray(std::string_view key, const std::vector<std::string> &v) {
    std::vector<uint8_t> p;
    Put<uint32_t>(p, 8);
    Put<uint64_t>(p, v.size());
    for (const auto &s : v)
      PutStr(p, s);
    Kv(key, 9, p);
  }
  template <typename T>
  void NumArray(std::string_view key, uint32_t elem_type, const std::vector<T> &v) {
    std::vector<uint8_t> p;
    Put<uint32_t>(p, elem_type);
    Put<uint64_t>(p, v.size());
    for (T x : v)
      Put<T>(p, x);
    Kv(key, 9, p);
  }

  void Tensor(std::string_view name, uint32_t type, const std::vector<uint64_t> &dims,
              const std::vector<uint8_t> &bytes) {
    PutStr(ti_, name);
    Put<uint32_t>(ti_, uint32_t(dims.size()));
    for (uint64_t d : dims)
      Put<uint64_t>(ti_, d);
    Put<uint32_t>(ti_, type);
    while (data_.size() % alignment_)
      data_.push_back(0);
    Put<uint64_t>(ti_, data_.size());
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    ++n_tensors_;
  }

  std::vector<uint8_t> Finish() const {
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
    Put<uint32_t>(b, version_);
    Put<uint64_t>(b, n_tensors_);
    Put<uint64_t>(b, n_kv_);
    b.insert(b.end(), kv_.begin(), kv_.end());
    b.insert(b.end(), ti_.begin(), ti_.end());
    while (b.size() % alignment_)
      b.push_back(0);
    b.insert(b.end(), data_.begin(), data_.end());
    return b;
  }

private:
  uint32_t version_;
  uint64_t alignment_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::vector<uint8_t> kv_, ti_, data_;
};

} // namespace pig::runtime::testing
