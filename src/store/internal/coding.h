// Byte coding shared by the store's on-disk formats (WAL records, block files): LEB128
// varints, zigzag, little-endian fixed-width integers and doubles, and a bounds-checked
// reader. Private to src/store. Pure functions; Cursor is a value type.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gpuwatch::store::internal {

inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}
inline void PutFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
inline void PutDouble(std::string* out, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  PutFixed(out, bits, 8);
}
inline void PutBytes(std::string* out, std::string_view s) {
  PutVarint(out, s.size());
  out->append(s);
}
inline uint64_t GetFixed(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads values in order; the first out-of-bounds or malformed read clears `ok` and every later
// read returns zero, so a decoder checks `ok` once per record instead of after each field.
struct Cursor {
  std::string_view d;
  size_t pos = 0;
  bool ok = true;

  bool done() const { return pos >= d.size(); }
  uint64_t Varint() {
    uint64_t out = 0;
    for (int shift = 0; shift < 64 && ok && pos < d.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(d[pos++]);
      out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return out;
    }
    ok = false;
    return 0;
  }
  int64_t Signed() { return UnZigZag(Varint()); }
  std::string_view Bytes() {
    const uint64_t n = Varint();
    if (!ok || n > d.size() - pos) {
      ok = false;
      return {};
    }
    auto s = d.substr(pos, n);
    pos += n;
    return s;
  }
  uint64_t Fixed(int bytes) {
    if (!ok || d.size() - pos < static_cast<size_t>(bytes)) {
      ok = false;
      return 0;
    }
    const uint64_t v = GetFixed(d.data() + pos, bytes);
    pos += bytes;
    return v;
  }
  double Double() {
    const uint64_t bits = Fixed(8);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  uint8_t Byte() { return static_cast<uint8_t>(Fixed(1)); }
};

}  // namespace gpuwatch::store::internal
