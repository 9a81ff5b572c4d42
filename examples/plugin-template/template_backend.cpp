// A minimal minfer backend: host memory and two ops (f32 ADD and MUL).
//
// Start here to write your own: implement a Backend (alloc, supports, compile), a Segment
// (execute), and a Plugin class with the static members MINFER_DEFINE_PLUGIN expects.
// Throw minfer::sdk::Error for failures; the SDK turns it into a status for the host.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

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
  float *at(uint64_t offset) { return reinterpret_cast<float *>(data_.data() + offset); }

 private:
  std::vector<uint8_t> data_;
};

float *f32(const minfer_tensor &t) { return minfer::sdk::buffer_of<HostBuffer>(t).at(t.offset); }

class TemplateSegment : public minfer::sdk::Segment {
 public:
  explicit TemplateSegment(std::vector<minfer::sdk::OwnedNode> nodes) : nodes_(std::move(nodes)) {
    for (const auto &on : nodes_) minfer::sdk::check_compiled_node(on.node());
  }
  void execute(const minfer_step_args &) override {
    for (const auto &on : nodes_) {
      const minfer_node &n = on.node();
      const float *a = f32(*n.inputs[0]), *b = f32(*n.inputs[1]);
      float *y = f32(*n.output);
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
    if (n.op != MINFER_OP_ADD && n.op != MINFER_OP_MUL)
      return minfer::sdk::Support::no(std::string("the template backend implements only add and mul, not ") +
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
