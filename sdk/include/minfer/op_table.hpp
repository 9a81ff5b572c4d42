// minfer/op_table.hpp — one op table per plugin: supports() and dispatch read the same entry.
//
// Entry is the plugin's own struct with at least
//   int32_t op;  std::string (*check)(const minfer_node &);   // "" = supported
// plus whatever its dispatch needs (a run function). Families of ops (one file each) hand
// their entries over as spans.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "minfer/op_contract.hpp"

namespace minfer::sdk {

template <class Entry>
class OpTable {
 public:
  OpTable(std::string backend, std::initializer_list<std::span<const Entry>> families)
      : backend_(std::move(backend)) {
    for (const auto &f : families) entries_.insert(entries_.end(), f.begin(), f.end());
  }

  const Entry *find(int32_t op) const {
    for (const Entry &e : entries_)
      if (e.op == op) return &e;
    return nullptr;
  }

  // "" when this backend runs the node; otherwise why not: the op's contract first, then
  // whether the table has the op, then the entry's own limits.
  std::string why_not(const minfer_node &n) const {
    const std::string contract = check_op_contract(n);
    if (!contract.empty()) return contract;
    const Entry *e = find(n.op);
    if (!e) return "the " + backend_ + " backend has no kernel for op " + minfer_op_name(n.op);
    return e->check(n);
  }

 private:
  std::string backend_;
  std::vector<Entry> entries_;
};

}  // namespace minfer::sdk
