// minfer-gguf quantize: re-type every tensor of a GGUF file, streaming tensor by tensor.
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/parallel.hpp"
#include "common/progress.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "gguf_commands.hpp"
#include "minfer/dtype.h"
#include "quant/quantize.hpp"
#include "quant/reference.hpp"
#include "quant/type_policy.hpp"

namespace minfer::tools {

int cmd_quantize(const std::vector<std::string> &args) {
  std::vector<std::string> pos;
  int threads = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--threads") {
      if (i + 1 >= args.size()) throw UsageError("--threads needs a value");
      threads = int(parse_int("--threads", args[++i], 1, 1024));
    } else {
      pos.push_back(args[i]);
    }
  }
  if (pos.size() != 3) throw UsageError("expected IN OUT TYPE");
  const std::string &in_path = pos[0], &out_path = pos[1];
  const quant::FileType ft = quant::parse_file_type(pos[2]);
  if (in_path == out_path) throw Error("IN and OUT are the same file; write to a new file");
  const auto in = gguf::File::open(in_path);

  const std::string arch = in->get_or<std::string>("general.architecture", "");
  const int n_layers = arch.empty() || !in->find(arch + ".block_count") ? 0 : int(in->get_int(arch + ".block_count"));
  const bool has_output = in->find_tensor("output.weight") != nullptr;

  gguf::Writer w(in->alignment());
  for (const auto &[k, v] : in->metadata()) w.set(k, v);
  w.set("general.file_type", gguf::Value::u32(ft.gguf_ftype));
  w.set("general.quantization_version", gguf::Value::u32(2));

  std::vector<int32_t> types;
  uint64_t in_bytes = 0, out_bytes = 0;
  for (const auto &t : in->tensors()) {
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
    quant::TypeChoice c = quant::choose_type(ft, t.name, shape, t.dtype, n_layers, has_output);
    if (t.dtype == MINFER_DTYPE_I32 || t.dtype == MINFER_DTYPE_I8 || t.dtype == MINFER_DTYPE_I16 ||
        t.dtype == MINFER_DTYPE_I64 || t.dtype == MINFER_DTYPE_F64)
      c = {t.dtype, t.name + ": integer/f64 tensor copied as is"};
    if (!c.note.empty()) std::fprintf(stderr, "note: %s\n", c.note.c_str());
    types.push_back(c.dtype);
    in_bytes += t.n_bytes;
    out_bytes += w.add_tensor(t.name, c.dtype, shape);
  }
  w.begin(out_path);

  ProgressBar bar("quantize");
  uint64_t done = 0;
  for (size_t i = 0; i < in->tensors().size(); ++i) {
    const auto &t = in->tensors()[i];
    if (types[i] == t.dtype) {  // nothing to do: copy the bytes
      w.write_data(t.data, t.n_bytes);
    } else {
      const int64_t row_len = t.shape[0], rows = t.n_elements() / row_len;
      const uint64_t in_row = t.n_bytes / uint64_t(rows);
      const minfer_dtype_traits tr = minfer_dtype_info(types[i]);
      const int64_t out_row = row_len / tr.block_values * tr.block_bytes;
      const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / row_len);
      std::vector<float> x(size_t(std::min(chunk, rows) * row_len));
      std::vector<uint8_t> q(size_t(std::min(chunk, rows) * out_row));
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t n = std::min(chunk, rows - r0);
        parallel_ranges(n, threads, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r)
            quant::dequantize_row(t.dtype, t.data + uint64_t(r0 + r) * in_row, x.data() + r * row_len, row_len);
          quant::quantize_rows(types[i], x.data() + b * row_len, q.data() + b * out_row, e - b, row_len, 1);
        });
        w.write_data(q.data(), uint64_t(n * out_row));
      }
    }
    done += t.n_bytes;
    bar.update(double(done) / double(in_bytes ? in_bytes : 1), t.name);
  }
  w.finish();
  bar.done(in_path + " (" + human_bytes(in->file_size()) + ") -> " + out_path + " (" + human_bytes(w.total_bytes()) + ", " +
           ft.name + "); tensor data " + human_bytes(in_bytes) + " -> " + human_bytes(out_bytes));
  return 0;
}

}  // namespace minfer::tools
