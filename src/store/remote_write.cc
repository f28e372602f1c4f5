#include "store/remote_write.h"

#include <snappy.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "store/internal/coding.h"

namespace gpuwatch::store {
namespace {

// Protobuf wire types.
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLen = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};

class Reader {
 public:
  explicit Reader(std::string_view d, std::string what) : d_(d), what_(std::move(what)) {}
  bool done() const { return pos_ >= d_.size(); }
  size_t pos() const { return pos_; }

  Status Varint(uint64_t* v) {
    uint64_t out = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= d_.size()) return Error("truncated varint");
      const auto b = static_cast<uint8_t>(d_[pos_++]);
      out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = out;
        return Status::Ok();
      }
    }
    return Error("varint longer than 10 bytes");
  }
  Status Fixed64(uint64_t* v) {
    if (d_.size() - pos_ < 8) return Error("truncated fixed64");
    uint64_t out = 0;
    for (int i = 0; i < 8; ++i)
      out |= static_cast<uint64_t>(static_cast<uint8_t>(d_[pos_ + i])) << (8 * i);
    pos_ += 8;
    *v = out;
    return Status::Ok();
  }
  Status Bytes(std::string_view* v) {
    uint64_t len = 0;
    GW_RETURN_IF_ERROR(Varint(&len));
    if (len > d_.size() - pos_)
      return Error("length " + std::to_string(len) + " runs past the end");
    *v = d_.substr(pos_, len);
    pos_ += len;
    return Status::Ok();
  }
  Status Tag(uint32_t* field, uint32_t* wire) {
    uint64_t tag = 0;
    GW_RETURN_IF_ERROR(Varint(&tag));
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    if (*field == 0) return Error("field number 0");
    return Status::Ok();
  }
  Status Skip(uint32_t wire) {
    uint64_t u = 0;
    std::string_view s;
    switch (wire) {
      case kVarint:
        return Varint(&u);
      case kFixed64:
        return Fixed64(&u);
      case kLen:
        return Bytes(&s);
      case kFixed32:
        if (d_.size() - pos_ < 4) return Error("truncated fixed32");
        pos_ += 4;
        return Status::Ok();
      default:
        return Error("unsupported wire type " + std::to_string(wire));
    }
  }
  Status Error(const std::string& m) const {
    return Status::InvalidArgument("remote-write: " + what_ + ": " + m + " at byte " +
                                   std::to_string(pos_));
  }

 private:
  std::string_view d_;
  std::string what_;
  size_t pos_ = 0;
};

Status DecodeLabel(std::string_view d, Label* out) {
  Reader r(d, "label");
  while (!r.done()) {
    uint32_t field, wire;
    GW_RETURN_IF_ERROR(r.Tag(&field, &wire));
    std::string_view s;
    if ((field == 1 || field == 2) && wire == kLen) {
      GW_RETURN_IF_ERROR(r.Bytes(&s));
      (field == 1 ? out->name : out->value).assign(s);
    } else {
      GW_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return Status::Ok();
}

Status DecodeSample(std::string_view d, RemoteSample* out) {
  Reader r(d, "sample");
  while (!r.done()) {
    uint32_t field, wire;
    GW_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field == 1 && wire == kFixed64) {
      uint64_t bits = 0;
      GW_RETURN_IF_ERROR(r.Fixed64(&bits));
      std::memcpy(&out->value, &bits, 8);
    } else if (field == 2 && wire == kVarint) {
      uint64_t v = 0;
      GW_RETURN_IF_ERROR(r.Varint(&v));
      out->t_ms = static_cast<int64_t>(v);  // int64: two's complement
    } else {
      GW_RETURN_IF_ERROR(r.Skip(wire));
    }
  }
  return Status::Ok();
}

// The digest of a series' label fields as encoded (tags, lengths and bytes, in order): two
// lanes of MurmurHash64A's mixing (Austin Appleby's public-domain design) over the same words,
// seeded apart, in one pass. Two separate hashes of each field cost 10 % of a hub's CPU at 200
// nodes, mostly calls on 20-byte strings (bench/fleet/RESULTS.md, run 5).
LabelDigest DigestOf(std::string_view d) {
  constexpr uint64_t m = 0xc6a4a7935bd1e995ULL;
  constexpr int r = 47;
  uint64_t lo = 0x9e3779b97f4a7c15ULL ^ (d.size() * m);
  uint64_t hi = 0xd6e8feb86659fd93ULL ^ (d.size() * m);
  const char* p = d.data();
  size_t n = d.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    k *= m;
    k ^= k >> r;
    k *= m;
    lo = (lo ^ k) * m;
    hi = (hi ^ k) * m;
    hi ^= hi >> 29;  // the lanes must not differ only by their seed's image
  }
  if (n > 0) {
    uint64_t k = 0;
    std::memcpy(&k, p, n);
    lo = (lo ^ k) * m;
    hi = (hi ^ k) * m;
  }
  auto finish = [&](uint64_t h) {
    h ^= h >> r;
    h *= m;
    return h ^ (h >> r);
  };
  return {finish(lo), finish(hi)};
}

