// The OpenAI request rules of minfer-server (apps/minfer-server/openai.hpp), without HTTP.
#include <gtest/gtest.h>

#include <algorithm>

#include "anthropic.hpp"
#include "cors.hpp"
#include "gguf/gguf.hpp"
#include "native.hpp"
#include "openai.hpp"
#include "responses.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"
#include "sampling/json_constraint.hpp"

using namespace minfer::server;

namespace {

GenerationParams parse(const char *body) { return parse_generation(json::parse(body), minfer::sampling::Config{}, 99); }

std::string bad(const char *body) {
  try {
    parse(body);
  } catch (const BadRequest &e) {
    return e.what();
  }
  return "";
}

// Server-sent events (`event: NAME\ndata: JSON\n\n` each) as their names and payloads.
struct Events {
  std::vector<std::string> names;
  std::vector<json> data;
};
Events split_events(const std::string &all) {
  Events e;
  for (size_t at = 0; (at = all.find("event: ", at)) != std::string::npos;) {
    const size_t nl = all.find('\n', at);
    e.names.push_back(all.substr(at + 7, nl - at - 7));
    const size_t end = all.find("\n\n", nl);
    EXPECT_EQ(all.compare(nl + 1, 6, "data: "), 0) << all.substr(at, 80);
    e.data.push_back(json::parse(all.substr(nl + 7, end - nl - 7)));
    at = end;
  }
  return e;
}

}  // namespace

TEST(OpenAI, FieldsBecomeSamplingAndLimits) {
  const GenerationParams p = parse(R"({"max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1,
                                      "seed": 5, "stop": ["a", "", "bc"], "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 3);
  EXPECT_EQ(p.sampling.seed, 5u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));  // empty stop strings dropped
  const GenerationParams pen = parse(R"({"presence_penalty": 0.5, "frequency_penalty": -1, "repeat_last_n": -1})");
  EXPECT_FLOAT_EQ(pen.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(pen.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(pen.sampling.repeat_last_n, -1);
  EXPECT_TRUE(p.stream && p.include_usage);
  const GenerationParams d = parse("{}");  // defaults: the config's, the fresh seed, no limit
  EXPECT_EQ(d.max_tokens, -1);
  EXPECT_EQ(d.sampling.seed, 99u);
  EXPECT_EQ(d.sampling.top_k, minfer::sampling::Config{}.top_k);
}

TEST(OpenAI, RefusesWhatItCannotDoNamingTheField) {
  EXPECT_NE(bad(R"({"n": 17})").find("'n'"), std::string::npos);
  EXPECT_EQ(parse(R"({"n": 2, "stream": true})").n, 2) << "several choices stream one after another";
  EXPECT_EQ(parse(R"({"n": 3})").n, 3);
  EXPECT_NE(bad(R"({"temperature": 3})").find("temperature"), std::string::npos);
  EXPECT_NE(bad(R"({"top_p": 0})").find("top_p"), std::string::npos);
  EXPECT_NE(bad(R"({"presence_penalty": 2.5})").find("presence_penalty"), std::string::npos);
  EXPECT_NE(bad(R"({"logprobs": true})").find("logprobs"), std::string::npos);  // completions: a count
  EXPECT_EQ(parse(R"({"echo": true, "logprobs": 0, "max_tokens": 0})").max_tokens, 0) << "the prompt scored";
  EXPECT_NE(bad(R"({"echo": true, "logprobs": 0, "stream": true})").find("not streamed"), std::string::npos);
  EXPECT_NE(bad(R"({"best_of": 3})").find("'best_of'"), std::string::npos);
  EXPECT_TRUE(parse(R"({"echo": true, "best_of": 1})").echo);
  EXPECT_NE(bad(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "number", "multipleOf": 0.3333333333}}}})")
                .find("'response_format': JSON schema, at #: 'multipleOf' is supported by a whole number or a decimal step"), std::string::npos);
  EXPECT_NE(bad(R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {"properties": {"a": {"$ref": "#/$defs/A"}}}}}})")
                .find("at #/properties/a: '$ref' \"#/$defs/A\" names nothing"), std::string::npos);
  EXPECT_NE(bad(R"({"response_format": {"type": "json_schema"}})").find("needs 'json_schema'"), std::string::npos);
  EXPECT_NE(bad(R"({"response_format": {"type": "grammar"}})").find("not supported"), std::string::npos);
  EXPECT_TRUE(parse(R"({"response_format": {"type": "json_object"}})").response_schema);
  EXPECT_TRUE(parse(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}, "strict": true}}})").response_schema);
  EXPECT_FALSE(parse(R"({"response_format": {"type": "text"}})").response_schema);
  EXPECT_NE(bad(R"({"max_tokens": 3, "max_completion_tokens": 4})").find("differ"), std::string::npos);
  EXPECT_NE(bad(R"({"max_tokens": 0})").find("max_tokens"), std::string::npos);
  EXPECT_NE(bad(R"({"stop": [1]})").find("stop"), std::string::npos);
  EXPECT_EQ(bad(R"({"presence_penalty": 0, "response_format": {"type": "text"}, "n": 1})"), "");
}

