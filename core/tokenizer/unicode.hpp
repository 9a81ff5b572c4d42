// core/tokenizer/unicode.hpp — UTF-8 and the code point classes the pre-tokenizers use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace minfer::tokenizer {

struct CodepointRange {
  uint32_t first, last;
};

namespace tables {
extern const CodepointRange kLetters[];
extern const size_t kLetters_count;
extern const CodepointRange kNumbers[];
extern const size_t kNumbers_count;
extern const CodepointRange kMarks[];
extern const size_t kMarks_count;
extern const CodepointRange kPunctuation[];
extern const size_t kPunctuation_count;
extern const CodepointRange kSymbols[];
extern const size_t kSymbols_count;
}  // namespace tables

bool is_letter(uint32_t cp);      // \p{L}
bool is_number(uint32_t cp);      // \p{N}
bool is_mark(uint32_t cp);        // \p{M}
bool is_punctuation(uint32_t cp); // \p{P}
bool is_symbol(uint32_t cp);      // \p{S}
bool is_whitespace(uint32_t cp);  // \s: Unicode White_Space

// Decodes UTF-8; an invalid byte becomes U+FFFD (one per byte), never an error.
std::vector<uint32_t> utf8_decode(const std::string &s);
std::string utf8_encode(uint32_t cp);
// Length of the UTF-8 sequence a lead byte starts (1 for an invalid lead byte).
size_t utf8_len(uint8_t lead);

}  // namespace minfer::tokenizer
