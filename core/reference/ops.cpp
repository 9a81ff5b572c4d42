#include "reference/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.hpp"
#include "minfer/abi.h"
#include "minfer/dtype.h"
#include "minfer/op_contract.hpp"
#include "quant/reference.hpp"

namespace minfer::reference {
namespace {

int64_t count(const std::array<int64_t, 4> &s) { return s[0] * s[1] * s[2] * s[3]; }

const float *f32(const RefTensor &t) { return reinterpret_cast<const float *>(t.data); }

std::vector<uint8_t> f32_bytes(const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> f16_bytes(const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = quant::f32_to_f16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

// A row of f16/f32 values as doubles.
double load(const RefTensor &t, int64_t i) {
  if (t.dtype == MINFER_DTYPE_F16) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    return quant::f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, t.data + 4 * i, 4);
  return f;
}

void store(const RefTensor &t, int64_t i, float v) {
  if (t.dtype == MINFER_DTYPE_F16) {
    const uint16_t h = quant::f32_to_f16(v);
    std::memcpy(t.data + 2 * i, &h, 2);
  } else {
    std::memcpy(t.data + 4 * i, &v, 4);
  }
}

const int32_t *i32(const RefTensor &t) { return reinterpret_cast<const int32_t *>(t.data); }

// Paged attention as minfer/ops.h defines it: every token writes its k and v at its slot's
// position, then attends to positions 0..its own of that slot (the step's earlier tokens of
// the slot included).
std::vector<float> attention(const std::vector<RefTensor> &in, const minfer_attention_params &p) {
  const RefTensor &q = in[0], &k = in[1], &v = in[2], &kc = in[3], &vc = in[4], &pos = in[5], &slot = in[6], &table = in[7];
  const int64_t n = q.shape[1], hd = p.head_dim, kvd = int64_t(p.n_kv_head) * hd, rows = kc.shape[1];
  const int64_t max_pages = table.shape[0], n_slots = table.shape[1], P = p.page_size;
  auto row_of = [&](int64_t t, int64_t position) {
    const int64_t s = i32(slot)[t];
    if (s < 0 || s >= n_slots) throw Error("attention: token " + std::to_string(t) + " has slot " + std::to_string(s) + ", not below " + std::to_string(n_slots));
    if (position < 0 || position / P >= max_pages)
      throw Error("attention: position " + std::to_string(position) + " is beyond the page table's " + std::to_string(max_pages * P));
    const int64_t page = i32(table)[s * max_pages + position / P];
    if (page < 0 || (page + 1) * P > rows) throw Error("attention: page " + std::to_string(page) + " is outside the cache");
    return page * P + position % P;
  };
  for (int64_t t = 0; t < n; ++t) {  // write this step's keys and values (rounded to the cache type)
    const int64_t r = row_of(t, i32(pos)[t]);
    for (int64_t i = 0; i < kvd; ++i) {
      store(kc, r * kvd + i, f32(k)[t * kvd + i]);
      store(vc, r * kvd + i, f32(v)[t * kvd + i]);
    }
  }
  const int64_t group = p.n_head / p.n_kv_head;
  const double cap = sdk::attention_softcap(p);
  const int64_t window = sdk::attention_window(p);
  std::vector<float> out(size_t(n * p.n_head * hd));
  std::vector<double> score;
  std::vector<int64_t> at;
  for (int64_t t = 0; t < n; ++t) {
    // Positions first..last: all earlier ones, or the last `window` of them.
    const int64_t last = i32(pos)[t], first = window > 0 ? std::max<int64_t>(0, last - window + 1) : 0;
    at.resize(size_t(last + 1));
    for (int64_t j = first; j <= last; ++j) at[size_t(j)] = row_of(t, j);
    score.resize(size_t(last + 1));
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t kvh = h / group;
      double mx = -1e300;
      for (int64_t j = first; j <= last; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += double(f32(q)[(t * p.n_head + h) * hd + d]) * load(kc, at[size_t(j)] * kvd + kvh * hd + d);
        double s = dot * p.scale;
        if (cap > 0) s = cap * std::tanh(s / cap);
        score[size_t(j)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = first; j <= last; ++j) sum += score[size_t(j)] = std::exp(score[size_t(j)] - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = first; j <= last; ++j) acc += score[size_t(j)] * load(vc, at[size_t(j)] * kvd + kvh * hd + d);
        out[size_t((t * p.n_head + h) * hd + d)] = float(acc / sum);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<uint8_t> run_op(int32_t op, const std::vector<RefTensor> &in, int32_t out_dtype,
                            const std::array<int64_t, 4> &out_shape, const void *params) {
  const int64_t n = count(out_shape);
  std::vector<float> y(static_cast<size_t>(n));
  switch (op) {
    case MINFER_OP_ADD:
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] + f32(in[1])[i];
      return f32_bytes(y);
    case MINFER_OP_MUL:
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] * f32(in[1])[i];
      return f32_bytes(y);
    case MINFER_OP_SILU:
      for (int64_t i = 0; i < n; ++i) {
        const double x = f32(in[0])[i];
        y[i] = float(x / (1.0 + std::exp(-x)));
      }
      return f32_bytes(y);
    case MINFER_OP_ADD_ROW_BROADCAST: {
      const int64_t d = out_shape[0];
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i] + f32(in[1])[i % d];
      return f32_bytes(y);
    }
    case MINFER_OP_CONVERT:
      if (out_dtype != MINFER_DTYPE_F16) break;
      for (int64_t i = 0; i < n; ++i) y[i] = f32(in[0])[i];
      return f16_bytes(y);
    case MINFER_OP_GET_ROWS: {
      const RefTensor &table = in[0];
      const auto *ids = reinterpret_cast<const int32_t *>(in[1].data);
      const int64_t d = table.shape[0], table_rows = table.shape[1];
      const uint64_t rb = dtype_bytes(table.dtype, d, "get_rows table row");
      for (int64_t r = 0; r < out_shape[1]; ++r) {
        if (ids[r] < 0 || ids[r] >= table_rows)
          throw Error("get_rows: id " + std::to_string(ids[r]) + " at position " +
                      std::to_string(r) + " is outside the table's " +
                      std::to_string(table_rows) + " rows");
        quant::dequantize_row(table.dtype, table.data + uint64_t(ids[r]) * rb, &y[size_t(r * d)], d);
      }
      return f32_bytes(y);
    }
    case MINFER_OP_ARGMAX: {  // the first largest value of each row; NaN never wins
      const int64_t d = in[0].shape[0], rows = in[0].shape[1];
      std::vector<uint8_t> out(size_t(rows) * 4);
      for (int64_t r = 0; r < rows; ++r) {
        int32_t best = 0;
        float bv = NAN;
        for (int64_t i = 0; i < d; ++i) {
          const float v = f32(in[0])[r * d + i];
          if (!std::isnan(v) && (std::isnan(bv) || v > bv)) bv = v, best = int32_t(i);
        }
        std::memcpy(&out[size_t(r) * 4], &best, 4);
      }
      return out;
    }
    case MINFER_OP_DEQUANTIZE:
      quant::dequantize_row(in[0].dtype, in[0].data, y.data(), n);
      return f16_bytes(y);
    case MINFER_OP_SWIGLU:
      for (int64_t i = 0; i < n; ++i) {
        const double g = f32(in[0])[i];
        y[i] = float(g / (1.0 + std::exp(-g)) * f32(in[1])[i]);
      }
      return f32_bytes(y);
    case MINFER_OP_GEGLU:
      for (int64_t i = 0; i < n; ++i) {
        const double g = f32(in[0])[i];
        // 0.5 (1 + tanh(z)) as 1 / (1 + e^-2z): the same value without the cancellation of
        // 1 + tanh(z) far in the negative tail (where the product is tiny but not 0).
        const double gelu = g / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g)));
        y[i] = float(gelu * f32(in[1])[i]);
      }
      return f32_bytes(y);
    case MINFER_OP_SCALE: {
      const auto &p = *static_cast<const minfer_scale_params *>(params);
      for (int64_t i = 0; i < n; ++i) {
        const double x = double(p.scale) * f32(in[0])[i];
        y[i] = float(p.softcap > 0 ? p.softcap * std::tanh(x / p.softcap) : x);
      }
      return f32_bytes(y);
    }
    case MINFER_OP_RMS_NORM: {
      const auto *p = static_cast<const minfer_rms_norm_params *>(params);
      const float eps = p->eps;
      const int64_t d = p->struct_size >= MINFER_SIZE_UP_TO(minfer_rms_norm_params, group) && p->group > 0 ? p->group : out_shape[0];
      for (int64_t r = 0; r < n / d; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += double(f32(in[0])[r * d + i]) * f32(in[0])[r * d + i];
        const double scale = 1.0 / std::sqrt(ss / double(d) + double(eps));
        for (int64_t i = 0; i < d; ++i) y[size_t(r * d + i)] = float(f32(in[0])[r * d + i] * scale * f32(in[1])[i]);
      }
      return f32_bytes(y);
    }
    case MINFER_OP_MATMUL: {
      const RefTensor &w = in[0], &x = in[1];
      const int64_t k = w.shape[0], m = w.shape[1], rows = n / m;
      const uint64_t rb = dtype_bytes(w.dtype, k, "matmul weight row");
      std::vector<float> wrow(static_cast<size_t>(k));
      for (int64_t o = 0; o < m; ++o) {
        quant::dequantize_row(w.dtype, w.data + uint64_t(o) * rb, wrow.data(), k);
        for (int64_t t = 0; t < rows; ++t) {
          double acc = 0;
          for (int64_t i = 0; i < k; ++i) acc += double(wrow[size_t(i)]) * f32(x)[t * k + i];
          y[size_t(t * m + o)] = float(acc);
        }
      }
      return f32_bytes(y);
    }
    case MINFER_OP_ROPE: {
      const auto &p = *static_cast<const minfer_rope_params *>(params);
      const double mscale = sdk::rope_attn_factor(p);  // ABI 1.6: scales the rotated values
      const auto *pos = reinterpret_cast<const int32_t *>(in[1].data);
      const int64_t width = out_shape[0], heads = width / p.head_dim;
      for (int64_t i = 0; i < n; ++i) y[size_t(i)] = f32(in[0])[i];
      for (int64_t t = 0; t < out_shape[1]; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          float *row = y.data() + t * width + h * p.head_dim;
          const float *src = f32(in[0]) + t * width + h * p.head_dim;
          for (int64_t i = 0; i < p.n_dims / 2; ++i) {
            double theta = double(pos[t]) * std::pow(double(p.theta_base), -2.0 * double(i) / p.n_dims) * p.freq_scale;
            if (in.size() > 2) theta /= double(f32(in[2])[i]);  // frequency factors (ABI 1.4)
            const int64_t a = p.mode == MINFER_ROPE_NEOX ? i : 2 * i, b = p.mode == MINFER_ROPE_NEOX ? i + p.n_dims / 2 : 2 * i + 1;
            row[a] = float(mscale * (src[a] * std::cos(theta) - src[b] * std::sin(theta)));
            row[b] = float(mscale * (src[a] * std::sin(theta) + src[b] * std::cos(theta)));
          }
        }
      return f32_bytes(y);
    }
    case MINFER_OP_ATTENTION:
      return f32_bytes(attention(in, *static_cast<const minfer_attention_params *>(params)));
    case MINFER_OP_TOP_K: {  // by selection: the largest not yet taken, the lower index on ties
      const int64_t d = in[0].shape[0], rows = in[0].shape[1], k = out_shape[0];
      std::vector<uint8_t> out(size_t(rows * k) * 4);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<bool> taken(size_t(d), false);
        for (int64_t j = 0; j < k; ++j) {
          int64_t best = -1;
          for (int64_t i = 0; i < d; ++i) {
            if (taken[size_t(i)]) continue;
            const float v = f32(in[0])[r * d + i];
            if (best < 0) best = i;
            const float bv = f32(in[0])[r * d + best];
            if (!std::isnan(v) && (std::isnan(bv) || v > bv)) best = i;
          }
          taken[size_t(best)] = true;
          const int32_t id = int32_t(best);
          std::memcpy(&out[size_t(r * k + j) * 4], &id, 4);
        }
      }
      return out;
    }
    case MINFER_OP_MOE_WEIGHTS: {
      const auto &p = *static_cast<const minfer_moe_weights_params *>(params);
      const int64_t ne = in[0].shape[0], k = in[1].shape[0], rows = in[1].shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        const float *l = f32(in[0]) + r * ne;
        double mx = -INFINITY, sum = 0, chosen = 0;
        for (int64_t i = 0; i < ne; ++i) mx = std::max(mx, double(l[i]));
        for (int64_t i = 0; i < ne; ++i) sum += std::exp(double(l[i]) - mx);
        std::vector<double> pj(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = i32(in[1])[r * k + j];
          if (e < 0 || e >= ne) throw Error("moe_weights: expert id " + std::to_string(e) + " outside 0.." + std::to_string(ne - 1));
          pj[size_t(j)] = std::exp(double(l[e]) - mx) / sum;
          chosen += pj[size_t(j)];
        }
        for (int64_t j = 0; j < k; ++j) y[size_t(r * k + j)] = float((p.normalize ? pj[size_t(j)] / chosen : pj[size_t(j)]) * p.scale);
      }
      return f32_bytes(y);
    }
    case MINFER_OP_MATMUL_ID: {
      const RefTensor &w = in[0], &x = in[1], &ids = in[2];
      const int64_t kin = w.shape[0], m = w.shape[1], ne = w.shape[2], k = ids.shape[0], rows = ids.shape[1];
      const bool per_pair = x.shape[1] == k && x.shape[2] == rows && count(x.shape) == kin * k * rows && k > 1;
      const uint64_t rb = dtype_bytes(w.dtype, kin, "matmul_id weight row");
      std::vector<float> wrow(static_cast<size_t>(kin));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const int32_t e = i32(ids)[r * k + j];
          if (e < 0 || e >= ne) throw Error("matmul_id: expert id " + std::to_string(e) + " outside 0.." + std::to_string(ne - 1));
          const float *xr = f32(x) + (per_pair ? r * k + j : r) * kin;
          for (int64_t o = 0; o < m; ++o) {
            quant::dequantize_row(w.dtype, w.data + (uint64_t(e) * uint64_t(m) + uint64_t(o)) * rb, wrow.data(), kin);
            double acc = 0;
            for (int64_t i = 0; i < kin; ++i) acc += double(wrow[size_t(i)]) * xr[i];
            y[size_t((r * k + j) * m + o)] = float(acc);
          }
        }
      return f32_bytes(y);
    }
    case MINFER_OP_MOE_SUM: {
      const int64_t d = in[0].shape[0], k = in[0].shape[1], rows = in[0].shape[2];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < d; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < k; ++j) acc += double(f32(in[1])[r * k + j]) * f32(in[0])[(r * k + j) * d + i];
          y[size_t(r * d + i)] = float(acc);
        }
      return f32_bytes(y);
    }
    default:
      break;
  }
  throw Error(std::string("reference: no implementation of op ") + minfer_op_name(op) + " -> " +
              minfer_dtype_name(out_dtype));
}

