// pig's Python module (nanobind): the scalar reference, the LSH index and the attention kernels of
// one kv-head group, the kernel registry, and the model runtime, over arrays passed by DLPack or
// the buffer protocol (NumPy, PyTorch CPU tensors) without copying them. Every kernel call
// releases the GIL. python/pig/__init__.py re-exports it as `pig`; python/tests checks every
// binding against pig.ref.
//
// Arrays: C-contiguous, on the CPU. Queries, outputs and reference inputs are float32. Key and
// value rows are float32 (n, d), bfloat16 (n, d) (a torch.bfloat16 tensor, or uint16 holding bf16
// bits: NumPy has no bfloat16) or q8 (uint8 (n, row_bytes): pig's 8-bit rows, pig.quantize_q8). A
// wrong dtype, shape, device or stride raises ValueError naming the argument.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/app/attention_fields.h"
#include "pig/app/generation.h"
#include "pig/app/kernels.h"
#include "pig/reference/attention.h"
#include "pig/reference/hybrid.h"
#include "pig/reference/kv_quant.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/random.h"
#include "pig/runtime/attention.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/lsh_step.h"
#include "pig/runtime/model.h"
#include "pig/runtime/paged_attention.h"
#include "pig/runtime/tokenizer.h"
#include "pig/spec/method.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using pig::runtime::lsh::DType;
// Inputs may be read-only and on any device (a non-CPU one is a ValueError, below).
using Array = nb::ndarray<nb::ro>;
using F32Out = nb::ndarray<nb::numpy, float>;

// --- argument checks ---------------------------------------------------------------------------

[[noreturn]] void Bad(const std::string &what) { throw nb::value_error(what.c_str()); }

// Bounds of the arguments that size something, checked where they are given: past them a size
// computation wraps (a capacity of 2**64 - 1 allocated a scratch of a few bytes), a kernel is
// handed a group of 0 heads (an assertion: the interpreter aborted), or the failure comes much
// later (a thread pool of 2**40 threads never finished starting). pig-run's bounds: --threads,
// and --ctx and --max-new for positions (app/src/options.cpp, tools/pig-run).
constexpr size_t kMaxThreads = 1024;
constexpr size_t kMaxPositions = size_t(1) << 24;
// The model loader's (runtime/model/model.cpp): layers, and the embedding width, which bounds a
// head dim and a head count.
constexpr size_t kMaxLayers = 1024;
constexpr size_t kMaxWidth = size_t(1) << 16;

void CheckRange(size_t v, size_t lo, size_t hi, const char *name) {
  if (v < lo || v > hi)
    Bad(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
        "], got " + std::to_string(v));
}

// A softmax scale: positive and finite (a NaN one made every output NaN).
void CheckScale(std::optional<double> scale) {
  if (scale && !(std::isfinite(*scale) && *scale > 0))
    Bad("scale must be a positive finite number, got " + std::to_string(*scale));
}

std::string DtypeName(const Array &a) {
  const auto t = a.dtype();
  const char *kind = "?";
  switch (nb::dlpack::dtype_code(t.code)) {
  case nb::dlpack::dtype_code::Int:
    kind = "int";
    break;
  case nb::dlpack::dtype_code::UInt:
    kind = "uint";
    break;
  case nb::dlpack::dtype_code::Float:
    kind = "float";
    break;
  case nb::dlpack::dtype_code::Bfloat:
    kind = "bfloat";
    break;
  default:
    break;
  }
  return std::string(kind) + std::to_string(t.bits);
}

std::string ShapeStr(const Array &a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i)
    s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

bool IsF32(const Array &a) { return a.dtype() == nb::dtype<float>(); }
bool IsU8(const Array &a) { return a.dtype() == nb::dtype<uint8_t>(); }
bool IsU16(const Array &a) { return a.dtype() == nb::dtype<uint16_t>(); }
bool IsBf16(const Array &a) {
  const auto t = a.dtype();
  return t.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && t.bits == 16 && t.lanes == 1;
}

// C-contiguous: strides (in elements) of a row-major array.
void CheckContiguous(const Array &a, const char *name) {
  if (a.device_type() != nb::device::cpu::value)
    Bad(std::string(name) + ": expected an array in CPU memory (pig's kernels run on the CPU)");
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) > 1 && a.stride(i) != expect)
      Bad(std::string(name) + ": expected a C-contiguous array, got strides that are not "
                              "row-major (pass a contiguous copy)");
    expect *= int64_t(a.shape(i));
  }
}

// An array of the given shape (-1: any) and rank, C-contiguous, on the CPU; its dtype checked by
// the caller.
void CheckShape(const Array &a, const char *name, std::initializer_list<int64_t> dims) {
  if (a.ndim() != dims.size())
    Bad(std::string(name) + ": expected a " + std::to_string(dims.size()) + "-D array, got shape " +
        ShapeStr(a));
  size_t i = 0;
  for (int64_t want : dims) {
    if (want >= 0 && int64_t(a.shape(i)) != want)
      Bad(std::string(name) + ": dimension " + std::to_string(i) + " must be " +
          std::to_string(want) + ", got shape " + ShapeStr(a));
    ++i;
  }
  CheckContiguous(a, name);
}

// A float32 array of the given rank; `dims` -1 means any size.
const float *F32(const Array &a, const char *name, std::initializer_list<int64_t> dims) {
  if (a.ndim() != dims.size() || !IsF32(a))
    Bad(std::string(name) + ": expected a " + std::to_string(dims.size()) +
        "-D float32 array, got " + DtypeName(a) + " of shape " + ShapeStr(a));
  CheckShape(a, name, dims);
  return static_cast<const float *>(a.data());
}

// Key or value rows: (n, d) float32, bfloat16 or uint16 (bf16 bits), or (n, row_bytes(q8, d))
// uint8.
struct Rows {
  const void *data = nullptr;
  DType dtype = DType::f32;
  size_t n = 0;
};

Rows RowsOf(const Array &a, const char *name, size_t d) {
  if (a.ndim() != 2)
    Bad(std::string(name) + ": expected a 2-D array of rows, got shape " + ShapeStr(a));
  CheckContiguous(a, name);
  Rows r{a.data(), DType::f32, a.shape(0)};
  if (IsF32(a))
    r.dtype = DType::f32;
  else if (IsBf16(a) || IsU16(a))
    r.dtype = DType::bf16;
  else if (IsU8(a))
    r.dtype = DType::q8;
  else
    Bad(std::string(name) +
        ": expected float32, bfloat16 (or uint16 bf16 bits) or uint8 q8 "
        "rows, got " +
        DtypeName(a));
  const size_t cols = a.shape(1);
  const size_t want = r.dtype == DType::q8 ? pig::spec::row_bytes(DType::q8, d) : d;
  if (r.dtype == DType::q8 && d % pig::spec::kQ8Block != 0)
    Bad(std::string(name) + ": q8 rows need a head dim that is a multiple of " +
        std::to_string(pig::spec::kQ8Block) + ", got " + std::to_string(d));
  if (cols != want)
    Bad(std::string(name) + ": rows of head dim " + std::to_string(d) + " in " +
        pig::runtime::lsh::to_string(r.dtype) + " have " + std::to_string(want) +
        " columns, got shape " + ShapeStr(a));
  return r;
}

