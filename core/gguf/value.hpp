// core/gguf/value.hpp — GGUF metadata values: every scalar type, strings and nested arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace minfer::gguf {

// GGUF's metadata value type ids.
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

const char *value_type_name(ValueType t);  // "uint32", "array", ...

struct Value;

struct Array {
  ValueType elem = ValueType::U8;
  std::vector<Value> items;
};

// One metadata value. Integers keep their signedness; the declared GGUF type is kept too,
// so a file written back is identical.
struct Value {
  ValueType type = ValueType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> v;

  static Value u32(uint32_t x) { return {ValueType::U32, uint64_t(x)}; }
  static Value i32(int32_t x) { return {ValueType::I32, int64_t(x)}; }
  static Value u64(uint64_t x) { return {ValueType::U64, x}; }
  static Value f32(float x) { return {ValueType::F32, double(x)}; }
  static Value boolean(bool x) { return {ValueType::BOOL, x}; }
  static Value str(std::string s) { return {ValueType::STRING, std::move(s)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, std::make_shared<Array>(Array{elem, std::move(items)})};
  }
  static Value strings(const std::vector<std::string> &items);

  const Array &arr() const { return *std::get<std::shared_ptr<Array>>(v); }
  bool is_integer() const;
  std::string to_string(size_t max_items = 8) const;  // for `info`: arrays abbreviated
};

}  // namespace minfer::gguf
