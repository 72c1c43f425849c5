// pig.h over pig::runtime: one kv-head's LSH index (lsh::LshIndex), its retrieval and MagicPIG
// step (lsh_step.h), and the dense kernel, each call's C++ exceptions turned into a pig_status and
// a thread-local message. Only the pig_* functions leave libpig.so (capi/pig.map).
#include "pig.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "pig/runtime/attention.h"
#include "pig/runtime/kernel_plugin.h"
#include "pig/runtime/lsh_index.h"
#include "pig/runtime/lsh_kernels.h"
#include "pig/runtime/lsh_step.h"
#ifdef PIG_CAPI_GENERATED
#include "pig/runtime/generated_kernels.h"
#endif

namespace lsh = pig::runtime::lsh;

namespace {

thread_local std::string last_error;

// A failure with its status; what() is the message pig_last_error() returns.
struct Failure : std::runtime_error {
  pig_status status;
  Failure(pig_status s, const std::string &what) : std::runtime_error(what), status(s) {}
};

[[noreturn]] void Fail(pig_status s, const std::string &what) { throw Failure(s, what); }

// Runs body, turning every exception into a status and this thread's message.
template <typename F> pig_status Guard(const char *fn, F &&body) {
  try {
    body();
    last_error.clear();
    return PIG_OK;
  } catch (const Failure &e) {
    last_error = std::string(fn) + ": " + e.what();
    return e.status;
  } catch (const std::bad_alloc &) {
    last_error = std::string(fn) + ": out of memory";
    return PIG_ERR_MEMORY;
  } catch (const std::invalid_argument &e) {
    last_error = std::string(fn) + ": " + e.what();
    return PIG_ERR_INVALID;
  } catch (const std::out_of_range &e) {
    last_error = std::string(fn) + ": " + e.what();
    return PIG_ERR_RANGE;
  } catch (const std::length_error &e) {
    last_error = std::string(fn) + ": " + e.what();
    return PIG_ERR_RANGE;
  } catch (const std::exception &e) {
    last_error = std::string(fn) + ": " + e.what();
    return PIG_ERR_INTERNAL;
  } catch (...) {
    last_error = std::string(fn) + ": unknown exception";
    return PIG_ERR_INTERNAL;
  }
}

void NotNull(const void *p, const char *what) {
  if (!p)
    Fail(PIG_ERR_NULL, std::string(what) + " is NULL");
}

void RegisterGenerated() {
#ifdef PIG_CAPI_GENERATED
  static std::once_flag once;
  std::call_once(once, [] { pig_register_generated_kernels(); });
#endif
}

lsh::DType DTypeOf(pig_dtype t, const char *what) {
  switch (t) {
  case PIG_F32:
    return lsh::DType::f32;
  case PIG_BF16:
    return lsh::DType::bf16;
  case PIG_DTYPE_MAX_ENUM:
    break;
  }
  Fail(PIG_ERR_DTYPE, std::string(what) + ": dtype " + std::to_string(int(t)) +
                          " is neither PIG_F32 nor PIG_BF16");
}

// Rows as the kernels read them: a base, and a page table (null: back to back). A contiguous
// layout with a row stride other than d elements becomes a table of one row per page.
struct KernelRows {
  const void *data = nullptr;
  lsh::DType dtype = lsh::DType::f32;
  size_t d = 0, n = 0;
  lsh::PagedRows paged;
  bool strided = false; // one row per page: Bind sets the pages
};

// Pages 0, 1, 2, ...: a strided layout read as one row per page. One table per thread, grown as
// needed and shared by every call, so a strided call does not rebuild it. Bind gives it to the
// strided rows of one call once all of them are read (growing it moves it).
void Bind(std::initializer_list<KernelRows *> rows) {
  thread_local std::vector<std::int32_t> pages;
  size_t n = 0;
  for (const KernelRows *r : rows)
    if (r->strided)
      n = std::max(n, r->n);
  for (size_t i = pages.size(); i < n; ++i)
    pages.push_back(std::int32_t(i));
  for (KernelRows *r : rows)
    if (r->strided)
      r->paged.pages = pages.data();
}

void Read(const pig_rows *r, const char *what, KernelRows &out) {
  NotNull(r, what);
  NotNull(r->data, (std::string(what) + "->data").c_str());
  out.dtype = DTypeOf(r->dtype, what);
  out.data = r->data;
  out.d = r->d;
  out.n = r->n;
  if (r->d < 2 || r->d > 1024 || r->d % 2)
    Fail(PIG_ERR_INVALID, std::string(what) + ": d = " + std::to_string(r->d) +
                              ", pig serves even head dims from 2 to 1024");
  const size_t row_bytes = lsh::row_bytes(out.dtype, r->d);
  out.paged = {};
  out.strided = false;
  if (r->block_table) {
    if (r->block_tokens == 0)
      Fail(PIG_ERR_INVALID, std::string(what) + ": block_tokens is 0");
    if (r->block_stride < r->block_tokens * row_bytes)
      Fail(PIG_ERR_INVALID, std::string(what) + ": block_stride " +
                                std::to_string(r->block_stride) + " is below a block's rows (" +
                                std::to_string(r->block_tokens * row_bytes) + " bytes)");
    const size_t need = (r->n + r->block_tokens - 1) / r->block_tokens;
    if (need > r->n_blocks)
      Fail(PIG_ERR_RANGE, std::string(what) + ": " + std::to_string(r->n) + " rows need " +
                              std::to_string(need) + " blocks of " +
                              std::to_string(r->block_tokens) + ", the block table has " +
                              std::to_string(r->n_blocks));
    for (size_t b = 0; b < need; ++b)
      if (r->block_table[b] < 0)
        Fail(PIG_ERR_RANGE, std::string(what) + ": block_table[" + std::to_string(b) +
                                "] = " + std::to_string(r->block_table[b]) + " is negative");
    out.paged = {r->block_table, r->block_tokens, r->block_stride};
    return;
  }
  if (r->row_stride != 0 && r->row_stride != row_bytes) {
    if (r->row_stride < row_bytes)
      Fail(PIG_ERR_INVALID, std::string(what) + ": row_stride " + std::to_string(r->row_stride) +
                                " is below a row's " + std::to_string(row_bytes) + " bytes");
    if (r->n > size_t(std::numeric_limits<std::int32_t>::max()))
      Fail(PIG_ERR_RANGE, std::string(what) + ": too many strided rows");
    out.paged = {nullptr, 1, r->row_stride};
    out.strided = true;
  }
}

// Keys and values are read through one page table (lsh::KvRows): only their data may differ.
void SameLayout(const pig_rows *k, const pig_rows *v, const KernelRows &kr, const KernelRows &vr) {
  if (k->block_table != v->block_table || kr.paged.page_rows != vr.paged.page_rows ||
      kr.paged.page_stride != vr.paged.page_stride)
    Fail(PIG_ERR_INVALID, "keys and values must share their layout (block table, block tokens "
                          "and stride, row stride); only their data may differ");
}

lsh::LshKernelSet Resolve(int K, int L, size_t d, lsh::DType dtype) {
  RegisterGenerated();
  return lsh::KernelRegistry::global().resolve(
      lsh::KernelKey{K, L, int(d), dtype, lsh::Target::cpu});
}

size_t Group(size_t group) {
  if (group < 1 || group > size_t(lsh::kMaxGroup))
    Fail(PIG_ERR_INVALID, "group = " + std::to_string(group) + ": a group has 1 to " +
                              std::to_string(lsh::kMaxGroup) + " query heads");
  return group;
}

float Scale(float scale, size_t d) {
  if (!(scale >= 0) || !std::isfinite(scale))
    Fail(PIG_ERR_INVALID,
         "scale must be finite and >= 0 (0: 1 / sqrt(d)), got " + std::to_string(scale));
  return scale > 0 ? scale : 1.0f / std::sqrt(float(d));
}

} // namespace

