#include "store/labels_pool.h"

#include <mutex>
#include <string_view>
#include <unordered_map>

namespace gpuwatch::store {

size_t HashLabels(const Labels& labels) {
  size_t h = labels.size();
  auto mix = [&h](std::string_view s) {
    h ^= std::hash<std::string_view>{}(s) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  for (const auto& l : labels) {
    mix(l.name);
    mix(l.value);
  }
  return h;
}

// Entries by hash. An entry's `labels` stays valid while the entry exists: a label set's
// deleter removes its entry under the mutex before freeing it.
struct LabelsPool::Impl {
  struct Entry {
    const Labels* labels;
    std::weak_ptr<const Labels> held;
  };
  mutable std::mutex mu;
  std::unordered_multimap<size_t, Entry> entries;
};

LabelsPool::LabelsPool() : impl_(std::make_shared<Impl>()) {}

std::shared_ptr<const Labels> LabelsPool::Intern(Labels labels) const {
  const size_t h = HashLabels(labels);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto [lo, hi] = impl_->entries.equal_range(h);
  Impl::Entry* expiring = nullptr;
  for (auto it = lo; it != hi; ++it) {
    if (*it->second.labels != labels) continue;
    if (auto held = it->second.held.lock()) return held;
    // Its last holder is gone and its deleter waits for the mutex: it will find the entry
    // pointing at the new copy and leave it alone.
    expiring = &it->second;
    break;
  }
  // The deleter keeps the pool alive: a label set may outlive every handle to its pool.
  std::shared_ptr<Impl> impl = impl_;
  std::shared_ptr<const Labels> made(new Labels(std::move(labels)), [impl](const Labels* p) {
    {
      std::lock_guard<std::mutex> l(impl->mu);
      auto [a, b] = impl->entries.equal_range(HashLabels(*p));
      for (auto it = a; it != b; ++it)
        if (it->second.labels == p) {
          impl->entries.erase(it);
          break;
        }
    }
    delete p;
  });
  if (expiring)
    *expiring = {made.get(), made};
  else
    impl_->entries.emplace(h, Impl::Entry{made.get(), made});
  return made;
}

size_t LabelsPool::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->entries.size();
}

}  // namespace gpuwatch::store
