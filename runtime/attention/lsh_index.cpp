#include "pig/runtime/lsh_index.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

#include "checked_size.h"
#include "pig/reference/lsh.h"
#include "pig/reference/random.h"

namespace pig::runtime::lsh {

IndexLayout IndexLayout::of(std::size_t count, int K, int L) {
  using runtime::detail::CheckedAdd;
  using runtime::detail::CheckedMul;
  const char *what = "LSH index";
  IndexLayout lay;
  lay.count = count;
  lay.K = K;
  lay.L = L;
  lay.segments = count / kSegmentTokens + (count % kSegmentTokens != 0);
  lay.offset_entries =
      CheckedMul(CheckedMul(lay.segments, std::size_t(L), what), (std::size_t(1) << K) + 1, what);
  lay.id_entries = CheckedMul(count, std::size_t(L), what);
  CheckedMul(2, CheckedAdd(lay.offset_entries, lay.id_entries, what), what); // bytes() fits
  return lay;
}

SimHash::SimHash(std::uint64_t seed, std::size_t d, int K, int L) : d_(d), K_(K), L_(L) {
  const ref::OwnedMatrix W = ref::simhash_matrix(seed, d, K, L);
  const std::size_t cols = std::size_t(K) * std::size_t(L);
  cols_ = (cols + 15) / 16 * 16;
  w_.assign(d * cols_, 0.0f);
  norm_.assign(cols, 0.0f);
  for (std::size_t r = 0; r < d; ++r)
    std::copy(W.row(r), W.row(r) + cols, w_.begin() + std::ptrdiff_t(r * cols_));
  for (std::size_t c = 0; c < cols; ++c) {
    double s = 0;
    for (std::size_t r = 0; r < d; ++r)
      s += double(W.at(r, c)) * double(W.at(r, c));
    // Rounded up: the norm bounds rounding errors, it must not be underestimated.
    norm_[c] = std::nextafter(float(std::sqrt(s)), std::numeric_limits<float>::infinity());
  }
}

SimHash::SimHash(std::shared_ptr<const SimHash> wide, int K, int L)
    : d_(wide ? wide->d_ : 0), K_(K), L_(L), cols_(wide ? wide->cols_ : 0) {
  if (!wide)
    throw std::invalid_argument("SimHash: no wide matrix to share");
  ref::LshConfig{K, L, 1, 0}.validate();
  if (std::size_t(K) * std::size_t(L) > std::size_t(wide->K_) * std::size_t(wide->L_)) {
    throw std::invalid_argument(
        "SimHash: (K=" + std::to_string(K) + ", L=" + std::to_string(L) +
        ") needs more columns than the shared (K=" + std::to_string(wide->K_) +
        ", L=" + std::to_string(wide->L_) + ") has");
  }
  owner_ = std::move(wide);
}

SimHashView SimHash::view() const { return SimHashView{data(), norms(), d_, cols_, K_, L_}; }

LshIndex LshIndex::build(const LshKernelSet &set, const void *keys, DType dtype, std::size_t n,
                         const SimHash &W, StaticTokens st, const spec::TransformSpec &transform,
                         const BuildOptions &opt) {
  return build(set, keys, dtype, PagedRows{}, n, W, st, transform, opt);
}

LshIndex LshIndex::build(const LshKernelSet &set, const void *keys, DType dtype,
                         const PagedRows &paged, std::size_t n, const SimHash &W, StaticTokens st,
                         const spec::TransformSpec &transform, const BuildOptions &opt) {
  const std::size_t d = W.d();
  LshIndex ix;
  ix.n_ = n;
  ix.K_ = W.K();
  ix.L_ = W.L();
  ix.local_ = st.local;
  const bool all_static = st.sink + st.local >= n;
  ix.begin_ = all_static ? n : st.sink;
  const std::size_t count = all_static ? 0 : n - st.sink - st.local;
  ix.layout_ = IndexLayout::of(count, W.K(), W.L());
  ix.mean_.assign(d, 0.0f);
  ix.mean_count_ = count > 0 ? ref::mean_count(count, n - ix.begin_, st.mean_window) : 0;
  if (count > 0) {
    std::vector<double> acc(d, 0.0);
    std::vector<float> row(d);
    for (std::size_t i = 0; i < ix.mean_count_; ++i) {
      row_to_f32(keys, dtype, paged, ix.begin_ + i, d, row.data());
      for (std::size_t j = 0; j < d; ++j)
        acc[j] += double(row[j]);
    }
    for (std::size_t j = 0; j < d; ++j)
      ix.mean_[j] = float(acc[j] / double(ix.mean_count_));
  }
  thread_local std::vector<std::uint16_t> scratch_codes;
  std::vector<std::uint16_t> &codes = opt.keep_codes ? ix.codes_ : scratch_codes;
  codes.resize(count * std::size_t(W.L())); // every entry is written by set.encode
  std::vector<float> mapped; // fitted hashing: k' of the indexed keys, hashed instead
  if (!transform.identity() && count > 0) {
    ix.fitted_.emplace(transform, keys, dtype, ix.begin_, count, ix.mean_, paged);
    mapped.resize(count * d);
    ix.fitted_->map_keys(keys, dtype, ix.begin_, count, ix.mean_, mapped.data(), paged);
  }
  EncodeArgs ea;
  if (ix.fitted_) {
    ea.x = mapped.data();
  } else {
    ea.x = keys;
    ea.first = ix.begin_;
    ea.paged = paged;
  }
  ea.dtype = ix.fitted_ ? DType::f32 : dtype;
  ea.rows = count;
  ea.mean = ix.fitted_ ? nullptr : ix.mean_.data();
  ea.W = W.view();
  ea.codes = codes.data();
  if (count > 0)
    set.encode(ea);
  if (opt.capacity > 0)
    ix.reserve(std::max(opt.capacity, n));
  ix.offsets_.assign(ix.layout_.offset_entries, 0);
  ix.ids_.assign(ix.layout_.id_entries, 0);
  BuildIndexArgs ba;
  ba.codes = codes.data();
  ba.count = count;
  ba.K = W.K();
  ba.L = W.L();
  ba.offsets = ix.offsets_.data();
  ba.ids = ix.ids_.data();
  if (count > 0)
    set.build_index(ba);
  return ix;
}

namespace {

// pig::ref::fit_transform on the keys the reference's fit reads (every ceil(count / kFitRows)-th
// indexed key), centred in f32 as pig::ref::build_index centres them: the same rows, the same
// maps.
ref::HashTransform Fit(const spec::TransformSpec &spec, const void *keys, DType dtype,
                       std::size_t begin, std::size_t count, const std::vector<float> &mean,
                       const PagedRows &paged) {
  const std::size_t d = mean.size();
  if (spec.linear != spec::TransformSpec::Linear::whiten || spec.mips > 0)
    throw std::invalid_argument("hash transform " + spec.str() +
                                ": the runtime serves plain and whiten:a=A");
  if (count == 0)
    throw std::invalid_argument("FittedHash: no indexed key to fit");
  const std::size_t stride = ref::fit_stride(count);
  ref::OwnedMatrix X((count + stride - 1) / stride, d);
  std::vector<float> row(d);
  for (std::size_t i = 0, r = 0; i < count; i += stride, ++r) {
    row_to_f32(keys, dtype, paged, begin + i, d, row.data());
    for (std::size_t j = 0; j < d; ++j)
      X.at(r, j) = row[j] - mean[j];
  }
  return ref::fit_transform(X, spec);
}

} // namespace

FittedHash::FittedHash(const spec::TransformSpec &spec, const void *keys, DType dtype,
                       std::size_t begin, std::size_t count, const std::vector<float> &mean,
                       const PagedRows &paged)
    : T_(Fit(spec, keys, dtype, begin, count, mean, paged)) {}

namespace {

// out = x^T A (A: d x d, row-major f32, products in double) in double, in the reference's
// order (HashTransform::key / query: rows of A outer, columns inner), each coordinate rounded
// once: the reference's k' or q' bit for bit, without its allocations (this runs for every head
// of every sparse layer at every decode step). Returns |out| (double sum of the f32 values).
float MapRow(const float *A, const float *x, std::size_t d, double *acc, float *out) {
  std::fill(acc, acc + d, 0.0);
  for (std::size_t r = 0; r < d; ++r) {
    const double xr = x[r];
    const float *a = A + r * d;
    for (std::size_t j = 0; j < d; ++j)
      acc[j] += xr * double(a[j]);
  }
  double s = 0;
  for (std::size_t j = 0; j < d; ++j) {
    out[j] = float(acc[j]);
    s += double(out[j]) * double(out[j]);
  }
  return float(std::sqrt(s));
}

} // namespace

float FittedHash::map_query(const float *q, float *out) const {
  thread_local std::vector<double> acc;
  acc.resize(T_.d);
  return MapRow(T_.query_map.data.data(), q, T_.d, acc.data(), out);
}

void FittedHash::map_keys(const void *keys, DType dtype, std::size_t first, std::size_t rows,
                          const std::vector<float> &mean, float *out, const PagedRows &paged) {
  const std::size_t d = mean.size();
  std::vector<float> c(d);
  std::vector<double> acc(d);
  norms_.reserve(norms_.size() + rows);
  for (std::size_t i = 0; i < rows; ++i) {
    row_to_f32(keys, dtype, paged, first + i, d, c.data());
    for (std::size_t j = 0; j < d; ++j)
      c[j] -= mean[j];
    norms_.push_back(MapRow(T_.key_map.data.data(), c.data(), d, acc.data(), out + i * d));
  }
}

std::size_t FittedHash::bytes() const {
  return 4 * (T_.key_map.data.size() + T_.query_map.data.size() + norms_.size());
}

IndexView LshIndex::view() const {
  return IndexView{layout_.K,     layout_.L,       begin_ + base_count_,
                   layout_.count, offsets_.data(), ids_.data()};
}

std::shared_ptr<const LshIndex> LshIndex::freeze(LshIndex built) {
  if (built.fitted_ || built.base_ || built.tail_count() > 0)
    throw std::invalid_argument("LshIndex::freeze: only a plain index without a base and with no "
                                "unmerged tail can be shared");
  built.codes_ = {};
  return std::make_shared<const LshIndex>(std::move(built));
}

namespace {
struct Frozen { // serialize()'s fields, then the mean, the offsets and the ids
  std::uint64_t begin, local, mean_count, count, d, offsets, ids;
  std::int32_t K, L;
};
} // namespace

std::string LshIndex::serialize() const {
  if (fitted_ || base_ || tail_count() > 0)
    throw std::invalid_argument("LshIndex::serialize: only a frozen index");
  const Frozen f{begin_,      local_, mean_count_, layout_.count, mean_.size(), offsets_.size(),
                 ids_.size(), K_,     L_};
  std::string out(reinterpret_cast<const char *>(&f), sizeof f);
  out.append(reinterpret_cast<const char *>(mean_.data()), mean_.size() * sizeof(float));
  out.append(reinterpret_cast<const char *>(offsets_.data()), offsets_.size() * 2);
  out.append(reinterpret_cast<const char *>(ids_.data()), ids_.size() * 2);
  return out;
}

std::optional<LshIndex> LshIndex::parse(std::string_view bytes, std::string *why) {
  auto fail = [&](const std::string &w) {
    if (why)
      *why = w;
    return std::nullopt;
  };
  Frozen f;
  if (bytes.size() < sizeof f)
    return fail("shorter than its fields");
  std::memcpy(&f, bytes.data(), sizeof f);
  try {
    ref::LshConfig{f.K, f.L, 1, 0}.validate();
  } catch (const std::invalid_argument &e) {
    return fail(e.what());
  }
  if (f.d == 0 || f.d > 4096 || f.mean_count > f.count + f.local || f.count > (1ull << 40))
    return fail("fields out of range");
  const IndexLayout lay = IndexLayout::of(f.count, f.K, f.L);
  if (f.offsets != lay.offset_entries || f.ids != lay.id_entries)
    return fail("tables of another size than their fields say");
  if (bytes.size() != sizeof f + f.d * sizeof(float) + 2 * (f.offsets + f.ids))
    return fail("size " + std::to_string(bytes.size()) + " does not match its fields");
  LshIndex ix;
  ix.begin_ = f.begin;
  ix.local_ = f.local;
  ix.mean_count_ = f.mean_count;
  ix.K_ = f.K;
  ix.L_ = f.L;
  ix.layout_ = lay;
  ix.n_ = f.begin + f.count + f.local;
  const char *p = bytes.data() + sizeof f;
  ix.mean_.resize(f.d);
  std::memcpy(ix.mean_.data(), p, f.d * sizeof(float));
  p += f.d * sizeof(float);
  ix.offsets_.resize(f.offsets);
  std::memcpy(ix.offsets_.data(), p, f.offsets * 2);
  p += f.offsets * 2;
  ix.ids_.resize(f.ids);
  std::memcpy(ix.ids_.data(), p, f.ids * 2);
  // Every bucket's list within its segment: retrieval reads ids[offsets[b], offsets[b + 1]).
  const std::size_t stride = (std::size_t(1) << f.K) + 1;
  for (std::size_t s = 0; s < lay.segments; ++s) {
    const std::size_t len = std::min<std::size_t>(kSegmentTokens, f.count - s * kSegmentTokens);
    for (std::size_t l = 0; l < std::size_t(f.L); ++l) {
      const std::uint16_t *o = ix.offsets_.data() + (s * std::size_t(f.L) + l) * stride;
      if (o[0] != 0 || o[stride - 1] != len)
        return fail("bucket offsets that do not span their segment");
      for (std::size_t b = 0; b + 1 < stride; ++b)
        if (o[b] > o[b + 1])
          return fail("bucket offsets out of order");
      const std::uint16_t *ids = ix.ids_.data() + s * kSegmentTokens * std::size_t(f.L) + l * len;
      for (std::size_t i = 0; i < len; ++i)
        if (ids[i] >= len)
          return fail("a token id outside its segment");
    }
  }
  return ix;
}

LshIndex LshIndex::on(std::shared_ptr<const LshIndex> base, std::size_t limit) {
  if (!base)
    throw std::invalid_argument("LshIndex::on: no base");
  if (limit > base->layout_.count || limit == 0)
    throw std::invalid_argument("LshIndex::on: " + std::to_string(limit) +
                                " tokens of a base that indexes " +
                                std::to_string(base->layout_.count));
  LshIndex ix;
  ix.begin_ = base->begin_;
  ix.local_ = base->local_;
  ix.K_ = base->K_;
  ix.L_ = base->L_;
  ix.mean_ = base->mean_;
  ix.mean_count_ = base->mean_count_;
  ix.base_count_ = limit;
  ix.n_ = ix.begin_ + limit + ix.local_;
  ix.layout_ = IndexLayout::of(0, ix.K_, ix.L_);
  ix.base_ = std::move(base);
  return ix;
}

void LshIndex::reserve(std::size_t capacity) {
  const std::size_t L = std::size_t(L_), stride = (std::size_t(1) << K_) + 1;
  capacity -= std::min(capacity, base_count_); // the base's tokens are not this index's
  const std::size_t segments = (capacity + kSegmentTokens - 1) / kSegmentTokens;
  ids_.reserve(capacity * L);
  offsets_.reserve(segments * L * stride);
}

std::size_t LshIndex::tail_limit() const {
  const std::size_t open = layout_.count % kSegmentTokens;
  return std::max<std::size_t>(256, open / 16);
}

std::size_t LshIndex::bytes() const {
  return 2 * (offsets_.size() + ids_.size() + tail_.size()) + 4 * mean_.size();
}

void LshIndex::extend(const LshKernelSet &set, const void *keys, DType dtype, std::size_t new_n,
                      const SimHash &W) {
  extend(set, keys, dtype, PagedRows{}, new_n, W);
}

void LshIndex::extend(const LshKernelSet &set, const void *keys, DType dtype,
                      const PagedRows &paged, std::size_t new_n, const SimHash &W) {
  if (W.K() != K_ || W.L() != L_ || W.d() != mean_.size())
    throw std::invalid_argument("LshIndex::extend: W does not match the index");
  thread_local std::vector<float> rows;
  thread_local std::vector<std::uint16_t> codes;
  const std::size_t n = extend_rows(keys, dtype, paged, new_n, rows);
  codes.resize(n * std::size_t(L_));
  if (n > 0) {
    EncodeArgs ea;
    ea.x = rows.data();
    ea.dtype = DType::f32;
    ea.rows = n;
    ea.W = W.view();
    ea.codes = codes.data();
    set.encode(ea);
  }
  extend_codes(set, new_n, codes.data());
}

std::size_t LshIndex::joining(std::size_t new_n) const {
  if (new_n < n_)
    throw std::invalid_argument("LshIndex::extend: the sequence cannot shrink");
  // Tokens [local_begin(), new_n - local) leave the local window and join the index.
  const std::size_t first = local_begin(), last = new_n > local_ ? new_n - local_ : 0;
  return last > first ? last - first : 0;
}

std::size_t LshIndex::extend_rows(const void *keys, DType dtype, const PagedRows &paged,
                                  std::size_t new_n, std::vector<float> &rows) {
  const std::size_t first = local_begin(), n = joining(new_n), d = mean_.size();
  rows.resize(n * d);
  if (fitted_) { // k' of the joining keys, hashed instead
    fitted_->map_keys(keys, dtype, first, n, mean_, rows.data(), paged);
    return n;
  }
  for (std::size_t i = 0; i < n; ++i) { // centred in f32, as set.encode centres with a mean
    float *r = rows.data() + i * d;
    row_to_f32(keys, dtype, paged, first + i, d, r);
    for (std::size_t j = 0; j < d; ++j)
      r[j] -= mean_[j];
  }
  return n;
}

void LshIndex::extend_codes(const LshKernelSet &set, std::size_t new_n,
                            const std::uint16_t *codes) {
  const std::size_t n = joining(new_n);
  n_ = new_n;
  if (n == 0)
    return;
  tail_.insert(tail_.end(), codes, codes + n * std::size_t(L_));
  if (tail_count() >= tail_limit())
    merge_tail(set);
}

// Re-sorts the open segment with the tail appended. The codes of the segment's sorted tokens are
// recovered from its own tables (bucket b of table l lists exactly the tokens whose code is b),
// so no codes are stored for sorted tokens; the segment is then rebuilt by set.build_index. A
// tail that fills the open segment continues in a new one.
void LshIndex::merge_tail(const LshKernelSet &set) {
  const std::size_t L = std::size_t(L_), buckets = std::size_t(1) << K_, stride = buckets + 1;
  const std::size_t tail = tail_count();
  std::size_t sorted = layout_.count, consumed = 0;
  std::vector<std::uint16_t> codes;
  while (consumed < tail) {
    const std::size_t seg = sorted / kSegmentTokens, start = seg * kSegmentTokens;
    const std::size_t len0 = sorted - start;
    const std::size_t take = std::min(tail - consumed, kSegmentTokens - len0);
    const std::size_t len1 = len0 + take;
    codes.resize(len1 * L);
    if (len0 > 0) {
      const std::uint16_t *off = offsets_.data() + seg * L * stride;
      const std::uint16_t *ids = ids_.data() + start * L;
      for (std::size_t l = 0; l < L; ++l) {
        const std::uint16_t *o = off + l * stride, *list = ids + l * len0;
        for (std::size_t b = 0; b < buckets; ++b)
          for (std::size_t j = o[b]; j < o[b + 1]; ++j)
            codes[std::size_t(list[j]) * L + l] = std::uint16_t(b);
      }
    }
    std::copy_n(tail_.begin() + std::ptrdiff_t(consumed * L), take * L,
                codes.begin() + std::ptrdiff_t(len0 * L));
    offsets_.resize(std::max(offsets_.size(), (seg + 1) * L * stride));
    ids_.resize((start + len1) * L);
    BuildIndexArgs ba;
    ba.codes = codes.data();
    ba.count = len1;
    ba.K = K_;
    ba.L = L_;
    ba.offsets = offsets_.data() + seg * L * stride;
    ba.ids = ids_.data() + start * L;
    set.build_index(ba);
    sorted += take;
    consumed += take;
  }
  tail_.clear();
  layout_ = IndexLayout::of(sorted, K_, L_);
}

std::size_t retrieve_tail(const RetrieveTailArgs &a) {
  // In locals: the compiler cannot know that the stores to tokens leave a's fields unchanged.
  const std::uint16_t *codes = a.codes, *query_codes = a.query_codes;
  const std::size_t count = a.count, first = a.first;
  const int G = a.G, t = a.t, r = a.r;
  std::uint32_t *tokens = a.tokens;
  std::uint8_t *masks = a.masks;
  std::size_t n = a.n, *per_head = a.per_head;
  const std::size_t l_n = std::size_t(a.L);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint16_t *c = codes + i * l_n;
    unsigned mask = 0;
    for (int h = 0; h < G; ++h) {
      const std::uint16_t *qc = query_codes + std::size_t(h) * l_n;
      int hits = 0;
      if (r == 0)
        for (std::size_t l = 0; l < l_n; ++l) // vectorised by the compiler (u16 compare + add)
          hits += c[l] == qc[l];
      else
        for (std::size_t l = 0; l < l_n; ++l)
          hits += std::popcount(unsigned(c[l] ^ qc[l])) <= r;
      if (hits >= t) {
        mask |= 1u << h;
        if (per_head)
          ++per_head[h];
      }
    }
    if (mask) {
      tokens[n] = std::uint32_t(first + i);
      if (masks)
        masks[n] = std::uint8_t(mask);
      ++n;
    }
  }
  return n;
}

