// core/sampling/regex.hpp — JSON Schema's "pattern" (and the string formats) as an automaton over
// code points, for constrained decoding of string values.
//
// The ECMA-262 subset schemas use: literals (any Unicode), '.', classes [a-z_] and [^...],
// \d \w \s and their complements, escapes (\. \n \t \xHH \uHHHH ...), groups ( ), (?: ) and
// (?<name> ), alternation |, quantifiers ? * + {n} {n,} {n,m} (a lazy '?' after them changes
// nothing here). '^' and '$' anchor only at the ends; a side without one matches anywhere, as
// JSON Schema says. Back-references, look-arounds and \b are refused.
//
// Glushkov's construction: one position per character class in the expanded pattern (at most
// 128), so the state is a bit set of the positions last matched and a step is a few masks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace minfer::sampling {

class Regex {
 public:
  static constexpr int kMaxPositions = 128;
  struct Set {
    uint64_t w[2] = {0, 0};
    bool has(int p) const { return w[p >> 6] >> (p & 63) & 1; }
    void add(int p) { w[p >> 6] |= uint64_t(1) << (p & 63); }
    Set &operator|=(const Set &o) { return w[0] |= o.w[0], w[1] |= o.w[1], *this; }
    bool empty() const { return !w[0] && !w[1]; }
    bool operator==(const Set &) const = default;
  };
  // Where a match stands: `started` false before the first code point, else the positions the
  // last one matched.
  struct State {
    Set at;
    bool started = false;
    bool operator==(const State &) const = default;
  };

  // Throws minfer::Error naming the pattern and what in it is not supported.
  static std::shared_ptr<const Regex> compile(const std::string &pattern);

  bool step(State &s, uint32_t cp) const;                   // false: cp cannot come next
  bool can_take(const State &s, uint32_t lo, uint32_t hi) const;  // some code point in [lo, hi] can
  bool can_end(const State &s) const;
  const std::string &source() const { return source_; }

  struct Class {  // code points, as sorted disjoint ranges
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool contains(uint32_t cp) const;
    bool meets(uint32_t lo, uint32_t hi) const;
  };

 private:
  friend class RegexBuilder;
  Set next_of(const State &s) const;  // the positions the next code point may match
  std::string source_;
  std::vector<Class> classes_;  // per position
  std::vector<Set> follow_;     // per position
  Set first_, last_;
  bool nullable_ = false;
};

}  // namespace minfer::sampling
