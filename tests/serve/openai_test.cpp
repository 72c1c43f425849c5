// The OpenAI protocol layer: request bodies into GenerationParams (every bad field refused with a
// 400 naming it), pig's extension object through the table of attention fields that pig-run's
// options are made from, and the response shapes.
// Uses the real model's tokenizer (no forward pass): skipped without the model, failed with
// CI=true.
#include "pig/serve/openai.h"

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "pig/app/attention_fields.h"
#include "pig/spec/method.h"

namespace pig::serve {
namespace {

class OpenAiTest : public testing::ModelTest {
protected:
  const runtime::Tokenizer &tok() const { return model_->tokenizer(); }
  size_t layers() const { return model_->config().n_layers; }
  ParsedRequest Parse(const Json &body, Endpoint e = Endpoint::kCompletions,
                      const Defaults &d = {}) const {
    return ParseRequest(body, e, tok(), d, layers(), 8192);
  }
  // The ApiError a body gets: status 400 and the field it names.
  void ExpectBad(const Json &body, const std::string &param, const std::string &message_part,
                 Endpoint e = Endpoint::kCompletions) const {
    try {
      Parse(body, e);
      ADD_FAILURE() << "accepted: " << body.dump();
    } catch (const ApiError &err) {
      EXPECT_EQ(err.status(), 400) << body.dump();
      EXPECT_EQ(err.param(), param) << body.dump() << ": " << err.what();
      EXPECT_NE(std::string(err.what()).find(message_part), std::string::npos)
          << body.dump() << ": " << err.what();
    }
  }
};

TEST_F(OpenAiTest, ACompletionRequestWithDefaults) {
  const ParsedRequest r = Parse({{"model", "x"}, {"prompt", "The capital of France is"}});
  EXPECT_EQ(r.params.prompt, tok().Encode("The capital of France is"));
  EXPECT_EQ(r.params.max_tokens, 16u); // OpenAI's default for completions
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 1.0f);
  EXPECT_EQ(r.params.top_logprobs, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.params.attention.method, spec::Method::dense);
}

TEST_F(OpenAiTest, EveryFieldIsRead) {
  const ParsedRequest r = Parse({{"prompt", Json::array({Json::array({1, 2, 3})})},
                                 {"max_tokens", 7},
                                 {"temperature", 0.5},
                                 {"top_p", 0.9},
                                 {"seed", -3},
                                 {"stop", Json::array({"a", "bc"})},
                                 {"logprobs", 2},
                                 {"stream", true},
                                 {"stream_options", {{"include_usage", true}}},
                                 {"ignore_eos", true},
                                 {"unknown_field", {{"x", 1}}}}); // unknown fields are ignored
  EXPECT_EQ(r.params.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.params.max_tokens, 7u);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.seed, uint64_t(-3));
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r.params.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage && r.params.ignore_eos);
}

