#include "pig/tune/quality.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>

#include "pig/reference/attention.h"
#include "pig/reference/lsh.h"

namespace pig::tune {

namespace {

using ref::Matrix;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Tokens projected together: a multiple of the kernel's 4-row tile, small enough that the block's
// projections (kBlock x columns doubles) stay in L2 while every prefix reads them.
constexpr std::size_t kBlock = 16;
// Columns per kernel pass: 4 rows x 512 doubles of accumulators stay in L1.
constexpr std::size_t kChunk = 512;
// Thresholds up to this many get their head sum (t terms) computed exactly like ref; larger
// ones (never used in practice) call ref::log_collision_probability itself.
constexpr int kMaxHeadTerms = 8;

std::invalid_argument Bad(const std::string &what) {
  return std::invalid_argument("MeasureCandidates: " + what);
}

// ref's dot product (attention.cpp): products in double, one accumulator, in order. The same
// arithmetic gives bit-identical logits without calling attention_over per candidate.
double Dot(const float *a, const float *b, std::size_t d) {
  double s = 0.0;
  for (std::size_t j = 0; j < d; ++j)
    s += double(a[j]) * double(b[j]);
  return s;
}

// The projection of a centred key onto column c exactly as ref::encode computes it (one double
// accumulator per column, rows of W in order): used where the fast projection cannot certify
// the sign of the bit.
double ExactProjection(const float *f, Matrix W, std::size_t c) {
  double acc = 0.0;
  for (std::size_t r = 0; r < W.rows; ++r)
    acc += double(f[r]) * double(W.row(r)[c]);
  return acc;
}

// out (rows x C, rows a multiple of 4) = k (rows x d floats) times w (d x C doubles). The order
// of the sums is not ref's: the result only needs to be accurate (see the bound in
// MeasureCandidates, which holds with or without fused multiply-adds), so the kernel is free to
// tile and, on x86-64, to use AVX2 and FMA where the CPU has them (4x the baseline's SSE2
// throughput on the dominant cost). Four rows share each load of w.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void Project(const float *k, std::size_t rows, std::size_t d, const double *w, std::size_t C,
             double *out) {
  std::fill(out, out + rows * C, 0.0);
  for (std::size_t b = 0; b < rows; b += 4)
    for (std::size_t c0 = 0; c0 < C; c0 += kChunk) {
      const std::size_t cn = std::min(kChunk, C - c0);
      double *__restrict o0 = out + b * C + c0;
      double *__restrict o1 = o0 + C;
      double *__restrict o2 = o1 + C;
      double *__restrict o3 = o2 + C;
      for (std::size_t r = 0; r < d; ++r) {
        const double *__restrict wr = w + r * C + c0;
        const double k0 = k[b * d + r], k1 = k[(b + 1) * d + r];
        const double k2 = k[(b + 2) * d + r], k3 = k[(b + 3) * d + r];
        for (std::size_t c = 0; c < cn; ++c) {
          const double x = wr[c];
          o0[c] += k0 * x;
          o1[c] += k1 * x;
          o2[c] += k2 * x;
          o3[c] += k3 * x;
        }
      }
    }
}

// ref's log_sum_exp (lsh.cpp) over n terms: the first maximum, then the sum in order.
double LogSumExp(const double *x, int n) {
  const double m = *std::max_element(x, x + n);
  if (m == -kInf)
    return m;
  double sum = 0.0;
  for (int i = 0; i < n; ++i)
    sum += std::exp(x[i] - m);
  return m + std::log(sum);
}

// log C(L, i) for i = 0..L by ref's recurrence, so that every binomial term below is computed
// from the very same doubles as in ref::log_collision_probability.
std::vector<double> LogBinomials(int L) {
  std::vector<double> c(std::size_t(L) + 1);
  double logC = 0.0;
  for (int i = 0; i <= L; ++i) {
    c[std::size_t(i)] = logC;
    if (i < L)
      logC += std::log(double(L - i)) - std::log(double(i + 1));
  }
  return c;
}

// What log u needs of one (query, token, K): p = 1 - theta/pi, log P = K log p,
// log(1 - P), and P / (1 - P) (the ratio of consecutive binomial terms, up to (L-i)/(i+1)).
struct TokenK {
  double p, logP, log1mP, odds;
};

// ref::log_collision_probability(cos, K, L, t), which sums all L+1 binomial terms with one exp
// each; it dominates the run time when called for every sampled token of every candidate. Here:
// - the head (the t terms below the threshold) and the decision between u = 1 - head and
//   u = tail are computed exactly as ref does, so that branch is bit-identical;
// - the tail (u < 1/2, the usual case) is T_t * sum_k prod_{i<k} r_i with the term ratios
//   r_i = (L-i)/(i+1) * P/(1-P), stopped once the remainder (a geometric series bounded by the
//   last term, since the ratios decrease) is below 1e-17 of the sum. It differs from ref's sum
//   by rounding: a few ulps of log P per term, about 1e-13 in log u at worst.
double LogU(const TokenK &tk, double cos_theta, int K, int L, int t, const double *logC) {
  if (std::isnan(tk.p))
    return tk.p;
  if (tk.p <= 0.0)
    return -kInf;
  if (tk.p >= 1.0)
    return 0.0;
  if (t > kMaxHeadTerms)
    return ref::log_collision_probability(cos_theta, K, L, t);
  const double logP = tk.logP, log1mP = tk.log1mP;
  double head[kMaxHeadTerms];
  for (int i = 0; i < t; ++i)
    head[i] = logC[i] + i * logP + (L - i) * log1mP;
  const double log_head = LogSumExp(head, t);
  if (log_head < -std::numbers::ln2)
    return std::log1p(-std::exp(log_head));
  const double first = logC[t] + t * logP + (L - t) * log1mP;
  double sum = 1.0, term = 1.0;
  for (int i = t; i < L; ++i) {
    const double r = double(L - i) / double(i + 1) * tk.odds;
    term *= r;
    sum += term;
    if (r < 1.0 && term * r < 1e-17 * sum * (1.0 - r))
      break;
  }
  if (!(sum < 1e300)) // not reachable with head >= 1/2, but never trade exactness for it
    return ref::log_collision_probability(cos_theta, K, L, t);
  return std::min(0.0, first + std::log(sum));
}

struct Group { // the candidates sharing K
  int K = 0;
  std::vector<int> Ls;               // distinct L, ascending: checkpoints of the counts
  std::vector<std::size_t> members;  // candidate indices
  std::vector<std::size_t> member_l; // index into Ls of each member
};

struct Prefix { // the queries sharing a length
  std::size_t m = 0;
  ref::TokenSplit split;
  std::vector<float> mean;   // ref::build_index's mu (zeros when nothing is indexed)
  std::vector<double> meanW; // mu . W[:, c], accurate (not ref's order)
  double mean_norm = 0;
  std::vector<std::size_t> queries;
};

} // namespace

