#include "runtime/plugin.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <cstring>
#include <filesystem>
#include <set>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "minfer/op_contract.hpp"

#ifndef MINFER_PLUGIN_DIR_FROM_BIN
#define MINFER_PLUGIN_DIR_FROM_BIN "../lib/minfer"
#endif

namespace fs = std::filesystem;

namespace minfer {

static const char *kPluginPrefix = "libminfer_backend_";

namespace {

// Text a plugin wrote into a buffer of ours: the ABI asks it to terminate the text, but one
// that fills every byte must not make us read past the buffer.
std::string text_in(const char *buf, size_t cap) { return std::string(buf, strnlen(buf, cap)); }

}  // namespace

std::string plugin_file_name(const std::string &backend_name) {
  return kPluginPrefix + backend_name + ".so";
}

std::vector<std::string> plugin_search_dirs(const std::string &config_plugin_dir) {
  std::vector<std::string> dirs;
  if (!config_plugin_dir.empty()) dirs.push_back(config_plugin_dir);
  if (const char *env = std::getenv("MINFER_PLUGIN_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      const size_t end = s.find(':', start);
      const std::string d = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!d.empty()) dirs.push_back(d);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  // The build tree keeps plugins beside the executables; an install puts them in
  // PREFIX/lib/minfer, found from PREFIX/bin wherever PREFIX is.
  const fs::path exe_dir = boost::dll::program_location().parent_path();
  dirs.push_back(exe_dir.string());
  dirs.push_back((exe_dir / MINFER_PLUGIN_DIR_FROM_BIN).lexically_normal().string());
  return dirs;
}

std::shared_ptr<Plugin> Plugin::load(const std::string &path) {
  if (!fs::exists(path))
    throw Error(path + ": plugin file not found; check the path, or set plugin_dir in the run "
                       "config or MINFER_PLUGIN_PATH");
  auto p = std::shared_ptr<Plugin>(new Plugin());
  p->path_ = path;
  try {
    p->lib_ = std::make_unique<boost::dll::shared_library>(
        path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception &e) {
    throw Error(path + ": cannot load the library (" + e.what() +
                "); is it a shared library built for this machine, with its dependencies on the "
                "library path?");
  }
  if (!p->lib_->has(MINFER_ENTRY_SYMBOL))
    throw Error(path + ": not a minfer plugin: it does not export '" MINFER_ENTRY_SYMBOL
                       "'; build it with MINFER_DEFINE_PLUGIN from the minfer SDK");
  auto entry = p->lib_->get<const minfer_backend_api *(uint32_t, uint32_t)>(MINFER_ENTRY_SYMBOL);
  p->api_ = entry(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
  if (!p->api_) throw Error(path + ": the plugin's entry returned no function table");
  const minfer_backend_api &a = *p->api_;
  if (a.abi_major != MINFER_ABI_MAJOR)
    throw Error(path + ": plugin ABI " + std::to_string(a.abi_major) + "." +
                std::to_string(a.abi_minor) + " does not match this minfer's ABI " +
                std::to_string(MINFER_ABI_MAJOR) + "." + std::to_string(MINFER_ABI_MINOR) +
                " (the major numbers must be equal); rebuild the plugin against this minfer's SDK");
  const size_t need = MINFER_SIZE_UP_TO(minfer_backend_api, synchronize);
  if (a.struct_size < need)
    throw Error(path + ": the plugin's function table is " + std::to_string(a.struct_size) +
                " bytes, smaller than ABI " + std::to_string(MINFER_ABI_MAJOR) + ".0's " +
                std::to_string(need) + "; rebuild the plugin against this minfer's SDK");
  const void *entries[] = {
      (const void *)a.status_code,  (const void *)a.status_message, (const void *)a.status_free,
      (const void *)a.device_count, (const void *)a.device_info,    (const void *)a.open,
      (const void *)a.close,        (const void *)a.buffer_alloc,   (const void *)a.buffer_free,
      (const void *)a.buffer_write, (const void *)a.buffer_read,    (const void *)a.supports,
      (const void *)a.compile,      (const void *)a.segment_free,   (const void *)a.execute,
      (const void *)a.synchronize};
  for (const void *e : entries)
    if (!e) throw Error(path + ": the plugin's function table has a NULL entry; the plugin is broken");
  if (!a.name || !*a.name) throw Error(path + ": the plugin reports no name");
  p->name_ = a.name;
  return p;
}

Plugin::~Plugin() = default;

void Plugin::check(minfer_status *status, const std::string &what) const {
  if (!status) return;
  const char *m = api_->status_message(status);
  // The message is the plugin's; a NULL or endless one must still give a readable error.
  const std::string msg = m ? text_in(m, 4096) : "plugin '" + name_ + "' (" + path_ + ") returned a status without a message";
  api_->status_free(status);
  throw Error("backend '" + name_ + "': " + what + ": " + msg);
}

int32_t Plugin::device_count(std::string *why_none) const {
  int32_t n = 0;
  char why[512] = {0};
  check(api_->device_count(&n, why, sizeof why), "device_count");
  if (why_none) *why_none = text_in(why, sizeof why);
  return n;
}

minfer_device_info Plugin::device_info(int32_t device) const {
  minfer_device_info info{};
  info.struct_size = sizeof info;
  check(api_->device_info(device, &info), "device_info(" + std::to_string(device) + ")");
  info.name[sizeof info.name - 1] = '\0';
  return info;
}

std::shared_ptr<Plugin> find_plugin(const std::string &name, const std::string &explicit_path,
                                    const std::vector<std::string> &dirs) {
  std::shared_ptr<Plugin> p;
  if (!explicit_path.empty()) {
    p = Plugin::load(explicit_path);
  } else {
    const std::string file = plugin_file_name(name);
    std::string looked;
    for (const auto &d : dirs) {
      const fs::path candidate = fs::path(d) / file;
      looked += "\n  " + candidate.string();
      if (fs::exists(candidate)) {
        p = Plugin::load(candidate.string());
        break;
      }
    }
    if (!p)
      throw Error("backend '" + name + "': plugin " + file + " not found; looked in:" + looked +
                  "\nset plugin_dir in the run config, MINFER_PLUGIN_PATH, or the backend's "
                  "'plugin: PATH'");
  }
  if (p->name() != name)
    throw Error(p->path() + ": this plugin calls itself '" + p->name() + "', but the run config "
                "asked for backend '" + name + "'; rename the backend in the config");
  return p;
}

std::vector<std::string> discover_plugin_files(const std::vector<std::string> &dirs) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto &d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    std::vector<fs::path> here;
    for (const auto &e : fs::directory_iterator(d, ec)) {
      const std::string f = e.path().filename().string();
      if (f.rfind(kPluginPrefix, 0) == 0 && e.path().extension() == ".so") here.push_back(e.path());
    }
    std::sort(here.begin(), here.end());
    for (const auto &p : here)
      if (seen.insert(p.filename().string()).second) files.push_back(p.string());
  }
  return files;
}

// ---- RAII over the handles --------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (buf_) plugin_->api().buffer_free(buf_);
}

void DeviceBuffer::write(uint64_t offset, const void *src, uint64_t bytes) {
  plugin_->check(plugin_->api().buffer_write(buf_, offset, src, bytes), "buffer_write");
}

void DeviceBuffer::read(uint64_t offset, void *dst, uint64_t bytes) const {
  plugin_->check(plugin_->api().buffer_read(buf_, offset, dst, bytes), "buffer_read");
}

bool DeviceBuffer::read_async(uint64_t offset, void *dst, uint64_t bytes) const {
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size < MINFER_SIZE_UP_TO(minfer_backend_api, buffer_read_async) || !a.buffer_read_async) return false;
  minfer_status *st = a.buffer_read_async(buf_, offset, dst, bytes);
  if (st && a.status_code(st) == MINFER_ERR_UNSUPPORTED) {
    a.status_free(st);
    return false;
  }
  plugin_->check(st, "buffer_read_async");
  return true;
}

