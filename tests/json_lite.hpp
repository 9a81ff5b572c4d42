// tests/json_lite.hpp — just enough JSON to read the reference files: objects, arrays,
// numbers, strings (with \u escapes), true/false/null.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/unicode.hpp"

namespace minfer::test {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double num = 0;
  bool b = false;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json &operator[](const std::string &k) const {
    auto it = obj.find(k);
    if (it == obj.end()) throw std::runtime_error("json: no key '" + k + "'");
    return it->second;
  }
  std::vector<int32_t> ints() const {
    std::vector<int32_t> v;
    for (const auto &x : arr) v.push_back(int32_t(x.num));
    return v;
  }
  std::vector<float> floats() const {
    std::vector<float> v;
    for (const auto &x : arr) v.push_back(float(x.num));
    return v;
  }

  static Json parse(const std::string &s) {
    size_t i = 0;
    Json j = value(s, i);
    return j;
  }

 private:
  static void ws(const std::string &s, size_t &i) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  static Json value(const std::string &s, size_t &i) {
    ws(s, i);
    Json j;
    if (i >= s.size()) throw std::runtime_error("json: unexpected end");
    const char c = s[i];
    if (c == '{') {
      j.kind = Object;
      ++i;
      ws(s, i);
      if (s[i] == '}') return ++i, j;
      for (;;) {
        ws(s, i);
        const std::string k = string(s, i);
        ws(s, i);
        ++i;  // ':'
        j.obj[k] = value(s, i);
        ws(s, i);
        if (s[i++] == '}') return j;
      }
    }
    if (c == '[') {
      j.kind = Array;
      ++i;
      ws(s, i);
      if (s[i] == ']') return ++i, j;
      for (;;) {
        j.arr.push_back(value(s, i));
        ws(s, i);
        if (s[i++] == ']') return j;
      }
    }
    if (c == '"') {
      j.kind = String;
      j.str = string(s, i);
      return j;
    }
    if (s.compare(i, 4, "true") == 0) return i += 4, j.kind = Bool, j.b = true, j;
    if (s.compare(i, 5, "false") == 0) return i += 5, j.kind = Bool, j;
    if (s.compare(i, 4, "null") == 0) return i += 4, j;
    j.kind = Number;
    size_t used = 0;
    j.num = std::stod(s.substr(i, 64), &used);
    i += used;
    return j;
  }
  static std::string string(const std::string &s, size_t &i) {
    std::string out;
    ++i;  // opening quote
    while (s[i] != '"') {
      if (s[i] != '\\') {
        out += s[i++];
        continue;
      }
      const char e = s[i + 1];
      i += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t cp = uint32_t(std::stoul(s.substr(i, 4), nullptr, 16));
          i += 4;
          if (cp >= 0xD800 && cp < 0xDC00 && s[i] == '\\' && s[i + 1] == 'u') {
            const uint32_t lo = uint32_t(std::stoul(s.substr(i + 2, 4), nullptr, 16));
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
          out += tokenizer::utf8_encode(cp);
          break;
        }
        default: out += e;
      }
    }
    ++i;
    return out;
  }
};

}  // namespace minfer::test