// What a body costs to read is bounded before it is parsed: nesting (copies recurse once per
// level) and keys (an ordered object looks each new key up among those before it: 100,000
// keys, a 1 MB body, took 13 s; a 16 MiB one most of an hour of a connection thread).
TEST(OpenAI, BodiesTooCostlyToReadAreRefused) {
  const auto refusal = [](const std::string &text) {
    try {
      parse_body(text);
    } catch (const BadRequest &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto object = [](int keys) {
    std::string s = "{";
    for (int i = 0; i < keys; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": [1, {\"a\": \"x,y\"}]";
    return s + "}";
  };
  EXPECT_EQ(refusal("{\"logit_bias\": " + object(4000) + "}"), "") << "4,000 keys in one object";
  EXPECT_NE(refusal("{\"logit_bias\": " + object(5000) + "}").find("too many keys"), std::string::npos);
  std::string many = "[";
  for (int i = 0; i < 20; ++i) many += (i ? "," : "") + object(1000);
  EXPECT_NE(refusal(many + "]").find("too many keys"), std::string::npos) << "twenty objects of 1,000 keys count together";
  EXPECT_EQ(refusal("{\"stop\": [\"" + std::string(100000, ',') + "\"]}"), "") << "commas inside strings are no keys";
  EXPECT_NE(refusal(std::string(200, '[') + std::string(200, ']')).find("nests deeper than 128 levels"), std::string::npos);
  EXPECT_NE(refusal("{\"a\": 1").find("not JSON"), std::string::npos);
}

TEST(OpenAI, StopStringsHoldBackWhatMightStartOne) {
  std::string text = "Hello wor";
  StopCheck c = check_stops(text, {"world", "xyz"});
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.safe, 6u);  // "wor" may begin "world"
  text += "ld and more";
  c = check_stops(text, {"world", "xyz"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(text, "Hello ");
  std::string none = "abc";
  EXPECT_EQ(check_stops(none, {}).safe, 3u);
  std::string two = "a STOP b END";
  EXPECT_TRUE(check_stops(two, {"END", "STOP"}).stopped);
  EXPECT_EQ(two, "a ");  // cut at the first that occurs
}

TEST(OpenAI, MessagesAndPrompts) {
  const json m = chat_messages(json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                                              {"role": "assistant", "content": null}]})"));
  EXPECT_EQ(m[0]["content"], "ab");
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_THROW(chat_messages(json::parse(R"({"messages": []})")), BadRequest);
  EXPECT_THROW(chat_messages(json::parse(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")), BadRequest);
  // A field of the wrong type is a 400 naming it, not a json type_error (a 500; scripts/fuzz.sh request).
  EXPECT_THROW(chat_messages(json::parse(R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})")), BadRequest);
  EXPECT_THROW(parse_tools(json::parse(R"({"tools": [{"type": 1, "function": {"name": "f"}}]})")), BadRequest);
  EXPECT_EQ(completion_prompt(json::parse(R"({"prompt": "hi"})")).text, "hi");
  EXPECT_EQ(completion_prompt(json::parse(R"({"prompt": ["hi"]})")).text, "hi");
  const PromptField ids = completion_prompt(json::parse(R"({"prompt": [1, 2, 3]})"));
  EXPECT_TRUE(ids.is_ids);
  EXPECT_EQ(ids.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_THROW(completion_prompt(json::parse(R"({"prompt": [-1]})")), BadRequest);
  EXPECT_THROW(completion_prompt(json::parse(R"({"prompt": ["a", "b"]})")), BadRequest);
}

TEST(OpenAI, PresenceAndFrequencyPenaltiesMoveTheChoice) {
  // Token 0 leads by 1.0 but was seen 3 times: a frequency penalty of 0.5 (1.5 in all) or a
  // presence penalty of 1.5 hands the greedy choice to token 1; the window can exclude it.
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  const std::vector<int32_t> history = {0, 0, 0, 2};
  minfer::sampling::Config c;
  c.temperature = 0;
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, history), 0);
  c.frequency_penalty = 0.5f;
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, history), 1);
  c.frequency_penalty = 0, c.presence_penalty = 1.5f;
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, history), 1);
  c.repeat_last_n = 1;  // only the last token (2) is in the window
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, history), 0);
  minfer::sampling::Config f;
  f.temperature = 0, f.frequency_penalty = 0.1f;
  EXPECT_FALSE(minfer::sampling::Sampler(f).greedy());
}