bool DeviceBuffer::copies_directly_from(const DeviceBuffer &src) const {
  const minfer_backend_api &a = plugin_->api();
  return src.plugin_ == plugin_ && a.struct_size >= MINFER_SIZE_UP_TO(minfer_backend_api, buffer_copy) && a.buffer_copy;
}

bool DeviceBuffer::copy_from(const DeviceBuffer &src, uint64_t src_offset, uint64_t offset, uint64_t bytes) {
  if (!copies_directly_from(src)) return false;
  const minfer_backend_api &a = plugin_->api();
  minfer_status *st = a.buffer_copy(buf_, offset, src.buf_, src_offset, bytes);
  if (st && a.status_code(st) == MINFER_ERR_UNSUPPORTED) {
    a.status_free(st);
    return false;
  }
  plugin_->check(st, "buffer_copy");
  return true;
}

CompiledSegment::~CompiledSegment() {
  if (seg_) plugin_->api().segment_free(seg_);
}

namespace {

void log_from_plugin(void *user, int32_t level, const char *message) {
  const auto *name = static_cast<const std::string *>(user);
  const auto lvl = level <= MINFER_LOG_TRACE  ? spdlog::level::trace
                   : level == MINFER_LOG_DEBUG ? spdlog::level::debug
                   : level == MINFER_LOG_INFO  ? spdlog::level::info
                   : level == MINFER_LOG_WARN  ? spdlog::level::warn
                                               : spdlog::level::err;
  spdlog::log(lvl, "[{}] {}", *name, message ? message : "");
}

}  // namespace

