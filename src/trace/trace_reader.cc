#include "trace/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

namespace gpuwatch::trace {

using json = nlohmann::json;

// ============================================================================ byte sources

namespace internal {

// A stream of bytes: the file (or buffer) itself, or what a decompressor makes of it. Errors
// carry no "<file>:<line>:" prefix; the reader adds it.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `cap` (> 0) bytes into buf; 0 only at the end of the stream.
  virtual Result<size_t> Read(char* buf, size_t cap) = 0;
  // True when the stream ended inside a gzip member or zstd frame (a cut file).
  virtual bool truncated() const { return false; }
};

}  // namespace internal

namespace {

using internal::ByteSource;

constexpr size_t kChunkBytes = 64 * 1024;

class FileSource final : public ByteSource {
 public:
  explicit FileSource(int fd) : fd_(fd) {}
  ~FileSource() override { ::close(fd_); }
  Result<size_t> Read(char* buf, size_t cap) override {
    for (;;) {
      const ssize_t n = ::read(fd_, buf, cap);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno != EINTR) return Status::IoError(std::string("read: ") + std::strerror(errno));
    }
  }

 private:
  int fd_;
};

class BufferSource final : public ByteSource {
 public:
  explicit BufferSource(std::string data) : data_(std::move(data)) {}
  Result<size_t> Read(char* buf, size_t cap) override {
    const size_t n = std::min(cap, data_.size() - pos_);
    std::memcpy(buf, data_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t pos_ = 0;
};

// Serves `head` (bytes already read to sniff the format) before the rest of `in`.
class HeadSource final : public ByteSource {
 public:
  HeadSource(std::string head, std::unique_ptr<ByteSource> in)
      : head_(std::move(head)), in_(std::move(in)) {}
  Result<size_t> Read(char* buf, size_t cap) override {
    if (pos_ < head_.size()) {
      const size_t n = std::min(cap, head_.size() - pos_);
      std::memcpy(buf, head_.data() + pos_, n);
      pos_ += n;
      return n;
    }
    return in_->Read(buf, cap);
  }

 private:
  std::string head_;
  size_t pos_ = 0;
  std::unique_ptr<ByteSource> in_;
};

// gzip via zlib's inflate (not gzread, which would pass non-gzip bytes through as if they
// were data). Concatenated members are one stream, as for zcat.
class GzipSource final : public ByteSource {
 public:
  explicit GzipSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)), inbuf_(kChunkBytes, 0) {
    init_rc_ = inflateInit2(&zs_, 15 + 16);  // 15: the largest window; +16: gzip wrapper only
  }
  ~GzipSource() override {
    if (init_rc_ == Z_OK) inflateEnd(&zs_);
  }

  Result<size_t> Read(char* buf, size_t cap) override {
    if (init_rc_ != Z_OK) return Status::Internal("inflateInit2 failed");
    if (!error_.ok()) return error_;
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(cap, std::numeric_limits<uInt>::max()));
    const uInt out_cap = zs_.avail_out;
    for (;;) {
      if (zs_.avail_in == 0 && !in_eof_) {
        Result<size_t> n = in_->Read(inbuf_.data(), inbuf_.size());
        if (!n.ok()) return n.status();
        if (*n == 0) in_eof_ = true;
        zs_.next_in = reinterpret_cast<Bytef*>(inbuf_.data());
        zs_.avail_in = static_cast<uInt>(*n);
      }
      if (!in_member_) {
        if (zs_.avail_in == 0) return size_t{0};  // ended cleanly after a member
        // More bytes after a member: the next member (anything else fails its header check).
        inflateReset(&zs_);
        in_member_ = true;
      }
      // Called even without new input: inflate may still hold output for a full buffer.
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      const size_t produced = out_cap - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc == Z_BUF_ERROR) {  // no progress possible without more input
        if (zs_.avail_in != 0) return Status::Internal("inflate made no progress");
        if (in_eof_) {
          truncated_ = true;
          return produced;
        }
      } else if (rc != Z_OK) {
        error_ = Status::Corruption(std::string("corrupt gzip data (") +
                                    (zs_.msg ? zs_.msg : "inflate error") + ")");
        // What inflated before the damage is delivered first (a bad CRC is only seen after
        // the whole member): the error then names the line it interrupts.
        if (produced > 0) return produced;
        return error_;
      }
      if (produced > 0) return produced;
    }
  }
  bool truncated() const override { return truncated_; }

 private:
  std::unique_ptr<ByteSource> in_;
  std::string inbuf_;
  z_stream zs_{};
  int init_rc_ = Z_STREAM_ERROR;
  Status error_;  // sticky, returned after the bytes before it
  bool in_eof_ = false;
  bool in_member_ = true;  // an empty .gz is a cut one
  bool truncated_ = false;
};

// zstd via ZSTD_decompressStream. Concatenated (and skippable) frames are one stream. The
// decoder's window is bounded by zstd's default limit (2^27 bytes).
class ZstdSource final : public ByteSource {
 public:
  explicit ZstdSource(std::unique_ptr<ByteSource> in)
      : in_(std::move(in)), inbuf_(kChunkBytes, 0), ds_(ZSTD_createDCtx()) {}
  ~ZstdSource() override { ZSTD_freeDCtx(ds_); }

