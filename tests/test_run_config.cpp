// The run config refuses every value it cannot honour, at the value's line and column, saying
// what it expected: a table over each numeric setting's invalid values, and the YAML-level
// mistakes (a key written twice) that would otherwise be ignored without a word.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/run_config.hpp"

namespace {

struct Bad {
  std::string yaml;   // the line after "backends: {cpu: {}}\n" (line 2)
  std::string where;  // "c.yaml:L:C"
  std::string says;   // a part of the message
};

std::string error_of(const std::string &text) {
  try {
    minfer::parse_run_config(text, "c.yaml");
  } catch (const minfer::Error &e) {
    return e.what();
  }
  return "(accepted)";
}

const std::string kHead = "backends: {cpu: {}}\n";

TEST(RunConfigValues, EveryInvalidNumberIsRefusedWhereItIs) {
  const std::vector<Bad> cases = {
      {"context: 0", "c.yaml:2:10", "'context' is 0; it must be a positive number of positions"},
      {"context: -5", "c.yaml:2:10", "'context' is -5"},
      {"context: lots", "c.yaml:2:10", "expected a token count"},
      {"batch: 0", "c.yaml:2:8", "'batch' is 0; it must be a positive token count"},
      {"generation: {temperature: .nan}", "c.yaml:2:27", "'temperature' is nan; it must be a finite number"},
      {"generation: {temperature: .inf}", "c.yaml:2:27", "'temperature' is inf"},
      {"generation: {temperature: -0.5}", "c.yaml:2:27", "'temperature' is -0.5"},
      {"generation: {top_k: -3}", "c.yaml:2:21", "'top_k' is -3; it must be 0 (off) or more"},
      {"generation: {top_p: 0}", "c.yaml:2:21", "'top_p' is 0; it must be in (0, 1]"},
      {"generation: {top_p: 1.5}", "c.yaml:2:21", "'top_p' is 1.5"},
      {"generation: {top_p: .nan}", "c.yaml:2:21", "'top_p' is nan"},
      {"generation: {min_p: 1}", "c.yaml:2:21", "'min_p' is 1; it must be in [0, 1)"},
      {"generation: {min_p: -0.1}", "c.yaml:2:21", "'min_p' is -0.1"},
      {"generation: {repeat_penalty: 0}", "c.yaml:2:30", "'repeat_penalty' is 0; it must be a positive number"},
      {"generation: {repeat_penalty: -1}", "c.yaml:2:30", "'repeat_penalty' is -1"},
      {"generation: {repeat_penalty: .inf}", "c.yaml:2:30", "'repeat_penalty' is inf"},
      {"generation: {repeat_last_n: -10}", "c.yaml:2:29", "'repeat_last_n' is -10; it must be a token count, 0 (off) or -1"},
      {"generation: {n_predict: -5}", "c.yaml:2:25", "'n_predict' is -5; it must be 0 or more"},
      {"generation: {n_predict: 4294967297}", "c.yaml:2:25", "'n_predict' is '4294967297'; expected a token count"},
      {"generation: {seed: -1}", "c.yaml:2:20", "'seed' is '-1'; expected a non-negative integer"},
      {"generation: {top_k: 2.5}", "c.yaml:2:21", "'top_k' is '2.5'; expected an integer"},
  };
  for (const Bad &c : cases) {
    const std::string msg = error_of(kHead + c.yaml + "\n");
    EXPECT_NE(msg.find(c.where + ": "), std::string::npos) << c.yaml << "\n  -> " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.yaml << "\n  -> " << msg;
  }
}

// Found by the run-config fuzzer: a backend whose name is empty was accepted as the default.
TEST(RunConfigValues, ABackendWithoutANameIsRefused) {
  const std::string msg = error_of("backends:\n  : {}\n");
  EXPECT_NE(msg.find("c.yaml:2:3: a backend needs a name"), std::string::npos) << msg;
}

// placement: {experts: NAME} is the rule blk.*.ffn_*_exps, ahead of the written rules (so a
// broader one such as blk.* does not take the experts), and names a listed backend.
TEST(RunConfigValues, ExpertsShortcutIsTheFirstRule) {
  const minfer::RunConfig c = minfer::parse_run_config(
      "backends: {cuda: {}, cpu: {}}\nplacement: {default: cuda, experts: cpu, rules: [{match: 'blk.*', backend: cuda}]}\n", "c.yaml");
  ASSERT_EQ(c.rules.size(), 2u);
  EXPECT_EQ(c.rules[0].match, "blk.*.ffn_*_exps");
  EXPECT_EQ(c.rules[0].backend, "cpu");
  EXPECT_EQ(c.rules[1].match, "blk.*");
  const std::string msg = error_of("backends: {cuda: {}, cpu: {}}\nplacement: {default: cuda, experts: gpu1}\n");
  EXPECT_NE(msg.find("'experts' sends the experts to backend 'gpu1', which is not listed under 'backends'"), std::string::npos) << msg;
}

TEST(RunConfigValues, TheLimitsThemselvesAreAccepted) {
  for (const std::string ok : {"context: 1", "batch: 1", "generation: {temperature: 0}", "generation: {top_k: 0}",
                               "generation: {top_p: 1}", "generation: {min_p: 0}", "generation: {repeat_penalty: 1}",
                               "generation: {repeat_last_n: -1}", "generation: {repeat_last_n: 0}", "generation: {n_predict: 0}",
                               "generation: {seed: 18446744073709551615}"})
    EXPECT_EQ(error_of(kHead + ok + "\n"), "(accepted)") << ok;
}

TEST(RunConfigValues, AKeyWrittenTwiceIsRefusedAtTheSecond) {
  std::string msg = error_of(kHead + "context: 512\ncontext: 1024\n");
  EXPECT_NE(msg.find("c.yaml:3:1: key 'context' appears twice"), std::string::npos) << msg;
  msg = error_of(kHead + "generation:\n  seed: 1\n  seed: 2\n");
  EXPECT_NE(msg.find("c.yaml:4:3: key 'seed' appears twice"), std::string::npos) << msg;
  msg = error_of("backends: {cpu: {threads: 1, threads: 2}}\n");
  EXPECT_NE(msg.find("key 'threads' appears twice"), std::string::npos) << msg;
}

// generation's grammar (inline or from a file) and JSON schema: compiled at load, their
// errors at their key, one of them at most.
TEST(RunConfigValues, GrammarAndJsonSchemaAreCheckedAtLoad) {
  const minfer::RunConfig g = minfer::parse_run_config(kHead + "generation:\n  grammar: |\n    root ::= [a-z]+\n", "c.yaml");
  EXPECT_EQ(g.generation.grammar, "root ::= [a-z]+\n");
  const minfer::RunConfig j = minfer::parse_run_config(kHead + "generation: {json_schema: '{\"type\": \"integer\"}'}\n", "c.yaml");
  EXPECT_EQ(j.generation.json_schema, "{\"type\": \"integer\"}");
  EXPECT_NE(error_of(kHead + "generation: {grammar: 'root ::= [a-'}\n").find("c.yaml:2:23"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {grammar: 'root ::= [a-'}\n").find("closing ']'"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {grammar_file: /no/such.gbnf}\n").find("'grammar_file' /no/such.gbnf cannot be read"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {json_schema: '{\"type\": 5}'}\n").find("'json_schema'"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {json_schema: 'not json'}\n").find("give the schema as JSON text"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {grammar: 'root ::= \"a\"', json_schema: '{}'}\n").find("not both"), std::string::npos);
}

// llama.cpp's other samplers in generation: (minfer-app's runs, the server's defaults).
TEST(RunConfigValues, OtherSamplers) {
  const minfer::RunConfig c = minfer::parse_run_config(
      kHead + "generation: {typical_p: 0.9, dry_multiplier: 0.8, dry_sequence_breakers: [':', '.'], mirostat: 2, xtc_probability: 0.5}\n", "c.yaml");
  EXPECT_FLOAT_EQ(c.generation.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(c.generation.dry_multiplier, 0.8f);
  EXPECT_EQ(c.generation.dry_sequence_breakers, (std::vector<std::string>{":", "."}));
  EXPECT_EQ(c.generation.mirostat, 2);
  EXPECT_NE(error_of(kHead + "generation: {mirostat: 1}\n").find("'mirostat' is 1; it must be 0 (off) or 2"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {typical_p: 2}\n").find("c.yaml:2:25"), std::string::npos);
  EXPECT_NE(error_of(kHead + "generation: {dry_sequence_breakers: x}\n").find("must be a list of strings"), std::string::npos);
}

TEST(RunConfigValues, CorsOrigins) {
  EXPECT_EQ(minfer::parse_run_config(kHead + "server: {cors_origins: '*'}\n", "c.yaml").server.cors_origins, std::vector<std::string>{"*"});
  EXPECT_EQ(minfer::parse_run_config(kHead + "server: {cors_origins: [http://a.example, 'app://*']}\n", "c.yaml").server.cors_origins,
            (std::vector<std::string>{"http://a.example", "app://*"}));
  EXPECT_NE(error_of(kHead + "server: {cors_origins: {a: 1}}\n").find("'cors_origins' must be an origin"), std::string::npos);
}

TEST(RunConfigValues, ChatSettings) {
  const auto cfg = minfer::parse_run_config(kHead + "chat_template: t.jinja\nmessages:\n  - {role: user, content: hi}\n"
                                                    "  - {role: assistant, content: hello}\n", "c.yaml");
  EXPECT_TRUE(cfg.chat) << "a template or messages mean a chat";
  EXPECT_EQ(cfg.chat_template, "t.jinja");
  ASSERT_EQ(cfg.messages.size(), 2u);
  EXPECT_EQ(cfg.messages[1].role, "assistant");
  EXPECT_EQ(cfg.messages[1].content, "hello");
  std::string msg = error_of(kHead + "messages: hi\n");
  EXPECT_NE(msg.find("c.yaml:2:11: 'messages' must be a list of {role: ..., content: ...}"), std::string::npos) << msg;
  msg = error_of(kHead + "messages:\n  - {role: user}\n");
  EXPECT_NE(msg.find("c.yaml:3:5: a message needs both 'role' and 'content'"), std::string::npos) << msg;
  msg = error_of(kHead + "messages:\n  - {role: user, content: x, name: y}\n");
  EXPECT_NE(msg.find("unknown key 'name' in a message"), std::string::npos) << msg;
  msg = error_of(kHead + "chat: false\nchat_template: x.jinja\n");
  EXPECT_NE(msg.find("c.yaml:2:7: 'chat: false' contradicts 'chat_template'"), std::string::npos) << msg;
}

// The command line's flags go through the same rules (apps/minfer-app applies them; the app
// test checks the flag names in its messages).
TEST(RunConfigValues, CheckGenerationNamesTheFirstBrokenSetting) {
  minfer::GenerationConfig g;
  std::string key, what;
  auto record = [&](const std::string &k, const std::string &w) {
    if (key.empty()) key = k, what = w;
  };
  minfer::check_generation(g, record);
  EXPECT_EQ(key, "") << "the defaults must be valid";
  g.temperature = -1;
  minfer::check_generation(g, record);
  EXPECT_EQ(key, "temperature");
  EXPECT_NE(what.find("-1"), std::string::npos) << what;
}

}  // namespace
