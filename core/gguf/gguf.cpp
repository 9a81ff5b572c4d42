#include "gguf/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <limits>

#include "minfer/dtype.h"

namespace minfer::gguf {

// ---- mapping ----------------------------------------------------------------------------

Mapping::Mapping(const std::string &path) {
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer; the check below then
  // refuses it. On a regular file the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw Error(path + (dir ? ": is a directory, not a GGUF file" : ": not a regular file (a FIFO, socket or device?); give a GGUF file"));
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void *p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": cannot map the file (" + std::strerror(e) + ")");
    }
    data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
}

void Mapping::release(const uint8_t *p, uint64_t n) const {
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  if (!data_ || p < data_ || p + n > data_ + size_) return;
  const uint64_t begin = (uint64_t(p - data_) + page - 1) / page * page, end = uint64_t(p + n - data_) / page * page;
  // A shared read-only file mapping: the data stays in the page cache.
  if (end > begin) madvise(const_cast<uint8_t *>(data_) + begin, end - begin, MADV_DONTNEED);
}

Mapping::~Mapping() {
  if (data_) munmap(const_cast<uint8_t *>(data_), size_);
}

// ---- bounds-checked reading -------------------------------------------------------------

namespace {

// ggml's tensor types that minfer has no blocks for (ids from ggml.h), named in the error
// instead of "unknown": i-quants, ternary and MXFP4 files exist and are read by llama.cpp.
const char *unread_ggml_type(uint32_t id) {
  switch (id) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    default: return nullptr;
  }
}

constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are refused (no real file has >2)

class Cursor {
 public:
  Cursor(const uint8_t *base, uint64_t size, const std::string &name, std::shared_ptr<const void> keep = nullptr)
      : base_(base), size_(size), name_(name), keep_(std::move(keep)) {}
  // Set when the bytes are a file mapping kept alive by this: arrays may stay undecoded.
  const std::shared_ptr<const void> &keep() const { return keep_; }
  const uint8_t *here() const { return base_ + pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string &what) const {
    throw Error(name_ + ": at byte " + std::to_string(at) + ": " + what);
  }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  void seek(uint64_t p) { pos_ = p; }

