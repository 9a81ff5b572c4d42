// Constrained decoding (core/sampling/json_schema.hpp, json_constraint.hpp): what a schema lets
// a reply be, character by character and token by token.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "sampling/end_hold.hpp"
#include "sampling/json_constraint.hpp"
#include "sampling/sampler.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using minfer::sampling::Schema;
using minfer::sampling::SchemaState;
using ojson = nlohmann::ordered_json;

namespace {

std::shared_ptr<const Schema> schema(const char *text, bool strict = true) { return Schema::compile(ojson::parse(text), strict); }

bool whole(const std::shared_ptr<const Schema> &s, const std::string &text) { return minfer::test::takes_whole<SchemaState>(s, text); }
bool prefix_only(const std::shared_ptr<const Schema> &s, const std::string &text) { return minfer::test::takes_prefix_only<SchemaState>(s, text); }
bool refused(const std::shared_ptr<const Schema> &s, const std::string &text) { return minfer::test::refuses<SchemaState>(s, text); }

std::string compile_error(const char *text, bool strict = true) {
  try {
    schema(text, strict);
  } catch (const minfer::Error &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonSchema, AnyObjectIsOneJsonObject) {
  const auto s = Schema::any_object();
  for (const char *w : {R"({})", R"({"a": [1, -2.5e+3, 0, true, false, null, "x\"\u00e9\n"],
  "b": {"c": []}})", "{\"k\":{\"k\":[[[]]]}}"})
    EXPECT_TRUE(whole(s, w)) << w;
  for (const char *p : {"{", R"({"a)", R"({"a": 1)", R"({"a": [1, 2)", R"({"a": -)", R"({"a": 1.)", R"({"a": tr)"})
    EXPECT_TRUE(prefix_only(s, p)) << p;
  for (const char *w : {"[1]", "\"s\"", "x", R"({a: 1})", R"({"a" 1})", R"({"a": 01})", R"({"a": 1,})", R"({"a": [1,]})", R"({"a": tru })",
                        R"({"a": "\q"})", "{\"a\": \"\x01\"}", R"({"a": 1}})", R"({"a": 1} x)", R"({"a": +1})", R"({"a": 1.e5})"})
    EXPECT_TRUE(refused(s, w)) << w;
  EXPECT_TRUE(whole(s, "{\n" + std::string(20, ' ') + "\"a\": 1}")) << "a newline and 20 spaces of indentation";
  EXPECT_TRUE(refused(s, "{\n" + std::string(21, ' '))) << "more than 20";
  EXPECT_TRUE(refused(s, "{\n\n")) << "blank lines";
  EXPECT_TRUE(refused(s, " {")) << "the reply opens with its brace";
  SchemaState st(s);
  EXPECT_TRUE(st.feed("{\"a\": \"x"));
  EXPECT_TRUE(st.in_plain_string());
  EXPECT_TRUE(st.feed("\"}"));
  EXPECT_TRUE(st.settled()) << "a closed object: nothing can extend it";
}

TEST(JsonSchema, ObjectKeysComeInOrderRequiredOnesNeverSkipped) {
  const auto s = schema(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                            "email": {"type": "string"}}, "required": ["name", "email"]})");
  EXPECT_TRUE(whole(s, R"({"name": "Ann", "age": 41, "email": "a@b"})"));
  EXPECT_TRUE(whole(s, R"({"name": "Ann", "email": "a@b"})")) << "the optional key left out";
  EXPECT_TRUE(refused(s, R"({"age")")) << "a required key first";
  EXPECT_TRUE(refused(s, R"({"email")")) << "out of order";
  EXPECT_TRUE(refused(s, R"({"name": "Ann"})")) << "email is required";
  EXPECT_TRUE(refused(s, R"({"name": "Ann", "nick")")) << "no keys beyond the listed ones (llama.cpp's default)";
  EXPECT_TRUE(refused(s, R"({"name": 5)")) << "the value's type";
  EXPECT_TRUE(refused(s, R"({"name": "Ann", "email": "a@b",)")) << "nothing left to write after a comma";
  EXPECT_TRUE(refused(s, R"({"name": "Ann", "name")")) << "a key written twice";

  const auto extra = schema(R"({"properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}})");
  EXPECT_TRUE(whole(extra, R"({"id": 1, "x": true, "y": false})"));
  EXPECT_TRUE(whole(extra, R"({"i": true})")) << "a key that starts as a listed one and ends as another";
  EXPECT_TRUE(refused(extra, R"({"x": 1)")) << "extra keys take additionalProperties' schema";
  EXPECT_TRUE(refused(extra, R"({"id": 1, "id")")) << "a listed key is no extra key";
  const auto none = schema(R"({"type": "object", "properties": {}})");
  EXPECT_TRUE(whole(none, "{}")) << "a tool without parameters";
  EXPECT_TRUE(refused(none, "{\"")) << "properties given, even none: no other keys";
  const auto open = schema(R"({"type": "object"})");
  EXPECT_TRUE(whole(open, R"({"anything": [1, {"b": null}]})"));
}

TEST(JsonSchema, EnumConstAlternativesAndTypeLists) {
  const auto s = schema(R"({"type": "object", "properties": {
      "unit": {"enum": ["celsius", "fahrenheit", 1, 12, null]},
      "v": {"const": "x"},
      "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
      "n": {"type": ["integer", "boolean"]}}, "required": ["unit", "v", "note", "n"]})");
  EXPECT_TRUE(whole(s, R"({"unit": "celsius", "v": "x", "note": null, "n": 3})"));
  EXPECT_TRUE(whole(s, R"({"unit": 1, "v": "x", "note": "hi", "n": true})"));
  EXPECT_TRUE(whole(s, R"({"unit": 12, "v": "x", "note": "hi", "n": false})"));
  EXPECT_TRUE(refused(s, R"({"unit": "kelvin")"));
  EXPECT_TRUE(refused(s, R"({"unit": 2)"));
  EXPECT_TRUE(refused(s, R"({"unit": 1, "v": "y")"));
  EXPECT_TRUE(refused(s, R"({"unit": 1, "v": "x", "note": 5)"));
  EXPECT_TRUE(refused(s, R"({"unit": 1, "v": "x", "note": null, "n": 1.5)"));
  EXPECT_TRUE(whole(schema(R"({"enum": [1, 12]})"), "1")) << "a literal that a longer one extends can still end";
  EXPECT_TRUE(whole(schema(R"({"enum": [1, 12]})"), "12"));
}

TEST(JsonSchema, NumbersStayWithinTheirBounds) {
  const auto month = schema(R"({"type": "integer", "minimum": 1, "maximum": 12})");
  for (const char *w : {"1", "9", "10", "12"}) EXPECT_TRUE(whole(month, w)) << w;
  for (const char *r : {"0", "13", "-", "2 0", "1.5", "100"}) EXPECT_TRUE(refused(month, r)) << r;
  EXPECT_TRUE(prefix_only(schema(R"({"type": "integer", "minimum": 10, "maximum": 12})"), "1")) << "1 goes on to 10-12";

  const auto unit = schema(R"({"type": "number", "minimum": 0, "exclusiveMaximum": 1})");
  for (const char *w : {"0", "0.5", "0.999"}) EXPECT_TRUE(whole(unit, w)) << w;
  for (const char *r : {"1", "-0.1", "2", "0.5e3"}) EXPECT_TRUE(refused(unit, r)) << r;
  const auto neg = schema(R"({"type": "number", "maximum": -2.5})");
  EXPECT_TRUE(whole(neg, "-3"));
  EXPECT_TRUE(whole(neg, "-2.5"));
  EXPECT_TRUE(refused(neg, "-2.4"));
  EXPECT_TRUE(refused(neg, "1"));
  const auto draft4 = schema(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})");
  EXPECT_TRUE(refused(draft4, "0"));
  EXPECT_TRUE(whole(draft4, "1"));
  EXPECT_TRUE(refused(schema(R"({"type": "number"})"), "12345678901234567")) << "at most 16 integer digits";
  EXPECT_NE(compile_error(R"({"type": "integer", "minimum": 1.5, "maximum": 1.9})").find("no number lies within"), std::string::npos);
}