  Result<size_t> Read(char* buf, size_t cap) override {
    if (ds_ == nullptr) return Status::Internal("ZSTD_createDCtx failed");
    if (!error_.ok()) return error_;
    ZSTD_outBuffer out{buf, cap, 0};
    for (;;) {
      if (zin_.pos == zin_.size && !in_eof_) {
        Result<size_t> n = in_->Read(inbuf_.data(), inbuf_.size());
        if (!n.ok()) return n.status();
        if (*n == 0) in_eof_ = true;
        zin_ = ZSTD_inBuffer{inbuf_.data(), *n, 0};
      }
      const size_t in_before = zin_.pos;
      // Called even without new input: zstd may still hold output for a full buffer.
      const size_t r = ZSTD_decompressStream(ds_, &out, &zin_);
      if (ZSTD_isError(r)) {
        error_ =
            Status::Corruption(std::string("corrupt zstd data (") + ZSTD_getErrorName(r) + ")");
        if (out.pos > 0) return out.pos;  // the bytes before the damage first, as for gzip
        return error_;
      }
      const bool progress = out.pos > 0 || zin_.pos != in_before;
      // r == 0: a frame is complete and flushed. Only a call that moved can say so; an idle
      // call answers with a size hint even between frames.
      if (progress) frame_open_ = r != 0;
      if (out.pos > 0) return out.pos;
      if (!progress && in_eof_ && zin_.pos == zin_.size) {
        truncated_ = frame_open_;
        return size_t{0};
      }
    }
  }
  bool truncated() const override { return truncated_; }

 private:
  std::unique_ptr<ByteSource> in_;
  std::string inbuf_;
  ZSTD_inBuffer zin_{nullptr, 0, 0};
  ZSTD_DCtx* ds_;
  Status error_;  // sticky, returned after the bytes before it
  bool in_eof_ = false;
  bool frame_open_ = true;  // an empty .zst is a cut one
  bool truncated_ = false;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

TraceCompression CompressionByName(std::string_view name) {
  if (EndsWith(name, ".gz")) return TraceCompression::kGzip;
  if (EndsWith(name, ".zst")) return TraceCompression::kZstd;
  return TraceCompression::kPlain;
}

constexpr std::string_view kGzipMagic = "\x1f\x8b";
constexpr std::string_view kZstdMagic = "\x28\xb5\x2f\xfd";

// What the first bytes say the data is. A head shorter than a magic that matches it so far
// counts as that format (a cut file, which its decoder reports as truncated).
TraceCompression Sniff(std::string_view head, TraceCompression expected) {
  auto matches = [&](std::string_view magic) {
    const size_t n = std::min(head.size(), magic.size());
    return head.substr(0, n) == magic.substr(0, n);
  };
  auto skippable_zstd = [&] {  // skippable frames: 0x184D2A5? little-endian
    return head.size() >= 4 && (static_cast<unsigned char>(head[0]) & 0xF0) == 0x50 &&
           head.substr(1, 3) == "\x2a\x4d\x18";
  };
  if (head.empty()) return expected;
  if (expected == TraceCompression::kGzip && matches(kGzipMagic)) return expected;
  if (expected == TraceCompression::kZstd && (matches(kZstdMagic) || skippable_zstd()))
    return expected;
  if (head.size() >= 2 && head.substr(0, 2) == kGzipMagic) return TraceCompression::kGzip;
  if (head.size() >= 4 && (head == kZstdMagic || skippable_zstd())) return TraceCompression::kZstd;
  return TraceCompression::kPlain;
}

std::string_view CompressionName(TraceCompression c) {
  switch (c) {
    case TraceCompression::kGzip:
      return "gzip";
    case TraceCompression::kZstd:
      return "zstd";
    case TraceCompression::kPlain:
      break;
  }
  return "plain text";
}

// ============================================================================ JSON -> records

// Stats keys and messages quote names from the file: cut them to a bounded size (on a UTF-8
// boundary, so the key stays valid text).
std::string CutName(std::string_view s, size_t max = 64) {
  if (s.size() <= max) return std::string(s);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "…";
}

void Bump(std::map<std::string, uint64_t>& m, std::string key, uint64_t* dropped) {
  auto it = m.find(key);
  if (it != m.end()) {
    ++it->second;
  } else if (m.size() < kMaxStatKeys) {
    m.emplace(std::move(key), 1);
  } else {
    ++*dropped;
  }
}

// Where a value sits in its record, for messages: "util_pct", "gpus[1].numa_node",
// "nics.mlx5_0.link_up". Built only when a message needs it.
struct Where {
  static constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();
  const Where* parent = nullptr;
  std::string_view key;
  size_t index = kNoIndex;

  std::string Path() const {
    std::string p = parent ? parent->Path() : std::string();
    if (index != kNoIndex) {
      p += "[" + std::to_string(index) + "]";
    } else if (!key.empty()) {
      if (!p.empty()) p += '.';
      p += CutName(key);
    }
    return p;
  }
};

// The context of one record's conversion: where to count, and the scope of stats keys
// ("gpu", "node.gpus").
struct Ctx {
  TraceReadStats* stats;
  std::string scope;
};

std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: {
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof(buf), v.get<double>());
      return std::string(buf, r.ptr);
    }
    default:
      return "a value of another kind";
  }
}

