// A minimal minfer backend: host memory, two elementwise ops (f32 ADD and MUL) and the paged
// ATTENTION that steps over many sequences use, written plainly (no threads, no SIMD).
//
// Start here to write your own: implement a Backend (alloc, supports, compile), a Segment
// (execute), and a Plugin class with the static members MINFER_DEFINE_PLUGIN expects.
// Throw minfer::sdk::Error for failures; the SDK turns it into a status for the host.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <minfer/decode.hpp>
#include <minfer/op_contract.hpp>
#include <minfer/plugin.hpp>
#include <minfer/tensor.hpp>

namespace {

using minfer::sdk::Error;

class HostBuffer : public minfer::sdk::Buffer {
 public:
  explicit HostBuffer(uint64_t bytes) : Buffer(bytes), data_(bytes ? bytes : 1) {}
  void write(uint64_t offset, const void *src, uint64_t bytes) override {
    check_range(offset, bytes, "write");
    std::memcpy(data_.data() + offset, src, bytes);
  }
  void read(uint64_t offset, void *dst, uint64_t bytes) override {
    check_range(offset, bytes, "read");
    std::memcpy(dst, data_.data() + offset, bytes);
  }
  uint8_t *at(uint64_t offset) { return data_.data() + offset; }

 private:
  std::vector<uint8_t> data_;
};

template <class T = float>
T *data(const minfer_tensor &t) { return reinterpret_cast<T *>(minfer::sdk::buffer_of<HostBuffer>(t).at(t.offset)); }

// A cache value as f32, and back (an f16 cache rounds what it stores).
float load(const minfer_tensor &cache, int64_t i) {
  return cache.dtype == MINFER_DTYPE_F16 ? minfer::sdk::half_to_float(data<uint16_t>(cache)[i]) : data(cache)[i];
}
void store(const minfer_tensor &cache, int64_t i, float v) {
  if (cache.dtype == MINFER_DTYPE_F16) data<uint16_t>(cache)[i] = minfer::sdk::float_to_half(v);
  else data(cache)[i] = v;
}

// Paged attention (minfer/ops.h): each token writes its k and v at its slot's position, then
// attends to positions 0..its own of that slot, each found through the slot's page table.
void attention(const minfer_node &n, const minfer_step_args &args) {
  const auto &p = minfer::sdk::params_of<minfer_attention_params>(n);
  const minfer_tensor &kc = *n.inputs[3], &vc = *n.inputs[4], &table_t = *n.inputs[7];
  const float *q = data(*n.inputs[0]), *k = data(*n.inputs[1]), *v = data(*n.inputs[2]);
  const int32_t *pos = data<int32_t>(*n.inputs[5]), *slot = data<int32_t>(*n.inputs[6]), *table = data<int32_t>(table_t);
  float *out = data(*n.output);
  const int64_t tokens = minfer::sdk::run_rows(*n.inputs[0], args), hd = p.head_dim, kvd = int64_t(p.n_kv_head) * hd;
  const int64_t P = p.page_size, max_pages = table_t.shape[0], n_slots = table_t.shape[1], pages = kc.shape[1] / P;
  auto row_of = [&](int64_t t, int64_t position) {  // the cache row of position `position` of token t's slot
    if (slot[t] < 0 || slot[t] >= n_slots || position < 0 || position / P >= max_pages)
      throw Error(MINFER_ERR_INVALID_ARGUMENT, "token " + std::to_string(t) + ": slot or position outside the page table");
    const int64_t page = table[slot[t] * max_pages + position / P];
    if (page < 0 || page >= pages) throw Error(MINFER_ERR_INVALID_ARGUMENT, "page " + std::to_string(page) + " outside the cache");
    return page * P + position % P;
  };
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < kvd; ++i) {
      store(kc, row_of(t, pos[t]) * kvd + i, k[t * kvd + i]);
      store(vc, row_of(t, pos[t]) * kvd + i, v[t * kvd + i]);
    }
  // ABI 1.6: a sliding window (only the last `window` positions) and a cap on the scores.
  const int64_t window = minfer::sdk::attention_window(p);
  const float cap = minfer::sdk::attention_softcap(p);
  std::vector<float> score;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t kv_off = h / (p.n_head / p.n_kv_head) * hd;
      const float *qh = q + (t * p.n_head + h) * hd;
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos[t] - window + 1) : 0, count = pos[t] + 1 - first;
      score.assign(size_t(count), 0.0f);
      float mx = -INFINITY;
      double sum = 0;
      for (int64_t j = 0; j < count; ++j) {
        double dot = 0;  // a double sum: exact enough for head sizes up to 256 without tricks
        for (int64_t d = 0; d < hd; ++d) dot += double(qh[d]) * load(kc, row_of(t, first + j) * kvd + kv_off + d);
        float &s = score[size_t(j)] = float(dot) * p.scale;
        if (cap > 0) s = cap * std::tanh(s / cap);
        mx = std::fmax(mx, s);
      }
      for (float &s : score) sum += s = std::exp(s - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;  // double: a float sum over thousands of keys loses digits
        for (int64_t j = 0; j < count; ++j) acc += double(score[size_t(j)]) * load(vc, row_of(t, first + j) * kvd + kv_off + d);
        out[(t * p.n_head + h) * hd + d] = float(acc / sum);
      }
    }
}