TEST(JsonSchema, StringLengthsAndFormats) {
  const auto code = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(whole(code, "\"ab\""));
  EXPECT_TRUE(whole(code, "\"\xc3\xa9t\xc3\xa9\"")) << "characters, not bytes";
  EXPECT_TRUE(whole(code, "\"a\\n\"")) << "an escape is one character";
  EXPECT_TRUE(refused(code, "\"a\""));
  EXPECT_TRUE(refused(code, "\"abcd"));
  const auto date = schema(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(whole(date, "\"2026-12-05\""));
  EXPECT_TRUE(refused(date, "\"2026-1-05\""));
  EXPECT_TRUE(refused(date, "\"2026-13")) << "no 13th month";
  EXPECT_TRUE(refused(date, "\"2026-12-05T"));
  const auto when = schema(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(whole(when, "\"2026-12-05T08:30:00Z\""));
  EXPECT_TRUE(whole(when, "\"2026-12-05T08:30:00.123+01:00\""));
  EXPECT_TRUE(refused(when, "\"2026-12-05T08:30:00\""));
  const auto id = schema(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(whole(id, "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(refused(id, "\"123e4567-e89b-12d3-a456-42661417400g"));
  const auto email = schema(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(whole(email, "\"jane.doe+news@mail.example.co.uk\""));
  EXPECT_TRUE(refused(email, "\"jane@localhost\"")) << "a domain with a dot";
  EXPECT_TRUE(refused(email, "\"jane..doe"));
  EXPECT_TRUE(refused(email, "\"@"));
  EXPECT_TRUE(refused(email, "\"jane doe"));
  const auto ip = schema(R"({"type": "string", "format": "ipv4"})");
  EXPECT_TRUE(whole(ip, "\"192.168.0.255\""));
  EXPECT_TRUE(refused(ip, "\"256"));
  EXPECT_TRUE(refused(ip, "\"1.2.3\""));
  EXPECT_TRUE(refused(ip, "\"01"));
  const auto uri = schema(R"({"type": "string", "format": "uri"})");
  EXPECT_TRUE(whole(uri, "\"https://example.com/a?b=c#d\""));
  EXPECT_TRUE(whole(uri, "\"mailto:jane@example.com\""));
  EXPECT_TRUE(refused(uri, "\"no scheme"));
  EXPECT_TRUE(refused(uri, "\"1http:"));
  EXPECT_TRUE(whole(schema(R"({"type": "string", "format": "hostname"})"), "\"anything\"")) << "other formats are annotations";
}

// multipleOf by a whole number: the digits must leave room for a multiple within the bounds,
// and the value ends only on one.
TEST(JsonSchema, IntegersAreMultiplesOfTheirStep) {
  const auto five = schema(R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}, "required": ["n"]})");
  for (const char *ok : {"{\"n\": 15}", "{\"n\": 0}", "{\"n\": -20}", "{\"n\": 1000000000000005}"}) EXPECT_TRUE(whole(five, ok)) << ok;
  EXPECT_TRUE(refused(five, "{\"n\": 12}")) << "12 ends on no multiple";
  EXPECT_TRUE(prefix_only(five, "{\"n\": 12")) << "12 may still become 120";
  const auto seven = schema(R"({"type": "integer", "multipleOf": 7, "minimum": 10, "maximum": 20})");
  EXPECT_TRUE(whole(seven, "14"));
  EXPECT_TRUE(refused(seven, "15")) << "nothing after 15 is within the bounds";
  EXPECT_TRUE(refused(seven, "2")) << "20 is no multiple of 7";
  EXPECT_TRUE(refused(seven, "-"));
  const auto num = schema(R"({"type": "number", "multipleOf": 0.5e1, "exclusiveMaximum": 12.5})");
  EXPECT_TRUE(whole(num, "10"));
  EXPECT_TRUE(refused(num, "10.")) << "a number by a whole step is written whole";
  EXPECT_TRUE(refused(num, "15"));
  EXPECT_NE(compile_error(R"({"type": "integer", "multipleOf": 7, "minimum": 15, "maximum": 20})").find("no multiple of 7"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "integer", "multipleOf": 0})").find("above 0"), std::string::npos);
  EXPECT_NE(compile_error(R"({"properties": {"p": {"type": "number", "multipleOf": 0.3333333333}}})")
                .find("#/properties/p: 'multipleOf' is supported by a whole number or a decimal step"),
            std::string::npos);
  EXPECT_TRUE(whole(schema(R"({"type": "number", "multipleOf": 0.3333333333})", /*strict=*/false), "1.234"))
      << "tool parameters: a step that is no decimal is left to the model";
}

// multipleOf by a decimal step (Pydantic's condecimal(decimal_places=2) as 0.01, a half or a
// quarter): at most that many places, and the value in those units a multiple; bounds too.
TEST(JsonSchema, DecimalStepsLimitPlacesAndValues) {
  const auto cents = schema(R"({"type": "number", "multipleOf": 0.01, "minimum": 0})");
  for (const char *ok : {"12.34", "0.5", "7", "0.05", "100.10"}) EXPECT_TRUE(whole(cents, ok)) << ok;
  EXPECT_TRUE(refused(cents, "1.234")) << "a third place";
  EXPECT_TRUE(refused(cents, "1e2")) << "no exponent";
  EXPECT_TRUE(refused(cents, "-1")) << "below the minimum";
  const auto quarter = schema(R"({"type": "number", "multipleOf": 0.25, "maximum": 2})");
  for (const char *ok : {"0.25", "1.5", "2", "-0.75", "1.50"}) EXPECT_TRUE(whole(quarter, ok)) << ok;
  EXPECT_TRUE(refused(quarter, "0.3")) << "30 hundredths end on no quarter, and no third place";
  EXPECT_TRUE(prefix_only(quarter, "0.2")) << "0.2 may still become 0.25";
  EXPECT_TRUE(refused(quarter, "2.5")) << "above the maximum";
  EXPECT_TRUE(refused(quarter, "3"));
  const auto halves = schema(R"({"type": "integer", "multipleOf": 2.5})");
  EXPECT_TRUE(whole(halves, "5"));
  EXPECT_TRUE(refused(halves, "7.")) << "an integer has no fraction";
  EXPECT_TRUE(prefix_only(halves, "7")) << "7 may still become 75";
  EXPECT_NE(compile_error(R"({"type": "number", "multipleOf": 0.25, "minimum": 0.3, "maximum": 0.45})").find("no multiple of 0.25"), std::string::npos);
}

TEST(JsonSchema, PatternsHoldStringsCodePointByCodePoint) {
  const auto zip = schema(R"({"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"})");
  EXPECT_TRUE(whole(zip, "\"12345\""));
  EXPECT_TRUE(whole(zip, "\"12345-6789\""));
  EXPECT_TRUE(refused(zip, "\"1234a"));
  EXPECT_TRUE(refused(zip, "\"1234\""));
  EXPECT_TRUE(refused(zip, "\"12345-\""));
  const auto word = schema(R"({"type": "string", "pattern": "^(?:café|naïve|\\w+!)$"})");
  EXPECT_TRUE(whole(word, "\"caf\xc3\xa9\"")) << "UTF-8";
  EXPECT_TRUE(whole(word, "\"caf\\u00e9\"")) << "the same code point escaped";
  EXPECT_TRUE(whole(word, "\"hi_2!\""));
  EXPECT_TRUE(refused(word, "\"caf\xc3\xa8")) << "e-grave, not e-acute";
  EXPECT_TRUE(refused(word, "\"caf\\u00e8")) << "escaped e-grave";
  EXPECT_TRUE(refused(word, "\"caf\\u01")) << "no code point from \\u01.. is an e-acute";
  SchemaState split(word);
  EXPECT_TRUE(split.feed("\"caf\xc3")) << "half a code point that can still become one";
  EXPECT_TRUE(split.feed("\xa9\""));
  EXPECT_TRUE(refused(word, "\"caf\xe2")) << "no code point from that lead byte fits";
  const auto anywhere = schema(R"({"type": "string", "pattern": "ab+"})");
  EXPECT_TRUE(whole(anywhere, "\"xxabbby\"")) << "unanchored: the match may sit anywhere";
  EXPECT_TRUE(refused(anywhere, "\"xxa\"")) << "but it must be there";
  const auto quote = schema(R"({"type": "string", "pattern": "^a\"b$"})");
  EXPECT_TRUE(whole(quote, R"("a\"b")")) << "a quote in the value is written escaped";
  EXPECT_TRUE(whole(schema(R"({"type": "string", "pattern": "^[^a-c]{2}\\d\\s?\\.$"})"), "\"x\xe2\x82\xac" "7.\""));
  EXPECT_TRUE(whole(schema(R"({"type": "string", "pattern": "^[a-c-]+$", "maxLength": 3})"), "\"a-c\""));
  EXPECT_TRUE(refused(schema(R"({"type": "string", "pattern": "^[a-c-]+$", "maxLength": 3})"), "\"a-cb"));
  for (const char *bad : {"^a|b$", "(?=a)", "\\bword", "[z-a]", "(a", "a{3,2}", "^a$b"})
    EXPECT_NE(compile_error((std::string(R"({"type": "string", "pattern": )") + ojson(bad).dump() + "}").c_str()).find("is not supported"),
              std::string::npos)
        << bad;
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": "^[0-9]{200}$"})").find("128"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": "^([0-9]{20}[a-z]{20}){4}$"})").find("more than 128 character positions"), std::string::npos);
}

