#include "pig/runtime/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "gguf_writer.h"
#include "model_util.h"
#include "pig/runtime/gguf.h"
#include "pig/runtime/model.h"

namespace pig::runtime {
namespace {

std::vector<std::string> Pieces(std::string_view text, PreTokenizer pre) {
  std::vector<std::string> out;
  for (auto p : PreTokenize(text, pre))
    out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Rules) {
  EXPECT_EQ(Pieces("Hello world", PreTokenizer::kGpt2), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces("I'm here", PreTokenizer::kGpt2), (V{"I", "'m", " here"}));
  EXPECT_EQ(Pieces("a   b", PreTokenizer::kGpt2), (V{"a", "  ", " b"}));
  EXPECT_EQ(Pieces("a\n\nb", PreTokenizer::kGpt2), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Pieces("x  ", PreTokenizer::kGpt2), (V{"x", "  "}));
  EXPECT_EQ(Pieces("ab12 34!!", PreTokenizer::kGpt2), (V{"ab", "12", " 34", "!!"}));
  EXPECT_EQ(Pieces("café 中文", PreTokenizer::kGpt2), (V{"café", " 中文"}));
}

TEST(PreTokenizer, SmolLMIsolatesDigits) {
  EXPECT_EQ(Pieces("ab12 34", PreTokenizer::kSmolLM), (V{"ab", "1", "2", " ", "3", "4"}));
}

TEST(PreTokenizer, Llama3Rules) {
  EXPECT_EQ(Pieces("Hello 12345 I'M", PreTokenizer::kLlama3),
            (V{"Hello", " ", "123", "45", " I", "'M"}));
  EXPECT_EQ(Pieces("x.\n\n  y", PreTokenizer::kLlama3), (V{"x", ".\n\n", " ", " y"}));
  EXPECT_EQ(Pieces("12345", PreTokenizer::kQwen2), (V{"1", "2", "3", "4", "5"}));
}

TEST(PreTokenizer, InvalidUtf8KeepsEveryByte) {
  const std::string bad = "a\xff\xfe b\xc3";
  std::string joined;
  for (auto p : PreTokenize(bad, PreTokenizer::kGpt2))
    joined += p;
  EXPECT_EQ(joined, bad);
}

// A tiny SentencePiece-style vocabulary: merges follow the scores, unknown bytes fall back.
TEST(Tokenizer, SentencePieceStyle) {
  TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>",  "<s>", "</s>",         "\xE2\x96\x81", "h",    "e",
              "l",      "o",   "he",           "ll",           "hell", "\xE2\x96\x81hello",
              "<0x21>", "w",   "\xE2\x96\x81w"};
  d.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 1};
  d.scores = {0, 0, 0, -1, -2, -2, -2, -2, -1.5f, -1.4f, -1.0f, -0.5f, 0, -3, -2.5f};
  d.bos_id = 1;
  d.eos_id = 2;
  d.unk_id = 0;
  d.add_bos = true;
  Tokenizer t(d);
  // "hello" -> "▁hello" via he, ll, hell (scores), then "▁" + "hello"? Not in vocab as pieces,
  // so the merge order decides: the result must decode back to the text.
  const auto ids = t.Encode("hello w!");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids.back(), 12); // '!' through byte fallback
  std::string text;
  for (size_t i = 1; i < ids.size(); ++i)
    text += t.Decode(ids[i]);
  EXPECT_EQ(text, " hello w!");
  EXPECT_EQ(t.Encode("</s>", false), (std::vector<int32_t>{2}));
}

TEST(Tokenizer, ByteLevelBpeWithMerges) {
  TokenizerData d;
  d.model = "gpt2";
  // Byte-level symbols: 'Ġ' (U+0120) stands for the space byte.
  d.tokens = {"h", "e", "l", "o", "\xC4\xA0", "he", "ll", "hell", "hello", "\xC4\xA0h", "<|x|>"};
  d.token_types = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};
  d.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 h"};
  Tokenizer t(d);
  EXPECT_EQ(t.Encode("hello", false), (std::vector<int32_t>{8}));
  // Merges apply by rank: "h e" (rank 0) wins over "Ġ h" (rank 4), leaving "Ġ" + "he".
  EXPECT_EQ(t.Encode("hello<|x|> he", false), (std::vector<int32_t>{8, 10, 4, 5}));
  EXPECT_EQ(t.Encode(" h", false), (std::vector<int32_t>{9}));
  EXPECT_EQ(t.Decode(t.Encode("hello<|x|> he", false)), "hello<|x|> he");
}

