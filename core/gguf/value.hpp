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
bool is_integer_type(ValueType t);

struct Value;

// An array's items. One read from a mapped file keeps its strings and numbers as the file's
// bytes until someone asks for items(): a vocabulary's ~150k tokens, types and merges as
// Values would cost ~20 MB for the whole run, while the tokenizer reads them once
// (File::get_strings / get_numbers read the bytes directly).
class Array {
 public:
  Array(ValueType elem, std::vector<Value> items);
  // Still in a file: `count` values of type `elem` (not ARRAY) in raw..raw+raw_bytes, already
  // validated; `keep` holds the mapping alive.
  Array(ValueType elem, uint64_t count, const uint8_t *raw, uint64_t raw_bytes, std::shared_ptr<const void> keep);
  Array(const Array &) = delete;
  Array &operator=(const Array &) = delete;

  ValueType elem = ValueType::U8;
  uint64_t size() const { return count_; }
  const std::vector<Value> &items() const;  // decodes a file's array on first use (thread-safe)
  // The file's bytes, or nullptr for an array built in memory (use items()).
  const uint8_t *raw() const { return raw_; }
  uint64_t raw_bytes() const { return raw_bytes_; }

 private:
  mutable std::vector<Value> items_;
  uint64_t count_ = 0;
  const uint8_t *raw_ = nullptr;
  uint64_t raw_bytes_ = 0;
  std::shared_ptr<const void> keep_;
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
    return {ValueType::ARRAY, std::make_shared<Array>(elem, std::move(items))};
  }
  static Value strings(const std::vector<std::string> &items);

  const Array &arr() const { return *std::get<std::shared_ptr<Array>>(v); }
  bool is_integer() const;
  std::string to_string(size_t max_items = 8) const;  // for `info`: arrays abbreviated
};

}  // namespace minfer::gguf