// minProperties / maxProperties: the keys an object has, listed or not; a key that would leave
// too few listed ones for the minimum, or no room for the required ones, is refused early, so
// no reply walks into an object it cannot finish.
TEST(JsonSchema, ObjectsCountTheirKeys) {
  const auto free = schema(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2})");
  EXPECT_TRUE(refused(free, "{}"));
  EXPECT_TRUE(whole(free, R"({"a": 1})"));
  EXPECT_TRUE(whole(free, R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(refused(free, R"({"a": 1, "b": 2,)"));
  const auto listed = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
      "minProperties": 2})");
  EXPECT_TRUE(refused(listed, "{}"));
  EXPECT_TRUE(refused(listed, R"({"a": 1})")) << "one key, two wanted";
  EXPECT_TRUE(prefix_only(listed, R"({"a": 1)"));
  EXPECT_TRUE(whole(listed, R"({"a": 1, "c": 3})"));
  EXPECT_TRUE(refused(listed, R"({"c)")) << "after c no listed key is left for the second";
  EXPECT_TRUE(prefix_only(listed, R"({"b)"));
  const auto room = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
      "required": ["c"], "maxProperties": 2})");
  EXPECT_TRUE(whole(room, R"({"a": 1, "c": 3})"));
  EXPECT_TRUE(refused(room, R"({"a": 1, "b)")) << "b would leave no room for the required c";
  EXPECT_TRUE(whole(room, R"({"c": 3})"));
  EXPECT_NE(compile_error(R"({"type": "object", "minProperties": 3, "maxProperties": 2})").find("'maxProperties'"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {}}, "additionalProperties": false, "minProperties": 2})").find("'minProperties'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"], "maxProperties": 1})").find("required"),
            std::string::npos);
}

