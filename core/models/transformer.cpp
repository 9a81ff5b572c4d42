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
// split: tensor builds every layer once per rank with its share of the heads and FFN rows, the
// attention output and FFN down sums completed by ALL_REDUCE nodes (docs/ARCHITECTURE.md).
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
  // split: tensor — R ranks, each with its share of every layer's heads and FFN rows (Megatron:
  // Q/K/V and gate/up split by output rows, the attention output and down projections by input
  // columns, their partial sums added by an all-reduce); the rest is repeated on every rank.
  const bool split = o.tensor_parallel > 0;
  const int64_t R = split ? o.tensor_parallel : 1;
  if (split) {
    auto need = [&](bool ok, const std::string &what, const std::string &instead) {
      if (!ok) throw Error(f.path() + ": split: tensor over " + std::to_string(R) + " devices needs " + what + "; " + instead);
    };
    const std::string fewer = "use a number of devices that divides it, or split: layer";
    need(hp.n_expert == 0, "dense layers (mixture-of-experts layers are not divided among devices yet)",
         "use split: layer, or placement rules");
    need(hp.n_head % R == 0 && hp.n_head_kv % R == 0,
         "the attention heads (" + std::to_string(hp.n_head) + " query, " + std::to_string(hp.n_head_kv) + " key/value) to divide among them",
         fewer);
    need(hp.n_ff % R == 0, "the FFN's " + std::to_string(hp.n_ff) + " rows to divide among them", fewer);
  }
  const int64_t qd_r = qd / R, kvd_r = kvd / R, ff_r = hp.n_ff / R;
  auto named = [&](const std::string &n, int64_t r) { return split ? n + "@" + std::to_string(r) : n; };
  auto on = [&](int64_t r) { gb.set_rank(split ? int32_t(r) : -1); };
  // Rows [first, first + count) of a projection of `total` rows: the whole weight unless split.
  auto rows_of = [&](const std::string &tensor, int64_t first, int64_t count, int64_t k, int64_t total, const std::string &part,
                     const std::string &why) {
    return count == total ? w.weight(tensor, {k, total}, why) : w.weight_rows(tensor, first, count, k, total, part, why);
  };
  auto rank_part = [&](const std::string &what, int64_t r) { return split ? what + " rank " + std::to_string(r) + "/" + std::to_string(R) : what; };

  const TensorId tok_embd = w.weight("token_embd.weight", {d, hp.n_vocab}, "token embedding [" + dims + ", n_vocab]");
  std::vector<TensorId> x(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    on(r);
    x[r] = gb.get_rows(named("token_embd", r), tok_embd, tokens);
    if (hp.embd_scale > 0) x[r] = gb.scale(named("token_embd_scale", r), x[r], hp.embd_scale);
  }

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

  minfer_attention_params ap_r = ap;  // a rank's heads
  ap_r.n_head = int32_t(hp.n_head / R);
  ap_r.n_kv_head = int32_t(hp.n_head_kv / R);
  const std::string norm_why = "norm [" + dims + "]";

  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool swa = hp.is_swa_layer(l);
    // Weights every rank reads whole.
    const TensorId attn_norm = w.weight(p + "attn_norm.weight", {d}, norm_why), ffn_norm = w.weight(p + "ffn_norm.weight", {d}, norm_why);
    const std::string hd = "per-head norm [" + std::to_string(hp.head_dim) + "]";
    const TensorId q_norm = hp.qk_norm ? w.weight(p + "attn_q_norm.weight", {hp.head_dim}, hd) : TensorId(-1);
    const TensorId k_norm = hp.qk_norm ? w.weight(p + "attn_k_norm.weight", {hp.head_dim}, hd) : TensorId(-1);
    const TensorId post_attn_norm = hp.post_norms ? w.weight(p + "post_attention_norm.weight", {d}, norm_why) : TensorId(-1);
    const TensorId post_ffw_norm = hp.post_norms ? w.weight(p + "post_ffw_norm.weight", {d}, norm_why) : TensorId(-1);

    std::vector<TensorId> attn_out(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      on(r);
      const TensorId h = gb.rms_norm(named(p + "attn_norm", r), x[r], attn_norm, hp.rms_eps);
      // This rank's rows of one of Q, K, V: `part` of a fused attn_qkv (rows Q, then K, then V).
      auto proj = [&](const std::string &name, int64_t full, int64_t share) {
        const int64_t first = r * share;
        TensorId wt;
        if (hp.fused_qkv) {
          const int64_t base = name == "attn_q" ? 0 : name == "attn_k" ? qd : qd + kvd;
          wt = w.weight_rows(p + "attn_qkv.weight", base + first, share, d, qd + 2 * kvd, rank_part(name.substr(5), r), "fused Q/K/V projection");
        } else {
          wt = rows_of(p + name + ".weight", first, share, d, full, rank_part("rows", r), "projection");
        }
        TensorId y = gb.matmul(named(p + name, r), wt, h);
        if (hp.qkv_bias) {
          const TensorId b = split ? w.weight_range(p + name + ".bias", first, share, full, rank_part("values", r), "bias")
                                   : w.weight(p + name + ".bias", {full}, "bias");
          y = gb.add_row_broadcast(named(p + name + "_bias", r), y, b);
        }
        return y;
      };
      TensorId q = proj("attn_q", qd, qd_r), k = proj("attn_k", kvd, kvd_r), v = proj("attn_v", kvd, kvd_r);
      if (hp.qk_norm) {  // each head normalized on its own, one weight of head_dim values
        q = gb.rms_norm(named(p + "attn_q_norm", r), q, q_norm, hp.rms_eps, int32_t(hp.head_dim));
        k = gb.rms_norm(named(p + "attn_k_norm", r), k, k_norm, hp.rms_eps, int32_t(hp.head_dim));
      }
      q = gb.rope(named(p + "attn_q_rope", r), q, pos, swa ? rq_swa : rq, rope_factors);
      k = gb.rope(named(p + "attn_k_rope", r), k, pos, swa ? rq_swa : rq, rope_factors);
      const TensorId kc = gb.state(named(p + "cache_k", r), o.kv_type, {kvd_r, cache_rows});
      const TensorId vc = gb.state(named(p + "cache_v", r), o.kv_type, {kvd_r, cache_rows});
      minfer_attention_params lap = ap_r;
      lap.window = swa ? int32_t(hp.n_swa) : 0;
      const TensorId a = gb.attention(named(p + "attn", r), q, k, v, kc, vc, pos, slots, page_table, lap);
      const TensorId wo = split ? w.weight_cols(p + "attn_output.weight", r * qd_r, qd_r, qd, d, rank_part("columns", r), "attention output")
                                : w.weight(p + "attn_output.weight", {qd, d}, "attention output");
      attn_out[r] = gb.matmul(named(p + "attn_output", r), wo, a);
    }
    if (split) attn_out = gb.all_reduce(p + "attn_output_sum", attn_out);

    std::vector<TensorId> down(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      on(r);
      TensorId out = attn_out[r];
      if (hp.post_norms) out = gb.rms_norm(named(p + "post_attention_norm", r), out, post_attn_norm, hp.rms_eps);
      x[r] = gb.add(named(p + "attn_residual", r), x[r], out);
      const TensorId h = gb.rms_norm(named(p + "ffn_norm", r), x[r], ffn_norm, hp.rms_eps);
      if (hp.n_expert > 0) {
        down[r] = build_moe_ffn(gb, w, p, h, hp);  // not split (checked above)
        continue;
      }
      const int64_t first = r * ff_r;
      const TensorId wg = hp.fused_gate_up ? w.weight_rows(p + "ffn_up.weight", first, ff_r, d, 2 * hp.n_ff, rank_part("gate", r), "fused gate+up")
                                           : rows_of(p + "ffn_gate.weight", first, ff_r, d, hp.n_ff, rank_part("rows", r), "feed-forward gate");
      const TensorId wu = hp.fused_gate_up ? w.weight_rows(p + "ffn_up.weight", hp.n_ff + first, ff_r, d, 2 * hp.n_ff, rank_part("up", r), "fused gate+up")
                                           : rows_of(p + "ffn_up.weight", first, ff_r, d, hp.n_ff, rank_part("rows", r), "feed-forward up");
      const TensorId g = gb.matmul(named(p + "ffn_gate", r), wg, h);
      const TensorId u = gb.matmul(named(p + "ffn_up", r), wu, h);
      const TensorId s = hp.gelu_ffn ? gb.geglu(named(p + "ffn_geglu", r), g, u) : gb.swiglu(named(p + "ffn_swiglu", r), g, u);
      const TensorId wd = split ? w.weight_cols(p + "ffn_down.weight", first, ff_r, hp.n_ff, d, rank_part("columns", r), "feed-forward down")
                                : w.weight(p + "ffn_down.weight", {hp.n_ff, d}, "feed-forward down");
      down[r] = gb.matmul(named(p + "ffn_down", r), wd, s);
    }
    if (split) down = gb.all_reduce(p + "ffn_down_sum", down);
    for (int64_t r = 0; r < R; ++r) {
      if (r > 0 && l == hp.n_layer - 1) break;  // only rank 0 goes on to the logits
      on(r);
      TensorId out = down[r];
      if (hp.post_norms) out = gb.rms_norm(named(p + "post_ffw_norm", r), out, post_ffw_norm, hp.rms_eps);
      x[r] = gb.add(named(p + "ffn_residual", r), x[r], out);
    }
  }

  on(0);
  TensorId xo = x[0];
  if (!o.all_logits) {  // only the rows that end a sequence's part of the step feed samplers
    const TensorId rows = gb.output_rows_input(Model::kLogitRows, MINFER_DTYPE_I32, {o.max_outputs()});
    xo = gb.get_rows("last_hidden", xo, rows);
  }
  xo = gb.rms_norm(Model::kHidden, xo, w.weight("output_norm.weight", {d}, "final norm"), hp.rms_eps);
  if (o.embeddings) gb.mark_output(xo);
  const TensorId out_w = f.find_tensor("output.weight") ? w.weight("output.weight", {d, hp.n_vocab}, "output projection") : tok_embd;
  const TensorId logits = hp.final_softcap > 0 ? gb.scale(Model::kLogits, gb.matmul("output", out_w, xo), 1.0f, hp.final_softcap)
                                               : gb.matmul(Model::kLogits, out_w, xo);
  gb.mark_output(logits);
  // Greedy tokens on the backend for the batched session (a one-sequence run reads logits).
  if (!o.all_logits && o.max_seqs > 1) gb.mark_output(gb.argmax(Model::kGreedy, logits));
  return gb.finish();
}

}  // namespace minfer::models
