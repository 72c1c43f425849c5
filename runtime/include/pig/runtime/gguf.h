// GGUF v2/v3 reader: the file is memory-mapped, the header, metadata and tensor infos are
// parsed and validated up front, and tensor data is handed out as views into the mapping.
// Every malformed input (truncation, bad magic, unknown types, offsets beyond the file, absurd
// sizes) ends in a GgufError whose message names the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pig/runtime/ggml_types.h"

namespace pig::runtime {

class GgufError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char *GgufValueTypeName(GgufValueType t);

// One metadata value. Arrays keep their element type; arrays of strings are materialised as
// string_views into the mapping, numeric arrays as a raw byte span (read with ArrayAt<T>).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string_view> scalar;
  // Arrays only.
  GgufValueType elem_type = GgufValueType::kUint8;
  uint64_t count = 0;
  std::span<const uint8_t> raw;          // numeric array elements, little-endian
  std::vector<std::string_view> strings; // string array elements
  std::vector<GgufValue> nested;         // array of arrays (rare; kept for completeness)

  bool IsArray() const { return type == GgufValueType::kArray; }
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<uint64_t> dims; // dims[0] is the contiguous (row) dimension
  uint64_t offset = 0;        // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t *data = nullptr; // into the mapping

  uint64_t Rows() const { return n_elements / dims[0]; }
  uint64_t RowBytes() const { return GgmlRowBytes(type, dims[0]); }
};

class GgufFile {
public:
  // Maps and parses `path`; throws GgufError on any problem.
  static std::unique_ptr<GgufFile> Open(const std::string &path);
  // Parses an in-memory image (used by tests; the bytes must outlive the object).
  static std::unique_ptr<GgufFile> FromMemory(std::span<const uint8_t> bytes,
                                              std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile &) = delete;
  GgufFile &operator=(const GgufFile &) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string &path() const { return path_; }
  size_t file_size() const { return size_; }
  // Whether the tensors live in a read-only file mapping (Open), whose pages may be dropped and
  // re-read, rather than in the caller's memory (FromMemory).
  bool mapped() const { return mapped_; }

  const std::map<std::string, GgufValue, std::less<>> &metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo> &tensors() const { return tensors_; }

  const GgufValue *Find(std::string_view key) const;
  const GgufTensorInfo *FindTensor(std::string_view name) const;
  const GgufTensorInfo &Tensor(std::string_view name) const; // throws if missing

  // Typed accessors: throw GgufError when the key is missing or has an incompatible type.
  uint64_t GetUint(std::string_view key) const;
  uint64_t GetUint(std::string_view key, uint64_t fallback) const;
  double GetFloat(std::string_view key) const;
  double GetFloat(std::string_view key, double fallback) const;
  std::string_view GetString(std::string_view key) const;
  std::string_view GetString(std::string_view key, std::string_view fallback) const;
  const std::vector<std::string_view> &GetStringArray(std::string_view key) const;
  // Numeric array converted to float / int64 (throws if not a numeric array).
  std::vector<float> GetFloatArray(std::string_view key) const;
  std::vector<int64_t> GetIntArray(std::string_view key) const;

private:
  GgufFile() = default;
  void Parse();
  [[noreturn]] void Fail(const std::string &what) const;

  std::string path_;
  const uint8_t *base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

} // namespace pig::runtime
