// The tokenizer's heap-based merges (O(n log n) in a word) against the quadratic merge loops they
// replaced (issue 47), kept here as the oracle: identical ids on real text, long words that
// stress the order of equal-ranked merges, invalid UTF-8, Unicode, whitespace, digits and
// special-token text, with the default model's vocabulary, a SentencePiece vocabulary made from
// it, and random vocabularies whose merge lists are in any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "model_util.h"
#include "pig/runtime/gguf.h"
#include "pig/runtime/model.h"
#include "pig/runtime/tokenizer.h"
#include "utf8.h" // runtime/model: the tokenizer's own codec

namespace pig::runtime {
namespace {

using Ids = std::vector<int32_t>;

// --- the oracle: the tokenizer's encoding as it was before the heaps --------------------------

using utf8::DecodeUtf8;
using utf8::Utf8Text;

std::string Utf8(uint32_t cp) {
  std::string out;
  utf8::AppendUtf8(out, cp);
  return out;
}

// Encode as the tokenizer did up to issue 47: each merge rescans the whole word, O(n^2). The
// specials scan and the pre-tokenizer (PreTokenize) are the tokenizer's own, unchanged.
class QuadraticTokenizer {
public:
  explicit QuadraticTokenizer(const TokenizerData &d) : d_(d) {
    for (size_t i = 0; i < d_.tokens.size(); ++i) {
      vocab_.emplace(d_.tokens[i], int32_t(i));
      const int32_t type = i < d_.token_types.size() ? d_.token_types[i] : 1;
      if ((type == 3 || type == 4) && !d_.tokens[i].empty())
        specials_.push_back(d_.tokens[i]);
    }
    std::sort(specials_.begin(), specials_.end(),
              [](const std::string &a, const std::string &b) { return a.size() > b.size(); });
    for (size_t r = 0; r < d_.merges.size(); ++r)
      merge_rank_.emplace(d_.merges[r], int32_t(r));
    for (int b = 0, n = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      byte_to_unicode_[b] = Utf8(cp);
      unicode_to_byte_[cp] = uint8_t(b);
    }
  }

  Ids Encode(std::string_view text, bool add_bos) const {
    Ids out;
    if (add_bos && d_.add_bos && d_.bos_id >= 0)
      out.push_back(d_.bos_id);
    size_t seg = 0, i = 0;
    while (i < text.size()) {
      const std::string *hit = nullptr;
      for (const auto &s : specials_) {
        if (text.compare(i, s.size(), s) == 0) {
          hit = &s;
          break;
        }
      }
      if (!hit) {
        ++i;
        continue;
      }
      if (i > seg)
        EncodeSegment(text.substr(seg, i - seg), out);
      out.push_back(vocab_.at(*hit));
      i += hit->size();
      seg = i;
    }
    if (seg < text.size())
      EncodeSegment(text.substr(seg), out);
    return out;
  }

private:
  void EncodeSegment(std::string_view text, Ids &out) const {
    if (d_.model == "llama") {
      SpmEncode(d_.add_space_prefix ? " " + std::string(text) : std::string(text), out);
      return;
    }
    for (std::string_view word : PreTokenize(text, d_.pre))
      BpeWord(word, out);
  }

  void PushByteFallback(unsigned char byte, Ids &out) const {
    static const char *kHex = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
    auto it = vocab_.find(name);
    if (it != vocab_.end())
      out.push_back(it->second);
    else if (d_.unk_id >= 0)
      out.push_back(d_.unk_id);
    else
      throw std::runtime_error("byte " + std::to_string(byte) + " has no token and no <unk>");
  }

