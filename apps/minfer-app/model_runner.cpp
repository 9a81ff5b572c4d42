#include "model_runner.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "sampling/gbnf.hpp"
#include "synth/synth.hpp"

namespace fs = std::filesystem;

namespace minfer::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Writes the configured synthetic model when the model file is missing.
void synthesize_if_missing(const RunConfig &cfg) {
  if (!cfg.synthesize.enabled || fs::exists(cfg.model)) return;
  if (fs::path(cfg.model).has_parent_path()) fs::create_directories(fs::path(cfg.model).parent_path());
  synth::Options o;
  o.arch = cfg.synthesize.arch;
  o.preset = cfg.synthesize.preset;
  o.type = cfg.synthesize.type;
  o.seed = cfg.synthesize.seed;
  o.vocab_path = cfg.synthesize.vocab;
  if (!o.vocab_path.empty() && !fs::exists(o.vocab_path)) {  // optional: fall back to a made-up vocabulary
    spdlog::info("synthesize: {} not found; generating a byte-level vocabulary instead", o.vocab_path);
    o.vocab_path.clear();
  }
  o.out = cfg.model;
  ProgressBar bar("synthesize");
  o.progress = [&](double f, const std::string &name) { bar.update(f, name); };
  const synth::Report r = synth::synthesize(o);
  bar.done(cfg.model + ": " + o.arch + "/" + o.preset + " " + o.type + ", " + human_bytes(r.file_bytes) + " (made once, then reused)");
}

// The pool's default for several sequences: a full context each, or what fits beside the
// weights on the smallest device that reports its free memory (the whole file counted on each,
// 1 GiB kept for activations and scratch, 90% of the rest).
// devices: the backends a split divides the weights and the KV cache among (1 without one);
// each holds about its share of both.
int64_t default_kv_pages(const models::Model &m, const BackendSet &backends, uint64_t file_bytes, uint64_t devices) {
  const int64_t full = m.opts.max_seqs * m.opts.pages_per_seq();
  uint64_t room = UINT64_MAX;
  for (const auto &[name, b] : backends) {
    const minfer_device_info info = b->plugin().device_info(b->device());
    if (info.free_bytes == 0) continue;
    const uint64_t reserve = file_bytes / devices + (uint64_t(1) << 30);
    room = std::min(room, info.free_bytes > reserve ? (info.free_bytes - reserve) / 10 * 9 : 0);
  }
  if (room == UINT64_MAX) return full;
  const int64_t fits = int64_t(room / ((m.kv_page_bytes() + devices - 1) / devices));
  return std::max(m.opts.pages_per_seq(), std::min(full, fits));  // one full context at least: else the build says what is short
}

}  // namespace

sampling::Config sampling_config(const GenerationConfig &g) {
  sampling::Config sc;
  sc.temperature = g.temperature, sc.top_k = g.top_k, sc.top_p = g.top_p, sc.min_p = g.min_p;
  sc.repeat_penalty = g.repeat_penalty, sc.repeat_last_n = g.repeat_last_n, sc.seed = g.seed;
  sc.presence_penalty = g.presence_penalty, sc.frequency_penalty = g.frequency_penalty, sc.typical_p = g.typical_p, sc.top_n_sigma = g.top_n_sigma;
  sc.xtc_probability = g.xtc_probability, sc.xtc_threshold = g.xtc_threshold, sc.dry_multiplier = g.dry_multiplier, sc.dry_base = g.dry_base;
  sc.dry_allowed_length = g.dry_allowed_length, sc.dry_penalty_last_n = g.dry_penalty_last_n, sc.mirostat = g.mirostat;
  sc.mirostat_tau = g.mirostat_tau, sc.mirostat_eta = g.mirostat_eta;
  return sc;
}