// uniqueItems on arrays of scalars (Pydantic's set[str], set[int], a set of an Enum): an item
// that repeats one written before is refused where it would end; objects or arrays as items
// are refused in strict schemas (they are compared as written) and the keyword ignored elsewhere.
TEST(JsonSchema, UniqueItemsRefuseARepeatedScalar) {
  const auto tags = schema(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})");
  EXPECT_TRUE(whole(tags, R"(["a", "b", "ab"])"));
  EXPECT_TRUE(refused(tags, R"(["a", "b", "a")")) << "the closing quote would repeat \"a\"";
  EXPECT_TRUE(prefix_only(tags, R"(["a", "b", "a)")) << "\"a...\" may still become another string";
  const auto ints = schema(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})");
  EXPECT_TRUE(whole(ints, "[1, 12, 2]"));
  EXPECT_TRUE(refused(ints, "[12, 1, 12]")) << "a number is whole at the character after it";
  EXPECT_TRUE(prefix_only(ints, "[12, 1, 12"));
  EXPECT_TRUE(prefix_only(ints, "[12, 1, 123"));
  const auto colors = schema(R"({"type": "array", "items": {"enum": ["red", "green"]}, "uniqueItems": true, "maxItems": 3})");
  EXPECT_TRUE(whole(colors, R"(["green", "red"])"));
  EXPECT_TRUE(refused(colors, R"(["red", "red")"));
  const auto pair = schema(R"({"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": false, "uniqueItems": true})");
  EXPECT_TRUE(whole(pair, "[true, false]"));
  EXPECT_TRUE(refused(pair, "[true, true"));
  EXPECT_TRUE(whole(schema(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": false})"), "[1, 1]"));
  EXPECT_NE(compile_error(R"({"type": "array", "items": {"type": "object"}, "uniqueItems": true})").find("'uniqueItems'"), std::string::npos);
  EXPECT_TRUE(whole(schema(R"({"type": "array", "items": {"type": "object"}, "uniqueItems": true})", /*strict=*/false), "[{}, {}]"));
}

