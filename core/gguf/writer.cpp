#include "gguf/writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "minfer/dtype.h"

namespace minfer::gguf {

Writer::Writer(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) throw Error("GGUF alignment must be a power of two");
  if (alignment != kDefaultAlignment) set("general.alignment", Value::u32(alignment));
}

Writer::~Writer() { abandon(); }

void Writer::abandon() {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  if (!part_.empty()) {
    std::error_code ec;
    std::filesystem::remove(part_, ec);
    part_.clear();
  }
}

void Writer::set(const std::string &key, Value v) {
  for (auto &kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(key, std::move(v));
}

uint64_t Writer::add_tensor(const std::string &name, int32_t dtype, const std::vector<int64_t> &shape) {
  if (f_) throw Error("GGUF writer: add_tensor after begin");
  const minfer_dtype_traits tr = minfer_dtype_info(dtype);
  if (!tr.name) throw Error("GGUF writer: tensor '" + name + "' has unknown dtype " + std::to_string(dtype));
  if (shape.empty() || shape.size() > size_t(kMaxDims)) throw Error("GGUF writer: tensor '" + name + "' needs 1 to 4 dims");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) throw Error("GGUF writer: tensor '" + name + "' has a dimension <= 0");
    n *= d;
  }
  if (shape[0] % tr.block_values != 0)
    throw Error("GGUF writer: tensor '" + name + "' rows of " + std::to_string(shape[0]) + " do not fill " + tr.name + " blocks");
  for (const auto &t : tensors_)
    if (t.name == name) throw Error("GGUF writer: tensor '" + name + "' declared twice");
  const uint64_t bytes = uint64_t(n / tr.block_values) * uint64_t(tr.block_bytes);
  tensors_.push_back({name, dtype, shape, bytes, data_bytes_});
  data_bytes_ += (bytes + alignment_ - 1) / alignment_ * alignment_;
  return bytes;
}

void Writer::put(const void *p, uint64_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n) throw Error(path_ + ": writing " + part_ + " failed (" + std::strerror(errno) + "); is the disk full?");
  written_ += n;
}

void Writer::put_string(const std::string &s) {
  const uint64_t n = s.size();
  put(&n, 8);
  put(s.data(), n);
}

void Writer::put_value(const Value &v) {
  auto put_int = [&](uint64_t bits, int bytes) { put(&bits, uint64_t(bytes)); };  // little-endian host
  switch (v.type) {
    case ValueType::U8: case ValueType::BOOL:
      put_int(v.type == ValueType::BOOL ? uint64_t(std::get<bool>(v.v)) : std::get<uint64_t>(v.v), 1);
      break;
    case ValueType::I8: put_int(uint64_t(std::get<int64_t>(v.v)), 1); break;
    case ValueType::U16: put_int(std::get<uint64_t>(v.v), 2); break;
    case ValueType::I16: put_int(uint64_t(std::get<int64_t>(v.v)), 2); break;
    case ValueType::U32: put_int(std::get<uint64_t>(v.v), 4); break;
    case ValueType::I32: put_int(uint64_t(std::get<int64_t>(v.v)), 4); break;
    case ValueType::U64: put_int(std::get<uint64_t>(v.v), 8); break;
    case ValueType::I64: put_int(uint64_t(std::get<int64_t>(v.v)), 8); break;
    case ValueType::F32: { const float f = float(std::get<double>(v.v)); put(&f, 4); break; }
    case ValueType::F64: { const double d = std::get<double>(v.v); put(&d, 8); break; }
    case ValueType::STRING: put_string(std::get<std::string>(v.v)); break;
    case ValueType::ARRAY: {
      const Array &a = v.arr();
      const uint32_t et = uint32_t(a.elem);
      const uint64_t n = a.size();
      put(&et, 4);
      put(&n, 8);
      for (const auto &x : a.items()) {
        if (x.type != a.elem) throw Error("GGUF writer: array element of type " + std::string(value_type_name(x.type)) +
                                          " in an array of " + value_type_name(a.elem));
        put_value(x);
      }
      break;
    }
  }
}