BackendHandle::BackendHandle(std::shared_ptr<Plugin> plugin, int32_t device,
                             const std::vector<std::pair<std::string, std::string>> &options)
    : plugin_(std::move(plugin)), device_(device) {
  host_.struct_size = sizeof host_;
  host_.abi_major = MINFER_ABI_MAJOR;
  host_.abi_minor = MINFER_ABI_MINOR;
  host_.user = const_cast<std::string *>(&plugin_->name());
  host_.log = log_from_plugin;
  std::vector<const char *> keys, values;
  for (const auto &kv : options) {
    keys.push_back(kv.first.c_str());
    values.push_back(kv.second.c_str());
  }
  plugin_->check(plugin_->api().open(device, &host_, keys.data(), values.data(),
                                     int32_t(keys.size()), &backend_),
                 "open device " + std::to_string(device));
}

BackendHandle::~BackendHandle() {
  if (backend_) plugin_->api().close(backend_);
}

std::unique_ptr<DeviceBuffer> BackendHandle::alloc(uint64_t bytes) {
  minfer_buffer *b = nullptr;
  plugin_->check(plugin_->api().buffer_alloc(backend_, bytes, &b),
                 "buffer_alloc(" + std::to_string(bytes) + " bytes)");
  return std::make_unique<DeviceBuffer>(plugin_, b, bytes);
}

std::unique_ptr<DeviceBuffer> BackendHandle::wrap_host(const void *host, uint64_t bytes) {
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size < MINFER_SIZE_UP_TO(minfer_backend_api, buffer_wrap_host) || !a.buffer_wrap_host) return nullptr;
  minfer_buffer *b = nullptr;
  minfer_status *st = a.buffer_wrap_host(backend_, host, bytes, &b);
  if (st && a.status_code(st) == MINFER_ERR_UNSUPPORTED) {
    a.status_free(st);
    return nullptr;
  }
  plugin_->check(st, "buffer_wrap_host");
  return std::make_unique<DeviceBuffer>(plugin_, b, bytes);
}

HostMemory BackendHandle::host_alloc(uint64_t bytes) {
  HostMemory m;
  m.bytes_ = bytes;
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size >= MINFER_SIZE_UP_TO(minfer_backend_api, host_free) && a.host_alloc && a.host_free) {
    void *p = nullptr;
    minfer_status *st = a.host_alloc(backend_, bytes, &p);
    if (!st) {
      m.plugin_ = plugin_, m.backend_ = backend_, m.data_ = p;
      return m;
    }
    // Its own memory only speeds copies up: where the backend cannot give it (page-locked
    // memory is limited, e.g. by RLIMIT_MEMLOCK in a container), ordinary memory does.
    if (a.status_code(st) != MINFER_ERR_UNSUPPORTED)
      spdlog::warn("[{}] host_alloc({} bytes) failed ({}); reading outputs into ordinary memory, which copies slower", plugin_->name(),
                   bytes, a.status_message(st) ? a.status_message(st) : "?");
    a.status_free(st);
  }
  m.data_ = ::operator new(std::max<uint64_t>(bytes, 1), std::align_val_t(64));
  return m;
}

void HostMemory::release() noexcept {
  if (data_ && backend_) plugin_->api().host_free(backend_, data_);
  else if (data_) ::operator delete(data_, std::align_val_t(64));
  data_ = nullptr, backend_ = nullptr, bytes_ = 0;
}

