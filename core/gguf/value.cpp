#include "gguf/value.hpp"

#include <cstdio>

namespace minfer::gguf {

const char *value_type_name(ValueType t) {
  static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  const auto i = uint32_t(t);
  return i < kValueTypeCount ? names[i] : "unknown";
}

Value Value::strings(const std::vector<std::string> &items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto &s : items) v.push_back(str(s));
  return array(ValueType::STRING, std::move(v));
}

bool Value::is_integer() const { return is_integer_type(type); }

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

std::string Value::to_string(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      const auto &s = std::get<std::string>(v);
      std::string out = "\"";
      for (char c : s.size() > 120 ? s.substr(0, 117) + "..." : s)
        out += c == '\n' ? std::string("\\n") : std::string(1, c);
      return out + "\"";
    }
    case ValueType::BOOL: return std::get<bool>(v) ? "true" : "false";
    case ValueType::F32: case ValueType::F64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", std::get<double>(v));
      return buf;
    }
    case ValueType::ARRAY: {
      const Array &a = arr();
      std::string out = std::string("[") + value_type_name(a.elem) + " x " + std::to_string(a.size()) + "]";
      if (a.size() == 0) return out;
      out += " ";
      const std::vector<Value> &items = a.items();
      for (size_t i = 0; i < items.size() && i < max_items; ++i) out += (i ? ", " : "") + items[i].to_string(3);
      return out + (items.size() > max_items ? ", ..." : "");
    }
    default:
      if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
      return std::to_string(std::get<uint64_t>(v));
  }
}

}  // namespace minfer::gguf
