// plugins/cuda/ops/model_ops.cpp — handlers for the transformer ops: RMS norm, RoPE, SwiGLU,
// attention with its KV-cache write, matmul.
#include <optional>

#include "minfer/decode.hpp"
#include "minfer/op_contract.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {
namespace {

std::string any(const minfer_node &) { return ""; }

void run_rms_norm(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  const int64_t group = sdk::rms_norm_group(n);  // a row, or a head of it (per-head norms)
  dev.rms_norm_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]), dptr<float>(*n.output),
                   sdk::run_rows(*n.output, args) * (n.output->shape[0] / group), group, sdk::params_of<minfer_rms_norm_params>(n).eps);
}

// The RMS norm (if any) a matmul step reads the output of: folded into the one-token GEMV
// (returns its weights and eps; the step then reads the norm's input), else run first unless
// another step sharing it has run it this run.
std::optional<CudaDevice::RmsNormIn> fold_or_run_norm(CudaDevice &dev, StepNorm norm, std::span<const int32_t> w_dtypes, int64_t k,
                                                      int64_t tokens, const minfer_step_args &args) {
  if (!norm.node) return std::nullopt;
  const float *w = dptr<float>(*norm.node->inputs[1]);
  if (dev.folds_norm(w_dtypes, k, tokens, w)) return CudaDevice::RmsNormIn{w, sdk::params_of<minfer_rms_norm_params>(*norm.node).eps};
  if (norm.ran && *norm.ran == norm.node) return std::nullopt;
  run_rms_norm(dev, *norm.node, args, 0);
  if (norm.ran) *norm.ran = norm.node;
  return std::nullopt;
}

// A ROPE's frequency factors (its optional third input, ABI 1.4), or null.
const float *rope_factors(const minfer_node &n) { return n.n_inputs > 2 ? dptr<float>(*n.inputs[2]) : nullptr; }

void run_rope(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  const auto &p = sdk::params_of<minfer_rope_params>(n);
  dev.rope_f32(dptr<float>(*n.inputs[0]), dptr<int32_t>(*n.inputs[1]), dptr<float>(*n.output), sdk::run_rows(*n.output, args),
               n.output->shape[0] / p.head_dim, p, rope_factors(n));
}

// SWIGLU and GEGLU: one kernel, the activation by op.
void run_glu(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.glu_f32(glu_act(n), dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]), dptr<float>(*n.output), sdk::run_elements(*n.output, args));
}

// A sequence's most positions: its page table row's pages.
int64_t max_positions(const minfer_node &n) {
  return n.inputs[7]->shape[0] * int64_t(sdk::params_of<minfer_attention_params>(n).page_size);
}

std::string check_attention(const minfer_node &n) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  if (p.head_dim > 256) return "head_dim " + std::to_string(p.head_dim) + " is above the CUDA attention kernel's 256";
  if (minfer_cuda_flash_attention_supports(p.head_dim)) return "";  // fused kernel: any length
  // Other head dims: scores for every position of a sequence live in shared memory (H100/H200: up to ~56k positions).
  const int64_t max = minfer_cuda_attention_max_positions(0);
  if (max_positions(n) > max)
    return "sequences of " + std::to_string(max_positions(n)) + " positions exceed the CUDA attention kernel's " + std::to_string(max) +
           " for head_dim " + std::to_string(p.head_dim) + "; lower 'context'";
  return "";
}

// The step's paged KV cache as the kernels read it.
minfer_cuda_kv_pages kv_pages(const minfer_node &n) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  int32_t shift = 0;
  while ((1 << shift) < p.page_size) ++shift;
  return {dptr<int32_t>(*n.inputs[5]), dptr<int32_t>(*n.inputs[6]), dptr<int32_t>(*n.inputs[7]), n.inputs[7]->shape[0], shift};
}

// q and k: the attention's own inputs, or (RoPE fused) the RoPEs' unrotated inputs.
void attend(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, const float *q, const float *k,
            const int32_t *rope_pos = nullptr, const minfer_rope_params *rope = nullptr, const float *factors = nullptr,
            const minfer_cuda_head_norms *norms = nullptr) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  const int64_t tokens = sdk::run_rows(*n.inputs[0], args);
  dev.attention(q, k, dptr<float>(*n.inputs[2]), dptr(*n.inputs[3]), dptr(*n.inputs[4]), n.inputs[3]->dtype, dptr<float>(*n.output), tokens,
                is_decode(args, tokens), p, kv_pages(n), attention_positions(args, max_positions(n)), rope_pos, rope, factors, norms);
}

