// core/gguf/gguf.hpp — reading GGUF files (v2, v3): validated, memory-mapped, zero-copy.
//
// Everything is validated before use, against the file's size: counts, string and array
// lengths, tensor dims (no overflow), types, alignment, offsets and overlaps. A failure is a
// minfer::Error naming the file, the byte offset and what was expected.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "gguf/value.hpp"

namespace minfer::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;

struct TensorInfo {
  std::string name;
  int32_t dtype = 0;                       // GGUF type id == minfer_dtype
  int n_dims = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};  // innermost first
  uint64_t offset = 0;                     // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t *data = nullptr;           // into the mapping; valid while the File lives

  int64_t n_elements() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
};

// A read-only memory mapping of a whole file.
class Mapping {
 public:
  explicit Mapping(const std::string &path);
  ~Mapping();
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;
  const uint8_t *data() const { return data_; }
  uint64_t size() const { return size_; }
  // Drops this process's pages of [p, p + n) (whole pages inside it; a no-op outside the
  // mapping): they stop counting as its memory, and come back from the page cache if read.
  void release(const uint8_t *p, uint64_t n) const;

 private:
  const uint8_t *data_ = nullptr;
  uint64_t size_ = 0;
};

class File {
 public:
  // Maps and validates path; throws minfer::Error.
  static std::shared_ptr<File> open(const std::string &path);
  // Validates bytes already in memory (for tests and the fuzzer); `name` appears in errors.
  // With `keep` (holding the bytes alive) arrays stay in the bytes until asked for, as with
  // open(); without, they are decoded now.
  static std::shared_ptr<File> parse(const uint8_t *data, uint64_t size, const std::string &name,
                                     std::shared_ptr<const void> keep = nullptr);

  const std::string &path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  const std::vector<std::pair<std::string, Value>> &metadata() const { return kv_; }
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const Value *find(const std::string &key) const;
  const TensorInfo *find_tensor(const std::string &name) const;
  const TensorInfo &tensor(const std::string &name) const;  // throws naming the file

  // Typed metadata: T is the exact GGUF type (uint32_t for UINT32, std::string, ...).
  // Throws naming the file and key when missing or of another type.
  template <class T> T get(const std::string &key) const;
  template <class T> T get_or(const std::string &key, T fallback) const {
    return find(key) ? get<T>(key) : fallback;
  }
  // Any integer type, range-checked into int64.
  int64_t get_int(const std::string &key) const;
  // An array of strings / of numbers (any integer or float type), read from the file's bytes
  // without building a Value per item.
  std::vector<std::string> get_strings(const std::string &key) const;
  std::vector<double> get_numbers(const std::string &key) const;

  std::string architecture() const { return get<std::string>("general.architecture"); }

  // For bytes of this file a backend has copied (a tensor's data): Mapping::release, when the
  // file is mapped; nothing for a file parsed from memory.
  void release_pages(const uint8_t *p, uint64_t n) const {
    if (map_) map_->release(p, n);
  }

 private:
  File() = default;
  void parse_all();
  [[noreturn]] void fail_key(const std::string &key, const std::string &what) const;

  std::shared_ptr<Mapping> map_;
  std::shared_ptr<const void> keep_;  // what keeps the bytes alive (the mapping): arrays not yet decoded point into it
  const uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0, alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace minfer::gguf