using internal::PutVarint;
void PutTag(std::string* out, uint32_t field, uint32_t wire) {
  PutVarint(out, (field << 3) | wire);
}
void PutBytes(std::string* out, uint32_t field, std::string_view s) {
  PutTag(out, field, kLen);
  PutVarint(out, s.size());
  out->append(s);
}

}  // namespace

std::optional<uint32_t> DigestTable::Find(const LabelDigest& d) const {
  if (slots_.empty()) return std::nullopt;
  const size_t mask = slots_.size() - 1;
  for (size_t i = d.lo & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.ref == kNone) return std::nullopt;
    if (s.digest == d) return s.ref;
  }
}

bool DigestTable::Insert(const LabelDigest& d, uint32_t ref) {
  if (ref == kNone) return false;
  if (2 * (size_ + 1) > slots_.size()) Grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = d.lo & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.ref == kNone) {
      s = {d, ref};
      ++size_;
      return true;
    }
    if (s.digest == d) return false;
  }
}

void DigestTable::Grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(std::max<size_t>(64, 2 * old.size()), Slot{});
  size_ = 0;
  for (const Slot& s : old)
    if (s.ref != kNone) Insert(s.digest, s.ref);
}

void DigestTable::Clear() {
  std::vector<Slot>().swap(slots_);
  size_ = 0;
}

