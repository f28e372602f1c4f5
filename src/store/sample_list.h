// SampleList: one series' samples in an append batch (Head::Input, a decoded remote-write
// series), holding up to kInline of them without allocating.
//
// Why not std::vector: an agent's request carries one sample a series (its interval's), so a
// hub decoding a 1,358-series request made 1,358 one-sample vectors, a malloc and a free each —
// 11 % of the hub's CPU at 200 nodes (bench/fleet/RESULTS.md, run 5), on the one malloc arena
// every request thread shares. A resend after an outage carries more and spills to the heap.
// The vector-like subset the store's callers use; iterators are pointers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <vector>

#include "store/chunkenc.h"

namespace gpuwatch::store {

class SampleList {
 public:
  static constexpr size_t kInline = 2;
  static_assert(std::is_trivially_copyable_v<Sample>);

  SampleList() = default;
  SampleList(std::initializer_list<Sample> l) { assign(l.begin(), l.end()); }
  template <typename It>
  SampleList(It first, It last) {
    assign(first, last);
  }
  // Implicit: callers that gather samples in a vector pass it as they did (a copy).
  SampleList(const std::vector<Sample>& v) { assign(v.begin(), v.end()); }  // NOLINT
  SampleList(const SampleList& o) { assign(o.begin(), o.end()); }
  SampleList(SampleList&& o) noexcept { Steal(o); }
  SampleList& operator=(const SampleList& o) {
    if (this != &o) {
      size_ = 0;
      assign(o.begin(), o.end());
    }
    return *this;
  }
  SampleList& operator=(SampleList&& o) noexcept {
    if (this != &o) {
      Free();
      Steal(o);
    }
    return *this;
  }
  ~SampleList() { Free(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  Sample* data() { return heap_ ? heap_ : inline_; }
  const Sample* data() const { return heap_ ? heap_ : inline_; }
  Sample* begin() { return data(); }
  Sample* end() { return data() + size_; }
  const Sample* begin() const { return data(); }
  const Sample* end() const { return data() + size_; }
  Sample& operator[](size_t i) { return data()[i]; }
  const Sample& operator[](size_t i) const { return data()[i]; }
  Sample& front() { return data()[0]; }
  Sample& back() { return data()[size_ - 1]; }
  const Sample& front() const { return data()[0]; }
  const Sample& back() const { return data()[size_ - 1]; }

  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n > cap_) Grow(n);
  }
  void push_back(const Sample& s) {
    if (size_ == cap_) {
      const Sample copy = s;  // `s` may be one of ours, moved by Grow
      Grow(2 * cap_);
      data()[size_++] = copy;
      return;
    }
    data()[size_++] = s;
  }
  Sample& emplace_back() {
    push_back(Sample{});
    return back();
  }
  Sample& emplace_back(int64_t t_ms, double value) {
    push_back(Sample{t_ms, value});
    return back();
  }
  template <typename It>
  void assign(It first, It last) {
    size_ = 0;
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data()[size_++] = *first;
  }

  friend bool operator==(const SampleList& a, const SampleList& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin(), [](auto& x, auto& y) {
             return x.t_ms == y.t_ms && std::memcmp(&x.value, &y.value, sizeof(double)) == 0;
           });
  }

 private:
  void Grow(size_t n) {
    auto* p = new Sample[n];
    std::copy(begin(), end(), p);
    delete[] heap_;
    heap_ = p;
    cap_ = n;
  }
  void Free() {
    delete[] heap_;
    heap_ = nullptr;
    cap_ = kInline;
    size_ = 0;
  }
  void Steal(SampleList& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.heap_ = nullptr;
      o.cap_ = kInline;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    o.size_ = 0;
  }

  Sample* heap_ = nullptr;  // set once the samples outgrow inline_
  size_t size_ = 0;
  size_t cap_ = kInline;
  Sample inline_[kInline];
};

}  // namespace gpuwatch::store