RetrievalScratch::RetrievalScratch(std::size_t capacity)
    : counters_(capacity + kCounterSlack, 0),
      bits_(std::size_t(kMaxGroup) * ((capacity + 63) / 64 + 1), 0) {}

RetrievalState RetrievalScratch::state() {
  return RetrievalState{counters_.data(), bits_.data(), bits_.size() / std::size_t(kMaxGroup),
                        &epoch_, capacity()};
}

LogUTableData::LogUTableData(int K, int L, int t, int r, int size)
    : h_(std::size_t(size) + 1), size_(size), tk_(float(t) * float(K - r)) {
  ref::LshConfig{K, L, t, 0, r}.validate();
  // p -> 0: u ~ C(L, t) P^t with P ~ C(K, r) p^(K - r), so h(0) = log C(L, t) + t log C(K, r).
  h_[0] = float(std::lgamma(L + 1.0) - std::lgamma(t + 1.0) - std::lgamma(L - t + 1.0) +
                t * (std::lgamma(K + 1.0) - std::lgamma(r + 1.0) - std::lgamma(K - r + 1.0)));
  for (int i = 1; i <= size; ++i) {
    const double p = double(i) / double(size);
    const double c = std::cos(std::numbers::pi * (1.0 - p));
    h_[std::size_t(i)] =
        float(ref::log_collision_probability(c, K, L, t, r) - double(t) * (K - r) * std::log(p));
  }
}

} // namespace pig::runtime::lsh