Result<std::vector<RemoteSeries>> DecodeWriteRequest(std::string_view proto,
                                                     const RemoteWriteLimits& limits,
                                                     const DigestTable* known) {
  std::vector<RemoteSeries> out;
  size_t samples = 0, labels = 0;
  // Every series' label fields, in order (views into `proto`), decoded after the whole request
  // was read unless the receiver knows the series by its digest: the digests' slots are
  // prefetched meanwhile.
  std::vector<std::string_view> label_fields;
  std::vector<uint32_t> fields_end;  // per series, one past its last in label_fields
  std::string scratch;
  {
    // The series are counted first (tags and lengths only), so that `out` is allocated once.
    size_t n = 0;
    Reader c(proto, "WriteRequest");
    while (!c.done() && n < limits.max_series) {
      uint32_t field, wire;
      if (!c.Tag(&field, &wire).ok() || !c.Skip(wire).ok()) break;  // the pass below says why
      n += field == 1 && wire == kLen;
    }
    out.reserve(n);
    fields_end.reserve(n);
  }
  Reader r(proto, "WriteRequest");
  while (!r.done()) {
    uint32_t field, wire;
    GW_RETURN_IF_ERROR(r.Tag(&field, &wire));
    if (field != 1 || wire != kLen) {  // metadata (3) and anything newer: skipped
      GW_RETURN_IF_ERROR(r.Skip(wire));
      continue;
    }
    std::string_view ts;
    GW_RETURN_IF_ERROR(r.Bytes(&ts));
    if (out.size() >= limits.max_series)
      return Status::ResourceExhausted("remote-write: more than " +
                                       std::to_string(limits.max_series) +
                                       " series in one request; send smaller batches");
    RemoteSeries& s = out.emplace_back();
    size_t mine = 0;
    // The label fields' encoded bytes: [lbegin, lend) of `ts` while they are contiguous, as
    // every encoder writes them (labels, then samples); gathered into `scratch` from the first
    // field that is not (the same bytes, so the same digest).
    size_t lbegin = 0, lend = 0;
    bool contiguous = true;
    Reader tr(ts, "TimeSeries");
    while (!tr.done()) {
      const size_t at = tr.pos();
      uint32_t f, w;
      GW_RETURN_IF_ERROR(tr.Tag(&f, &w));
      std::string_view sub;
      if (f == 1 && w == kLen) {
        GW_RETURN_IF_ERROR(tr.Bytes(&sub));
        if (++mine > kMaxLabels)
          return Status::InvalidArgument("remote-write: a series has more than " +
                                         std::to_string(kMaxLabels) + " labels");
        if (++labels > limits.max_labels)
          return Status::ResourceExhausted("remote-write: more than " +
                                           std::to_string(limits.max_labels) +
                                           " labels in one request; send smaller batches");
        label_fields.push_back(sub);
        if (mine == 1) {
          lbegin = at;
        } else if (contiguous && at != lend) {
          contiguous = false;
          scratch.assign(ts.substr(lbegin, lend - lbegin));
        }
        lend = tr.pos();
        if (!contiguous) scratch.append(ts.substr(at, lend - at));
      } else if (f == 2 && w == kLen) {
        GW_RETURN_IF_ERROR(tr.Bytes(&sub));
        if (++samples > limits.max_samples)
          return Status::ResourceExhausted("remote-write: more than " +
                                           std::to_string(limits.max_samples) +
                                           " samples in one request; send smaller batches");
        GW_RETURN_IF_ERROR(DecodeSample(sub, &s.samples.emplace_back()));
      } else {
        GW_RETURN_IF_ERROR(tr.Skip(w));  // exemplars (3), native histograms (4)
      }
    }
    s.digest = DigestOf(contiguous ? ts.substr(lbegin, lend - lbegin) : std::string_view(scratch));
    fields_end.push_back(static_cast<uint32_t>(label_fields.size()));
    if (known) known->Prefetch(s.digest);
  }
  size_t begin = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    RemoteSeries& s = out[i];
    const size_t end = fields_end[i];
    if (known) s.known = known->Find(s.digest);
    if (!s.known) {
      s.labels.resize(end - begin);
      for (size_t j = begin; j < end; ++j)
        GW_RETURN_IF_ERROR(DecodeLabel(label_fields[j], &s.labels[j - begin]));
    }
    begin = end;
  }
  return out;
}

namespace {

// The size a snappy body says it inflates to, checked against max_bytes before anything is
// inflated.
Result<size_t> InflatedSize(std::string_view body, size_t max_bytes, std::string_view what) {
  size_t n = 0;
  if (!snappy::GetUncompressedLength(body.data(), body.size(), &n))
    return Status::InvalidArgument(std::string(what) + ": body is not snappy (block format) data");
  if (n > max_bytes)
    return Status::ResourceExhausted(std::string(what) + ": body inflates to " + std::to_string(n) +
                                     " bytes (limit " + std::to_string(max_bytes) + ")");
  return n;
}

Status CorruptSnappy(std::string_view what) {
  return Status::InvalidArgument(std::string(what) + ": corrupt snappy data");
}

}  // namespace

Result<std::string> SnappyUncompress(std::string_view body, size_t max_bytes,
                                     std::string_view what) {
  auto n = InflatedSize(body, max_bytes, what);
  if (!n.ok()) return n.status();
  std::string out;
  if (!snappy::Uncompress(body.data(), body.size(), &out)) return CorruptSnappy(what);
  return out;
}