  void BpeWord(std::string_view word, Ids &out) const {
    std::vector<std::string> sym;
    for (unsigned char b : word)
      sym.push_back(byte_to_unicode_[b]);
    std::string key;
    while (sym.size() > 1) {
      int32_t best = INT32_MAX;
      size_t best_i = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        key.assign(sym[i]).append(" ").append(sym[i + 1]);
        auto it = merge_rank_.find(key);
        if (it != merge_rank_.end() && it->second < best)
          best = it->second, best_i = i;
      }
      if (best == INT32_MAX)
        break;
      const std::string a = sym[best_i], b = sym[best_i + 1];
      std::vector<std::string> next;
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          next.push_back(a + b);
          ++i;
        } else {
          next.push_back(std::move(sym[i]));
        }
      }
      sym = std::move(next);
    }
    for (const auto &s : sym) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (uint32_t cp : DecodeUtf8(s).cps) {
        auto b = unicode_to_byte_.find(cp);
        PushByteFallback(b != unicode_to_byte_.end() ? b->second : 0, out);
      }
    }
  }

  void SpmEncode(std::string_view text, Ids &out) const {
    std::string escaped;
    for (char c : text)
      escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    const Utf8Text t = DecodeUtf8(escaped);
    std::vector<std::string> sym;
    for (size_t i = 0; i < t.cps.size(); ++i)
      sym.emplace_back(escaped.substr(t.offs[i], t.offs[i + 1] - t.offs[i]));
    while (sym.size() > 1) {
      float best = -1e30f;
      size_t best_i = SIZE_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = vocab_.find(sym[i] + sym[i + 1]);
        if (it != vocab_.end() && d_.scores[it->second] > best) {
          best = d_.scores[it->second];
          best_i = i;
        }
      }
      if (best_i == SIZE_MAX)
        break;
      sym[best_i] += sym[best_i + 1];
      sym.erase(sym.begin() + long(best_i) + 1);
    }
    for (const auto &s : sym) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        out.push_back(it->second);
      } else {
        for (unsigned char b : s)
          PushByteFallback(b, out);
      }
    }
  }

  TokenizerData d_;
  std::unordered_map<std::string, int32_t> vocab_, merge_rank_;
  std::vector<std::string> specials_;
  std::string byte_to_unicode_[256];
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
};

// --- inputs ------------------------------------------------------------------------------------

std::string Letters(std::mt19937 &rng, size_t n, std::string_view alphabet) {
  std::string s(n, ' ');
  for (char &c : s)
    c = alphabet[rng() % alphabet.size()];
  return s;
}

std::string Repeat(std::string_view unit, size_t bytes) {
  std::string s;
  while (s.size() < bytes)
    s += unit;
  return s;
}

std::string RandomBytes(std::mt19937 &rng, size_t n) {
  std::string s(n, '\0');
  for (char &c : s)
    c = char(rng() & 0xFF);
  return s;
}

// Code points drawn from the given ranges, UTF-8.
std::string RandomText(std::mt19937 &rng, size_t n, std::vector<std::pair<uint32_t, uint32_t>> r) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto &[lo, hi] = r[rng() % r.size()];
    s += Utf8(lo + uint32_t(rng() % (hi - lo + 1)));
  }
  return s;
}

