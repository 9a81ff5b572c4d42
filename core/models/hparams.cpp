// core/models/hparams.cpp — reading and checking the hyperparameters LLaMA-style models share.
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
  };
  return r;
}

}  // namespace

std::vector<std::string> architectures() {
  std::vector<std::string> names;
  for (const auto &[n, _] : registry()) names.push_back(n);
  return names;
}

Hparams read_common_hparams(const gguf::File &f, const std::string &arch) {
  Hparams hp;
  hp.arch = arch;
  const std::string p = arch + ".";
  hp.n_embd = f.get_int(p + "embedding_length");
  hp.n_layer = f.get_int(p + "block_count");
  hp.n_head = f.get_int(p + "attention.head_count");
  hp.n_head_kv = f.find(p + "attention.head_count_kv") ? f.get_int(p + "attention.head_count_kv") : hp.n_head;
  hp.n_ff = f.get_int(p + "feed_forward_length");
  hp.n_ctx_train = f.find(p + "context_length") ? f.get_int(p + "context_length") : 2048;
  hp.rms_eps = f.get<float>(p + "attention.layer_norm_rms_epsilon");
  hp.rope_theta = f.get_or<float>(p + "rope.freq_base", 10000.0f);
  if (const gguf::Value *scale = f.find(p + "rope.scale_linear")) hp.rope_freq_scale = 1.0f / float(std::get<double>(scale->v));
  const auto fail = [&](const std::string &what) { throw Error(f.path() + ": " + what); };
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_ff <= 0) fail("hyperparameters must be positive");
  if (hp.n_embd % hp.n_head) fail(p + "embedding_length " + std::to_string(hp.n_embd) + " is not a multiple of " + p + "attention.head_count " + std::to_string(hp.n_head));
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv)
    fail(p + "attention.head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  hp.head_dim = hp.n_embd / hp.n_head;
  hp.rope_dims = f.find(p + "rope.dimension_count") ? f.get_int(p + "rope.dimension_count") : hp.head_dim;
  if (hp.rope_dims <= 0 || hp.rope_dims > hp.head_dim || hp.rope_dims % 2) fail(p + "rope.dimension_count " + std::to_string(hp.rope_dims) + " must be even and at most the head size " + std::to_string(hp.head_dim));
  if (!(hp.rms_eps > 0)) fail(p + "attention.layer_norm_rms_epsilon must be positive");
  hp.n_vocab = f.tensor("token_embd.weight").shape[1];
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
  m->opts.max_batch = std::min(m->opts.max_batch, m->opts.n_ctx);
  m->graph = build_transformer(file, m->hp, m->opts);
  return m;
}

}  // namespace minfer::models