std::vector<std::vector<QualitySample>> MeasureCandidates(Matrix K, Matrix V, Matrix W,
                                                          const std::vector<QualityQuery> &queries,
                                                          const std::vector<LshPoint> &candidates,
                                                          ref::StaticConfig statics,
                                                          std::size_t min_indexed) {
  const std::size_t n = K.rows, d = K.cols, dv = V.cols;
  if (d == 0)
    throw Bad("keys have no columns");
  if (V.rows != n)
    throw Bad(std::to_string(n) + " keys but " + std::to_string(V.rows) + " values");
  if (W.rows != d)
    throw Bad("W has " + std::to_string(W.rows) + " rows, keys have " + std::to_string(d) +
              " columns");
  std::size_t C = 0; // columns of W used: the widest candidate's K*L
  for (const LshPoint &c : candidates) {
    const ref::LshConfig cfg{c.K, c.L, c.t, 0};
    cfg.validate();
    if (cfg.columns() > W.cols)
      throw Bad("candidate K=" + std::to_string(c.K) + " L=" + std::to_string(c.L) + " needs " +
                std::to_string(cfg.columns()) + " columns of W, which has " +
                std::to_string(W.cols));
    C = std::max(C, cfg.columns());
  }

  // Prefixes (distinct lengths), each with its split and mean as ref::build_index has them.
  std::map<std::size_t, std::size_t> prefix_of_length;
  std::vector<Prefix> prefixes;
  std::vector<std::size_t> prefix_of(queries.size());
  for (std::size_t qi = 0; qi < queries.size(); ++qi) {
    const QualityQuery &q = queries[qi];
    if (q.q.size() != d)
      throw Bad("query " + std::to_string(qi) + " has " + std::to_string(q.q.size()) +
                " entries, keys have " + std::to_string(d) + " columns");
    if (q.length > n)
      throw Bad("query " + std::to_string(qi) + " attends to " + std::to_string(q.length) +
                " tokens of " + std::to_string(n));
    const std::size_t m = q.length == 0 ? n : q.length;
    auto [it, fresh] = prefix_of_length.try_emplace(m, prefixes.size());
    if (fresh) {
      Prefix p;
      p.m = m;
      p.split = ref::split_tokens(m, statics);
      if (p.split.indexed() < min_indexed)
        throw Bad("query " + std::to_string(qi) + " at length " + std::to_string(m) + " has " +
                  std::to_string(p.split.indexed()) + " indexed tokens, fewer than " +
                  std::to_string(min_indexed));
      p.mean.assign(d, 0.0f);
      if (p.split.indexed() > 0)
        p.mean = ref::mean_of_rows(K, p.split.indexed_begin, p.split.indexed_end);
      prefixes.push_back(std::move(p));
    }
    prefix_of[qi] = it->second;
    prefixes[it->second].queries.push_back(qi);
  }

  // Candidates grouped by K: one set of codes and cumulative counts per K serves every (L, t).
  std::vector<Group> groups;
  std::vector<std::size_t> group_of(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group &g) { return g.K == candidates[c].K; });
    if (it == groups.end()) {
      groups.push_back(Group{candidates[c].K, {}, {}, {}});
      it = groups.end() - 1;
    }
    group_of[c] = std::size_t(it - groups.begin());
    it->members.push_back(c);
    it->Ls.push_back(candidates[c].L);
  }
  std::map<int, std::vector<double>> log_binomials;
  for (Group &g : groups) {
    std::sort(g.Ls.begin(), g.Ls.end());
    g.Ls.erase(std::unique(g.Ls.begin(), g.Ls.end()), g.Ls.end());
    for (std::size_t c : g.members) {
      g.member_l.push_back(
          std::size_t(std::lower_bound(g.Ls.begin(), g.Ls.end(), candidates[c].L) - g.Ls.begin()));
      if (!log_binomials.count(candidates[c].L))
        log_binomials[candidates[c].L] = LogBinomials(candidates[c].L);
    }
  }

  std::vector<std::vector<QualitySample>> result(candidates.size(),
                                                 std::vector<QualitySample>(queries.size()));
  if (candidates.empty() || queries.empty())
    return result;

  // W's used columns in double (for the kernel) and their norms (for the bound).
  std::vector<double> Wd(d * C);
  std::vector<double> wnorm(C, 0.0);
  for (std::size_t r = 0; r < d; ++r)
    for (std::size_t c = 0; c < C; ++c) {
      Wd[r * C + c] = W.row(r)[c];
      wnorm[c] += Wd[r * C + c] * Wd[r * C + c];
    }
  for (double &x : wnorm)
    x = std::sqrt(x);
  for (Prefix &p : prefixes) {
    p.meanW.assign(C, 0.0);
    double nn = 0.0;
    for (std::size_t r = 0; r < d; ++r) {
      const double mr = p.mean[r];
      nn += mr * mr;
      for (std::size_t c = 0; c < C; ++c)
        p.meanW[c] += mr * Wd[r * C + c];
    }
    p.mean_norm = std::sqrt(nn);
  }

  // The query codes per K for the widest L of the group: ref::encode itself (table l depends only
  // on its own columns, so the codes of a smaller L are a prefix).
  std::vector<std::vector<std::vector<std::uint16_t>>> qcodes(queries.size());
  for (std::size_t qi = 0; qi < queries.size(); ++qi)
    for (const Group &g : groups)
      qcodes[qi].push_back(ref::encode(queries[qi].q, W, ref::LshConfig{g.K, g.Ls.back(), 1, 0}));

  // counts[qi][g][l * indexed + j]: in how many of the first Ls[l] tables indexed token j of the
  // query's prefix collides with the query.
  std::vector<std::vector<std::vector<std::uint16_t>>> counts(queries.size());
  for (std::size_t qi = 0; qi < queries.size(); ++qi)
    for (const Group &g : groups)
      counts[qi].emplace_back(g.Ls.size() * prefixes[prefix_of[qi]].split.indexed(), 0);

  // Every indexed token of every prefix: [sink, largest end).
  std::size_t lo = n, hi = 0;
  for (const Prefix &p : prefixes)
    if (p.split.indexed() > 0) {
      lo = std::min(lo, p.split.indexed_begin);
      hi = std::max(hi, p.split.indexed_end);
    }

  // ref hashes f = fl(k - mu) (a float subtraction) with the double sum
  // X = sum_r f_r w_rc. The kernel computes A = k.w_c - mu.w_c once for all prefixes instead.
  // |A - X| <= 2^-24 sum |k_r - mu_r||w_rc| (the rounding of f)
  //          + gamma_d (sum|k_r w_rc| + sum|mu_r w_rc| + sum|f_r w_rc|) (three sums of d terms)
  //          + 2^-53 |A| (the subtraction),
  // and by Cauchy-Schwarz each sum |x_r w_rc| <= |x| |w_c|. Where |A| exceeds twice that bound
  // the sign of X is the sign of A; elsewhere (rare: |A| within ~1e-7 relative of 0) the bit is
  // recomputed exactly as ref does. So every bit, hence every sample set, is ref's.
  const double unit_f = std::ldexp(1.0, -24);
  const double gamma = double(d) * std::ldexp(1.0, -53) / (1.0 - double(d) * std::ldexp(1.0, -53));
  const double tiny = 1e-40 * double(d); // subnormal float subtraction results: absolute error

  std::vector<float> kblock(kBlock * d), f(d);
  std::vector<double> kw(kBlock * C);
  std::vector<std::uint8_t> bits(C);
  std::vector<std::vector<std::uint16_t>> codes(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    codes[g].resize(std::size_t(groups[g].Ls.back()));

  for (std::size_t i0 = lo; i0 < hi; i0 += kBlock) {
    const std::size_t nb = std::min(kBlock, hi - i0);
    std::fill(kblock.begin(), kblock.end(), 0.0f);
    std::copy(K.row(i0), K.row(i0) + nb * d, kblock.begin());
    Project(kblock.data(), kBlock, d, Wd.data(), C, kw.data());
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t i = i0 + b;
      const double *a = kw.data() + b * C;
      double kn = 0.0;
      for (std::size_t r = 0; r < d; ++r)
        kn += double(K.row(i)[r]) * double(K.row(i)[r]);
      kn = std::sqrt(kn);
      for (const Prefix &p : prefixes) {
        if (i < p.split.indexed_begin || i >= p.split.indexed_end)
          continue;
        double fn = 0.0;
        for (std::size_t r = 0; r < d; ++r) {
          f[r] = K.row(i)[r] - p.mean[r];
          fn += double(f[r]) * double(f[r]);
        }
        fn = std::sqrt(fn);
        if (fn == 0.0) {
          // k == mu exactly: ref's projections are all exactly 0, every bit 0.
          std::fill(bits.begin(), bits.end(), std::uint8_t(0));
        } else {
          const double bound = 2.0 * (unit_f * fn + gamma * (kn + p.mean_norm + fn)) + tiny;
          const double *mw = p.meanW.data();
          bool unsure = false;
          for (std::size_t c = 0; c < C; ++c) {
            const double x = a[c] - mw[c];
            bits[c] = x > 0.0;
            unsure |= std::abs(x) * (1.0 - 0x1p-50) <= bound * wnorm[c];
          }
          if (unsure)
            for (std::size_t c = 0; c < C; ++c) {
              const double x = a[c] - mw[c];
              if (std::abs(x) * (1.0 - 0x1p-50) <= bound * wnorm[c])
                bits[c] = ExactProjection(f.data(), W, c) > 0.0;
            }
        }
        for (std::size_t g = 0; g < groups.size(); ++g) {
          const std::size_t Kg = std::size_t(groups[g].K);
          std::uint16_t *code = codes[g].data();
          for (std::size_t l = 0; l < codes[g].size(); ++l) {
            unsigned v = 0;
            for (std::size_t j = 0; j < Kg; ++j)
              v |= unsigned(bits[l * Kg + j]) << j;
            code[l] = std::uint16_t(v);
          }
        }
        const std::size_t indexed = p.split.indexed(), j = i - p.split.indexed_begin;
        for (std::size_t qi : p.queries)
          for (std::size_t g = 0; g < groups.size(); ++g) {
            const std::uint16_t *code = codes[g].data(), *qc = qcodes[qi][g].data();
            std::uint16_t *cnt = counts[qi][g].data();
            unsigned hits = 0;
            std::size_t l = 0;
            for (std::size_t ci = 0; ci < groups[g].Ls.size(); ++ci) {
              for (const std::size_t end = std::size_t(groups[g].Ls[ci]); l < end; ++l)
                hits += code[l] == qc[l];
              cnt[ci * indexed + j] = std::uint16_t(hits);
            }
          }
      }
    }
  }

  // Per query: the exact attention, the logits, the cosines; then every candidate reads its
  // sample off the counts and runs ref's softmax over the static tokens and the sample.
  const double scale = ref::default_scale(d);
  const double log_u_floor = std::log(std::numeric_limits<double>::denorm_min());
  std::vector<double> z, cosines, logp, zz, e, acc;
  std::vector<TokenK> tk;
  std::vector<std::size_t> rows;
  std::vector<float> out(dv);
  for (std::size_t qi = 0; qi < queries.size(); ++qi) {
    const Prefix &p = prefixes[prefix_of[qi]];
    const std::span<const float> q = queries[qi].q;
    const std::size_t m = p.m, begin = p.split.indexed_begin, indexed = p.split.indexed();
    const ref::Attention exact =
        ref::dense_attention(q, Matrix{K.data, m, d}, Matrix{V.data, m, dv});
    z.resize(m);
    for (std::size_t i = 0; i < m; ++i)
      z[i] = scale * Dot(q.data(), K.row(i), d);
    // ref::sample_tokens: the cosine between q and the (float) centred key, p = 1 - theta/pi.
    cosines.resize(indexed);
    logp.resize(indexed);
    std::vector<double> pv(indexed);
    for (std::size_t j = 0; j < indexed; ++j) {
      for (std::size_t r = 0; r < d; ++r)
        f[r] = K.row(begin + j)[r] - p.mean[r];
      cosines[j] = ref::cosine(q, f);
      pv[j] = std::isnan(cosines[j])
                  ? cosines[j]
                  : 1.0 - std::acos(std::clamp(cosines[j], -1.0, 1.0)) / std::numbers::pi;
      logp[j] = std::log(pv[j]);
    }
    const std::vector<std::size_t> statics_ids = p.split.static_ids();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const Group &grp = groups[g];
      tk.resize(indexed);
      for (std::size_t j = 0; j < indexed; ++j) {
        TokenK &x = tk[j];
        x.p = pv[j];
        x.logP = grp.K * logp[j];
        x.log1mP = std::log1p(-std::exp(x.logP));
        x.odds = std::exp(x.logP - x.log1mP);
      }
      for (std::size_t mi = 0; mi < grp.members.size(); ++mi) {
        const std::size_t c = grp.members[mi];
        const int L = candidates[c].L, t = candidates[c].t;
        const double *logC = log_binomials.at(L).data();
        const std::uint16_t *cnt = counts[qi][g].data() + grp.member_l[mi] * indexed;
        // ref::magicpig_attention's one softmax: static tokens (bias 0) then the sample
        // (bias log u, floored at denorm_min), in that order.
        rows.assign(statics_ids.begin(), statics_ids.end());
        zz.clear();
        for (std::size_t i : statics_ids)
          zz.push_back(z[i]);
        std::size_t sampled = 0;
        for (std::size_t j = 0; j < indexed; ++j) {
          if (cnt[j] < t)
            continue;
          ++sampled;
          const double lu = LogU(tk[j], cosines[j], grp.K, L, t, logC);
          rows.push_back(begin + j);
          zz.push_back(z[begin + j] - (std::isnan(lu) ? lu : std::max(lu, log_u_floor)));
        }
        // ref's softmax_values (attention.cpp), operation for operation.
        std::fill(out.begin(), out.end(), 0.0f);
        double mx = -kInf;
        for (double x : zz)
          if (x > mx)
            mx = x;
        if (mx == -kInf) {
          for (double x : zz)
            if (std::isnan(x))
              std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
        } else {
          e.resize(zz.size());
          double sum = 0.0;
          for (std::size_t k = 0; k < zz.size(); ++k)
            sum += (e[k] = std::exp(zz[k] - mx));
          acc.assign(dv, 0.0);
          for (std::size_t k = 0; k < zz.size(); ++k) {
            const double w = e[k] / sum;
            const float *v = V.row(rows[k]);
            for (std::size_t jj = 0; jj < dv; ++jj)
              acc[jj] += w * double(v[jj]);
          }
          for (std::size_t jj = 0; jj < dv; ++jj)
            out[jj] = float(acc[jj]);
        }
        result[c][qi] = {ref::relative_l2_error(out, exact.out),
                         indexed == 0 ? 0.0 : double(sampled) / double(indexed)};
      }
    }
  }
  return result;
}

} // namespace pig::tune
