// libFuzzer target for the GGUF reader: any bytes must parse or be refused with a
// minfer::Error — never crash, hang, over-read or over-allocate.
#include <cstddef>
#include <cstdint>

#include "common/error.hpp"
#include "gguf/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    const auto f = minfer::gguf::File::parse(data, size, "fuzz-input");
    // Touch everything a caller would: every value's text, every tensor's first and last byte
    // (ASan flags a view that points outside the input).
    size_t sink = 0;
    for (const auto &[k, v] : f->metadata()) sink += k.size() + v.to_string().size();
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
