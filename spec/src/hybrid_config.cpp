#include "pig/spec/hybrid_config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace pig::spec {

namespace {

bool in_range(double x, double lo, double hi) { return x >= lo && x <= hi; } // false for NaN

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", 100.0 * x);
  return buf;
}

} // namespace

const char *to_string(HybridRank r) {
  switch (r) {
  case HybridRank::collisions:
    return "collisions";
  case HybridRank::hamming:
    return "hamming";
  case HybridRank::lowrank:
    return "lowrank";
  case HybridRank::quant:
    return "quant";
  }
  return "?";
}

std::optional<HybridRank> parse_rank(std::string_view name) {
  for (HybridRank r :
       {HybridRank::collisions, HybridRank::hamming, HybridRank::lowrank, HybridRank::quant})
    if (name == to_string(r))
      return r;
  return std::nullopt;
}

void HybridConfig::validate() const {
  auto bad = [](const std::string &what) { throw std::invalid_argument("lsh-hybrid: " + what); };
  if (!(budget > 0 && budget <= 1))
    bad("budget must be in (0, 1], got " + std::to_string(budget));
  if (!in_range(head_share, 0, 1))
    bad("head share must be in [0, 1], got " + std::to_string(head_share));
  if (!(floor > 0 && floor <= 1))
    bad("floor must be in (0, 1], got " + std::to_string(floor));
  if (!(epsilon >= 0 && std::isfinite(epsilon)))
    bad("epsilon must be finite and >= 0, got " + std::to_string(epsilon));
  if (!(delta > 0 && delta < 1))
    bad("delta must be in (0, 1), got " + std::to_string(delta));
  if (bits < 0 || (bits > 0 && rank != HybridRank::hamming))
    bad("bits must be >= 0 and only with rank=hamming, got " + std::to_string(bits));
  if (!(max_budget > 0 && max_budget <= 1))
    bad("the budget cap must be in (0, 1], got " + std::to_string(max_budget));
  if (dims < 1 || dims > 4096)
    bad("dims must be in [1, d], got " + std::to_string(dims));
  if ((kbits != 0 && kbits != 4 && kbits != 8) ||
      (kbits != 0 && rank != HybridRank::lowrank && rank != HybridRank::quant))
    bad("kbits must be 8 or 4 and only with rank=lowrank or quant, got " + std::to_string(kbits));
  if (candidates < 0 || candidates > 65535)
    bad("cand (the collisions a candidate needs) must be in [0, L], got " +
        std::to_string(candidates));
  if (!in_range(prefilter, 0, 1) || (prefilter > 0 && rank != HybridRank::hamming))
    bad("pre (the share the coarse ranker keeps) must be in [0, 1] and only with rank=hamming, "
        "got " +
        std::to_string(prefilter));
  if (prebits < 1 || prebits > 1 << 20)
    bad("prebits must be >= 1, got " + std::to_string(prebits));
  if (reuse < 1 || reuse > 4096)
    bad("reuse (the decode steps one selection serves) must be in [1, 4096], got " +
        std::to_string(reuse));
  if (!(cut >= 0 && std::isfinite(cut)))
    bad("cut (a logit gap) must be finite and >= 0, got " + std::to_string(cut));
}

std::string HybridConfig::str() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, " head=%g floor=%g ", head_share, floor);
  std::string s = "b=" + pct(budget) + buf + to_string(rank);
  if (bits > 0)
    s += " bits=" + std::to_string(bits);
  if (rank == HybridRank::lowrank)
    s += " dims=" + std::to_string(dims);
  if (kbits != 0)
    s += " kbits=" + std::to_string(kbits);
  if (epsilon > 0) {
    std::snprintf(buf, sizeof buf, " eps=%g delta=%g cap=", epsilon, delta);
    s += buf + pct(max_budget);
  }
  if (value_norm)
    s += " |v|";
  if (candidates > 0)
    s += " cand=" + std::to_string(candidates);
  if (prefilter > 0)
    s += " pre=" + pct(prefilter) + "/" + std::to_string(prebits) + (prenorm ? " prenorm" : "");
  if (reuse != 1)
    s += " reuse=" + std::to_string(reuse);
  if (cut > 0) {
    std::snprintf(buf, sizeof buf, " cut=%g", cut);
    s += buf;
  }
  return s;
}