TEST_F(OpenAiTest, ChatMessagesGoThroughTheChatTemplate) {
  const Json msgs =
      Json::array({{{"role", "system"}, {"content", "Be brief."}},
                   {{"role", "user"}, {"content", "Hi"}},
                   {{"role", "assistant"}, {"content", "Hello."}},
                   {{"role", "user"},
                    {"content", Json::array({{{"type", "text"}, {"text", "Why "}},
                                             {{"type", "text"}, {"text", "so?"}}})}}});
  const ParsedRequest r =
      Parse({{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 3}}, Endpoint::kChat);
  EXPECT_EQ(
      r.params.prompt,
      tok().EncodeChat(
          {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Why so?"}}));
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_EQ(r.params.max_tokens, 8192 - r.params.prompt.size()); // the rest of the context
  const ParsedRequest d =
      Parse({{"messages", Json::array({{{"role", "developer"}, {"content", "x"}},
                                       {{"role", "user"}, {"content", "y"}}})},
             {"max_completion_tokens", 5}},
            Endpoint::kChat);
  EXPECT_EQ(d.params.prompt, tok().EncodeChat({{"system", "x"}, {"user", "y"}}));
  EXPECT_EQ(d.params.max_tokens, 5u);
}

TEST_F(OpenAiTest, BadFieldsAreRefusedByName) {
  const Json ok = {{"prompt", "hi"}};
  auto with = [&](const char *k, Json v) {
    Json b = ok;
    b[k] = std::move(v);
    return b;
  };
  ExpectBad(Json::object(), "prompt", "prompt is required");
  ExpectBad(with("prompt", 5), "prompt", "must be a string");
  ExpectBad(with("prompt", ""), "prompt", "empty");
  ExpectBad(with("prompt", Json::array()), "prompt", "empty");
  ExpectBad(with("prompt", Json::array({"a", "b"})), "prompt", "one prompt per request");
  ExpectBad(with("prompt", Json::array({1, -2})), "prompt", "non-negative");
  ExpectBad(with("max_tokens", 0), "max_tokens", "at least 1");
  ExpectBad(with("max_tokens", -5), "max_tokens", "at least 1");
  ExpectBad(with("max_tokens", "5"), "max_tokens", "must be an integer");
  ExpectBad(with("max_tokens", 1.5), "max_tokens", "must be an integer");
  ExpectBad(with("temperature", "hot"), "temperature", "must be a number");
  ExpectBad(with("temperature", -0.1), "temperature", "must be a number in");
  ExpectBad(with("top_p", 0), "top_p", "(0, 1]");
  ExpectBad(with("top_p", 1.5), "top_p", "(0, 1]");
  ExpectBad(with("seed", "x"), "seed", "integer");
  ExpectBad(with("n", 2), "n", "n must be 1");
  ExpectBad(with("stop", 5), "stop", "string");
  ExpectBad(with("stop", Json::array({1})), "stop", "string");
  ExpectBad(with("logprobs", true), "logprobs", "integer");
  ExpectBad(with("logprobs", 21), "logprobs", "[0, 20]");
  ExpectBad(with("stream", "yes"), "stream", "boolean");
  ExpectBad(with("stream_options", {{"include_usage", true}}), "stream_options", "stream: true");
  ExpectBad(with("echo", true), "echo", "not supported");
  ExpectBad(with("best_of", 3), "best_of", "must be 1");
  ExpectBad(with("logit_bias", {{"1", 5}}), "logit_bias", "not supported");
  ExpectBad(with("presence_penalty", 0.5), "presence_penalty", "not supported");
  ExpectBad(with("model", 3), "model", "string");
  ExpectBad(Json::array({1}), "", "JSON object");
  const Endpoint chat = Endpoint::kChat;
  ExpectBad({{"messages", Json::array()}}, "messages", "non-empty", chat);
  ExpectBad({{"messages", "hi"}}, "messages", "non-empty", chat);
  ExpectBad({{"messages", Json::array({{{"role", "tool"}, {"content", "x"}}})}}, "messages[0].role",
            "system, user or assistant", chat);
  ExpectBad({{"messages", Json::array({{{"role", "user"}, {"content", 5}}})}},
            "messages[0].content", "string", chat);
  ExpectBad({{"messages", Json::array({{{"role", "user"}}})}}, "messages[0].content", "required",
            chat);
  ExpectBad(
      {{"messages", Json::array({{{"role", "user"}, {"content", "x"}}})}, {"top_logprobs", 2}},
      "top_logprobs", "logprobs: true", chat);
}

TEST_F(OpenAiTest, ThePigObjectTakesPigRunsSpellings) {
  const ParsedRequest r = Parse({{"prompt", "hi"},
                                 {"pig",
                                  {{"attention", "magicpig"},
                                   {"lsh", "K=8,L=75,t=3"},
                                   {"kv", "q8"},
                                   {"local", 16},
                                   {"sink", 2},
                                   {"dense_layers", Json::array({0, 3})}}}});
  const runtime::AttentionSpec &a = r.params.attention;
  EXPECT_EQ(a.method, spec::Method::magicpig);
  EXPECT_EQ(a.K, 8);
  EXPECT_EQ(a.L, 75);
  EXPECT_EQ(a.t, 3);
  EXPECT_EQ(a.kv_dtype, runtime::lsh::DType::q8);
  EXPECT_EQ(a.local, 16u);
  EXPECT_EQ(a.sink, 2u);
  EXPECT_EQ(a.dense_layers, (std::vector<size_t>{0, 3}));
  const ParsedRequest n = Parse({{"prompt", "hi"}, {"pig", {{"dense_layers", "none"}}}});
  EXPECT_TRUE(n.params.attention.dense_layers.empty() && n.params.attention.dense_layers_set);

  auto bad = [&](Json pig, const std::string &part) {
    ExpectBad({{"prompt", "hi"}, {"pig", std::move(pig)}}, "pig", part);
  };
  bad({{"attention", "sparse"}}, "pig.attention expects one of dense, magicpig");
  bad({{"lsh", "K=0"}}, "pig.lsh: K = 0 is outside [1, 16]");
  bad({{"lsh", "K=16,L=100000"}}, "pig.lsh");
  bad({{"kv", "f16"}}, "pig.kv expects bf16, f32 or q8");
  bad({{"budget", 0}}, "pig.budget expects a number in (0, 1]");
  bad({{"dense_layers", Json::array({99})}}, "dense layer 99 outside the model's 30 layers");
  bad({{"transform", "rotate"}}, "pig.transform");
  bad({{"sink", -1}}, "pig.sink");
  bad({{"colour", "red"}}, "unknown field 'colour'");
  bad({{"attention", Json::array()}}, "pig.attention must be a string or a number");
  bad("magicpig", "pig must be an object");
  bad(Json::array(), "pig must be an object"); // [] is not {}: never the defaults in disguise
  // Unsigned 64-bit values are quoted as given, not wrapped to -1.
  bad({{"sink", 18446744073709551615ull}}, "18446744073709551615");
}

// The "pig" object's keys are the request's fields of the table that pig-run's options are made
// from (pig/app/attention_fields.h): each refuses a bad value naming pig.<field>, with the table's
// message; the table's other fields are unknown here.
TEST_F(OpenAiTest, ThePigObjectsKeysAreTheTablesRequestFields) {
  std::string known;
  for (const app::AttentionField &f : app::AttentionFields()) {
    const Json pig = {{f.name, "bogus!"}};
    if (!app::Takes(f, app::Front::kRequest)) {
      ExpectBad({{"prompt", "hi"}, {"pig", pig}}, "pig", "unknown field '" + std::string(f.name));
      continue;
    }
    known += (known.empty() ? "" : ", ") + std::string(f.name);
    std::string table;
    try {
      runtime::AttentionSpec s;
      app::ApplyFields(s, app::Front::kRequest, {{f.name, "bogus!"}});
    } catch (const std::invalid_argument &e) {
      table = e.what();
    }
    ASSERT_EQ(table.rfind("pig." + std::string(f.name), 0), 0u) << table;
    ExpectBad({{"prompt", "hi"}, {"pig", pig}}, "pig", table);
  }
  ExpectBad({{"prompt", "hi"}, {"pig", {{"colour", "red"}}}}, "pig", "(known: " + known + ")");
}

TEST_F(OpenAiTest, ADeprecatedSpellingIsAWarningOfTheRequestNotALineOnStderr) {
  ::testing::internal::CaptureStderr();
  const ParsedRequest r = Parse({{"prompt", "hi"}, {"pig", {{"lsh", "8:75"}}}});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("deprecated spelling"), std::string::npos) << r.warnings[0];
  EXPECT_EQ(r.params.attention.K, 8);
}

// ParseJsonBody refuses what a request body must not be before it is built.
TEST(ParseJsonBody, RefusesDeepNestingBeforeBuildingIt) {
  for (const char *open : {"[", "{\"a\":"}) {
    for (const size_t depth : {size_t(kMaxJsonDepth + 1), size_t(200000)}) {
      std::string body;
      for (size_t i = 0; i < depth; ++i)
        body += open;
      body += "0";
      for (size_t i = 0; i < depth; ++i)
        body += open[0] == '[' ? "]" : "}";
      try {
        ParseJsonBody(body);
        ADD_FAILURE() << "accepted " << depth << " levels of " << open;
      } catch (const ApiError &e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
      }
    }
  }
  std::string ok; // exactly the limit is fine
  for (int i = 0; i < kMaxJsonDepth; ++i)
    ok += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i)
    ok += "]";
  EXPECT_NO_THROW(ParseJsonBody(ok));
}

TEST(ParseJsonBody, ANumberOutOfRangeIsA400NamingItsField) {
  try {
    ParseJsonBody(R"({"prompt": "x", "temperature": 1e400})");
    ADD_FAILURE() << "accepted 1e400";
  } catch (const ApiError &e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "temperature");
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  for (const char *bad : {"", "{", "{\"a\": }", "nul", "[1,]"}) {
    try {
      ParseJsonBody(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ApiError &e) {
      EXPECT_EQ(e.status(), 400) << bad;
      EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ParseJsonBody(R"({"a": [1, 2.5, "x"]})")["a"][2], "x");
}

TEST_F(OpenAiTest, ATunedPointServesMagicpigRequestsThatNameNoConfiguration) {
  Defaults d;
  d.attention.method = spec::Method::dense;
  runtime::AttentionSpec tuned;
  tuned.method = spec::Method::magicpig;
  tuned.layers.assign(layers(), runtime::LayerLsh{});
  tuned.layers[0].dense = true;
  tuned.layers[1] = {{8, 75, 2}};
  d.tuned = tuned;
  const auto plain = ParsePigExtension(nullptr, d, layers());
  EXPECT_EQ(plain.method, spec::Method::dense); // the default method is dense
  Json pig = {{"attention", "magicpig"}, {"kv", "q8"}};
  const auto a = ParsePigExtension(&pig, d, layers());
  EXPECT_EQ(a.layers, tuned.layers);
  EXPECT_EQ(a.kv_dtype, runtime::lsh::DType::q8);
  pig["lsh"] = "K=9,L=100";
  const auto b = ParsePigExtension(&pig, d, layers());
  EXPECT_TRUE(b.layers.empty()); // its own (K, L) replaces the point
  EXPECT_EQ(b.K, 9);
}

TEST_F(OpenAiTest, ResponsesHaveOpenAisShapes) {
  RequestSummary s;
  s.prompt_tokens = 5;
  s.completion_tokens = 2;
  s.attention = "dense kv=bf16";
  ResponseWriter w(Endpoint::kCompletions, "m", tok(), true, false);
  const int32_t id = tok().Encode(" Paris").front();
  TokenLogprob lp{id, -0.25f, {{id, -0.25f}}};
  const Json whole = w.Whole(" Paris", {lp}, Finish::kStop, s);
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["model"], "m");
  EXPECT_EQ(whole["choices"][0]["text"], " Paris");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["choices"][0]["logprobs"]["tokens"][0], tok().Decode(id));
  EXPECT_EQ(whole["choices"][0]["logprobs"]["text_offset"][0], 0);
  EXPECT_EQ(whole["usage"]["total_tokens"], 7);
  EXPECT_EQ(whole["pig"]["attention"], "dense kv=bf16");

  ResponseWriter c(Endpoint::kChat, "m", tok(), true, true);
  EXPECT_EQ(c.Start()["choices"][0]["delta"]["role"], "assistant");
  RequestUpdate u;
  u.text = "Hi";
  u.tokens = {id};
  u.logprobs = {lp};
  const Json chunk = c.Chunk(u, Finish::kNone);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
  const Json last = c.Chunk(RequestUpdate{}, Finish::kLength);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_TRUE(c.Chunk(RequestUpdate{}, Finish::kNone).is_null());
  EXPECT_EQ(c.UsageChunk(s)["choices"].size(), 0u);
  EXPECT_EQ(c.UsageChunk(s)["usage"]["completion_tokens"], 2);
  // A token's partial UTF-8 character does not break the JSON writer.
  EXPECT_EQ(Dump(Json{{"t", std::string("a\xC3")}}), "{\"t\":\"a\xEF\xBF\xBD\"}");
  const Json err = ErrorBody("bad", "invalid_request_error", "prompt");
  EXPECT_EQ(err["error"]["message"], "bad");
  EXPECT_EQ(err["error"]["param"], "prompt");
  EXPECT_TRUE(err["error"]["code"].is_null());
}

} // namespace
} // namespace pig::serve
