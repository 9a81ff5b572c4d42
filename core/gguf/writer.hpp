// core/gguf/writer.hpp — writing GGUF v3 files, streaming: tensor data is appended tensor by
// tensor after the header, so a multi-GB model never has to sit in memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gguf/value.hpp"

namespace minfer::gguf {

class Writer {
 public:
  explicit Writer(uint32_t alignment = 32);
  ~Writer();
  Writer(const Writer &) = delete;
  Writer &operator=(const Writer &) = delete;

  // Metadata in insertion order; setting a key again replaces its value in place.
  void set(const std::string &key, Value v);
  const std::vector<std::pair<std::string, Value>> &metadata() const { return kv_; }

  // Declares a tensor (shape innermost first); returns its byte size.
  uint64_t add_tensor(const std::string &name, int32_t dtype, const std::vector<int64_t> &shape);

  // Writes header, metadata and tensor infos to a temporary file of its own beside path
  // (.NAME.XXXXXX.part); then append every tensor's bytes in declaration order with write_data
  // (any number of calls per tensor), and finish() syncs it and renames it into place
  // atomically. An error (or destruction before finish) removes the temporary file.
  void begin(const std::string &path);
  void write_data(const void *data, uint64_t bytes);
  void finish();

  uint64_t total_bytes() const;  // the final file size

 private:
  struct Pending {
    std::string name;
    int32_t dtype;
    std::vector<int64_t> shape;
    uint64_t bytes, offset;
  };
  void put(const void *p, uint64_t n);
  void put_value(const Value &v);
  void put_string(const std::string &s);
  void pad_to_alignment();
  void abandon();  // closes and removes the temporary file, if any

  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Pending> tensors_;
  uint64_t data_bytes_ = 0;
  std::string path_, part_;
  std::FILE *f_ = nullptr;
  uint64_t written_ = 0;
  size_t current_ = 0;       // tensor being written
  uint64_t current_done_ = 0;
};

}  // namespace minfer::gguf