HostMemory &HostMemory::operator=(HostMemory &&other) noexcept {
  if (this != &other) {
    release();
    plugin_ = std::move(other.plugin_);
    backend_ = std::exchange(other.backend_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

SupportAnswer BackendHandle::supports(const minfer_node &node) {
  // A node using a later ABI's field would be misread by an older plugin: refused here.
  if (const sdk::AbiNeed need = sdk::abi_needed(node); need.minor > plugin_->api().abi_minor)
    return {false, "this node needs plugin ABI " + std::to_string(MINFER_ABI_MAJOR) + "." + std::to_string(need.minor) + " (" + need.what +
                       "); plugin '" + name() +
                       "' was built against " + std::to_string(plugin_->api().abi_major) + "." +
                       std::to_string(plugin_->api().abi_minor) + ": rebuild it against this minfer's SDK"};
  int32_t yes = 0;
  char why[512] = {0};
  plugin_->check(plugin_->api().supports(backend_, &node, &yes, why, sizeof why),
                 std::string("supports(") + (node.name ? node.name : "?") + ")");
  return {yes != 0, text_in(why, sizeof why)};
}

std::unique_ptr<CompiledSegment> BackendHandle::compile(const std::vector<const minfer_node *> &nodes) {
  minfer_segment *s = nullptr;
  plugin_->check(plugin_->api().compile(backend_, nodes.data(), int32_t(nodes.size()), &s), "compile");
  return std::make_unique<CompiledSegment>(plugin_, s);
}

void BackendHandle::execute(CompiledSegment &seg, int64_t step, const StepShape &shape, bool node_times) {
  minfer_step_args args{};
  args.struct_size = sizeof args;
  args.step = step;
  args.n_tokens = shape.n_tokens;
  args.n_past = shape.n_past;
  args.n_outputs = shape.n_outputs;
  args.n_seqs = shape.n_seqs;
  args.max_positions = shape.max_positions;
  args.node_times = node_times ? 1 : 0;
  plugin_->check(plugin_->api().execute(backend_, seg.raw(), &args), "execute");
}

std::vector<double> BackendHandle::node_times(CompiledSegment &seg, int32_t n_nodes) {
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size < MINFER_SIZE_UP_TO(minfer_backend_api, segment_node_times) || !a.segment_node_times) return {};
  std::vector<double> ms(static_cast<size_t>(n_nodes));
  minfer_status *st = a.segment_node_times(backend_, seg.raw(), ms.data(), n_nodes);
  if (st && a.status_code(st) == MINFER_ERR_UNSUPPORTED) {
    a.status_free(st);
    return {};
  }
  plugin_->check(st, "segment_node_times");
  return ms;
}

std::string BackendHandle::explain(const CompiledSegment &seg, int32_t node, int64_t n_tokens) const {
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size < MINFER_SIZE_UP_TO(minfer_backend_api, segment_explain) || !a.segment_explain) return "";
  char text[512] = {};
  minfer_status *st = a.segment_explain(backend_, seg.raw(), node, n_tokens, text, sizeof text);
  if (st && a.status_code(st) == MINFER_ERR_UNSUPPORTED) {
    a.status_free(st);
    return "";
  }
  plugin_->check(st, "segment_explain");
  return text_in(text, sizeof text);
}

void BackendHandle::synchronize() {
  plugin_->check(plugin_->api().synchronize(backend_), "synchronize");
}

BackendGroup::BackendGroup(const std::vector<BackendHandle *> &ranks, const std::vector<std::string> &names) {
  if (ranks.empty()) throw Error("a group of ranks needs at least one backend");
  plugin_ = ranks[0]->shared_plugin();
  std::string list;
  for (const auto &n : names) list += (list.empty() ? "'" : ", '") + n + "'";
  for (size_t r = 1; r < ranks.size(); ++r)
    if (ranks[r]->shared_plugin() != plugin_)
      throw Error("split: tensor over " + list + ": rank " + std::to_string(r) + " ('" + names[r] + "') is backend '" +
                  ranks[r]->name() + "' but rank 0 ('" + names[0] + "') is '" + plugin_->name() +
                  "'; the ranks of a tensor split must be backends of one plugin (e.g. {plugin: cuda, device: N} each)");
  const minfer_backend_api &a = plugin_->api();
  if (a.struct_size < MINFER_SIZE_UP_TO(minfer_backend_api, group_all_reduce) || !a.group_open || !a.group_free || !a.group_all_reduce)
    throw Error("split: tensor over " + list + ": plugin '" + plugin_->name() + "' (ABI " + std::to_string(a.abi_major) + "." +
                std::to_string(a.abi_minor) + ") has no collectives (ABI 1.8 group_all_reduce); use split: layer or another plugin");
  std::vector<minfer_backend *> raw;
  for (auto *b : ranks) raw.push_back(b->raw());
  plugin_->check(a.group_open(raw.data(), int32_t(raw.size()), &group_), "group_open(" + list + ")");
}

BackendGroup::~BackendGroup() {
  if (group_) plugin_->api().group_free(group_);
}

void BackendGroup::all_reduce(uint64_t count, const std::vector<std::pair<DeviceBuffer *, uint64_t>> &send,
                              const std::vector<std::pair<DeviceBuffer *, uint64_t>> &recv, const std::string &node) {
  std::vector<minfer_buffer *> sb, rb;
  std::vector<uint64_t> so, ro;
  for (const auto &[b, off] : send) sb.push_back(b->raw()), so.push_back(off);
  for (const auto &[b, off] : recv) rb.push_back(b->raw()), ro.push_back(off);
  plugin_->check(plugin_->api().group_all_reduce(group_, MINFER_DTYPE_F32, count, sb.data(), so.data(), rb.data(), ro.data()),
                 "group_all_reduce of node '" + node + "'");
}

}  // namespace minfer