Status TypeError(const Where& w, std::string_view must, const json& v) {
  return Status::Corruption("\"" + w.Path() + "\" must be " + std::string(must) + ", not " +
                            Describe(v));
}

template <typename I>
std::optional<I> AsInteger(const json& v) {
  using L = std::numeric_limits<I>;
  if (v.is_number_unsigned()) {  // nlohmann: every non-negative integer literal
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(L::max())) return std::nullopt;
    return static_cast<I>(u);
  }
  if (v.is_number_integer()) {  // negative
    const int64_t s = v.get<int64_t>();
    if constexpr (!L::is_signed) {
      return std::nullopt;
    } else {
      if (s < static_cast<int64_t>(L::min()) || s > static_cast<int64_t>(L::max()))
        return std::nullopt;
      return static_cast<I>(s);
    }
  }
  if (v.is_number_float()) {  // 3.0 from a writer that has only doubles
    const double d = v.get<double>();
    // 2^digits is exact in a double, unlike L::max().
    const double hi = std::ldexp(1.0, L::digits);
    const double lo = L::is_signed ? -hi : 0.0;
    if (!std::isfinite(d) || std::trunc(d) != d || d < lo || d >= hi) return std::nullopt;
    return static_cast<I>(d);
  }
  return std::nullopt;
}

using Values = std::span<const std::string_view>;  // an enumerated field's known values

void CheckValue(std::string_view key, std::string_view value, Values values, Ctx& ctx) {
  if (values.empty() || std::find(values.begin(), values.end(), value) != values.end()) return;
  Bump(ctx.stats->unknown_values, ctx.scope + "." + std::string(key) + "=" + CutName(value),
       &ctx.stats->dropped_stat_keys);
}

// ---- field tables

template <class R>
using Member = std::variant<
    std::optional<double> R::*, std::optional<uint32_t> R::*, std::optional<uint64_t> R::*,
    std::optional<int64_t> R::*, std::optional<bool> R::*, std::optional<std::string> R::*,
    std::optional<std::vector<std::string>> R::*, std::optional<std::vector<uint32_t>> R::*,
    std::optional<std::vector<std::vector<std::string>>> R::*,
    std::optional<std::vector<TraceNodeGpu>> R::*, std::optional<std::vector<TraceNodeNic>> R::*,
    std::optional<TraceTopology> R::*, std::optional<std::map<std::string, TraceHostNic>> R::*>;

template <class R>
struct Field {
  std::string_view key;
  Member<R> member;
  Values values = {};
};

constexpr std::string_view kThrottleReasons[] = {"sw_power_cap", "hw_slowdown",    "hw_thermal",
                                                 "sw_thermal",   "hw_power_brake", "sync_boost",
                                                 "idle",         "app_clocks"};
constexpr std::string_view kJobStates[] = {"queued", "start", "end"};
constexpr std::string_view kEventKinds[] = {"xid",
                                            "ecc",
                                            "gpu_lost",
                                            "driver_change",
                                            "config_change",
                                            "topology_change",
                                            "maintenance_start",
                                            "maintenance_end",
                                            "checkpoint_start",
                                            "checkpoint_end",
                                            "annotation"};
constexpr std::string_view kLogSources[] = {"nccl", "job", "kernel", "nccl-tests"};
constexpr std::string_view kNicTypes[] = {"ib", "eth"};

using G = TraceNodeGpu;
const Field<G> kNodeGpuFields[] = {
    {"index", &G::index},
    {"uuid", &G::uuid},
    {"name", &G::name},
    {"pci_bus_id", &G::pci_bus_id},
    {"numa_node", &G::numa_node},
    {"cpu_affinity", &G::cpu_affinity},
    {"memory_total_mib", &G::memory_total_mib},
    {"power_limit_w", &G::power_limit_w},
    {"max_sm_clock_mhz", &G::max_sm_clock_mhz},
    {"max_mem_clock_mhz", &G::max_mem_clock_mhz},
    {"pcie_max_gen", &G::pcie_max_gen},
    {"pcie_max_width", &G::pcie_max_width},
    {"nvlink_count", &G::nvlink_count},
    {"mig_mode", &G::mig_mode},
};

const Field<TraceNodeNic> kNodeNicFields[] = {
    {"name", &TraceNodeNic::name},
    {"type", &TraceNodeNic::type, kNicTypes},
    {"pci_bus_id", &TraceNodeNic::pci_bus_id},
    {"numa_node", &TraceNodeNic::numa_node},
    {"link_gbps", &TraceNodeNic::link_gbps},
};

const Field<TraceTopology> kTopologyFields[] = {
    {"gpu_links", &TraceTopology::gpu_links},
};

const Field<TraceNode> kNodeFields[] = {
    {"driver_version", &TraceNode::driver_version},
    {"cuda_version", &TraceNode::cuda_version},
    {"nccl_version", &TraceNode::nccl_version},
    {"clock_offset_ms", &TraceNode::clock_offset_ms},
    {"gpus", &TraceNode::gpus},
    {"topology", &TraceNode::topology},
    {"nics", &TraceNode::nics},
};

