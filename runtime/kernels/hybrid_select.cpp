// lsh-hybrid's selection (hybrid_select.h): the passes over a head's indexed tokens compiled for
// every Highway target (uniforms, max, exp and sum, normalisation, the water-filling's capping
// pass, the draw), and the scalar glue.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/hybrid_select.cpp"
#include "hwy/foreach_target.h" // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "pig/reference/hybrid.h" // hybrid_uniform, hybrid_skip_draw: the reference's draws
#include "pig/runtime/hybrid_select.h"
#include "pig/spec/hash.h"

HWY_BEFORE_NAMESPACE();
namespace pig::runtime::lsh::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double ExpShifted(const double *s, std::size_t n, double m, double *e) {
  const hn::ScalableTag<double> d;
  const std::size_t N = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  auto acc = hn::Zero(d);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::Exp(d, hn::Sub(hn::LoadU(d, s + i), vm));
    hn::StoreU(x, d, e + i);
    acc = hn::Add(acc, x);
  }
  double z = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i)
    z += (e[i] = std::exp(s[i] - m));
  return z;
}

#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
// The low 64 bits of a * b per u64 lane: native on AVX-512, from 32-bit halves elsewhere.
template <class D> hn::Vec<D> MulLo64(D d, hn::Vec<D> a, hn::Vec<D> b) {
#if HWY_TARGET <= HWY_AVX3
  (void)d;
  return hn::Mul(a, b);
#else
  const hn::Repartition<std::uint32_t, D> d32;
  const auto lo = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, b));
  const auto c1 = hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), hn::BitCast(d32, b));
  const auto c2 = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, hn::ShiftRight<32>(b)));
  return hn::Add(lo, hn::ShiftLeft<32>(hn::Add(c1, c2)));
#endif
}
#endif

#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
// The uniforms of N consecutive tokens from their Weyl values gamma (token + 1) (see Uniforms).
template <class DU, class DD>
HWY_INLINE hn::Vec<DD> UniformsOf(DU du, DD dd, hn::Vec<DU> weyl, hn::Vec<DU> seed) {
  const hn::Rebind<std::int64_t, DU> di;
  auto z = hn::Add(hn::Xor(seed, weyl), hn::Set(du, 2 * spec::kGoldenGamma));
  z = MulLo64(du, hn::Xor(z, hn::ShiftRight<30>(z)), hn::Set(du, 0xbf58476d1ce4e5b9ULL));
  z = MulLo64(du, hn::Xor(z, hn::ShiftRight<27>(z)), hn::Set(du, 0x94d049bb133111ebULL));
  z = hn::Xor(z, hn::ShiftRight<31>(z));
  const auto top = hn::BitCast(di, hn::ShiftRight<11>(z)); // < 2^53: exact in double
  return hn::Mul(hn::ConvertTo(dd, top), hn::Set(dd, 0x1.0p-53));
}

// gamma (token + 1) for the lanes of a block starting at `token`.
template <class DU> HWY_INLINE hn::Vec<DU> WeylOf(DU du, std::uint64_t token) {
  return MulLo64(du, hn::Add(hn::Iota(du, 0), hn::Set(du, token + 1)),
                 hn::Set(du, spec::kGoldenGamma));
}
#endif

// u[i] = ref::hybrid_uniform(seed, begin + i).
void Uniforms(std::uint64_t seed, std::size_t begin, std::size_t n, double *u) {
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  const hn::ScalableTag<std::uint64_t> du;
  const hn::Rebind<double, decltype(du)> dd;
  const std::size_t N = hn::Lanes(du);
  const auto vs = hn::Set(du, seed);
  for (; i + N <= n; i += N)
    hn::StoreU(UniformsOf(du, dd, WeylOf(du, std::uint64_t(begin + i)), vs), dd, u + i);
#endif
  for (; i < n; ++i)
    u[i] = ref::hybrid_uniform(seed, begin + i);
}

std::size_t LanesF64() { return hn::Lanes(hn::ScalableTag<double>()); }

// m[b] = the largest score of block b (Lanes(d) tokens each, the last one partial); returns the
// count of -inf scores (the unscored tokens).
std::size_t BlockMax(const double *score, std::size_t n, double *m) {
  const hn::ScalableTag<double> d;
  const std::size_t N = hn::Lanes(d);
  const auto ninf = hn::Set(d, -std::numeric_limits<double>::infinity());
  std::size_t unscored = 0, i = 0, b = 0;
  for (; i + N <= n; i += N, ++b) {
    const auto x = hn::LoadU(d, score + i);
    unscored += hn::CountTrue(d, hn::Eq(x, ninf));
    m[b] = hn::GetLane(hn::MaxOfLanes(d, x));
  }
  if (i < n) {
    double x = -std::numeric_limits<double>::infinity();
    for (; i < n; ++i) {
      unscored += score[i] == -std::numeric_limits<double>::infinity();
      x = std::max(x, score[i]);
    }
    m[b] = x;
  }
  return unscored;
}