struct pig_index {
  pig_lsh_config cfg{};
  size_t d = 0, capacity = 0;
  lsh::DType dtype = lsh::DType::f32;
  lsh::LshKernelSet set;
  std::unique_ptr<lsh::SimHash> W;
  std::unique_ptr<lsh::LogUTableData> log_u;
  std::unique_ptr<lsh::LshIndex> index;
  std::unique_ptr<lsh::RetrievalScratch> scratch;
  lsh::StepBuffers buf;
  std::vector<float> lse;
};

extern "C" {

const char *pig_version(void) { return "0.1.0"; }

const char *pig_last_error(void) { return last_error.c_str(); }

pig_status pig_lsh_config_default(pig_lsh_config *cfg) {
  return Guard("pig_lsh_config_default", [&] {
    NotNull(cfg, "cfg");
    const pig::runtime::AttentionSpec spec;
    *cfg = pig_lsh_config{spec.K, spec.L, spec.t, spec.seed, spec.sink, spec.local, 0};
  });
}

pig_status pig_index_build(const pig_lsh_config *cfg, const pig_rows *keys, size_t capacity,
                           pig_index **out) {
  if (out)
    *out = nullptr;
  return Guard("pig_index_build", [&] {
    NotNull(cfg, "cfg");
    NotNull(out, "out");
    KernelRows k;
    Read(keys, "keys", k);
    Bind({&k});
    {
      pig::spec::LshParams p;
      p.K = cfg->K;
      p.L = cfg->L;
      p.t = cfg->t;
      if (const std::string e = p.validate(); !e.empty())
        Fail(PIG_ERR_INVALID, "cfg: " + e);
    }
    const size_t cap = capacity ? capacity : k.n;
    if (cap < k.n)
      Fail(PIG_ERR_RANGE, "capacity " + std::to_string(cap) + " is below the " +
                              std::to_string(k.n) + " rows given");
    if (cap > (size_t(1) << 31))
      Fail(PIG_ERR_RANGE, "capacity " + std::to_string(cap) + " exceeds 2^31 rows");
    auto ix = std::make_unique<pig_index>();
    ix->cfg = *cfg;
    ix->d = k.d;
    ix->dtype = k.dtype;
    ix->capacity = cap;
    ix->set = Resolve(cfg->K, cfg->L, k.d, k.dtype);
    ix->W = std::make_unique<lsh::SimHash>(cfg->seed, k.d, cfg->K, cfg->L);
    ix->log_u = std::make_unique<lsh::LogUTableData>(cfg->K, cfg->L, cfg->t);
    const lsh::StaticTokens st{cfg->sink, cfg->local, cfg->mean_window};
    ix->index = std::make_unique<lsh::LshIndex>(
        lsh::LshIndex::build(ix->set, k.data, k.dtype, k.paged, k.n, *ix->W, st, {},
                             lsh::BuildOptions{cap, /*keep_codes=*/false}));
    ix->scratch = std::make_unique<lsh::RetrievalScratch>(cap);
    *out = ix.release();
  });
}

pig_status pig_index_extend(pig_index *index, const pig_rows *keys) {
  return Guard("pig_index_extend", [&] {
    NotNull(index, "index");
    KernelRows k;
    Read(keys, "keys", k);
    Bind({&k});
    if (k.dtype != index->dtype || k.d != index->d)
      Fail(k.dtype != index->dtype ? PIG_ERR_DTYPE : PIG_ERR_INVALID,
           std::string("keys are ") + lsh::to_string(k.dtype) +
               " rows of d = " + std::to_string(k.d) + ", the index's " +
               lsh::to_string(index->dtype) + " of d = " + std::to_string(index->d));
    if (k.n < index->index->n())
      Fail(PIG_ERR_RANGE, "keys->n = " + std::to_string(k.n) + " is below the " +
                              std::to_string(index->index->n()) + " rows already indexed");
    if (k.n > index->capacity)
      Fail(PIG_ERR_RANGE, "keys->n = " + std::to_string(k.n) + " exceeds the capacity " +
                              std::to_string(index->capacity));
    index->index->extend(index->set, k.data, k.dtype, k.paged, k.n, *index->W);
  });
}

pig_status pig_index_retrieve(pig_index *index, const float *q, size_t group, uint32_t *tokens,
                              uint8_t *masks, size_t capacity, size_t *count) {
  if (count)
    *count = 0;
  return Guard("pig_index_retrieve", [&] {
    NotNull(index, "index");
    NotNull(q, "q");
    NotNull(count, "count");
    const int G = int(Group(group));
    const size_t u =
        lsh::retrieve_step(index->set, *index->index, *index->W, lsh::SampleRule{index->cfg.t},
                           *index->scratch, index->buf, q, G);
    *count = u;
    if (u > capacity)
      Fail(PIG_ERR_RANGE, "the group samples " + std::to_string(u) + " tokens, the buffer holds " +
                              std::to_string(capacity));
    if (u == 0)
      return; // nothing sampled: tokens and masks are not touched (and may be NULL)
    NotNull(tokens, "tokens");
    std::memcpy(tokens, index->buf.tokens.data(), u * sizeof(uint32_t));
    if (masks) {
      if (G == 1)
        std::memset(masks, 1, u);
      else
        std::memcpy(masks, index->buf.masks.data(), u);
    }
  });
}

pig_status pig_attend_sampled(pig_index *index, const float *q, size_t group, float scale,
                              const pig_rows *keys, const pig_rows *values, float *out,
                              float *lse) {
  return Guard("pig_attend_sampled", [&] {
    NotNull(index, "index");
    NotNull(q, "q");
    NotNull(out, "out");
    const int G = int(Group(group));
    KernelRows k, v;
    Read(keys, "keys", k);
    Read(values, "values", v);
    Bind({&k, &v});
    for (const KernelRows *r : {&k, &v})
      if (r->dtype != index->dtype || r->d != index->d)
        Fail(r->dtype != index->dtype ? PIG_ERR_DTYPE : PIG_ERR_INVALID,
             std::string(r == &k ? "keys" : "values") + " are " +
                 std::string(lsh::to_string(r->dtype)) + " rows of d = " + std::to_string(r->d) +
                 ", the index's " + lsh::to_string(index->dtype) +
                 " of d = " + std::to_string(index->d));
    const size_t n = index->index->n();
    if (k.n != n || v.n != n)
      Fail(PIG_ERR_RANGE, "keys and values must have the index's " + std::to_string(n) +
                              " rows (extend it first), got " + std::to_string(k.n) + " and " +
                              std::to_string(v.n));
    SameLayout(keys, values, k, v);
    index->lse.resize(size_t(G));
    const lsh::GroupQueries gq{q, G, Scale(scale, index->d), out, lse ? lse : index->lse.data()};
    const lsh::KvRows rows{k.data, v.data, k.dtype, k.d, k.paged};
    lsh::sampled_step(index->set, *index->index, *index->W, *index->log_u,
                      lsh::SampleRule{index->cfg.t}, *index->scratch, index->buf, gq, rows);
  });
}

pig_status pig_attend_dense(const float *q, size_t group, float scale, const pig_rows *keys,
                            const pig_rows *values, size_t begin, size_t end, float *out,
                            float *lse) {
  return Guard("pig_attend_dense", [&] {
    NotNull(q, "q");
    NotNull(out, "out");
    const size_t G = Group(group);
    KernelRows k, v;
    Read(keys, "keys", k);
    Read(values, "values", v);
    Bind({&k, &v});
    if (k.dtype != v.dtype)
      Fail(PIG_ERR_DTYPE, std::string("keys are ") + lsh::to_string(k.dtype) + ", values " +
                              lsh::to_string(v.dtype));
    if (k.d != v.d)
      Fail(PIG_ERR_INVALID,
           "keys have d = " + std::to_string(k.d) + ", values " + std::to_string(v.d));
    SameLayout(keys, values, k, v);
    if (begin >= end || end > k.n || end > v.n)
      Fail(PIG_ERR_RANGE, "rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") are empty or past the " + std::to_string(std::min(k.n, v.n)) +
                              " rows given");
    const lsh::LshKernelSet set = Resolve(10, 150, k.d, k.dtype); // dense needs only d, dtype
    float tmp[lsh::kMaxGroup];
    lsh::DenseAttentionArgs a;
    a.q = q;
    a.G = int(G);
    a.d = k.d;
    a.scale = Scale(scale, k.d);
    a.k = k.data;
    a.v = v.data;
    a.paged = k.paged;
    a.dtype = k.dtype;
    a.begin = begin;
    a.end = end;
    a.out = out;
    a.lse = lse ? lse : tmp;
    set.dense_attention(a);
  });
}