  template <class T>
  T read(const char *what) {
    if (left() < sizeof(T))
      fail(pos_, std::string("expected ") + what + " (" + std::to_string(sizeof(T)) +
                     " bytes) but the file ends at byte " + std::to_string(size_));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char *what) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(what);
    if (n > left())
      fail(at, std::string(what) + " claims " + std::to_string(n) + " bytes but only " +
                   std::to_string(left()) + " remain in the file");
    std::string s(reinterpret_cast<const char *>(base_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t *base_;
  uint64_t size_, pos_ = 0;
  std::string name_;
  std::shared_ptr<const void> keep_;
};

uint64_t min_value_bytes(ValueType t);

// Bytes of one value of a fixed-size type; 0 for strings and arrays.
uint64_t fixed_bytes(ValueType t) {
  switch (t) {
    case ValueType::STRING: case ValueType::ARRAY: return 0;
    default: return min_value_bytes(t);
  }
}

// The fewest bytes one value of type t can occupy: bounds array counts before reserving.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

Value read_value(Cursor &c, ValueType t, int depth, const std::string &key) {
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::U8: v.v = uint64_t(c.read<uint8_t>("a uint8 value")); break;
    case ValueType::I8: v.v = int64_t(c.read<int8_t>("an int8 value")); break;
    case ValueType::U16: v.v = uint64_t(c.read<uint16_t>("a uint16 value")); break;
    case ValueType::I16: v.v = int64_t(c.read<int16_t>("an int16 value")); break;
    case ValueType::U32: v.v = uint64_t(c.read<uint32_t>("a uint32 value")); break;
    case ValueType::I32: v.v = int64_t(c.read<int32_t>("an int32 value")); break;
    case ValueType::U64: v.v = c.read<uint64_t>("a uint64 value"); break;
    case ValueType::I64: v.v = c.read<int64_t>("an int64 value"); break;
    case ValueType::F32: v.v = double(c.read<float>("a float32 value")); break;
    case ValueType::F64: v.v = c.read<double>("a float64 value"); break;
    case ValueType::BOOL: {
      const uint64_t at = c.pos();
      const uint8_t b = c.read<uint8_t>("a bool value");
      if (b > 1) c.fail(at, "bool value of key '" + key + "' is " + std::to_string(b) + "; expected 0 or 1");
      v.v = b == 1;
      break;
    }
    case ValueType::STRING: v.v = c.read_string("a string length"); break;
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) c.fail(c.pos(), "arrays of key '" + key + "' nest deeper than " + std::to_string(kMaxArrayDepth));
      const uint64_t at = c.pos();
      const uint32_t et = c.read<uint32_t>("an array element type");
      if (et >= kValueTypeCount) c.fail(at, "array of key '" + key + "' has unknown element type " + std::to_string(et));
      const uint64_t n = c.read<uint64_t>("an array length");
      const ValueType elem = ValueType(et);
      if (n > c.left() / min_value_bytes(elem))
        c.fail(at + 4, "array of key '" + key + "' claims " + std::to_string(n) + " " + value_type_name(elem) +
                           " values, more than the " + std::to_string(c.left()) + " bytes left can hold");
      if (c.keep() && elem != ValueType::ARRAY) {  // validate and skip now, decode on demand
        const uint64_t begin = c.pos();
        if (const uint64_t size = fixed_bytes(elem)) {
          const uint64_t at_values = c.pos();
          for (uint64_t i = 0; i < n; ++i) {
            if (elem == ValueType::BOOL) {
              (void)read_value(c, elem, depth + 1, key);  // 0 or 1, else an error naming the byte
            } else {
              c.seek(at_values + (i + 1) * size);
            }
          }
        } else {
          for (uint64_t i = 0; i < n; ++i) {
            const uint64_t s_at = c.pos();
            const uint64_t len = c.read<uint64_t>("a string length");
            if (len > c.left())
              c.fail(s_at, std::string("a string length claims ") + std::to_string(len) + " bytes but only " +
                               std::to_string(c.left()) + " remain in the file");
            c.seek(c.pos() + len);
          }
        }
        v.v = std::make_shared<Array>(elem, n, c.here() - (c.pos() - begin), c.pos() - begin, c.keep());
        break;
      }
      std::vector<Value> items;
      items.reserve(size_t(n));
      for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, elem, depth + 1, key));
      v.v = std::make_shared<Array>(elem, std::move(items));
      break;
    }
  }
  return v;
}

}  // namespace

// ---- arrays -----------------------------------------------------------------------------

Array::Array(ValueType e, std::vector<Value> items) : elem(e), items_(std::move(items)), count_(items_.size()) {}

Array::Array(ValueType e, uint64_t count, const uint8_t *raw, uint64_t raw_bytes, std::shared_ptr<const void> keep)
    : elem(e), count_(count), raw_(raw), raw_bytes_(raw_bytes), keep_(std::move(keep)) {}

const std::vector<Value> &Array::items() const {
  if (!raw_) return items_;
  static std::mutex decoding;
  std::lock_guard<std::mutex> lock(decoding);
  if (items_.size() != count_) {  // validated at parse time: decoding cannot fail
    Cursor c(raw_, raw_bytes_, "array");
    items_.reserve(size_t(count_));
    for (uint64_t i = 0; i < count_; ++i) items_.push_back(read_value(c, elem, 1, ""));
  }
  return items_;
}

// ---- the file ---------------------------------------------------------------------------

std::shared_ptr<File> File::open(const std::string &path) {
  auto f = std::shared_ptr<File>(new File());
  f->map_ = std::make_shared<Mapping>(path);
  f->keep_ = f->map_;
  f->base_ = f->map_->data();
  f->size_ = f->map_->size();
  f->path_ = path;
  f->parse_all();
  return f;
}

