#include "pig/runtime/tokenizer.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "pig/runtime/gguf.h"
#include "utf8.h"

namespace pig::runtime {
namespace {

using utf8::AppendUtf8;
using utf8::DecodeUtf8;
using utf8::Utf8Text;

struct CodepointRange {
  uint32_t lo, hi;
};
#include "unicode_tables.inc"

template <size_t N> bool InRanges(const CodepointRange (&r)[N], uint32_t cp) {
  const auto *it = std::upper_bound(std::begin(r), std::end(r), cp,
                                    [](uint32_t c, const CodepointRange &x) { return c < x.lo; });
  return it != std::begin(r) && cp <= (it - 1)->hi;
}

bool IsLetter(uint32_t cp) {
  if (cp < 0x80)
    return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, cp);
}
bool IsNumber(uint32_t cp) {
  if (cp < 0x80)
    return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, cp);
}
// Unicode White_Space (what \s means in the tokenizers' regex engines).
bool IsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}
bool IsOther(uint32_t cp) { return !IsSpace(cp) && !IsLetter(cp) && !IsNumber(cp); }
bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Decodes UTF-8 leniently: an invalid byte becomes one code point U+FFFD of length 1, so that
// every byte of the input still ends up in exactly one pre-token.
// Code points in valid UTF-8 (the bytes that do not continue a sequence).
size_t CodePoints(std::string_view s) {
  return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// The whitespace alternatives shared by all rule sets: \s+(?!\S)|\s+
size_t MatchSpaces(const std::vector<uint32_t> &c, size_t i, size_t e) {
  size_t r = i;
  while (r < e && IsSpace(c[r]))
    ++r;
  if (r == e)
    return e;
  return r - 1 > i ? r - 1 : r;
}

template <typename Pred> size_t Run(const std::vector<uint32_t> &c, size_t i, size_t e, Pred p) {
  while (i < e && p(c[i]))
    ++i;
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d (optionally case-insensitive); returns i when none matches.
size_t MatchContraction(const std::vector<uint32_t> &c, size_t i, size_t e, bool icase) {
  if (c[i] != '\'' || i + 1 >= e)
    return i;
  auto lower = [&](size_t k) { return icase && c[k] < 0x80 ? (c[k] | 0x20) : c[k]; };
  const uint32_t a = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return i + 2;
  if (i + 2 < e) {
    const uint32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
      return i + 3;
  }
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t MatchGpt2(const std::vector<uint32_t> &c, size_t i, size_t e) {
  if (size_t j = MatchContraction(c, i, e, false); j != i)
    return j;
  const size_t k = i + (c[i] == ' ' ? 1 : 0);
  if (k < e) {
    if (IsLetter(c[k]))
      return Run(c, k, e, IsLetter);
    if (IsNumber(c[k]))
      return Run(c, k, e, IsNumber);
    if (IsOther(c[k]))
      return Run(c, k, e, IsOther);
  }
  return MatchSpaces(c, i, e);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2: \p{N} instead of \p{N}{1,3})
size_t MatchLlama3(const std::vector<uint32_t> &c, size_t i, size_t e, size_t max_digits) {
  if (size_t j = MatchContraction(c, i, e, true); j != i)
    return j;
  if (IsLetter(c[i]))
    return Run(c, i, e, IsLetter);
  if (!IsNewline(c[i]) && !IsNumber(c[i]) && i + 1 < e && IsLetter(c[i + 1])) {
    return Run(c, i + 1, e, IsLetter);
  }
  if (IsNumber(c[i])) {
    size_t j = i;
    while (j < e && j - i < max_digits && IsNumber(c[j]))
      ++j;
    return j;
  }
  const size_t k = i + (c[i] == ' ' ? 1 : 0);
  if (k < e && IsOther(c[k]))
    return Run(c, Run(c, k, e, IsOther), e, IsNewline);
  // \s*[\r\n]+ : up to the end of the last newline inside this whitespace run.
  const size_t r = Run(c, i, e, IsSpace);
  for (size_t p = r; p > i; --p) {
    if (IsNewline(c[p - 1]))
      return p;
  }
  return MatchSpaces(c, i, e);
}

void PreTokenizeRange(const Utf8Text &t, size_t b, size_t e, PreTokenizer pre,
                      std::string_view text, std::vector<std::string_view> &out) {
  size_t i = b;
  while (i < e) {
    size_t j;
    switch (pre) {
    case PreTokenizer::kLlama3:
      j = MatchLlama3(t.cps, i, e, 3);
      break;
    case PreTokenizer::kQwen2:
      j = MatchLlama3(t.cps, i, e, 1);
      break;
    default:
      j = MatchGpt2(t.cps, i, e);
      break;
    }
    if (j <= i)
      j = i + 1; // cannot happen; guarantees progress
    out.push_back(text.substr(t.offs[i], t.offs[j] - t.offs[i]));
    i = j;
  }
}

// The tokenizer.ggml.pre names each set of rules answers to ("default" is an absent key).
constexpr struct {
  std::string_view name;
  PreTokenizer pre;
} kPreTokenizerNames[] = {
    {"default", PreTokenizer::kGpt2},    {"gpt2", PreTokenizer::kGpt2},
    {"gpt-2", PreTokenizer::kGpt2},      {"smollm", PreTokenizer::kSmolLM},
    {"llama3", PreTokenizer::kLlama3},   {"llama-bpe", PreTokenizer::kLlama3},
    {"llama-v3", PreTokenizer::kLlama3}, {"qwen2", PreTokenizer::kQwen2},
};

} // namespace

// An unknown name is refused rather than read as GPT-2's rules: a model whose pre-tokenizer
// splits differently (digits, contractions, CJK) would load and then tokenize its prompts
// wrongly without a word.
PreTokenizer PreTokenizerFromName(std::string_view name) {
  for (const auto &n : kPreTokenizerNames)
    if (n.name == name)
      return n.pre;
  std::string known;
  for (const auto &n : kPreTokenizerNames)
    known += (known.empty() ? "" : ", ") + std::string(n.name);
  throw std::invalid_argument("unknown pre-tokenizer '" + std::string(name) +
                              "' (tokenizer.ggml.pre); known: " + known);
}

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizer pre) {
  const Utf8Text t = DecodeUtf8(text);
  std::vector<std::string_view> out;
  const size_t n = t.cps.size();
  if (pre != PreTokenizer::kSmolLM) {
    PreTokenizeRange(t, 0, n, pre, text, out);
    return out;
  }
  // SmolLM2: every number character is isolated first (Digits(individual_digits=true)), then
  // the GPT-2 rules apply to the pieces in between.
  size_t b = 0;
  for (size_t i = 0; i < n; ++i) {
    if (IsNumber(t.cps[i])) {
      PreTokenizeRange(t, b, i, PreTokenizer::kGpt2, text, out);
      out.push_back(text.substr(t.offs[i], t.offs[i + 1] - t.offs[i]));
      b = i + 1;
    }
  }
  PreTokenizeRange(t, b, n, PreTokenizer::kGpt2, text, out);
  return out;
}

Tokenizer::Tokenizer(TokenizerData data) : data_(std::move(data)) {
  if (data_.model != "gpt2" && data_.model != "llama") {
    throw std::runtime_error("unsupported tokenizer model '" + data_.model +
                             "' (pig knows gpt2 byte-level BPE and llama SentencePiece)");
  }
  if (data_.tokens.empty())
    throw std::runtime_error("tokenizer has an empty vocabulary");
  data_.token_types.resize(data_.tokens.size(), 1);
  for (size_t i = 0; i < data_.tokens.size(); ++i) {
    vocab_.emplace(data_.tokens[i], int32_t(i));
    const std::string &tok = data_.tokens[i];
    const int32_t type = data_.token_types[i];
    const bool special = (type == 3 || type == 4) && !tok.empty();
    if (special)
      specials_.push_back(tok);
    // The most text bytes one id stands for (a byte without a token falls back to one id): a
    // special matched in the text, its bytes; a byte-level token, one byte per code point (a
    // 162-byte SmolLM2 token is 81 bytes of text); a SentencePiece token, at most its bytes
    // (U+2581 is 3 bytes for 1).
    const size_t text_bytes = special || data_.model == "llama" ? tok.size() : CodePoints(tok);
    max_token_bytes_ = std::max(max_token_bytes_, text_bytes);
  }
  std::sort(specials_.begin(), specials_.end(),
            [](const std::string &a, const std::string &b) { return a.size() > b.size(); });
  for (const auto &s : specials_)
    special_first_[static_cast<unsigned char>(s[0])] = true;
  for (size_t r = 0; r < data_.merges.size(); ++r)
    merge_rank_.emplace(data_.merges[r], int32_t(r));
  if (data_.model == "llama" && data_.scores.size() != data_.tokens.size()) {
    throw std::runtime_error("SentencePiece tokenizer needs one score per token");
  }

  // GPT-2's reversible byte <-> printable code point mapping.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
    AppendUtf8(byte_to_unicode_[b], cp);
    unicode_to_byte_[cp] = uint8_t(b);
  }

  const std::string &tpl = data_.chat_template;
  if (tpl.find("<|im_start|>") != std::string::npos) {
    chat_format_ = ChatFormat::kChatML;
    const std::string key = "<|im_start|>system\n";
    const size_t p = tpl.find(key);
    if (p != std::string::npos) {
      const size_t q = tpl.find("<|im_end|>", p);
      const std::string sys = tpl.substr(p + key.size(), q - p - key.size());
      if (q != std::string::npos && sys.find_first_of("{}'+") == std::string::npos) {
        default_system_ = sys;
      }
    }
  } else if (tpl.find("<|start_header_id|>") != std::string::npos) {
    chat_format_ = ChatFormat::kLlama3;
  } else if (tpl.find("[INST]") != std::string::npos) {
    chat_format_ = ChatFormat::kLlama2;
  }
  if (data_.eot_id < 0) {
    auto it = vocab_.find(chat_format_ == ChatFormat::kLlama3 ? "<|eot_id|>" : "<|im_end|>");
    if (it != vocab_.end() && chat_format_ != ChatFormat::kNone)
      data_.eot_id = it->second;
  }
}

