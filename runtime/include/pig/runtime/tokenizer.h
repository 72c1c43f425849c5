// Tokenizer built from GGUF metadata (tokenizer.ggml.*):
//  - "gpt2": byte-level BPE with the pre-tokenizer named by tokenizer.ggml.pre
//    (GPT-2 / SmolLM2 with isolated digits / Llama 3 / Qwen2 rules);
//  - "llama": SentencePiece-style BPE over scores with byte fallback (Llama 2).
// Merges take O(n log n) in a word's length (a heap of candidate pairs), with the ids of the
// quadratic rescans they replaced (tests/runtime/tokenizer_oracle_test.cpp).
// Control tokens (token type 3) and user-defined tokens (type 4) written literally in the
// text are matched first and become their own ids.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
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

// Thrown by the bounded Encode and EncodeChat once the ids would number more than max_tokens.
class TokenLimitExceeded : public std::runtime_error {
public:
  explicit TokenLimitExceeded(size_t max_tokens)
      : std::runtime_error("the text encodes to more than " + std::to_string(max_tokens) +
                           " tokens"),
        max_tokens_(max_tokens) {}
  size_t max_tokens() const { return max_tokens_; }

private:
  size_t max_tokens_;
};

// One message of a conversation (Tokenizer::EncodeChat).
struct ChatMessage {
  std::string role; // "system", "user" or "assistant"
  std::string content;
};

class Tokenizer {
public:
  explicit Tokenizer(TokenizerData data);
  static Tokenizer FromGguf(const GgufFile &file);

  // Text -> ids. Special tokens written in the text are recognised; BOS is prepended when the
  // model asks for it and `add_bos` is true.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = true) const;
  // Encode, refusing text whose ids (BOS included) would number more than max_tokens: throws
  // TokenLimitExceeded. Text longer than max_tokens ids could stand for is refused from its
  // length; within that, encoding stops at the first word past the bound. A server bounds a
  // client's prompt by its context this way, however long the text.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, size_t max_tokens) const;
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
  // begins (add_generation_prompt), as text. Throws std::runtime_error if the model has no
  // recognised template. Encode(text) recognises special-token text anywhere, the message's
  // too: for text from a client, EncodeChat.
  std::string ApplyChatTemplate(std::string_view user_message) const;
  // A conversation in the model's chat template as ids, ending where the assistant's reply
  // begins when add_generation_prompt. The template's markup tokens are ids; message contents
  // are plain text, never special tokens ("<|im_end|>" in a content is encoded as ordinary
  // tokens). Each run of text between two markup tokens (the template's text and a content
  // together, e.g. "user\n" + content) is encoded as one segment, as Encode would: for one user
  // message whose content holds no special-token text, the ids are Encode(ApplyChatTemplate(
  // content)). BOS leads as Encode adds it. Formats:
  //   ChatML   <|im_start|>role\ncontent<|im_end|>\n per message, after the model's default
  //            system prompt unless the first message is a system message (SmolLM2's template);
  //            then <|im_start|>assistant\n. Any order of roles.
  //   Llama 3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> per message; then
  //            <|start_header_id|>assistant<|end_header_id|>\n\n. Any order of roles.
  //   Llama 2  [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant </s><s>[INST] user
  //            [/INST] ... (the Llama 2 chat form, contents not stripped): an optional system
  //            message first, then user and assistant alternating from a user message. The reply
  //            begins after the last [/INST]: there is no generation prompt to add.
  // Throws std::invalid_argument for no messages, a role other than the three, or (Llama 2) an
  // order the format cannot express; std::runtime_error without a recognised template or when a
  // markup token is missing from the vocabulary.
  std::vector<int32_t> EncodeChat(const std::vector<ChatMessage> &messages,
                                  bool add_generation_prompt = true) const;
  // EncodeChat, bounded as the bounded Encode (TokenLimitExceeded past max_tokens ids).
  std::vector<int32_t> EncodeChat(const std::vector<ChatMessage> &messages,
                                  bool add_generation_prompt, size_t max_tokens) const;

private:
  // One piece of a rendered conversation: the template's text, a message's content, or one of
  // the template's special tokens (its text). ApplyChatTemplate joins the texts; EncodeChat
  // encodes runs of text and content as segments and specials as ids.
  struct ChatPiece {
    enum Kind { kText, kContent, kSpecial } kind;
    std::string_view text;
  };
  // The one rendering of every chat format (throws as EncodeChat).
  std::vector<ChatPiece> RenderChat(const std::vector<ChatMessage> &messages,
                                    bool add_generation_prompt) const;

  // Appends a segment's ids; throws TokenLimitExceeded once out holds more than max_tokens.
  void EncodeSegment(std::string_view text, std::vector<int32_t> &out, size_t max_tokens) const;
  // Throws TokenLimitExceeded when text of `bytes` bytes (plus `extra` ids) cannot fit in
  // max_tokens ids, before any of it is encoded.
  void CheckFits(size_t bytes, size_t extra, size_t max_tokens) const;
  void BpeWord(std::string_view word, std::vector<int32_t> &out) const;
  void SpmEncode(std::string_view text, std::vector<int32_t> &out) const;
  void PushByteFallback(unsigned char byte, std::vector<int32_t> &out) const;

  TokenizerData data_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;
  std::vector<std::string> specials_; // sorted longest first
  size_t max_token_bytes_ = 1;        // the most text bytes one id can stand for
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