F32Out NewF32(std::initializer_list<size_t> shape) {
  size_t n = 1;
  for (size_t s : shape)
    n *= s;
  float *p = new float[n]();
  nb::capsule owner(p, [](void *q) noexcept { delete[] static_cast<float *>(q); });
  return F32Out(p, shape.size(), shape.begin(), owner);
}

template <typename T> nb::ndarray<nb::numpy, T> NewArray(std::vector<T> v) {
  auto *p = new std::vector<T>(std::move(v));
  nb::capsule owner(p, [](void *q) noexcept { delete static_cast<std::vector<T> *>(q); });
  const size_t n = p->size();
  return nb::ndarray<nb::numpy, T>(p->data(), {n}, owner);
}

float ScaleOr(std::optional<float> scale, size_t d) {
  return scale ? *scale : 1.0f / std::sqrt(float(d));
}

// The output array: `out` when given (a writable float32 array of that shape, written in place:
// no copy, and the same object is returned), else a new one.
struct Out {
  float *data = nullptr;
  nb::object obj;
};

Out OutOr(const std::optional<nb::object> &out, const char *name, size_t rows, size_t cols) {
  if (!out || out->is_none()) {
    F32Out a = NewF32({rows, cols});
    float *p = a.data();
    return {p, nb::cast(std::move(a))};
  }
  nb::ndarray<> w;
  if (!nb::try_cast(*out, w)) {
    Array any;
    if (nb::try_cast(*out, any))
      Bad(std::string(name) + ": the array is read-only");
    Bad(std::string(name) + ": expected a writable float32 array");
  }
  const Array view(w);
  F32(view, name, {int64_t(rows), int64_t(cols)});
  return {static_cast<float *>(w.data()), *out};
}

// --- the reference -----------------------------------------------------------------------------

pig::ref::Matrix RefMatrix(const Array &a, const char *name) {
  const float *p = F32(a, name, {-1, -1});
  return pig::ref::Matrix{p, a.shape(0), a.shape(1)};
}

std::span<const float> RefVector(const Array &a, const char *name, size_t d) {
  return {F32(a, name, {int64_t(d)}), d};
}

nb::tuple AttentionTuple(const pig::ref::Attention &r) {
  F32Out out = NewF32({r.out.size()});
  std::memcpy(out.data(), r.out.data(), r.out.size() * sizeof(float));
  return nb::make_tuple(out, r.lse);
}

void CheckKV(const pig::ref::Matrix &K, const pig::ref::Matrix &V) {
  if (K.rows != V.rows)
    Bad("K and V must have the same number of rows, got " + std::to_string(K.rows) + " and " +
        std::to_string(V.rows));
}

void BindReference(nb::module_ &m) {
  nb::module_ r = m.def_submodule("ref", "pig's scalar reference (pig::ref): the oracle of every "
                                         "test, one query head at a time, in double precision");
  r.def(
      "dense",
      [](const Array &q, const Array &K, const Array &V, std::optional<double> scale) {
        CheckScale(scale);
        const auto Km = RefMatrix(K, "K"), Vm = RefMatrix(V, "V");
        CheckKV(Km, Vm);
        const auto qv = RefVector(q, "q", Km.cols);
        pig::ref::Attention a;
        {
          nb::gil_scoped_release rel;
          a = pig::ref::dense_attention(qv, Km, Vm, scale);
        }
        return AttentionTuple(a);
      },
      "q"_a, "K"_a, "V"_a, "scale"_a = nb::none(),
      "Exact attention: (out (dv,), lse) over every row of K and V.");
  r.def(
      "topk",
      [](const Array &q, const Array &K, const Array &V, size_t m, std::optional<double> scale) {
        CheckScale(scale);
        const auto Km = RefMatrix(K, "K"), Vm = RefMatrix(V, "V");
        CheckKV(Km, Vm);
        const auto qv = RefVector(q, "q", Km.cols);
        if (m < 1 || m > Km.rows)
          Bad("m must be in [1, the number of rows (" + std::to_string(Km.rows) + ")], got " +
              std::to_string(m));
        pig::ref::SparseEstimate e;
        {
          nb::gil_scoped_release rel;
          e = pig::ref::topk_attention(qv, Km, Vm, m, scale);
        }
        nb::tuple t = AttentionTuple(e.attention);
        return nb::make_tuple(t[0], t[1], e.attended);
      },
      "q"_a, "K"_a, "V"_a, "m"_a, "scale"_a = nb::none(),
      "TopK: the m highest logits, renormalised: (out, lse, attended).");
  r.def(
      "oracle",
      [](const Array &q, const Array &K, const Array &V, size_t B, uint64_t seed,
         std::optional<double> scale) {
        CheckScale(scale);
        CheckRange(B, 1, kMaxPositions, "B"); // B draws: 2**62 of them ran for ever
        const auto Km = RefMatrix(K, "K"), Vm = RefMatrix(V, "V");
        CheckKV(Km, Vm);
        const auto qv = RefVector(q, "q", Km.cols);
        pig::ref::SparseEstimate e;
        {
          nb::gil_scoped_release rel;
          e = pig::ref::oracle_sampling(qv, Km, Vm, B, seed, scale);
        }
        nb::tuple t = AttentionTuple(e.attention);
        return nb::make_tuple(t[0], t[1], e.attended);
      },
      "q"_a, "K"_a, "V"_a, "B"_a, "seed"_a = 1, "scale"_a = nb::none(),
      "Oracle sampling: B draws from the exact softmax: (out, lse, attended).");
  r.def(
      "magicpig",
      [](const Array &q, const Array &K, const Array &V, int K_bits, int L, int t, uint64_t seed,
         size_t sink, size_t local, std::optional<double> scale, const std::string &transform) {
        CheckScale(scale);
        CheckRange(sink, 0, kMaxPositions, "sink");
        CheckRange(local, 0, kMaxPositions, "local");
        const auto Km = RefMatrix(K, "K"), Vm = RefMatrix(V, "V");
        CheckKV(Km, Vm);
        const auto qv = RefVector(q, "q", Km.cols);
        const pig::ref::LshConfig cfg{K_bits, L, t, seed};
        pig::ref::TransformSpec tr;
        try {
          cfg.validate();
          tr = pig::runtime::ParseServedTransform(transform);
        } catch (const std::invalid_argument &e) {
          Bad(e.what());
        }
        pig::ref::MagicPigResult res;
        {
          nb::gil_scoped_release rel;
          const pig::ref::OwnedMatrix W =
              pig::ref::simhash_matrix(seed, tr.hashed_dim(Km.cols), K_bits, L);
          res = pig::ref::magicpig_attention(qv, Km, Vm, W.view(), cfg,
                                             pig::ref::StaticConfig{sink, local},
                                             pig::ref::Centering::mean_of_indexed, scale, tr);
        }
        nb::tuple a = AttentionTuple(res.attention);
        std::vector<uint32_t> sample(res.sample.begin(), res.sample.end());
        return nb::make_tuple(a[0], a[1], NewArray(std::move(sample)), res.indexed);
      },
      "q"_a, "K"_a, "V"_a, "K_bits"_a = 10, "L"_a = 150, "t"_a = 2,
      "seed"_a = pig::runtime::AttentionSpec{}.seed, "sink"_a = 4, "local"_a = 64,
      "scale"_a = nb::none(), "transform"_a = "plain",
      "MagicPIG: sink and local tokens exact, the indexed rest LSH-sampled with weights 1/u: "
      "(out, lse, sample (token ids, ascending), indexed).");
  r.def(
      "hybrid",
      [](const Array &q, const Array &K, const Array &V, double budget, const std::string &spec,
         int K_bits, int L, uint64_t seed, uint64_t sample_seed, size_t sink, size_t local,
         std::optional<double> scale) {
        CheckScale(scale);
        CheckRange(sink, 0, kMaxPositions, "sink");
        CheckRange(local, 0, kMaxPositions, "local");
        const auto Km = RefMatrix(K, "K"), Vm = RefMatrix(V, "V");
        CheckKV(Km, Vm);
        const auto qv = RefVector(q, "q", Km.cols);
        const pig::ref::LshConfig cfg{K_bits, L, std::min(L, 2), seed};
        pig::ref::HybridConfig h;
        try {
          cfg.validate();
          h = pig::ref::HybridConfig::parse(spec);
          h.budget = budget;
          h.seed = sample_seed;
          h.validate();
        } catch (const std::invalid_argument &e) {
          Bad(e.what());
        }
        pig::ref::HybridResult res;
        {
          nb::gil_scoped_release rel;
          const pig::ref::OwnedMatrix W = pig::ref::simhash_matrix(seed, Km.cols, K_bits, L);
          const pig::ref::LshIndex index =
              pig::ref::build_index(Km, W.view(), cfg, pig::ref::StaticConfig{sink, local});
          res = pig::ref::hybrid_attention(qv, Km, Vm, W.view(), index, h, scale);
        }
        nb::tuple a = AttentionTuple(res.attention);
        std::vector<uint32_t> head(res.head.begin(), res.head.end());
        std::vector<uint32_t> tail(res.tail.begin(), res.tail.end());
        std::vector<double> pi = res.pi;
        return nb::make_tuple(a[0], a[1], NewArray(std::move(head)), NewArray(std::move(tail)),
                              NewArray(std::move(pi)), res.indexed);
      },
      "q"_a, "K"_a, "V"_a, "budget"_a = 0.05, "spec"_a = "", "K_bits"_a = 10, "L"_a = 150,
      "seed"_a = pig::runtime::AttentionSpec{}.seed, "sample_seed"_a = 1, "sink"_a = 4,
      "local"_a = 64, "scale"_a = nb::none(),
      "lsh-hybrid (docs/HYBRID.md): the codes rank, the best head share of the budget exact, the "
      "rest Poisson-drawn with weights 1/pi. spec: head=..:floor=..:rank=..:bits=..:eps=.. "
      "(pig-run's --hybrid). Returns (out, lse, head ids, tail ids, tail pi, indexed).");
}