std::string Gpl3() {
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The inputs every vocabulary is checked on, each of at most about n bytes: the oracle is
// quadratic in a word (in a whole segment for SentencePiece), and the suite runs under
// AddressSanitizer in a Debug build too.
std::vector<std::string> Inputs(size_t n) {
  std::mt19937 rng(47);
  std::vector<std::string> in = {
      "",
      "a",
      "Hello, world!",
      Letters(rng, n, "abcdefghijklmnopqrstuvwxyz"),
      Repeat("a", n),
      Repeat("ab", n),
      Repeat("aab", n),
      Repeat("abc", n),
      Repeat("the", n),
      Letters(rng, n, "ab"),
      Repeat(" ", n),
      Repeat("\n", n / 8) + Repeat(" \t", n / 8) + Repeat("\r\n", n / 8) + "x" + Repeat(" ", n / 8),
      Repeat("0123456789", n) + " 3.14159 1e10 -42",
      Repeat("中", n),
      Repeat("🙂", n),
      RandomText(rng, n / 3, {{0x4E00, 0x9FFF}, {0x3040, 0x30FF}, {' ', ' '}}),
      RandomText(rng, n / 3, {{0x1F300, 0x1F64F}, {0xE0, 0xFF}, {0x370, 0x3FF}, {' ', ' '}}),
      "émoji 🙂 中文 café naïve Ελληνικά русский عربى",
      RandomBytes(rng, n),
      RandomBytes(rng, n),
      Repeat("\xE4\xB8", n) + "\xF0\x9F\x99" + "\xC3", // truncated sequences
  };
  // Random words of random lengths, and their separators.
  std::string words;
  while (words.size() < n) {
    words += Letters(rng, 1 + rng() % 24, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
    words += " \n\t.,'"[rng() % 6];
  }
  in.push_back(words);
  return in;
}

// Special-token text: whole, truncated and inside words.
std::vector<std::string> SpecialTexts(const Tokenizer &t) {
  std::vector<std::string> in;
  for (size_t id = 0; id < t.vocab_size(); ++id) {
    const int32_t type = t.data().token_types[id];
    if (type != 3 && type != 4)
      continue;
    const std::string &s = t.data().tokens[id];
    in.push_back("x" + s + "y" + s + s + " " + s.substr(0, s.size() / 2) + "z" + s);
  }
  return in;
}

void ExpectSameIds(const Tokenizer &t, const QuadraticTokenizer &oracle, const std::string &text) {
  const Ids want = oracle.Encode(text, true);
  ASSERT_EQ(t.Encode(text, true), want) << text.size() << " bytes: '" << text.substr(0, 60) << "'";
  // The bound, at its edge: exactly as many ids fits; one fewer is refused.
  EXPECT_EQ(t.Encode(text, true, want.size()), want);
  if (!want.empty()) {
    EXPECT_THROW(t.Encode(text, true, want.size() - 1), TokenLimitExceeded);
  }
}

Tokenizer ModelTokenizer() {
  auto f = GgufFile::Open(DefaultModelPath());
  return Tokenizer::FromGguf(*f);
}

// --- the default model's byte-level BPE --------------------------------------------------------

TEST(TokenizerOracle, ModelBpeMatchesTheQuadraticMerges) {
  PIG_REQUIRE_MODEL();
  const Tokenizer t = ModelTokenizer();
  const QuadraticTokenizer oracle(t.data());
  const std::string gpl = Gpl3();
  ASSERT_GT(gpl.size(), 30000u) << "the test text /usr/share/common-licenses/GPL-3 (base-files)";
  ExpectSameIds(t, oracle, gpl);
  for (const std::string &text : Inputs(4096))
    ExpectSameIds(t, oracle, text);
  for (const std::string &text : SpecialTexts(t))
    ExpectSameIds(t, oracle, text);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kLongWord = 1 << 16; // the sanitizers' Debug build looks for memory errors
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr size_t kLongWord = 1 << 16;
#else
constexpr size_t kLongWord = 1 << 20;
#endif
#else
constexpr size_t kLongWord = 1 << 20;
#endif

// A word of a million letters, with no oracle: whole, and its bytes back. Encoding it took
// 0.6-1.2 s in a Release build on 2 busy cores, the quadratic merges 420 s.
TEST(TokenizerOracle, MillionLetterWord) {
  PIG_REQUIRE_MODEL();
  const Tokenizer t = ModelTokenizer();
  std::mt19937 rng(1);
  const std::string word = Letters(rng, kLongWord, "abcdefghijklmnopqrstuvwxyz");
  const Ids ids = t.Encode(word, false);
  EXPECT_GT(ids.size(), word.size() / 8);
  EXPECT_EQ(t.Decode(ids), word);
}

// --- SentencePiece: a vocabulary made of the model's, scores in few values (many ties) --------

TEST(TokenizerOracle, SentencePieceMatchesTheQuadraticMerges) {
  PIG_REQUIRE_MODEL();
  const Tokenizer model = ModelTokenizer();
  TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {2, 3, 3};
  d.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    static const char *kHex = "0123456789ABCDEF";
    d.tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    d.token_types.push_back(6);
    d.scores.push_back(0);
  }
  for (size_t id = 0; id < model.vocab_size(); ++id) {
    if (model.IsControl(int32_t(id)))
      continue;
    std::string piece;
    for (char c : model.Decode(int32_t(id)))
      piece += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    d.tokens.push_back(piece);
    d.token_types.push_back(1);
    d.scores.push_back(-float(id / 512)); // earlier merges score higher; 512 share each score
  }
  d.bos_id = 1;
  d.eos_id = 2;
  d.unk_id = 0;
  d.add_bos = true;
  const Tokenizer t(d);
  const QuadraticTokenizer oracle(d);
  // A SentencePiece segment is one sequence (no pre-tokenizer): the oracle is quadratic in the
  // whole text, so the text stays short.
  ExpectSameIds(t, oracle, Gpl3().substr(0, 1500));
  for (const std::string &text : Inputs(512))
    ExpectSameIds(t, oracle, text);
  ExpectSameIds(t, oracle, "a</s>b<s> </s>");
}

// --- random vocabularies, merge lists in any order ---------------------------------------------

// Merges whose order no trained vocabulary would have ("ab a" ranked before "a b", the merge
// that makes "ab") show that pairs born during a round wait for it to end: every "a b" merges,
// then no "ab ab" exists.
TEST(TokenizerOracle, PairsBornInARoundWaitForItsEnd) {
  TokenizerData d;
  d.tokens = {"a", "b", "ab", "aba"};
  d.merges = {"ab a", "a b"};
  const Tokenizer t(d);
  EXPECT_EQ(t.Encode("abab", false), (Ids{2, 2}));
  EXPECT_EQ(t.Encode("abab", false), QuadraticTokenizer(d).Encode("abab", false));
}

// Random byte-level vocabularies over a few letters: random merges of random earlier tokens, the
// list shuffled (ranks in any order), some merged tokens missing from the vocabulary (byte
// fallback to <unk>).
TEST(TokenizerOracle, RandomBpeVocabularies) {
  std::mt19937 rng(4747);
  for (int trial = 0; trial < 60; ++trial) {
    TokenizerData d;
    d.tokens = {"<unk>", "a", "b", "c", "\xC4\xA0"}; // Ġ: the space byte
    d.unk_id = 0;
    std::vector<std::string> made = {"a", "b", "c", "\xC4\xA0"};
    for (int m = 0; m < 40; ++m) {
      const std::string l = made[rng() % made.size()], r = made[rng() % made.size()];
      if (std::find(made.begin(), made.end(), l + r) != made.end())
        continue;
      d.merges.push_back(l + " " + r);
      made.push_back(l + r);
      if (rng() % 8)
        d.tokens.push_back(l + r);
    }
    if (trial % 2)
      std::shuffle(d.merges.begin(), d.merges.end(), rng);
    const Tokenizer t(d);
    const QuadraticTokenizer oracle(d);
    for (int k = 0; k < 20; ++k) {
      const std::string text = Letters(rng, 1 + rng() % 300, trial % 3 ? "abc" : "aab ");
      ASSERT_EQ(t.Encode(text, false), oracle.Encode(text, false)) << trial << " '" << text << "'";
    }
  }
}

// Random SentencePiece vocabularies: every string of up to 4 letters, scores from 3 values.
TEST(TokenizerOracle, RandomSentencePieceVocabularies) {
  std::mt19937 rng(74);
  for (int trial = 0; trial < 40; ++trial) {
    TokenizerData d;
    d.model = "llama";
    d.tokens = {"<unk>"};
    d.token_types = {2};
    d.scores = {0};
    d.unk_id = 0;
    d.add_space_prefix = trial % 2;
    const std::string alphabet[] = {"a", "b", "\xE2\x96\x81", "\xC3\xA9"}; // a b ▁ é
    std::vector<std::string> level = {""};
    for (int len = 1; len <= 4; ++len) {
      std::vector<std::string> next;
      for (const std::string &s : level)
        for (const std::string &c : alphabet)
          next.push_back(s + c);
      for (const std::string &s : next) {
        if (len > 1 && rng() % 3 == 0)
          continue;
        d.tokens.push_back(s);
        d.token_types.push_back(1);
        const float kScores[] = {-1.0f, -2.0f, -2.0f, -3.0f, -1e31f}; // -1e31 never merges
        d.scores.push_back(kScores[rng() % 5]);
      }
      level = std::move(next);
    }
    const Tokenizer t(d);
    const QuadraticTokenizer oracle(d);
    for (int k = 0; k < 20; ++k) {
      const std::string text =
          RandomText(rng, 1 + rng() % 200, {{'a', 'b'}, {' ', ' '}, {0xE9, 0xE9}, {'z', 'z'}});
      ASSERT_EQ(t.Encode(text, true), oracle.Encode(text, true)) << trial << " '" << text << "'";
    }
  }
}

} // namespace
} // namespace pig::runtime
