#include "pig/runtime/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace pig::runtime {
namespace {

// Bounds on things a sane file never exceeds; anything larger is treated as corruption rather
// than attempted (a corrupted count must not turn into a multi-gigabyte allocation).
constexpr uint64_t kMaxStringBytes = uint64_t(1) << 30;
constexpr uint64_t kMaxArrayElems = uint64_t(1) << 28;
constexpr uint64_t kMaxKeys = uint64_t(1) << 20;
constexpr uint64_t kMaxTensors = uint64_t(1) << 20;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxNesting = 4;

size_t ScalarSize(GgufValueType t) {
  switch (t) {
  case GgufValueType::kUint8:
  case GgufValueType::kInt8:
  case GgufValueType::kBool:
    return 1;
  case GgufValueType::kUint16:
  case GgufValueType::kInt16:
    return 2;
  case GgufValueType::kUint32:
  case GgufValueType::kInt32:
  case GgufValueType::kFloat32:
    return 4;
  case GgufValueType::kUint64:
  case GgufValueType::kInt64:
  case GgufValueType::kFloat64:
    return 8;
  default:
    return 0;
  }
}

// Sequential little-endian reader that throws on any read past the end.
class Cursor {
public:
  Cursor(const uint8_t *base, size_t size, const std::string &name)
      : base_(base), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void Fail(const std::string &what) const {
    throw GgufError(name_ + ": " + what + " (at byte " + std::to_string(pos_) + " of " +
                    std::to_string(size_) + ")");
  }

