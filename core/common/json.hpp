// core/common/json.hpp — a minimal JSON writer for the tools' --json output.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/utf8.hpp"

namespace minfer::json {

// A JSON string literal. JSON must be valid UTF-8: ill-formed bytes become U+FFFD by the
// rule the text stream follows too (utf8.hpp), so --json and the stream print the same text.
inline std::string quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const utf8::Scan sc = utf8::scan(s, i);
      if (sc.kind == utf8::Scan::Valid) out.append(s.substr(i, sc.len));
      else out += "\\ufffd";
      i += sc.len;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
    ++i;
  }
  return out + "\"";
}

inline std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace minfer::json