// r[i] = (c1 r[i]) / z + c2 (the reference's operations in its order); returns the sum of the new
// r and their maximum in *max.
double Normalize(double *r, std::size_t n, double c1, double z, double c2, double *max) {
  const hn::ScalableTag<double> d;
  const std::size_t N = hn::Lanes(d);
  const auto v1 = hn::Set(d, c1), vz = hn::Set(d, z), v2 = hn::Set(d, c2);
  auto sum = hn::Zero(d), mx = hn::Zero(d);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::Add(hn::Div(hn::Mul(v1, hn::LoadU(d, r + i)), vz), v2);
    hn::StoreU(x, d, r + i);
    sum = hn::Add(sum, x);
    mx = hn::Max(mx, x);
  }
  double s = hn::GetLane(hn::SumOfLanes(d, sum)), m = hn::GetLane(hn::MaxOfLanes(d, mx));
  for (; i < n; ++i) {
    r[i] = c1 * r[i] / z + c2;
    s += r[i];
    m = std::max(m, r[i]);
  }
  *max = m;
  return s;
}

// One pass of the water-filling over the uncapped proposal rr (0: capped, or never drawn): caps
// (zeroes) every rr with lambda rr >= 1, counts them in *capped and returns the sum of the rest.
double Cap(double *rr, std::size_t n, double lambda, std::size_t *capped) {
  const hn::ScalableTag<double> d;
  const std::size_t N = hn::Lanes(d);
  const auto vl = hn::Set(d, lambda), one = hn::Set(d, 1.0);
  auto acc = hn::Zero(d);
  std::size_t count = 0, i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, rr + i);
    const auto cap = hn::Ge(hn::Mul(vl, x), one);
    if (!hn::AllFalse(d, cap)) {
      count += hn::CountTrue(d, cap);
      hn::StoreU(hn::IfThenZeroElse(cap, x), d, rr + i);
      acc = hn::Add(acc, hn::IfThenZeroElse(cap, x));
    } else {
      acc = hn::Add(acc, x);
    }
  }
  double rest = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) {
    if (lambda * rr[i] >= 1.0) {
      rr[i] = 0;
      ++count;
    }
    rest += rr[i];
  }
  *capped = count;
  return rest;
}

// The scored tail's draw: listed token i (score > -inf: the head's is -inf here) is drawn iff
// U_i < pi_i = min(1, lambda r[i]), U_i = ref::hybrid_uniform(seed, begin + p_i), p_i = pos[i]
// (pos null: i); appends i and pi_i in list order. Returns the count.
std::size_t DrawScored(const double *score, const double *r, const std::uint32_t *pos,
                       std::size_t n, double lambda, std::uint64_t seed, std::size_t begin,
                       std::uint32_t *ids, double *pi) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::size_t count = 0, i = 0;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  const hn::ScalableTag<std::uint64_t> du;
  const hn::Rebind<double, decltype(du)> d;
  const hn::Rebind<std::uint32_t, decltype(du)> d32;
  const std::size_t N = hn::Lanes(d);
  const auto vl = hn::Set(d, lambda), one = hn::Set(d, 1.0), ninf = hn::Set(d, kNegInf);
  const auto vs = hn::Set(du, seed), step = hn::Set(du, std::uint64_t(N) * spec::kGoldenGamma);
  const auto gamma = hn::Set(du, spec::kGoldenGamma), first = hn::Set(du, std::uint64_t(begin) + 1);
  auto weyl = WeylOf(du, std::uint64_t(begin));
  HWY_ALIGN double p[hn::MaxLanes(d)], u[hn::MaxLanes(d)];
  for (; i + N <= n; i += N, weyl = hn::Add(weyl, step)) {
    const auto pv = hn::Min(one, hn::Mul(vl, hn::LoadU(d, r + i)));
    // gamma (begin + pos + 1) for listed positions, as WeylOf gives for consecutive ones.
    const auto w =
        pos ? MulLo64(du, hn::Add(hn::PromoteTo(du, hn::LoadU(d32, pos + i)), first), gamma) : weyl;
    const auto uv = UniformsOf(du, d, w, vs);
    const auto take = hn::And(hn::Lt(uv, pv), hn::Gt(hn::LoadU(d, score + i), ninf));
    if (hn::AllFalse(d, take))
      continue;
    hn::Store(pv, d, p);
    hn::Store(uv, d, u);
    for (std::size_t j = 0; j < N; ++j)
      if (u[j] < p[j] && score[i + j] > kNegInf) {
        ids[count] = std::uint32_t(i + j);
        pi[count++] = p[j];
      }
  }