std::shared_ptr<File> File::parse(const uint8_t *data, uint64_t size, const std::string &name, std::shared_ptr<const void> keep) {
  auto f = std::shared_ptr<File>(new File());
  f->keep_ = std::move(keep);
  f->base_ = data;
  f->size_ = size;
  f->path_ = name;
  f->parse_all();
  return f;
}

void File::parse_all() {
  Cursor c(base_, size_, path_, keep_);  // bytes kept alive: arrays stay in them until asked for
  const uint32_t magic = c.read<uint32_t>("the magic 'GGUF'");
  if (magic != kMagic) c.fail(0, "not a GGUF file (the first 4 bytes are not 'GGUF')");
  version_ = c.read<uint32_t>("the version");
  if (version_ == 1) c.fail(4, "GGUF version 1 is not supported (only 2 and 3); convert the file with a current tool");
  if (version_ != 2 && version_ != 3) c.fail(4, "unknown GGUF version " + std::to_string(version_) + "; expected 2 or 3");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Each key/value needs at least 8 (key length) + 4 (type) + 1 bytes, each tensor info 8+4+8+4+8.
  if (n_kv > c.left() / 13) c.fail(16, "metadata count " + std::to_string(n_kv) + " is more than the file can hold");
  if (n_tensors > c.left() / 32) c.fail(8, "tensor count " + std::to_string(n_tensors) + " is more than the file can hold");

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.read_string("a metadata key length");
    if (key.empty()) c.fail(at, "metadata key " + std::to_string(i) + " is empty");
    const uint64_t type_at = c.pos();
    const uint32_t t = c.read<uint32_t>("a metadata value type");
    if (t >= kValueTypeCount) c.fail(type_at, "key '" + key + "' has unknown value type " + std::to_string(t));
    Value v = read_value(c, ValueType(t), 0, key);
    if (!kv_index_.emplace(key, kv_.size()).second) c.fail(at, "key '" + key + "' appears twice");
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value *a = find("general.alignment")) {
    if (a->type != ValueType::U32) throw Error(path_ + ": general.alignment must be uint32, is " + value_type_name(a->type));
    const uint64_t al = std::get<uint64_t>(a->v);
    if (al == 0 || (al & (al - 1)) != 0) throw Error(path_ + ": general.alignment " + std::to_string(al) + " is not a power of two");
    alignment_ = uint32_t(al);
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    const uint64_t at = c.pos();
    t.name = c.read_string("a tensor name length");
    if (t.name.empty()) c.fail(at, "tensor " + std::to_string(i) + " has an empty name");
    const uint64_t dims_at = c.pos();
    const uint32_t n_dims = c.read<uint32_t>("a tensor's dimension count");
    if (n_dims < 1 || n_dims > kMaxDims)
      c.fail(dims_at, "tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions; expected 1 to 4");
    t.n_dims = int(n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = c.pos();
      const uint64_t dim = c.read<uint64_t>("a tensor dimension");
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()))
        c.fail(dim_at, "tensor '" + t.name + "' dimension " + std::to_string(d) + " is " + std::to_string(dim) + "; expected 1 to 2^63-1");
      if (elements > std::numeric_limits<int64_t>::max() / int64_t(dim))
        c.fail(dim_at, "tensor '" + t.name + "' has more elements than fit in 64 bits");
      elements *= int64_t(dim);
      t.shape[d] = int64_t(dim);
    }
    const uint64_t type_at = c.pos();
    t.dtype = int32_t(c.read<uint32_t>("a tensor type"));
    const minfer_dtype_traits tr = minfer_dtype_info(t.dtype);
    if (!tr.name) {
      if (const char *ggml = unread_ggml_type(uint32_t(t.dtype)))
        c.fail(type_at, "tensor '" + t.name + "' is " + ggml + " (ggml type " + std::to_string(uint32_t(t.dtype)) +
                            "), which minfer does not read yet; use a file of f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k..q6_k, "
                            "iq4_nl or iq4_xs tensors (a Q*_K, Q4_0 or IQ4_XS file rather than IQ1..IQ3)");
      c.fail(type_at, "tensor '" + t.name + "' has unknown type id " + std::to_string(uint32_t(t.dtype)));
    }
    if (t.shape[0] % tr.block_values != 0)
      c.fail(dims_at, "tensor '" + t.name + "' has rows of " + std::to_string(t.shape[0]) + " values, not a multiple of " +
                          tr.name + "'s block of " + std::to_string(tr.block_values));
    const uint64_t blocks = uint64_t(elements / tr.block_values);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(tr.block_bytes))
      c.fail(dims_at, "tensor '" + t.name + "' byte size overflows 64 bits");
    t.n_bytes = blocks * uint64_t(tr.block_bytes);
    const uint64_t off_at = c.pos();
    t.offset = c.read<uint64_t>("a tensor data offset");
    if (t.offset % alignment_ != 0)
      c.fail(off_at, "tensor '" + t.name + "' data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                         std::to_string(alignment_));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) c.fail(at, "tensor '" + t.name + "' appears twice");
    tensors_.push_back(std::move(t));
  }

  const uint64_t end_of_infos = c.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > size_)
    c.fail(end_of_infos, "the data section would start at byte " + std::to_string(data_offset_) + ", past the end of the file");
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;

  // Each tensor inside the data section, and no two overlapping.
  std::vector<const TensorInfo *> by_offset;
  for (auto &t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      throw Error(path_ + ": at byte " + std::to_string(data_offset_ + t.offset) + ": tensor '" + t.name + "' (" +
                  std::to_string(t.n_bytes) + " bytes at data offset " + std::to_string(t.offset) +
                  ") extends past the end of the file (" + std::to_string(size_) + " bytes); the file is truncated or corrupt");
    t.data = base_ + data_offset_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto *a, auto *b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo &a = *by_offset[i - 1], &b = *by_offset[i];
    if (b.offset < a.offset + a.n_bytes)
      throw Error(path_ + ": at byte " + std::to_string(data_offset_ + b.offset) + ": tensor '" + b.name +
                  "' overlaps tensor '" + a.name + "' (" + std::to_string(a.n_bytes) + " bytes at data offset " +
                  std::to_string(a.offset) + ")");
  }
}