TEST(Tokenizer, ChatMLTemplateFromTheModel) {
  PIG_REQUIRE_MODEL();
  auto f = GgufFile::Open(DefaultModelPath());
  const Tokenizer t = Tokenizer::FromGguf(*f);
  EXPECT_EQ(t.chat_format(), ChatFormat::kChatML);
  EXPECT_EQ(t.ApplyChatTemplate("Hi"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = t.Encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(ids.front(), 1); // <|im_start|> is a control token, matched literally
  EXPECT_EQ(ids.back(), 2);
  EXPECT_TRUE(t.IsEndOfGeneration(2));
  for (const char *s :
       {"Hello, world!", "  spaces\n\ttabs", "émoji 🙂 中文", "x = f(12345);"}) {
    EXPECT_EQ(t.Decode(t.Encode(s)), s);
  }
}

TEST(PreTokenizer, NamesAndUnknownName) {
  EXPECT_EQ(PreTokenizerFromName("default"), PreTokenizer::kGpt2);
  EXPECT_EQ(PreTokenizerFromName("gpt2"), PreTokenizer::kGpt2);
  EXPECT_EQ(PreTokenizerFromName("smollm"), PreTokenizer::kSmolLM);
  EXPECT_EQ(PreTokenizerFromName("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(PreTokenizerFromName("qwen2"), PreTokenizer::kQwen2);
  try {
    PreTokenizerFromName("deepseek-coder");
    FAIL() << "an unknown pre-tokenizer was accepted";
  } catch (const std::invalid_argument &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'deepseek-coder'"), std::string::npos) << what;
    EXPECT_NE(what.find("smollm"), std::string::npos) << what; // the known names are listed
    EXPECT_NE(what.find("qwen2"), std::string::npos) << what;
  }
}

// The tokenizer metadata of a byte-level BPE vocabulary, naming `pre` (none: key absent).
void PutTokenizer(testing::GgufWriter &w, std::string_view model, std::string_view pre) {
  w.Str("tokenizer.ggml.model", model);
  if (!pre.empty())
    w.Str("tokenizer.ggml.pre", pre);
  w.StrArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.StrArray("tokenizer.ggml.merges", {"a b"});
}

TEST(Tokenizer, UnknownPreTokenizerInGgufIsAnError) {
  testing::GgufWriter w;
  PutTokenizer(w, "gpt2", "made-up-pre");
  const auto bytes = w.Finish();
  auto f = GgufFile::FromMemory(bytes, "fake.gguf");
  try {
    Tokenizer::FromGguf(*f);
    FAIL() << "a GGUF with an unknown pre-tokenizer was accepted";
  } catch (const GgufError &e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("fake.gguf: ", 0), 0u) << what;
    EXPECT_NE(what.find("'made-up-pre'"), std::string::npos) << what;
  }
}

TEST(Tokenizer, KnownOrAbsentPreTokenizerInGguf) {
  for (std::string_view pre : {"", "default", "smollm", "llama3"}) {
    testing::GgufWriter w;
    PutTokenizer(w, "gpt2", pre);
    const auto bytes = w.Finish();
    auto f = GgufFile::FromMemory(bytes);
    const Tokenizer t = Tokenizer::FromGguf(*f);
    EXPECT_EQ(t.Encode("ab", false), (std::vector<int32_t>{2})) << pre;
  }
  // SentencePiece does not pre-tokenize: its models load whatever the key says.
  testing::GgufWriter w;
  PutTokenizer(w, "llama", "made-up-pre");
  w.NumArray<float>("tokenizer.ggml.scores", 6, {0.0f, 0.0f, 1.0f});
  const auto bytes = w.Finish();
  auto f = GgufFile::FromMemory(bytes);
  EXPECT_NO_THROW(Tokenizer::FromGguf(*f));
}

// Loading a model whose metadata names an unknown pre-tokenizer fails at load time, naming the
// file and the pre-tokenizer (the tokenizer is read before any tensor, so none is needed here).
TEST(Tokenizer, ModelWithUnknownPreTokenizerIsRefused) {
  testing::GgufWriter w;
  w.Str("general.architecture", "llama");
  w.U32("llama.block_count", 1);
  w.U32("llama.embedding_length", 8);
  w.U32("llama.feed_forward_length", 16);
  w.U32("llama.attention.head_count", 2);
  PutTokenizer(w, "gpt2", "made-up-pre");
  const auto bytes = w.Finish();
  const auto path = (std::filesystem::path(::testing::TempDir()) / "pig_unknown_pre.gguf").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  try {
    LlamaModel::Load(path);
    FAIL() << "a model with an unknown pre-tokenizer loaded";
  } catch (const GgufError &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("unknown pre-tokenizer 'made-up-pre'"), std::string::npos) << what;
  }
  std::filesystem::remove(path);
}

// The default model names its pre-tokenizer, and it is one of the known ones.
TEST(Tokenizer, DefaultModelNamesAKnownPreTokenizer) {
  PIG_REQUIRE_MODEL();
  auto f = GgufFile::Open(DefaultModelPath());
  EXPECT_EQ(f->GetString("tokenizer.ggml.pre"), "smollm");
  EXPECT_EQ(PreTokenizerFromName(f->GetString("tokenizer.ggml.pre")), PreTokenizer::kSmolLM);
}

} // namespace
} // namespace pig::runtime
