// plugins/cuda/ops/moe_ops.cpp — handlers for the mixture-of-experts ops: top-k routing, the
// chosen experts' weights, the expert matmul (alone, or a gate and up with their SwiGLU/GeGLU
// as one step) and the weighted sum.
#include "minfer/decode.hpp"
#include "minfer/op_contract.hpp"
#include "ops/op_table.hpp"

namespace minfer::cuda {
namespace {

std::string any(const minfer_node &) { return ""; }

void run_top_k(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.top_k_f32(dptr<float>(*n.inputs[0]), dptr<int32_t>(*n.output), n.inputs[0]->shape[0], n.output->shape[0],
                sdk::run_rows(*n.inputs[0], args));
}

void run_moe_weights(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  const auto &p = sdk::params_of<minfer_moe_weights_params>(n);
  dev.moe_weights_f32(dptr<float>(*n.inputs[0]), dptr<int32_t>(*n.inputs[1]), dptr<float>(*n.output), n.inputs[0]->shape[0],
                      n.inputs[1]->shape[0], sdk::run_rows(*n.inputs[1], args), p.normalize != 0, p.scale);
}

void run_moe_sum(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t) {
  dev.moe_sum_f32(dptr<float>(*n.inputs[0]), dptr<float>(*n.inputs[1]), dptr<float>(*n.output), n.output->shape[0], n.inputs[0]->shape[1],
                  sdk::run_rows(*n.output, args));
}

std::string check_matmul_id(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (!(dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16 || sdk::visit_block_dtype(dt, [](auto) {})))
    return std::string("the cuda backend has no expert matmul kernel for ") + minfer_dtype_name(dt);
  if (n.inputs[0]->shape[2] > minfer_cuda_moe_route_max_experts())
    return std::to_string(n.inputs[0]->shape[2]) + " experts are more than the cuda routing kernel's " +
           std::to_string(minfer_cuda_moe_route_max_experts());
  return "";
}

CudaDevice::ExpertMatmul expert_matmul(const minfer_node &n, const minfer_step_args &args) {
  const minfer_tensor &w = *n.inputs[0], &ids = *n.inputs[2];
  return {w.dtype, dptr(w), nullptr, 0, w.shape[0], w.shape[1], w.shape[2], ids.shape[0], sdk::run_extent(ids, 1, args), n.inputs[1]->rank == 3};
}

void run_matmul_id(CudaDevice &dev, const minfer_node &n, const minfer_step_args &args, int32_t tag) {
  dev.matmul_id(expert_matmul(n, args), dptr<float>(*n.inputs[1]), dptr<int32_t>(*n.inputs[2]), dptr<float>(*n.output), tag);
}

const CudaOp kOps[] = {
    {MINFER_OP_TOP_K, any, run_top_k},
    {MINFER_OP_MOE_WEIGHTS, any, run_moe_weights},
    {MINFER_OP_MATMUL_ID, check_matmul_id, run_matmul_id},
    {MINFER_OP_MOE_SUM, any, run_moe_sum},
};

// The fused router's launch arguments from its four nodes (the norm, the router matmul, the
// top-k and the expert weights).
minfer_cuda_moe_router router_args(const minfer_node &norm, const minfer_node &router, const minfer_node &top_k, const minfer_node &weights) {
  const auto &p = sdk::params_of<minfer_moe_weights_params>(weights);
  const minfer_tensor &w = *router.inputs[0];
  minfer_cuda_moe_router r{};
  r.x = dptr<float>(*norm.inputs[0]), r.norm_w = dptr<float>(*norm.inputs[1]);
  r.eps = sdk::params_of<minfer_rms_norm_params>(norm).eps;
  r.h = dptr<float>(*norm.output);
  r.w_dtype = w.dtype, r.w = dptr(w), r.k = w.shape[0], r.n_expert = w.shape[1], r.k_used = top_k.output->shape[0];
  r.logits = dptr<float>(*router.output), r.ids = dptr<int32_t>(*top_k.output), r.weights = dptr<float>(*weights.output);
  r.normalize = p.normalize != 0, r.scale = p.scale;
  return r;
}

// The residual an expert sum's ADD adds: its input that is not the sum's output.
const minfer_tensor &residual_of(const minfer_node &add, const minfer_node &sum) {
  return add.inputs[0]->buffer == sum.output->buffer && add.inputs[0]->offset == sum.output->offset ? *add.inputs[1] : *add.inputs[0];
}

}  // namespace

void run_matmul_id_glu(CudaDevice &dev, const minfer_node &gate, const minfer_node &up, const minfer_node &glu, const minfer_step_args &args,
                       int32_t tag) {
  CudaDevice::ExpertMatmul e = expert_matmul(gate, args);
  e.up = dptr(*up.inputs[0]);
  e.act = glu_act(glu);
  dev.matmul_id(e, dptr<float>(*gate.inputs[1]), dptr<int32_t>(*gate.inputs[2]), dptr<float>(*glu.output), tag, dptr<float>(*gate.output),
                dptr<float>(*up.output));
}

void run_moe_sum_add(CudaDevice &dev, const minfer_node &sum, const minfer_node &add, const minfer_step_args &args) {
  const bool first = add.inputs[0]->buffer == sum.output->buffer && add.inputs[0]->offset == sum.output->offset;
  const minfer_tensor &other = first ? *add.inputs[1] : *add.inputs[0];
  dev.moe_sum_f32(dptr<float>(*sum.inputs[0]), dptr<float>(*sum.inputs[1]), dptr<float>(*add.output), sum.output->shape[0],
                  sum.inputs[0]->shape[1], sdk::run_rows(*sum.output, args), dptr<float>(other));
}

bool run_matmul_id_sum(CudaDevice &dev, const minfer_node &mm, const minfer_node &sum, const minfer_node *add, const minfer_step_args &args,
                       int32_t tag) {
  return dev.matmul_id_sum(expert_matmul(mm, args), dptr<float>(*mm.inputs[1]), dptr<int32_t>(*mm.inputs[2]), dptr<float>(*sum.inputs[1]),
                           add ? dptr<float>(residual_of(*add, sum)) : nullptr, dptr<float>(add ? *add->output : *sum.output), tag);
}

void run_top_k_weights(CudaDevice &dev, const minfer_node &top_k, const minfer_node &weights, const minfer_step_args &args) {
  const auto &p = sdk::params_of<minfer_moe_weights_params>(weights);
  dev.top_k_f32(dptr<float>(*top_k.inputs[0]), dptr<int32_t>(*top_k.output), top_k.inputs[0]->shape[0], top_k.output->shape[0],
                sdk::run_rows(*top_k.inputs[0], args), dptr<float>(*weights.output), p.normalize != 0, p.scale);
}

bool run_moe_router(CudaDevice &dev, const minfer_node &norm, const minfer_node &router, const minfer_node &top_k, const minfer_node &weights,
                    const minfer_step_args &args) {
  if (sdk::run_rows(*norm.output, args) != 1) return false;
  return dev.moe_router_decode(router_args(norm, router, top_k, weights));
}

bool run_moe_ffn(CudaDevice &dev, const MoeFfnNodes &n, const minfer_step_args &args) {
  if (sdk::run_rows(*n.norm->output, args) != 1) return false;
  const minfer_tensor &router = *n.router->inputs[0], &gate = *n.gate->inputs[0], &down = *n.down->inputs[0];
  const minfer_tensor *ow = n.o ? n.o->inputs[0] : nullptr;
  if (!dev.moe_ffn_fusable(router.dtype, gate.dtype, down.dtype, router.shape[0], gate.shape[1], router.shape[1], n.top_k->output->shape[0],
                           ow ? ow->dtype : -1, ow ? ow->shape[0] : 0))
    return false;
  minfer_cuda_moe_ffn f{};
  f.router = router_args(*n.norm, *n.router, *n.top_k, *n.weights);
  f.gate_dtype = gate.dtype, f.down_dtype = down.dtype, f.act = glu_act(*n.glu);
  f.gate = dptr(gate), f.up = dptr(*n.up->inputs[0]), f.down = dptr(down);
  f.m = gate.shape[1];
  f.y = dptr<float>(*n.glu->output);
  f.add = n.add ? dptr<float>(residual_of(*n.add, *n.sum)) : nullptr;
  f.out = dptr<float>(n.add ? *n.add->output : *n.sum->output);
  f.attn_out = attn_out_args(n.o, n.o_add);
  return dev.moe_ffn_decode(f);
}

std::span<const CudaOp> moe_ops() { return kOps; }

}  // namespace minfer::cuda