TEST(JsonSchema, ArraysCountTheirItems) {
  const auto s = schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_TRUE(whole(s, "[1]"));
  EXPECT_TRUE(whole(s, "[1, 2, 3]"));
  EXPECT_TRUE(refused(s, "[]"));
  EXPECT_TRUE(refused(s, "[1, 2, 3,"));
  EXPECT_TRUE(refused(s, "[\"a\""));
  const auto pair = schema(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "items": false})");
  EXPECT_TRUE(whole(pair, "[\"x\", 1.5]"));
  EXPECT_TRUE(refused(pair, "[1"));
  EXPECT_TRUE(refused(pair, "[\"x\", 1.5,"));
}

TEST(JsonSchema, ReferencesRecursionAndAllOf) {
  const auto tree = schema(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(whole(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_TRUE(refused(tree, R"({"v": 1, "kids": [{"w")"));
  const auto merged = schema(R"({"$defs": {"A": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
      "allOf": [{"$ref": "#/$defs/A"}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})");
  EXPECT_TRUE(whole(merged, R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(refused(merged, R"({"a": 1})"));
}

// A call of one of many tools (agents offer a hundred and more): each stays reachable.
TEST(JsonSchema, AnyOfManyAlternativesKeepsThemAll) {
  ojson calls = ojson::array();
  for (int i = 0; i < 300; ++i)
    calls.push_back({{"type", "object"}, {"properties", {{"name", {{"const", "tool_" + std::to_string(i)}}}, {"arguments", {{"type", "object"},
                     {"properties", {{"x" + std::to_string(i), {{"type", "integer"}}}}}}}}}, {"required", {"name", "arguments"}}});
  const auto s = Schema::compile(ojson{{"anyOf", calls}}, false);
  EXPECT_TRUE(whole(s, R"({"name": "tool_299", "arguments": {"x299": 5}})"));
  EXPECT_TRUE(whole(s, R"({"name": "tool_0", "arguments": {}})"));
  EXPECT_TRUE(refused(s, R"({"name": "tool_299", "arguments": {"x298")")) << "the arguments of the tool named";
  EXPECT_TRUE(refused(s, R"({"name": "tool_300")"));
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsOnlyWhenStrict) {
  EXPECT_NE(compile_error(R"({"type": "object", "properties": {"ids": {"type": "array", "contains": {"const": 1}}}})")
                .find("at #/properties/ids: 'contains' is not supported"), std::string::npos);
  EXPECT_EQ(compile_error(R"({"type": "object", "properties": {"ids": {"type": "array", "contains": {"const": 1}}}})", false), "");
  EXPECT_NE(compile_error(R"({"type": "string", "pattern": "^(a)\\1$"})").find("at #: pattern /^(a)\\1$/: back-references (\\1) is not supported"),
            std::string::npos);
  EXPECT_EQ(compile_error(R"({"type": "string", "pattern": "^(a)\\1$"})", false), "") << "lenient: any string";
  EXPECT_NE(compile_error(R"({"type": "decimal"})").find("unknown type \"decimal\""), std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "https://example.com/s.json"})").find("points outside the schema"), std::string::npos);
  EXPECT_NE(compile_error("false").find("admits no value"), std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("below 'minItems'"), std::string::npos);
}

// Over a toy vocabulary: the constraint steers a sampler that prefers garbage.
TEST(JsonSchema, TheConstraintSteersTheSampler) {
  std::vector<std::string> texts = {"hello", "{", "\"k\"", ":", "1", "}", "", ""};  // 6: a control token, 7: the end
  minfer::sampling::Config c;
  c.temperature = 0;
  c.constraint = minfer::sampling::json_constraint(minfer::sampling::constraint_vocab(texts, {7}), Schema::any_object());
  minfer::sampling::Sampler s(c);
  EXPECT_FALSE(s.greedy());
  std::vector<int32_t> out;
  for (int step = 0; step < 8; ++step) {
    // "hello" and the control token 6 always score best, then the end, then the JSON pieces in order.
    std::vector<float> logits = {9, 0, 0, 0, 0, 0, 8, 7};
    logits[size_t(1 + std::min(step, 4))] = 6;
    out.push_back(s.sample(logits.data(), int64_t(logits.size()), {}));
    if (out.back() == 7) break;
  }
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3, 4, 5, 7})) << "{\"k\":1} then the end, which only a closed object allows";
}

// A schema that contradicts itself (a pattern of five a's in at most two characters) walks into
// a dead end: the sampler ends the reply there instead of throwing (which would end every
// sequence of the batch's step).
TEST(JsonSchema, ADeadEndEndsTheReplyInsteadOfThrowing) {
  std::vector<std::string> texts = {"\"", "a", "b", ""};  // 3: the end
  minfer::sampling::Config c;
  c.temperature = 0;
  c.constraint = minfer::sampling::json_constraint(minfer::sampling::constraint_vocab(texts, {3}),
                                                   schema(R"({"type": "string", "pattern": "^a{5}$", "maxLength": 2})"));
  minfer::sampling::Sampler s(c);
  std::vector<int32_t> out;
  for (int step = 0; step < 6; ++step) {
    const std::vector<float> logits = {1, 2, 3, 0};
    out.push_back(s.sample(logits.data(), 4, {}));
    if (out.back() == 3) break;
  }
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 1, 3})) << "the quote, two a's, then nothing fits: the end";
}

