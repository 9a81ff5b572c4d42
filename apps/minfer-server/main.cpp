// minfer-server: an OpenAI-compatible HTTP server (README: minfer-server). Flags follow
// llama-server's spelling and win over the run config (`server:`, `parallel`, `context`).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#if defined(__GLIBC__)
#include <malloc.h>
#include <pthread.h>
#endif

#include "common/error.hpp"
#include "common/flags.hpp"
#include "config/run_config.hpp"
#include "cors.hpp"
#include "server.hpp"

namespace {

const char *kUsage =
    "usage: minfer-server --config RUN.yaml [-m MODEL.gguf] [options]\n"
    "  --host ADDR          address to listen on (default 127.0.0.1)\n"
    "  --port N             port (default 8080; 0: any free one, printed)\n"
    "  -np, --parallel N    sequences generated at once (default 4)\n"
    "  -c, --ctx-size N     context positions per sequence (default: the run config's)\n"
    "  --api-key KEY        ask every request but /health, the chat page and the model list for\n"
    "                       'Authorization: Bearer KEY' (or 'x-api-key: KEY')\n"
    "                       (MINFER_API_KEY sets it too)\n"
    "  --timeout SECONDS    read/write timeout of a connection (default 600)\n"
    "  --alias NAME         the model's name in the API (default: the file's name)\n"
    "  --embeddings         serve /v1/embeddings too (the last token's hidden state after the final\n"
    "                       norm; the model keeps that output, which costs a little decode speed)\n"
    "  --cors-origins LIST  web pages' origins that may call it from a browser, comma-separated\n"
    "                       ('*': any; default: localhost pages, apps, editors' webviews, extensions)\n";

}  // namespace

int main(int argc, char **argv) {
#if defined(__GLIBC__)
  // Bodies of megabytes come and go on many connection threads. glibc raises its mmap threshold
  // to the largest block freed, so later big blocks land in the threads' heaps and stay there:
  // a soak with the malformed corpus grew by 500 MiB in 3 minutes (scripts/server-soak.py). A
  // fixed threshold keeps blocks of 1 MiB and more mapped and returned when freed. And each
  // thread that allocates gets an arena of its own (up to 8 per core), each keeping what its
  // peaks left: with chat templates the soak's RSS rose to 300 MiB over 15 minutes, flat at
  // 45 MiB with one arena. Two keep the connection threads from queueing on one lock (their
  // small blocks come from per-thread caches first).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 2);
#endif
  try {
    std::string config, model;
    long long ctx = 0, parallel = 0;
    // Flags first, then the run config's `server:` section under them, then the defaults.
    std::optional<std::string> host, api_key, alias, cors;
    std::optional<int> port, timeout;
    bool embeddings = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw minfer::Error(a + " needs a value\n" + kUsage);
        return argv[++i];
      };
      if (a == "--config") config = value();
      else if (a == "-m" || a == "--model") model = value();
      else if (a == "--host") host = value();
      else if (a == "--port") port = int(minfer::flag_int(a, value(), 0, 65535));
      else if (a == "-np" || a == "--parallel") parallel = minfer::flag_int(a, value(), 1, 1024);
      else if (a == "-c" || a == "--ctx-size") ctx = minfer::flag_int(a, value(), 1, 1 << 24);
      else if (a == "--api-key") api_key = value();
      else if (a == "--timeout") timeout = int(minfer::flag_int(a, value(), 1, 86400));
      else if (a == "--alias") alias = value();
      else if (a == "--embeddings") embeddings = true;
      else if (a == "--cors-origins") cors = value();
      else if (a == "-h" || a == "--help") { std::fputs(kUsage, stdout); return 0; }
      else throw minfer::Error("unknown argument '" + a + "'\n" + kUsage);
    }
    if (config.empty()) throw minfer::Error(std::string("no run config: give --config FILE (configs/cpu.yaml is one)\n") + kUsage);
    minfer::RunConfig cfg = minfer::load_run_config(config);
    if (!model.empty()) cfg.model = model;
    if (cfg.model.empty()) throw minfer::Error(config + ": no model to serve: give 'model:' or -m MODEL.gguf");
    if (ctx > 0) cfg.context = ctx;
    if (embeddings) cfg.server.embeddings = true;
    minfer::server::ServerOptions o;
    const minfer::ServerConfig &sc = cfg.server;
    o.host = host.value_or(sc.host);
    o.port = port.value_or(sc.port);
    o.timeout_s = timeout.value_or(sc.timeout);
    o.alias = alias.value_or(sc.alias);
    const char *env_key = std::getenv("MINFER_API_KEY");
    o.api_key = api_key ? *api_key : env_key && *env_key ? std::string(env_key) : sc.api_key;
    o.parallel = parallel > 0 ? parallel : cfg.parallel > 0 ? cfg.parallel : 4;
    o.cors_origins = sc.cors_origins;
    if (cors) {
      o.cors_origins.clear();
      for (size_t at = 0; at <= cors->size();) {
        const size_t comma = std::min(cors->find(',', at), cors->size());
        std::string one = cors->substr(at, comma - at);
        one.erase(0, one.find_first_not_of(' '));
        one.erase(one.find_last_not_of(' ') + 1);
        if (!one.empty()) o.cors_origins.push_back(one);
        at = comma + 1;
      }
    }
    if (o.cors_origins.empty()) o.cors_origins = minfer::server::default_cors_origins();
    // SIGINT/SIGTERM stop the server from a thread of its own (stop() is not for signal handlers).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    minfer::server::Server server(std::move(cfg), o);
    // Joined before `server` goes: a detached thread could still be inside drain() (or get a
    // late signal) after run() returned. Once run() is back, main wakes it with a signal of its
    // own, which it recognises by `exiting`.
    std::atomic<bool> exiting{false};
    std::thread signals([&server, &exiting, set] {
      int sig = 0;
      sigwait(&set, &sig);
      if (exiting) return;
      std::fprintf(stderr, "minfer-server: signal %d: finishing the requests in flight, then stopping\n", sig);
      server.drain();
    });
    const auto end_signals = [&] {
      exiting = true;
      pthread_kill(signals.native_handle(), SIGTERM);
      signals.join();
    };
    int rc = 1;
    try {
      rc = server.run();
    } catch (...) {
      end_signals();
      throw;
    }
    end_signals();
    return rc;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "minfer-server: %s\n", e.what());
    return 1;
  }
}
