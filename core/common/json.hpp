// core/common/json.hpp — JSON for the tools' --json output and the trace, on nlohmann-json.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace minfer::json {

using Json = nlohmann::ordered_json;  // keys stay in the order they were written

// One line (indent < 0) or indented. Bytes that are no UTF-8 become U+FFFD, one per maximal
// ill-formed subpart: the rule of common/utf8.hpp, so --json and the text stream agree.
inline std::string dump(const Json &j, int indent = -1) { return j.dump(indent, ' ', false, Json::error_handler_t::replace); }

// A JSON text's nesting read one character at a time (brackets inside strings not counted).
// Text from outside (requests, a model's output) is checked before it is parsed (see
// parse_refusal): copying or printing a value recurses once per level, and tens of thousands
// of levels overflow a thread's stack.
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

constexpr int kMaxNesting = 128;  // what minfer parses from outside, at most

// What reading a JSON text into a Json would cost in keys: the sum over its objects of their
// key counts squared. An ordered_json object looks each new key up among those before it, so
// 100,000 keys in a 1 MB request body took 13 s to parse (16 MiB: most of an hour).
constexpr uint64_t kMaxKeyCost = uint64_t(1) << 24;  // ~40 ms of parsing; one object of 4,096 keys

// Why a JSON text from outside (a request, a model's output) must not be parsed, or "" when
// it may: nesting past kMaxNesting, or keys past kMaxKeyCost. One pass, without parsing.
inline std::string parse_refusal(std::string_view text) {
  NestingScan scan;
  // Per open object or array: whether it is an object, its commas, whether it has a member.
  struct Open {
    bool object;
    uint64_t commas;
    bool any;
  };
  std::vector<Open> open;
  uint64_t cost = 0;
  for (const char c : text) {
    const bool was_string = scan.in_string;
    const int before = scan.depth;
    scan.feed(c);
    if (scan.depth > kMaxNesting) return "nests deeper than " + std::to_string(kMaxNesting) + " levels";
    if (was_string || scan.in_string) {
      if (!open.empty()) open.back().any = true;
      continue;
    }
    if (scan.depth > before) {
      if (!open.empty()) open.back().any = true;
      open.push_back({c == '{', 0, false});
    } else if (scan.depth < before) {
      if (!open.empty()) {
        const Open o = open.back();
        open.pop_back();
        const uint64_t keys = o.any ? o.commas + 1 : 0;
        if (o.object && (cost += keys * keys) > kMaxKeyCost)
          return "has objects with too many keys to read (one object may have up to 4,096, and large ones count together); send fewer keys";
      }
    } else if (!open.empty() && c == ',') {
      ++open.back().commas;
    } else if (!open.empty() && c != ' ' && c != '\n' && c != '\r' && c != '\t') {
      open.back().any = true;
    }
  }
  return "";
}

// A number, or null where JSON has none (NaN, infinities).
inline Json number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace minfer::json
