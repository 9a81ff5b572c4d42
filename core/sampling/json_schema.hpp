// core/sampling/json_schema.hpp — JSON Schema as a character automaton, for constrained decoding
// (OpenAI's response_format json_schema and json_object, and forced tool calls' arguments).
//
// A schema compiles to a graph of nodes (objects, arrays, strings, numbers, literal values,
// alternatives); a SchemaState walks it character by character. The subset is what structured-
// output clients send (OpenAI's strict mode, Pydantic, Zod): type (one or several), properties,
// required, additionalProperties, minProperties/maxProperties, items, prefixItems,
// minItems/maxItems, enum, const, anyOf/
// oneOf, allOf of objects, $ref into the same document (recursion included), minLength/
// maxLength, pattern (regex.hpp), the formats date, time, date-time, uuid, email, ipv4 and uri,
// minimum/maximum and their exclusive forms, multipleOf on integers. As llama.cpp's schema converter does: object keys come in the schema's order, a
// required key is never skipped, and an object that lists properties takes no others unless
// additionalProperties says so. Numbers have at most 16 integer and 16 fraction digits.
//
// Blanks between tokens as llama.cpp's json.gbnf allows them: one space or tab, or a newline
// and at most 20 spaces or tabs of indentation (a model cannot stall in blank lines); none
// before the first value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/regex.hpp"

namespace minfer::sampling {

struct SchemaNode {
  enum Kind : uint8_t { any_of, object, array, string, number, integer, literal };
  struct Property {
    std::string key;  // as JSON writes it, quotes included
    int32_t node = -1;
    bool required = false;
  };
  Kind kind = any_of;
  std::vector<int32_t> alts;        // any_of: the alternatives
  std::vector<Property> props;      // object: in the schema's order
  int32_t extra = -1;               // object: the node of keys not listed (-1: none taken)
  std::vector<int32_t> prefix;      // array: the first items' nodes
  int32_t items = -1;               // array: the node of the items after them (-1: none)
  bool unique = false;              // array: uniqueItems (its items scalars: compared as written)
  int64_t min_n = 0, max_n = -1;    // array: items; string: characters; object: keys (max -1: no limit)
  std::vector<std::string> texts;   // literal: the values as compact JSON
  std::shared_ptr<const Regex> pattern;  // string: its pattern, or its format's
  bool has_lo = false, has_hi = false, lo_excl = false, hi_excl = false;  // number, integer
  double lo = 0, hi = 0;
  // multipleOf = multiple / 10^scale (0: none): a value is one when value * 10^scale, written
  // with at most `scale` fraction digits, is a whole multiple of `multiple` (0.25: 25 / 10^2).
  int64_t multiple = 0;
  int32_t scale = 0;
};

class Schema {
 public:
  // strict: a keyword that constrains values in a way this automaton does not enforce (pattern,
  // not, multipleOf, ...) is an error; otherwise it is ignored (a tool's parameters still get
  // their types and keys). Errors name the place in the schema ("#/properties/x: ...").
  static std::shared_ptr<const Schema> compile(const nlohmann::ordered_json &schema, bool strict);
  static std::shared_ptr<const Schema> any_object();  // response_format json_object
  static std::shared_ptr<const Schema> any_value();

  const SchemaNode &node(int32_t i) const { return nodes_[size_t(i)]; }
  int32_t root() const { return root_; }
  size_t size() const { return nodes_.size(); }

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
  int32_t root_ = -1;
};

// Where the reply stands in the schema's automaton. Alternatives (anyOf, and the types a value's
// first character leaves open) run side by side as threads until all but one die.
class SchemaState {
 public:
  explicit SchemaState(std::shared_ptr<const Schema> schema);
  bool feed(char c);  // false: c cannot come next (the state is then unchanged)
  bool feed(const std::string &s) {
    for (char c : s)
      if (!feed(c)) return false;
    return true;
  }
  bool can_end() const;   // the text so far is one whole value
  bool settled() const;   // ... that nothing can extend (its object, array or string is closed)
  bool in_plain_string() const;  // inside a string without limits, past any escape: text of
                                 // bytes >= 0x20 but '"' and '\\' keeps the value going

  // One container or value being written (json_schema.cpp says what each field holds per kind).
  struct Frame {
    enum Kind : uint8_t { value, object, array, string, number, literal };
    Kind kind = value;
    uint8_t phase = 0;
    uint8_t esc = 0;        // strings and keys: 0, 1 after a backslash, 2-5: \u hex digits left + 1
    bool free_key = false;  // object key: it may still be one the schema does not list
    bool neg = false;       // number: a minus sign
    uint8_t int_digits = 0, frac_digits = 0;
    int32_t node = -1;
    int32_t next = 0;       // object: the first property not passed; array: the items written
    int32_t child = -1;     // object, array: the node of the value being written
    int32_t lo = -1;        // a candidate text matching so far (object: an eligible key; literal: a value)
    int32_t lo_all = -1;    // object: a listed key matching so far, eligible or not
    int32_t at = 0;         // characters matched (keys, literals, formats); number: exponent digits
    int64_t len = 0;        // string: characters written; number: the integer part; object: keys written
    int64_t frac = 0;       // number: the fraction digits as an integer
    uint32_t cp = 0;        // string with a pattern: the code point being read (UTF-8 or \\u)
    uint8_t pending = 0;    // ... its UTF-8 continuation bytes still to come
    Regex::State re;        // ... the pattern's state
    // array with uniqueItems: the items written so far, and the text of the one being written
    std::shared_ptr<const std::vector<std::string>> seen;
    std::string item;
    bool operator==(const Frame &) const = default;
  };
  struct Thread {
    std::vector<Frame> stack;
    uint8_t blanks = 0;  // the current run of blanks between tokens
    bool newline_run = false;
    bool operator==(const Thread &) const = default;
  };

 private:
  void step(Thread t, char c, std::vector<Thread> &out) const;
  std::shared_ptr<const Schema> schema_;
  std::vector<Thread> threads_;
};

}  // namespace minfer::sampling
