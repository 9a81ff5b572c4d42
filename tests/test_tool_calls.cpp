// Function calling and thinking replies: the tool-call syntax each real template of ../shared/testdata/templates
// asks for, the calls read back out of replies in each syntax (and replies that only look like
// calls left as text), and how much of a streamed reply may be shown before a call; a think
// block split off as reasoning, whole or streamed in any pieces.
#include <gtest/gtest.h>

#include <functional>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/reasoning.hpp"
#include "chat/tool_calls.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using minfer::chat::parse_tool_calls;
using minfer::chat::plain_text_before_calls;
using minfer::chat::ToolFormat;

namespace {

nlohmann::json args_of(const minfer::chat::ToolCall &c) { return nlohmann::json::parse(c.arguments); }

TEST(ToolCalls, EachRealTemplateGetsItsFamilysSyntax) {
  const std::string dir = minfer::test::testdata_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/testdata is absent";
  const std::vector<std::pair<std::string, ToolFormat>> want = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::hermes},
      {"Qwen-Qwen3-0.6B", ToolFormat::hermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::llama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::mistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::mistral},
      {"ibm-granite-granite-3.3-2B-Instruct", ToolFormat::granite},
      // They take tools, in syntaxes not read yet: a request with tools is refused.
      {"GLM-4.6", ToolFormat::unsupported},
      {"openai-gpt-oss-120b", ToolFormat::unsupported},
      {"google-gemma-4-31B-it", ToolFormat::unsupported},
      // No tools at all.
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFormat::none},
      {"google-gemma-2-2b-it", ToolFormat::none},
      {"microsoft-Phi-3.5-mini-instruct", ToolFormat::none},
  };
  for (const auto &[name, format] : want) {
    std::ifstream in(fs::path(dir) / "templates" / (name + ".jinja"), std::ios::binary);
    ASSERT_TRUE(in) << name;
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(minfer::chat::tool_format_of(ss.str()), format) << name << ": got " << minfer::chat::tool_format_name(minfer::chat::tool_format_of(ss.str()));
  }
}

TEST(ToolCalls, HermesCallsWithTextAroundThem) {
  const auto r = parse_tool_calls(ToolFormat::hermes,
                                  "<think>\nThe user wants weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                  "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.calls[0]), nlohmann::json({{"city", "Paris"}, {"unit", "celsius"}}));
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"celsius\"}") << "the model's key order kept";
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, "<think>\nThe user wants weather.\n</think>\n\nLet me check.");
}

TEST(ToolCalls, HermesArgumentsAsTextAndAMissingClosingTag) {
  const auto r = parse_tool_calls(ToolFormat::hermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": [1, {\\\"y\\\": \\\"}\\\"}]}\"}");
  ASSERT_EQ(r.calls.size(), 1u) << "a reply cut at the end of generation still holds its call";
  EXPECT_EQ(args_of(r.calls[0]), nlohmann::json::parse(R"({"x": [1, {"y": "}"}]})"));
  EXPECT_EQ(r.content, "");
}

TEST(ToolCalls, RepliesThatOnlyLookLikeCallsStayText) {
  for (const std::string text : {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",  // cut off
                                 "<tool_call>{\"arguments\": {}}</tool_call>",                                // no name
                                 "<tool_call>not json</tool_call>", "Plain answer, no calls."}) {
    const auto r = parse_tool_calls(ToolFormat::hermes, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text) << "the text as the model wrote it";
  }
  const auto llama = parse_tool_calls(ToolFormat::llama3, "{ braces in prose } are not a call");
  EXPECT_TRUE(llama.calls.empty());
  const auto named = parse_tool_calls(ToolFormat::llama3, "{\"name\": \"f\", \"parameters\": {}} and then prose");
  EXPECT_TRUE(named.calls.empty()) << "Llama 3 calls are the whole reply";
}

TEST(ToolCalls, Llama3JsonReplies) {
  auto r = parse_tool_calls(ToolFormat::llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.calls[0]), nlohmann::json({{"city", "Oslo"}}));
  EXPECT_EQ(r.content, "");
  r = parse_tool_calls(ToolFormat::llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"arguments\": {}}");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "a");
  EXPECT_EQ(r.calls[1].name, "b");
}

TEST(ToolCalls, MistralBothSyntaxes) {
  auto r = parse_tool_calls(ToolFormat::mistral,
                            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": \"abc123def\"}, "
                            "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]");
  ASSERT_EQ(r.calls.size(), 2u) << "Nemo: a JSON list";
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.calls[1]), nlohmann::json({{"tz", "CET"}}));
  r = parse_tool_calls(ToolFormat::mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[ARGS]{}");
  ASSERT_EQ(r.calls.size(), 2u) << "Small 3.2: name[ARGS]{...}, a marker each";
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(args_of(r.calls[0]), nlohmann::json({{"city", "Rome"}}));
  EXPECT_EQ(r.calls[1].name, "get_time");
}