// --- the LSH index and the kernels of one kv-head group ------------------------------------------

pig::runtime::lsh::LshKernelSet Resolve(int K, int L, size_t d, DType dtype) {
  try {
    return pig::runtime::lsh::KernelRegistry::global().resolve(
        pig::runtime::lsh::KernelKey{K, L, int(d), dtype, pig::runtime::lsh::Target::cpu, {}});
  } catch (const std::invalid_argument &e) {
    Bad(e.what());
  }
}

// One (layer, kv-head)'s index with what a step needs beside it: W, the log u table, the kernels.
class Index {
public:
  Index(const Array &keys, size_t d, int K, int L, int t, uint64_t seed, size_t sink, size_t local,
        const std::string &transform, std::optional<size_t> capacity)
      : d_(d), t_(t) {
    CheckRange(d, 1, kMaxWidth, "d");
    CheckRange(sink, 0, kMaxPositions, "sink");
    CheckRange(local, 0, kMaxPositions, "local");
    const Rows rows = RowsOf(keys, "keys", d);
    dtype_ = rows.dtype;
    try {
      pig::ref::LshConfig{K, L, t, seed}.validate();
      transform_ = pig::runtime::ParseServedTransform(transform);
    } catch (const std::invalid_argument &e) {
      Bad(e.what());
    }
    set_ = Resolve(K, L, d, dtype_);
    capacity_ = capacity.value_or(rows.n);
    CheckRange(capacity_, 0, kMaxPositions, capacity ? "capacity" : "keys: the number of rows");
    if (capacity_ < rows.n)
      Bad("capacity (" + std::to_string(capacity_) + ") is below the " + std::to_string(rows.n) +
          " keys given");
    nb::gil_scoped_release rel;
    W_ = std::make_unique<pig::runtime::lsh::SimHash>(seed, d, K, L);
    log_u_ = std::make_unique<pig::runtime::lsh::LogUTableData>(K, L, t);
    index_ = std::make_unique<pig::runtime::lsh::LshIndex>(pig::runtime::lsh::LshIndex::build(
        set_, rows.data, dtype_, rows.n, *W_, pig::runtime::lsh::StaticTokens{sink, local},
        transform_));
    index_->drop_codes();
    index_->reserve(capacity_);
    scratch_ = std::make_unique<pig::runtime::lsh::RetrievalScratch>(capacity_);
  }

  void Extend(const Array &keys) {
    const Rows rows = RowsOf(keys, "keys", d_);
    CheckDtype(rows, "keys");
    if (rows.n < index_->n())
      Bad("extend: the keys must include the " + std::to_string(index_->n()) +
          " already indexed, got " + std::to_string(rows.n));
    if (rows.n > capacity_)
      Bad("extend: " + std::to_string(rows.n) + " keys exceed the index's capacity of " +
          std::to_string(capacity_));
    nb::gil_scoped_release rel;
    index_->extend(set_, rows.data, dtype_, rows.n, *W_);
  }

  // (tokens (uint32, ascending), masks (uint8, bit h: head h sampled it) or None for G == 1)
  nb::tuple Retrieve(const Array &q) {
    const int G = Group(q);
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> masks;
    {
      nb::gil_scoped_release rel;
      std::lock_guard lock(mu_);
      const size_t u = pig::runtime::lsh::retrieve_step(set_, *index_, *W_, t_, *scratch_, buf_,
                                                        static_cast<const float *>(q.data()), G);
      tokens.assign(buf_.tokens.begin(), buf_.tokens.begin() + std::ptrdiff_t(u));
      if (G > 1)
        masks.assign(buf_.masks.begin(), buf_.masks.begin() + std::ptrdiff_t(u));
    }
    if (G == 1)
      return nb::make_tuple(NewArray(std::move(tokens)), nb::none());
    return nb::make_tuple(NewArray(std::move(tokens)), NewArray(std::move(masks)));
  }

  // MagicPIG for the G heads: (out (G, d), lse (G,), stats).
  nb::tuple Attend(const Array &q, const Array &keys, const Array &values,
                   std::optional<float> scale, std::optional<nb::object> out) {
    CheckScale(scale);
    const int G = Group(q);
    const Rows k = RowsOf(keys, "keys", d_), v = RowsOf(values, "values", d_);
    CheckDtype(k, "keys");
    CheckDtype(v, "values");
    if (k.n != index_->n() || v.n != index_->n())
      Bad("keys and values must have the index's " + std::to_string(index_->n()) +
          " rows (extend it first), got " + std::to_string(k.n) + " and " + std::to_string(v.n));
    Out o = OutOr(out, "out", size_t(G), d_);
    F32Out lse = NewF32({size_t(G)});
    pig::runtime::lsh::StepStats st;
    {
      nb::gil_scoped_release rel;
      std::lock_guard lock(mu_);
      const pig::runtime::lsh::GroupQueries gq{static_cast<const float *>(q.data()), G,
                                               ScaleOr(scale, d_), o.data, lse.data()};
      const pig::runtime::lsh::KvRows rows{k.data, v.data, dtype_, d_, {}};
      pig::runtime::lsh::sampled_step(set_, *index_, *W_, *log_u_, t_, *scratch_, buf_, gq, rows,
                                      &st);
    }
    nb::dict stats;
    stats["sampled_union"] = st.sampled_union;
    stats["indexed"] = st.indexed;
    std::vector<size_t> per(st.sampled_per_head, st.sampled_per_head + G);
    stats["sampled_per_head"] = per;
    stats["index_bytes_read"] = st.index_bytes_read;
    return nb::make_tuple(o.obj, lse, stats);
  }

