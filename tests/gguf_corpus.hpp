// tests/gguf_corpus.hpp — a small valid GGUF file built byte by byte, and malformed variants
// of it, each with the error it must produce. Shared by the malformed-file test and the
// fuzzer's seed corpus.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace minfer::test {

class Bytes {
 public:
  std::vector<uint8_t> b;
  template <class T> Bytes &put(T v) {
    const auto *p = reinterpret_cast<const uint8_t *>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes &str(const std::string &s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes &pad(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type;
  uint64_t offset;
};

struct FileSpec {
  uint32_t magic = 0x46554747, version = 3;
  int64_t n_tensors_override = -1, n_kv_override = -1;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> kv;  // key -> (type + value bytes)
  std::vector<TensorSpec> tensors;
  uint32_t alignment = 32;
  uint64_t data_bytes = 0;  // bytes of data section to append
};

inline std::vector<uint8_t> u32_value(uint32_t v) { Bytes b; b.put<uint32_t>(4).put<uint32_t>(v); return b.b; }
inline std::vector<uint8_t> str_value(const std::string &s) { Bytes b; b.put<uint32_t>(8).str(s); return b.b; }

// Builds the file; the positions of its sections are recorded for truncation tests.
struct Built {
  std::vector<uint8_t> bytes;
  std::vector<size_t> boundaries;  // end of header, of each kv, of each tensor info, data start
};

inline Built build(const FileSpec &s) {
  Built out;
  Bytes b;
  b.put(s.magic).put(s.version);
  b.put<uint64_t>(s.n_tensors_override >= 0 ? uint64_t(s.n_tensors_override) : s.tensors.size());
  b.put<uint64_t>(s.n_kv_override >= 0 ? uint64_t(s.n_kv_override) : s.kv.size());
  out.boundaries.push_back(b.size());
  for (const auto &[k, v] : s.kv) {
    b.str(k);
    b.b.insert(b.b.end(), v.begin(), v.end());
    out.boundaries.push_back(b.size());
  }
  for (const auto &t : s.tensors) {
    b.str(t.name).put<uint32_t>(uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) b.put(d);
    b.put(t.type).put(t.offset);
    out.boundaries.push_back(b.size());
  }
  b.pad(s.alignment);
  out.boundaries.push_back(b.size());
  for (uint64_t i = 0; i < s.data_bytes; ++i) b.b.push_back(uint8_t(i * 7));
  out.bytes = std::move(b.b);
  return out;
}

// A valid file: a few metadata kinds (string, u32, nested array) and two tensors.
inline FileSpec valid_spec() {
  FileSpec s;
  s.kv.push_back({"general.architecture", str_value("llama")});
  s.kv.push_back({"llama.block_count", u32_value(1)});
  Bytes arr;  // array of 2 arrays of 2 int32
  arr.put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  for (int i = 0; i < 2; ++i) arr.put<uint32_t>(5).put<uint64_t>(2).put<int32_t>(i).put<int32_t>(-i);
  s.kv.push_back({"test.nested", arr.b});
  s.tensors.push_back({"a.weight", {32, 2}, 8 /*q8_0*/, 0});   // 2 blocks x 34 = 68 bytes
  s.tensors.push_back({"b.weight", {4}, 0 /*f32*/, 96});        // 16 bytes at 96
  s.data_bytes = 112;
  return s;
}

struct Malformed {
  std::string name;
  std::vector<uint8_t> bytes;
  std::string expect;  // a substring of the error
};

inline std::vector<Malformed> malformed_corpus() {
  std::vector<Malformed> out;
  auto add = [&](const std::string &name, const FileSpec &s, const std::string &expect) {
    out.push_back({name, build(s).bytes, expect});
  };
  FileSpec s = valid_spec();
  { FileSpec x = s; x.magic = 0x46554746; add("bad_magic", x, "not a GGUF file"); }
  { FileSpec x = s; x.version = 1; add("version_1", x, "version 1 is not supported"); }
  { FileSpec x = s; x.version = 99; add("version_99", x, "unknown GGUF version 99"); }
  { FileSpec x = s; x.n_kv_override = int64_t(1) << 60; add("huge_kv_count", x, "metadata count"); }
  { FileSpec x = s; x.n_tensors_override = int64_t(1) << 60; add("huge_tensor_count", x, "tensor count"); }
  { FileSpec x = s; x.n_kv_override = 40; add("kv_count_too_large", x, "metadata count 40 is more than the file can hold"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 40); x.kv.push_back({"k.huge_string", v.b}); add("huge_string", x, "claims 1099511627776 bytes"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(uint64_t(1) << 50); x.kv.push_back({"k.huge_array", v.b}); add("huge_array", x, "more than the"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(13).put<uint32_t>(0); x.kv.push_back({"k.bad_type", v.b}); add("unknown_value_type", x, "unknown value type 13"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(1); x.kv.push_back({"k.bad_elem", v.b}); add("unknown_array_elem", x, "unknown element type 77"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(7).put<uint8_t>(2); x.kv.push_back({"k.bool", v.b}); add("bad_bool", x, "expected 0 or 1"); }
  // Arrays read in place (File::open) are validated as they are skipped.
  { FileSpec x = s; Bytes v; v.put<uint32_t>(9).put<uint32_t>(7).put<uint64_t>(3).put<uint8_t>(1).put<uint8_t>(0).put<uint8_t>(5);
    x.kv.push_back({"k.bools", v.b}); add("bad_bool_in_array", x, "expected 0 or 1"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).put<uint64_t>(1).put<uint8_t>('a').put<uint64_t>(uint64_t(1) << 40);
    x.kv.push_back({"k.strings", v.b}); add("huge_string_in_array", x, "claims 1099511627776 bytes"); }
  { FileSpec x = s; x.kv.push_back(x.kv[0]); add("duplicate_key", x, "appears twice"); }
  { FileSpec x = s; Bytes v; v.put<uint32_t>(9);  // an array of arrays of ... (10 deep)
    for (int i = 0; i < 10; ++i) v.put<uint32_t>(9).put<uint64_t>(1);
    v.put<uint32_t>(0).put<uint64_t>(0);
    x.kv.push_back({"k.deep", v.b}); add("deep_nesting", x, "nest deeper"); }
  { FileSpec x = s; x.kv.push_back({"general.alignment", u32_value(24)}); add("alignment_not_pow2", x, "not a power of two"); }
  { FileSpec x = s; x.tensors[1].offset = 100; add("misaligned_offset", x, "not a multiple of the alignment"); }
  { FileSpec x = s; x.tensors[1].offset = 1 << 20; add("offset_past_end", x, "extends past the end of the file"); }
  { FileSpec x = s; x.tensors[1].offset = 64; add("overlapping_tensors", x, "overlaps tensor 'a.weight'"); }
  { FileSpec x = s; x.tensors[0].type = 4; add("retired_type", x, "unknown type id 4"); }
  { FileSpec x = s; x.tensors[0].type = 1000; add("unknown_type", x, "unknown type id 1000"); }
  { FileSpec x = s; x.tensors[0].type = 21; add("iq3_s_type", x, "is iq3_s (ggml type 21), which minfer does not read yet"); }
  { FileSpec x = s; x.tensors[0].dims = {48, 2}; add("partial_block", x, "not a multiple of q8_0's block of 32"); }
  { FileSpec x = s; x.tensors[0].dims = {}; add("zero_dims", x, "has 0 dimensions"); }
  { FileSpec x = s; x.tensors[0].dims = {32, 1, 1, 1, 1}; add("five_dims", x, "has 5 dimensions"); }
  { FileSpec x = s; x.tensors[0].dims = {32, 0}; add("zero_dim", x, "dimension 1 is 0"); }
  { FileSpec x = s; x.tensors[0].dims = {uint64_t(1) << 62, uint64_t(1) << 3}; add("overflowing_dims", x, "more elements than fit in 64 bits"); }
  { FileSpec x = s; x.tensors[0].dims = {uint64_t(1) << 63}; add("dim_too_large", x, "expected 1 to 2^63-1"); }
  { FileSpec x = s; x.tensors[0].dims = {uint64_t(1) << 61, 2}; x.tensors[0].type = 0; add("byte_size_overflow", x, "byte size overflows"); }
  { FileSpec x = s; x.tensors[1].name = "a.weight"; add("duplicate_tensor", x, "appears twice"); }
  { FileSpec x = s; x.tensors[0].name = ""; add("empty_tensor_name", x, "empty name"); }
  // Truncation at every section boundary (and one byte into each section).
  const Built full = build(s);
  for (size_t i = 0; i < full.boundaries.size(); ++i) {
    for (size_t cut : {full.boundaries[i] - 1, full.boundaries[i] + (i + 1 < full.boundaries.size() ? 1 : 0)}) {
      if (cut >= full.bytes.size()) continue;
      const bool in_data = cut >= full.boundaries.back();
      // Any error will do mid-file (which check fires first depends on the cut); the ends are exact.
      out.push_back({"truncated_at_" + std::to_string(cut), std::vector<uint8_t>(full.bytes.begin(), full.bytes.begin() + long(cut)),
                     in_data ? "extends past the end of the file" : (cut < 24 ? "but the file ends" : "at byte")});
    }
  }
  return out;
}

}  // namespace minfer::test