#endif
  for (; i < n; ++i) {
    const double pv = std::min(1.0, lambda * r[i]);
    if (ref::hybrid_uniform(seed, begin + (pos ? pos[i] : i)) < pv && score[i] > kNegInf) {
      ids[count] = std::uint32_t(i);
      pi[count++] = pv;
    }
  }
  return count;
}

} // namespace pig::runtime::lsh::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace pig::runtime::lsh {

HWY_EXPORT(ExpShifted);
HWY_EXPORT(Uniforms);
HWY_EXPORT(BlockMax);
HWY_EXPORT(LanesF64);
HWY_EXPORT(Normalize);
HWY_EXPORT(Cap);
HWY_EXPORT(DrawScored);

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// Lanes of an f64 vector on the dispatched target: the head's selection's block size.
std::size_t BlockLanes() { return HWY_DYNAMIC_DISPATCH(LanesF64)(); }
} // namespace

double hybrid_exp_shifted(const double *s, std::size_t n, double m, double *e) {
  if (std::isfinite(m)) // Highway's Exp holds on [-DBL_MAX, 706]: every s - m <= 0 here
    return HWY_DYNAMIC_DISPATCH(ExpShifted)(s, n, m, e);
  double z = 0; // +-inf: the reference's NaN and 0 cases, exactly as std::exp gives them
  for (std::size_t i = 0; i < n; ++i)
    z += (e[i] = std::exp(s[i] - m));
  return z;
}

void hybrid_uniforms(std::uint64_t seed, std::size_t begin, std::size_t n, double *u) {
  HWY_DYNAMIC_DISPATCH(Uniforms)(seed, begin, n, u);
}

void HybridSampler::Rank(std::vector<double> &score, std::size_t head, std::uint64_t seed,
                         std::size_t indexed_begin, double cut) {
  ts_.swap(score); // the scores are the sampler's now; the caller gets a buffer back
  pos_.clear();
  n_ = total_ = ts_.size();
  seed_ = seed;
  begin_ = indexed_begin;
  RankListed(std::min(head, n_), cut);
}

void HybridSampler::RankSubset(std::vector<double> &score, std::span<const std::uint32_t> pos,
                               std::size_t n, std::size_t head, std::uint64_t seed,
                               std::size_t indexed_begin, double cut) {
  if (pos.size() != score.size() || pos.size() > n)
    throw std::invalid_argument("HybridSampler::RankSubset: " + std::to_string(score.size()) +
                                " scores for " + std::to_string(pos.size()) + " of " +
                                std::to_string(n) + " tokens");
  for (std::size_t k = 0; k < pos.size(); ++k)
    if (pos[k] >= n || (k > 0 && pos[k] <= pos[k - 1]))
      throw std::invalid_argument("HybridSampler::RankSubset: positions must ascend below n");
  ts_.swap(score);
  pos_.assign(pos.begin(), pos.end());
  n_ = ts_.size();
  total_ = n;
  seed_ = seed;
  begin_ = indexed_begin;
  head = std::min(head, n);
  std::size_t listed_scored = 0;
  for (double x : ts_)
    listed_scored += x > -kInf;
  // The head and the tail's best must be listed (scored) tokens.
  if (head >= listed_scored && head < n)
    throw std::invalid_argument("HybridSampler::RankSubset: " + std::to_string(listed_scored) +
                                " scored tokens listed for a head of " + std::to_string(head));
  RankListed(head, cut);
}

