// GBNF grammars (core/sampling/gbnf.hpp): what llama.cpp's grammar syntax lets a reply be,
// code point by code point and token by token.
#include <gtest/gtest.h>

#include <chrono>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "sampling/gbnf.hpp"
#include "sampling/sampler.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using minfer::sampling::Grammar;
using minfer::sampling::GrammarState;

namespace {

std::shared_ptr<const Grammar> grammar(const std::string &text) { return Grammar::compile(text); }

bool whole(const std::shared_ptr<const Grammar> &g, const std::string &text) { return minfer::test::takes_whole<GrammarState>(g, text); }
bool prefix_only(const std::shared_ptr<const Grammar> &g, const std::string &text) { return minfer::test::takes_prefix_only<GrammarState>(g, text); }
bool refused(const std::shared_ptr<const Grammar> &g, const std::string &text) { return minfer::test::refuses<GrammarState>(g, text); }

std::string compile_error(const std::string &text) {
  try {
    Grammar::compile(text);
  } catch (const minfer::Error &e) {
    return e.what();
  }
  return "";
}

// A JSON grammar in llama.cpp's style: rules over lines inside parentheses, classes with
// escapes and negation, repetitions, comments.
const char *kJson = R"(# any JSON value
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

}  // namespace

TEST(Gbnf, JsonGrammarTakesJsonAndNothingElse) {
  const auto g = grammar(kJson);
  for (const char *ok : {R"({"a": [1, 2.5, -3e4], "b": {"c": null}})", "true", R"("\u00e9\n")", "[]", "{ }", "-0.5 "})
    EXPECT_TRUE(whole(g, ok)) << ok;
  EXPECT_TRUE(prefix_only(g, R"({"a": [1, )"));
  EXPECT_TRUE(prefix_only(g, "tr"));
  for (const char *bad : {"{a}", "[1,]x", "\"\\q\"", "01x", "nul1"}) EXPECT_TRUE(refused(g, bad)) << bad;
  EXPECT_TRUE(whole(g, "\"h\xC3\xA9llo \xE2\x82\xAC\"")) << "UTF-8 inside a negated class";
}

TEST(Gbnf, RepetitionsCountAndClassesNegate) {
  const auto g = grammar("root ::= [a-c]{2,3} \"-\" digit+ ( \"x\" | \"y\" )? [^0-9]*\ndigit ::= [0-9]\n");
  EXPECT_TRUE(whole(g, "ab-1"));
  EXPECT_TRUE(whole(g, "abc-123x"));
  EXPECT_TRUE(whole(g, "ab-1yzz!"));
  EXPECT_TRUE(refused(g, "a-"));
  EXPECT_TRUE(refused(g, "abca"));
  EXPECT_TRUE(prefix_only(g, "ab-"));
  EXPECT_TRUE(refused(g, "ab-1x2")) << "[^0-9] after the option";
  const auto exact = grammar("root ::= \"ab\"{3}");
  EXPECT_TRUE(whole(exact, "ababab"));
  EXPECT_TRUE(refused(exact, "abababa"));
  const auto open = grammar("root ::= \"a\"{2,} \".\"");
  EXPECT_TRUE(whole(open, "aaaa."));
  EXPECT_TRUE(refused(open, "a."));
  const auto any = grammar("root ::= . . \"!\"  # two of anything");
  EXPECT_TRUE(whole(any, "\xE4\xB8\xAD" "x!"));
}

// A client's grammar must not stall the server: alternatives that may match nothing, repeated
// ("b"* twice, 50 times over), reach the same parse stack along 3^50 ways, which the state
// once followed one by one (found by scripts/fuzz.sh grammar: minutes for one step). Each
// stack is expanded once a step now.
TEST(Gbnf, EmptyMatchingRepetitionsStayQuick) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto g = grammar("root ::= (\"a\" | \"b\"* | \"b\"*){2,50} \"c\"");
  EXPECT_TRUE(whole(g, "c"));
  EXPECT_TRUE(whole(g, "bbabbbc"));
  EXPECT_TRUE(refused(g, "cc"));
  const auto nested = grammar("root ::= ((\"x\"? \"y\"?){1,40} \"z\"?){1,40} \"!\"");
  EXPECT_TRUE(whole(nested, "xyzxy!"));
  EXPECT_TRUE(whole(nested, "!"));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 2000.0);
}

// Nor crash it: 100,000 nested groups and chains of 50,000 rules each beginning with the next
// overflowed a connection thread's stack (the parser, the left-recursion check and the parse
// state all recursed once per level; found by scripts/fuzz.sh request and grammar). Groups
// nest at most 64 deep; a parse deeper than 4,096 rule frames is dropped.
TEST(Gbnf, DeepGrammarsAreRefusedOrBounded) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string deep = compile_error("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')'));
  EXPECT_NE(deep.find("groups nest deeper than 64 at line 1, column 74"), std::string::npos) << deep;
  EXPECT_EQ(compile_error("root ::= " + std::string(64, '(') + "\"a\"" + std::string(64, ')')), "");
  std::string chain = "root ::= r0\n", nested = "root ::= r0\n";
  for (int i = 0; i < 50000; ++i) {
    chain += "r" + std::to_string(i) + " ::= \"x\" | r" + std::to_string(i + 1) + "\n";
    nested += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  }
  chain += "r50000 ::= \"y\"\n", nested += "r50000 ::= \"y\"\n";
  EXPECT_TRUE(whole(grammar(chain), "x"));
  EXPECT_TRUE(GrammarState(grammar(nested)).dead()) << "50,001 frames deep before its first character";
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 5000.0);
}

