// minfer-gguf info: what a GGUF file holds, for people (text) or programs (--json).
#include <cinttypes>
#include <cstdio>
#include <map>

#include "common/json.hpp"
#include "common/progress.hpp"
#include "gguf/gguf.hpp"
#include "gguf_commands.hpp"
#include "minfer/dtype.h"

namespace minfer::tools {
namespace {

struct Totals {
  int64_t tensors = 0, params = 0;
  uint64_t bytes = 0;
};

// The usual hyperparameters of an architecture, as (label, key suffix) pairs.
const std::pair<const char *, const char *> kHyper[] = {
    {"layers", "block_count"},          {"n_embd", "embedding_length"},
    {"n_ff", "feed_forward_length"},    {"heads", "attention.head_count"},
    {"kv_heads", "attention.head_count_kv"}, {"context", "context_length"},
    {"rope_theta", "rope.freq_base"},   {"rope_dims", "rope.dimension_count"},
    {"rms_eps", "attention.layer_norm_rms_epsilon"},
};

json::Json json_value(const gguf::Value &v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: return std::get<std::string>(v.v);
    case ValueType::BOOL: return std::get<bool>(v.v);
    case ValueType::F32: case ValueType::F64: return json::number(std::get<double>(v.v));
    case ValueType::ARRAY:
      // Arrays (token lists, merges) are summarized: the full lists are megabytes.
      return {{"type", "array"}, {"elem", gguf::value_type_name(v.arr().elem)}, {"count", v.arr().size()}};
    default:
      if (const auto *u = std::get_if<uint64_t>(&v.v)) return *u;
      if (const auto *i = std::get_if<int64_t>(&v.v)) return *i;
      return v.to_string();
  }
}

std::string dims_string(const gguf::TensorInfo &t) {
  std::string s;
  for (int d = 0; d < t.n_dims; ++d) s += (d ? " x " : "") + std::to_string(t.shape[d]);
  return s;
}

}  // namespace

int cmd_info(const std::vector<std::string> &args) {
  std::string path;
  bool as_json = false;
  for (const auto &a : args) {
    if (a == "--json") as_json = true;
    else if (path.empty()) path = a;
    else throw UsageError("unexpected argument '" + a + "'");
  }
  if (path.empty()) throw UsageError("no FILE given");
  const auto f = gguf::File::open(path);
  const std::string arch = f->get_or<std::string>("general.architecture", "");

  std::map<std::string, Totals> per_type;
  Totals all;
  for (const auto &t : f->tensors()) {
    Totals &x = per_type[minfer_dtype_name(t.dtype)];
    for (Totals *y : {&x, &all}) y->tensors++, y->params += t.n_elements(), y->bytes += t.n_bytes;
  }
  const gguf::Value *tokens = f->find("tokenizer.ggml.tokens");
  const size_t n_tokens = tokens && tokens->type == gguf::ValueType::ARRAY ? tokens->arr().size() : 0;
  const gguf::Value *merges = f->find("tokenizer.ggml.merges");
  const size_t n_merges = merges && merges->type == gguf::ValueType::ARRAY ? merges->arr().size() : 0;

  if (as_json) {
    json::Json hyper = json::Json::object(), meta = json::Json::object(), tensors = json::Json::array(), totals = json::Json::object();
    for (const auto &[label, suffix] : kHyper)
      if (const gguf::Value *v = f->find(arch + "." + suffix)) hyper[label] = json_value(*v);
    for (const auto &[k, v] : f->metadata()) meta[k] = json_value(v);
    for (const auto &t : f->tensors())
      tensors.push_back({{"name", t.name},
                         {"dims", std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.n_dims)},
                         {"type", minfer_dtype_name(t.dtype)},
                         {"bytes", t.n_bytes},
                         {"offset", f->data_offset() + t.offset}});
    for (const auto &[type, x] : per_type) totals[type] = {{"tensors", x.tensors}, {"params", x.params}, {"bytes", x.bytes}};
    const json::Json j = {{"file", path},
                          {"version", f->version()},
                          {"size_bytes", f->file_size()},
                          {"alignment", f->alignment()},
                          {"architecture", arch},
                          {"hyperparameters", hyper},
                          {"tokenizer", {{"model", f->get_or<std::string>("tokenizer.ggml.model", "")}, {"tokens", n_tokens}, {"merges", n_merges}}},
                          {"metadata", meta},
                          {"tensors", tensors},
                          {"totals", totals},
                          {"n_tensors", all.tensors},
                          {"n_params", all.params}};
    std::printf("%s\n", json::dump(j, 2).c_str());
    return 0;
  }

  std::printf("file:          %s (GGUF v%u, %s, alignment %u)\n", path.c_str(), f->version(),
              human_bytes(f->file_size()).c_str(), f->alignment());
  std::printf("architecture:  %s\n", arch.empty() ? "(none: a vocabulary-only file?)" : arch.c_str());
  if (const gguf::Value *name = f->find("general.name")) std::printf("name:          %s\n", name->to_string().c_str());
  std::string hyper;
  for (const auto &[label, suffix] : kHyper)
    if (const gguf::Value *v = f->find(arch + "." + suffix)) hyper += std::string(hyper.empty() ? "" : ", ") + label + " " + v->to_string();
  if (!hyper.empty()) std::printf("hyperparams:   %s\n", hyper.c_str());
  if (n_tokens) {
    std::printf("tokenizer:     %s, %zu tokens", f->get_or<std::string>("tokenizer.ggml.model", "?").c_str(), n_tokens);
    if (const gguf::Value *pre = f->find("tokenizer.ggml.pre")) std::printf(", pre %s", pre->to_string().c_str());
    if (n_merges) std::printf(", %zu merges", n_merges);
    for (const char *k : {"bos", "eos"})
      if (const gguf::Value *v = f->find(std::string("tokenizer.ggml.") + k + "_token_id")) std::printf(", %s %s", k, v->to_string().c_str());
    std::printf("\n");
  }
  std::printf("metadata:      %zu keys\n", f->metadata().size());
  for (const auto &[k, v] : f->metadata()) std::printf("  %-44s %s\n", k.c_str(), v.to_string().c_str());
  std::printf("tensors:       %zu\n", f->tensors().size());
  std::printf("  %-36s %-22s %-6s %12s\n", "name", "dims", "type", "bytes");
  for (const auto &t : f->tensors())
    std::printf("  %-36s %-22s %-6s %12" PRIu64 "\n", t.name.c_str(), dims_string(t).c_str(), minfer_dtype_name(t.dtype), t.n_bytes);
  std::printf("totals:\n");
  for (const auto &[type, x] : per_type)
    std::printf("  %-6s %6" PRId64 " tensors %12s %14" PRId64 " params\n", type.c_str(), x.tensors, human_bytes(x.bytes).c_str(), x.params);
  std::printf("  %-6s %6" PRId64 " tensors %12s %14" PRId64 " params\n", "all", all.tensors, human_bytes(all.bytes).c_str(), all.params);
  return 0;
}

}  // namespace minfer::tools