void HybridSampler::RankListed(std::size_t head, double cut) {
  const std::size_t n = n_; // the listed tokens; ts_ holds their scores
  head = std::min(head, n);
  // The head: the `head` best by (score desc, position asc), a total order (listed tokens ascend
  // by position, so their indices order them as their positions do).
  auto better = [](const std::pair<double, std::uint32_t> &a,
                   const std::pair<double, std::uint32_t> &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  // Blocks of `lanes` tokens: no token below the head-th largest block maximum beta is in the
  // head (at least `head` tokens score >= beta, one per block of maximum >= beta, so the head's
  // last one does too).
  const std::size_t lanes = BlockLanes(), blocks = (n + lanes - 1) / lanes;
  block_max_.resize(blocks);
  const std::size_t unscored = HWY_DYNAMIC_DISPATCH(BlockMax)(ts_.data(), n, block_max_.data());
  double beta = -kInf;
  if (head > 0 && head <= blocks) {
    // beta: the head-th largest block maximum, by a selection (linear; a bounded min-heap paid a
    // mispredicted sift for every block that entered it, 15 % of pair_hybrid_step_sampled's
    // lsh-hybrid step). With at least `head` superblocks of kSuper blocks, the selection runs
    // first over their maxima: the head-th largest of those, beta_s, is <= beta (they are `head`
    // block maxima >= beta_s), so only the block maxima >= beta_s need selecting among (between
    // head and head * kSuper of them, not every block).
    constexpr std::size_t kSuper = 8;
    const std::size_t supers = (blocks + kSuper - 1) / kSuper;
    double floor_s = -kInf;
    if (head <= supers) {
      top_blocks_.resize(supers);
      for (std::size_t sb = 0; sb < supers; ++sb) {
        double m = -kInf;
        for (std::size_t blk = sb * kSuper; blk < std::min(blocks, (sb + 1) * kSuper); ++blk)
          m = std::max(m, block_max_[blk]);
        top_blocks_[sb] = m;
      }
      const auto nth = top_blocks_.begin() + std::ptrdiff_t(head - 1);
      std::nth_element(top_blocks_.begin(), nth, top_blocks_.end(), std::greater<double>());
      floor_s = *nth;
    }
    top_blocks_.clear();
    for (double m : block_max_)
      if (m >= floor_s)
        top_blocks_.push_back(m);
    const auto nth = top_blocks_.begin() + std::ptrdiff_t(head - 1);
    std::nth_element(top_blocks_.begin(), nth, top_blocks_.end(), std::greater<double>());
    beta = *nth;
  }
  // The candidates: the tokens scoring >= beta in those blocks (every head token does), then
  // the `head` best of them by a partition in the order above.
  heap_.clear();
  for (std::size_t blk = 0; blk < blocks && head > 0; ++blk) {
    if (block_max_[blk] < beta)
      continue;
    for (std::size_t i = blk * lanes; i < std::min(n, (blk + 1) * lanes); ++i)
      if (ts_[i] >= beta)
        heap_.emplace_back(ts_[i], std::uint32_t(i));
  }
  if (heap_.size() > head) {
    std::nth_element(heap_.begin(), heap_.begin() + std::ptrdiff_t(head), heap_.end(), better);
    heap_.resize(head);
  }
  scored_ = n - unscored;
  head_k_.clear();
  for (const auto &[x, i] : heap_)
    head_k_.push_back(i);
  std::sort(head_k_.begin(), head_k_.end());
  // The tail's scores: the head's set to -inf (so they are neither the max nor summed; Draw tells
  // them from the unscored tokens by r = 0), and the tail's largest from the blocks' maxima,
  // those that held a head token taken again.
  std::size_t head_unscored = 0;
  for (std::uint32_t i : head_k_) {
    head_unscored += ts_[i] == -kInf;
    ts_[i] = -kInf;
  }
  // Tokens outside the list are unscored too.
  n_unscored_ = unscored - head_unscored + (total_ - n);
  for (std::uint32_t i : head_k_) {
    const std::size_t blk = i / lanes;
    double m = -kInf;
    for (std::size_t j = blk * lanes; j < std::min(n, (blk + 1) * lanes); ++j)
      m = std::max(m, ts_[j]);
    block_max_[blk] = m;
  }
  tail_max_ = -kInf;
  for (double m : block_max_)
    tail_max_ = std::max(tail_max_, m);
  // The cut (ref::hybrid_estimate's): the tail's tokens below its best - cut become unscored.
  cut_off_ = 0;
  if (cut > 0 && tail_max_ > -kInf) {
    const double keep = tail_max_ - cut;
    for (double &x : ts_)
      if (x < keep && x > -kInf) {
        x = -kInf;
        ++cut_off_;
      }
    n_unscored_ += cut_off_;
  }
  head_.resize(head_k_.size());
  for (std::size_t j = 0; j < head_k_.size(); ++j)
    head_[j] = pos_.empty() ? head_k_[j] : pos_[head_k_[j]];
}

void HybridSampler::Draw(double T, double floor) {
  tail_.clear();
  pi_drawn_.clear();
  const std::size_t n = total_ - head_k_.size(); // the tail
  if (!(T > 0) || n == 0)
    return;
  // ref::inclusion_probabilities(the tail's scores, n_unscored_, T, floor) over the listed
  // tokens: the head's r is 0 (never capped, never drawn), an unscored token's is the reference's
  // shared r_u, each capped on its own at the same lambda as the reference caps them together.
  // The `extra` tokens outside the list are unscored: r_u each, counted, never stored.
  const std::size_t extra = total_ - n_;
  const double B = std::min(T, double(n));
  double lambda = 1, pi_u = 1;
  r_.resize(n_);
  if (B >= double(n)) {
    std::fill(r_.begin(), r_.end(), 1.0); // every pi 1: the whole tail
    for (std::uint32_t i : head_k_)
      r_[i] = 0;
  } else {
    const double m = tail_max_;
    double z = 0, ru = 0;
    if (m == -kInf) { // nothing scored in the tail: each r is r_u = (1 - floor) / n + floor / n
      std::fill(r_.begin(), r_.end(), 1.0);
      z = double(n);
      ru = 1;
    } else {
      z = hybrid_exp_shifted(ts_.data(), n_, m, r_.data()); // -inf (head, unscored): 0
    }
    const double c1 = 1.0 - floor, c2 = floor / double(n);
    ru = c1 * ru / z + c2;
    double r_max = 0;
    double rest = HWY_DYNAMIC_DISPATCH(Normalize)(r_.data(), n_, c1, z, c2, &r_max);
    for (std::uint32_t i : head_k_) {
      rest -= r_[i]; // the head is not in the tail
      r_[i] = 0;
    }
    rest += double(extra) * ru;
    if (extra > 0)
      r_max = std::max(r_max, ru);
    // The water-filling: cap, re-solve lambda over the rest, repeat until nothing more caps.
    // Usually nothing caps at the first lambda (lambda max r < 1), and no pass is needed.
    std::size_t ncapped = 0, more = 0;
    bool extra_capped = false;
    lambda = B / rest;
    if (lambda * r_max >= 1.0) {
      rr_ = r_;
      for (;;) {
        double next = HWY_DYNAMIC_DISPATCH(Cap)(rr_.data(), n_, lambda, &more);
        if (extra > 0 && !extra_capped) {
          if (lambda * ru >= 1.0) {
            extra_capped = true;
            more += extra;
          } else {
            next += double(extra) * ru;
          }
        }
        if (more == 0)
          break;
        ncapped += more;
        rest = next;
        lambda = (B - double(ncapped)) / rest;
      }
    }
    pi_u = std::min(1.0, lambda * ru);
  }
  // The draw: scored tokens by their uniforms, unscored ones by the skip process; merged in
  // position order.
  drawn_ids_.resize(n_);
  drawn_pi_.resize(n_);
  const std::size_t k = HWY_DYNAMIC_DISPATCH(DrawScored)(
      ts_.data(), r_.data(), pos_.empty() ? nullptr : pos_.data(), n_, lambda, seed_, begin_,
      drawn_ids_.data(), drawn_pi_.data());
  std::vector<std::size_t> skips;
  if (n_unscored_ > 0)
    skips = ref::hybrid_skip_draw(seed_, total_, pi_u);
  // A skipped-to position is an unscored tail token if it is not listed, or listed with score
  // -inf and r > 0 (not the head's).
  auto position = [&](std::size_t k_) -> std::size_t { return pos_.empty() ? k_ : pos_[k_]; };
  std::size_t a = 0, b = 0, listed = 0;
  while (a < k || b < skips.size()) {
    const std::size_t pa = a < k ? position(drawn_ids_[a]) : 0;
    if (b < skips.size() && (a == k || skips[b] < pa)) {
      const std::size_t p = skips[b++];
      bool unscored = true;
      if (pos_.empty()) {
        unscored = ts_[p] == -kInf && r_[p] > 0;
      } else {
        while (listed < n_ && pos_[listed] < p)
          ++listed;
        if (listed < n_ && pos_[listed] == p)
          unscored = ts_[listed] == -kInf && r_[listed] > 0;
      }
      if (unscored) {
        tail_.push_back(std::uint32_t(p));
        pi_drawn_.push_back(pi_u);
      }
    } else {
      tail_.push_back(std::uint32_t(pa));
      pi_drawn_.push_back(drawn_pi_[a++]);
    }
  }
}

} // namespace pig::runtime::lsh
#endif // HWY_ONCE
