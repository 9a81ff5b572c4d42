#include "runtime/page_pool.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace minfer::kv {

PagePool::PagePool(int32_t n_pages, int32_t page_size) : page_size_(page_size) {
  if (page_size <= 0 || (page_size & (page_size - 1)) != 0)
    throw Error("KV page size " + std::to_string(page_size) + " is not a power of two");
  if (n_pages <= 0) throw Error("a KV page pool needs at least one page, not " + std::to_string(n_pages));
  pages_.resize(size_t(n_pages));
  free_.reserve(size_t(n_pages));
  for (PageId p = n_pages - 1; p >= 0; --p) free_.push_back(p);  // page 0 given out first
}

PoolStats PagePool::stats() const {
  PoolStats s;
  s.pages = n_pages();
  for (const Page &p : pages_) {
    s.used += p.users > 0;
    s.shared += p.users > 1;
  }
  s.cached = int32_t(cached_.size());
  s.free = int32_t(free_.size() + cached_.size());
  return s;
}

uint64_t PagePool::key(PageId parent, std::span<const int32_t> tokens) const {
  uint64_t h = 1469598103934665603ull ^ uint64_t(uint32_t(parent));  // FNV-1a over the parent and the ids
  for (int32_t t : tokens) {
    h ^= uint64_t(uint32_t(t));
    h *= 1099511628211ull;
  }
  return h;
}

PageId PagePool::find_full(PageId parent, std::span<const int32_t> tokens) const {
  const auto [b, e] = index_.equal_range(key(parent, tokens));
  for (auto it = b; it != e; ++it) {
    const Page &p = pages_[size_t(it->second)];
    if (p.parent == parent && std::equal(p.tokens.begin(), p.tokens.end(), tokens.begin(), tokens.end())) return it->second;
  }
  return -1;
}

PagePool::Seq &PagePool::seq_of(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error("KV page pool: sequence " + std::to_string(seq) + " is not open");
  return it->second;
}

const PagePool::Seq &PagePool::seq_of(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error("KV page pool: sequence " + std::to_string(seq) + " is not open");
  return it->second;
}

int64_t PagePool::open(SeqId seq, std::span<const int32_t> prompt) {
  if (seqs_.count(seq)) throw Error("KV page pool: sequence " + std::to_string(seq) + " is open already");
  Seq &s = seqs_[seq];
  // All but the last prompt token may come from the pool: that token's logits are computed.
  const size_t reusable = prompt.empty() ? 0 : (prompt.size() - 1) / size_t(page_size_);
  PageId parent = -1;
  for (size_t k = 0; k < reusable; ++k) {
    const PageId p = find_full(parent, prompt.subspan(k * size_t(page_size_), size_t(page_size_)));
    if (p < 0) break;
    Page &pg = pages_[size_t(p)];
    if (pg.users++ == 0) cached_.erase(pg.lru);
    s.pages.push_back(p);
    parent = p;
  }
  s.positions = int64_t(s.pages.size()) * page_size_;
  return s.positions;
}

PageId PagePool::take_page() {
  if (!free_.empty()) {
    const PageId p = free_.back();
    free_.pop_back();
    return p;
  }
  if (cached_.empty()) return -1;
  const PageId p = cached_.front();  // the least recently freed: forget what it held
  cached_.pop_front();
  Page &pg = pages_[size_t(p)];
  const auto [b, e] = index_.equal_range(key(pg.parent, pg.tokens));
  for (auto it = b; it != e; ++it)
    if (it->second == p) {
      index_.erase(it);
      break;
    }
  pg.registered = false;
  pg.tokens.clear();
  pg.parent = -1;
  return p;
}

bool PagePool::reserve(SeqId seq, int64_t positions) {
  Seq &s = seq_of(seq);
  const int64_t need = int64_t(pages_for(positions)) - int64_t(s.pages.size());
  if (need <= 0) return true;
  if (need > int64_t(free_.size() + cached_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    const PageId p = take_page();
    pages_[size_t(p)].users = 1;
    s.pages.push_back(p);
  }
  return true;
}

void PagePool::commit(SeqId seq, std::span<const int32_t> tokens) {
  Seq &s = seq_of(seq);
  if (s.positions + int64_t(tokens.size()) > int64_t(s.pages.size()) * page_size_)
    throw Error("KV page pool: sequence " + std::to_string(seq) + " writes position " + std::to_string(s.positions + int64_t(tokens.size()) - 1) +
                " beyond its " + std::to_string(s.pages.size()) + " pages; reserve room first");
  for (int32_t t : tokens) {
    s.partial.push_back(t);
    ++s.positions;
    if (int64_t(s.partial.size()) < page_size_) continue;
    // The page is full: later sequences with the same prefix may share it.
    const size_t k = size_t(s.positions / page_size_) - 1;
    Page &pg = pages_[size_t(s.pages[k])];
    if (pg.users != 1) throw Error("KV page pool: sequence " + std::to_string(seq) + " wrote into a page it shares");
    pg.parent = k > 0 ? s.pages[k - 1] : -1;
    pg.tokens = s.partial;
    pg.registered = true;
    index_.emplace(key(pg.parent, pg.tokens), s.pages[k]);
    s.partial.clear();
  }
}

const std::vector<PageId> &PagePool::pages(SeqId seq) const { return seq_of(seq).pages; }
int64_t PagePool::positions(SeqId seq) const { return seq_of(seq).positions; }

void PagePool::release(PageId p) {
  Page &pg = pages_[size_t(p)];
  if (--pg.users > 0) return;
  if (pg.registered) {
    cached_.push_back(p);
    pg.lru = std::prev(cached_.end());
  } else {
    pg.tokens.clear();
    pg.parent = -1;
    free_.push_back(p);
  }
}

void PagePool::close(SeqId seq) {
  Seq &s = seq_of(seq);
  // Last pages first: a later prefix match walks from the front, so the front pages stay
  // cached longest.
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) release(*it);
  seqs_.erase(seq);
}

}  // namespace minfer::kv
