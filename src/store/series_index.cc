#include "store/series_index.h"

#include <algorithm>
#include <iterator>
#include <mutex>

namespace gpuwatch::store {
namespace {

std::vector<SeriesRef> Intersect(const std::vector<SeriesRef>& a, const std::vector<SeriesRef>& b) {
  std::vector<SeriesRef> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<SeriesRef> Subtract(const std::vector<SeriesRef>& a, const std::vector<SeriesRef>& b) {
  std::vector<SeriesRef> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

SeriesRef SeriesIndex::GetOrCreate(const Labels& labels, bool* created) {
  const size_t hash = HashLabels(labels);
  {
    std::shared_lock lock(mu_);
    if (auto ref = FindLocked(labels, hash)) {
      if (created) *created = false;
      return *ref;
    }
  }
  // Interned before the index's lock is taken: the pool has a lock of its own.
  std::shared_ptr<const Labels> held = pool_.Intern(labels);
  std::unique_lock lock(mu_);
  if (auto ref = FindLocked(labels, hash)) {  // raced with another writer
    if (created) *created = false;
    return *ref;
  }
  const auto ref = static_cast<SeriesRef>(labels_.size());
  labels_.push_back(std::move(held));
  if (key_lookup_) by_hash_.emplace(hash, ref);
  for (const auto& l : labels) postings_[l.name][l.value].push_back(ref);
  if (created) *created = true;
  return ref;
}

void SeriesIndex::RemoveFrom(SeriesRef first) {
  std::unique_lock lock(mu_);
  while (labels_.size() > first) {
    const SeriesRef ref = static_cast<SeriesRef>(labels_.size() - 1);
    const Labels& labels = *labels_.back();
    if (key_lookup_) {
      auto [lo, hi] = by_hash_.equal_range(HashLabels(labels));
      for (auto it = lo; it != hi; ++it)
        if (it->second == ref) {
          by_hash_.erase(it);
          break;
        }
    }
    for (const auto& l : labels) {
      auto name = postings_.find(l.name);
      if (name == postings_.end()) continue;
      auto value = name->second.find(l.value);
      if (value == name->second.end()) continue;
      // Postings are sorted and `ref` is the newest series: it is the last entry.
      if (!value->second.empty() && value->second.back() == ref) value->second.pop_back();
      if (value->second.empty()) name->second.erase(value);
      if (name->second.empty()) postings_.erase(name);
    }
    labels_.pop_back();
  }
}

std::optional<SeriesRef> SeriesIndex::Find(const Labels& labels) const {
  const size_t hash = HashLabels(labels);
  std::shared_lock lock(mu_);
  return FindLocked(labels, hash);
}

std::optional<SeriesRef> SeriesIndex::FindLocked(const Labels& labels, size_t hash) const {
  if (key_lookup_) {
    auto [lo, hi] = by_hash_.equal_range(hash);
    for (auto it = lo; it != hi; ++it)
      if (*labels_[it->second] == labels) return it->second;
    return std::nullopt;
  }
  // Without it: the shortest postings list of the set's labels, then each candidate compared.
  const std::vector<SeriesRef>* shortest = nullptr;
  for (const auto& l : labels) {
    auto name = postings_.find(l.name);
    if (name == postings_.end()) return std::nullopt;
    auto value = name->second.find(l.value);
    if (value == name->second.end()) return std::nullopt;
    if (!shortest || value->second.size() < shortest->size()) shortest = &value->second;
  }
  if (!shortest) return std::nullopt;  // the empty label set is never a series
  for (SeriesRef ref : *shortest)
    if (*labels_[ref] == labels) return ref;
  return std::nullopt;
}

void SeriesIndex::DropKeyLookup() {
  std::unique_lock lock(mu_);
  key_lookup_ = false;
  std::unordered_multimap<size_t, SeriesRef>().swap(by_hash_);
}

Labels SeriesIndex::LabelsOf(SeriesRef ref) const {
  std::shared_lock lock(mu_);
  return *labels_.at(ref);
}

size_t SeriesIndex::size() const {
  std::shared_lock lock(mu_);
  return labels_.size();
}

std::vector<SeriesRef> SeriesIndex::PostingsMatching(const Matcher& m) const {
  std::vector<SeriesRef> out;
  auto it = postings_.find(m.name());
  if (it == postings_.end()) return out;
  if (m.op() == MatchOp::kEqual) {
    auto v = it->second.find(m.value());
    if (v != it->second.end()) out = v->second;
    return out;
  }
  for (const auto& [value, refs] : it->second) {
    if (!m.Matches(value)) continue;
    std::vector<SeriesRef> merged;
    merged.reserve(out.size() + refs.size());
    std::merge(out.begin(), out.end(), refs.begin(), refs.end(), std::back_inserter(merged));
    out.swap(merged);
  }
  return out;
}

std::vector<SeriesRef> SeriesIndex::Select(const std::vector<Matcher>& matchers) const {
  std::shared_lock lock(mu_);
  if (matchers.empty()) return {};
  std::optional<std::vector<SeriesRef>> result;
  // Matchers that reject the empty value need the label: start from their postings.
  for (const auto& m : matchers) {
    if (m.MatchesEmpty()) continue;
    auto refs = PostingsMatching(m);
    result = result ? Intersect(*result, refs) : std::move(refs);
    if (result->empty()) return {};
  }
  if (!result) {
    result.emplace(labels_.size());
    for (SeriesRef r = 0; r < labels_.size(); ++r) (*result)[r] = r;
  }
  // Matchers that also accept "absent": remove the series whose value of the label they reject.
  for (const auto& m : matchers) {
    if (!m.MatchesEmpty()) continue;
    auto it = postings_.find(m.name());
    if (it == postings_.end()) continue;
    for (const auto& [value, refs] : it->second)
      if (!m.Matches(value)) *result = Subtract(*result, refs);
  }
  return std::move(*result);
}

std::vector<std::string> SeriesIndex::LabelNames() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, values] : postings_) out.push_back(name);
  return out;
}

std::vector<std::string> SeriesIndex::LabelValues(const std::string& name,
                                                  const std::vector<Matcher>& matchers) const {
  std::vector<std::string> out;
  if (matchers.empty()) {
    std::shared_lock lock(mu_);
    auto it = postings_.find(name);
    if (it == postings_.end()) return out;
    for (const auto& [value, refs] : it->second) out.push_back(value);
    return out;
  }
  const auto refs = Select(matchers);
  std::shared_lock lock(mu_);
  for (SeriesRef r : refs) {
    auto v = LabelValue(*labels_[r], name);
    if (!v.empty()) out.emplace_back(v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace gpuwatch::store
