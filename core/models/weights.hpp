// core/models/weights.hpp — a model file's tensors as graph weights, checked against the
// shapes the hyperparameters imply (every architecture's builder reads its weights here).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "graph/graph.hpp"
#include "minfer/dtype.h"

namespace minfer::models {

class WeightReader {
 public:
  WeightReader(const std::shared_ptr<gguf::File> &f, GraphBuilder &gb) : f_(*f), gb_(gb), owner_(f) {}

  // A weight from the file, checked against the shape the hyperparameters imply.
  TensorId weight(const std::string &name, std::vector<int64_t> shape, const std::string &why) {
    const gguf::TensorInfo *t = f_.find_tensor(name);
    if (!t) throw Error(f_.path() + ": missing tensor '" + name + "' (" + why + ")");
    std::vector<int64_t> have(t->shape.begin(), t->shape.begin() + t->n_dims);
    if (have != shape) {
      auto str = [](const std::vector<int64_t> &s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      throw Error(f_.path() + ": tensor '" + name + "' has shape " + str(have) + ", expected " + str(shape) + " (" + why + ")");
    }
    const gguf::File *file = &f_;  // kept alive by owner_
    return gb_.weight(name, t->dtype, shape,
                      HostBytes{t->data, t->n_bytes, owner_, [file](const uint8_t *p, uint64_t n) { file->release_pages(p, n); }});
  }

  // Rows [first, first + count) of a fused 2-D weight (Phi-3's attn_qkv, its gate+up ffn_up)
  // as a weight of its own: rows are contiguous, so it is a range of the file's bytes.
  TensorId weight_rows(const std::string &name, int64_t first, int64_t count, int64_t k, int64_t total_rows, const std::string &part,
                       const std::string &why) {
    const gguf::TensorInfo *t = f_.find_tensor(name);
    if (!t) throw Error(f_.path() + ": missing tensor '" + name + "' (" + why + ")");
    if (t->n_dims != 2 || t->shape[0] != k || t->shape[1] != total_rows)
      throw Error(f_.path() + ": tensor '" + name + "' has shape [" + std::to_string(t->shape[0]) + ", " + std::to_string(t->shape[1]) +
                  "], expected [" + std::to_string(k) + ", " + std::to_string(total_rows) + "] (" + why + ")");
    const uint64_t row_bytes = t->n_bytes / uint64_t(total_rows);
    const gguf::File *file = &f_;
    return gb_.weight(name + "[" + part + "]", t->dtype, {k, count},
                      HostBytes{t->data + uint64_t(first) * row_bytes, uint64_t(count) * row_bytes, owner_,
                                [file](const uint8_t *p, uint64_t n) { file->release_pages(p, n); }});
  }

  // Values [first, first + count) of a 1-D weight of total values (a rank's share of a bias
  // under split: tensor): a range of the file's bytes.
  TensorId weight_range(const std::string &name, int64_t first, int64_t count, int64_t total, const std::string &part, const std::string &why) {
    const gguf::TensorInfo *t = f_.find_tensor(name);
    if (!t) throw Error(f_.path() + ": missing tensor '" + name + "' (" + why + ")");
    if (t->n_dims != 1 || t->shape[0] != total || t->dtype != MINFER_DTYPE_F32)
      throw Error(f_.path() + ": tensor '" + name + "' is not f32 [" + std::to_string(total) + "] (" + why + ")");
    const gguf::File *file = &f_;
    return gb_.weight(name + "[" + part + "]", t->dtype, {count},
                      HostBytes{t->data + uint64_t(first) * 4, uint64_t(count) * 4, owner_,
                                [file](const uint8_t *p, uint64_t n) { file->release_pages(p, n); }});
  }

  // Columns [first, first + count) of every row of a 2-D weight [k, rows] (a rank's share of
  // a row-parallel projection under split: tensor): each row's range gathered into memory of
  // its own. The cut must fall on whole blocks of the weight's type.
  TensorId weight_cols(const std::string &name, int64_t first, int64_t count, int64_t k, int64_t rows, const std::string &part,
                       const std::string &why) {
    const gguf::TensorInfo *t = f_.find_tensor(name);
    if (!t) throw Error(f_.path() + ": missing tensor '" + name + "' (" + why + ")");
    if (t->n_dims != 2 || t->shape[0] != k || t->shape[1] != rows)
      throw Error(f_.path() + ": tensor '" + name + "' has shape [" + std::to_string(t->shape[0]) + ", " + std::to_string(t->shape[1]) +
                  "], expected [" + std::to_string(k) + ", " + std::to_string(rows) + "] (" + why + ")");
    const int64_t block = minfer_dtype_info(t->dtype).block_values;
    if (first % block || count % block)
      throw Error(f_.path() + ": split: tensor cuts the rows of '" + name + "' (" + std::to_string(k) + " " + minfer_dtype_name(t->dtype) +
                  " values) at " + std::to_string(first) + " and " + std::to_string(first + count) + ", not on its blocks of " +
                  std::to_string(block) + " values; divide it among fewer devices, or use a type with smaller blocks");
    const uint64_t row_bytes = t->n_bytes / uint64_t(rows), from = dtype_bytes(t->dtype, first, name),
                   take = dtype_bytes(t->dtype, count, name);
    auto bytes = std::make_shared<std::vector<uint8_t>>(take * uint64_t(rows));
    for (int64_t r = 0; r < rows; ++r) std::memcpy(bytes->data() + uint64_t(r) * take, t->data + uint64_t(r) * row_bytes + from, take);
    // Once its backend holds its copy (the session releases the bytes in order, chunk by
    // chunk), the gathered memory goes: the slices of a 7B's output and down weights are GBs.
    auto release = [bytes](const uint8_t *p, uint64_t n) {
      if (p + n == bytes->data() + bytes->size()) std::vector<uint8_t>().swap(*bytes);
    };
    return gb_.weight(name + "[" + part + "]", t->dtype, {count, rows}, HostBytes{bytes->data(), bytes->size(), bytes, release});
  }

 private:
  const gguf::File &f_;
  GraphBuilder &gb_;
  std::shared_ptr<const void> owner_;
};

}  // namespace minfer::models