std::map<std::string, std::vector<uint8_t>> evaluate(
    const Graph &g, const std::map<std::string, std::vector<uint8_t>> &inputs) {
  std::vector<std::vector<uint8_t>> values(g.tensors().size());
  for (size_t i = 0; i < g.tensors().size(); ++i) {
    const Tensor &t = g.tensors()[i];
    if (t.role == TensorRole::Weight) {
      values[i].assign(t.weight.data, t.weight.data + t.weight.size);
    } else if (t.role == TensorRole::State) {
      values[i].assign(t.n_bytes(), 0);
    } else if (t.role == TensorRole::Input) {
      auto it = inputs.find(t.name);
      if (it == inputs.end() || it->second.size() != t.n_bytes())
        throw Error("reference: input '" + t.name + "' missing or not " +
                    std::to_string(t.n_bytes()) + " bytes");
      values[i] = it->second;
    }
  }
  for (const Node &node : g.nodes()) {
    std::vector<RefTensor> in;
    for (TensorId id : node.inputs)
      in.push_back({g.tensor(id).dtype, g.tensor(id).shape, values[size_t(id)].data()});
    const Tensor &out = g.tensor(node.output);
    values[size_t(node.output)] = run_op(node.op, in, out.dtype, out.shape,
                                         node.params.empty() ? nullptr : node.params.data());
  }
  std::map<std::string, std::vector<uint8_t>> outputs;
  for (size_t i = 0; i < g.tensors().size(); ++i)
    if (g.tensors()[i].is_output) outputs[g.tensors()[i].name] = values[i];
  return outputs;
}

}  // namespace minfer::reference