class TemplateSegment : public minfer::sdk::Segment {
 public:
  explicit TemplateSegment(std::vector<minfer::sdk::OwnedNode> nodes) : nodes_(std::move(nodes)) {
    for (const auto &on : nodes_) minfer::sdk::check_compiled_node(on.node());
  }
  void execute(const minfer_step_args &args) override {
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      if (n.op == MINFER_OP_ATTENTION) {
        attention(n, args);
        continue;
      }
      const float *a = data(*n.inputs[0]), *b = data(*n.inputs[1]);
      float *y = data(*n.output);
      const int64_t count = minfer::sdk::n_elements(*n.output);
      if (n.op == MINFER_OP_ADD)
        for (int64_t i = 0; i < count; ++i) y[i] = a[i] + b[i];
      else
        for (int64_t i = 0; i < count; ++i) y[i] = a[i] * b[i];
    }
  }

 private:
  std::vector<minfer::sdk::OwnedNode> nodes_;
};

class TemplateBackend : public minfer::sdk::Backend {
 public:
  std::unique_ptr<minfer::sdk::Buffer> alloc(uint64_t bytes) override {
    return std::make_unique<HostBuffer>(bytes);
  }
  minfer::sdk::Support supports(const minfer_node &n) override {
    if (n.op != MINFER_OP_ADD && n.op != MINFER_OP_MUL && n.op != MINFER_OP_ATTENTION)
      return minfer::sdk::Support::no(std::string("the template backend implements only add, mul and attention, not ") +
                                      minfer_op_name(n.op));
    const std::string why = minfer::sdk::check_op_contract(n);
    return why.empty() ? minfer::sdk::Support::yes() : minfer::sdk::Support::no(why);
  }
  std::unique_ptr<minfer::sdk::Segment> compile(std::vector<minfer::sdk::OwnedNode> nodes) override {
    for (const auto &on : nodes)
      if (!supports(on.node()).ok) throw Error(MINFER_ERR_UNSUPPORTED, "node '" + on.name() + "' is not supported");
    return std::make_unique<TemplateSegment>(std::move(nodes));
  }
};

struct TemplatePlugin {
  static constexpr const char *name = "template";
  static constexpr const char *version = "0.1.0";
  static int32_t device_count(std::string &) { return 1; }
  static void device_info(int32_t device, minfer_device_info &info) {
    if (device != 0) throw Error(MINFER_ERR_NOT_FOUND, "the template backend has only device 0");
    std::strncpy(info.name, "template host device", sizeof info.name - 1);
  }
  static std::unique_ptr<minfer::sdk::Backend> open(int32_t device, minfer::sdk::Options &opts,
                                                    const minfer::sdk::Host &host) {
    if (device != 0) throw Error(MINFER_ERR_NOT_FOUND, "the template backend has only device 0");
    // Options are read with take*(); any key left over is rejected by the SDK with its name.
    if (opts.take_bool("verbose", false)) host.log(MINFER_LOG_INFO, "template backend opened");
    return std::make_unique<TemplateBackend>();
  }
};

}  // namespace

MINFER_DEFINE_PLUGIN(TemplatePlugin)