using U = TraceGpu;
const Field<U> kGpuFields[] = {
    {"gpu", &U::gpu},
    {"mig", &U::mig},
    {"util_pct", &U::util_pct},
    {"mem_util_pct", &U::mem_util_pct},
    {"sm_active", &U::sm_active},
    {"sm_occupancy", &U::sm_occupancy},
    {"tensor_active", &U::tensor_active},
    {"dram_active", &U::dram_active},
    {"mem_used_mib", &U::mem_used_mib},
    {"temp_c", &U::temp_c},
    {"mem_temp_c", &U::mem_temp_c},
    {"power_w", &U::power_w},
    {"energy_j", &U::energy_j},
    {"sm_clock_mhz", &U::sm_clock_mhz},
    {"mem_clock_mhz", &U::mem_clock_mhz},
    {"throttle", &U::throttle, kThrottleReasons},
    {"fan_pct", &U::fan_pct},
    {"pcie_tx_mbs", &U::pcie_tx_mbs},
    {"pcie_rx_mbs", &U::pcie_rx_mbs},
    {"pcie_gen", &U::pcie_gen},
    {"pcie_width", &U::pcie_width},
    {"pcie_replay", &U::pcie_replay},
    {"nvlink_tx_mbs", &U::nvlink_tx_mbs},
    {"nvlink_rx_mbs", &U::nvlink_rx_mbs},
    {"nvlink_active_links", &U::nvlink_active_links},
    {"nvlink_crc_errors", &U::nvlink_crc_errors},
    {"nvlink_replay", &U::nvlink_replay},
    {"nvlink_recovery", &U::nvlink_recovery},
    {"ecc_sbe_volatile", &U::ecc_sbe_volatile},
    {"ecc_dbe_volatile", &U::ecc_dbe_volatile},
    {"retired_pages", &U::retired_pages},
    {"remapped_rows_pending", &U::remapped_rows_pending},
    {"remapped_rows_failure", &U::remapped_rows_failure},
};

const Field<TraceHostNic> kHostNicFields[] = {
    {"tx_mbs", &TraceHostNic::tx_mbs},           {"rx_mbs", &TraceHostNic::rx_mbs},
    {"link_up", &TraceHostNic::link_up},         {"errors", &TraceHostNic::errors},
    {"retransmits", &TraceHostNic::retransmits},
};

const Field<TraceHost> kHostFields[] = {
    {"cpu_pct", &TraceHost::cpu_pct},
    {"iowait_pct", &TraceHost::iowait_pct},
    {"mem_used_mib", &TraceHost::mem_used_mib},
    {"mem_total_mib", &TraceHost::mem_total_mib},
    {"load1", &TraceHost::load1},
    {"nics", &TraceHost::nics},
};

const Field<TraceProc> kProcFields[] = {
    {"pid", &TraceProc::pid},
    {"gpu", &TraceProc::gpu},
    {"mem_used_mib", &TraceProc::mem_used_mib},
    {"user", &TraceProc::user},
    {"container", &TraceProc::container},
    {"job", &TraceProc::job},
    {"cpu_numa_nodes", &TraceProc::cpu_numa_nodes},
    {"visible_index", &TraceProc::visible_index},
};

const Field<TraceJob> kJobFields[] = {
    {"job", &TraceJob::job},
    {"state", &TraceJob::state, kJobStates},
    {"template", &TraceJob::template_name},
    {"user", &TraceJob::user},
    {"project", &TraceJob::project},
    {"ranks", &TraceJob::ranks},
    {"gpus", &TraceJob::gpus},
    {"exit_code", &TraceJob::exit_code},
    {"submit_t", &TraceJob::submit_t},
};

const Field<TraceStep> kStepFields[] = {
    {"job", &TraceStep::job},
    {"rank", &TraceStep::rank},
    {"gpu", &TraceStep::gpu},
    {"step", &TraceStep::step},
    {"duration_s", &TraceStep::duration_s},
    {"samples", &TraceStep::samples},
    {"data_wait_s", &TraceStep::data_wait_s},
    {"comm_s", &TraceStep::comm_s},
    {"checkpoint_s", &TraceStep::checkpoint_s},
    {"loss", &TraceStep::loss},
    {"grad_norm", &TraceStep::grad_norm},
};

const Field<TraceEvent> kEventFields[] = {
    {"gpu", &TraceEvent::gpu},   {"kind", &TraceEvent::kind, kEventKinds},
    {"code", &TraceEvent::code}, {"message", &TraceEvent::message},
    {"job", &TraceEvent::job},
};

const Field<TraceLog> kLogFields[] = {
    {"job", &TraceLog::job},
    {"rank", &TraceLog::rank},
    {"source", &TraceLog::source, kLogSources},
    {"line", &TraceLog::line},
};

template <class R>
std::span<const Field<R>> FieldsOf();
#define GW_TRACE_FIELDS(R, table)           \
  template <>                               \
  std::span<const Field<R>> FieldsOf<R>() { \
    return table;                           \
  }
GW_TRACE_FIELDS(TraceNodeGpu, kNodeGpuFields)
GW_TRACE_FIELDS(TraceNodeNic, kNodeNicFields)
GW_TRACE_FIELDS(TraceTopology, kTopologyFields)
GW_TRACE_FIELDS(TraceNode, kNodeFields)
GW_TRACE_FIELDS(TraceGpu, kGpuFields)
GW_TRACE_FIELDS(TraceHostNic, kHostNicFields)
GW_TRACE_FIELDS(TraceHost, kHostFields)
GW_TRACE_FIELDS(TraceProc, kProcFields)
GW_TRACE_FIELDS(TraceJob, kJobFields)
GW_TRACE_FIELDS(TraceStep, kStepFields)
GW_TRACE_FIELDS(TraceEvent, kEventFields)
GW_TRACE_FIELDS(TraceLog, kLogFields)
#undef GW_TRACE_FIELDS

