#include "pig/runtime/tokenizer.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

#include "pig/runtime/gguf.h"

namespace pig::runtime {
namespace {

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
struct Utf8Text {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs; // byte offset of each code point, plus the end
};

Utf8Text DecodeUtf8(std::string_view s) {
  Utf8Text t;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    uint32_t cp = 0xFFFD;
    if (c < 0x80) {
      cp = c;
    } else {
      const size_t want = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (want && i + want <= s.size()) {
        uint32_t v = c & (0x7F >> want);
        bool ok = true;
        for (size_t k = 1; k < want; ++k) {
          const auto cc = static_cast<unsigned char>(s[i + k]);
          if ((cc & 0xC0) != 0x80)
            ok = false;
          v = v << 6 | (cc & 0x3F);
        }
        if (ok)
          cp = v, len = want;
      }
    }
    t.cps.push_back(cp);
    t.offs.push_back(i);
    i += len;
  }
  t.offs.push_back(s.size());
  return t;
}

void AppendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18);
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
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
    const int32_t type = data_.token_types[i];
    if ((type == 3 || type == 4) && !data_.tokens[i].empty())
      specials_.push_back(data_.tokens[i]);
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
  std::vector<int32_t> out;
  if (add_bos && data_.add_bos && data_.bos_id >= 0)
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
      EncodeSegment(text.substr(seg, i - seg), out);
    }
    out.push_back(vocab_.at(*hit));
    i += hit->size();
    seg = i;
  }
  if (seg < text.size()) {
    EncodeSegment(text.substr(seg), out);
  }
  return out;
}

void Tokenizer::EncodeSegment(std::string_view text, std::vector<int32_t> &out) const {
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
    return;
  }
  for (std::string_view word : PreTokenize(text, data_.pre))
    BpeWord(word, out);
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

void Tokenizer::BpeWord(std::string_view word, std::vector<int32_t> &out) const {
  std::vector<std::string> sym;
  sym.reserve(word.size());
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
    next.reserve(sym.size());
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
    // Not in the vocabulary: fall back to its bytes.
    const Utf8Text t = DecodeUtf8(s);
    for (uint32_t cp : t.cps) {
      auto b = unicode_to_byte_.find(cp);
      PushByteFallback(b != unicode_to_byte_.end() ? b->second : 0, out);
    }
  }
}

void Tokenizer::SpmEncode(std::string_view text, std::vector<int32_t> &out) const {
  std::string escaped;
  for (char c : text) {
    if (c == ' ') {
      escaped += "\xE2\x96\x81"; // U+2581
    } else {
      escaped += c;
    }
  }
  const Utf8Text t = DecodeUtf8(escaped);
  std::vector<std::string> sym;
  for (size_t i = 0; i < t.cps.size(); ++i) {
    sym.emplace_back(escaped.substr(t.offs[i], t.offs[i + 1] - t.offs[i]));
  }
  // Greedy: merge the adjacent pair whose union has the highest score, leftmost on ties.
  while (sym.size() > 1) {
    float best = -1e30f;
    size_t best_i = SIZE_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = vocab_.find(sym[i] + sym[i + 1]);
      if (it != vocab_.end() && data_.scores[it->second] > best) {
        best = data_.scores[it->second];
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
  const std::vector<ChatPiece> pieces = RenderChat(messages, add_generation_prompt);
  std::vector<int32_t> out;
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
      EncodeSegment(segment, out);
    segment.clear();
    const auto it = vocab_.find(std::string(piece.text));
    if (it == vocab_.end())
      throw std::runtime_error("the chat template's token " + std::string(piece.text) +
                               " is not in the vocabulary");
    out.push_back(it->second);
  }
  if (!segment.empty())
    EncodeSegment(segment, out);
  return out;
}

} // namespace pig::runtime
