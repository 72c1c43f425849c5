// Tokenizer built from GGUF metadata (tokenizer.ggml.*):
//  - "gpt2": byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre
//    (GPT-2 / SmolLM2 with isolated digits / Llama 3 / Qwen2 rules);
//  - "llama": SentencePiece-style BPE over scores with byte fallback (Llama 2).
// Control tokens (token type 3) and user-defined tokens (type 4) written literally in the
// text are matched first and become their own ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pig::runtime {

class GgufFile;

enum class PreTokenizer { kGpt2, kSmolLM, kLlama3, kQwen2 };

struct TokenizerData {
  std::string model = "gpt2"; // "gpt2" or "llama"
  PreTokenizer pre = PreTokenizer::kGpt2;
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types; // 1 normal, 2 unknown, 3 control, 4 user defined, 6 byte
  std::vector<float> scores;        // SentencePiece only
  std::vector<std::string> merges;  // byte-level BPE only: "left right", by rank
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, eot_id = -1;
  bool add_bos = false;
  bool add_space_prefix = true; // SentencePiece only
  std::string chat_template;
};

// Chat formats recognised from tokenizer.chat_template.
enum class ChatFormat { kNone, kChatML, kLlama3, kLlama2 };

class Tokenizer {
public:
  explicit Tokenizer(TokenizerData data);
  static Tokenizer FromGguf(const GgufFile &file);

  // Text -> ids. Special tokens written in the text are recognised; BOS is prepended when the
  // model asks for it and `add_bos` is true.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = true) const;
  // One token's bytes (control tokens decode to their literal text).
  std::string Decode(int32_t id) const;
  std::string Decode(const std::vector<int32_t> &ids) const;

  bool IsEndOfGeneration(int32_t id) const;
  bool IsControl(int32_t id) const;
  size_t vocab_size() const { return data_.tokens.size(); }
  int32_t bos_id() const { return data_.bos_id; }
  int32_t eos_id() const { return data_.eos_id; }
  const TokenizerData &data() const { return data_; }

  ChatFormat chat_format() const { return chat_format_; }
  // Wraps one user message in the model's chat template, ending where the assistant's reply
  // begins (add_generation_prompt). Throws if the model has no recognised template.
  std::string ApplyChatTemplate(std::string_view user_message) const;

private:
  void EncodeSegment(std::string_view text, std::vector<int32_t> &out) const;
  void BpeWord(std::string_view word, std::vector<int32_t> &out) const;
  void SpmEncode(std::string_view text, std::vector<int32_t> &out) const;
  void PushByteFallback(unsigned char byte, std::vector<int32_t> &out) const;

  TokenizerData data_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;
  std::vector<std::string> specials_; // sorted longest first
  bool special_first_[256] = {};      // first bytes of specials_ (cheap pre-check)
  std::string byte_to_unicode_[256];
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
  ChatFormat chat_format_ = ChatFormat::kNone;
  std::string default_system_;
};

// Splits text into pre-tokens with the given rules (exposed for tests).
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizer pre);

// The rules a tokenizer.ggml.pre name stands for ("default": GPT-2's). Throws
// std::invalid_argument naming the pre-tokenizer and the known names when it is not one of
// them; Tokenizer::FromGguf turns that into a GgufError naming the file.
PreTokenizer PreTokenizerFromName(std::string_view name);

} // namespace pig::runtime
