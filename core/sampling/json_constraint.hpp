// core/sampling/json_constraint.hpp — constrained decoding for OpenAI's response_format
// {"type": "json_object"}: only tokens that keep the reply a prefix of one JSON object, and
// once the object is closed only an end-of-generation token.
//
// A pushdown automaton over the reply's characters (RFC 8259: objects, arrays, strings with
// escapes, numbers, true/false/null; between tokens one space, or a newline and at most 20
// spaces of indentation, as llama.cpp's json.gbnf allows, so a model cannot stall in blanks;
// the reply opens with its "{"). A token is allowed when its text,
// fed character by character to a copy of the state, is never refused. Control tokens (no
// text) are refused, end-of-generation tokens allowed only once the object is closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace minfer::sampling {

// What a sampler asks of a constraint; one per sequence (fresh() makes another in the
// starting state).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(int32_t token) const = 0;
  // allowed[t] = allows(t) for the whole vocabulary of n tokens (a constraint may do it faster
  // than one token at a time).
  virtual void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const {
    allowed.assign(size_t(n), 0);
    for (int64_t t = 0; t < n; ++t) allowed[size_t(t)] = allows(int32_t(t));
  }
  virtual void accept(int32_t token) = 0;  // the token chosen (allowed)
  virtual std::unique_ptr<TokenConstraint> fresh() const = 0;
};

// The JSON automaton's state, for tests and for the constraint.
class JsonState {
 public:
  bool feed(char c);  // false: c cannot follow; the state is then unspecified
  bool feed(const std::string &s) {
    for (char c : s)
      if (!feed(c)) return false;
    return true;
  }
  bool complete() const { return mode_ == Mode::done; }
  // Inside a string, past any escape: text of bytes >= 0x20 but '"' and '\\' keeps it there.
  bool in_string() const { return mode_ == Mode::string; }

 private:
  enum class Mode : uint8_t {
    start, value, key_or_close, key, colon, after_value, value_or_close,  // structure
    string, escape, unicode,                                             // strings (key_: a key)
    minus, zero, integer, dot, fraction, exp_mark, exp_sign, exponent,   // numbers
    literal, done
  };
  bool after_value_char(char c);
  bool blank_ok(char c);
  bool close();
  bool value_char(char c);
  Mode mode_ = Mode::start;
  std::string stack_;      // '{' or '[' per open container
  std::string literal_;    // the rest of true / false / null being written
  int hex_left_ = 0, blanks_ = 0;  // blanks_: the current run of blanks
  bool key_ = false, newline_run_ = false;
};

// A reply written to a pattern, part after part: a literal text, one of several texts (prefix-
// free: a text is chosen when it is whole), a JSON object; then only the end of generation.
// Forced tool calls are <tool_call>\n{"name": "  one of NAME"  , "arguments":  an object  }\n</tool_call>.
struct ReplyPart {
  enum Kind { literal, one_of, json_object } kind;
  std::vector<std::string> texts;  // literal: one; one_of: the choices; json_object: none
};

class PatternState {
 public:
  explicit PatternState(std::shared_ptr<const std::vector<ReplyPart>> parts) : parts_(std::move(parts)) { begin_part(); }
  bool feed(char c);  // false: c cannot come next
  bool feed(const std::string &s) {
    for (char c : s)
      if (!feed(c)) return false;
    return true;
  }
  bool complete() const { return part_ >= parts_->size(); }
  bool in_string() const { return !complete() && (*parts_)[part_].kind == ReplyPart::json_object && json_.in_string(); }
  const std::shared_ptr<const std::vector<ReplyPart>> &parts() const { return parts_; }

 private:
  void next();        // on to the next part
  void begin_part();  // the part's starting state
  std::shared_ptr<const std::vector<ReplyPart>> parts_;
  size_t part_ = 0, at_ = 0;     // the part, and the characters of it written
  std::vector<uint32_t> alive_;  // one_of: the choices the text so far matches
  JsonState json_;
};

// The constraints over a vocabulary: texts[t] is token t's text (control tokens empty); eog:
// the end-of-generation tokens. json_object_constraint = one json_object part.
std::shared_ptr<const TokenConstraint> pattern_constraint(std::shared_ptr<const std::vector<std::string>> texts, std::vector<int32_t> eog,
                                                          std::vector<ReplyPart> parts);
std::shared_ptr<const TokenConstraint> json_object_constraint(std::shared_ptr<const std::vector<std::string>> texts,
                                                              std::vector<int32_t> eog);

}  // namespace minfer::sampling