TEST(OpenAI, LogprobsFieldsPerApiAndTheirShape) {
  const auto chat = [](const char *b) { return parse_generation(json::parse(b), minfer::sampling::Config{}, 1, Api::chat); };
  EXPECT_EQ(chat("{}").logprobs, -1);
  EXPECT_EQ(chat(R"({"logprobs": true})").logprobs, 0);
  EXPECT_EQ(chat(R"({"logprobs": true, "top_logprobs": 5})").logprobs, 5);
  EXPECT_EQ(chat(R"({"logprobs": false})").logprobs, -1);
  EXPECT_THROW(chat(R"({"top_logprobs": 2})"), BadRequest);  // OpenAI's rule: only with logprobs true
  EXPECT_THROW(chat(R"({"logprobs": true, "top_logprobs": 21})"), BadRequest);
  EXPECT_THROW(chat(R"({"logprobs": 3})"), BadRequest);  // a count is the completions API's
  EXPECT_EQ(parse(R"({"logprobs": 2})").logprobs, 2);
  EXPECT_EQ(parse(R"({"logprobs": null})").logprobs, -1);
  EXPECT_THROW(parse(R"({"logprobs": true})"), BadRequest);

  const std::vector<minfer::sampling::TokenLogprobs> lp = {{7, -0.25f, {{7, -0.25f}, {9, -2.0f}}}, {8, -1.5f, {}}};
  const TokenBytes bytes = [](int32_t t) { return t == 7 ? std::string("He") : t == 8 ? std::string("\xC3") : std::string("x"); };
  const json c = chat_logprobs(lp, bytes);
  ASSERT_EQ(c["content"].size(), 2u);
  EXPECT_EQ(c["content"][0]["token"], "He");
  EXPECT_EQ(c["content"][0]["bytes"], json::array({72, 101}));
  EXPECT_FLOAT_EQ(c["content"][0]["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(c["content"][0]["top_logprobs"][1]["token"], "x");
  EXPECT_EQ(c["content"][1]["bytes"], json::array({195}));  // half a character: the bytes stay exact
  const json t = completion_logprobs(lp, bytes, 10);
  EXPECT_EQ(t["tokens"], json::array({"He", "\xC3"}));
  EXPECT_EQ(t["text_offset"], json::array({10, 12}));
  EXPECT_FLOAT_EQ(t["top_logprobs"][0]["x"].get<float>(), -2.0f);
  EXPECT_EQ(t["top_logprobs"][1], json::object());
}

namespace {

std::string bad_tools(const char *body) {
  try {
    parse_tools(json::parse(body));
  } catch (const BadRequest &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OpenAI, ToolsAreOfferedOnlyWhenTheModelMayChoose) {
  const char *weather = R"({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";
  const ToolsRequest r = parse_tools(json::parse(std::string(R"({"tools": [)") + weather + "]}"));
  EXPECT_TRUE(r.offered);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"].dump(), R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})")
      << "the schema keeps the client's key order (the template writes it with tojson)";
  EXPECT_FALSE(parse_tools(json::parse(std::string(R"({"tool_choice": "none", "tools": [)") + weather + "]}")).offered);
  EXPECT_FALSE(parse_tools(json::parse(R"({"tools": []})")).offered);
  EXPECT_FALSE(parse_tools(json::parse(R"({"messages": []})")).offered);
  EXPECT_TRUE(r.parallel);
  EXPECT_FALSE(parse_tools(json::parse(std::string(R"({"parallel_tool_calls": false, "tools": [)") + weather + "]}")).parallel);

  EXPECT_NE(bad_tools(R"({"tools": {}})").find("'tools' must be an array"), std::string::npos);
  EXPECT_NE(bad_tools(R"({"tools": [{"type": "code_interpreter"}]})").find("tools[0] must be"), std::string::npos);
  EXPECT_NE(bad_tools(R"({"tools": [{"type": "function", "function": {"name": "has space"}}]})").find("tools[0].function.name"), std::string::npos);
  EXPECT_NE(bad_tools(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})").find("parameters"), std::string::npos);
  const std::string two = std::string(weather) + R"(, {"type": "function", "function": {"name": "get_time"}})";
  EXPECT_EQ(parse_tools(json::parse(R"({"tool_choice": "required", "tools": [)" + two + "]}")).forced,
            (std::vector<std::string>{"get_weather", "get_time"}))
      << "required: a call of any of them";
  const ToolsRequest named = parse_tools(json::parse(R"({"tool_choice": {"type": "function", "function": {"name": "get_time"}}, "tools": [)" + two + "]}"));
  EXPECT_TRUE(named.offered);
  EXPECT_EQ(named.forced, (std::vector<std::string>{"get_time"}));
  EXPECT_TRUE(parse_tools(json::parse(R"({"tool_choice": "auto", "tools": [)" + two + "]}")).forced.empty());
  EXPECT_NE(bad_tools((R"({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [)" + two + "]}").c_str()).find("not one of"),
            std::string::npos);
  EXPECT_NE(bad_tools((R"({"tool_choice": "sometimes", "tools": [)" + two + "]}").c_str()).find("'tool_choice' must be"), std::string::npos);
  EXPECT_NE(bad_tools(R"({"tool_choice": "required"})").find("no 'tools'"), std::string::npos);
}

TEST(OpenAI, ToolCallsInTheHistoryReachTheTemplateAsObjects) {
  const json m = chat_messages(json::parse(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]})"));
  EXPECT_EQ(m[1]["content"], "");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"].dump(), R"({"city":"Paris","unit":"c"})") << "an object, in the client's order";
  EXPECT_EQ(m[2]["tool_call_id"], "call_1");
  EXPECT_THROW(chat_messages(json::parse(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})")),
               BadRequest);
  EXPECT_THROW(chat_messages(json::parse(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})")), BadRequest);

  const json calls = tool_calls_json({{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}, 42, /*streaming=*/true);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].dump(), R"({"index":1,"id":"call_42_1","type":"function","function":{"name":"get_time","arguments":"{}"}})");
  EXPECT_FALSE(tool_calls_json({{"f", "{}"}}, 7, /*streaming=*/false)[0].contains("index"));
}

TEST(OpenAI, TemplateKwargsAreMoreTemplateVariables) {
  const json k = template_kwargs(json::parse(R"({"chat_template_kwargs": {"enable_thinking": false, "custom": [1, 2]}})"));
  EXPECT_EQ(k.dump(), R"({"enable_thinking":false,"custom":[1,2]})");
  EXPECT_TRUE(template_kwargs(json::parse(R"({"messages": []})")).empty());
  EXPECT_THROW(template_kwargs(json::parse(R"({"chat_template_kwargs": [1]})")), BadRequest);
  for (const char *own : {"messages", "add_generation_prompt", "bos_token", "tools"}) {
    try {
      template_kwargs(json{{"chat_template_kwargs", {{own, 1}}}});
      ADD_FAILURE() << own << " was taken";
    } catch (const BadRequest &e) {
      EXPECT_NE(std::string(e.what()).find(own), std::string::npos) << e.what();
    }
  }
  // OpenAI's reasoning_effort: the effort, and thinking on or off, unless the kwargs say.
  EXPECT_EQ(template_kwargs(json::parse(R"({"reasoning_effort": "low"})")), json::parse(R"({"reasoning_effort": "low", "enable_thinking": true})"));
  EXPECT_EQ(template_kwargs(json::parse(R"({"reasoning_effort": "minimal"})"))["enable_thinking"], false);
  EXPECT_EQ(template_kwargs(json::parse(R"({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": false}})"))["enable_thinking"], false);
  EXPECT_THROW(template_kwargs(json::parse(R"({"reasoning_effort": "max"})")), BadRequest);
}

TEST(OpenAI, LogitBiasMovesTheChoice) {
  const GenerationParams p = parse(R"({"logit_bias": {"2": 100, "0": -100.0}, "temperature": 0})");
  ASSERT_EQ(p.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(p.sampling.logit_bias[0], std::make_pair(int32_t(2), 100.0f)) << "in the client's order";
  const std::vector<float> logits = {5.0f, 1.0f, 0.5f};
  minfer::sampling::Config c;
  c.temperature = 0;
  EXPECT_TRUE(minfer::sampling::Sampler(c).greedy());
  c.logit_bias = {{0, -100.0f}};
  EXPECT_FALSE(minfer::sampling::Sampler(c).greedy()) << "a biased request cannot take the backend's arg-max";
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, {}), 1) << "-100 bans the best token";
  c.logit_bias = {{2, 4.6f}};
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, {}), 2);
  c.logit_bias = {{2, 4.4f}};
  EXPECT_EQ(minfer::sampling::Sampler(c).sample(logits.data(), 3, {}), 0);
  EXPECT_NE(bad(R"({"logit_bias": [1]})").find("'logit_bias' must be an object"), std::string::npos);
  EXPECT_NE(bad(R"({"logit_bias": {"the": 1}})").find("not a token id"), std::string::npos);
  EXPECT_NE(bad(R"({"logit_bias": {"-3": 1}})").find("not a token id"), std::string::npos);
  EXPECT_NE(bad(R"({"logit_bias": {"5": 101}})").find("from -100 to 100"), std::string::npos);
  EXPECT_NE(bad(R"({"logit_bias": {"5": "x"}})").find("from -100 to 100"), std::string::npos);
}

