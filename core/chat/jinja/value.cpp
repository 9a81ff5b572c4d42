#include "chat/jinja/value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "common/utf8.hpp"

namespace minfer::jinja {

Value Value::function(std::string name, Function f) {
  Value v = make(Kind::Function);
  v.str_ = std::make_shared<std::string>(std::move(name));
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::namespace_object(Dict attrs) {
  Value v(std::move(attrs));
  v.namespace_ = true;
  return v;
}

const Value *Value::find(const std::string &key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto &[k, v] : *dict_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0;
    case Kind::String: return !str_->empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  int prec = 1;
  for (; prec <= 17; ++prec) {  // the fewest significant digits that read back as v
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  const std::string sci = buf;
  const int exp = std::atoi(sci.c_str() + sci.find('e') + 1);
  if (exp >= -4 && exp < 16) {  // Python writes these without an exponent
    std::snprintf(buf, sizeof buf, "%.*f", std::max(0, prec - 1 - exp), v);
    std::string s = buf;
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  // 1e+16, 1.5e-05: the mantissa without trailing zeros, at least two exponent digits.
  std::string mant = sci.substr(0, sci.find('e'));
  if (mant.find('.') != std::string::npos) {
    while (mant.back() == '0') mant.pop_back();
    if (mant.back() == '.') mant.pop_back();
  }
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return mant + e;
}

namespace {

std::string repr_string(const std::string &s) {
  // Python prefers single quotes, and double ones when the text has a ' but no ".
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + char(q);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += char(c);
  }
  return out + char(q);
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return int_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return float_repr(float_);
    case Kind::String: return *str_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::String: return repr_string(*str_);
    case Kind::List: {
      std::string s = "[";
      for (size_t i = 0; i < list_->size(); ++i) s += (i ? ", " : "") + (*list_)[i].repr();
      return s + "]";
    }
    case Kind::Dict: {
      if (namespace_) return "<Namespace>";
      std::string s = "{";
      for (size_t i = 0; i < dict_->size(); ++i) s += (i ? ", " : "") + repr_string((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      return s + "}";
    }
    case Kind::Function: return "<function " + *str_ + ">";
    default: return str();
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return namespace_ ? "Namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

bool equal(const Value &a, const Value &b) {
  using K = Value::Kind;
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.as_string() == b.as_string();
    case K::List: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case K::Dict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto &[k, v] : x) {
        const Value *o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    case K::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

bool less(const Value &a, const Value &b, bool &comparable) {
  comparable = true;
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) return a.as_float() < b.as_float();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(x[i], y[i], comparable);
    }
    return x.size() < y.size();
  }
  comparable = false;
  return false;
}

namespace {

void json_string(const std::string &s, bool ensure_ascii, std::string &out) {
  out += '"';
  const std::string clean = utf8::sanitize(s);
  for (size_t i = 0; i < clean.size();) {
    const unsigned char c = static_cast<unsigned char>(clean[i]);
    if (c >= 0x80) {
      const utf8::Scan sc = utf8::scan(clean, i);
      if (!ensure_ascii) {
        out.append(clean, i, sc.len);
      } else {
        uint32_t cp = c & (sc.len == 2 ? 0x1F : sc.len == 3 ? 0x0F : 0x07);
        for (size_t k = 1; k < sc.len; ++k) cp = (cp << 6) | (uint8_t(clean[i + k]) & 0x3F);
        char b[16];
        if (cp >= 0x10000) {
          cp -= 0x10000;
          std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
          std::snprintf(b, sizeof b, "\\u%04x", cp);
        }
        out += b;
      }
      i += sc.len;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
    ++i;
  }
  out += '"';
}

void json_value(const Value &v, bool ensure_ascii, int indent, int depth, const std::string &item_sep, const std::string &key_sep,
                bool sort_keys, std::string &out) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::String: json_string(v.as_string(), ensure_ascii, out); return;
    case Value::Kind::List: {
      const List &l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_value(l[i], ensure_ascii, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<std::string, Value> *> items;
      for (const auto &kv : v.as_dict()) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto *a, auto *b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        json_string(items[i]->first, ensure_ascii, out);
        out += key_sep;
        json_value(items[i]->second, ensure_ascii, indent, depth + 1, item_sep, key_sep, sort_keys, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    default: throw std::runtime_error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value &v, bool ensure_ascii, int indent, const std::string &item_sep, const std::string &key_sep,
                    bool sort_keys) {
  std::string out;
  json_value(v, ensure_ascii, indent, 0, item_sep, key_sep, sort_keys, out);
  return out;
}

}  // namespace minfer::jinja
