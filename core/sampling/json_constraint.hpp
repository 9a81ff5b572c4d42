// core/sampling/json_constraint.hpp — constrained decoding: only tokens that keep the reply a
// prefix of what it must be (response_format's JSON schema or object, a forced tool call), and
// the end of generation only once it is whole.
//
// A token is allowed when its text, fed character by character to a copy of the state
// (json_schema.hpp's automaton for JSON parts), is never refused. Control tokens (no text) are
// refused; end-of-generation tokens are allowed only where the reply may end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sampling/json_schema.hpp"

namespace minfer::tokenizer {
class Tokenizer;
}

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
  // Where the constraint allows nothing (a schema that contradicts itself, say maxLength
  // against a pattern): the token that ends the reply, or -1 for none.
  virtual int32_t dead_end_token() const { return -1; }
  virtual std::unique_ptr<TokenConstraint> fresh() const = 0;
};

// A reply written to a pattern, part after part: a literal text, a JSON value of a schema, or
// a choice of literal texts each followed by a JSON value of its own schema; then only the end
// of generation. A forced tool call is <tool_call>\n, one JSON object (the call: a name one of
// the tools', arguments that tool's parameters), \n</tool_call>; Mistral's name[ARGS]{...}
// call is a choice (the text a tool's name and [ARGS], the schema its parameters).
struct ReplyChoice {
  std::string text;
  std::shared_ptr<const Schema> schema;
};
struct ReplyPart {
  enum Kind { literal, json, choice } kind;
  std::string text;                            // literal
  std::shared_ptr<const Schema> schema = {};   // json
  std::vector<ReplyChoice> choices = {};       // choice (texts none of which begins another)
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
  bool complete() const;  // the reply may end here
  bool in_string() const { return json_ && json_->in_plain_string(); }
  const std::shared_ptr<const std::vector<ReplyPart>> &parts() const { return parts_; }

 private:
  void next();        // on to the next part
  void begin_part();  // the part's starting state
  std::shared_ptr<const std::vector<ReplyPart>> parts_;
  size_t part_ = 0, at_ = 0;         // the part, and the characters of a literal (or a choice's texts) written
  std::optional<SchemaState> json_;  // a json part's state, or a choice's once its text is whole
  std::vector<uint32_t> live_;       // a choice's texts still matching what is written
};

// A vocabulary as constraints read it, made once per model: texts[t] is token t's text
// (control tokens empty), eog the end-of-generation tokens, string_safe[t] whether t's text is
// plain string bytes (no quote, backslash or control byte; not an end).
struct ConstraintVocab {
  std::vector<std::string> texts;
  std::vector<int32_t> eog;
  std::vector<uint8_t> string_safe;
};
std::shared_ptr<const ConstraintVocab> constraint_vocab(std::vector<std::string> texts, std::vector<int32_t> eog);
// A tokenizer's: each token's bytes (control tokens empty) and its end-of-generation tokens.
std::shared_ptr<const ConstraintVocab> constraint_vocab(const tokenizer::Tokenizer &tok);

// The reply follows the parts; json_constraint: the reply is one value of the schema.
std::shared_ptr<const TokenConstraint> pattern_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::vector<ReplyPart> parts);
std::shared_ptr<const TokenConstraint> json_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const Schema> schema);
// Free text until the reply writes `trigger`; from there the parts, to their end; then free
// again (a tool call the model opens is written whole and as its schema says).
struct LazyOptions {
  bool once = false;          // after the parts, only the end (parallel_tool_calls false)
  bool at_start = false;      // only a trigger that opens the reply (after blanks) counts
  bool keep_trigger = false;  // the trigger's text is the parts' own beginning
};
std::shared_ptr<const TokenConstraint> lazy_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::string trigger, std::vector<ReplyPart> parts,
                                                       LazyOptions o = {});

}  // namespace minfer::sampling