  nb::dict Stats() const {
    nb::dict s;
    s["n"] = index_->n();
    s["indexed"] = index_->count();
    s["sink_end"] = index_->sink_end();
    s["local_begin"] = index_->local_begin();
    s["tail"] = index_->tail_count();
    s["bytes"] = index_->bytes();
    s["hash_bytes"] = index_->fitted() ? index_->fitted()->bytes() : 0;
    s["kernels"] = pig::runtime::lsh::KernelRegistry::describe(set_);
    s["dtype"] = pig::runtime::lsh::to_string(dtype_);
    return s;
  }
  size_t n() const { return index_->n(); }

private:
  int Group(const Array &q) const {
    const float *p = F32(q, "q", {-1, int64_t(d_)});
    (void)p;
    const size_t G = q.shape(0);
    if (G < 1 || G > size_t(pig::runtime::lsh::kMaxGroup))
      Bad("q: a group has 1 to " + std::to_string(pig::runtime::lsh::kMaxGroup) +
          " query heads, got " + std::to_string(G));
    return int(G);
  }
  void CheckDtype(const Rows &r, const char *name) const {
    if (r.dtype != dtype_)
      Bad(std::string(name) + ": the index was built from " + pig::runtime::lsh::to_string(dtype_) +
          " rows, got " + pig::runtime::lsh::to_string(r.dtype));
  }

  size_t d_;
  int t_;
  DType dtype_ = DType::f32;
  size_t capacity_ = 0;
  pig::ref::TransformSpec transform_;
  pig::runtime::lsh::LshKernelSet set_;
  std::unique_ptr<pig::runtime::lsh::SimHash> W_;
  std::unique_ptr<pig::runtime::lsh::LogUTableData> log_u_;
  std::unique_ptr<pig::runtime::lsh::LshIndex> index_;
  std::unique_ptr<pig::runtime::lsh::RetrievalScratch> scratch_;
  pig::runtime::lsh::StepBuffers buf_;
  std::mutex mu_; // the scratch and buffers serve one call at a time
};

void BindKernels(nb::module_ &m) {
  nb::class_<Index>(m, "LshIndex",
                    "The LSH index of one kv-head (pig::runtime::lsh::LshIndex) with its SimHash "
                    "W, log u table and kernels: build from keys (n, d), extend as the sequence "
                    "grows, retrieve the sample set of a group of G queries, attend.")
      .def(nb::init<const Array &, size_t, int, int, int, uint64_t, size_t, size_t,
                    const std::string &, std::optional<size_t>>(),
           "keys"_a, "d"_a, "K"_a = 10, "L"_a = 150, "t"_a = 2,
           "seed"_a = pig::runtime::AttentionSpec{}.seed, "sink"_a = 4, "local"_a = 64,
           "transform"_a = "plain", "capacity"_a = nb::none())
      .def("extend", &Index::Extend, "keys"_a,
           "The sequence grew: keys holds every row, the indexed ones unchanged.")
      .def("retrieve", &Index::Retrieve, "q"_a,
           "The union of the G queries' sample sets: (tokens (uint32, ascending), masks (uint8, "
           "bit h set when head h sampled the token; None for G = 1)).")
      .def("attend", &Index::Attend, "q"_a, "keys"_a, "values"_a, "scale"_a = nb::none(),
           "out"_a = nb::none(),
           "MagicPIG for the G query heads q (G, d) over the index's rows: (out (G, d), lse (G,), "
           "stats). `out` (float32 (G, d)) is written in place when given.")
      .def_prop_ro("stats", &Index::Stats)
      .def_prop_ro("n", &Index::n)
      .def("__len__", &Index::n);

  m.def(
      "dense_attention",
      [](const Array &q, const Array &keys, const Array &values, size_t begin,
         std::optional<size_t> end, std::optional<float> scale, std::optional<nb::object> out) {
        CheckScale(scale);
        const float *qp = F32(q, "q", {-1, -1});
        const size_t G = q.shape(0), d = q.shape(1);
        if (G < 1 || G > size_t(pig::runtime::lsh::kMaxGroup))
          Bad("q: a group has 1 to " + std::to_string(pig::runtime::lsh::kMaxGroup) +
              " query heads, got " + std::to_string(G));
        const Rows k = RowsOf(keys, "keys", d), v = RowsOf(values, "values", d);
        if (k.dtype != v.dtype || k.n != v.n)
          Bad("keys and values must have the same dtype and rows");
        const size_t e = end.value_or(k.n);
        if (begin > e || e > k.n)
          Bad("[begin, end) must lie within the " + std::to_string(k.n) + " rows");
        const auto set = Resolve(10, 150, d, k.dtype);
        Out o = OutOr(out, "out", G, d);
        F32Out lse = NewF32({G});
        {
          nb::gil_scoped_release rel;
          pig::runtime::lsh::DenseAttentionArgs a;
          a.q = qp;
          a.G = int(G);
          a.d = d;
          a.scale = ScaleOr(scale, d);
          a.k = k.data;
          a.v = v.data;
          a.dtype = k.dtype;
          a.begin = begin;
          a.end = e;
          a.out = o.data;
          a.lse = lse.data();
          set.dense_attention(a);
        }
        return nb::make_tuple(o.obj, lse);
      },
      "q"_a, "keys"_a, "values"_a, "begin"_a = 0, "end"_a = nb::none(), "scale"_a = nb::none(),
      "out"_a = nb::none(),
      "Exact attention of G query heads (G, d) over rows [begin, end) of one kv-head (the dense "
      "kernel): (out (G, d), lse (G,)).");

  m.def(
      "to_bf16",
      [](const Array &x) {
        const float *p = F32(x, "x", {-1, -1});
        const size_t n = x.shape(0), c = x.shape(1);
        auto *v = new std::vector<uint16_t>(n * c);
        {
          nb::gil_scoped_release rel;
          pig::runtime::lsh::convert_to_bf16(p, v->data(), n * c);
        }
        nb::capsule owner(v,
                          [](void *q) noexcept { delete static_cast<std::vector<uint16_t> *>(q); });
        return nb::ndarray<nb::numpy, uint16_t>(v->data(), {n, c}, owner);
      },
      "x"_a, "float32 (n, d) rounded to bf16 (nearest even), as uint16 bits (n, d).");
  m.def(
      "quantize_q8",
      [](const Array &x) {
        const float *p = F32(x, "x", {-1, -1});
        const size_t n = x.shape(0), d = x.shape(1);
        if (d % pig::spec::kQ8Block != 0)
          Bad("x: q8 needs rows whose length is a multiple of " +
              std::to_string(pig::spec::kQ8Block));
        const size_t rb = pig::spec::row_bytes(DType::q8, d);
        auto *v = new std::vector<uint8_t>(n * rb);
        {
          nb::gil_scoped_release rel;
          for (size_t i = 0; i < n; ++i)
            pig::ref::quantize_q8(p + i * d, d, v->data() + i * rb);
        }
        nb::capsule owner(v,
                          [](void *q) noexcept { delete static_cast<std::vector<uint8_t> *>(q); });
        return nb::ndarray<nb::numpy, uint8_t>(v->data(), {n, rb}, owner);
      },
      "x"_a,
      "float32 (n, d) as pig's 8-bit rows (uint8 (n, row_bytes)): a bf16 scale per 32 "
      "elements (docs/KV8.md).");
  m.def(
      "rows_to_f32",
      [](const Array &rows, size_t d) {
        CheckRange(d, 1, kMaxWidth, "d");
        const Rows r = RowsOf(rows, "rows", d);
        F32Out o = NewF32({r.n, d});
        {
          nb::gil_scoped_release rel;
          for (size_t i = 0; i < r.n; ++i)
            pig::runtime::lsh::row_to_f32(r.data, r.dtype, i, d, o.data() + i * d);
        }
        return o;
      },
      "rows"_a, "d"_a, "Rows of any supported dtype as float32 (n, d), as the kernels read them.");

  m.def(
      "describe_kernels",
      [](int K, int L, size_t d, const std::string &dtype) {
        CheckRange(d, 1, kMaxWidth, "d"); // the registry's key holds an int: 2**40 read as 0
        DType t;
        if (!pig::runtime::lsh::parse_dtype(dtype, t))
          Bad("dtype must be f32, bf16 or q8, got '" + dtype + "'");
        return pig::runtime::lsh::KernelRegistry::describe(Resolve(K, L, d, t));
      },
      "K"_a = 10, "L"_a = 150, "d"_a = 64, "dtype"_a = "bf16",
      "Which kernels serve (K, L, d, dtype) here: specialised (generated from "
      "configs/kernels.txt) or generic, the SIMD target and the schedule.");
  m.def(
      "registered_kernels",
      [] {
        std::vector<std::string> out;
        for (const auto &k : pig::runtime::lsh::KernelRegistry::global().keys())
          out.push_back(k.config().str_with_schedule());
        return out;
      },
      "The specialised kernel sets built into this module (configs/kernels.txt).");
}