TEST(OpenAI, AForcedCallIsWrittenToTheTemplatesPattern) {
  using minfer::sampling::PatternState;
  using minfer::sampling::ReplyPart;
  const auto call = minfer::sampling::Schema::compile(json::parse(R"({"anyOf": [
      {"type": "object", "properties": {"name": {"const": "get"}, "arguments": {"type": "object"}}, "required": ["name", "arguments"]},
      {"type": "object", "properties": {"name": {"const": "get_time"}, "arguments": {"type": "object", "properties": {"tz": {"type": "string"}},
       "required": ["tz"]}}, "required": ["name", "arguments"]}]})"), false);
  const auto parts = std::make_shared<const std::vector<ReplyPart>>(
      std::vector<ReplyPart>{{ReplyPart::literal, "<tool_call>\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}});
  for (const char *whole : {"<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>",
                            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"}) {
    PatternState s(parts);
    EXPECT_TRUE(s.feed(whole)) << whole;
    EXPECT_TRUE(s.complete()) << whole;
  }
  for (const char *wrong : {"Sure! <tool_call>", "<tool_call>\n{\"name\": \"got\"", "<tool_call>\n{\"name\": \"get_x\"",
                            "<tool_call>\n{\"name\": \"get\", \"arguments\": []", "<tool_call>\n{\"name\": \"get\", \"arguments\": {}} trailing",
                            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}", "<tool_call>\n{\"arguments\""}) {
    PatternState s(parts);
    EXPECT_FALSE(s.feed(wrong)) << wrong;
  }
  PatternState partial(parts);
  EXPECT_TRUE(partial.feed("<tool_call>\n{\"name\": \"get_ti"));
  EXPECT_FALSE(partial.complete());
}

// llama-server's /completion and /infill fields (native.hpp), mapped onto the OpenAI ones.
TEST(Native, FieldsMapOntoTheOpenAIOnes) {
  const NativeRequest r = native_to_openai(json::parse(R"({"prompt": "x", "n_predict": 7, "seed": -1, "cache_prompt": true, "id_slot": 2,
      "logit_bias": [[15, -1.5], [16, false]], "json_schema": {"type": "integer"}, "t_max_predict_ms": 250, "samplers": ["top_k"]})"));
  EXPECT_EQ(r.openai["max_tokens"], 7);
  EXPECT_FALSE(r.openai.contains("seed")) << "-1: a fresh seed";
  EXPECT_EQ(r.openai["logit_bias"], json::parse(R"({"15": -1.5, "16": -100})"));
  EXPECT_EQ(r.openai["response_format"]["type"], "json_schema");
  EXPECT_FALSE(r.prompt_only);
  const GenerationParams p = parse_generation(r.openai, minfer::sampling::Config{}, 3);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_TRUE(p.response_schema);
  EXPECT_EQ(p.sampling.logit_bias.size(), 2u);
  const NativeRequest warm = native_to_openai(json::parse(R"({"prompt": "x", "n_predict": 0})"));
  EXPECT_TRUE(warm.prompt_only) << "n_predict 0 evaluates the prompt only (editors warm the cache so)";
  EXPECT_FALSE(native_to_openai(json::parse(R"({"prompt": "x", "n_predict": -1})")).openai.contains("max_tokens"));
  auto refused = [](const char *body) {
    try {
      native_to_openai(json::parse(body));
    } catch (const BadRequest &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // grammar and ignore_eos go through to the OpenAI fields, the grammar compiled there.
  const NativeRequest g = native_to_openai(json::parse(R"({"prompt": "x", "grammar": "root ::= \"a\" [0-9]*", "ignore_eos": true})"));
  const GenerationParams gp = parse_generation(g.openai, minfer::sampling::Config{}, 3);
  EXPECT_TRUE(gp.grammar);
  EXPECT_TRUE(gp.ignore_eos);
  EXPECT_FALSE(parse_generation(native_to_openai(json::parse(R"({"prompt": "x", "grammar": ""})")).openai, minfer::sampling::Config{}, 3).grammar);
  try {
    parse_generation(native_to_openai(json::parse(R"({"prompt": "x", "grammar": "root ::= [0-9"})")).openai, minfer::sampling::Config{}, 3);
    ADD_FAILURE() << "an unclosed class is a 400";
  } catch (const BadRequest &e) {
    EXPECT_NE(std::string(e.what()).find("'grammar': expected the closing ']' of the class at line 1, column 10"), std::string::npos) << e.what();
  }
  EXPECT_NE(refused(R"({"prompt": "x", "tfs_z": 0.9})").find("'tfs_z'"), std::string::npos);
  EXPECT_EQ(refused(R"({"prompt": "x", "mirostat": 0, "typical_p": 1, "tfs_z": 1})"), "");
  // llama.cpp's other samplers come through to the sampling config.
  const GenerationParams more = parse_generation(native_to_openai(json::parse(R"({"prompt": "x", "typical_p": 0.9, "top_n_sigma": 1.5,
      "xtc_probability": 0.5, "xtc_threshold": 0.2, "dry_multiplier": 0.8, "dry_base": 2, "dry_allowed_length": 3, "dry_penalty_last_n": 64,
      "dry_sequence_breakers": ["\n", "."], "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2})")).openai, minfer::sampling::Config{}, 3);
  EXPECT_FLOAT_EQ(more.sampling.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(more.sampling.top_n_sigma, 1.5f);
  EXPECT_FLOAT_EQ(more.sampling.xtc_probability, 0.5f);
  EXPECT_FLOAT_EQ(more.sampling.dry_multiplier, 0.8f);
  EXPECT_EQ(more.sampling.dry_allowed_length, 3);
  EXPECT_EQ(more.dry_breakers, (std::vector<std::string>{"\n", "."}));
  EXPECT_EQ(more.sampling.mirostat, 2);
  EXPECT_FLOAT_EQ(more.sampling.mirostat_tau, 4.0f);
  try {
    parse_generation(json::parse(R"({"prompt": "x", "mirostat": 1})"), minfer::sampling::Config{}, 3);
    ADD_FAILURE() << "mirostat 1 is refused";
  } catch (const BadRequest &e) {
    EXPECT_NE(std::string(e.what()).find("'mirostat' 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(native_to_openai(json::parse(R"({"prompt": "x", "n_probs": 3})")).openai["logprobs"], 3) << "n_probs: the likeliest 3 a token";
  EXPECT_FALSE(native_to_openai(json::parse(R"({"prompt": "x", "n_probs": 0})")).openai.contains("logprobs"));
  EXPECT_NE(refused(R"({"prompt": "x", "n_probs": 21})").find("'n_probs'"), std::string::npos);
  EXPECT_NE(refused(R"({"prompt": "x", "n_probs": 2, "post_sampling_probs": true})").find("'post_sampling_probs'"), std::string::npos);
  EXPECT_NE(refused(R"({"prompt": "x", "n_predict": -2})").find("'n_predict'"), std::string::npos);
  EXPECT_NE(refused(R"({"prompt": "x", "logit_bias": [[1]]})").find("'logit_bias'"), std::string::npos);
  EXPECT_EQ(stop_type("stop", true), "word");
  EXPECT_EQ(stop_type("stop", false), "eos");
  EXPECT_EQ(stop_type("length", false), "limit");
}

// The infill prompt: llama-server's layout, fitted to the context, with and without
// repository-level tokens.
TEST(Native, InfillPromptLayoutAndBudget) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const auto ds = minfer::tokenizer::Tokenizer::from_gguf(*minfer::gguf::File::open(td + "/vocab/ggml-vocab-deepseek-v3.gguf"));
  auto enc = [&](const minfer::tokenizer::Tokenizer &t, const std::string &s) { return t.encode(s, false, false); };
  const InfillInput in{"def add(a, b):\n    ", "\n\nprint(add(1, 2))\n", "return", {{"util.py", "X = 1\n"}}};
  const std::vector<int32_t> got = infill_prompt(*ds, in, 4096, 256);
  std::vector<int32_t> want;
  if (ds->add_bos()) want.push_back(ds->bos());
  for (const auto &piece : {enc(*ds, "\n\n--- snippet ---\n\n"), enc(*ds, "X = 1\n")}) want.insert(want.end(), piece.begin(), piece.end());
  want.push_back(128801);
  for (const auto &piece : {enc(*ds, in.prefix), enc(*ds, in.prompt)}) want.insert(want.end(), piece.begin(), piece.end());
  want.push_back(128800);
  const auto suf = enc(*ds, in.suffix);
  want.insert(want.end(), suf.begin(), suf.end());
  want.push_back(128802);
  EXPECT_EQ(got, want) << "[BOS] extra <fim_pre> prefix prompt <fim_suf> suffix <fim_mid>";

  // A long prefix and suffix in a small context: the prefix's end and the suffix's start stay.
  std::string long_prefix, long_suffix;
  for (int i = 0; i < 400; ++i) long_prefix += "x" + std::to_string(i) + " = " + std::to_string(i) + "\n", long_suffix += "y" + std::to_string(i) + "\n";
  const std::vector<int32_t> fit = infill_prompt(*ds, InfillInput{long_prefix, long_suffix, "", {{"a.py", long_prefix}}}, 1024, 256);
  EXPECT_LE(fit.size(), 1024u - 256u);
  EXPECT_GT(fit.size(), 700u) << "the budget is used";
  const auto pre = std::find(fit.begin(), fit.end(), 128801), sf = std::find(fit.begin(), fit.end(), 128800);
  ASSERT_TRUE(pre != fit.end() && sf != fit.end() && fit.back() == 128802);
  const std::vector<int32_t> full_prefix = enc(*ds, long_prefix), full_suffix = enc(*ds, long_suffix);
  const std::vector<int32_t> kept_prefix(pre + 1, sf), kept_suffix(sf + 1, fit.end() - 1);
  EXPECT_TRUE(std::equal(kept_prefix.rbegin(), kept_prefix.rend(), full_prefix.rbegin())) << "the prefix's end";
  EXPECT_TRUE(std::equal(kept_suffix.begin(), kept_suffix.end(), full_suffix.begin())) << "the suffix's start";
  EXPECT_GE(kept_suffix.size(), (1024u - 256u) / 5) << "the suffix keeps about a quarter";

  const auto spm = minfer::tokenizer::Tokenizer::from_gguf(*minfer::gguf::File::open(td + "/vocab/ggml-vocab-llama-spm.gguf"));
  try {
    infill_prompt(*spm, in, 4096, 256);
    ADD_FAILURE() << "a vocabulary without FIM tokens";
  } catch (const BadRequest &e) {
    EXPECT_NE(std::string(e.what()).find("no fill-in-the-middle tokens"), std::string::npos);
  }
}

// Anthropic's Messages API (anthropic.hpp) as the chat path reads it, and its replies.
TEST(Anthropic, RequestsBecomeChatRequests) {
  const json a = anthropic_to_openai(json::parse(R"({"model": "x", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}, {"type": "text",
      "text": "Use tools.", "cache_control": {"type": "ephemeral"}}], "stop_sequences": ["END"], "temperature": 0.2,
      "messages": [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "Call it.", "signature": "s"}, {"type": "text", "text": "Checking."},
                                                     {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18 C"}]}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}, {"type": "text", "text": "Thanks"}]}],
      "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
      "tool_choice": {"type": "tool", "name": "get_weather"}, "thinking": {"type": "disabled"}})"));
  EXPECT_EQ(a["max_tokens"], 64);
  EXPECT_EQ(a["stop"], json::parse(R"(["END"])"));
  const json &m = a["messages"];
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0], json::parse(R"({"role": "system", "content": "Be brief.\nUse tools."})"));
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Call it.");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m[2]["tool_calls"][0]["function"]["arguments"].get<std::string>()), json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(m[3], json::parse(R"({"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"})")) << "a message of results only: no empty user turn";
  EXPECT_EQ(m[4]["role"], "tool");
  EXPECT_EQ(m[5], json::parse(R"({"role": "user", "content": "Thanks"})")) << "results first, then the user's text";
  EXPECT_EQ(a["tools"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(a["tool_choice"]["function"]["name"], "get_weather");
  EXPECT_EQ(a["chat_template_kwargs"]["enable_thinking"], false);
  // The chat path takes it as it is.
  const ToolsRequest t = parse_tools(a);
  EXPECT_EQ(t.forced, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(chat_messages(a)[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(anthropic_to_openai(json::parse(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"}})"))["tool_choice"], "required");
  EXPECT_EQ(anthropic_to_openai(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                                "tool_choice": {"type": "auto", "disable_parallel_tool_use": true}})"))["parallel_tool_calls"], false);
  auto refused = [](const char *body) {
    try {
      anthropic_to_openai(json::parse(body));
    } catch (const BadRequest &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})").find("'image' block is not supported"), std::string::npos);
  EXPECT_NE(refused(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "bash_20250124", "name": "bash"}]})").find("server tools"),
            std::string::npos);
  EXPECT_NE(refused(R"({"messages": []})").find("'messages'"), std::string::npos);
  EXPECT_NE(refused(R"({"messages": [{"role": "system", "content": "x"}]})").find("'messages[0]'"), std::string::npos);
  EXPECT_NE(refused(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "sometimes"}})").find("'tool_choice'"), std::string::npos);
}

TEST(Anthropic, RepliesAndTheirStream) {
  AnthropicReply r{"msg_7", "m", "Hmm.", "Here.", anthropic_stop_reason("stop", "", true), "", {{"get_time", R"({"tz": "CET"})"}}, 7, 20, 5, 16};
  const json m = anthropic_message(r);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["content"], json::parse(R"([{"type": "thinking", "thinking": "Hmm.", "signature": ""}, {"type": "text", "text": "Here."},
                                           {"type": "tool_use", "id": "toolu_7_0", "name": "get_time", "input": {"tz": "CET"}}])"));
  EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens": 4, "output_tokens": 5, "cache_read_input_tokens": 16, "cache_creation_input_tokens": 0})"));
  EXPECT_EQ(anthropic_stop_reason("length", "", false), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason("stop", "END", false), "stop_sequence");
  EXPECT_EQ(anthropic_stop_reason("stop", "", false), "end_turn");
  EXPECT_EQ(anthropic_error(401, "no")["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error(400, "no")["error"]["type"], "invalid_request_error");

  AnthropicStream s("msg_1", "m", 10, 0);
  std::string all = s.start();  // one call a statement: the stream keeps state
  all += s.thinking("a");
  all += s.thinking("b");
  all += s.text("");
  all += s.text("c");
  all += s.tool_uses({{"f", "{}"}}, 1);
  all += s.finish("tool_use", "", 3);
  const auto [names, data] = split_events(all);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                                             "content_block_start", "content_block_delta", "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(data[1]["content_block"]["type"], "thinking");
  EXPECT_EQ(data[3]["delta"], json::parse(R"({"type": "thinking_delta", "thinking": "b"})"));
  EXPECT_EQ(data[6]["index"], 1);
  EXPECT_EQ(data[6]["delta"]["text"], "c");
  EXPECT_EQ(data[8]["content_block"]["name"], "f");
  EXPECT_EQ(data[9]["delta"], json::parse(R"({"type": "input_json_delta", "partial_json": "{}"})"));
  EXPECT_EQ(data[11]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(data[11]["usage"]["output_tokens"], 3) << data[11].dump();
}

// OpenAI's Responses API (responses.hpp) as the chat path reads it, and its replies.
TEST(Responses, RequestsBecomeChatRequests) {
  const ResponsesRequest rq = responses_request(json::parse(R"({"model": "x", "instructions": "Be brief.", "max_output_tokens": 64, "temperature": 0.2,
      "input": [{"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Paris?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Call it."}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
                {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"}],
      "tools": [{"type": "function", "name": "get_weather", "description": "Weather", "strict": true,
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
      "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false, "reasoning": {"effort": "none"},
      "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}}, "store": true, "metadata": {"k": "v"}})"));
  const json &a = rq.openai;
  EXPECT_EQ(rq.conversation.size(), a["messages"].size() - 1) << "the conversation: the messages after the instructions";
  EXPECT_EQ(a["max_tokens"], 64);
  EXPECT_EQ(a["parallel_tool_calls"], false);
  const json &m = a["messages"];
  ASSERT_EQ(m.size(), 7u) << m.dump();
  EXPECT_EQ(m[0], json::parse(R"({"role": "system", "content": "Be brief."})"));
  EXPECT_EQ(m[1], json::parse(R"({"role": "system", "content": "Use tools."})")) << "developer messages are system messages";
  EXPECT_EQ(m[2], json::parse(R"({"role": "user", "content": "Weather in Paris?"})"));
  EXPECT_EQ(m[3]["role"], "assistant");
  EXPECT_EQ(m[3]["content"], "Checking.");
  EXPECT_EQ(m[3]["reasoning_content"], "Call it.") << "a reasoning item goes with the assistant turn after it";
  ASSERT_EQ(m[3]["tool_calls"].size(), 2u) << "a turn's calls are one assistant message";
  EXPECT_EQ(m[3]["tool_calls"][0], json::parse(R"({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})"));
  EXPECT_EQ(m[4], json::parse(R"({"role": "tool", "tool_call_id": "call_1", "content": "18 C"})"));
  EXPECT_EQ(m[5], json::parse(R"({"role": "tool", "tool_call_id": "call_2", "content": "noon"})"));
  EXPECT_EQ(m[6]["content"], nullptr) << "an assistant turn of calls only has content null";
  EXPECT_EQ(m[6]["tool_calls"][0]["id"], "call_3");
  EXPECT_EQ(a["tools"][0], json::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}, "description": "Weather", "strict": true}})"));
  EXPECT_EQ(a["tool_choice"], json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  EXPECT_EQ(a["response_format"], json::parse(R"({"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}})"));
  EXPECT_EQ(a["reasoning_effort"], "none");
  EXPECT_EQ(template_kwargs(a), json::parse(R"({"reasoning_effort": "none", "enable_thinking": false})"));
  EXPECT_EQ(template_kwargs(responses_request(json::parse(R"({"input": "Hi", "reasoning": {"effort": "high"}})")).openai)["enable_thinking"], true);
  // The chat path takes it as it is.
  EXPECT_EQ(parse_tools(a).forced, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(chat_messages(a)[3]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(responses_request(json::parse(R"({"input": "Hi"})")).openai["messages"], json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(responses_request(json::parse(R"({"input": "Hi", "text": {"format": {"type": "json_object"}}})")).openai["response_format"]["type"], "json_object");
  auto refused = [](const char *body) {
    try {
      responses_request(json::parse(body));
    } catch (const BadRequest &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(R"({"input": "x", "conversation": "conv_1"})").find("'conversation'"), std::string::npos);
  EXPECT_NE(refused(R"({"input": "x", "reasoning": {"effort": "max"}})").find("'reasoning.effort' must be"), std::string::npos);
  EXPECT_NE(refused(R"({"input": "x", "tools": [{"type": "web_search"}]})").find("'web_search'"), std::string::npos);
  EXPECT_NE(refused(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})").find("'input_image' part"),
            std::string::npos);
  EXPECT_NE(refused(R"({"input": [{"type": "item_reference", "id": "msg_1"}]})").find("'item_reference' items"), std::string::npos);
  EXPECT_NE(refused(R"({"input": []})").find("'input'"), std::string::npos);
  EXPECT_NE(refused(R"({"input": "x", "background": true})").find("'background'"), std::string::npos);
  EXPECT_NE(refused(R"({"input": [{"type": "function_call", "name": "f"}]})").find("call_id"), std::string::npos);
}

// previous_response_id: the kept conversation goes before the new input, after the new
// instructions (a previous response's are not carried over); the store keeps the latest.
TEST(Responses, AResponseContinuesAKeptOne) {
  const json first = responses_request(json::parse(R"({"instructions": "Old.", "input": "Tell a joke."})")).conversation;
  const json output = json::parse(R"([{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Hmm."}]},
      {"type": "message", "content": [{"type": "output_text", "text": "Why "}, {"type": "output_text", "text": "not?"}]},
      {"type": "function_call", "call_id": "call_1_0", "name": "laugh", "arguments": "{}"}])");
  json kept = first;
  kept.push_back(assistant_turn(output));
  EXPECT_EQ(kept[1], json::parse(R"({"role": "assistant", "content": "Why not?", "reasoning_content": "Hmm.",
      "tool_calls": [{"id": "call_1_0", "type": "function", "function": {"name": "laugh", "arguments": "{}"}}]})"));
  EXPECT_EQ(assistant_turn(json::parse(R"([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])"))["content"], nullptr);
  const ResponsesRequest next = responses_request(json::parse(R"({"instructions": "New.", "input": [{"type": "function_call_output", "call_id": "call_1_0",
      "output": "ha"}, {"role": "user", "content": "Why?"}]})"), kept);
  const json &m = next.openai["messages"];
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], json::parse(R"({"role": "system", "content": "New."})"));
  EXPECT_EQ(m[1], json::parse(R"({"role": "user", "content": "Tell a joke."})"));
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1_0");
  EXPECT_EQ(m[3], json::parse(R"({"role": "tool", "tool_call_id": "call_1_0", "content": "ha"})"));
  EXPECT_EQ(next.conversation.size(), 4u);

  // The input as items: a string is one user message; text content becomes its parts.
  const json items = responses_request(json::parse(R"({"input": [{"role": "user", "content": "Hi"}, {"type": "function_call_output", "call_id": "c",
      "output": "ok", "id": "fco_1"}, {"role": "assistant", "content": "Yes."}]})")).input_items;
  EXPECT_EQ(items, json::parse(R"([{"role": "user", "content": [{"type": "input_text", "text": "Hi"}], "type": "message"},
      {"type": "function_call_output", "call_id": "c", "output": "ok", "id": "fco_1"},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Yes."}], "type": "message"}])"));
  EXPECT_EQ(responses_request(json::parse(R"({"input": "Hi"})")).input_items[0]["content"][0]["text"], "Hi");
  json listed = json::array();
  for (int i = 0; i < 5; ++i) listed.push_back({{"id", "in_" + std::to_string(i)}});
  const json page = input_items_page(listed, "desc", 2, "");
  EXPECT_EQ(page["data"], json::parse(R"([{"id": "in_4"}, {"id": "in_3"}])")) << "newest first by default";
  EXPECT_EQ(page["has_more"], true);
  EXPECT_EQ(page["last_id"], "in_3");
  const json rest = input_items_page(listed, "desc", 20, "in_3");
  EXPECT_EQ(rest["data"].size(), 3u);
  EXPECT_EQ(rest["has_more"], false);
  EXPECT_EQ(input_items_page(listed, "asc", 1, "")["first_id"], "in_0");
  EXPECT_THROW(input_items_page(listed, "up", 1, ""), BadRequest);
  EXPECT_THROW(input_items_page(listed, "asc", 0, ""), BadRequest);
  EXPECT_THROW(input_items_page(listed, "asc", 5, "in_9"), BadRequest);

  ResponseStore store(3, 1 << 20);
  for (int i = 0; i < 5; ++i) store.put("resp_" + std::to_string(i), {json{{"id", i}}, json::array(), json::array()});
  EXPECT_FALSE(store.get("resp_1")) << "the oldest go first";
  EXPECT_EQ(store.get("resp_4")->response["id"], 4);
  EXPECT_TRUE(store.erase("resp_3"));
  EXPECT_FALSE(store.erase("resp_3"));
  ResponseStore small(100, 200);
  small.put("a", {json{{"text", std::string(150, 'x')}}, json::array(), json::array()});
  small.put("b", {json{{"text", std::string(150, 'y')}}, json::array(), json::array()});
  EXPECT_FALSE(small.get("a")) << "past max_bytes the oldest go too";
  EXPECT_TRUE(small.get("b")) << "the newest stays even alone past the bytes";
}

TEST(Responses, RepliesAndTheirStream) {
  const json shell = response_shell(json::parse(R"({"input": "x", "max_output_tokens": 9, "metadata": {"k": "v"}})"), "resp_7", "m", 100);
  EXPECT_EQ(shell["status"], "in_progress");
  EXPECT_EQ(shell["max_output_tokens"], 9);
  EXPECT_EQ(shell["metadata"]["k"], "v");
  EXPECT_EQ(shell["text"]["format"]["type"], "text");
  EXPECT_EQ(shell["store"], true) << "OpenAI's default";
  EXPECT_EQ(response_shell(json::parse(R"({"input": "x", "store": false})"), "r", "m", 1)["store"], false);
  const json r = response_object(shell, {"Hmm.", "Here.", "stop", {{"get_time", R"({"tz":"CET"})"}}, 7, 20, 5, 16, 2});
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["incomplete_details"], nullptr);
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0], json::parse(R"({"type": "reasoning", "id": "rs_7_0", "summary": [], "content": [{"type": "reasoning_text", "text": "Hmm."}]})"));
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Here.");
  EXPECT_EQ(r["output"][1]["id"], "msg_7_1") << "numbered by its place, as the stream numbers it";
  EXPECT_EQ(r["output"][2], json::parse(R"({"type": "function_call", "id": "fc_7_0", "call_id": "call_7_0", "name": "get_time",
                                             "arguments": "{\"tz\":\"CET\"}", "status": "completed"})"));
  EXPECT_EQ(r["usage"], json::parse(R"({"input_tokens": 20, "input_tokens_details": {"cached_tokens": 16}, "output_tokens": 5,
                                        "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 25})"));
  const json cut = response_object(shell, {"", "Once", "length", {}, 8, 3, 9, 0, 0});
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");

  ResponsesStream s(shell, 1);
  std::string all = s.start();  // one call a statement: the stream keeps state
  all += s.reasoning("a");
  all += s.reasoning("b");
  all += s.text("");
  all += s.text("c");
  all += s.call_begin(0, "f");
  all += s.call_arguments("{}");
  all += s.calls({{"g", "{\"x\":1}"}}, 1);
  all += s.finish("tool_calls", 10, 3, 0, 1);
  const auto [names, data] = split_events(all);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "response.created", "response.in_progress",
                       "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
                       "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
                       "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
                       "response.output_item.done", "response.completed"}));
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(data[i]["sequence_number"], i);
    EXPECT_EQ(data[i]["type"], names[i]);
  }
  EXPECT_EQ(data[6]["text"], "ab");
  EXPECT_EQ(data[11]["output_index"], 1);
  EXPECT_EQ(data[11]["item_id"], "msg_1_1");
  EXPECT_EQ(data[15]["item"]["call_id"], "call_1_0");
  EXPECT_EQ(data[19]["item"]["name"], "g");
  EXPECT_EQ(data[19]["output_index"], 3) << "each call its own item";
  EXPECT_EQ(data[21]["arguments"], "{\"x\":1}");
  const json &done = data.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 4u);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "c");
  EXPECT_EQ(done["output"][2]["arguments"], "{}");
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
  EXPECT_EQ(s.reasoning_text(), "ab");

  ResponsesStream f(shell, 2);
  std::string failed = f.start();
  failed += f.text("x");
  failed += f.error("out of memory");
  EXPECT_NE(failed.find("event: error\ndata: {\"code\":\"server_error\",\"message\":\"out of memory\""), std::string::npos) << failed;
  EXPECT_NE(failed.find("event: response.failed"), std::string::npos);
}

