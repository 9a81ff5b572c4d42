// plugins/cpu/ops_model.cpp — the per-token transformer ops: RMS norm, RoPE, SwiGLU.
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "minfer/op_contract.hpp"
#include "qdot.hpp"
#include "simd_math.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

// y = x / sqrt(mean(x^2) + eps) * w, per row; the sum of squares in double as llama.cpp does.
void run_rms_norm(const minfer_node &n, const RunCtx &ctx) {
  const float eps = sdk::params_of<minfer_rms_norm_params>(n).eps;
  const float *x = ptr<float>(*n.inputs[0]), *w = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t d = sdk::rms_norm_group(n);  // a row, or a head of it (per-head norms)
  ctx.pool.run(sdk::run_rows(*n.output, ctx.args) * (n.output->shape[0] / d), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *xr = x + r * d;
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
      const float scale = float(1.0 / std::sqrt(ss / double(d) + eps));
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = xr[i] * scale * w[i];
    }
  });
}

// Rotates pairs of each head's first n_dims values by pos * theta_base^(-2i/n_dims).
void run_rope(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_rope_params>(n);
  const float *x = ptr<float>(*n.inputs[0]);
  const int32_t *pos = ptr<int32_t>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  const int64_t width = n.output->shape[0], heads = width / p.head_dim, tokens = sdk::run_rows(*n.output, ctx.args);
  const int half = p.n_dims / 2;
  thread_local std::vector<double> inv_freq;  // double: positions reach 10^5; reused, no allocation per step
  inv_freq.resize(static_cast<size_t>(half));
  const float *factors = n.n_inputs > 2 ? ptr<float>(*n.inputs[2]) : nullptr;  // Llama 3.1+'s rope_freqs
  for (int i = 0; i < half; ++i)
    inv_freq[size_t(i)] = std::pow(double(p.theta_base), -2.0 * i / p.n_dims) * p.freq_scale / (factors ? double(factors[i]) : 1.0);
  const double *freq = inv_freq.data();  // the workers read this thread's table
  const float mscale = sdk::rope_attn_factor(p);
  ctx.pool.run(tokens, [&](int64_t t0, int64_t t1, int) {
    thread_local std::vector<float> c, s;
    c.resize(static_cast<size_t>(half)), s.resize(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      for (int i = 0; i < half; ++i) {  // scaled by the attention factor (LongRoPE), as ggml's cos and sin are
        const double theta = double(pos[t]) * freq[i];
        c[size_t(i)] = float(std::cos(theta)) * mscale;
        s[size_t(i)] = float(std::sin(theta)) * mscale;
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float *src = x + t * width + h * p.head_dim;
        float *dst = y + t * width + h * p.head_dim;
        for (int i = p.n_dims; i < p.head_dim; ++i) dst[i] = src[i];
        for (int i = 0; i < half; ++i) {
          const int a = p.mode == MINFER_ROPE_NEOX ? i : 2 * i, b = p.mode == MINFER_ROPE_NEOX ? i + half : 2 * i + 1;
          const float xa = src[a], xb = src[b];
          dst[a] = xa * c[size_t(i)] - xb * s[size_t(i)];
          dst[b] = xa * s[size_t(i)] + xb * c[size_t(i)];
        }
      }
    }
  });
}

MINFER_AVX512 void swiglu_avx512(const float *g, const float *u, float *y, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
  }
  for (; i < i1; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

MINFER_AVX2_FMA void swiglu_avx2(const float *g, const float *u, float *y, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  for (; i < i1; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// y = silu(gate) * up
void run_swiglu(const minfer_node &n, const RunCtx &ctx) {
  const float *g = ptr<float>(*n.inputs[0]), *u = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  ctx.pool.run(sdk::run_elements(*n.output, ctx.args), [&](int64_t i0, int64_t i1, int) {
    if (ctx.isa >= Isa::Avx512Vnni) return swiglu_avx512(g, u, y, i0, i1);
    if (avx2_family(ctx.isa)) return swiglu_avx2(g, u, y, i0, i1);
    for (int64_t i = i0; i < i1; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
}

// GELU's tanh form through the identity 0.5 (1 + tanh(z)) = 1 / (1 + e^-2z):
// gelu(x) = x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))), the form silu already has.
constexpr float kGeluA = 0.044715f, kGelu2C = 2.0f * 0.7978845608028654f;
inline float gelu(float x) { return x / (1.0f + std::exp(-kGelu2C * (x + kGeluA * x * x * x))); }

MINFER_AVX512 void geglu_avx512(const float *g, const float *u, float *y, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 z = _mm512_mul_ps(_mm512_set1_ps(-kGelu2C), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(kGeluA), x), _mm512_mul_ps(x, x), x));
    const __m512 gv = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(z)));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(gv, _mm512_loadu_ps(u + i)));
  }
  for (; i < i1; ++i) y[i] = gelu(g[i]) * u[i];
}

MINFER_AVX2_FMA void geglu_avx2(const float *g, const float *u, float *y, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 z = _mm256_mul_ps(_mm256_set1_ps(-kGelu2C), _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluA), x), _mm256_mul_ps(x, x), x));
    const __m256 gv = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(z)));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(gv, _mm256_loadu_ps(u + i)));
  }
  for (; i < i1; ++i) y[i] = gelu(g[i]) * u[i];
}

// y = gelu(gate) * up
void run_geglu(const minfer_node &n, const RunCtx &ctx) {
  const float *g = ptr<float>(*n.inputs[0]), *u = ptr<float>(*n.inputs[1]);
  float *y = ptr<float>(*n.output);
  ctx.pool.run(sdk::run_elements(*n.output, ctx.args), [&](int64_t i0, int64_t i1, int) {
    if (ctx.isa >= Isa::Avx512Vnni) return geglu_avx512(g, u, y, i0, i1);
    if (avx2_family(ctx.isa)) return geglu_avx2(g, u, y, i0, i1);
    for (int64_t i = i0; i < i1; ++i) y[i] = gelu(g[i]) * u[i];
  });
}

const CpuOp kOps[] = {
    {MINFER_OP_GEGLU, any, run_geglu},
    {MINFER_OP_RMS_NORM, any, run_rms_norm},
    {MINFER_OP_ROPE, any, run_rope},
    {MINFER_OP_SWIGLU, any, run_swiglu},
};

}  // namespace

std::span<const CpuOp> norm_rope_ops() { return kOps; }

}  // namespace minfer::cpu