// --- the model runtime --------------------------------------------------------------------------

// An AttentionSpec from its keywords: the table of attention fields that pig-run's options are
// made from (pig/app/attention_fields.h), numbers given as numbers; an error names the keyword.
pig::runtime::AttentionSpec ParseSpec(const std::string &method, const std::string &lsh,
                                      const std::string &kv, std::optional<size_t> sink,
                                      std::optional<size_t> local,
                                      const std::optional<std::string> &dense_layers,
                                      std::optional<double> budget, const std::string &transform,
                                      const std::string &hybrid, const nb::object &mean_window,
                                      const nb::object &dense_below) {
  std::vector<std::pair<std::string, pig::app::FieldValue>> values = {
      {"method", method}, {"kv", kv}, {"transform", transform}};
  if (!hybrid.empty())
    values.emplace_back("hybrid", hybrid);
  if (!lsh.empty())
    values.emplace_back("lsh", lsh);
  if (sink)
    values.emplace_back("sink", std::uint64_t(*sink));
  if (local)
    values.emplace_back("local", std::uint64_t(*local));
  if (dense_layers)
    values.emplace_back("dense_layers", *dense_layers);
  if (budget)
    values.emplace_back("budget", *budget);
  // A number (of keys, of positions), or the field's word ("prefix", "measured") as text.
  auto number_or_word = [&values](const char *key, const nb::object &v, const char *expects) {
    if (v.is_none())
      return;
    if (nb::isinstance<nb::str>(v))
      values.emplace_back(key, nb::cast<std::string>(v));
    else if (nb::isinstance<nb::int_>(v) && nb::cast<long long>(v) >= 0)
      values.emplace_back(key, std::uint64_t(nb::cast<long long>(v)));
    else
      Bad(std::string(key) + ": expects " + expects);
  };
  number_or_word("mean_window", mean_window, "a number of keys or 'prefix'");
  number_or_word("dense_below", dense_below, "a number of positions or 'measured'");
  pig::runtime::AttentionSpec spec;
  std::vector<std::string> warnings;
  try {
    pig::app::ApplyFields(spec, pig::app::Front::kPython, values, &warnings);
  } catch (const std::invalid_argument &e) {
    Bad(e.what());
  }
  for (const std::string &w : warnings) // a deprecated spelling, as pig-run says it
    std::fprintf(stderr, "pig: warning: %s\n", w.c_str());
  return spec;
}

// The sessions of one model that share prompt prefixes (Model.session(prefix_cache=True)): one
// KV pool and one PrefixCache per element type, made at first use.
class PrefixShare {
public:
  explicit PrefixShare(const pig::runtime::LlamaConfig &c) : config_(c) {}
  std::shared_ptr<pig::runtime::KvPool> Pool(DType dtype) {
    std::lock_guard lock(mu_);
    for (auto &e : by_dtype_)
      if (e.pool->dtype() == dtype)
        return e.pool;
    const pig::runtime::AttentionShape shape = config_.Shape(0);
    Entry e;
    e.pool = std::make_shared<pig::runtime::KvPool>(shape, dtype, 0);
    std::uint64_t salt = 0x707974686f6eull; // the model's shape; sessions prefill on one path
    for (size_t x : {config_.n_layers, config_.n_kv_heads, config_.head_dim, config_.vocab})
      salt = (salt ^ x) * 0x100000001b3ull;
    e.cache = std::make_unique<pig::runtime::PrefixCache>(e.pool, salt);
    by_dtype_.push_back(std::move(e));
    return by_dtype_.back().pool;
  }
  pig::runtime::PrefixCache *CacheOf(const pig::runtime::KvPool &pool) {
    std::lock_guard lock(mu_);
    for (auto &e : by_dtype_)
      if (e.pool.get() == &pool)
        return e.cache.get();
    return nullptr;
  }
  pig::runtime::PrefixCache::Stats Stats() {
    std::lock_guard lock(mu_);
    pig::runtime::PrefixCache::Stats t;
    for (auto &e : by_dtype_)
      t += e.cache->stats();
    return t;
  }

private:
  struct Entry {
    std::shared_ptr<pig::runtime::KvPool> pool;
    std::unique_ptr<pig::runtime::PrefixCache> cache;
  };
  pig::runtime::LlamaConfig config_;
  std::mutex mu_;
  std::vector<Entry> by_dtype_;
};

class Session {
public:
  Session(std::shared_ptr<pig::runtime::LlamaModel> model, const pig::runtime::AttentionSpec &spec,
          size_t capacity, size_t threads, std::shared_ptr<PrefixShare> share = nullptr)
      : model_(std::move(model)), pool_(threads), share_(std::move(share)) {
    const pig::runtime::LlamaConfig &c = model_->config();
    if (capacity == 0)
      capacity = c.context_length;
    try {
      spec.Validate(c.n_layers);
      session_ = std::make_unique<pig::runtime::LlamaSession>(
          *model_, pool_, capacity,
          pig::runtime::MakeAttention(spec, c.Shape(capacity),
                                      share_ ? share_->Pool(spec.kv_dtype) : nullptr));
    } catch (const std::invalid_argument &e) {
      Bad(e.what());
    }
    spec_ = spec;
    logits_.resize(c.vocab);
  }