Tokenizer Tokenizer::FromGguf(const GgufFile &f) {
  TokenizerData d;
  d.model = std::string(f.GetString("tokenizer.ggml.model"));
  // Only byte-level BPE splits the text first; SentencePiece ("llama") ignores the key.
  if (d.model != "llama") {
    try {
      d.pre = PreTokenizerFromName(f.GetString("tokenizer.ggml.pre", "default"));
    } catch (const std::invalid_argument &e) {
      throw GgufError(f.path() + ": " + e.what());
    }
  }
  for (auto s : f.GetStringArray("tokenizer.ggml.tokens"))
    d.tokens.emplace_back(s);
  if (f.Find("tokenizer.ggml.token_type")) {
    for (int64_t t : f.GetIntArray("tokenizer.ggml.token_type"))
      d.token_types.push_back(int32_t(t));
  }
  if (f.Find("tokenizer.ggml.scores"))
    d.scores = f.GetFloatArray("tokenizer.ggml.scores");
  if (f.Find("tokenizer.ggml.merges")) {
    for (auto s : f.GetStringArray("tokenizer.ggml.merges"))
      d.merges.emplace_back(s);
  }
  const auto n = int64_t(d.tokens.size());
  auto id = [&](std::string_view key) -> int32_t {
    const uint64_t v = f.GetUint(key, uint64_t(-1));
    if (v == uint64_t(-1))
      return -1;
    if (int64_t(v) >= n)
      throw GgufError(f.path() + ": " + std::string(key) + " out of range");
    return int32_t(v);
  };
  d.bos_id = id("tokenizer.ggml.bos_token_id");
  d.eos_id = id("tokenizer.ggml.eos_token_id");
  d.unk_id = id("tokenizer.ggml.unknown_token_id");
  d.eot_id = id("tokenizer.ggml.eot_token_id");
  auto flag = [&](std::string_view key, bool fallback) {
    const GgufValue *v = f.Find(key);
    return v && v->type == GgufValueType::kBool ? std::get<bool>(v->scalar) : fallback;
  };
  d.add_bos = flag("tokenizer.ggml.add_bos_token", d.model == "llama");
  d.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
  d.chat_template = std::string(f.GetString("tokenizer.chat_template", ""));
  return Tokenizer(std::move(d));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  return Encode(text, add_bos, SIZE_MAX);
}

