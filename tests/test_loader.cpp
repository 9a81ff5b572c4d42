// The plugin loader: every way a plugin file can be wrong gives an error that names the file,
// says what is wrong and what to do; and the shipped plugins load and answer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>

#include "common/error.hpp"
#include "runtime/plugin.hpp"

namespace {

std::string load_error(const std::string &path) {
  try {
    minfer::Plugin::load(path);
  } catch (const minfer::Error &e) {
    return e.what();
  }
  return "(loaded)";
}

// The broken plugins sit in build/test-plugins, beside build/bin where this test runs from
// (relative, so a build copied to another machine still finds them).
std::string broken(const std::string &kind) {
  const auto dir = std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "test-plugins";
  return (dir / ("libminfer_test_" + kind + ".so")).string();
}

TEST(Loader, MissingFile) {
  const std::string msg = load_error("/nonexistent/libminfer_backend_x.so");
  EXPECT_NE(msg.find("/nonexistent/libminfer_backend_x.so: plugin file not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MINFER_PLUGIN_PATH"), std::string::npos) << msg;
}

TEST(Loader, NotALibrary) {
  const auto path = std::filesystem::temp_directory_path() / "libminfer_backend_garbage.so";
  std::ofstream(path) << "not an ELF file";
  const std::string msg = load_error(path.string());
  EXPECT_NE(msg.find("cannot load the library"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(Loader, NoEntrySymbol) {
  const std::string msg = load_error(broken("no_entry"));
  EXPECT_NE(msg.find(broken("no_entry")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a minfer plugin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("minfer_backend_entry"), std::string::npos) << msg;
}

TEST(Loader, AbiMajorMismatchNamesBothVersions) {
  const std::string msg = load_error(broken("major"));
  const std::string theirs = std::to_string(MINFER_ABI_MAJOR + 1) + ".3";
  const std::string ours = std::to_string(MINFER_ABI_MAJOR) + "." + std::to_string(MINFER_ABI_MINOR);
  EXPECT_NE(msg.find("plugin ABI " + theirs), std::string::npos) << msg;
  EXPECT_NE(msg.find("minfer's ABI " + ours), std::string::npos) << msg;
  EXPECT_NE(msg.find("rebuild the plugin"), std::string::npos) << msg;
}

TEST(Loader, TableTooSmall) {
  const std::string msg = load_error(broken("small"));
  EXPECT_NE(msg.find("function table is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("smaller than ABI"), std::string::npos) << msg;
}

TEST(Loader, NullTable) {
  EXPECT_NE(load_error(broken("null")).find("returned no function table"), std::string::npos);
}

// A plugin that fills all of `why` without a NUL: the host reads no byte past its buffer.
TEST(Loader, ReasonsFillingTheWholeBufferStayInsideIt) {
  const auto p = minfer::Plugin::load(broken("longwhy"));
  std::string why;
  EXPECT_EQ(p->device_count(&why), 0);
  EXPECT_FALSE(why.empty());
  EXPECT_LE(why.size(), 512u);
  EXPECT_EQ(why.find_first_not_of('x'), std::string::npos) << "bytes from beyond the buffer: " << why;

  minfer::BackendHandle b(p, 0, {});
  minfer_node node{};
  node.struct_size = sizeof node;
  node.op = MINFER_OP_ADD;
  node.name = "n";
  const minfer::SupportAnswer a = b.supports(node);
  EXPECT_FALSE(a.yes);
  EXPECT_LE(a.why.size(), 512u);
  EXPECT_EQ(a.why.find_first_not_of('y'), std::string::npos) << "bytes from beyond the buffer: " << a.why;
}

// A plugin of ABI 1.3 would read a grouped RMS norm (1.4) as a whole-row one: the host
// answers for it, naming both versions, and never asks the plugin.
TEST(Loader, NodesNeedingANewerAbiAreRefusedForOlderPlugins) {
  const auto p = minfer::Plugin::load(broken("oldminor"));
  minfer::BackendHandle b(p, 0, {});
  minfer_tensor x{}, w{}, y{};
  for (minfer_tensor *t : {&x, &w, &y}) t->struct_size = sizeof(minfer_tensor), t->dtype = MINFER_DTYPE_F32, t->rank = 2;
  x.shape[0] = y.shape[0] = 128, x.shape[1] = y.shape[1] = 4, w.shape[0] = 32, w.shape[1] = 1;
  const minfer_tensor *in[] = {&x, &w};
  minfer_rms_norm_params params{};
  params.struct_size = sizeof params, params.eps = 1e-6f, params.group = 32;
  minfer_node node{};
  node.struct_size = sizeof node, node.op = MINFER_OP_RMS_NORM, node.name = "blk.0.attn_q_norm", node.n_inputs = 2, node.inputs = in;
  node.output = &y, node.params = reinterpret_cast<const minfer_params_header *>(&params);
  const minfer::SupportAnswer a = b.supports(node);
  EXPECT_FALSE(a.yes);
  EXPECT_NE(a.why.find("needs plugin ABI 1.4 (a grouped RMS norm)"), std::string::npos) << a.why;
  EXPECT_NE(a.why.find("was built against 1.3"), std::string::npos) << a.why;
  params.group = 0;  // a whole-row norm: any 1.x plugin reads it right
  EXPECT_TRUE(b.supports(node).yes);

  // An IQ4_XS weight (1.11): an older plugin knows no such dtype id.
  minfer_tensor q{}, a_in{}, out{};
  for (minfer_tensor *t : {&q, &a_in, &out}) t->struct_size = sizeof(minfer_tensor), t->dtype = MINFER_DTYPE_F32, t->rank = 2;
  q.dtype = MINFER_DTYPE_IQ4_XS, q.shape[0] = 256, q.shape[1] = 4, a_in.shape[0] = 256, a_in.shape[1] = 1, out.shape[0] = 4, out.shape[1] = 1;
  const minfer_tensor *mm_in[] = {&q, &a_in};
  minfer_node mm{};
  mm.struct_size = sizeof mm, mm.op = MINFER_OP_MATMUL, mm.name = "blk.0.ffn_up", mm.n_inputs = 2, mm.inputs = mm_in, mm.output = &out;
  const minfer::SupportAnswer m = b.supports(mm);
  EXPECT_FALSE(m.yes);
  EXPECT_NE(m.why.find("needs plugin ABI 1.11 (an iq4_xs tensor)"), std::string::npos) << m.why;
}

TEST(Loader, StatusWithoutAMessageSaysSo) {
  const auto p = minfer::Plugin::load(broken("nullmsg"));
  try {
    std::string why;
    p->device_count(&why);
    FAIL() << "expected an error";
  } catch (const minfer::Error &e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("plugin 'broken'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("returned a status without a message"), std::string::npos) << msg;
    EXPECT_NE(msg.find("device_count"), std::string::npos) << msg;
  }
}

TEST(Loader, NotFoundBySearchListsWhereItLooked) {
  try {
    minfer::find_plugin("nosuch", "", {"/tmp/a", "/tmp/b"});
    FAIL() << "expected an error";
  } catch (const minfer::Error &e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("libminfer_backend_nosuch.so not found"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/tmp/a/libminfer_backend_nosuch.so"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/tmp/b/libminfer_backend_nosuch.so"), std::string::npos) << msg;
  }
}

TEST(Loader, CpuPluginLoadsAndRejectsUnknownOption) {
  auto p = minfer::find_plugin("cpu", "", minfer::plugin_search_dirs(""));
  EXPECT_EQ(p->name(), "cpu");
  EXPECT_EQ(p->api().abi_major, uint32_t(MINFER_ABI_MAJOR));
  EXPECT_EQ(p->device_count(nullptr), 1);
  try {
    minfer::BackendHandle h(p, 0, {{"thraeds", "4"}});
    FAIL() << "an unknown option must fail open";
  } catch (const minfer::Error &e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("backend 'cpu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown option 'thraeds'"), std::string::npos) << msg;
  }
  // A bad device id is the plugin's create failing: its message reaches the host.
  try {
    minfer::BackendHandle h(p, 3, {});
    FAIL() << "device 3 must fail";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("open device 3"), std::string::npos) << e.what();
  }
}

TEST(Loader, CudaPluginWithoutDeviceListsZeroWithReason) {
  const auto dirs = minfer::plugin_search_dirs("");
  std::shared_ptr<minfer::Plugin> p;
  try {
    p = minfer::find_plugin("cuda", "", dirs);
  } catch (const minfer::Error &e) {
    GTEST_SKIP() << "the CUDA plugin was not built (no CUDA toolkit): " << e.what();
  }
  std::string why;
  const int32_t n = p->device_count(&why);
  if (n > 0) {
    const minfer_device_info info = p->device_info(0);
    EXPECT_GT(info.total_bytes, 0u);
    EXPECT_GT(std::strlen(info.name), 0u);
  } else {
    EXPECT_FALSE(why.empty()) << "zero devices must come with a reason";
    try {
      minfer::BackendHandle h(p, 0, {});
      FAIL() << "opening a missing device must fail";
    } catch (const minfer::Error &e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device 0"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