const Value *File::find(const std::string &key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo *File::find_tensor(const std::string &name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo &File::tensor(const std::string &name) const {
  if (const TensorInfo *t = find_tensor(name)) return *t;
  throw Error(path_ + ": has no tensor '" + name + "'");
}

void File::fail_key(const std::string &key, const std::string &what) const {
  throw Error(path_ + ": metadata key '" + key + "' " + what);
}

namespace {
template <class T> struct GgufTypeOf;
template <> struct GgufTypeOf<uint8_t> { static constexpr ValueType t = ValueType::U8; };
template <> struct GgufTypeOf<int8_t> { static constexpr ValueType t = ValueType::I8; };
template <> struct GgufTypeOf<uint16_t> { static constexpr ValueType t = ValueType::U16; };
template <> struct GgufTypeOf<int16_t> { static constexpr ValueType t = ValueType::I16; };
template <> struct GgufTypeOf<uint32_t> { static constexpr ValueType t = ValueType::U32; };
template <> struct GgufTypeOf<int32_t> { static constexpr ValueType t = ValueType::I32; };
template <> struct GgufTypeOf<uint64_t> { static constexpr ValueType t = ValueType::U64; };
template <> struct GgufTypeOf<int64_t> { static constexpr ValueType t = ValueType::I64; };
template <> struct GgufTypeOf<float> { static constexpr ValueType t = ValueType::F32; };
template <> struct GgufTypeOf<double> { static constexpr ValueType t = ValueType::F64; };
template <> struct GgufTypeOf<bool> { static constexpr ValueType t = ValueType::BOOL; };
template <> struct GgufTypeOf<std::string> { static constexpr ValueType t = ValueType::STRING; };
}  // namespace

template <class T>
T File::get(const std::string &key) const {
  const Value *v = find(key);
  if (!v) fail_key(key, "is missing");
  if (v->type != GgufTypeOf<T>::t)
    fail_key(key, std::string("is ") + value_type_name(v->type) + ", expected " + value_type_name(GgufTypeOf<T>::t));
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) return std::get<T>(v->v);
  else if constexpr (std::is_floating_point_v<T>) return T(std::get<double>(v->v));
  else if constexpr (std::is_signed_v<T>) return T(std::get<int64_t>(v->v));
  else return T(std::get<uint64_t>(v->v));
}

template uint8_t File::get<uint8_t>(const std::string &) const;
template int8_t File::get<int8_t>(const std::string &) const;
template uint16_t File::get<uint16_t>(const std::string &) const;
template int16_t File::get<int16_t>(const std::string &) const;
template uint32_t File::get<uint32_t>(const std::string &) const;
template int32_t File::get<int32_t>(const std::string &) const;
template uint64_t File::get<uint64_t>(const std::string &) const;
template int64_t File::get<int64_t>(const std::string &) const;
template float File::get<float>(const std::string &) const;
template double File::get<double>(const std::string &) const;
template bool File::get<bool>(const std::string &) const;
template std::string File::get<std::string>(const std::string &) const;

int64_t File::get_int(const std::string &key) const {
  const Value *v = find(key);
  if (!v) fail_key(key, "is missing");
  if (!v->is_integer()) fail_key(key, std::string("is ") + value_type_name(v->type) + ", expected an integer");
  if (std::holds_alternative<int64_t>(v->v)) return std::get<int64_t>(v->v);
  const uint64_t u = std::get<uint64_t>(v->v);
  if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail_key(key, "is too large");
  return int64_t(u);
}

std::vector<std::string> File::get_strings(const std::string &key) const {
  const Value *v = find(key);
  if (!v) fail_key(key, "is missing");
  if (v->type != ValueType::ARRAY || v->arr().elem != ValueType::STRING)
    fail_key(key, std::string("is ") + value_type_name(v->type) + ", expected an array of strings");
  const Array &a = v->arr();
  std::vector<std::string> out;
  out.reserve(size_t(a.size()));
  if (a.raw()) {  // straight from the file's bytes (validated at parse time)
    Cursor c(a.raw(), a.raw_bytes(), path_);
    for (uint64_t i = 0; i < a.size(); ++i) out.push_back(c.read_string("a string length"));
    return out;
  }
  for (const auto &x : a.items()) out.push_back(std::get<std::string>(x.v));
  return out;
}

std::vector<double> File::get_numbers(const std::string &key) const {
  const Value *v = find(key);
  if (!v) fail_key(key, "is missing");
  if (v->type != ValueType::ARRAY || !fixed_bytes(v->arr().elem) || v->arr().elem == ValueType::BOOL)
    fail_key(key, std::string("is ") + (v->type == ValueType::ARRAY ? std::string("an array of ") + value_type_name(v->arr().elem)
                                                                    : std::string(value_type_name(v->type))) +
                      ", expected an array of numbers");
  const Array &a = v->arr();
  std::vector<double> out;
  out.reserve(size_t(a.size()));
  const auto number = [](const Value &x) {
    if (std::holds_alternative<double>(x.v)) return std::get<double>(x.v);
    if (std::holds_alternative<int64_t>(x.v)) return double(std::get<int64_t>(x.v));
    return double(std::get<uint64_t>(x.v));
  };
  if (a.raw()) {
    Cursor c(a.raw(), a.raw_bytes(), path_);
    for (uint64_t i = 0; i < a.size(); ++i) out.push_back(number(read_value(c, a.elem, 1, key)));
    return out;
  }
  for (const auto &x : a.items()) out.push_back(number(x));
  return out;
}

}  // namespace minfer::gguf
