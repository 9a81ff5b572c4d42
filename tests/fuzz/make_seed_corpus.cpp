// Writes the fuzzer's seed corpus: the hand-made valid and malformed files, and the first
// 64 KiB of every GGUF file in the test data (headers and metadata, the parts the reader parses).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "gguf_corpus.hpp"

namespace fs = std::filesystem;

int main(int argc, char **argv) {
  if (argc < 2) {
    std::cerr << "usage: make_seed_corpus OUT_DIR [TESTDATA_DIR]\n";
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);
  auto write = [&](const std::string &name, const std::vector<uint8_t> &b) {
    std::ofstream(out / name, std::ios::binary).write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
  };
  int n = 0;
  write("valid.gguf", minfer::test::build(minfer::test::valid_spec()).bytes), ++n;
  for (const auto &m : minfer::test::malformed_corpus()) write(m.name + ".gguf", m.bytes), ++n;
  if (argc > 2 && fs::exists(argv[2]))
    for (const auto &e : fs::recursive_directory_iterator(argv[2])) {
      if (e.path().extension() != ".gguf") continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<uint8_t> head(65536);
      in.read(reinterpret_cast<char *>(head.data()), std::streamsize(head.size()));
      head.resize(size_t(in.gcount()));
      write("head-" + e.path().filename().string(), head), ++n;
    }
  std::cout << "seed corpus: " << n << " files in " << out << "\n";
  return 0;
}