std::string HybridConfig::spec() const {
  auto num = [](double x) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
  };
  const HybridConfig d;
  std::string s = "head=" + num(head_share) + ":floor=" + num(floor) + ":rank=" + to_string(rank);
  if (bits != d.bits)
    s += ":bits=" + std::to_string(bits);
  if (dims != d.dims)
    s += ":dims=" + std::to_string(dims);
  if (kbits != d.kbits)
    s += ":kbits=" + std::to_string(kbits);
  if (candidates != d.candidates)
    s += ":cand=" + std::to_string(candidates);
  if (value_norm)
    s += ":vnorm=1";
  if (epsilon != d.epsilon)
    s += ":eps=" + num(epsilon);
  if (delta != d.delta)
    s += ":delta=" + num(delta);
  if (max_budget != d.max_budget)
    s += ":cap=" + num(max_budget);
  if (prefilter != d.prefilter)
    s += ":pre=" + num(prefilter);
  if (prebits != d.prebits)
    s += ":prebits=" + std::to_string(prebits);
  if (prenorm)
    s += ":prenorm=1";
  if (reuse != d.reuse)
    s += ":reuse=" + std::to_string(reuse);
  if (cut != d.cut)
    s += ":cut=" + num(cut);
  return s;
}

HybridConfig HybridConfig::parse(const std::string &text) {
  HybridConfig c;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(':', at);
    if (end == std::string::npos)
      end = text.size();
    const std::string pair = text.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = pair.find('=');
    auto bad = [&] {
      throw std::invalid_argument(
          "lsh-hybrid: cannot read \"" + pair +
          "\" (budget, head, floor, eps, delta, cap, rank, bits, dims, cand, vnorm, pre, prebits, "
          "prenorm, reuse, kbits, cut, seed)");
    };
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size())
      bad();
    const std::string key = pair.substr(0, eq);
    std::string value = pair.substr(eq + 1);
    if (key == "rank") {
      const std::optional<HybridRank> r = parse_rank(value);
      if (!r)
        bad();
      c.rank = *r;
      continue;
    }
    double div = 1;
    if ((key == "budget" || key == "cap" || key == "pre") && value.back() == '%') {
      value.pop_back();
      div = 100;
    }
    std::size_t used = 0;
    double x = 0;
    try {
      x = std::stod(value, &used);
    } catch (const std::exception &) {
      bad();
    }
    if (used != value.size())
      bad();
    x /= div;
    if (key == "budget")
      c.budget = x;
    else if (key == "head")
      c.head_share = x;
    else if (key == "floor")
      c.floor = x;
    else if (key == "eps")
      c.epsilon = x;
    else if (key == "delta")
      c.delta = x;
    else if (key == "cap")
      c.max_budget = x;
    else if (key == "bits" && x >= 1 && x == std::floor(x) && x <= 1 << 20)
      c.bits = int(x);
    else if (key == "dims" && x >= 1 && x == std::floor(x) && x <= 4096)
      c.dims = int(x);
    else if (key == "cand" && x >= 0 && x == std::floor(x) && x <= 65535)
      c.candidates = int(x);
    else if (key == "pre")
      c.prefilter = x;
    else if (key == "prebits" && x >= 1 && x == std::floor(x) && x <= 1 << 20)
      c.prebits = int(x);
    else if (key == "prenorm" && (x == 0 || x == 1))
      c.prenorm = x == 1;
    else if (key == "kbits" && (x == 4 || x == 8))
      c.kbits = int(x);
    else if (key == "reuse" && x >= 1 && x == std::floor(x) && x <= 4096)
      c.reuse = int(x);
    else if (key == "cut")
      c.cut = x;
    else if (key == "vnorm" && (x == 0 || x == 1))
      c.value_norm = x == 1;
    else if (key == "seed" && x >= 0 && x == std::floor(x) && x < 0x1p64)
      c.seed = std::uint64_t(x);
    else
      bad();
  }
  c.validate();
  return c;
}

} // namespace pig::spec