// ---- typed assignment: strict on the JSON type of every known field

template <class R>
Status ReadObject(const json& obj, R* out, const Where& where, Ctx& ctx, bool top_level);

Status Assign(const json& v, std::optional<double>* out, const Where& w, Ctx&, Values) {
  if (!v.is_number()) return TypeError(w, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) return TypeError(w, "a finite number", v);
  *out = d;
  return Status::Ok();
}

template <typename I>
Status AssignInteger(const json& v, std::optional<I>* out, const Where& w) {
  std::optional<I> i = AsInteger<I>(v);
  if (!i) {
    return TypeError(w, std::numeric_limits<I>::is_signed ? "an integer" : "a non-negative integer",
                     v);
  }
  *out = i;
  return Status::Ok();
}
Status Assign(const json& v, std::optional<uint32_t>* out, const Where& w, Ctx&, Values) {
  return AssignInteger(v, out, w);
}
Status Assign(const json& v, std::optional<uint64_t>* out, const Where& w, Ctx&, Values) {
  return AssignInteger(v, out, w);
}
Status Assign(const json& v, std::optional<int64_t>* out, const Where& w, Ctx&, Values) {
  return AssignInteger(v, out, w);
}

Status Assign(const json& v, std::optional<bool>* out, const Where& w, Ctx&, Values) {
  if (!v.is_boolean()) return TypeError(w, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status Assign(const json& v, std::optional<std::string>* out, const Where& w, Ctx& ctx,
              Values values) {
  if (!v.is_string()) return TypeError(w, "a string", v);
  const auto& s = v.get_ref<const json::string_t&>();
  CheckValue(w.key, s, values, ctx);
  *out = s;
  return Status::Ok();
}

Status Assign(const json& v, std::optional<std::vector<std::string>>* out, const Where& w, Ctx& ctx,
              Values values) {
  if (!v.is_array()) return TypeError(w, "an array of strings", v);
  std::vector<std::string> r;
  r.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (!e.is_string()) return TypeError(Where{&w, {}, i}, "a string", e);
    r.push_back(e.get<std::string>());
    CheckValue(w.key, r.back(), values, ctx);
  }
  *out = std::move(r);
  return Status::Ok();
}

Status Assign(const json& v, std::optional<std::vector<uint32_t>>* out, const Where& w, Ctx&,
              Values) {
  if (!v.is_array()) return TypeError(w, "an array of non-negative integers", v);
  std::vector<uint32_t> r;
  r.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::optional<uint32_t> e = AsInteger<uint32_t>(v[i]);
    if (!e) return TypeError(Where{&w, {}, i}, "a non-negative integer", v[i]);
    r.push_back(*e);
  }
  *out = std::move(r);
  return Status::Ok();
}

Status Assign(const json& v, std::optional<std::vector<std::vector<std::string>>>* out,
              const Where& w, Ctx&, Values) {
  if (!v.is_array()) return TypeError(w, "an array of arrays of strings", v);
  std::vector<std::vector<std::string>> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Where wi{&w, {}, i};
    if (!v[i].is_array()) return TypeError(wi, "an array of strings", v[i]);
    r[i].reserve(v[i].size());
    for (size_t j = 0; j < v[i].size(); ++j) {
      const json& e = v[i][j];
      if (!e.is_string()) return TypeError(Where{&wi, {}, j}, "a string", e);
      r[i].push_back(e.get<std::string>());
    }
  }
  *out = std::move(r);
  return Status::Ok();
}

// A nested object: its own field table, stats under "<scope>.<key>".
template <class R>
Status AssignObject(const json& v, R* out, const Where& w, const Ctx& ctx, std::string_view key) {
  if (!v.is_object()) return TypeError(w, "an object", v);
  Ctx inner{ctx.stats, ctx.scope + "." + std::string(key)};
  return ReadObject(v, out, w, inner, /*top_level=*/false);
}

template <class R>
Status AssignObjects(const json& v, std::optional<std::vector<R>>* out, const Where& w,
                     const Ctx& ctx) {
  if (!v.is_array()) return TypeError(w, "an array of objects", v);
  std::vector<R> r(v.size());
  Ctx inner{ctx.stats, ctx.scope + "." + std::string(w.key)};
  for (size_t i = 0; i < v.size(); ++i) {
    const Where wi{&w, {}, i};
    if (!v[i].is_object()) return TypeError(wi, "an object", v[i]);
    GW_RETURN_IF_ERROR(ReadObject(v[i], &r[i], wi, inner, /*top_level=*/false));
  }
  *out = std::move(r);
  return Status::Ok();
}