void Tokenizer::CheckFits(size_t bytes, size_t extra, size_t max_tokens) const {
  // Every byte of the text ends up in exactly one id, and no id stands for more than
  // max_token_bytes_ of them, so the ids number at least extra + ceil(bytes / max_token_bytes_).
  const size_t at_least = extra + bytes / max_token_bytes_ + (bytes % max_token_bytes_ != 0);
  if (at_least > max_tokens)
    throw TokenLimitExceeded(max_tokens);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       size_t max_tokens) const {
  std::vector<int32_t> out;
  const bool bos = add_bos && data_.add_bos && data_.bos_id >= 0;
  // Text far past the limit is refused before the scan for specials and the pre-tokenizer see
  // it: what follows is linear in the text, or n log n in a word, within that bound.
  CheckFits(text.size(), bos ? 1 : 0, max_tokens);
  if (bos)
    out.push_back(data_.bos_id);
  size_t seg = 0, i = 0;
  while (i < text.size()) {
    const std::string *hit = nullptr;
    if (special_first_[static_cast<unsigned char>(text[i])]) {
      for (const auto &s : specials_) {
        if (text.compare(i, s.size(), s) == 0) {
          hit = &s;
          break;
        }
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > seg) {
      EncodeSegment(text.substr(seg, i - seg), out, max_tokens);
    }
    out.push_back(vocab_.at(*hit));
    if (out.size() > max_tokens)
      throw TokenLimitExceeded(max_tokens);
    i += hit->size();
    seg = i;
  }
  if (seg < text.size()) {
    EncodeSegment(text.substr(seg), out, max_tokens);
  }
  return out;
}

void Tokenizer::EncodeSegment(std::string_view text, std::vector<int32_t> &out,
                              size_t max_tokens) const {
  if (data_.model == "llama") {
    // Every raw-text segment (the first, and each after a special token) gets the dummy
    // prefix, as llama.cpp does for SentencePiece vocabularies.
    if (data_.add_space_prefix) {
      std::string t = " ";
      t += text;
      SpmEncode(t, out);
    } else {
      SpmEncode(text, out);
    }
  } else {
    for (std::string_view word : PreTokenize(text, data_.pre)) {
      BpeWord(word, out);
      if (out.size() > max_tokens)
        throw TokenLimitExceeded(max_tokens);
    }
  }
  if (out.size() > max_tokens)
    throw TokenLimitExceeded(max_tokens);
}

void Tokenizer::PushByteFallback(unsigned char byte, std::vector<int32_t> &out) const {
  static const char *kHex = "0123456789ABCDEF";
  std::string name = "<0x";
  name += kHex[byte >> 4];
  name += kHex[byte & 15];
  name += '>';
  auto it = vocab_.find(name);
  if (it != vocab_.end()) {
    out.push_back(it->second);
  } else if (data_.unk_id >= 0) {
    out.push_back(data_.unk_id);
  } else {
    throw std::runtime_error("byte " + std::to_string(byte) + " has no token and no <unk>");
  }
}

namespace {

// The symbols of one word while its adjacent pairs merge, each a run of the word's units (bytes
// or, for SentencePiece, bytes of whole code points). A symbol is named by the index of its first
// unit and never moves: merging a pair grows the left symbol over the right one, which dies
// (size 0). The next symbol starts where one ends; prev links the other way.
struct MergeSymbols {
  static constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> size, prev;

  size_t next(size_t i) const { return i + size[i] < size.size() ? i + size[i] : kNone; }
  void Merge(size_t left) {
    const size_t right = left + size[left];
    size[left] += size[right];
    size[right] = 0;
    if (const size_t n = next(left); n != kNone)
      prev[n] = left;
  }
};

// A pair that may merge, as it was when queued: the heap keeps stale pairs and drops them when
// they surface (lazy invalidation) rather than search for them. A symbol only grows until it
// dies, so a pair is still current exactly when both its symbols have the sizes recorded here.
template <typename Priority> struct MergeCandidate {
  Priority priority; // lower merges first
  size_t left, left_size, right_size;

  bool Current(const MergeSymbols &s) const {
    return s.size[left] == left_size && s.size[left + left_size] == right_size;
  }
  // Ties merge leftmost first, as the scans that these heaps replaced did.
  bool operator>(const MergeCandidate &o) const {
    return priority != o.priority ? o.priority < priority : left > o.left;
  }
};

template <typename C> void PushCandidate(std::vector<C> &heap, C c) {
  heap.push_back(c);
  std::push_heap(heap.begin(), heap.end(), std::greater<C>());
}
template <typename C> C PopCandidate(std::vector<C> &heap) {
  std::pop_heap(heap.begin(), heap.end(), std::greater<C>());
  C c = heap.back();
  heap.pop_back();
  return c;
}

} // namespace

// Byte-level BPE: the lowest-ranked pair merges, at every place it occurs, left to right without
// overlap; then the lowest-ranked pair of the result, until no pair is a merge. A heap of the
// pairs by (rank, position) makes a word O(n log n) where rescanning it per merge was O(n^2)
// (a 64k-letter word took 10 s). Pairs a round creates wait for the round's end, as they did
// when the whole word was rescanned: in a merge list where "ab c" ranks before "a b" the order
// decides the result.
void Tokenizer::BpeWord(std::string_view word, std::vector<int32_t> &out) const {
  const size_t n = word.size();
  // The word in GPT-2's printable code points; byte i is mapped[at[i], at[i + 1]).
  std::string mapped;
  std::vector<size_t> at(n + 1);
  for (size_t i = 0; i < n; ++i) {
    at[i] = mapped.size();
    mapped += byte_to_unicode_[static_cast<unsigned char>(word[i])];
  }
  at[n] = mapped.size();
  MergeSymbols sym{std::vector<size_t>(n, 1), std::vector<size_t>(n)};
  for (size_t i = 0; i < n; ++i)
    sym.prev[i] = i == 0 ? MergeSymbols::kNone : i - 1;

  using Candidate = MergeCandidate<int32_t>;
  std::vector<Candidate> heap;
  std::string key;
  auto queue = [&](size_t left) {
    if (left == MergeSymbols::kNone)
      return;
    const size_t right = sym.next(left);
    if (right == MergeSymbols::kNone)
      return;
    const size_t end = right + sym.size[right];
    key.assign(mapped, at[left], at[right] - at[left]).append(" ");
    key.append(mapped, at[right], at[end] - at[right]);
    if (auto it = merge_rank_.find(key); it != merge_rank_.end())
      PushCandidate(heap, Candidate{it->second, left, sym.size[left], sym.size[right]});
  };
  for (size_t i = 0; i + 1 < n; ++i)
    queue(i);
  std::vector<size_t> merged;
  while (!heap.empty()) {
    const Candidate first = PopCandidate(heap);
    if (!first.Current(sym))
      continue;
    // One round: every current place of this pair, leftmost first. A place that an earlier
    // merge of the round overlapped is no longer current (its left symbol died).
    merged.clear();
    sym.Merge(first.left);
    merged.push_back(first.left);
    while (!heap.empty() && heap.front().priority == first.priority) {
      const Candidate c = PopCandidate(heap);
      if (c.Current(sym)) {
        sym.Merge(c.left);
        merged.push_back(c.left);
      }
    }
    for (size_t m : merged) {
      queue(sym.prev[m]);
      queue(m);
    }
  }
  for (size_t i = 0; i < n; i += sym.size[i]) {
    key.assign(mapped, at[i], at[i + sym.size[i]] - at[i]);
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Not in the vocabulary: fall back to its bytes.
    for (size_t k = i; k < i + sym.size[i]; ++k)
      PushByteFallback(static_cast<unsigned char>(word[k]), out);
  }
}

// SentencePiece-style BPE: the adjacent pair whose union has the highest score merges, leftmost
// on ties, one at a time; from a heap of pairs by (-score, position), O(n log n).
void Tokenizer::SpmEncode(std::string_view text, std::vector<int32_t> &out) const {
  std::string escaped;
  for (char c : text) {
    if (c == ' ') {
      escaped += "\xE2\x96\x81"; // U+2581
    } else {
      escaped += c;
    }
  }
  // Symbols start as code points (an invalid byte is one), named by their first byte; the
  // bytes inside a code point are never a symbol's start.
  const Utf8Text t = DecodeUtf8(escaped);
  MergeSymbols sym{std::vector<size_t>(escaped.size(), 0), std::vector<size_t>(escaped.size())};
  for (size_t i = 0; i < t.cps.size(); ++i) {
    sym.size[t.offs[i]] = t.offs[i + 1] - t.offs[i];
    sym.prev[t.offs[i]] = i == 0 ? MergeSymbols::kNone : t.offs[i - 1];
  }

  using Candidate = MergeCandidate<float>;
  std::vector<Candidate> heap;
  std::string key;
  auto queue = [&](size_t left) {
    if (left == MergeSymbols::kNone)
      return;
    const size_t right = sym.next(left);
    if (right == MergeSymbols::kNone)
      return;
    key.assign(escaped, left, sym.size[left] + sym.size[right]);
    auto it = vocab_.find(key);
    // Only a score above -1e30 ever merged (the scan's starting best); NaN never did.
    if (it == vocab_.end() || !(data_.scores[it->second] > -1e30f))
      return;
    PushCandidate(heap,
                  Candidate{-data_.scores[it->second], left, sym.size[left], sym.size[right]});
  };
  if (!escaped.empty()) {
    for (size_t i = 0; sym.next(i) != MergeSymbols::kNone; i = sym.next(i))
      queue(i);
  }
  while (!heap.empty()) {
    const Candidate c = PopCandidate(heap);
    if (!c.Current(sym))
      continue;
    sym.Merge(c.left);
    queue(sym.prev[c.left]);
    queue(c.left);
  }
  for (size_t i = 0; i < escaped.size(); i += sym.size[i]) {
    const std::string s = escaped.substr(i, sym.size[i]);
    auto it = vocab_.find(s);
    if (it != vocab_.end()) {
      out.push_back(it->second);
    } else {
      for (unsigned char b : s)
        PushByteFallback(b, out);
    }
  }
}

std::string Tokenizer::Decode(int32_t id) const {
  if (id < 0 || size_t(id) >= data_.tokens.size())
    return "";
  const std::string &tok = data_.tokens[id];
  const int32_t type = data_.token_types[id];
  if (type == 3 || type == 4)
    return tok;
  if (data_.model == "llama") {
    if (type == 6 && tok.size() == 6 && tok.rfind("<0x", 0) == 0) {
      return std::string(1, char(std::stoi(tok.substr(3, 2), nullptr, 16)));
    }
    std::string s;
    for (size_t i = 0; i < tok.size();) {
      if (tok.compare(i, 3, "\xE2\x96\x81") == 0) {
        s += ' ';
        i += 3;
      } else {
        s += tok[i++];
      }
    }
    return s;
  }
  std::string s;
  const Utf8Text t = DecodeUtf8(tok);
  for (size_t i = 0; i < t.cps.size(); ++i) {
    auto it = unicode_to_byte_.find(t.cps[i]);
    if (it != unicode_to_byte_.end()) {
      s += char(it->second);
    } else {
      s.append(tok, t.offs[i], t.offs[i + 1] - t.offs[i]);
    }
  }
  return s;
}

std::string Tokenizer::Decode(const std::vector<int32_t> &ids) const {
  std::string s;
  for (int32_t id : ids)
    s += Decode(id);
  return s;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id == data_.eos_id || (data_.eot_id >= 0 && id == data_.eot_id);
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && size_t(id) < data_.token_types.size() && data_.token_types[id] == 3;
}

std::vector<Tokenizer::ChatPiece> Tokenizer::RenderChat(const std::vector<ChatMessage> &messages,
                                                        bool add_generation_prompt) const {
  if (chat_format_ == ChatFormat::kNone)
    throw std::runtime_error("this model has no chat template that pig recognises "
                             "(ChatML, Llama 3 or Llama 2)");
  if (messages.empty())
    throw std::invalid_argument("chat: no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string &r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      throw std::invalid_argument("chat: message " + std::to_string(i) + " has role '" + r +
                                  "' (system, user or assistant)");
  }
  std::vector<ChatPiece> p;
  auto text = [&](std::string_view t) { p.push_back({ChatPiece::kText, t}); };
  auto content = [&](const std::string &c) { p.push_back({ChatPiece::kContent, c}); };
  auto special = [&](std::string_view t) { p.push_back({ChatPiece::kSpecial, t}); };
  switch (chat_format_) {
  case ChatFormat::kChatML:
    if (messages[0].role != "system" && !default_system_.empty()) {
      special("<|im_start|>");
      text("system\n");
      text(default_system_);
      special("<|im_end|>");
      text("\n");
    }
    for (const ChatMessage &m : messages) {
      special("<|im_start|>");
      text(m.role);
      text("\n");
      content(m.content);
      special("<|im_end|>");
      text("\n");
    }
    if (add_generation_prompt) {
      special("<|im_start|>");
      text("assistant\n");
    }
    return p;
  case ChatFormat::kLlama3:
    for (const ChatMessage &m : messages) {
      special("<|start_header_id|>");
      text(m.role);
      special("<|end_header_id|>");
      text("\n\n");
      content(m.content);
      special("<|eot_id|>");
    }
    if (add_generation_prompt) {
      special("<|start_header_id|>");
      text("assistant");
      special("<|end_header_id|>");
      text("\n\n");
    }
    return p;
  case ChatFormat::kLlama2: {
    // [INST] (system folded into the first turn) user [/INST] assistant </s><s>[INST] ...; the
    // first turn's BOS is the one Encode adds.
    size_t i = 0;
    const std::string *system = nullptr;
    if (messages[0].role == "system")
      system = &messages[i++].content;
    if (i == messages.size())
      throw std::invalid_argument("chat (Llama 2 template): a system message needs a user message "
                                  "after it");
    for (bool first = true; i < messages.size(); first = false) {
      if (messages[i].role != "user")
        throw std::invalid_argument(
            "chat (Llama 2 template): message " + std::to_string(i) + " is a " + messages[i].role +
            " message where a user message must be (an optional system message first, then user "
            "and assistant alternating)");
      if (!first)
        special("<s>");
      text("[INST] ");
      if (first && system) {
        text("<<SYS>>\n");
        content(*system);
        text("\n<</SYS>>\n\n");
      }
      content(messages[i++].content);
      text(" [/INST]");
      if (i == messages.size())
        break;
      if (messages[i].role != "assistant")
        throw std::invalid_argument("chat (Llama 2 template): message " + std::to_string(i) +
                                    " is a " + messages[i].role +
                                    " message where an assistant message must be (user and "
                                    "assistant alternate)");
      text(" ");
      content(messages[i++].content);
      text(" ");
      special("</s>");
    }
    return p;
  }
  case ChatFormat::kNone:
    break;
  }
  return p;
}