// The per-head norms of the q rope (norm_q) and k rope (norm_k) as kernels take them.
minfer_cuda_head_norms head_norms(const minfer_node &norm_q, const minfer_node &norm_k) {
  return {dptr<float>(*norm_q.inputs[1]), dptr<float>(*norm_k.inputs[1]), sdk::params_of<minfer_rms_norm_params>(norm_q).eps};
}

void run_attention(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  attend(dev, n, args, dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]));
}

std::string check_weight(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16 || sdk::visit_block_dtype(dt, [](auto) {}))
    return "";
  return std::string("the cuda backend has no matmul kernel for ") + minfer_dtype_name(dt);
}

void run_matmul(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  const minfer_tensor &w = *n.inputs[0];
  dev.matmul(w.dtype, dptr(w), dptr<float>(*n.inputs[1]), dptr<float>(*n.output), w.shape[0], w.shape[1],
             sdk::run_rows(*n.inputs[1], args));
}

}  // namespace

void run_rope_pair(CudaDevice &dev, const minfer_node &a, const minfer_node &b, const minfer_step_args &args, const minfer_node *norm_a,
                   const minfer_node *norm_b) {
  const auto &p = sdk::params_of<minfer_rope_params>(a);
  const float *xa = dptr<float>(norm_a ? *norm_a->inputs[0] : *a.inputs[0]), *xb = dptr<float>(norm_b ? *norm_b->inputs[0] : *b.inputs[0]);
  const minfer_cuda_head_norms norms = norm_a ? head_norms(*norm_a, *norm_b) : minfer_cuda_head_norms{};
  dev.rope_f32(xa, dptr<int32_t>(*a.inputs[1]), dptr<float>(*a.output), sdk::run_rows(*a.output, args), a.output->shape[0] / p.head_dim, p,
               rope_factors(a), xb, dptr<float>(*b.output), b.output->shape[0] / p.head_dim, norm_a ? &norms : nullptr);
}

void run_rope_attention(CudaDevice &dev, const minfer_node &rope_a, const minfer_node &rope_b, const minfer_node &attn,
                        const minfer_step_args &args, const minfer_node *norm_a, const minfer_node *norm_b) {
  const auto &ap = sdk::params_of<minfer_attention_params>(attn);
  const int64_t tokens = sdk::run_rows(*attn.inputs[0], args);
  if (!dev.attention_rotates(tokens, is_decode(args, tokens), ap, attn.inputs[3]->dtype)) {
    run_rope_pair(dev, rope_a, rope_b, args, norm_a, norm_b);
    return run_attention(dev, attn, args, 0);
  }
  const bool a_is_q = attn.inputs[0]->buffer == rope_a.output->buffer && attn.inputs[0]->offset == rope_a.output->offset;
  const minfer_node &rq = a_is_q ? rope_a : rope_b, &rk = a_is_q ? rope_b : rope_a;
  const minfer_node *nq = a_is_q ? norm_a : norm_b, *nk = a_is_q ? norm_b : norm_a;
  const minfer_cuda_head_norms norms = nq ? head_norms(*nq, *nk) : minfer_cuda_head_norms{};
  attend(dev, attn, args, dptr<float>(nq ? *nq->inputs[0] : *rq.inputs[0]), dptr<float>(nk ? *nk->inputs[0] : *rk.inputs[0]),
         dptr<int32_t>(*rq.inputs[1]), &sdk::params_of<minfer_rope_params>(rq), rope_factors(rq), nq ? &norms : nullptr);
}

void run_matmul_glu(CudaDevice &dev, const minfer_node &gate, const minfer_node &up, const minfer_node &glu,
                    const minfer_step_args &args, StepNorm norm) {
  const minfer_tensor &wg = *gate.inputs[0], &wu = *up.inputs[0];
  const int64_t tokens = sdk::run_rows(*gate.inputs[1], args);
  const auto folded = fold_or_run_norm(dev, norm, {&wg.dtype, 1}, wg.shape[0], tokens, args);
  dev.matmul_glu(glu_act(glu), wg.dtype, dptr(wg), dptr(wu), dptr<float>(folded ? *norm.node->inputs[0] : *gate.inputs[1]),
                 dptr<float>(*glu.output), wg.shape[0], wg.shape[1], tokens, dptr<float>(*gate.output), dptr<float>(*up.output),
                 folded ? &*folded : nullptr);
}