  const uint8_t *Take(uint64_t n, const char *what) {
    if (n > remaining()) {
      Fail(std::string("truncated file: ") + what + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left");
    }
    const uint8_t *p = base_ + pos_;
    pos_ += n;
    return p;
  }
  template <typename T> T Read(const char *what) {
    T v;
    std::memcpy(&v, Take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string_view String(const char *what) {
    const uint64_t n = Read<uint64_t>(what);
    if (n > kMaxStringBytes)
      Fail(std::string("absurd string length ") + std::to_string(n) + " for " + what);
    const uint8_t *p = Take(n, what);
    return {reinterpret_cast<const char *>(p), static_cast<size_t>(n)};
  }

private:
  const uint8_t *base_;
  size_t size_;
  size_t pos_ = 0;
  const std::string &name_;
};

GgufValueType ReadValueType(Cursor &c, const char *what) {
  const uint32_t t = c.Read<uint32_t>(what);
  if (t > uint32_t(GgufValueType::kFloat64)) {
    c.Fail("unknown metadata value type " + std::to_string(t) + " for " + what);
  }
  return static_cast<GgufValueType>(t);
}

GgufValue ReadValue(Cursor &c, GgufValueType type, const std::string &key, int depth) {
  GgufValue v;
  v.type = type;
  const char *what = key.c_str();
  switch (type) {
  case GgufValueType::kUint8:
    v.scalar = uint64_t(c.Read<uint8_t>(what));
    break;
  case GgufValueType::kUint16:
    v.scalar = uint64_t(c.Read<uint16_t>(what));
    break;
  case GgufValueType::kUint32:
    v.scalar = uint64_t(c.Read<uint32_t>(what));
    break;
  case GgufValueType::kUint64:
    v.scalar = c.Read<uint64_t>(what);
    break;
  case GgufValueType::kInt8:
    v.scalar = int64_t(c.Read<int8_t>(what));
    break;
  case GgufValueType::kInt16:
    v.scalar = int64_t(c.Read<int16_t>(what));
    break;
  case GgufValueType::kInt32:
    v.scalar = int64_t(c.Read<int32_t>(what));
    break;
  case GgufValueType::kInt64:
    v.scalar = c.Read<int64_t>(what);
    break;
  case GgufValueType::kFloat32:
    v.scalar = double(c.Read<float>(what));
    break;
  case GgufValueType::kFloat64:
    v.scalar = c.Read<double>(what);
    break;
  case GgufValueType::kBool: {
    const uint8_t b = c.Read<uint8_t>(what);
    if (b > 1)
      c.Fail("bool value " + std::to_string(b) + " for " + key);
    v.scalar = b != 0;
    break;
  }
  case GgufValueType::kString:
    v.scalar = c.String(what);
    break;
  case GgufValueType::kArray: {
    if (depth >= kMaxNesting)
      c.Fail("arrays nested too deeply in " + key);
    v.elem_type = ReadValueType(c, what);
    v.count = c.Read<uint64_t>(what);
    if (v.count > kMaxArrayElems) {
      c.Fail("absurd array length " + std::to_string(v.count) + " for " + key);
    }
    if (v.elem_type == GgufValueType::kString) {
      // Each string takes at least its 8-byte length: reject counts the file cannot hold
      // before reserving memory for them.
      if (v.count > c.remaining() / 8)
        c.Fail("truncated file: string array " + key);
      v.strings.reserve(v.count);
      for (uint64_t i = 0; i < v.count; ++i)
        v.strings.push_back(c.String(what));
    } else if (v.elem_type == GgufValueType::kArray) {
      if (v.count > c.remaining() / 12)
        c.Fail("truncated file: nested array " + key);
      for (uint64_t i = 0; i < v.count; ++i) {
        v.nested.push_back(ReadValue(c, GgufValueType::kArray, key, depth + 1));
      }
    } else {
      const size_t es = ScalarSize(v.elem_type);
      if (v.count > c.remaining() / es)
        c.Fail("truncated file: array " + key);
      v.raw = {c.Take(v.count * es, what), static_cast<size_t>(v.count * es)};
    }
    break;
  }
  }
  return v;
}

double NumericAt(const GgufValue &v, uint64_t i) {
  const uint8_t *p = v.raw.data() + i * ScalarSize(v.elem_type);
  auto load = [p]<typename T>(T) {
    T x;
    std::memcpy(&x, p, sizeof(T));
    return x;
  };
  switch (v.elem_type) {
  case GgufValueType::kUint8:
    return load(uint8_t{});
  case GgufValueType::kInt8:
    return load(int8_t{});
  case GgufValueType::kUint16:
    return load(uint16_t{});
  case GgufValueType::kInt16:
    return load(int16_t{});
  case GgufValueType::kUint32:
    return load(uint32_t{});
  case GgufValueType::kInt32:
    return load(int32_t{});
  case GgufValueType::kUint64:
    return double(load(uint64_t{}));
  case GgufValueType::kInt64:
    return double(load(int64_t{}));
  case GgufValueType::kFloat32:
    return load(float{});
  case GgufValueType::kFloat64:
    return load(double{});
  case GgufValueType::kBool:
    return load(uint8_t{}) != 0;
  default:
    return 0;
  }
}

} // namespace

const char *GgufValueTypeName(GgufValueType t) {
  static const char *kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                 "int32",  "float32", "bool",   "string", "array",
                                 "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::unique_ptr<GgufFile> GgufFile::Open(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw GgufError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw GgufError(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError(path + ": not a regular file");
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void *p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw GgufError(path + ": mmap failed: " + std::strerror(err));
    }
    f->base_ = static_cast<const uint8_t *>(p);
    f->mapped_ = true;
  }
  ::close(fd);
  f->Parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::FromMemory(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->base_ = bytes.data();
  f->size_ = bytes.size();
  f->Parse();
  return f;
}

GgufFile::~GgufFile() {
  if (mapped_)
    ::munmap(const_cast<uint8_t *>(base_), size_);
}

void GgufFile::Fail(const std::string &what) const { throw GgufError(path_ + ": " + what); }

void GgufFile::Parse() {
  Cursor c(base_, size_, path_);
  const uint8_t *magic = c.Take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    Fail("bad magic (not a GGUF file): expected 'GGUF', found bytes " + std::to_string(magic[0]) +
         " " + std::to_string(magic[1]) + " " + std::to_string(magic[2]) + " " +
         std::to_string(magic[3]));
  }
  version_ = c.Read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    Fail("unsupported GGUF version " + std::to_string(version_) + " (this reader knows 2 and 3)");
  }
  const uint64_t n_tensors = c.Read<uint64_t>("tensor count");
  const uint64_t n_kv = c.Read<uint64_t>("metadata count");
  if (n_tensors > kMaxTensors)
    Fail("absurd tensor count " + std::to_string(n_tensors));
  if (n_kv > kMaxKeys)
    Fail("absurd metadata count " + std::to_string(n_kv));

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key(c.String("metadata key"));
    const GgufValueType type = ReadValueType(c, key.c_str());
    GgufValue value = ReadValue(c, type, key, 0);
    if (!metadata_.emplace(key, std::move(value)).second)
      Fail("duplicate metadata key " + key);
  }
  if (const GgufValue *a = Find("general.alignment")) {
    if (a->type != GgufValueType::kUint32)
      Fail("general.alignment is not a uint32");
    alignment_ = std::get<uint64_t>(a->scalar);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 || alignment_ > (1u << 20)) {
      Fail("invalid general.alignment " + std::to_string(alignment_));
    }
  }

  tensors_.reserve(std::min<uint64_t>(n_tensors, c.remaining() / 24));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = std::string(c.String("tensor name"));
    const uint32_t n_dims = c.Read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      c.Fail("tensor " + t.name + " has " + std::to_string(n_dims) + " dimensions (1.." +
             std::to_string(kMaxDims) + " allowed)");
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.Read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > (uint64_t(1) << 40) ||
          t.n_elements > std::numeric_limits<uint64_t>::max() / dim) {
        c.Fail("tensor " + t.name + " has absurd dimension " + std::to_string(dim));
      }
      t.dims.push_back(dim);
      t.n_elements *= dim;
    }
    const uint32_t type_id = c.Read<uint32_t>("tensor type");
    const auto info = GgmlTypeLookup(type_id);
    if (!info)
      c.Fail("tensor " + t.name + " has unknown ggml type " + std::to_string(type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.dims[0] % info->block_elems != 0) {
      c.Fail("tensor " + t.name + " row length " + std::to_string(t.dims[0]) +
             " is not a multiple of the " + info->name + " block size " +
             std::to_string(info->block_elems));
    }
    if (t.n_elements > (uint64_t(1) << 48)) {
      c.Fail("tensor " + t.name + " has an absurd element count " + std::to_string(t.n_elements));
    }
    t.n_bytes = t.n_elements / info->block_elems * info->block_bytes;
    t.offset = c.Read<uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0) {
      c.Fail("tensor " + t.name + " offset " + std::to_string(t.offset) + " is not aligned to " +
             std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      Fail("duplicate tensor name " + t.name);
    }
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > size_)
    Fail("truncated file: no tensor data section");
  for (GgufTensorInfo &t : tensors_) {
    if (t.offset > size_ || t.n_bytes > size_ || data_start + t.offset > size_ - t.n_bytes) {
      Fail("tensor " + t.name + " (" + std::to_string(t.n_bytes) + " bytes at data offset " +
           std::to_string(t.offset) + ") extends beyond the end of the file (" +
           std::to_string(size_) + " bytes)");
    }
    t.data = base_ + data_start + t.offset;
  }
}

