#include "store/rollup.h"

#include <algorithm>
#include <cmath>

namespace gpuwatch::store {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kRaw:
      return "raw";
    case Tier::k1m:
      return "1m";
    case Tier::k1h:
      return "1h";
  }
  return "?";
}

int64_t TierWidthMs(Tier tier) {
  switch (tier) {
    case Tier::kRaw:
      return 0;
    case Tier::k1m:
      return 60'000;
    case Tier::k1h:
      return 3'600'000;
  }
  return 0;
}

int64_t BucketStart(int64_t t_ms, int64_t width_ms) {
  int64_t q = t_ms / width_ms;
  if (t_ms % width_ms != 0 && t_ms < 0) --q;
  // Floor division can step below INT64_MIN for t near it (issue 17, D1): saturate to the
  // lowest whole bucket instead of overflowing. The store never holds such times any more.
  int64_t start;
  if (__builtin_mul_overflow(q, width_ms, &start)) return (INT64_MIN / width_ms) * width_ms;
  return start;
}

namespace {
// fmin/fmax ignore a NaN operand: a NaN sample does not hide the real extremes.
void Extend(RollupPoint* p, double v) {
  p->min = std::fmin(p->min, v);
  p->max = std::fmax(p->max, v);
}
}  // namespace

void AppendRollups(std::span<const Sample> samples, int64_t width_ms,
                   std::vector<RollupPoint>* out) {
  const size_t first = out->size();
  for (const Sample& s : samples) {
    const int64_t b = BucketStart(s.t_ms, width_ms);
    if (out->size() == first || out->back().t_ms != b) {
      out->push_back({b, s.value, s.value, s.value, 1, s.value, s.t_ms, s.value, s.t_ms});
      continue;
    }
    RollupPoint& p = out->back();
    Extend(&p, s.value);
    p.sum += s.value;
    p.count += 1;
    p.last = s.value;
    p.last_t_ms = s.t_ms;
  }
}

RollupPoint CombineRollups(const RollupPoint& a, const RollupPoint& b) {
  RollupPoint out = a;
  out.min = std::fmin(a.min, b.min);
  out.max = std::fmax(a.max, b.max);
  out.sum = a.sum + b.sum;
  out.count = a.count + b.count;
  if (b.last_t_ms >= a.last_t_ms) {
    out.last = b.last;
    out.last_t_ms = b.last_t_ms;
  }
  if (b.first_t_ms < a.first_t_ms) {
    out.first = b.first;
    out.first_t_ms = b.first_t_ms;
  }
  return out;
}

void MergeRollups(std::vector<RollupPoint>* a, const std::vector<RollupPoint>& b) {
  if (b.empty()) return;
  if (a->empty() || a->back().t_ms < b.front().t_ms) {
    a->insert(a->end(), b.begin(), b.end());
    return;
  }
  std::vector<RollupPoint> out;
  out.reserve(a->size() + b.size());
  size_t i = 0, j = 0;
  while (i < a->size() || j < b.size()) {
    if (j == b.size() || (i < a->size() && (*a)[i].t_ms < b[j].t_ms)) {
      out.push_back((*a)[i++]);
    } else if (i == a->size() || b[j].t_ms < (*a)[i].t_ms) {
      out.push_back(b[j++]);
    } else {
      out.push_back(CombineRollups((*a)[i++], b[j++]));
    }
  }
  *a = std::move(out);
}

}  // namespace gpuwatch::store