Status Assign(const json& v, std::optional<std::vector<TraceNodeGpu>>* out, const Where& w,
              Ctx& ctx, Values) {
  return AssignObjects(v, out, w, ctx);
}
Status Assign(const json& v, std::optional<std::vector<TraceNodeNic>>* out, const Where& w,
              Ctx& ctx, Values) {
  return AssignObjects(v, out, w, ctx);
}
Status Assign(const json& v, std::optional<TraceTopology>* out, const Where& w, Ctx& ctx, Values) {
  TraceTopology t;
  GW_RETURN_IF_ERROR(AssignObject(v, &t, w, ctx, w.key));
  *out = std::move(t);
  return Status::Ok();
}
Status Assign(const json& v, std::optional<std::map<std::string, TraceHostNic>>* out,
              const Where& w, Ctx& ctx, Values) {
  if (!v.is_object()) return TypeError(w, "an object of NICs", v);
  std::map<std::string, TraceHostNic> r;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const Where wn{&w, it.key()};
    TraceHostNic nic;
    GW_RETURN_IF_ERROR(AssignObject(it.value(), &nic, wn, ctx, w.key));
    r.emplace(it.key(), std::move(nic));
  }
  *out = std::move(r);
  return Status::Ok();
}

// The fields every record has, read before the type's own (ParseRecord).
bool IsCommonKey(std::string_view k) { return k == "t" || k == "type" || k == "node"; }

template <class R>
Status ReadObject(const json& obj, R* out, const Where& where, Ctx& ctx, bool top_level) {
  const std::span<const Field<R>> table = FieldsOf<R>();
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    if (top_level && IsCommonKey(key)) continue;
    const Field<R>* f = nullptr;
    for (const Field<R>& c : table) {
      if (c.key == key) {
        f = &c;
        break;
      }
    }
    if (f == nullptr) {  // forward compatibility: ignored, counted
      Bump(ctx.stats->unknown_fields, ctx.scope + "." + CutName(key),
           &ctx.stats->dropped_stat_keys);
      continue;
    }
    if (it.value().is_null()) {  // the spec: null means not measured, as absent does
      Bump(ctx.stats->null_fields, ctx.scope + "." + std::string(f->key),
           &ctx.stats->dropped_stat_keys);
      continue;
    }
    const Where w{&where, f->key};
    GW_RETURN_IF_ERROR(std::visit(
        [&](auto member) { return Assign(it.value(), &(out->*member), w, ctx, f->values); },
        f->member));
  }
  return Status::Ok();
}

template <class R>
Status ReadBody(const json& j, TraceRecord* rec, Ctx& ctx) {
  R body;
  GW_RETURN_IF_ERROR(ReadObject(j, &body, Where{}, ctx, /*top_level=*/true));
  rec->body = std::move(body);
  return Status::Ok();
}

// Largest |t| accepted: t_ms must fit an int64 with room (year ~285 million).
constexpr double kMaxAbsT = 9e15;

// One parsed line into *rec (t, t_ms, node, body); the message has no file/line prefix.
Status ParseRecord(const json& j, TraceRecord* rec, TraceReadStats* stats) {
  if (!j.is_object()) {
    return Status::Corruption("not a JSON object (" + Describe(j) + ")");
  }
  auto t = j.find("t");
  if (t == j.end() || t->is_null()) return Status::Corruption("record has no \"t\"");
  if (!t->is_number()) return Status::Corruption("\"t\" is not a number (" + Describe(*t) + ")");
  const double t_s = t->get<double>();
  if (!std::isfinite(t_s) || std::fabs(t_s) > kMaxAbsT)
    return Status::Corruption("\"t\" is out of range (" + Describe(*t) + ")");
  auto type = j.find("type");
  if (type == j.end() || type->is_null()) return Status::Corruption("record has no \"type\"");
  if (!type->is_string())
    return Status::Corruption("\"type\" is not a string (" + Describe(*type) + ")");
  const std::string& type_name = type->get_ref<const json::string_t&>();
  const RecordType rt = RecordTypeFromName(type_name);

  rec->t = t_s;
  rec->t_ms = std::llround(t_s * 1000.0);
  Ctx ctx{stats, std::string(rt == RecordType::kUnknown ? "unknown" : RecordTypeName(rt))};
  if (auto node = j.find("node"); node != j.end()) {
    if (node->is_null()) {
      Bump(stats->null_fields, ctx.scope + ".node", &stats->dropped_stat_keys);
    } else if (!node->is_string()) {
      return TypeError(Where{nullptr, "node"}, "a string", *node);
    } else {
      rec->node = node->get<std::string>();
    }
  }
  switch (rt) {
    case RecordType::kNode:
      return ReadBody<TraceNode>(j, rec, ctx);
    case RecordType::kGpu:
      return ReadBody<TraceGpu>(j, rec, ctx);
    case RecordType::kHost:
      return ReadBody<TraceHost>(j, rec, ctx);
    case RecordType::kProc:
      return ReadBody<TraceProc>(j, rec, ctx);
    case RecordType::kJob:
      return ReadBody<TraceJob>(j, rec, ctx);
    case RecordType::kStep:
      return ReadBody<TraceStep>(j, rec, ctx);
    case RecordType::kEvent:
      return ReadBody<TraceEvent>(j, rec, ctx);
    case RecordType::kLog:
      return ReadBody<TraceLog>(j, rec, ctx);
    case RecordType::kUnknown:
      break;
  }
  // Forward compatibility: a newer writer's record type. Its fields are not read, nor
  // counted as unknown fields (the type already is).
  rec->body = std::monostate{};
  rec->unknown_type = type_name;
  Bump(stats->unknown_types, CutName(type_name), &stats->dropped_stat_keys);
  return Status::Ok();
}