// CORS origins (cors.hpp): local pages on any port, app-like schemes and extensions by prefix,
// other sites not; "*" all; an explicit list only what it names.
TEST(Cors, LocalPagesAndAppsByDefaultOthersByName) {
  using minfer::server::origin_allowed;
  const auto &d = minfer::server::default_cors_origins();
  for (const char *ok : {"http://localhost:3000", "http://localhost", "https://127.0.0.1:8443", "http://[::1]:5173", "chrome-extension://abcdef",
                         "vscode-webview://1234", "app://obsidian.md", "tauri://localhost"})
    EXPECT_TRUE(origin_allowed(ok, d)) << ok;
  for (const char *no : {"https://evil.example", "http://localhost.evil.example", "http://localhost:80x", "http://127.0.0.1.nip.io", "", "null"})
    EXPECT_FALSE(origin_allowed(no, d)) << no;
  EXPECT_TRUE(origin_allowed("https://evil.example", {"*"}));
  const std::vector<std::string> mine = {"https://chat.example.org"};
  EXPECT_TRUE(origin_allowed("https://chat.example.org", mine));
  EXPECT_TRUE(origin_allowed("https://chat.example.org:444", mine));
  EXPECT_FALSE(origin_allowed("http://localhost:3000", mine)) << "a list replaces the defaults";
}