void Writer::pad_to_alignment() {
  static const uint8_t zeros[256] = {};
  const uint64_t pad = (alignment_ - written_ % alignment_) % alignment_;
  put(zeros, pad);
}

void Writer::begin(const std::string &path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw Error(path + ": is a directory; give the output file's path (e.g. " + (fs::path(path) / "model.gguf").string() + ")");
  path_ = path;
  // A name of its own beside the target: the rename into place stays on one file system (so
  // it is atomic), and runs writing the same output at once never share a part file.
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string part = (dir / ("." + target.filename().string() + ".XXXXXX.part")).string();
  const int fd = mkstemps(part.data(), 5);
  if (fd < 0) throw Error(path + ": cannot create a temporary file in " + dir.string() + " (" + std::strerror(errno) + ")");
  part_ = part;
  const mode_t mask = umask(0);  // mkstemps makes the file 0600: give it what a new file gets
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  f_ = fdopen(fd, "wb");
  if (!f_) {
    const int e = errno;
    ::close(fd);
    abandon();
    throw Error(path + ": cannot open " + part + " (" + std::strerror(e) + ")");
  }
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 22);
  const uint32_t magic = kMagic, version = 3;
  const uint64_t n_tensors = tensors_.size(), n_kv = kv_.size();
  put(&magic, 4);
  put(&version, 4);
  put(&n_tensors, 8);
  put(&n_kv, 8);
  for (const auto &[k, v] : kv_) {
    put_string(k);
    const uint32_t t = uint32_t(v.type);
    put(&t, 4);
    put_value(v);
  }
  for (const auto &t : tensors_) {
    put_string(t.name);
    const uint32_t nd = uint32_t(t.shape.size());
    put(&nd, 4);
    for (int64_t d : t.shape) put(&d, 8);
    const uint32_t type = uint32_t(t.dtype);
    put(&type, 4);
    put(&t.offset, 8);
  }
  pad_to_alignment();
  current_ = 0;
  current_done_ = 0;
}

void Writer::write_data(const void *data, uint64_t bytes) {
  const auto *p = static_cast<const uint8_t *>(data);
  while (bytes > 0) {
    if (current_ >= tensors_.size()) throw Error(part_ + ": more tensor data written than the tensors declared");
    const Pending &t = tensors_[current_];
    const uint64_t n = std::min(bytes, t.bytes - current_done_);
    put(p, n);
    p += n;
    bytes -= n;
    current_done_ += n;
    if (current_done_ == t.bytes) {
      pad_to_alignment();
      ++current_;
      current_done_ = 0;
    }
  }
}

void Writer::finish() {
  if (current_ != tensors_.size()) {
    const std::string what = path_ + ": tensor '" + tensors_[current_].name + "' has " + std::to_string(current_done_) + " of its " +
                             std::to_string(tensors_[current_].bytes) + " bytes; the file is incomplete";
    abandon();
    throw Error(what);
  }
  // On disk before the rename: a crash then leaves the old file or the whole new one.
  if (std::fflush(f_) != 0 || fsync(fileno(f_)) != 0) {
    const int e = errno;
    abandon();
    throw Error(path_ + ": writing failed (" + std::strerror(e) + "); is the disk full?");
  }
  const int closed = std::fclose(f_);
  f_ = nullptr;
  if (closed != 0) {
    const int e = errno;
    abandon();
    throw Error(path_ + ": closing failed (" + std::strerror(e) + ")");
  }
  if (std::rename(part_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    const std::string part = part_;
    abandon();
    throw Error(path_ + ": cannot move " + part + " into place (" + std::strerror(e) + ")");
  }
  part_.clear();
}

uint64_t Writer::total_bytes() const {
  // Header sizes are known only once written; this is the sum for reporting after finish().
  return written_;
}

}  // namespace minfer::gguf