  // Runs tokens at the next positions; returns the last one's logits (vocab,).
  F32Out Forward(const std::vector<int32_t> &tokens) {
    if (tokens.empty())
      Bad("tokens: at least one token");
    try {
      const size_t vocab = model_->config().vocab;
      for (int32_t t : tokens)
        if (t < 0 || size_t(t) >= vocab)
          Bad("tokens: id " + std::to_string(t) + " is outside the vocabulary [0, " +
              std::to_string(vocab) + ")");
      if (session_->position() + tokens.size() > session_->capacity())
        Bad("tokens: " + std::to_string(session_->position() + tokens.size()) +
            " positions exceed the session's capacity of " + std::to_string(session_->capacity()));
      nb::gil_scoped_release rel;
      // A prompt from position 0 over a shared pool: its longest cached prefix is attached, the
      // rest prefilled (the same logits), and the prompt is cached for the next session.
      pig::runtime::PrefixCache *cache =
          share_ && session_->position() == 0 && session_->attention().cache().blocks().empty()
              ? share_->CacheOf(session_->attention().cache().pool())
              : nullptr;
      size_t hit = 0;
      if (cache) {
        std::vector<std::int32_t> blocks;
        hit = cache->Lookup(tokens.data(), tokens.size(), blocks);
        if (hit > 0) {
          session_->attention().AttachPrefix(blocks.data(), blocks.size());
          session_->SetPosition(hit);
        }
        cached_tokens_ = hit;
      }
      session_->Forward(tokens.data() + hit, tokens.size() - hit, logits_.data());
      if (cache && tokens.size() >= 2)
        cache->Insert(tokens.data(), tokens.size(), session_->attention().cache().blocks());
    } catch (const std::runtime_error &e) {
      Bad(e.what());
    }
    F32Out out = NewF32({logits_.size()});
    std::memcpy(out.data(), logits_.data(), logits_.size() * sizeof(float));
    return out;
  }

  // Prefills the prompt and samples up to max_new tokens (stopping at the end of generation).
  std::vector<int32_t> Generate(const std::vector<int32_t> &prompt, size_t max_new,
                                float temperature, float top_p, uint64_t seed) {
    CheckRange(max_new, 0, kMaxPositions, "max_new");
    // pig-run's --temperature and --top-p ranges; NaN fails both comparisons.
    if (!(temperature >= 0.0f && temperature <= 1e6f))
      Bad("temperature must be in [0, 1e6] (0: greedy), got " + std::to_string(temperature));
    if (!(top_p > 0.0f && top_p <= 1.0f))
      Bad("top_p must be in (0, 1], got " + std::to_string(top_p));
    if (max_new == 0)
      return {};
    // The prompt and the first max_new - 1 generated tokens take a position each (the last one
    // is sampled, never run): checked before the prefill, in a form that cannot wrap. It was
    // checked after the prefill as position + max_new - 1 > capacity, which max_new = 2**64 - 1
    // wrapped past: the session generated until its context was full, then failed.
    const size_t room = session_->capacity() - session_->position();
    if (prompt.size() <= room && max_new - 1 > room - prompt.size())
      Bad("max_new: the session's capacity (" + std::to_string(session_->capacity()) + ") holds " +
          std::to_string(room - prompt.size() + 1) + " more tokens after the prompt, got " +
          std::to_string(max_new));
    Forward(prompt);
    std::vector<int32_t> out;
    nb::gil_scoped_release rel;
    pig::app::Generation gen(model_->tokenizer(), {{temperature, top_p, seed}, max_new, {}, false});
    for (;;) {
      const int32_t t = gen.Next(logits_.data(), logits_.size()).id;
      out.push_back(t);
      if (gen.done())
        return out;
      session_->Forward(&t, 1, logits_.data());
    }
  }

  nb::dict Stats() const {
    const pig::runtime::AttentionStats st = session_->attention().stats();
    nb::dict s;
    s["position"] = session_->position();
    s["capacity"] = session_->capacity();
    s["attention"] = spec_.str(model_->config().n_layers);
    s["decode_steps"] = st.decode_steps;
    s["cost2"] = st.cost2();
    s["index_bytes"] = st.index_bytes;
    s["shared_index_bytes"] = st.shared_index_bytes;
    s["kv_bytes"] = session_->attention().cache().MemoryBytes();
    s["kernels"] = st.kernels;
    s["cached_tokens"] = cached_tokens_;
    return s;
  }
  void Reset() {
    session_->Reset();
    cached_tokens_ = 0;
  }
  size_t position() const { return session_->position(); }

private:
  std::shared_ptr<pig::runtime::LlamaModel> model_;
  pig::runtime::ThreadPool pool_;
  std::unique_ptr<pig::runtime::LlamaSession> session_;
  std::shared_ptr<PrefixShare> share_; // Model.session(prefix_cache=True)
  size_t cached_tokens_ = 0;           // of the last prompt run from position 0
  pig::runtime::AttentionSpec spec_;
  std::vector<float> logits_;
};

