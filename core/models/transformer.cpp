// core/models/transformer.cpp — the decoder-only transformer graph of LLaMA-style models.
//
//   x = embed(tokens)
//   per layer: x += Wo attn(rope(Wq n(x) + bq), rope(Wk n(x) + bk), Wv n(x) + bv, cache)
//              (Llama 3.1+: RoPE frequencies divided by rope_freqs; Qwen3: q and k through
//              a per-head RMS norm before their RoPE; Phi-3: Q/K/V
//              and gate/up read as row ranges of one fused weight each)
//              x += Wdown (silu(Wgate n(x)) * Wup n(x))          (n = RMS norm with weight)
//              (mixture of experts: the FFN of moe.cpp, k routed experts per token)
//   logits = Wout n(x[rows])            (rows: the step's tokens that need logits;
//                                        Wout = token_embd when output.weight is absent)
// Gemma: x = embed * sqrt(n_embd); each of the two residual branches ends in its own RMS
// norm; gelu instead of silu; attention scores and logits soft-capped; sliding-window layers
// attend to the last n_swa positions with their own RoPE base.
// The KV caches are paged (SERVING.md): every layer's attention reads the same page table.
#include <cmath>

#include "common/error.hpp"
#include "models/model.hpp"
#include "models/weights.hpp"
#include "models/moe.hpp"

