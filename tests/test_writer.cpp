// The GGUF writer (minfer-gguf quantize and synth write through it): a directory as output is
// refused, every failure leaves no temporary file behind, and two writers of one output at
// once each write their own temporary file, so the output is one whole file, never a mix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "minfer/dtype.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string &name) {
  const fs::path d = fs::temp_directory_path() / ("minfer-writer-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> entries(const fs::path &d) {
  std::vector<std::string> names;
  for (const auto &e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A writer of one f32 tensor of n values, all equal to fill, with metadata naming fill.
void start(minfer::gguf::Writer &w, const std::string &path, float fill, int64_t n) {
  w.set("general.name", minfer::gguf::Value::str("fill " + std::to_string(fill)));
  w.add_tensor("t", MINFER_DTYPE_F32, {n});
  w.begin(path);
}

TEST(GgufWriter, DirectoryAsOutputIsRefusedAndLeavesNothing) {
  const fs::path d = fresh_dir("dir");
  fs::create_directories(d / "out");
  minfer::gguf::Writer w;
  try {
    start(w, (d / "out").string(), 1, 8);
    FAIL() << "a directory as output must fail";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("is a directory; give the output file's path"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(d), std::vector<std::string>{"out"});
}

TEST(GgufWriter, AbandonedOrIncompleteWritesRemoveTheirTemporaryFile) {
  const fs::path d = fresh_dir("abandon");
  {
    minfer::gguf::Writer w;
    start(w, (d / "a.gguf").string(), 1, 8);
    EXPECT_EQ(entries(d).size(), 1u) << "the temporary file exists while writing";
  }  // destroyed before finish
  EXPECT_TRUE(entries(d).empty());
  minfer::gguf::Writer w;
  start(w, (d / "b.gguf").string(), 1, 8);
  const float x = 1;
  w.write_data(&x, 4);  // 4 of 32 bytes
  EXPECT_THROW(w.finish(), minfer::Error);
  EXPECT_TRUE(entries(d).empty()) << "an incomplete file is neither kept nor moved into place";
}

TEST(GgufWriter, TwoWritersOfOneOutputGiveOneWholeFile) {
  const fs::path d = fresh_dir("race");
  const std::string out = (d / "m.gguf").string();
  const int64_t n = 1 << 16;
  minfer::gguf::Writer a, b;
  start(a, out, 1.0f, n);
  start(b, out, 2.0f, n);
  const std::vector<float> ones(size_t(n), 1.0f), twos(size_t(n), 2.0f);
  // Interleaved, as two processes' writes would be.
  for (int64_t i = 0; i < n; i += 4096) {
    a.write_data(ones.data() + i, 4096 * 4);
    b.write_data(twos.data() + i, 4096 * 4);
  }
  a.finish();
  b.finish();
  EXPECT_EQ(entries(d), std::vector<std::string>{"m.gguf"});
  const auto f = minfer::gguf::File::open(out);
  const auto &t = f->tensor("t");
  const float *v = reinterpret_cast<const float *>(t.data);
  EXPECT_EQ(f->get<std::string>("general.name"), "fill 2.000000");
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 2.0f) << "value " << i << " is from the other writer";
  // The file is readable by others as a new file is (not the temporary file's 0600).
  EXPECT_NE(fs::status(out).permissions() & fs::perms::others_read, fs::perms::none);
}

}  // namespace
