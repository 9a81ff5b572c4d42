// core/models/hparams.cpp — reading and checking the hyperparameters LLaMA-style models share.
#include <cmath>
#include <cstdlib>
#include <map>

#include "common/error.hpp"
#include "models/model.hpp"

namespace minfer::models {
namespace {

using HparamsReader = Hparams (*)(const gguf::File &f);

// `general.architecture` -> its reader: one line per architecture.
const std::map<std::string, HparamsReader> &registry() {
  static const std::map<std::string, HparamsReader> r = {
      {"llama", read_llama},
      {"qwen2", read_qwen2},
      {"qwen3", read_qwen3},
      {"qwen3moe", read_qwen3moe},
      {"phi3", read_phi3},
      {"gemma2", read_gemma2},
      {"gemma3", read_gemma3},
  };
  return r;
}

// What the metadata says must agree with the tensors: a block_count below the blocks present
// would silently drop layers, and a vocabulary of another size than the embedding would give
// ids the tokenizer cannot spell (or rows the model lacks).
void check_consistency(const gguf::File &f, const Hparams &hp) {
  int64_t last_block = -1;
  std::string example;
  for (const auto &t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    char *end = nullptr;
    const long long b = std::strtoll(t.name.c_str() + 4, &end, 10);
    if (end != t.name.c_str() + 4 && *end == '.' && b > last_block) last_block = b, example = t.name;
  }
  if (last_block >= hp.n_layer)
    throw Error(f.path() + ": " + hp.arch + ".block_count is " + std::to_string(hp.n_layer) + " but the file holds blocks up to " +
                std::to_string(last_block) + " ('" + example + "'): " + std::to_string(last_block + 1) +
                " blocks; the metadata and the tensors disagree, so the file is damaged");
  if (const gguf::Value *tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->type == gguf::ValueType::ARRAY) {
    const uint64_t n_tokens = tokens->arr().size();
    if (n_tokens != uint64_t(hp.n_vocab))
      throw Error(f.path() + ": the vocabulary (tokenizer.ggml.tokens) has " + std::to_string(n_tokens) +
                  " tokens but token_embd.weight has " + std::to_string(hp.n_vocab) +
                  " rows; they must be equal (the file is damaged or was converted wrongly)");
  }
}

}  // namespace

std::vector<std::string> architectures() {
  std::vector<std::string> names;
  for (const auto &[n, _] : registry()) names.push_back(n);
  return names;
}

std::vector<uint8_t> read_swa_layers(const gguf::File &f, const Hparams &hp, int64_t default_period) {
  const std::string key = hp.arch + ".attention.sliding_window_pattern";
  std::vector<uint8_t> layers(size_t(hp.n_layer), 0);
  const gguf::Value *v = f.find(key);
  if (v && v->type == gguf::ValueType::ARRAY) {
    const auto &items = v->arr().items();
    if (int64_t(items.size()) != hp.n_layer)
      throw Error(f.path() + ": " + key + " holds " + std::to_string(items.size()) + " values; it needs one per layer (" +
                  std::to_string(hp.n_layer) + ")");
    for (size_t l = 0; l < items.size(); ++l) {
      if (items[l].type != gguf::ValueType::BOOL) throw Error(f.path() + ": " + key + " must be an integer period or an array of bools");
      layers[l] = std::get<bool>(items[l].v) ? 1 : 0;
    }
    return layers;
  }
  const int64_t period = v ? f.get_int(key) : default_period;
  if (period < 1) throw Error(f.path() + ": " + key + " is " + std::to_string(period) + "; it must be at least 1");
  for (int64_t l = 0; l < hp.n_layer; ++l) layers[size_t(l)] = l % period < period - 1;
  return layers;
}

Hparams read_common_hparams(const gguf::File &f, const std::string &arch) {
  Hparams hp;
  hp.arch = arch;
  const std::string p = arch + ".";
  const auto fail = [&](const std::string &what) { throw Error(f.path() + ": " + what); };
  // A count read from the file: any integer type, and positive, or the error names the key.
  const auto count = [&](const std::string &key, int64_t fallback) {
    const int64_t v = f.find(key) ? f.get_int(key) : fallback;
    if (v <= 0) fail(key + " is " + std::to_string(v) + "; it must be a positive count (the file's metadata is damaged)");
    return v;
  };
  hp.n_embd = count(p + "embedding_length", -1);
  hp.n_layer = count(p + "block_count", -1);
  hp.n_head = count(p + "attention.head_count", -1);
  hp.n_head_kv = count(p + "attention.head_count_kv", hp.n_head);
  hp.n_ff = count(p + "feed_forward_length", -1);
  hp.n_ctx_train = count(p + "context_length", 2048);
  hp.rms_eps = f.get<float>(p + "attention.layer_norm_rms_epsilon");
  hp.rope_theta = f.get_or<float>(p + "rope.freq_base", 10000.0f);
  // RoPE scaling as llama.cpp reads it: rope.scaling.factor (or the older rope.scale_linear)
  // divides every frequency for type "linear" (the default when only a factor is given);
  // "none" turns it off. Typed reads: a value of another type is an error naming the key.
  const std::string scaling = f.get_or<std::string>(p + "rope.scaling.type", "linear");
  float factor = 0;
  for (const char *key : {"rope.scaling.factor", "rope.scale_linear"})
    if (f.find(p + key)) {
      factor = f.get<float>(p + key);
      if (!(factor > 0) || !std::isfinite(factor)) fail(p + key + " is " + std::to_string(factor) + "; it must be a positive number");
      break;
    }
  if (scaling == "linear") {
    if (factor > 0) hp.rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none") {
    if (scaling != "yarn" && scaling != "longrope")
      fail(p + "rope.scaling.type is '" + scaling + "'; known: none, linear, yarn, longrope");
    if (factor > 1)
      fail(p + "rope.scaling.type '" + scaling + "' (factor " + std::to_string(factor) +
           ") is not supported yet; a file without it, or with linear scaling, runs");
  }
  if (!std::isfinite(hp.rope_theta) || !(hp.rope_theta > 0))
    fail(p + "rope.freq_base is " + std::to_string(hp.rope_theta) + "; it must be a positive number");
  if (hp.n_head % hp.n_head_kv)
    fail(p + "attention.head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  // The head size: attention.key_length where the file says (Qwen3, Gemma: n_head * head_dim
  // need not be n_embd), else n_embd / n_head.
  if (f.find(p + "attention.key_length")) {
    hp.head_dim = count(p + "attention.key_length", -1);
    const int64_t v = count(p + "attention.value_length", hp.head_dim);
    if (v != hp.head_dim)
      fail(p + "attention.value_length " + std::to_string(v) + " differs from " + p + "attention.key_length " + std::to_string(hp.head_dim) +
           "; minfer runs K and V heads of one size");
  } else {
    if (hp.n_embd % hp.n_head)
      fail(p + "embedding_length " + std::to_string(hp.n_embd) + " is not a multiple of " + p + "attention.head_count " +
           std::to_string(hp.n_head) + " (and the file has no " + p + "attention.key_length)");
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  hp.rope_dims = f.find(p + "rope.dimension_count") ? f.get_int(p + "rope.dimension_count") : hp.head_dim;
  if (hp.rope_dims <= 0 || hp.rope_dims > hp.head_dim || hp.rope_dims % 2) fail(p + "rope.dimension_count " + std::to_string(hp.rope_dims) + " must be even and at most the head size " + std::to_string(hp.head_dim));
  if (!(hp.rms_eps > 0) || !std::isfinite(hp.rms_eps)) fail(p + "attention.layer_norm_rms_epsilon must be a positive number");
  // Routed experts (Mixtral under llama, qwen3moe): their width is expert_feed_forward_length
  // where the file has it, else feed_forward_length (Mixtral's GGUFs).
  if (f.find(p + "expert_count")) {
    hp.n_expert = count(p + "expert_count", -1);
    hp.n_expert_used = count(p + "expert_used_count", -1);
    if (hp.n_expert_used > hp.n_expert)
      fail(p + "expert_used_count " + std::to_string(hp.n_expert_used) + " is more than " + p + "expert_count " + std::to_string(hp.n_expert));
    hp.n_ff_exp = count(p + "expert_feed_forward_length", hp.n_ff);
    if (f.find(p + "expert_weights_scale")) hp.expert_weights_scale = f.get<float>(p + "expert_weights_scale");
    if (f.find(p + "expert_gating_func") && f.get_int(p + "expert_gating_func") != 1)
      fail(p + "expert_gating_func is " + std::to_string(f.get_int(p + "expert_gating_func")) + "; minfer routes by softmax (1) only");
    if (!f.find_tensor("blk.0.ffn_gate_exps.weight") && f.find_tensor("blk.0.ffn_gate.0.weight"))
      fail("the experts are stored one tensor each (blk.N.ffn_gate.E.weight, an old Mixtral conversion); minfer reads the merged "
           "3-D ffn_*_exps tensors that llama.cpp's convert_hf_to_gguf.py has written since 2024: convert the model again");
  }
  hp.n_vocab = f.tensor("token_embd.weight").shape[1];
  check_consistency(f, hp);
  return hp;
}

std::unique_ptr<Model> load_model(std::shared_ptr<gguf::File> file, const BuildOptions &opts) {
  const std::string arch = file->get<std::string>("general.architecture");
  auto it = registry().find(arch);
  if (it == registry().end()) {
    std::string known;
    for (const auto &n : architectures()) known += (known.empty() ? "" : ", ") + n;
    throw Error(file->path() + ": architecture '" + arch + "' is not supported (supported: " + known + ")");
  }
  auto m = std::make_unique<Model>();
  m->file = file;
  m->hp = it->second(*file);
  m->opts = opts;
  if (m->opts.n_ctx <= 0) m->opts.n_ctx = std::min<int64_t>(m->hp.n_ctx_train, 4096);
  if (m->opts.max_batch <= 0) throw Error("max_batch must be positive");
  BuildOptions &o = m->opts;
  if (o.max_seqs < 1) throw Error("max_seqs (parallel sequences) must be at least 1, not " + std::to_string(o.max_seqs));
  // A step holds at most every sequence's whole context (capping it at one context, as a
  // single sequence needs, held 64 sequences' prefill to 640-token steps).
  o.max_batch = std::min(o.max_batch, o.n_ctx * o.max_seqs);
  if (o.page_size < 1 || o.page_size > 1024 || (o.page_size & (o.page_size - 1)))
    throw Error("kv_page_size must be a power of two from 1 to 1024, not " + std::to_string(o.page_size));
  if (o.kv_pages < 0) throw Error("kv_pages must not be negative");
  if (o.kv_pages == 0) o.kv_pages = o.max_seqs * o.pages_per_seq();  // every slot a full context
  m->graph = build_transformer(file, m->hp, m->opts);
  return m;
}

}  // namespace minfer::models
