// core/common/json.hpp — JSON for the tools' --json output and the trace, on nlohmann-json.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace minfer::json {

using Json = nlohmann::ordered_json;  // keys stay in the order they were written

// One line (indent < 0) or indented. Bytes that are no UTF-8 become U+FFFD, one per maximal
// ill-formed subpart: the rule of common/utf8.hpp, so --json and the text stream agree.
inline std::string dump(const Json &j, int indent = -1) { return j.dump(indent, ' ', false, Json::error_handler_t::replace); }

// The deepest nesting of objects and arrays in a JSON text (brackets inside strings not
// counted), without parsing it. Text from outside (requests, a model's output) is checked
// before it is parsed: copying or printing a value recurses once per level, and tens of
// thousands of levels overflow a thread's stack.
// A JSON text's nesting read one character at a time (brackets inside strings not counted).
struct NestingScan {
  int depth = 0;
  bool in_string = false, escaped = false;
  // Reads c; true when c closed the outermost open object or array.
  bool feed(char c) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      return false;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return true;
    return false;
  }
};

inline int nesting_depth(std::string_view text) {
  NestingScan scan;
  int deepest = 0;
  for (const char c : text) {
    scan.feed(c);
    deepest = std::max(deepest, scan.depth);
  }
  return deepest;
}
constexpr int kMaxNesting = 128;  // what minfer parses from outside, at most

// A number, or null where JSON has none (NaN, infinities).
inline Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace minfer::json