pig_status pig_index_info_get(const pig_index *index, pig_index_info *info) {
  return Guard("pig_index_info_get", [&] {
    NotNull(index, "index");
    NotNull(info, "info");
    *info = pig_index_info{index->index->n(), index->index->count(), index->index->bytes(),
                           index->capacity, index->set.specialised ? 1 : 0};
  });
}

void pig_index_free(pig_index *index) { delete index; }

pig_status pig_kernel_configs(char *buf, size_t len, size_t *needed) {
  if (needed)
    *needed = 0;
  return Guard("pig_kernel_configs", [&] {
    NotNull(needed, "needed");
    std::string s;
#ifdef PIG_CAPI_GENERATED
    RegisterGenerated();
    for (const lsh::KernelKey &key : pig_generated_kernel_keys())
      s += key.config().str_with_schedule() + "\n";
#endif
    for (const lsh::KernelKey &key : lsh::LoadedKernelPluginKeys())
      s += key.config().str_with_schedule() + "\n";
    *needed = s.size() + 1;
    if (len < s.size() + 1)
      Fail(PIG_ERR_RANGE, "the list needs " + std::to_string(s.size() + 1) + " bytes, buf has " +
                              std::to_string(len));
    NotNull(buf, "buf");
    std::memcpy(buf, s.c_str(), s.size() + 1);
  });
}

pig_status pig_load_kernels(const char *path, size_t *count) {
  if (count)
    *count = 0;
  return Guard("pig_load_kernels", [&] {
    NotNull(path, "path");
    RegisterGenerated(); // first, so that a library's configurations are not replaced by them
    std::vector<lsh::KernelKey> keys;
    try {
      keys = lsh::LoadKernelPlugin(path);
    } catch (const std::runtime_error &e) {
      Fail(PIG_ERR_INVALID, e.what());
    }
    if (count)
      *count = keys.size();
  });
}

} // extern "C"
