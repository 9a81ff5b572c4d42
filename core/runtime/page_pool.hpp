// core/runtime/page_pool.hpp — the paged KV cache's accounting: which pages of the pool each
// sequence owns, as it grows and when it ends, and which full pages several sequences share.
//
// The core owns the page tables; the plugins own the memory (a pool of n_pages pages per
// layer, each holding page_size positions of every KV head). A page id here is an index into
// that pool, the same for every layer. Nothing here knows kernels or requests: the scheduler
// asks for room, the batched session turns page lists into the attention's page table.
//
// Prefix reuse (SERVING.md): a full page is identified by its tokens and the page before it,
// so a page matches only when the whole prefix up to its end matches. A sequence opening
// with a prompt takes the matching full pages read-only and computes only the rest; it never
// writes into a page it shares. Pages nobody uses any more stay cached for reuse until the
// pool needs them (least recently freed first).
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace minfer::kv {

using PageId = int32_t;
using SeqId = int64_t;

struct PoolStats {
  int32_t pages = 0;   // in the pool
  int32_t used = 0;    // held by at least one sequence
  int32_t shared = 0;  // held by two or more
  int32_t cached = 0;  // held by none, kept for prefix reuse (given out when the pool runs short)
  int32_t free = 0;    // ready to give out: never used, or cached ones included
};

class PagePool {
 public:
  // page_size: positions per page, a power of two. Throws minfer::Error naming the value.
  PagePool(int32_t n_pages, int32_t page_size);

  int32_t page_size() const { return page_size_; }
  int32_t n_pages() const { return int32_t(pages_.size()); }
  PoolStats stats() const;

  // Pages a sequence of n positions needs.
  int32_t pages_for(int64_t positions) const { return int32_t((positions + page_size_ - 1) / page_size_); }

  // Starts sequence `seq` with its prompt: the longest run of full pages that matches pages
  // in the pool is shared with it (at most all but the prompt's last token: its logits must
  // be computed). Returns the positions already computed (a multiple of page_size); the caller
  // feeds the prompt from there. Throws if seq is open already.
  int64_t open(SeqId seq, std::span<const int32_t> prompt);

  // Room for `positions` positions in all: pages from the pool as needed. False, changing
  // nothing, when too few are free (the scheduler then preempts or waits).
  bool reserve(SeqId seq, int64_t positions);

  // Records the tokens written at the sequence's next positions (room reserved before); a
  // page that fills becomes shareable by later sequences with the same prefix.
  void commit(SeqId seq, std::span<const int32_t> tokens);

  // The sequence's page table row: page ids in position order.
  const std::vector<PageId> &pages(SeqId seq) const;
  int64_t positions(SeqId seq) const;  // committed so far

  // Ends the sequence: its pages go back (shared ones when their last user leaves).
  void close(SeqId seq);
  bool is_open(SeqId seq) const { return seqs_.count(seq) != 0; }

  // How many sequences hold page p (0: free or cached).
  int32_t users(PageId p) const { return pages_[size_t(p)].users; }

 private:
  struct Page {
    int32_t users = 0;
    PageId parent = -1;            // the page before it in its sequence (part of its identity)
    std::vector<int32_t> tokens;   // a full page's tokens, once it is registered for reuse
    bool registered = false;
    std::list<PageId>::iterator lru;  // where it sits in cached_, when users == 0 and registered
  };
  struct Seq {
    std::vector<PageId> pages;
    int64_t positions = 0;
    std::vector<int32_t> partial;  // tokens of the page being filled
  };

  uint64_t key(PageId parent, std::span<const int32_t> tokens) const;
  PageId find_full(PageId parent, std::span<const int32_t> tokens) const;
  PageId take_page();  // a free page, else the least recently cached one (forgetting it)
  void release(PageId p);
  Seq &seq_of(SeqId seq);
  const Seq &seq_of(SeqId seq) const;

  int32_t page_size_;
  std::vector<Page> pages_;
  std::vector<PageId> free_;        // never used (or forgotten)
  std::list<PageId> cached_;        // unused but registered, least recently freed first
  std::unordered_multimap<uint64_t, PageId> index_;  // registered full pages by key
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace minfer::kv