TEST(ToolCalls, GraniteList) {
  const auto r = parse_tool_calls(ToolFormat::granite, "<|tool_call|>[{\"name\": \"search\", \"arguments\": {\"q\": \"minfer\"}}]");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "search");
  EXPECT_EQ(args_of(r.calls[0]), nlohmann::json({{"q", "minfer"}}));
}

TEST(ToolCalls, StreamingShowsTextUpToWhereACallMayBegin) {
  EXPECT_EQ(plain_text_before_calls(ToolFormat::hermes, "Let me check."), 13u);
  EXPECT_EQ(plain_text_before_calls(ToolFormat::hermes, "Let me check.\n<tool"), 14u) << "a tail that may become <tool_call> waits";
  EXPECT_EQ(plain_text_before_calls(ToolFormat::hermes, "Let me check.\n<tool_call>{\"na"), 14u);
  EXPECT_EQ(plain_text_before_calls(ToolFormat::hermes, "a < b"), 5u) << "'<' followed by other text is no marker";
  EXPECT_EQ(plain_text_before_calls(ToolFormat::mistral, "[TOOL"), 0u);
  EXPECT_EQ(plain_text_before_calls(ToolFormat::llama3, "  {\"name\""), 0u) << "a Llama 3 reply opening with '{' may be a call";
  EXPECT_EQ(plain_text_before_calls(ToolFormat::llama3, "<|python"), 0u);
  EXPECT_EQ(plain_text_before_calls(ToolFormat::llama3, "Sure, here"), 10u);
  EXPECT_EQ(plain_text_before_calls(ToolFormat::none, "<tool_call>"), 11u) << "no tools offered: nothing held";
}

}  // namespace

namespace {

using minfer::chat::ReasoningSplitter;

// Feeds text a few bytes at a time, as a stream grows, and joins what comes out.
ReasoningSplitter::Pieces streamed(const std::string &text, bool opened, size_t step) {
  ReasoningSplitter s(opened);
  ReasoningSplitter::Pieces all;
  for (size_t n = step; n < text.size() + step; n += step) {
    const ReasoningSplitter::Pieces p = s.advance(text.substr(0, std::min(n, text.size())), false);
    all.reasoning += p.reasoning, all.content += p.content;
  }
  const ReasoningSplitter::Pieces p = s.advance(text, true);
  all.reasoning += p.reasoning, all.content += p.content;
  return all;
}

TEST(Reasoning, ThinkBlocksBecomeReasoningContent) {
  auto p = minfer::chat::split_reasoning("<think>\nThe user greets me.\n</think>\n\nHello!", false);
  EXPECT_EQ(p.reasoning, "The user greets me.");
  EXPECT_EQ(p.content, "Hello!");
  p = minfer::chat::split_reasoning("Okay, 2+2 is 4.\n</think>\n\nIt is 4.", /*opened_in_prompt=*/true);
  EXPECT_EQ(p.reasoning, "Okay, 2+2 is 4.") << "DeepSeek R1's prompt opens the block";
  EXPECT_EQ(p.content, "It is 4.");
  p = minfer::chat::split_reasoning("Just an answer with <think> inside.", false);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Just an answer with <think> inside.") << "only a reply that opens with the tag thinks";
  p = minfer::chat::split_reasoning("<think>\nStill thinking when max_tokens", false);
  EXPECT_EQ(p.reasoning, "Still thinking when max_tokens");
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(minfer::chat::prompt_opens_thinking("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(minfer::chat::prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(Reasoning, StreamedInAnyPiecesItSplitsTheSame) {
  const std::string text = "  <think>\nA </thin k> is no tag; </think>\n\nThe answer </think> stays.";
  for (size_t step : {1, 2, 3, 7, 64}) {
    const auto p = streamed(text, false, step);
    EXPECT_EQ(p.reasoning, "\nA </thin k> is no tag; ") << step;
    EXPECT_EQ(p.content, "The answer </think> stays.") << step;
  }
  const auto q = streamed("<thi", false, 1);
  EXPECT_EQ(q.content, "<thi") << "a tail that never became the tag is the answer at the end";
}

}  // namespace

// Streaming <tool_call>s while they are written: each call's name once whole, then its
// arguments' text, the same whatever pieces the reply comes in; a call written in another
// order stops the streaming (it comes whole at the end).
// The names and argument texts a ToolCallStream gives for `reply` fed in pieces of `piece`
// bytes, each prefix's held text beginning where held_from(prefix) says.
struct Streamed {
  std::vector<std::string> names, args;
};
static Streamed stream_in_pieces(minfer::chat::ToolCallStream &s, const std::string &reply, size_t piece,
                          const std::function<size_t(const std::string &)> &held_from) {
  Streamed out;
  for (size_t n = std::min(piece, reply.size());; n = std::min(n + piece, reply.size())) {
    const std::string part = reply.substr(0, n);
    for (const minfer::chat::ToolCallStream::Event &e : s.advance(part, held_from(part))) {
      if (e.start) {
        EXPECT_EQ(e.index, out.names.size());
        out.names.push_back(e.text), out.args.emplace_back();
      } else if (e.index < out.args.size()) {
        out.args[e.index] += e.text;
      } else {
        ADD_FAILURE() << "arguments of call " << e.index << " before its start";
      }
    }
    if (n == reply.size()) return out;
  }
}

TEST(ToolCalls, HermesCallsStreamAsTheyAreWritten) {
  using minfer::chat::ToolCallStream;
  const std::string reply = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris {x}\", \"days\": [1, 2]}}\n</tool_call>\n"
                            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const size_t held = reply.find("<tool_call>");
  for (const size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), reply.size()}) {
    ToolCallStream s;
    const auto [names, args] = stream_in_pieces(s, reply, piece, [&](const std::string &) { return held; });
    EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "get_time"})) << "pieces of " << piece;
    EXPECT_EQ(args, (std::vector<std::string>{"{\"city\": \"Paris {x}\", \"days\": [1, 2]}", "{}"})) << "pieces of " << piece;
    EXPECT_EQ(s.streamed(), 2u);
  }
  ToolCallStream other;
  const std::string swapped = "<tool_call>\n{\"arguments\": {}, \"name\": \"f\"}\n</tool_call>";
  EXPECT_TRUE(other.advance(swapped, 0).empty());
  EXPECT_EQ(other.streamed(), 0u) << "arguments before the name: nothing streams, the call comes at the end";
  ToolCallStream partial;
  const auto ev = partial.advance("<tool_call>\n{\"name\": \"get_wea", 0);
  EXPECT_TRUE(ev.empty()) << "the name is not whole yet";
}

