// core/models/model.hpp — a GGUF model turned into a graph: hyperparameters, weights, builder.
//
// An architecture is one file (llama.cpp, qwen2.cpp) that reads its hyperparameters from the
// GGUF metadata and says how it differs from the plain decoder transformer built in
// transformer.cpp, plus its line in the table in hparams.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "graph/graph.hpp"
#include "minfer/ops.h"

namespace minfer::models {

struct Hparams {
  std::string arch;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_vocab = 0;
  int64_t head_dim = 0, rope_dims = 0, n_ctx_train = 0;
  float rope_theta = 10000.0f, rope_freq_scale = 1.0f, rms_eps = 1e-5f;
  int32_t rope_mode = MINFER_ROPE_NORMAL;
  bool qkv_bias = false;  // Q/K/V projections carry biases (Qwen2)
  bool qk_norm = false;   // per-head RMS norms of q and k before RoPE (Qwen3: attn_q_norm, attn_k_norm)
  bool fused_qkv = false;      // one attn_qkv weight, rows Q then K then V (Phi-3)
  bool fused_gate_up = false;  // one ffn_up of 2 * n_ff rows, gate then up (Phi-3)
  // LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): frequency factors rope_factors_long for
  // contexts above n_ctx_orig, else rope_factors_short; the rotated values scaled by
  // rope_attn_factor (llama.cpp's choice and scale).
  bool longrope = false;
  int64_t n_ctx_orig = 0;
  float rope_attn_factor = 1.0f;
  // Gemma:
  float embd_scale = 0;       // > 0: the embeddings multiplied by it (sqrt(n_embd))
  float attn_scale = 0;       // q.k scale; 0 = 1 / sqrt(head_dim)
  bool post_norms = false;    // RMS norms of the attention and FFN outputs before their residual adds
  bool gelu_ffn = false;      // gelu(gate) * up instead of silu(gate) * up
  float attn_softcap = 0;     // > 0: scores capped at softcap * tanh(s / softcap)
  float final_softcap = 0;    // > 0: the same for the logits
  // Sliding-window layers (swa_layers[l] != 0) attend to the last n_swa positions and rotate
  // with their own RoPE base and scale; n_swa 0 = none.
  int64_t n_swa = 0;
  std::vector<uint8_t> swa_layers;
  float rope_theta_swa = 0, rope_freq_scale_swa = 1.0f;
  // Mixture of experts (every layer; moe.cpp): n_expert routed experts of n_ff_exp each,
  // n_expert_used per token; 0 experts = a dense FFN of n_ff.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool expert_weights_norm = true;   // the chosen experts' probabilities renormalised to sum 1
  float expert_weights_scale = 1.0f;
  bool is_swa_layer(int64_t l) const { return n_swa > 0 && l < int64_t(swa_layers.size()) && swa_layers[size_t(l)]; }
};

struct BuildOptions {
  int64_t n_ctx = 0;      // positions one sequence may hold; 0 = min(training context, 4096)
  int64_t max_batch = 512;  // most tokens one step takes (prefill runs in chunks of this)
  int32_t kv_type = MINFER_DTYPE_F16;
  bool all_logits = false;  // logits for every token of a step, not just the last
  // The final norm's rows (kHidden) are an output too: a sequence's last hidden state, which
  // embedding requests read (last-token pooling). Off by default: an output keeps the norm
  // from fusing into the output matmul.
  bool embeddings = false;
  // The paged KV cache (SERVING.md): max_seqs sequence slots, pages of page_size positions,
  // kv_pages pages per layer (0 = room for max_seqs full contexts).
  int64_t max_seqs = 1;
  int32_t page_size = 16;
  int64_t kv_pages = 0;
  // split: tensor (RunConfig::tensor_ranks): each layer's heads and FFN divided among this many
  // ranks, their partial sums added by ALL_REDUCE nodes (Megatron-style); 0 = not divided.
  int32_t tensor_parallel = 0;
  int64_t pages_per_seq() const { return (n_ctx + page_size - 1) / page_size; }  // a page table row
  // Logit rows a step may give a scored prompt (its positions' log-probabilities: completions'
  // echo with logprobs), beyond one for each sequence; each costs a row of logits memory.
  int64_t score_rows = 0;
  int64_t max_outputs() const { return std::max<int64_t>(1, std::min(std::max(max_seqs, score_rows), max_batch)); }  // logit rows per step
};

struct Model {
  std::shared_ptr<gguf::File> file;
  Hparams hp;
  BuildOptions opts;
  Graph graph;
  // KV cache bytes of one page: every layer's K and V rows of page_size positions.
  uint64_t kv_page_bytes() const {
    return uint64_t(hp.n_layer) * 2 * uint64_t(hp.n_head_kv * hp.head_dim) * uint64_t(opts.page_size) *
           (opts.kv_type == MINFER_DTYPE_F32 ? 4 : 2);
  }
  // Graph input/output names.
  // kSlots: each token's sequence slot; kPageTable: i32 [pages_per_seq, max_seqs]; kLogitRows:
  // the step's rows whose logits are wanted (absent with all_logits); kGreedy: each of those
  // rows' arg-max token, computed on the backend (a greedy step reads it, not the logits;
  // models built for several sequences). kHidden: the final norm's rows, [outputs, n_embd]
  // (BuildOptions::embeddings).
  static constexpr const char *kTokens = "tokens", *kPositions = "positions", *kSlots = "kv_slots", *kPageTable = "kv_page_table",
                              *kLogitRows = "logit_rows", *kLogits = "logits", *kGreedy = "greedy_tokens", *kHidden = "output_norm";
};

// Reads hyperparameters with the architecture's reader and builds the graph; errors name the
// file and the key or tensor at fault.
std::unique_ptr<Model> load_model(std::shared_ptr<gguf::File> file, const BuildOptions &opts);

// ---- for architecture files -------------------------------------------------------------

// Each architecture file defines its reader; hparams.cpp lists them by name.
Hparams read_llama(const gguf::File &f);
Hparams read_qwen2(const gguf::File &f);
Hparams read_qwen3(const gguf::File &f);
Hparams read_qwen3moe(const gguf::File &f);
Hparams read_phi3(const gguf::File &f);
Hparams read_gemma2(const gguf::File &f);
Hparams read_gemma3(const gguf::File &f);
std::vector<std::string> architectures();

// The sliding-window layers from "<arch>.attention.sliding_window_pattern": a period P (layer l
// slides when l % P < P - 1, llama.cpp's rule; default_period where the key is absent) or an
// array of one bool per layer.
std::vector<uint8_t> read_swa_layers(const gguf::File &f, const Hparams &hp, int64_t default_period);

// Reads what every LLaMA-style architecture stores under "<arch>.*".
Hparams read_common_hparams(const gguf::File &f, const std::string &arch);

// The decoder-only transformer every registered architecture builds.
// weights point into the file's mapping, which the graph keeps alive.
Graph build_transformer(const std::shared_ptr<gguf::File> &f, const Hparams &hp, const BuildOptions &opts);

}  // namespace minfer::models