namespace {

// A snappy block's header: the inflated length as a little-endian base-128 varint of at most
// five bytes (a uint32). Sets *header_bytes.
Result<uint32_t> ParseSnappyHeader(std::string_view block, size_t* header_bytes) {
  uint64_t n = 0;
  for (size_t i = 0; i < 5 && i < block.size(); ++i) {
    const auto b = static_cast<uint8_t>(block[i]);
    n |= uint64_t{b & 0x7fu} << (7 * i);
    if (b < 0x80) {
      if (n > UINT32_MAX) break;
      *header_bytes = i + 1;
      return static_cast<uint32_t>(n);
    }
  }
  return Status::InvalidArgument("not a snappy block: its length header does not parse");
}

}  // namespace

Result<uint32_t> SnappyInflatedLength(std::string_view block) {
  size_t header = 0;
  return ParseSnappyHeader(block, &header);
}

Result<std::string> SnappyJoin(const std::vector<std::string_view>& blocks) {
  uint64_t total = 0;
  size_t bytes = 0;
  std::vector<size_t> headers(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto n = ParseSnappyHeader(blocks[i], &headers[i]);
    if (!n.ok())
      return Status::InvalidArgument("block " + std::to_string(i) + ": " + n.status().message());
    total += *n;
    bytes += blocks[i].size() - headers[i];
  }
  if (total > UINT32_MAX)
    return Status::InvalidArgument("joined snappy blocks would inflate to " +
                                   std::to_string(total) + " bytes, past snappy's 2^32-1");
  std::string out;
  out.reserve(5 + bytes);
  for (uint64_t v = total;; v >>= 7) {
    if (v < 0x80) {
      out.push_back(static_cast<char>(v));
      break;
    }
    out.push_back(static_cast<char>(0x80 | (v & 0x7f)));
  }
  for (size_t i = 0; i < blocks.size(); ++i) out.append(blocks[i].substr(headers[i]));
  return out;
}

Result<std::vector<RemoteSeries>> DecodeRemoteWrite(std::string_view body,
                                                    const RemoteWriteLimits& limits,
                                                    const DigestTable* known) {
  auto inflated = InflatedSize(body, limits.max_uncompressed_bytes, "remote-write");
  if (!inflated.ok()) return inflated.status();
  const size_t n = *inflated;
  // Inflated into a buffer each thread keeps (the decoded series hold no view into it): a new
  // one each request was a malloc, a zero fill and fresh pages a request. One over 1 MiB (an
  // agent's request is a few hundred KiB) is not kept.
  constexpr size_t kKeepBytes = 1u << 20;
  thread_local std::unique_ptr<char[]> kept;
  std::unique_ptr<char[]> once;
  char* buf;
  if (n <= kKeepBytes) {
    if (!kept) kept.reset(new char[kKeepBytes]);
    buf = kept.get();
  } else {
    once.reset(new char[n]);
    buf = once.get();
  }
  if (!snappy::RawUncompress(body.data(), body.size(), buf)) return CorruptSnappy("remote-write");
  return DecodeWriteRequest(std::string_view(buf, n), limits, known);
}

std::string EncodeWriteRequest(const std::vector<RemoteSeries>& series) {
  std::string out, ts, tmp;
  for (const auto& s : series) {
    ts.clear();
    for (const auto& l : s.labels) {
      tmp.clear();
      PutBytes(&tmp, 1, l.name);
      PutBytes(&tmp, 2, l.value);
      PutBytes(&ts, 1, tmp);
    }
    for (const auto& x : s.samples) {
      tmp.clear();
      PutTag(&tmp, 1, kFixed64);
      uint64_t bits;
      std::memcpy(&bits, &x.value, 8);
      for (int i = 0; i < 8; ++i) tmp.push_back(static_cast<char>(bits >> (8 * i)));
      PutTag(&tmp, 2, kVarint);
      PutVarint(&tmp, static_cast<uint64_t>(x.t_ms));
      PutBytes(&ts, 2, tmp);
    }
    PutBytes(&out, 1, ts);
  }
  return out;
}

std::string EncodeRemoteWrite(const std::vector<RemoteSeries>& series) {
  return SnappyCompress(EncodeWriteRequest(series));
}

std::string SnappyCompress(std::string_view proto) {
  std::string out;
  snappy::Compress(proto.data(), proto.size(), &out);
  return out;
}

}  // namespace gpuwatch::store