// Records only the position and reason of a syntax error (json::parse discards them).
struct SyntaxErrorSax {
  size_t byte = 0;
  std::string reason;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(size_t) { return true; }
  bool key(json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& e) {
    byte = position;
    // "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error while
    // parsing value - invalid literal; last read: '…'": keep the reason, never the echo of the
    // input (which may be megabytes).
    std::string_view w = e.what();
    if (auto p = w.find(": "); p != std::string_view::npos) w.remove_prefix(p + 2);
    if (auto p = w.find("; last read"); p != std::string_view::npos) w = w.substr(0, p);
    reason = CutName(w, 120);
    return false;
  }
};

std::string SyntaxError(std::string_view line) {
  SyntaxErrorSax sax;
  if (json::sax_parse(line, &sax) || sax.reason.empty()) return "invalid JSON";
  return "invalid JSON at byte " + std::to_string(sax.byte) + ": " + sax.reason;
}

bool IsBlank(std::string_view s) {
  return s.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

std::string Printable(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return r;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string JoinCounts(const std::map<std::string, uint64_t>& m) {
  std::string r;
  for (const auto& [k, n] : m) {
    if (!r.empty()) r += ", ";
    r += Printable(k) + " (" + std::to_string(n) + ")";
  }
  return r;
}

}  // namespace

// ============================================================================ stats

std::string TraceReadStats::CountsLine() const {
  std::string r;
  for (size_t i = 1; i <= kRecordTypeCount; ++i) {
    const size_t t = i % kRecordTypeCount;  // the known types first, unknown last
    if (records_by_type[t] == 0) continue;
    if (!r.empty()) r += ' ';
    r += std::string(RecordTypeName(static_cast<RecordType>(t))) + "=" +
         std::to_string(records_by_type[t]);
  }
  return r.empty() ? "no records" : r;
}

std::vector<std::string> TraceReadStats::Report() const {
  std::vector<std::string> r;
  if (!unknown_types.empty())
    r.push_back("records of unknown type, ignored: " + JoinCounts(unknown_types));
  if (!unknown_fields.empty())
    r.push_back("unknown fields, ignored: " + JoinCounts(unknown_fields));
  if (!unknown_values.empty())
    r.push_back("values the spec does not list: " + JoinCounts(unknown_values));
  if (malformed_records > 0)
    r.push_back(std::to_string(malformed_records) +
                " malformed records skipped; the first: " + first_malformed);
  if (dropped_stat_keys > 0)
    r.push_back(std::to_string(dropped_stat_keys) + " more occurrences of further names (not " +
                "listed: over " + std::to_string(kMaxStatKeys) + " distinct names)");
  if (out_of_order > 0) {
    r.push_back(std::to_string(out_of_order) + " records out of time order (" +
                std::to_string(out_of_order_within_node) +
                " behind their own node; first at line " + std::to_string(first_out_of_order_line) +
                "; largest step back " + Seconds(max_step_back_ms) + "); delivered in file order");
  }
  if (untracked_node_records > 0)
    r.push_back(std::to_string(untracked_node_records) + " records of nodes beyond the first " +
                std::to_string(kMaxTrackedNodes) + " were not checked for order within the node");
  if (truncated_stream) r.push_back("the compressed stream ends early (cut while being written?)");
  if (truncated_last_line > 0)
    r.push_back("line " + std::to_string(truncated_last_line) +
                ": last line cut short without a newline (a crash mid-write?); dropped");
  return r;
}

// ============================================================================ reader

TraceReader::TraceReader(std::string name, TraceCompression compression,
                         std::unique_ptr<internal::ByteSource> source)
    : name_(std::move(name)), compression_(compression), source_(std::move(source)) {}

TraceReader::~TraceReader() = default;

Result<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    std::string m = path + ": " + std::strerror(e);
    if (e == ENOENT) return Status::NotFound(std::move(m));
    if (e == EACCES) return Status::PermissionDenied(std::move(m));
    return Status::IoError(std::move(m));
  }
  auto source = std::make_unique<FileSource>(fd);  // owns fd from here
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode))
    return Status::InvalidArgument(path + ": is a directory, not a trace file");
  return Make(path, std::move(source));
}

Result<std::unique_ptr<TraceReader>> TraceReader::OpenBuffer(std::string data, std::string name) {
  return Make(std::move(name), std::make_unique<BufferSource>(std::move(data)));
}

Result<std::unique_ptr<TraceReader>> TraceReader::Make(std::string name,
                                                       std::unique_ptr<internal::ByteSource> raw) {
  const TraceCompression by_name = CompressionByName(name);
  // Sniff the first bytes, so that a misnamed file is a clear error rather than garbage.
  std::string head(4, '\0');
  size_t got = 0;
  while (got < head.size()) {
    Result<size_t> n = raw->Read(head.data() + got, head.size() - got);
    if (!n.ok()) return Status(n.status().code(), name + ": " + n.status().message());
    if (*n == 0) break;
    got += *n;
  }
  head.resize(got);
  const TraceCompression seen = Sniff(head, by_name);
  if (seen != by_name) {
    if (by_name == TraceCompression::kPlain) {
      return Status::Corruption(name + ": " + std::string(CompressionName(seen)) +
                                " data in a file whose name does not end in " +
                                (seen == TraceCompression::kGzip ? ".gz" : ".zst"));
    }
    return Status::Corruption(name + ": named as " + std::string(CompressionName(by_name)) +
                              " but the data is " + std::string(CompressionName(seen)));
  }
  std::unique_ptr<internal::ByteSource> source =
      std::make_unique<HeadSource>(std::move(head), std::move(raw));
  if (by_name == TraceCompression::kGzip) {
    source = std::make_unique<GzipSource>(std::move(source));
  } else if (by_name == TraceCompression::kZstd) {
    source = std::make_unique<ZstdSource>(std::move(source));
  }
  return std::unique_ptr<TraceReader>(new TraceReader(std::move(name), by_name, std::move(source)));
}