namespace {

// One matmul step as the device takes it: with its add fused, y is the add's output and the
// matmul's own output is the unfused path's scratch.
CudaDevice::MatmulPart part_of(const MatmulStep &st) {
  const minfer_tensor &w = *st.matmul->inputs[0];
  if (!st.add) return {w.dtype, dptr(w), dptr<float>(*st.matmul->output), w.shape[1], nullptr, false, nullptr};
  const minfer_node &mm = *st.matmul, &add = *st.add;
  const bool first = add.inputs[0]->buffer == mm.output->buffer && add.inputs[0]->offset == mm.output->offset;
  return {w.dtype, dptr(w), dptr<float>(*add.output), w.shape[1], dptr<float>(*add.inputs[first ? 1 : 0]), add.op == MINFER_OP_ADD_ROW_BROADCAST,
          dptr<float>(*mm.output)};
}

}  // namespace

void run_matmul_add(CudaDevice &dev, const minfer_node &mm, const minfer_node &add, const minfer_step_args &args) {
  const CudaDevice::MatmulPart p = part_of({&mm, &add});
  const minfer_tensor &w = *mm.inputs[0];
  dev.matmul(w.dtype, p.w, dptr<float>(*mm.inputs[1]), p.y, w.shape[0], p.m, sdk::run_rows(*mm.inputs[1], args), p.add, p.add_broadcast,
             p.unfused);
}

minfer_cuda_ffn_attn_out attn_out_args(const minfer_node *o, const minfer_node *o_add) {
  minfer_cuda_ffn_attn_out a{};
  if (!o) return a;
  const CudaDevice::MatmulPart p = part_of({o, o_add});
  a.w = p.w, a.x = dptr<float>(*o->inputs[1]), a.add = p.add, a.out = p.y, a.k = o->inputs[0]->shape[0];
  return a;
}

bool run_dense_ffn(CudaDevice &dev, const DenseFfnNodes &n, const minfer_step_args &args) {
  if (sdk::run_rows(*n.norm->output, args) != 1) return false;
  const minfer_tensor &gate = *n.gate->inputs[0], &down = *n.down->inputs[0];
  const minfer_tensor *ow = n.o ? n.o->inputs[0] : nullptr;
  if (!dev.ffn_fusable(gate.dtype, down.dtype, gate.shape[0], gate.shape[1], ow ? ow->dtype : -1, ow ? ow->shape[0] : 0)) return false;
  minfer_cuda_ffn f{};
  f.x = dptr<float>(*n.norm->inputs[0]), f.norm_w = dptr<float>(*n.norm->inputs[1]);
  f.eps = sdk::params_of<minfer_rms_norm_params>(*n.norm).eps;
  f.gate_dtype = gate.dtype, f.down_dtype = down.dtype, f.act = glu_act(*n.glu);
  f.gate = dptr(gate), f.up = dptr(*n.up->inputs[0]), f.down = dptr(down);
  f.k = gate.shape[0], f.m = gate.shape[1];
  f.y = dptr<float>(*n.glu->output);
  const CudaDevice::MatmulPart down_part = part_of({n.down, n.add});  // out: the add's output where there is one
  f.add = down_part.add, f.out = down_part.y;
  f.attn_out = attn_out_args(n.o, n.o_add);
  return dev.ffn_decode(f);
}

void run_matmul_group(CudaDevice &dev, std::span<const MatmulStep> steps, const minfer_step_args &args, StepNorm norm) {
  std::vector<CudaDevice::MatmulPart> parts;
  std::vector<int32_t> dtypes;
  for (const MatmulStep &st : steps) parts.push_back(part_of(st)), dtypes.push_back(parts.back().dtype);
  const minfer_node &first = *steps[0].matmul;
  const int64_t k = first.inputs[0]->shape[0], tokens = sdk::run_rows(*first.inputs[1], args);
  const auto folded = fold_or_run_norm(dev, norm, dtypes, k, tokens, args);
  dev.matmul_group(dptr<float>(folded ? *norm.node->inputs[0] : *first.inputs[1]), k, tokens, parts, folded ? &*folded : nullptr);
}

namespace {

const CudaOp kOps[] = {
    {MINFER_OP_RMS_NORM, any, run_rms_norm},
    {MINFER_OP_ROPE, any, run_rope},
    {MINFER_OP_SWIGLU, any, run_glu},
    {MINFER_OP_GEGLU, any, run_glu},
    {MINFER_OP_ATTENTION, check_attention, run_attention},
    {MINFER_OP_MATMUL, check_weight, run_matmul},
};

}  // namespace

std::span<const CudaOp> model_ops() { return kOps; }

}  // namespace minfer::cuda
