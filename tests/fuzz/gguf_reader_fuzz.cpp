// libFuzzer target for the GGUF reader: any bytes must parse or be refused with a
// minfer::Error — never crash, hang, over-read or over-allocate.
#include <cstddef>
#include <cstdint>

#include "common/error.hpp"
#include "gguf/gguf.hpp"

#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // Odd inputs parse as a mapped file does (arrays left in the bytes, decoded on use), even ones
  // eagerly: both readers see every input shape.
  const bool in_place = size % 2 == 1;
  const auto copy = std::make_shared<std::vector<uint8_t>>(data, data + size);
  try {
    const auto f = in_place ? minfer::gguf::File::parse(copy->data(), size, "fuzz-input", copy)
                            : minfer::gguf::File::parse(data, size, "fuzz-input");
    // Touch everything a caller would: every value's text, every tensor's first and last byte
    // (ASan flags a view that points outside the input).
    size_t sink = 0;
    for (const auto &[k, v] : f->metadata()) {
      sink += k.size() + v.to_string().size();
      if (v.type == minfer::gguf::ValueType::ARRAY) sink += v.arr().items().size();
    }
    for (const auto &t : f->tensors())
      if (t.n_bytes) sink += t.data[0] + t.data[t.n_bytes - 1];
    if (f->find("tokenizer.ggml.tokens")) {
      try {
        sink += f->get_strings("tokenizer.ggml.tokens").size();
      } catch (const minfer::Error &) {
      }
    }
    (void)sink;
  } catch (const minfer::Error &) {
  }
  return 0;
}
