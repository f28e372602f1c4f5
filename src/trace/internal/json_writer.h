// A minimal append-only JSON writer for trace records: one object per line, keys in the order
// written, doubles in shortest round-trip form, strings always valid UTF-8 (common's
// SanitizeUtf8: each invalid byte becomes U+FFFD) — so rendering never throws and never
// fails. Private to src/trace. Not thread-safe (one writer per record).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuwatch::trace::internal {

class JsonWriter {
 public:
  JsonWriter() { out_.reserve(256); }

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // The key of the next value in the current object.
  void Key(std::string_view key);

  void String(std::string_view v);
  // REQUIRES: std::isfinite(v) (JSON has no NaN/Inf; callers use Field, which omits them).
  void Double(double v);
  void Int(int64_t v);
  void UInt(uint64_t v);
  void Bool(bool v);
  // Unix seconds from ms: "<s>.<mmm>" with trailing fraction zeros trimmed ("1764460801.9"),
  // so no binary-fraction noise can appear.
  void TimeMs(int64_t t_ms);

  // Key and value; the optional forms write nothing when absent, and a double that is NaN or
  // infinite is treated as absent.
  void Field(std::string_view key, std::string_view v) {
    Key(key);
    String(v);
  }
  void Field(std::string_view key, const char* v) { Field(key, std::string_view(v)); }
  void Field(std::string_view key, double v);
  void Field(std::string_view key, std::optional<double> v) {
    if (v) Field(key, *v);
  }
  void FieldInt(std::string_view key, int64_t v) {
    Key(key);
    Int(v);
  }
  void FieldUInt(std::string_view key, uint64_t v) {
    Key(key);
    UInt(v);
  }
  void FieldBool(std::string_view key, bool v) {
    Key(key);
    Bool(v);
  }
  // Writes the string unless it is empty ("" means unknown in the model's string fields).
  void NonEmptyField(std::string_view key, std::string_view v) {
    if (!v.empty()) Field(key, v);
  }

  std::string Take() { return std::move(out_); }

 private:
  void BeforeValue();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

// The JSON string literal of `s` (quotes included), invalid UTF-8 replaced by U+FFFD.
void AppendJsonString(std::string* out, std::string_view s);

}  // namespace gpuwatch::trace::internal
