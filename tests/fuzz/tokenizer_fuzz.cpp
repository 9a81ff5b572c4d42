// libFuzzer target for the tokenizer: any text through any vocabulary of the test data must
// encode to ids inside the vocabulary, and any ids must decode to valid UTF-8 — never crash,
// over-read or hang. Vocabularies come from MINFER_TESTDATA (default ../shared/testdata):
// vocab/*.gguf and models/*.gguf, each loaded once.
//
// Input: byte 0 picks the vocabulary, byte 1 the options (bit 0 add_special, bit 1
// parse_special, bit 2 decode the rest as ids instead of encoding it as text), the rest is the
// text or the ids (little-endian int32, any value).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/utf8.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using minfer::tokenizer::Tokenizer;

std::vector<std::unique_ptr<Tokenizer>> load_vocabularies() {
  namespace fs = std::filesystem;
  const char *env = std::getenv("MINFER_TESTDATA");
  const fs::path td = env ? env : "../shared/testdata";
  std::vector<fs::path> files;
  for (const char *sub : {"vocab", "models"}) {
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(td / sub, ec))
      if (e.path().extension() == ".gguf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::unique_ptr<Tokenizer>> out;
  for (const auto &p : files) {
    try {
      const auto f = minfer::gguf::File::open(p.string());
      out.push_back(Tokenizer::from_gguf(*f));
      std::fprintf(stderr, "tokenizer_fuzz: %s (%d tokens)\n", p.filename().c_str(), out.back()->n_vocab());
    } catch (const minfer::Error &e) {
      std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", p.filename().c_str(), e.what());
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "tokenizer_fuzz: no vocabulary under %s; set MINFER_TESTDATA\n", td.c_str());
    std::abort();
  }
  return out;
}

void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

// Loaded before the first input, so the seconds of loading 260k-token vocabularies do not
// count against the per-input timeout.
std::vector<std::unique_ptr<Tokenizer>> *g_vocabs = nullptr;

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  g_vocabs = new std::vector<std::unique_ptr<Tokenizer>>(load_vocabularies());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const auto &vocabs = *g_vocabs;
  if (size < 2) return 0;
  const Tokenizer &tok = *vocabs[data[0] % vocabs.size()];
  const bool add_special = data[1] & 1, parse_special = data[1] & 2, decode_ids = data[1] & 4;
  std::vector<int32_t> ids;
  if (decode_ids) {
    for (size_t i = 2; i + 4 <= size; i += 4) {
      int32_t id;
      std::memcpy(&id, data + i, 4);
      ids.push_back(id);  // out-of-range ids included: decoding must take any
    }
  } else {
    const std::string text(reinterpret_cast<const char *>(data + 2), size - 2);
    ids = tok.encode(text, add_special, parse_special);
    for (int32_t id : ids) require(id >= 0 && id < tok.n_vocab(), "encode gave an id outside the vocabulary");
    if (!text.empty()) require(!ids.empty(), "a non-empty text encoded to no ids");
  }
  for (const bool start : {true, false}) {
    minfer::tokenizer::StreamDecoder dec(tok, start);
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = dec.push(id);
      require(minfer::utf8::is_valid(piece), "the decoder emitted invalid UTF-8");
      out += piece;
    }
    const std::string tail = dec.flush();
    require(minfer::utf8::is_valid(tail), "the decoder's flush emitted invalid UTF-8");
  }
  return 0;
}
