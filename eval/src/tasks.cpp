#include "pig/eval/tasks.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#include "pig/spec/files.h"
#include "pig/spec/hash.h"

namespace pig::eval {
namespace {

// splitmix64 (pig::spec's): tiny and fully specified, so a seed names the same instance on every
// standard library (std:: distributions are implementation-defined).
class Rng {
public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() { return spec::splitmix64(s_); }
  std::size_t below(std::size_t n) { return std::size_t(next() % n); }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

private:
  std::uint64_t s_;
};

template <class T> void Shuffle(std::vector<T> &v, Rng &rng) {
  for (std::size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[rng.below(i)]);
}

// RULER's noise haystack for needle retrieval: repetitive on purpose, so that the needle is the
// only informative sentence.
constexpr std::array<const char *, 5> kFiller = {"The grass is green.", "The sky is blue.",
                                                 "The sun is yellow.", "Here we go.",
                                                 "There and back again."};

// Plain, common English nouns (one or two tokens each for a BPE vocabulary): the CWE word pool.
constexpr std::array<const char *, 160> kWords = {
    "apple",   "river",   "garden",  "window",   "pencil", "mountain", "ocean",    "candle",
    "bridge",  "forest",  "castle",  "rabbit",   "tiger",  "guitar",   "piano",    "rocket",
    "planet",  "island",  "desert",  "valley",   "meadow", "harbor",   "engine",   "wallet",
    "ladder",  "mirror",  "basket",  "bottle",   "button", "carpet",   "cheese",   "circle",
    "cloud",   "coffee",  "copper",  "cotton",   "dragon", "feather",  "finger",   "flower",
    "hammer",  "helmet",  "jacket",  "jungle",   "kettle", "kitten",   "lemon",    "letter",
    "lizard",  "magnet",  "marble",  "market",   "monkey", "needle",   "orange",   "oyster",
    "parrot",  "pepper",  "pillow",  "pirate",   "pocket", "potato",   "puzzle",   "rainbow",
    "ribbon",  "saddle",  "salmon",  "shadow",   "silver", "spider",   "spoon",    "statue",
    "summer",  "sunset",  "temple",  "thunder",  "tomato", "tunnel",   "turtle",   "velvet",
    "violin",  "wagon",   "walnut",  "whistle",  "winter", "wizard",   "yogurt",   "zebra",
    "anchor",  "barrel",  "beacon",  "blanket",  "breeze", "canyon",   "carrot",   "cherry",
    "chimney", "compass", "crystal", "dolphin",  "eagle",  "falcon",   "fountain", "galaxy",
    "ginger",  "glacier", "goblet",  "granite",  "hazel",  "horizon",  "iceberg",  "jasmine",
    "lantern", "lobster", "maple",   "meteor",   "nectar", "oasis",    "orchid",   "paddle",
    "panther", "peacock", "pebble",  "pelican",  "pepper", "pine",     "plum",     "pumpkin",
    "quartz",  "raven",   "saffron", "sapphire", "scarf",  "shell",    "sparrow",  "squirrel",
    "stone",   "storm",   "sugar",   "thistle",  "timber", "tulip",    "umbrella", "vanilla",
    "walrus",  "willow",  "anvil",   "badger",   "bamboo", "beetle",   "buffalo",  "cactus",
    "cobalt",  "coral",   "cricket", "daisy",    "ember",  "fig",      "fossil",   "gravel"};

std::vector<std::string> DistinctWords(std::size_t n, Rng &rng) {
  std::vector<std::string> pool;
  std::set<std::string> seen;
  for (const char *w : kWords)
    if (seen.insert(w).second)
      pool.emplace_back(w);
  if (n > pool.size())
    throw std::invalid_argument("cwe: " + std::to_string(n) + " distinct words asked, " +
                                std::to_string(pool.size()) + " available");
  Shuffle(pool, rng);
  pool.resize(n);
  return pool;
}

std::string CodedWord(Rng &rng) {
  const std::size_t len = 3 + rng.below(4);
  std::string w;
  for (std::size_t i = 0; i < len; ++i)
    w.push_back(char('a' + rng.below(26)));
  return w;
}

// `size` filler sentences with inserts[k].second placed before filler sentence inserts[k].first
// (positions in [0, size]; equal positions keep their order).
std::string Haystack(std::size_t size, std::vector<std::pair<std::size_t, std::string>> inserts) {
  std::stable_sort(inserts.begin(), inserts.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::string hay;
  std::size_t k = 0;
  for (std::size_t i = 0; i <= size; ++i) {
    for (; k < inserts.size() && inserts[k].first == i; ++k)
      hay.append(inserts[k].second).append(" ");
    if (i < size)
      hay.append(kFiller[i % kFiller.size()]).append(" ");
  }
  return hay;
}

std::string UpperName(Rng &rng) {
  std::string w;
  for (int i = 0; i < 5; ++i)
    w.push_back(char('A' + rng.below(26)));
  return w;
}

} // namespace

TaskInstance MakeNeedle(std::size_t size, double depth, std::uint64_t seed) {
  Rng rng(seed);
  const std::size_t number = 1000000 + rng.below(9000000);
  const std::size_t at = std::size_t(std::lround(std::clamp(depth, 0.0, 1.0) * double(size)));
  const std::string hay =
      Haystack(size, {{at, "The special magic number is " + std::to_string(number) + "."}});
  TaskInstance t;
  t.name = "needle";
  t.size = size;
  t.prompt = "A special magic number is hidden within the following text. Make sure to memorize "
             "it. I will quiz you about the number afterwards.\n" +
             hay +
             "\nWhat is the special magic number mentioned in the provided text? Answer with the "
             "number only.";
  t.answer_prefix = "The special magic number mentioned in the provided text is";
  t.expected = {std::to_string(number)};
  return t;
}

TaskInstance MakeMultiKeyNeedle(std::size_t size, std::size_t keys, std::uint64_t seed) {
  if (keys == 0)
    throw std::invalid_argument("multikey: need at least one key");
  Rng rng(seed);
  const std::vector<std::string> words = DistinctWords(keys, rng);
  std::set<std::size_t> numbers;
  while (numbers.size() < keys)
    numbers.insert(1000000 + rng.below(9000000));
  std::vector<std::size_t> number(numbers.begin(), numbers.end());
  Shuffle(number, rng);
  std::vector<std::pair<std::size_t, std::string>> needles;
  for (std::size_t k = 0; k < keys; ++k)
    needles.emplace_back(rng.below(size + 1), "One of the special magic numbers for " + words[k] +
                                                  " is: " + std::to_string(number[k]) + ".");
  const std::size_t asked = rng.below(keys);
  TaskInstance t;
  t.name = "multikey";
  t.size = size;
  t.prompt = "Some special magic numbers are hidden within the following text. Make sure to "
             "memorize them. I will quiz you about the numbers afterwards.\n" +
             Haystack(size, needles) + "\nWhat is the special magic number for " + words[asked] +
             " mentioned in the provided text? Answer with the number only.";
  t.answer_prefix = "The special magic number for " + words[asked] +
                    " mentioned in the provided "
                    "text is";
  t.expected = {std::to_string(number[asked])};
  return t;
}

TaskInstance MakeVariableTracking(std::size_t size, std::size_t hops, std::uint64_t seed) {
  if (hops == 0)
    throw std::invalid_argument("vt: need at least one hop");
  Rng rng(seed);
  std::set<std::string> seen;
  auto fresh = [&] {
    for (;;) {
      std::string w = UpperName(rng);
      if (seen.insert(w).second)
        return w;
    }
  };
  const std::size_t value = 10000 + rng.below(90000);
  std::size_t other = value;
  while (other == value)
    other = 10000 + rng.below(90000);
  std::vector<std::pair<std::size_t, std::string>> inserts;
  std::vector<std::string> chain;
  for (std::size_t v : {value, other}) {
    // hops + 1 assignments at ascending depths: each refers to one made before it.
    std::vector<std::size_t> at(hops + 1);
    for (std::size_t &x : at)
      x = rng.below(size + 1);
    std::sort(at.begin(), at.end());
    std::vector<std::string> names(hops + 1);
    for (std::string &n : names)
      n = fresh();
    inserts.emplace_back(at[0], "VAR " + names[0] + " = " + std::to_string(v) + ".");
    for (std::size_t h = 1; h <= hops; ++h)
      inserts.emplace_back(at[h], "VAR " + names[h] + " = VAR " + names[h - 1] + ".");
    if (v == value)
      chain = names;
  }
  TaskInstance t;
  t.name = "vt";
  t.size = size;
  t.prompt = "Memorize and track the chain(s) of variable assignment hidden in the following "
             "text.\n" +
             Haystack(size, inserts) +
             "\nQuestion: Find all variables that are assigned the "
             "value " +
             std::to_string(value) + " in the text above.";
  t.answer_prefix = "Answer: According to the chain(s) of variable assignment in the text above, " +
                    std::to_string(hops + 1) + " variables are assigned the value " +
                    std::to_string(value) + ", they are:";
  t.expected = chain; // ScoreAnswer compares words case-insensitively
  return t;
}

TaskInstance MakeCounting(std::size_t size, std::size_t min_count, std::size_t max_count,
                          std::uint64_t seed) {
  if (min_count < 1 || min_count > max_count || max_count > 99)
    throw std::invalid_argument("count: need 1 <= min_count <= max_count <= 99");
  Rng rng(seed);
  const std::size_t n = min_count + rng.below(max_count - min_count + 1);
  const std::string marker = "The red fox jumped over the " + DistinctWords(1, rng)[0] + ".";
  std::vector<std::pair<std::size_t, std::string>> inserts;
  for (std::size_t k = 0; k < n; ++k)
    inserts.emplace_back(rng.below(size + 1), marker);
  TaskInstance t;
  t.name = "count";
  t.size = size;
  t.prompt = "A special sentence is repeated several times within the following text. Count how "
             "many times it appears.\n" +
             Haystack(size, inserts) + "\nHow many times does the sentence \"" + marker +
             "\" appear in the text above? Answer with a number in digits.";
  t.answer_prefix = "Answer: The number of times the sentence appears in the text is";
  t.expected = {std::to_string(n)};
  return t;
}

TaskInstance MakeCommonWords(std::size_t size, std::size_t n_common, std::size_t common_freq,
                             std::size_t rare_freq, std::uint64_t seed) {
  if (n_common == 0 || common_freq <= rare_freq || rare_freq == 0)
    throw std::invalid_argument("cwe: need n_common >= 1 and common_freq > rare_freq >= 1");
  if (size < n_common * common_freq)
    throw std::invalid_argument("cwe: list of " + std::to_string(size) +
                                " words cannot hold the common words");
  Rng rng(seed);
  const std::size_t n_rare = (size - n_common * common_freq + rare_freq - 1) / rare_freq;
  const std::vector<std::string> words = DistinctWords(n_common + n_rare, rng);
  std::vector<std::string> list;
  for (std::size_t i = 0; i < n_common; ++i)
    list.insert(list.end(), common_freq, words[i]);
  for (std::size_t i = 0; i < n_rare && list.size() < size; ++i)
    for (std::size_t r = 0; r < rare_freq && list.size() < size; ++r)
      list.push_back(words[n_common + i]);
  Shuffle(list, rng);
  std::string text;
  for (std::size_t i = 0; i < list.size(); ++i)
    text += std::to_string(i + 1) + ". " + list[i] + "\n";
  TaskInstance t;
  t.name = "cwe";
  t.size = size;
  const std::string n = std::to_string(n_common);
  t.prompt = "Below is a numbered list of words. In these words, some appear more often than "
             "others. Memorize the ones that appear most often.\n" +
             text + "Question: What are the " + n +
             " most common words in the above list? List the words only.";
  t.answer_prefix = "Answer: The top " + n + " words that appear most often in the list are:";
  t.expected.assign(words.begin(), words.begin() + std::ptrdiff_t(n_common));
  return t;
}

TaskInstance MakeFrequentWords(std::size_t size, double alpha, std::uint64_t seed) {
  if (size < 8 || alpha <= 0)
    throw std::invalid_argument("fwe: need size >= 8 and alpha > 0");
  Rng rng(seed);
  constexpr std::size_t kVocab = 200;
  for (;;) {
    std::set<std::string> seen;
    std::vector<std::string> vocab;
    while (vocab.size() < kVocab) {
      std::string w = CodedWord(rng);
      if (seen.insert(w).second)
        vocab.push_back(std::move(w));
    }
    std::vector<double> cdf(kVocab);
    double acc = 0;
    for (std::size_t r = 0; r < kVocab; ++r)
      cdf[r] = acc += 1.0 / std::pow(double(r + 1), alpha);
    std::vector<std::string> list;
    std::map<std::string, std::size_t> count;
    for (std::size_t i = 0; i < size; ++i) {
      const double u = rng.uniform() * acc;
      const std::size_t r = std::size_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      const std::string &w = vocab[std::min(r, kVocab - 1)];
      list.push_back(w);
      ++count[w];
    }
    std::vector<std::pair<std::size_t, std::string>> by;
    for (const auto &[w, c] : count)
      by.emplace_back(c, w);
    std::sort(by.rbegin(), by.rend());
    // A tie among the top four would make the answer ambiguous: draw again.
    if (by.size() < 4 || by[0].first == by[1].first || by[1].first == by[2].first ||
        by[2].first == by[3].first)
      continue;
    std::string text;
    for (std::size_t i = 0; i < list.size(); ++i)
      text += (i ? " " : "") + list[i];
    TaskInstance t;
    t.name = "fwe";
    t.size = size;
    t.prompt = "Read the following coded text and track the frequency of each coded word. Find "
               "the three most frequently appeared coded words.\n" +
               text +
               "\nQuestion: Do not provide any explanation. What are the three most frequently "
               "appeared words in the above coded text?";
    t.answer_prefix =
        "Answer: According to the coded text above, the three most frequently appeared words are:";
    t.expected = {by[0].second, by[1].second, by[2].second};
    return t;
  }
}

double ScoreFirstNumber(std::string_view answer, std::string_view expected) {
  const std::size_t b = answer.find_first_of("0123456789");
  if (b == std::string_view::npos)
    return 0.0;
  const std::size_t e = answer.find_first_not_of("0123456789", b);
  return answer.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b) == expected
             ? 1.0
             : 0.0;
}

std::vector<std::string> AnswerWords(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 128 && std::isalnum(u)) {
      cur.push_back(char(std::tolower(u)));
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty())
    out.push_back(std::move(cur));
  return out;
}

double ScoreAnswer(std::string_view answer, const std::vector<std::string> &expected) {
  if (expected.empty())
    return 1.0;
  const std::vector<std::string> words = AnswerWords(answer);
  const std::set<std::string> have(words.begin(), words.end());
  std::set<std::string> want;
  for (const std::string &e : expected) {
    const std::vector<std::string> w = AnswerWords(e);
    want.insert(w.empty() ? e : w.front());
  }
  std::size_t hit = 0;
  for (const std::string &w : want)
    hit += have.count(w);
  return double(hit) / double(want.size());
}

std::vector<std::pair<std::string, std::size_t>> WordCounts(std::string_view list_text) {
  std::map<std::string, std::size_t> count;
  for (const std::string &w : AnswerWords(list_text))
    if (!std::isdigit(static_cast<unsigned char>(w[0])))
      ++count[w];
  return {count.begin(), count.end()};
}

} // namespace pig::eval
