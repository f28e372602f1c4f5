// SeriesIndex: interns label sets to dense numeric refs and keeps an inverted index
// (label name → value → sorted refs) for selecting series by matchers.
//
// Refs are assigned in creation order, so every postings list is sorted by construction and
// appending is O(1). Selection intersects the postings of matchers that need the label, then
// filters by the ones that also match series lacking it (Prometheus semantics: `a!="x"` and
// `a=~".*"` select series without `a`). Label sets are held from a LabelsPool (the store's,
// shared with its other indexes; else one of the index's own), by reference.
// Thread-safety: any number of readers, one writer at a time (a shared mutex); label sets are
// never removed while the index lives (bar RemoveFrom's newest).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/labels.h"
#include "store/labels_pool.h"

namespace gpuwatch::store {

using SeriesRef = uint32_t;

class SeriesIndex {
 public:
  // `pool`: where the label sets are kept (a store passes its own to all its indexes).
  explicit SeriesIndex(LabelsPool pool = LabelsPool()) : pool_(std::move(pool)) {}

  // REQUIRES: `labels` came from MakeLabels (sorted, valid).
  SeriesRef GetOrCreate(const Labels& labels, bool* created = nullptr);
  std::optional<SeriesRef> Find(const Labels& labels) const;
  // Forgets every series with ref >= `first` (the newest ones): a batch whose WAL write failed
  // takes back the series it created, so a refused write leaves no phantom label values.
  void RemoveFrom(SeriesRef first);
  // REQUIRES: ref < size().
  Labels LabelsOf(SeriesRef ref) const;
  // The same, by reference: for an index no longer written (a block's, once parsed), whose
  // label sets then never move. REQUIRES: ref < size(), and no GetOrCreate or RemoveFrom while
  // the reference is used.
  const Labels& LabelsAt(SeriesRef ref) const { return *labels_[ref]; }

  // For an index that takes few or no new series (a block's): drops the lookup by whole label
  // set (a hash a series). Find and GetOrCreate still answer, through the postings.
  void DropKeyLookup();
  size_t size() const;

  // Refs of every series all `matchers` select, ascending. No matchers selects nothing.
  std::vector<SeriesRef> Select(const std::vector<Matcher>& matchers) const;
  std::vector<std::string> LabelNames() const;
  // Values of `name` over the series `matchers` select (all series when empty), sorted.
  std::vector<std::string> LabelValues(const std::string& name,
                                       const std::vector<Matcher>& matchers) const;

 private:
  // REQUIRES: mu_ held (shared). By the label set's hash (HashLabels), or after DropKeyLookup
  // through the postings.
  std::optional<SeriesRef> FindLocked(const Labels& labels, size_t hash) const;
  // REQUIRES: mu_ held (shared). Union of the postings of the values of `m.name()` that m accepts.
  std::vector<SeriesRef> PostingsMatching(const Matcher& m) const;

  LabelsPool pool_;
  mutable std::shared_mutex mu_;
  std::vector<std::shared_ptr<const Labels>> labels_;  // by ref, from pool_
  // HashLabels -> ref: a label set's own bytes are not copied into a key (the head's index
  // held every series' labels twice that way).
  std::unordered_multimap<size_t, SeriesRef> by_hash_;
  bool key_lookup_ = true;  // false after DropKeyLookup
  std::map<std::string, std::map<std::string, std::vector<SeriesRef>>> postings_;
};

}  // namespace gpuwatch::store