sampling::Config ModelRunner::sampling() const {
  sampling::Config sc = sampling_config(cfg_.generation);
  const GenerationConfig &g = cfg_.generation;
  if (sc.dry_multiplier > 0.0f) sc.dry_breakers = sampling::tokens_holding(sampling::constraint_vocab(*tok_)->texts, g.dry_sequence_breakers);
  if (!g.grammar.empty()) sc.constraint = sampling::gbnf_constraint(sampling::constraint_vocab(*tok_), sampling::Grammar::compile(g.grammar));
  else if (!g.json_schema.empty())
    sc.constraint = sampling::json_constraint(sampling::constraint_vocab(*tok_), sampling::Schema::compile(nlohmann::ordered_json::parse(g.json_schema), true));
  return sc;
}

ModelRunner::ModelRunner(const RunConfig &cfg, int64_t max_seqs) : cfg_(cfg) {
  const auto t_load = Clock::now();
  synthesize_if_missing(cfg);
  if (!fs::exists(cfg.model))
    throw Error(cfg.model + ": model file not found; check 'model' in " + cfg.source + " (paths are relative to the working directory)");
  file_ = gguf::File::open(cfg.model);
  tok_ = tokenizer::Tokenizer::from_gguf(*file_);
  models::BuildOptions bo;
  bo.n_ctx = cfg.context;
  bo.max_batch = cfg.batch;
  bo.kv_type = cfg.kv_type == "f32" ? MINFER_DTYPE_F32 : MINFER_DTYPE_F16;
  bo.max_seqs = max_seqs;
  // Serving: a scored prompt (echo with logprobs) runs 32 positions a step, not one for each
  // slot (32 rows of logits: 19 MB for a 152k vocabulary).
  bo.score_rows = max_seqs > 1 ? 32 : 0;
  bo.page_size = int32_t(cfg.kv_page_size);
  bo.kv_pages = cfg.kv_pages;
  bo.tensor_parallel = cfg.tensor_ranks();
  bo.embeddings = cfg.server.embeddings;
  backends_ = open_backends(cfg);
  model_ = models::load_model(file_, bo);
  if (max_seqs > 1 && cfg.kv_pages == 0) {  // sized by memory: the graph is built again with the pool's size
    bo.kv_pages = default_kv_pages(*model_, backends_, fs::file_size(cfg.model), std::max<uint64_t>(1, cfg.split_devices.size()));
    model_ = models::load_model(file_, bo);
  }
  if (cfg.context > model_->hp.n_ctx_train)
    spdlog::warn("context {} is more than the {} positions {} was trained on; past those its output usually degrades", cfg.context,
                 model_->hp.n_ctx_train, cfg.model);
  if (const std::string tp = Trace::path_from(cfg.trace); !tp.empty()) {
    trace_ = std::make_unique<Trace>(tp);
    trace_->set_model(file_->get_or<std::string>("general.name", cfg.model), model_->hp.arch, cfg.source);
    for (int32_t i = 0; i < tok_->n_vocab(); ++i) token_texts_.push_back(tok_->token_bytes(i, true));
  }
  ProgressBar load_bar("load");
  bool uploaded = false;
  session_ = std::make_unique<Session>(model_->graph, cfg, backends_, trace_.get(), [&](double f, const std::string &name) {
    load_bar.update(f, name);
    uploaded = true;
  });
  if (uploaded) load_bar.done(cfg.model + ": weights copied to the backends");
  if (max_seqs == 1) gen_ = std::make_unique<Generator>(*model_, *session_);
  if (max_seqs == 1) sampler_ = std::make_unique<sampling::Sampler>(sampling());
  load_s_ = seconds_since(t_load);
}

std::string ModelRunner::kv_summary() const {
  const models::BuildOptions &o = model_->opts;
  const uint64_t bytes = uint64_t(o.kv_pages) * model_->kv_page_bytes();
  return "kv cache: " + std::to_string(o.kv_pages) + " pages of " + std::to_string(o.page_size) + " positions (" +
         std::to_string(o.kv_pages * o.page_size) + " positions, " + human_bytes(bytes) + " in " + std::to_string(model_->hp.n_layer) +
         " layers, " + minfer_dtype_name(o.kv_type) + ") for " + std::to_string(o.max_seqs) + " sequence" + (o.max_seqs > 1 ? "s" : "") +
         " of up to " + std::to_string(o.n_ctx) + " positions";
}