void BindRuntime(nb::module_ &m) {
  nb::class_<pig::runtime::AttentionSpec>(m, "AttentionSpec",
                                          "Which attention a session runs: pig-run's options.")
      .def(
          "__init__",
          [](pig::runtime::AttentionSpec *self, const std::string &method, const std::string &lsh,
             const std::string &kv, std::optional<size_t> sink, std::optional<size_t> local,
             std::optional<std::string> dense_layers, std::optional<double> budget,
             const std::string &transform, const std::string &hybrid, const nb::object &mean_window,
             const nb::object &dense_below) {
            new (self) pig::runtime::AttentionSpec(ParseSpec(method, lsh, kv, sink, local,
                                                             dense_layers, budget, transform,
                                                             hybrid, mean_window, dense_below));
          },
          "method"_a = "dense", "lsh"_a = "", "kv"_a = "bf16", "sink"_a = nb::none(),
          "local"_a = nb::none(), "dense_layers"_a = nb::none(), "budget"_a = nb::none(),
          "transform"_a = "plain", "hybrid"_a = "", "mean_window"_a = nb::none(),
          "dense_below"_a = nb::none())
      .def_prop_ro("method", [](const pig::runtime::AttentionSpec &s) { return s.method_name(); })
      .def_ro("K", &pig::runtime::AttentionSpec::K)
      .def_ro("L", &pig::runtime::AttentionSpec::L)
      .def_ro("t", &pig::runtime::AttentionSpec::t)
      .def_ro("r", &pig::runtime::AttentionSpec::r)
      .def_ro("sink", &pig::runtime::AttentionSpec::sink)
      .def_ro("local", &pig::runtime::AttentionSpec::local)
      .def_prop_ro("mean_window",
                   [](const pig::runtime::AttentionSpec &s) -> nb::object {
                     if (s.mean_window == pig::runtime::AttentionSpec::kMeanOfPrefix)
                       return nb::str("prefix");
                     return nb::int_(s.mean_window);
                   })
      .def_prop_ro("dense_below",
                   [](const pig::runtime::AttentionSpec &s) -> nb::object {
                     if (s.dense_below == pig::runtime::AttentionSpec::kDenseBelowMeasured)
                       return nb::str("measured");
                     return nb::int_(s.dense_below);
                   })
      .def("__repr__",
           [](const pig::runtime::AttentionSpec &s) { return "AttentionSpec(" + s.str(0) + ")"; });

  nb::class_<Session>(m, "Session", "One sequence's decoding state on a Model.")
      .def("forward", &Session::Forward, "tokens"_a,
           "Runs the tokens at the next positions (a prompt: densely, in chunks; one token: a "
           "decode step of the session's attention); returns the last one's logits (vocab,).")
      .def("generate", &Session::Generate, "prompt"_a, "max_new"_a = 64, "temperature"_a = 0.0f,
           "top_p"_a = 1.0f, "seed"_a = 0,
           "Prefills `prompt` and samples up to max_new tokens (greedy at temperature 0), "
           "stopping at the end of generation; returns the generated ids.")
      .def("reset", &Session::Reset)
      .def_prop_ro("position", &Session::position)
      .def_prop_ro("stats", &Session::Stats);

  struct Model {
    std::shared_ptr<pig::runtime::LlamaModel> impl;
    std::shared_ptr<PrefixShare> prefix; // its sessions' shared prompt prefixes
  };
  nb::class_<Model>(m, "Model", "A Llama-family GGUF model on the CPU (pig::runtime::LlamaModel).")
      .def(
          "__init__",
          [](Model *self, std::optional<std::string> path) {
            std::shared_ptr<pig::runtime::LlamaModel> impl;
            {
              nb::gil_scoped_release rel;
              try {
                impl =
                    pig::runtime::LlamaModel::Load(path.value_or(pig::runtime::DefaultModelPath()));
              } catch (const std::exception &e) {
                nb::gil_scoped_acquire acq;
                Bad(e.what());
              }
            }
            auto prefix = std::make_shared<PrefixShare>(impl->config());
            new (self) Model{std::move(impl), std::move(prefix)};
          },
          "path"_a = nb::none(), "Loads a GGUF file (default: the model ./pig installs).")
      .def_prop_ro("config",
                   [](const Model &m) {
                     const auto &c = m.impl->config();
                     nb::dict d;
                     d["arch"] = c.arch;
                     d["n_layers"] = c.n_layers;
                     d["dim"] = c.dim;
                     d["n_heads"] = c.n_heads;
                     d["n_kv_heads"] = c.n_kv_heads;
                     d["head_dim"] = c.head_dim;
                     d["vocab"] = c.vocab;
                     d["context_length"] = c.context_length;
                     return d;
                   })
      .def(
          "encode",
          [](const Model &m, const std::string &text, bool add_bos) {
            return m.impl->tokenizer().Encode(text, add_bos);
          },
          "text"_a, "add_bos"_a = true)
      .def(
          "encode_chat",
          [](const Model &m, const std::vector<std::pair<std::string, std::string>> &msgs) {
            std::vector<pig::runtime::ChatMessage> v;
            for (const auto &[role, content] : msgs)
              v.push_back({role, content});
            try {
              return m.impl->tokenizer().EncodeChat(v);
            } catch (const std::exception &e) {
              Bad(e.what());
            }
          },
          "messages"_a, "A conversation [(role, content), ...] through the chat template.")
      .def(
          "decode",
          [](const Model &m, const std::vector<int32_t> &ids) {
            const auto &tok = m.impl->tokenizer();
            std::string s;
            for (int32_t id : ids) {
              if (id < 0 || size_t(id) >= tok.vocab_size())
                Bad("id " + std::to_string(id) + " is outside the vocabulary");
              if (!tok.IsControl(id))
                s += tok.Decode(id);
            }
            return nb::steal<nb::str>(
                PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace"));
          },
          "ids"_a)
      .def(
          "session",
          [](const Model &m, std::optional<pig::runtime::AttentionSpec> attention, size_t capacity,
             size_t threads, bool prefix_cache) {
            // before any thread starts or any memory is taken
            CheckRange(capacity, 0, kMaxPositions, "capacity");
            CheckRange(threads, 0, kMaxThreads, "threads");
            return new Session(m.impl, attention.value_or(pig::runtime::AttentionSpec{}), capacity,
                               threads, prefix_cache ? m.prefix : nullptr);
          },
          "attention"_a = nb::none(), "capacity"_a = 0, "threads"_a = 0, "prefix_cache"_a = false,
          nb::rv_policy::take_ownership,
          "A decoding session: capacity positions (0: the model's context; at most 2**24), "
          "threads (0: every core; at most 1024). prefix_cache: the model's sessions that set it "
          "share prompt prefixes: a prompt run from position 0 attaches the KV blocks of its "
          "longest prefix another such session prefilled (stats['cached_tokens']), with the same "
          "logits, and is cached in turn.")
      .def_prop_ro(
          "prefix_stats",
          [](const Model &m) {
            const pig::runtime::PrefixCache::Stats st = m.prefix->Stats();
            nb::dict d;
            d["lookups"] = st.lookups;
            d["hits"] = st.hits;
            d["hit_tokens"] = st.hit_tokens;
            d["evictions"] = st.evictions;
            d["blocks"] = st.blocks;
            d["bytes"] = st.bytes;
            return d;
          },
          "The prefix cache its sessions share (Model.session(prefix_cache=True)).");
}

// --- decode over an engine's paged KV cache (vLLM) ----------------------------------------------

bool IsI32(const Array &a) { return a.dtype() == nb::dtype<int32_t>(); }

class Paged {
public:
  Paged(const pig::runtime::AttentionSpec &spec, size_t num_layers, size_t q_heads, size_t kv_heads,
        size_t d, size_t block_size, size_t max_tokens, size_t threads)
      : pool_(Checked(num_layers, q_heads, kv_heads, d, block_size, max_tokens, threads)) {
    try {
      impl_ = std::make_unique<pig::runtime::PagedLshAttention>(
          spec, pig::runtime::AttentionShape{num_layers, q_heads, kv_heads, d, max_tokens},
          block_size);
    } catch (const std::invalid_argument &e) {
      Bad(e.what());
    }
    shape_ = {num_layers, q_heads, kv_heads, d, max_tokens};
    block_size_ = block_size;
  }

  void Decode(size_t layer, const std::vector<std::string> &req_ids, const Array &query,
              const Array &kv_cache, const Array &block_table, const Array &seq_lens,
              nb::ndarray<> out, float scale) {
    CheckScale(scale);
    const size_t R = req_ids.size(), Hq = shape_.n_heads, H = shape_.n_kv_heads,
                 d = shape_.head_dim, bs = block_size_;
    const bool bf16 = IsBf16(query);
    if (!bf16 && !IsF32(query))
      Bad("query: expected bfloat16 or float32, got " + DtypeName(query));
    CheckShape(query, "query", {int64_t(R), int64_t(Hq), int64_t(d)});
    const Array o(out);
    if (o.dtype() != query.dtype())
      Bad("out: expected the query's dtype (" + DtypeName(query) + "), got " + DtypeName(o));
    CheckShape(o, "out", {int64_t(R), int64_t(Hq), int64_t(d)});
    DType kv_dtype;
    if (IsBf16(kv_cache) || IsU16(kv_cache))
      kv_dtype = DType::bf16;
    else if (IsF32(kv_cache))
      kv_dtype = DType::f32;
    else
      Bad("kv_cache: expected bfloat16 (or uint16 bf16 bits) or float32, got " +
          DtypeName(kv_cache));
    CheckShape(kv_cache, "kv_cache", {-1, int64_t(H), int64_t(2 * bs), int64_t(d)});
    if (!IsI32(block_table))
      Bad("block_table: expected int32, got " + DtypeName(block_table));
    CheckShape(block_table, "block_table", {int64_t(R), -1});
    if (!IsI32(seq_lens))
      Bad("seq_lens: expected int32, got " + DtypeName(seq_lens));
    CheckShape(seq_lens, "seq_lens", {int64_t(R)});
    const size_t M = block_table.shape(1);
    const auto *bt = static_cast<const int32_t *>(block_table.data());
    const auto *lens = static_cast<const int32_t *>(seq_lens.data());
    for (size_t i = 0; i < R; ++i)
      if (lens[i] <= 0)
        Bad("seq_lens: request " + req_ids[i] + " has " + std::to_string(lens[i]) + " tokens");
    {
      nb::gil_scoped_release rel;
      std::lock_guard lock(mu_);
      const size_t count = R * Hq * d;
      const float *q = static_cast<const float *>(query.data());
      float *of = static_cast<float *>(out.data());
      if (bf16) { // the kernels take f32 queries and write f32 outputs
        qf_.resize(count);
        of_.resize(count);
        pig::runtime::lsh::convert_from_bf16(static_cast<const uint16_t *>(query.data()),
                                             qf_.data(), count);
        q = qf_.data();
        of = of_.data();
      }
      std::vector<pig::runtime::PagedRow> rows(R);
      for (size_t i = 0; i < R; ++i)
        rows[i] = {req_ids[i], {bt + i * M, M}, size_t(lens[i]), q + i * Hq * d, of + i * Hq * d};
      try {
        impl_->Decode(layer, {kv_cache.data(), kv_dtype, kv_cache.shape(0), bs}, rows, scale,
                      pool_);
      } catch (const std::invalid_argument &e) {
        nb::gil_scoped_acquire acq;
        Bad(e.what());
      }
      if (bf16)
        pig::runtime::lsh::convert_to_bf16(of_.data(), static_cast<uint16_t *>(out.data()), count);
    }
  }

  void Free(const std::string &id) {
    nb::gil_scoped_release rel;
    std::lock_guard lock(mu_);
    impl_->Free(id);
  }
  std::vector<std::string> Requests() {
    std::lock_guard lock(mu_);
    return impl_->Requests();
  }
  size_t Bytes() {
    std::lock_guard lock(mu_);
    return impl_->IndexBytes();
  }
  nb::dict Stats() {
    std::lock_guard lock(mu_);
    const pig::runtime::AttentionStats st = impl_->stats();
    nb::dict s;
    s["attention"] = impl_->spec().str(shape_.n_layers);
    s["decode_rows"] = st.decode_steps;
    s["cost2"] = st.cost2();
    s["index_bytes"] = st.index_bytes;
    s["hash_bytes"] = st.hash_bytes;
    const pig::runtime::IndexShare::Stats shared = impl_->SharedIndexStats();
    s["shared_index_bytes"] = shared.bytes; // indexes over blocks requests share, once each
    s["shared_index_builds"] = shared.builds;
    s["shared_index_hits"] = shared.hits;
    s["requests"] = impl_->Requests().size();
    s["layers"] = shape_.n_layers; // what this process serves (a tensor-parallel rank: its share)
    s["q_heads"] = shape_.n_heads;
    s["kv_heads"] = shape_.n_kv_heads;
    s["indexed"] = st.indexed; // indexed tokens each query head's decode rows saw, summed
    s["kernels"] = st.kernels;
    s["threads"] = pool_.size();
    return s;
  }

private:
  // The shape's ranges, before the pool starts its threads; returns `threads`. What needs the
  // spec (GQA groups the kernels serve, an even head dim, the dtype) PagedLshAttention checks.
  static size_t Checked(size_t num_layers, size_t q_heads, size_t kv_heads, size_t d,
                        size_t block_size, size_t max_tokens, size_t threads) {
    CheckRange(num_layers, 1, kMaxLayers, "num_layers");
    CheckRange(q_heads, 1, kMaxWidth, "num_q_heads"); // 0 aborted the interpreter at decode
    CheckRange(kv_heads, 1, q_heads, "num_kv_heads");
    if (q_heads % kv_heads != 0)
      Bad("num_q_heads (" + std::to_string(q_heads) + ") must be a multiple of num_kv_heads (" +
          std::to_string(kv_heads) + ")");
    CheckRange(d, 1, kMaxWidth, "head_dim");
    CheckRange(block_size, 1, kMaxPositions, "block_size");
    CheckRange(max_tokens, 1, kMaxPositions, "max_tokens");
    CheckRange(threads, 0, kMaxThreads, "threads");
    return threads;
  }

  pig::runtime::ThreadPool pool_;
  std::unique_ptr<pig::runtime::PagedLshAttention> impl_;
  pig::runtime::AttentionShape shape_;
  size_t block_size_ = 0;
  std::vector<float> qf_, of_;
  std::mutex mu_; // one call at a time (the state and the conversion buffers)
};

void BindPaged(nb::module_ &m) {
  nb::class_<Paged>(m, "PagedAttention",
                    "Decode attention over an engine's paged KV cache (vLLM's CPU layout: "
                    "kv_cache [blocks, kv_heads, 2 * block_size, head_dim], a block's K rows then "
                    "its V rows, both row-major), read in place through each request's block "
                    "table (pig::runtime::PagedLshAttention: each request is the Attention "
                    "pig.Session decodes with). Keeps each request's state (LSH indexes, page "
                    "bounds, sketches) between calls until free(request).")
      .def(nb::init<const pig::runtime::AttentionSpec &, size_t, size_t, size_t, size_t, size_t,
                    size_t, size_t>(),
           "spec"_a, "num_layers"_a, "num_q_heads"_a, "num_kv_heads"_a, "head_dim"_a,
           "block_size"_a, "max_tokens"_a = size_t(1) << 17, "threads"_a = 0,
           "spec: any method, over bf16 or f32 caches (kv q8 is pig's own row format: refused); "
           "max_tokens: the longest sequence (at most 2**24); threads: the decode pool (0: every "
           "core; at most 1024).")
      .def("decode", &Paged::Decode, "layer"_a, "req_ids"_a, "query"_a, "kv_cache"_a,
           "block_table"_a, "seq_lens"_a, "out"_a, "scale"_a,
           "One decode token per request: query and out [R, q_heads, head_dim] (bfloat16 or "
           "float32, the same), block_table int32 [R, max_blocks], seq_lens int32 [R] (the new "
           "token's K and V already in kv_cache, and counted); scale: the first call's for "
           "every call.")
      .def("free", &Paged::Free, "request"_a, "Drops the request's state (unknown ids: nothing).")
      .def_prop_ro("requests", &Paged::Requests, "Requests with state, sorted.")
      .def_prop_ro("bytes", &Paged::Bytes, "Index bytes held.")
      .def_prop_ro("stats", &Paged::Stats);
}

} // namespace

NB_MODULE(_pig, m) {
  m.doc() = "pig: LSH sampling attention (MagicPIG) kernels, reference and runtime";
  pig::app::RegisterKernels();
  m.def(
      "simd_target",
      [] { return std::string(pig::runtime::lsh::generic_kernel_set().simd_target); },
      "The Highway target the kernels run on this CPU (e.g. AVX3_DL, AVX2).");
  BindReference(m);
  BindKernels(m);
  BindRuntime(m);
  BindPaged(m);
}
