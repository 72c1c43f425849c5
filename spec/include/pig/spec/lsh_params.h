// The LSH parameters of MagicPIG, (K, L, t) and the multi-probe radius r, their limits, and
// their one spelling.
//
// The one declaration of (K, L, t) and their defaults 10/150/2. Every other type that carries an
// LSH configuration holds LshParams as its base, so `x.K` reads the same field everywhere and
// {K, L, t, ...} still initialises it: ref::LshConfig (+ W's seed), the dialect builder's
// mlir::pig::LshConfig (+ seed and transform), runtime::AttentionSpec (+ the rest of the
// attention), runtime::LayerLsh and tune::Candidate (+ a dense choice), runtime::LshLayers::Config
// (+ its kernels); tune::LshPoint is LshParams. The kernel keys (spec::KernelKey,
// runtime::lsh::KernelKey, cuda::CudaKernelKey) and the (K, L) grids of pig-eval and pig-compare
// hold LshHash, (K, L) without t: a kernel set is specialised on the hash while t is a threshold
// it takes at run time, and keys that carried t would name one set twice.
//
// Every layer that names a configuration uses this struct and these limits: the reference checks
// them before hashing, the dialect's verifier and pig-specialize before specialising, the
// runtime's registry before serving, pig-tune before writing a point, and every tool's --lsh
// reads them with parse(). The one spelling is "K=10,L=150,t=2": items key=value separated by
// commas, any subset in any order (the others keep their values).
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

#include "pig/spec/text.h"

namespace pig::spec {

/// Largest K: a code is a uint16_t, and every (layer, kv-head, table) keeps a bucket table of
/// 2^K entries, so K = 16 already means 65536 buckets per table. Larger K would also make
/// collisions (p^K) too rare to sample anything at practical L.
inline constexpr int kMaxK = 16;
/// Largest L: the index stores one entry per token per table; beyond ~1000 tables the index
/// outweighs the KV cache many times over (the paper uses L <= 150).
inline constexpr int kMaxL = 1024;

/// The hash: K bits in each of L tables (what a kernel set is specialised on).
struct LshHash {
  int K = 10;  ///< bits per table, [1, kMaxK]
  int L = 150; ///< tables, [1, kMaxL]

  friend bool operator==(const LshHash &, const LshHash &) = default;
};

/// Largest probe radius r: a table is probed in the sum over i <= r of C(K, i) buckets (176 at
/// K = 10, r = 3; 697 at K = 16), and each probe is a bucket walk.
inline constexpr int kMaxR = 3;

/// Buckets probed per table at radius r: sum over i <= r of C(K, i).
constexpr int probes_per_table(int K, int r) {
  int total = 0, c = 1; // C(K, 0)
  for (int i = 0; i <= r && i <= K; ++i) {
    total += c;
    c = c * (K - i) / (i + 1);
  }
  return total;
}

/// (K, L, t, r). Brace-initialised as {K, L, t} or {K, L, t, r} (brace elision fills the
/// LshHash base).
struct LshParams : LshHash {
  int t = 2; ///< a token is sampled when it collides in >= t tables, [1, L]
  /// Multi-probe radius (ALGORITHM.md section 5): a table "collides" when the key's code is
  /// within r bits of the query's, [0, min(kMaxR, K - 1)]. Like t, a run-time choice of the
  /// retrieval: the index and the kernels' specialisation do not depend on it.
  int r = 0;

  friend bool operator==(const LshParams &, const LshParams &) = default;

  /// "" when (K, L, t) is legal, else a message naming the parameter, its range and the value.
  std::string validate() const {
    if (K < 1 || K > kMaxK)
      return cat("K = ", std::to_string(K), " is outside [1, ", std::to_string(kMaxK),
                 "] (K bits per table; a code is a uint16)");
    if (L < 1 || L > kMaxL)
      return cat("L = ", std::to_string(L), " is outside [1, ", std::to_string(kMaxL),
                 "] (tables)");
    if (t < 1 || t > L)
      return cat("t = ", std::to_string(t), " is outside [1, L = ", std::to_string(L),
                 "] (collisions a token needs to be sampled)");
    if (r < 0 || r > kMaxR || r > K - 1)
      return cat("r = ", std::to_string(r), " is outside [0, min(", std::to_string(kMaxR),
                 ", K - 1 = ", std::to_string(K - 1), ")] (multi-probe radius in bits)");
    return "";
  }

  /// "K=10,L=150,t=2" (",r=1" appended when r is not 0): the one spelling; parse() reads it back.
  std::string str() const {
    std::string s =
        cat("K=", std::to_string(K), ",L=", std::to_string(L), ",t=", std::to_string(t));
    if (r != 0)
      s += cat(",r=", std::to_string(r));
    return s;
  }

  /// Reads "K=10,L=150,t=2,r=0" (any subset, any order) over `base`, then validates. Returns
  /// nullopt and sets *error (when given) to a message naming the item on a malformed item, an
  /// unknown key, a key given twice, a number that is not a whole decimal in range, or an illegal
  /// result.
  static std::optional<LshParams> parse(std::string_view text, std::string *error = nullptr) {
    return parse(text, error, LshParams{});
  }
  static std::optional<LshParams> parse(std::string_view text, std::string *error,
                                        const LshParams &base) {
    auto fail = [&](std::string m) -> std::optional<LshParams> {
      if (error)
        *error = std::move(m);
      return std::nullopt;
    };
    LshParams p = base;
    unsigned seen = 0;
    if (text.empty())
      return fail("expects K=..,L=..,t=..[,r=..] (e.g. K=10,L=150,t=2), got ''");
    std::size_t pos = 0;
    while (pos <= text.size()) {
      std::size_t end = text.find(',', pos);
      if (end == std::string_view::npos)
        end = text.size();
      const std::string_view item = text.substr(pos, end - pos);
      pos = end + 1;
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos)
        return fail(cat("item '", item, "' is not key=value (K=10,L=150,t=2)"));
      const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
      int *field = key == "K"   ? &p.K
                   : key == "L" ? &p.L
                   : key == "t" ? &p.t
                   : key == "r" ? &p.r
                                : nullptr;
      const unsigned bit = key == "K" ? 1u : key == "L" ? 2u : key == "t" ? 4u : 8u;
      if (!field)
        return fail(cat("unknown key '", key, "' (K, L, t, r)"));
      if (seen & bit)
        return fail(cat("'", key, "' is given twice"));
      seen |= bit;
      int v = 0;
      const auto r = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || r.ec != std::errc() || r.ptr != value.data() + value.size())
        return fail(cat(key, " expects a whole number, got '", value, "'"));
      *field = v;
    }
    if (std::string m = p.validate(); !m.empty())
      return fail(m);
    return p;
  }
};

} // namespace pig::spec