void ModelRunner::rewind(int64_t n) {
  if (n >= int64_t(seq_.size())) return;
  seq_.resize(size_t(n));
  fed_ = std::min(fed_, n);
  gen_->rewind(fed_);
  logits_ = {};
}

Reply ModelRunner::generate(const std::vector<int32_t> &tokens, int64_t n_predict, const std::function<void(const std::string &)> &on_text) {
  Reply r;
  // What the cache lacks: a sampled token not fed yet, then the new ones.
  std::vector<int32_t> feed(seq_.begin() + fed_, seq_.end());
  feed.insert(feed.end(), tokens.begin(), tokens.end());
  seq_.insert(seq_.end(), tokens.begin(), tokens.end());
  if (feed.empty() && logits_.empty()) throw Error("nothing to generate from: the sequence is empty");
  if (int64_t(seq_.size()) >= n_ctx())
    throw Error("the sequence has " + std::to_string(seq_.size()) + " tokens but the context holds " + std::to_string(n_ctx()) +
                "; shorten the prompt or raise 'context' in " + cfg_.source);
  // A grammar or schema holds each reply from its start (a chat's next turn too).
  if (sampler_->config().constraint) sampler_ = std::make_unique<sampling::Sampler>(sampler_->config());
  const auto t_prefill = Clock::now();
  if (!feed.empty()) logits_ = gen_->feed(feed);  // the generator's buffer: each feed refreshes it
  fed_ = int64_t(seq_.size());
  r.prefilled = int64_t(feed.size());
  r.prefill_s = seconds_since(t_prefill);

  tokenizer::StreamDecoder decoder(*tok_, /*at_sequence_start=*/false);  // the reply continues the sequence
  const auto t_decode = Clock::now();
  // Text that may be the start of a stop string is held back until it is not: the stream then
  // never shows a stop string, and it ends as --json's text does.
  size_t shown = 0;
  auto show = [&](size_t upto) {
    if (upto > shown && on_text) on_text(r.text.substr(shown, upto - shown));
    shown = std::max(shown, upto);
  };
  auto safe_end = [&]() {
    size_t hold = 0;
    for (const auto &s : cfg_.generation.stop)
      for (size_t n = std::min(s.size() - 1, r.text.size()); n > hold; --n)
        if (r.text.compare(r.text.size() - n, n, s, 0, n) == 0) {
          hold = n;
          break;
        }
    return r.text.size() - hold;
  };
  while (int64_t(r.ids.size()) < n_predict) {
    const Logits &logits = logits_;
    const int32_t next = sampler_->sample(logits.data(), int64_t(logits.size()), seq_);
    if (trace_) trace_->sample(logits.data(), int64_t(logits.size()), next, token_texts_);
    if (tok_->is_end_of_generation(next)) {
      r.stop = "eos";
      break;
    }
    seq_.push_back(next);
    r.ids.push_back(next);
    r.raw += tok_->token_bytes(next);
    r.text += decoder.push(next);
    bool stopped = false;
    for (const auto &s : cfg_.generation.stop) {
      const size_t at = s.empty() ? std::string::npos : r.text.find(s, shown > s.size() ? shown - s.size() : 0);
      if (at != std::string::npos) {
        r.text.erase(at);
        stopped = true;
      }
    }
    if (stopped) {
      r.stop = "stop string";
      break;
    }
    show(safe_end());
    if (int64_t(seq_.size()) >= n_ctx()) {
      r.stop = "context full";
      break;
    }
    if (int64_t(r.ids.size()) < n_predict) {
      logits_ = gen_->feed({next});
      fed_ = int64_t(seq_.size());
    }
  }
  if (r.stop != "stop string") r.text += decoder.flush();
  show(r.text.size());
  r.decode_s = seconds_since(t_decode);
  return r;
}

void ModelRunner::finish_trace() {
  if (!trace_) return;
  trace_->write();
  std::fprintf(stderr, "trace written to %s (nodes ran one at a time: each timing includes a sync)\n", trace_->path().c_str());
}

}  // namespace minfer::app