// min_tokens and ignore_eos (sampling/end_hold.hpp): the end-of-generation tokens are refused
// until that many tokens are out, or always; the arg-max stays the choice where it is not an
// end, and a schema's end still comes once the hold is over.
TEST(EndHold, TheEndWaitsForMinTokensOrNeverComes) {
  // The model wants to end at once (token 3, and 2 is another end); 0 and 1 are text.
  const std::vector<float> logits = {1, 2, 8, 9};
  const auto run = [&](std::shared_ptr<const minfer::sampling::TokenConstraint> c, int steps) {
    minfer::sampling::Config cfg;
    cfg.temperature = 0;
    cfg.constraint = std::move(c);
    minfer::sampling::Sampler s(cfg);
    std::vector<int32_t> out;
    for (int i = 0; i < steps; ++i) {
      out.push_back(s.sample(logits.data(), 4, {}));
      if (out.back() >= 2) break;
    }
    return out;
  };
  EXPECT_EQ(run(minfer::sampling::hold_end(nullptr, {3, 2}, 3), 10), (std::vector<int32_t>{1, 1, 1, 3}));
  EXPECT_EQ(run(minfer::sampling::hold_end(nullptr, {3, 2}, minfer::sampling::kNeverEnd), 6), (std::vector<int32_t>(6, 1)));
  EXPECT_EQ(run(minfer::sampling::hold_end(nullptr, {3, 2}, 0), 10), (std::vector<int32_t>{3}));
  // Over a schema: "1" is a whole value; the hold keeps the reply going past it ("11"), then the end.
  const std::vector<std::string> texts = {"x", "1", "", ""};
  const auto digits = minfer::sampling::json_constraint(minfer::sampling::constraint_vocab(texts, {2, 3}), schema(R"({"type": "integer"})"));
  EXPECT_EQ(run(minfer::sampling::hold_end(digits, {2, 3}, 2), 10), (std::vector<int32_t>{1, 1, 3}));
  // Each sampler starts its own count (fresh()).
  const auto shared = minfer::sampling::hold_end(nullptr, {3, 2}, 2);
  EXPECT_EQ(run(shared, 10), run(shared, 10));
}

// Random replies drawn through the constraint over a vocabulary of JSON pieces: every one that
// ends parses, and meets the schema (checked here independently, on the parsed value).
TEST(JsonSchema, RandomRepliesThatEndMeetTheSchema) {
  const auto s = schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}, "score": {"type": "number", "minimum": -1, "maximum": 1},
      "n": {"type": "integer", "minimum": 3, "maximum": 40}}, "required": ["name", "n"]})");
  std::vector<std::string> texts = {"{", "}", "[", "]", ",", ":", " ", "\"", "\"name\"", "\"n", "ame", "\"tags\"", "\"score\"",
                                    "\"n\"", "\"a\"", "\"b\"", "\"c\"", "x", "yz", "n", "a", "m", "\\n", "-", "0", "1", "2", "3", "4", "9", ".", "e",
                                    "true", "null", "\": ", "\", \"", "\"}", "4,", ""};
  const int32_t end = int32_t(texts.size() - 1);
  const auto c = minfer::sampling::json_constraint(minfer::sampling::constraint_vocab(texts, {end}), s);
  int ended = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(0, 4);
    minfer::sampling::Config cfg;
    cfg.temperature = 1, cfg.top_k = 0, cfg.top_p = 1, cfg.min_p = 0, cfg.seed = seed, cfg.constraint = c;
    minfer::sampling::Sampler sm(cfg);
    std::string reply;
    for (int step = 0; step < 200; ++step) {
      std::vector<float> logits(texts.size());
      for (float &l : logits) l = u(rng);
      logits[size_t(end)] = 6;  // end whenever allowed
      int32_t t = end;
      try {
        t = sm.sample(logits.data(), int64_t(logits.size()), {});
      } catch (const std::exception &e) {
        FAIL() << "a dead end after " << reply << ": " << e.what();
      }
      if (t == end) {
        ++ended;
        const ojson v = ojson::parse(reply);  // throws on no JSON
        ASSERT_TRUE(v.is_object()) << reply;
        ASSERT_TRUE(v.contains("name") && v["name"].is_string() && v["name"].get<std::string>().size() <= 4) << reply;
        ASSERT_TRUE(v.contains("n") && v["n"].is_number_integer() && v["n"].get<int64_t>() >= 3 && v["n"].get<int64_t>() <= 40) << reply;
        if (v.contains("score")) ASSERT_TRUE(v["score"].is_number() && v["score"].get<double>() >= -1 && v["score"].get<double>() <= 1) << reply;
        if (v.contains("tags")) {
          ASSERT_TRUE(v["tags"].is_array() && v["tags"].size() <= 2) << reply;
          for (const ojson &x : v["tags"]) ASSERT_TRUE(x == "a" || x == "b") << reply;
        }
        for (const auto &[k, x] : v.items()) ASSERT_TRUE(k == "name" || k == "tags" || k == "score" || k == "n") << reply;
        break;
      }
      reply += texts[size_t(t)];
    }
  }
  EXPECT_GT(ended, 150) << "most random walks reach an end within 200 tokens";
}

