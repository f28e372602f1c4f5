#include "trace/internal/json_writer.h"

#include <charconv>
#include <cmath>

#include "common/strings.h"

namespace gpuwatch::trace::internal {
namespace {

void AppendEscaped(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 0xf];
        } else {
          *out += ch;
        }
    }
  }
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view s) {
  *out += '"';
  bool ascii = true;
  for (const char ch : s) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  // Text from monitored processes (log lines, user names) may hold any bytes; only a string
  // with a non-ASCII byte pays for the UTF-8 check.
  if (ascii) {
    AppendEscaped(out, s);
  } else {
    AppendEscaped(out, SanitizeUtf8(s));
  }
  *out += '"';
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::EndObject() {
  out_ += '}';
  first_.pop_back();
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_ += '[';
  first_.push_back(true);
}

void JsonWriter::EndArray() {
  out_ += ']';
  first_.pop_back();
}

void JsonWriter::Key(std::string_view key) {
  BeforeValue();
  AppendJsonString(&out_, key);
  out_ += ':';
  after_key_ = true;
}

void JsonWriter::String(std::string_view v) {
  BeforeValue();
  AppendJsonString(&out_, v);
}

void JsonWriter::Double(double v) {
  BeforeValue();
  // std::to_chars without a precision is the shortest form that reads back to the same
  // double: 0.1 stays "0.1", 97.0 is "97", 1e21 is "1e+21" — all valid JSON numbers.
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out_.append(buf, r.ptr);
}

void JsonWriter::Int(int64_t v) {
  BeforeValue();
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out_.append(buf, r.ptr);
}

void JsonWriter::UInt(uint64_t v) {
  BeforeValue();
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out_.append(buf, r.ptr);
}

void JsonWriter::Bool(bool v) {
  BeforeValue();
  out_ += v ? "true" : "false";
}

void JsonWriter::TimeMs(int64_t t_ms) {
  BeforeValue();
  // Integer arithmetic: t_ms / 1000.0 printed shortest would also round-trip, but "<s>.<mmm>"
  // makes "no float noise" true by construction.
  uint64_t abs_ms = t_ms < 0 ? 0 - static_cast<uint64_t>(t_ms) : static_cast<uint64_t>(t_ms);
  if (t_ms < 0) out_ += '-';
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), abs_ms / 1000);
  out_.append(buf, r.ptr);
  unsigned ms = static_cast<unsigned>(abs_ms % 1000);
  if (ms == 0) return;
  char frac[4] = {'.', static_cast<char>('0' + ms / 100), static_cast<char>('0' + ms / 10 % 10),
                  static_cast<char>('0' + ms % 10)};
  size_t n = 4;
  while (frac[n - 1] == '0') --n;
  out_.append(frac, n);
}

void JsonWriter::Field(std::string_view key, double v) {
  if (!std::isfinite(v)) return;
  Key(key);
  Double(v);
}

}  // namespace gpuwatch::trace::internal