namespace minfer::models {

Graph build_transformer(const std::shared_ptr<gguf::File> &file, const Hparams &hp, const BuildOptions &o) {
  const gguf::File &f = *file;
  GraphBuilder gb;
  WeightReader w(file, gb);
  const int64_t d = hp.n_embd, qd = hp.n_head * hp.head_dim, kvd = hp.n_head_kv * hp.head_dim, T = o.max_batch;
  const std::string dims = "n_embd " + std::to_string(d);

  const TensorId tokens = gb.input(Model::kTokens, MINFER_DTYPE_I32, {T}, 0);
  const TensorId pos = gb.input(Model::kPositions, MINFER_DTYPE_I32, {T}, 0);
  const TensorId slots = gb.input(Model::kSlots, MINFER_DTYPE_I32, {T}, 0);
  const TensorId page_table = gb.input(Model::kPageTable, MINFER_DTYPE_I32, {o.pages_per_seq(), o.max_seqs});
  const int64_t cache_rows = o.kv_pages * o.page_size;
  const TensorId tok_embd = w.weight("token_embd.weight", {d, hp.n_vocab}, "token embedding [" + dims + ", n_vocab]");
  TensorId x = gb.get_rows("token_embd", tok_embd, tokens);
  if (hp.embd_scale > 0) x = gb.scale("token_embd_scale", x, hp.embd_scale);

  minfer_rope_params rq{};
  rq.mode = hp.rope_mode;
  rq.head_dim = int32_t(hp.head_dim);
  rq.n_dims = int32_t(hp.rope_dims);
  rq.theta_base = hp.rope_theta;
  rq.freq_scale = hp.rope_freq_scale;
  rq.attn_factor = hp.rope_attn_factor;  // LongRoPE's scale of the rotated values (1: none)
  minfer_rope_params rq_swa = rq;  // sliding-window layers' own base and scale (Gemma 3)
  rq_swa.theta_base = hp.rope_theta_swa > 0 ? hp.rope_theta_swa : hp.rope_theta;
  rq_swa.freq_scale = hp.rope_freq_scale_swa;
  minfer_attention_params ap{};
  ap.head_dim = int32_t(hp.head_dim);
  ap.n_head = int32_t(hp.n_head);
  ap.n_kv_head = int32_t(hp.n_head_kv);
  ap.scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt(float(hp.head_dim));
  ap.page_size = o.page_size;
  ap.softcap = hp.attn_softcap;

  // A factor per rotated pair dividing its frequency, on every layer: Llama 3.1+'s rope_freqs,
  // or LongRoPE's long or short set by the context (llama.cpp's rule: long above the original).
  const std::string factors_name = hp.longrope ? (o.n_ctx > hp.n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight")
                                               : "rope_freqs.weight";
  const TensorId rope_factors = f.find_tensor(factors_name)
                                    ? w.weight(factors_name, {hp.rope_dims / 2}, "RoPE frequency factors [rope_dims / 2]")
                                    : TensorId(-1);

  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    TensorId h = gb.rms_norm(p + "attn_norm", x, w.weight(p + "attn_norm.weight", {d}, "norm [" + dims + "]"), hp.rms_eps);
    auto proj = [&](const std::string &name, int64_t out) {
      TensorId wt;
      if (hp.fused_qkv) {  // one attn_qkv: rows Q, then K, then V
        const int64_t first = name == "attn_q" ? 0 : name == "attn_k" ? qd : qd + kvd;
        wt = w.weight_rows(p + "attn_qkv.weight", first, out, d, qd + 2 * kvd, name.substr(5), "fused Q/K/V projection");
      } else {
        wt = w.weight(p + name + ".weight", {d, out}, "projection");
      }
      TensorId y = gb.matmul(p + name, wt, h);
      if (hp.qkv_bias) y = gb.add_row_broadcast(p + name + "_bias", y, w.weight(p + name + ".bias", {out}, "bias"));
      return y;
    };
    TensorId q = proj("attn_q", qd), k = proj("attn_k", kvd), v = proj("attn_v", kvd);
    if (hp.qk_norm) {  // each head normalized on its own, one weight of head_dim values
      const std::string hd = "per-head norm [" + std::to_string(hp.head_dim) + "]";
      q = gb.rms_norm(p + "attn_q_norm", q, w.weight(p + "attn_q_norm.weight", {hp.head_dim}, hd), hp.rms_eps, int32_t(hp.head_dim));
      k = gb.rms_norm(p + "attn_k_norm", k, w.weight(p + "attn_k_norm.weight", {hp.head_dim}, hd), hp.rms_eps, int32_t(hp.head_dim));
    }
    const bool swa = hp.is_swa_layer(l);
    q = gb.rope(p + "attn_q_rope", q, pos, swa ? rq_swa : rq, rope_factors);
    k = gb.rope(p + "attn_k_rope", k, pos, swa ? rq_swa : rq, rope_factors);
    const TensorId kc = gb.state(p + "cache_k", o.kv_type, {kvd, cache_rows});
    const TensorId vc = gb.state(p + "cache_v", o.kv_type, {kvd, cache_rows});
    minfer_attention_params lap = ap;
    lap.window = swa ? int32_t(hp.n_swa) : 0;
    const TensorId a = gb.attention(p + "attn", q, k, v, kc, vc, pos, slots, page_table, lap);
    TensorId out = gb.matmul(p + "attn_output", w.weight(p + "attn_output.weight", {qd, d}, "attention output"), a);
    if (hp.post_norms)
      out = gb.rms_norm(p + "post_attention_norm", out, w.weight(p + "post_attention_norm.weight", {d}, "norm [" + dims + "]"), hp.rms_eps);
    x = gb.add(p + "attn_residual", x, out);

    h = gb.rms_norm(p + "ffn_norm", x, w.weight(p + "ffn_norm.weight", {d}, "norm [" + dims + "]"), hp.rms_eps);
    TensorId down;
    if (hp.n_expert > 0) {
      down = build_moe_ffn(gb, w, p, h, hp);
    } else {
      const TensorId wg = hp.fused_gate_up ? w.weight_rows(p + "ffn_up.weight", 0, hp.n_ff, d, 2 * hp.n_ff, "gate", "fused gate+up")
                                           : w.weight(p + "ffn_gate.weight", {d, hp.n_ff}, "feed-forward gate");
      const TensorId wu = hp.fused_gate_up ? w.weight_rows(p + "ffn_up.weight", hp.n_ff, hp.n_ff, d, 2 * hp.n_ff, "up", "fused gate+up")
                                           : w.weight(p + "ffn_up.weight", {d, hp.n_ff}, "feed-forward up");
      const TensorId g = gb.matmul(p + "ffn_gate", wg, h);
      const TensorId u = gb.matmul(p + "ffn_up", wu, h);
      const TensorId s = hp.gelu_ffn ? gb.geglu(p + "ffn_geglu", g, u) : gb.swiglu(p + "ffn_swiglu", g, u);
      down = gb.matmul(p + "ffn_down", w.weight(p + "ffn_down.weight", {hp.n_ff, d}, "feed-forward down"), s);
    }
    if (hp.post_norms)
      down = gb.rms_norm(p + "post_ffw_norm", down, w.weight(p + "post_ffw_norm.weight", {d}, "norm [" + dims + "]"), hp.rms_eps);
    x = gb.add(p + "ffn_residual", x, down);
  }

  if (!o.all_logits) {  // only the rows that end a sequence's part of the step feed samplers
    const TensorId rows = gb.output_rows_input(Model::kLogitRows, MINFER_DTYPE_I32, {o.max_outputs()});
    x = gb.get_rows("last_hidden", x, rows);
  }
  x = gb.rms_norm("output_norm", x, w.weight("output_norm.weight", {d}, "final norm"), hp.rms_eps);
  const TensorId out_w = f.find_tensor("output.weight") ? w.weight("output.weight", {d, hp.n_vocab}, "output projection") : tok_embd;
  const TensorId logits = hp.final_softcap > 0 ? gb.scale(Model::kLogits, gb.matmul("output", out_w, x), 1.0f, hp.final_softcap)
                                               : gb.matmul(Model::kLogits, out_w, x);
  gb.mark_output(logits);
  // Greedy tokens on the backend for the batched session (a one-sequence run reads logits).
  if (!o.all_logits && o.max_seqs > 1) gb.mark_output(gb.argmax(Model::kGreedy, logits));
  return gb.finish();
}

}  // namespace minfer::models