// The whole-vocabulary mask (first bytes tried once) agrees with the constraint token by token,
// along a reply to a schema, over Qwen2's real 151,936-token vocabulary.
TEST(JsonSchema, MaskAgreesWithEachTokensAnswer) {
  const auto tok = minfer::test::qwen2_tokenizer();
  if (!tok) GTEST_SKIP() << "../shared/testdata not found";
  const auto vocab = minfer::sampling::constraint_vocab(*tok);
  const std::vector<std::string> &texts = vocab->texts;
  const std::vector<int32_t> &eog = vocab->eog;
  for (const bool typed : {false, true}) {
    const auto s = typed ? schema(R"({"type": "object", "properties": {"a": {"type": "string"}, "unit": {"enum": ["celsius", "kelvin"]},
                                     "n": {"type": "integer", "maximum": 50}}, "required": ["a", "unit", "n"]})")
                         : Schema::any_object();
    auto c = minfer::sampling::json_constraint(vocab, s)->fresh();
    std::vector<int64_t> counts;
    const std::string reply = typed ? R"({"a": "x y", "unit": "celsius", "n": 42})" : R"({"a": 1})";
    std::vector<std::string> pieces;
    for (const int32_t t : tok->encode(reply, false, false)) {
      std::vector<uint8_t> mask;
      c->allowed_all(tok->n_vocab(), mask);
      int64_t n = 0, differ = 0;
      for (int32_t u = 0; u < tok->n_vocab(); ++u) n += mask[size_t(u)], differ += bool(mask[size_t(u)]) != c->allows(u);
      EXPECT_EQ(differ, 0) << "before " << texts[size_t(t)];
      counts.push_back(n);
      pieces.push_back(texts[size_t(t)]);
      ASSERT_TRUE(c->allows(t)) << (typed ? "typed: " : "") << texts[size_t(t)];
      c->accept(t);
    }
    // The counts before each piece, for the assertions below.
    auto before = [&](const std::string &piece) {
      const auto it = std::find(pieces.begin(), pieces.end(), piece);
      return it == pieces.end() ? int64_t(-1) : counts[size_t(it - pieces.begin())];
    };
    for (const int32_t e : eog) EXPECT_TRUE(c->allows(e)) << "the object is closed: the end is allowed";
    std::string seen;
    for (const std::string &p : pieces) seen += "[" + p + "]";
    SCOPED_TRACE(seen);
    EXPECT_LT(counts[0], 10) << "only tokens that open with '{' start the reply";
    if (!typed) {
      EXPECT_GT(before("1"), 100) << "any value: numbers, strings, objects, arrays, literals";
    } else {
      EXPECT_GT(before(" y"), 100000) << "a's value: nearly every token";
      EXPECT_LT(before("cel"), 20) << "only celsius or kelvin";
      EXPECT_LT(counts.back(), 20) << "after 4 only a digit (<= 50) or the close";
    }
  }
}