// Every format's calls stream as they are written, in pieces of any size, and what streams is
// what parse_tool_calls reads from the whole reply (names, and arguments as the same JSON).
TEST(ToolCalls, EveryFormatsCallsStreamAsTheyAreWritten) {
  using minfer::chat::ToolCallStream;
  using minfer::chat::ToolFormat;
  struct Case {
    ToolFormat format;
    std::string reply;
    size_t calls;
  };
  const std::vector<Case> cases = {
      {ToolFormat::llama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": [1, {\"d\": 2}]}}", 1},
      {ToolFormat::llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"}\"}}; {\"name\": \"b\", \"arguments\": {}}", 2},
      {ToolFormat::mistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", 2},
      {ToolFormat::mistral, "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", 2},
      {ToolFormat::granite, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": 2}]}}, {\"name\": \"c\", \"arguments\": {\"q\": \"]\"}}]", 2},
  };
  for (const Case &c : cases) {
    const minfer::chat::ParsedReply parsed = minfer::chat::parse_tool_calls(c.format, c.reply);
    ASSERT_EQ(parsed.calls.size(), c.calls) << c.reply;
    const size_t held = minfer::chat::plain_text_before_calls(c.format, c.reply);
    for (const size_t piece : {size_t(1), size_t(2), size_t(5), c.reply.size()}) {
      ToolCallStream s(c.format);
      const auto [names, args] = stream_in_pieces(
          s, c.reply, piece, [&](const std::string &part) { return std::min(held, minfer::chat::plain_text_before_calls(c.format, part)); });
      ASSERT_EQ(names.size(), c.calls) << c.reply << " in pieces of " << piece;
      for (size_t i = 0; i < c.calls; ++i) {
        EXPECT_EQ(names[i], parsed.calls[i].name) << c.reply;
        EXPECT_EQ(nlohmann::json::parse(args[i]), nlohmann::json::parse(parsed.calls[i].arguments)) << c.reply << " in pieces of " << piece;
      }
    }
  }
  // Not calls, or not in the streamable order: nothing streams (the end reads them whole).
  ToolCallStream text(ToolFormat::llama3);
  EXPECT_TRUE(text.advance("Hello {\"name\": \"a\", \"parameters\": {}}", 0).empty());
  ToolCallStream swapped(ToolFormat::mistral);
  EXPECT_TRUE(swapped.advance("[TOOL_CALLS][{\"arguments\": {}, \"name\": \"f\"}]", 0).empty());
  EXPECT_EQ(swapped.streamed(), 0u);
}

// Where a tool call may stream from: the answer, not a think block.
TEST(Reasoning, WhatLiesInTheAnswer) {
  const std::string thinking = "<think>\nI could <tool_call> here\n</think>\n\n<tool_call>";
  EXPECT_FALSE(minfer::chat::in_answer(thinking, thinking.find("<tool_call>"), false)) << "inside the block";
  EXPECT_TRUE(minfer::chat::in_answer(thinking, thinking.rfind("<tool_call>"), false)) << "after it closed";
  EXPECT_TRUE(minfer::chat::in_answer("<tool_call>", 0, false)) << "no block at all";
  EXPECT_TRUE(minfer::chat::in_answer("Sure. <tool_call>", 6, false));
  EXPECT_FALSE(minfer::chat::in_answer("Hmm <tool_call>", 4, true)) << "the prompt opened the block";
  EXPECT_TRUE(minfer::chat::in_answer("Hmm</think><tool_call>", 11, true));
}