std::string Tokenizer::ApplyChatTemplate(std::string_view msg) const {
  const std::vector<ChatMessage> messages{{"user", std::string(msg)}}; // outlives the pieces
  std::string s;
  for (const ChatPiece &piece : RenderChat(messages, true))
    s += piece.text;
  return s;
}

std::vector<int32_t> Tokenizer::EncodeChat(const std::vector<ChatMessage> &messages,
                                           bool add_generation_prompt) const {
  return EncodeChat(messages, add_generation_prompt, SIZE_MAX);
}

std::vector<int32_t> Tokenizer::EncodeChat(const std::vector<ChatMessage> &messages,
                                           bool add_generation_prompt, size_t max_tokens) const {
  const std::vector<ChatPiece> pieces = RenderChat(messages, add_generation_prompt);
  std::vector<int32_t> out;
  // Each markup token is one id, whatever its text; the rest is text.
  size_t ids = data_.add_bos && data_.bos_id >= 0 ? 1 : 0, bytes = 0;
  for (const ChatPiece &piece : pieces) {
    if (piece.kind == ChatPiece::kSpecial)
      ++ids;
    else
      bytes += piece.text.size();
  }
  CheckFits(bytes, ids, max_tokens);
  if (data_.add_bos && data_.bos_id >= 0)
    out.push_back(data_.bos_id);
  // Text and contents between two markup tokens are one segment, encoded without looking for
  // special tokens (Encode would split the segment at one).
  std::string segment;
  for (const ChatPiece &piece : pieces) {
    if (piece.kind != ChatPiece::kSpecial) {
      segment += piece.text;
      continue;
    }
    if (!segment.empty())
      EncodeSegment(segment, out, max_tokens);
    segment.clear();
    const auto it = vocab_.find(std::string(piece.text));
    if (it == vocab_.end())
      throw std::runtime_error("the chat template's token " + std::string(piece.text) +
                               " is not in the vocabulary");
    out.push_back(it->second);
    if (out.size() > max_tokens)
      throw TokenLimitExceeded(max_tokens);
  }
  if (!segment.empty())
    EncodeSegment(segment, out, max_tokens);
  return out;
}

} // namespace pig::runtime
