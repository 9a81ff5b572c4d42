// core/sampling/gbnf.hpp — llama.cpp's GBNF grammars (its `grammar` request field): rules of
// literals, character classes, references, groups, alternatives and repetitions, `root` the
// reply. A grammar compiles once; a GrammarState follows a reply code point by code point as
// a set of parse stacks (every way the text so far can continue), and gbnf_constraint()
// holds a sampler to the replies the grammar allows, the end only where `root` is complete.
//
// Syntax (llama.cpp's grammars/README.md): `name ::= alternatives`; a rule's alternatives
// continue over lines only inside parentheses or after `|`; "literal" and [class] with \n \r
// \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH escapes; [^...] negates; `.` is any character; `*`, `+`,
// `?`, `{m}`, `{m,}`, `{m,n}` repeat the element before them; `#` comments to the line's end.
// Left recursion (a rule that can begin with itself) is an error naming the rule.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sampling/json_constraint.hpp"

namespace minfer::sampling {

class Grammar {
 public:
  // Throws minfer::Error with the line and column of what is wrong, or the rule that is missing.
  static std::shared_ptr<const Grammar> compile(const std::string &text);

  struct CharSet {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive
    bool negated = false;
    bool contains(uint32_t c) const;
    bool meets(uint32_t lo, uint32_t hi) const;  // some code point of [lo, hi] is in the set
  };
  struct Sym {
    int32_t rule = -1;  // >= 0: a reference to that rule; else the character set
    CharSet chars;
  };
  using Alt = std::vector<Sym>;
  const std::vector<std::vector<Alt>> &rules() const { return rules_; }
  int32_t root() const { return root_; }

 private:
  friend class GrammarParser;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  int32_t root_ = -1;
};

// Where a reply is in the grammar: the parse stacks its text leaves (each a path of rule
// positions whose top is a character set, or empty: root complete), and the bytes of a code
// point a token left unfinished.
class GrammarState {
 public:
  struct Pos {
    int32_t rule, alt, idx;
    auto operator<=>(const Pos &) const = default;
  };
  using Stack = std::vector<Pos>;

  explicit GrammarState(std::shared_ptr<const Grammar> g);
  bool feed(const std::string &bytes);  // false: the text cannot continue so (the state is then unchanged)
  bool can_end() const;                 // the reply may end here (as SchemaState's)
  bool dead() const { return stacks_.empty(); }

  // The stacks that go on from `stacks` after code point cp (sorted, distinct; empty: none).
  static std::vector<Stack> advance(const Grammar &g, const std::vector<Stack> &stacks, uint32_t cp);
  // Whether an unfinished UTF-8 sequence begins a code point some stack could take.
  static bool partial_ok(const Grammar &g, const std::vector<Stack> &stacks, const std::string &p);

 private:
  friend class GrammarConstraint;
  // One step's expansion. Ways through rules that match nothing meet again on the same stack
  // and would be followed once per way: exponential in a repetition of such alternatives,
  // ("a" | "b"* | "c"*){2,50}. So past a few hundred steps (ordinary grammars take a few
  // dozen) the stacks where an alternative ended are recorded in `seen`, and each goes on once.
  struct Expansion {
    size_t steps = 0;
    std::set<Stack> seen;
    std::vector<Stack> todo;  // alternatives waiting (a list, not the call stack: a chain of
                              // 50,000 rules r ::= "x" | r' once recursed as deep)
  };
  static void expand(const Grammar &g, Stack s, std::vector<Stack> &out, Expansion &x);
  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;  // sorted, distinct
  std::string pending_;        // an unfinished UTF-8 sequence
};

// The reply is text of the grammar's root, then the end (vocab: its texts and end tokens).
std::shared_ptr<const TokenConstraint> gbnf_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const Grammar> grammar);

}  // namespace minfer::sampling