Status TraceReader::Fail(Status s) {
  error_ = std::move(s);
  return error_;
}

Result<bool> TraceReader::ReadLine() {
  line_.clear();
  for (;;) {
    if (chunk_pos_ < chunk_.size()) {
      const char* begin = chunk_.data() + chunk_pos_;
      const size_t avail = chunk_.size() - chunk_pos_;
      const auto* nl = static_cast<const char*>(std::memchr(begin, '\n', avail));
      const size_t take = nl ? static_cast<size_t>(nl - begin) : avail;
      if (line_.size() + take > kMaxLineBytes) {
        return Status::ResourceExhausted(name_ + ":" + std::to_string(line_no_ + 1) +
                                         ": line longer than " + std::to_string(kMaxLineBytes) +
                                         " bytes");
      }
      line_.append(begin, take);
      const size_t consumed = take + (nl ? 1 : 0);
      chunk_pos_ += consumed;
      stats_.bytes += consumed;
      if (nl) {
        line_terminated_ = true;
        return true;
      }
      continue;
    }
    if (eof_) {
      line_terminated_ = false;
      return !line_.empty();
    }
    chunk_.resize(kChunkBytes);
    Result<size_t> n = source_->Read(chunk_.data(), chunk_.size());
    if (!n.ok()) {
      chunk_.clear();
      chunk_pos_ = 0;
      return Status(n.status().code(),
                    name_ + ":" + std::to_string(line_no_ + 1) + ": " + n.status().message());
    }
    chunk_.resize(*n);
    chunk_pos_ = 0;
    if (*n == 0) {
      eof_ = true;
      stats_.truncated_stream = source_->truncated();
    }
  }
}

void TraceReader::CheckOrder(const TraceRecord& rec) {
  const int64_t t = rec.t_ms;
  int64_t back = 0;
  bool within = false;
  const size_t node_key = std::hash<std::string_view>{}(rec.node);
  if (auto it = last_t_ms_by_node_.find(node_key); it != last_t_ms_by_node_.end()) {
    // Compared with the node's latest t, not its previous record: every record behind what
    // the node already said is out of order, however the step back came about.
    if (t < it->second) {
      within = true;
      back = it->second - t;
    } else {
      it->second = t;
    }
  } else if (last_t_ms_by_node_.size() < kMaxTrackedNodes) {
    last_t_ms_by_node_.emplace(node_key, t);
  } else {
    ++stats_.untracked_node_records;
  }
  const bool across = any_t_ && t < max_t_ms_ - kCrossNodeSkewMs;
  if (within || across) {
    ++stats_.out_of_order;
    if (within) ++stats_.out_of_order_within_node;
    if (across) back = std::max(back, max_t_ms_ - t);
    if (stats_.first_out_of_order_line == 0) stats_.first_out_of_order_line = rec.line;
    stats_.max_step_back_ms = std::max(stats_.max_step_back_ms, back);
  }
  if (!any_t_ || t > max_t_ms_) max_t_ms_ = t;
  any_t_ = true;
}

Result<bool> TraceReader::Next(TraceRecord* out) {
  if (!error_.ok()) return error_;
  for (;;) {
    Result<bool> got = ReadLine();
    if (!got.ok()) return Fail(got.status());
    if (!*got) return false;
    ++line_no_;
    ++stats_.lines;
    if (IsBlank(line_)) {
      ++stats_.blank_lines;
      continue;
    }
    auto where = [&] { return name_ + ":" + std::to_string(line_no_) + ": "; };
    TraceRecord rec;
    rec.line = line_no_;
    Status s;
    try {  // nothing below should throw (no exceptions, types checked); bad_alloc might
      json j = json::parse(line_, /*cb=*/nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) {
        if (!line_terminated_) {
          // The last line, cut without its newline: a writer that died mid-record.
          stats_.truncated_last_line = line_no_;
          return false;
        }
        s = Status::Corruption(where() + "not a JSON object: " + SyntaxError(line_));
      } else {
        s = ParseRecord(j, &rec, &stats_);
        if (!s.ok()) s = Status(s.code(), where() + s.message());
      }
    } catch (const std::exception& e) {
      s = Status::Internal(where() + "unexpected exception: " + e.what());
    }
    if (!s.ok()) {
      if (!skip_malformed_ || s.code() == StatusCode::kInternal) return Fail(std::move(s));
      if (stats_.malformed_records++ == 0) stats_.first_malformed = s.message();
      continue;
    }
    ++stats_.records;
    ++stats_.records_by_type[static_cast<size_t>(rec.type())];
    CheckOrder(rec);
    *out = std::move(rec);
    return true;
  }
}

}  // namespace gpuwatch::trace