// /v1/completions' prompt: one (a string, token ids, a one-string list) or a batch of them.
TEST(OpenAI, CompletionPromptsOneOrABatch) {
  using minfer::server::completion_prompts;
  EXPECT_EQ(completion_prompts(json::parse(R"({"prompt": "hi"})")).size(), 1u);
  EXPECT_EQ(completion_prompts(json::parse(R"({"prompt": [1, 2, 3]})"))[0].ids, (std::vector<int32_t>{1, 2, 3}));
  const auto two = completion_prompts(json::parse(R"({"prompt": ["a", [7, 8]]})"));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].text, "a");
  EXPECT_TRUE(two[1].is_ids);
  json big = {{"prompt", json::array()}};
  for (int i = 0; i < 65; ++i) big["prompt"].push_back("x");
  for (const json &bad : {json::parse(R"({"prompt": ["a", 5]})"), json::parse(R"({"prompt": [[1], [-2]]})"), big, json::parse(R"({"prompt": {}})")})
    EXPECT_THROW(completion_prompts(bad), minfer::server::BadRequest) << bad.dump().substr(0, 60);
  EXPECT_THROW(minfer::server::completion_prompt(json::parse(R"({"prompt": ["a", "b"]})")), minfer::server::BadRequest) << "one prompt where one is asked";
}
