// tests/fuzz/constraint_vocab.hpp — a small vocabulary for the constraint fuzz targets: every
// single byte, common multi-byte pieces of JSON and text, UTF-8 characters whole and split,
// and an end-of-generation token (0, no text), so masks walk shared prefixes as with a real one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sampling/json_constraint.hpp"

inline std::shared_ptr<const minfer::sampling::ConstraintVocab> fuzz_vocab() {
  std::vector<std::string> texts{""};
  for (int b = 1; b < 256; ++b) texts.emplace_back(1, char(b));
  for (const char *t : {"ab", "abc", " the", "the", "{\"", "\":", "\": \"", "\",", "\"}", "}}", "[{", "]}", "true", "false", "null", "0.", "12",
                        "-1", "1e", "\\n", "\\u00", "\n  ", "  ", "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x8e", "\x89", "\xe6", "a\xc3",
                        "yes", "no", "<tool_call>", "</tool_call>", "name", "arguments"})
    texts.emplace_back(t);
  return minfer::sampling::constraint_vocab(std::move(texts), {0});
}

// A few steps of constrained decoding: the whole-vocabulary mask, then the first allowed token
// after `pick` (a token of the input) taken.
inline void fuzz_decode(const minfer::sampling::TokenConstraint &c, const std::string &picks) {
  const auto v = fuzz_vocab();
  auto s = c.fresh();
  std::vector<uint8_t> allowed;
  const int64_t n = int64_t(v->texts.size());
  for (size_t step = 0; step < 6; ++step) {
    s->allowed_all(n, allowed);
    const int64_t start = step < picks.size() ? static_cast<unsigned char>(picks[step]) % n : 0;
    int64_t t = -1;
    for (int64_t i = 0; i < n && t < 0; ++i)
      if (allowed[size_t((start + i) % n)]) t = (start + i) % n;
    if (t < 0 || t == 0) return;  // nothing allowed, or the end
    if (!s->allows(int32_t(t))) __builtin_trap();  // the mask and the one-token check must agree
    s->accept(int32_t(t));
  }
}