const GgufValue *GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo *GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo &GgufFile::Tensor(std::string_view name) const {
  const GgufTensorInfo *t = FindTensor(name);
  if (!t)
    Fail("missing tensor " + std::string(name));
  return *t;
}

uint64_t GgufFile::GetUint(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (const auto *u = std::get_if<uint64_t>(&v->scalar); u && !v->IsArray())
    return *u;
  if (const auto *i = std::get_if<int64_t>(&v->scalar); i && *i >= 0 && !v->IsArray()) {
    return uint64_t(*i);
  }
  Fail("metadata key " + std::string(key) + " is a " + GgufValueTypeName(v->type) +
       ", expected an unsigned integer");
}

uint64_t GgufFile::GetUint(std::string_view key, uint64_t fallback) const {
  return Find(key) ? GetUint(key) : fallback;
}

double GgufFile::GetFloat(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (!v->IsArray()) {
    if (const auto *d = std::get_if<double>(&v->scalar))
      return *d;
    if (const auto *u = std::get_if<uint64_t>(&v->scalar))
      return double(*u);
    if (const auto *i = std::get_if<int64_t>(&v->scalar))
      return double(*i);
  }
  Fail("metadata key " + std::string(key) + " is a " + GgufValueTypeName(v->type) +
       ", expected a number");
}

double GgufFile::GetFloat(std::string_view key, double fallback) const {
  return Find(key) ? GetFloat(key) : fallback;
}

std::string_view GgufFile::GetString(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (v->type != GgufValueType::kString) {
    Fail("metadata key " + std::string(key) + " is a " + GgufValueTypeName(v->type) +
         ", expected a string");
  }
  return std::get<std::string_view>(v->scalar);
}

std::string_view GgufFile::GetString(std::string_view key, std::string_view fallback) const {
  return Find(key) ? GetString(key) : fallback;
}

const std::vector<std::string_view> &GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (!v->IsArray() || v->elem_type != GgufValueType::kString) {
    Fail("metadata key " + std::string(key) + " is not an array of strings");
  }
  return v->strings;
}

std::vector<float> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (!v->IsArray() || ScalarSize(v->elem_type) == 0) {
    Fail("metadata key " + std::string(key) + " is not a numeric array");
  }
  std::vector<float> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i)
    out[i] = float(NumericAt(*v, i));
  return out;
}

std::vector<int64_t> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue *v = Find(key);
  if (!v)
    Fail("missing metadata key " + std::string(key));
  if (!v->IsArray() || ScalarSize(v->elem_type) == 0) {
    Fail("metadata key " + std::string(key) + " is not a numeric array");
  }
  std::vector<int64_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i)
    out[i] = int64_t(NumericAt(*v, i));
  return out;
}

} // namespace pig::runtime