// Code points split across feeds (as tokens split them) are held until whole, and a prefix
// that no allowed character has is refused at once.
TEST(Gbnf, SplitCodePointsAreHeldUntilWhole) {
  const auto g = grammar("root ::= \"\xC3\xA9\" [\xE4\xB8\x80-\xE4\xB8\xBF]\n");  // é, then U+4E00..U+4E3F
  GrammarState s(g);
  EXPECT_TRUE(s.feed("\xC3"));
  EXPECT_FALSE(s.can_end());
  EXPECT_TRUE(s.feed("\xA9\xE4"));
  EXPECT_TRUE(s.feed("\xB8"));
  EXPECT_FALSE(s.feed("\x85\xC3")) << "a second é after the class is not in the grammar";
  EXPECT_TRUE(s.feed("\x85"));
  EXPECT_TRUE(s.can_end());
  GrammarState t(g);
  EXPECT_FALSE(t.feed("\xC4")) << "no allowed character begins with this byte";
  EXPECT_FALSE(t.feed("\x80")) << "a continuation byte alone";
}

TEST(Gbnf, ErrorsSayWhereAndWhat) {
  EXPECT_NE(compile_error("thing ::= \"a\"").find("no 'root' rule"), std::string::npos);
  const std::string undefined = compile_error("root ::= item\n  # a comment\n");
  EXPECT_NE(undefined.find("rule 'item'"), std::string::npos) << undefined;
  EXPECT_NE(undefined.find("line 1, column 10"), std::string::npos) << undefined;
  EXPECT_NE(compile_error("root ::= \"abc").find("closing '\"'"), std::string::npos);
  EXPECT_NE(compile_error("root ::= [a-").find("closing ']'"), std::string::npos);
  EXPECT_NE(compile_error("root ::= \"\\q\"").find("escapes"), std::string::npos);
  EXPECT_NE(compile_error("root ::= \"a\"{3,2}").find("n at least m"), std::string::npos);
  EXPECT_NE(compile_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]").find("rule 'expr' is left-recursive"),
            std::string::npos);
  EXPECT_NE(compile_error("root ::= \"a\"\nroot ::= \"b\"").find("second definition"), std::string::npos);
  EXPECT_NE(compile_error("root ::= ((\"a\")*)*").find("a group or repetition in rule 'root' can begin with itself"), std::string::npos);
  const std::string big = "root ::= \"" + std::string(300, 'a') + "\"{1000}";  // 300,000 symbols from a 320-byte grammar
  EXPECT_NE(compile_error(big).find("too large"), std::string::npos) << "a request cannot take the memory";
  EXPECT_EQ(compile_error("root ::= (\"a\"{0,1000}){0,1000}"), "") << "bounded repetitions of something that may be empty are fine";
  EXPECT_NE(compile_error("root ::= \"a\" )").find("end of the line"), std::string::npos);
}

// Over a toy vocabulary: the grammar steers a sampler that prefers other text, and the end
// comes only where root is complete.
TEST(Gbnf, TheConstraintSteersTheSampler) {
  const std::vector<std::string> texts = {"hello", "4", "2", "+", "", ""};  // 4: a control token, 5: the end
  minfer::sampling::Config c;
  c.temperature = 0;
  c.constraint = minfer::sampling::gbnf_constraint(minfer::sampling::constraint_vocab(texts, {5}),
                                                   grammar("root ::= num \"+\" num\nnum ::= [0-9]{1,2}"));
  minfer::sampling::Sampler s(c);
  std::vector<int32_t> out;
  for (int step = 0; step < 10; ++step) {
    std::vector<float> logits = {9, 1, 2, 0, 8, 7};
    if (step == 2) logits[3] = 3;  // "+" once two digits are written
    out.push_back(s.sample(logits.data(), int64_t(logits.size()), {}));
    if (out.back() == 5) break;
  }
  EXPECT_EQ(out, (std::vector<int32_t>{2, 2, 3, 2, 5})) << "22+2, then the end, the likeliest allowed token once a number follows the +";
}

// The whole-vocabulary mask agrees with the constraint token by token along a reply, over
// Qwen2's real 151,936-token vocabulary, and stays quick.
TEST(Gbnf, MaskAgreesWithEachTokensAnswer) {
  const auto tok = minfer::test::qwen2_tokenizer();
  if (!tok) GTEST_SKIP() << "../shared/testdata not found";
  const auto vocab = minfer::sampling::constraint_vocab(*tok);
  const std::vector<std::string> &texts = vocab->texts;
  const std::vector<int32_t> &eog = vocab->eog;
  auto c = minfer::sampling::gbnf_constraint(vocab, grammar(kJson))->fresh();
  const std::string reply = R"({"name": "Zoë", "tags": ["a", "b"], "n": -12.5e3})";
  double worst_ms = 0;
  for (const int32_t t : tok->encode(reply, false, false)) {
    std::vector<uint8_t> mask;
    const auto t0 = std::chrono::steady_clock::now();
    c->allowed_all(tok->n_vocab(), mask);
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    int64_t n = 0, differ = 0;
    for (int32_t v = 0; v < tok->n_vocab(); ++v) {
      n += mask[size_t(v)];
      differ += mask[size_t(v)] != uint8_t(c->allows(v));
    }
    EXPECT_EQ(differ, 0) << "before token " << t << " (" << texts[size_t(t)] << ")";
    EXPECT_GT(n, 0);
    ASSERT_TRUE(mask[size_t(t)]) << "the reply's own token " << texts[size_t(t)];
    c->accept(t);
  }
  EXPECT_TRUE(c->allows(eog[0])) << "a whole value may end";
  std::printf("gbnf mask over %d tokens: at most %.1f ms a step\n", tok->n_vocab(), worst_ms);
}