// tool_choice auto: text is free until the reply writes <tool_call>; the call is then written
// whole, as its schema says; after </tool_call> the text is free again.
TEST(LazyConstraint, ACallOpenedInFreeTextIsWrittenWhole) {
  using minfer::sampling::ReplyPart;
  const auto call = schema(R"({"type": "object", "properties": {"name": {"const": "get"}, "arguments": {"type": "object",
      "properties": {"n": {"type": "integer"}}, "required": ["n"]}}, "required": ["name", "arguments"]})");
  std::vector<std::string> texts = {"Hi", " there", "<tool", "_call>", "\n", "{\"name\": \"get\", \"arguments\": {\"n\": ", "7",
                                    "}}", "\n</tool_call>", "x", "<tool_call>\n{\"name\": \"put\"", "<tool_call>\n{", "", ""};
  const int32_t control = 12, end = 13;
  auto c = minfer::sampling::lazy_constraint(minfer::sampling::constraint_vocab(texts, {end}), "<tool_call>",
                                             {{ReplyPart::literal, "\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}})
               ->fresh();
  auto allowed = [&] {
    std::vector<uint8_t> mask;
    c->allowed_all(int64_t(texts.size()), mask);
    std::vector<int32_t> ids;
    for (size_t t = 0; t < mask.size(); ++t)
      if (mask[t]) ids.push_back(int32_t(t));
    return ids;
  };
  EXPECT_TRUE(c->allows(0) && c->allows(9) && c->allows(end) && c->allows(control)) << "free text: anything, the end included";
  EXPECT_FALSE(c->allows(10)) << "a token that opens a call of no tool";
  EXPECT_TRUE(c->allows(11)) << "a token that opens a call well";
  c->accept(0);
  c->accept(2);  // "<tool": the trigger is not whole yet
  EXPECT_TRUE(c->allows(9));
  c->accept(3);  // "_call>": now it is, across two tokens
  EXPECT_EQ(allowed(), (std::vector<int32_t>{4})) << "only the newline after <tool_call>";
  c->accept(4);
  c->accept(5);
  EXPECT_FALSE(c->allows(end)) << "no end inside a call";
  EXPECT_FALSE(c->allows(7)) << "n is required and an integer";
  c->accept(6);
  c->accept(7);
  EXPECT_EQ(allowed(), (std::vector<int32_t>{4, 8})) << "the closing tag, or its first newline";
  c->accept(8);
  EXPECT_TRUE(c->allows(end) && c->allows(9) && c->allows(11)) << "free again: text, another call, the end";

  // parallel_tool_calls false: after one call only the end.
  auto once = minfer::sampling::lazy_constraint(minfer::sampling::constraint_vocab(texts, {end}), "<tool_call>",
                                                {{ReplyPart::literal, "\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}},
                                                {.once = true})
                  ->fresh();
  for (const int32_t t : {0, 2, 3, 4, 5, 6, 7, 8}) once->accept(t);  // text, then one whole call
  std::vector<uint8_t> mask;
  once->allowed_all(int64_t(texts.size()), mask);
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})) << "only the end";
  EXPECT_FALSE(once->allows(11)) << "no second call";
}

// Llama 3's calls: a reply that opens with '{' (after blanks) is the call's JSON object, held to
// its schema; a reply that opens with anything else is free text for good.
TEST(LazyConstraint, AReplyThatOpensWithABraceIsTheCall) {
  using minfer::sampling::ReplyPart;
  const auto call = schema(R"({"type": "object", "properties": {"name": {"const": "get"}, "parameters": {"type": "object"}},
      "required": ["name", "parameters"]})");
  std::vector<std::string> texts = {" ", "{", "\"name\": \"get\", \"parameters\": {}}", "Sure", "{x", "\"name\": \"put\"", ""};
  const int32_t end = 6;
  const auto make = [&] {
    return minfer::sampling::lazy_constraint(minfer::sampling::constraint_vocab(texts, {end}), "{", {{ReplyPart::json, {}, call}},
                                             {.at_start = true, .keep_trigger = true})
        ->fresh();
  };
  auto c = make();
  EXPECT_TRUE(c->allows(3) && c->allows(1) && c->allows(end)) << "free before anything";
  EXPECT_FALSE(c->allows(4)) << "'{x' opens no call";
  c->accept(0);  // a blank: still at the start
  EXPECT_FALSE(c->allows(4));
  c->accept(1);
  EXPECT_FALSE(c->allows(5)) << "a call of no tool";
  EXPECT_FALSE(c->allows(end)) << "no end inside the call";
  EXPECT_TRUE(c->allows(2));
  c->accept(2);
  EXPECT_TRUE(c->allows(end)) << "the call is whole";
  auto text = make();
  text->accept(3);  // "Sure": the reply is text
  EXPECT_TRUE(text->allows(4) && text->allows(1)) << "free for good after text";
}

// Mistral's name[ARGS]{...} calls (Small 3.2 and later): after [TOOL_CALLS], one of the tools'
// names and [ARGS] — a choice of texts, whichever the reply spells — then that tool's own
// arguments; in free text each [TOOL_CALLS] opens one such call.
TEST(LazyConstraint, MistralNameArgsCallsTakeTheNamedToolsArguments) {
  using minfer::sampling::ReplyPart;
  const auto clock = schema(R"({"type": "object", "properties": {}, "additionalProperties": false})");
  const auto weather = schema(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  ReplyPart call{ReplyPart::choice};
  call.choices = {{"get_time[ARGS]", clock}, {"get_weather[ARGS]", weather}};
  std::vector<std::string> texts = {"Sure", "[TOOL_CALLS]", "get_", "time", "weather", "[ARGS]", "{}", "{\"city\": \"Oslo\"}", "put", "{\"city\"", ""};
  const int32_t end = 10;
  auto c = minfer::sampling::lazy_constraint(minfer::sampling::constraint_vocab(texts, {end}), "[TOOL_CALLS]", {call})->fresh();
  EXPECT_TRUE(c->allows(0) && c->allows(8) && c->allows(end)) << "free text before a call";
  c->accept(1);
  EXPECT_FALSE(c->allows(8)) << "no tool's name begins 'put'";
  EXPECT_FALSE(c->allows(end)) << "no end inside a call";
  c->accept(2);
  EXPECT_TRUE(c->allows(3) && c->allows(4)) << "either name goes on from 'get_'";
  c->accept(4);
  EXPECT_TRUE(c->allows(5));
  EXPECT_FALSE(c->allows(6)) << "[ARGS] comes before the arguments";
  c->accept(5);
  EXPECT_FALSE(c->allows(6)) << "get_weather's arguments need a city";
  EXPECT_TRUE(c->allows(7) && c->allows(9));
  c->accept(7);
  EXPECT_TRUE(c->allows(end) && c->allows(0) && c->allows(1)) << "free again: the end, text or another call";
  // A forced call: the reply is [TOOL_CALLS] and one call, get_time's arguments those of its schema.
  auto forced = minfer::sampling::pattern_constraint(minfer::sampling::constraint_vocab(texts, {end}), {{ReplyPart::literal, "[TOOL_CALLS]"}, call});
  auto f = forced->fresh();
  EXPECT_FALSE(f->allows(0)) << "no text before the call";
  for (const int32_t t : {1, 2, 3, 5}) f->accept(t);
  EXPECT_FALSE(f->allows(7)) << "get_time takes no city";
  EXPECT_TRUE(f->allows(6));
  f->accept(6);
  EXPECT_TRUE(f->allows(end));
}
