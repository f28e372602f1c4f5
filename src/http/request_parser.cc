#include "http/request_parser.h"

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace gpuwatch::http {
namespace {

// RFC 9110 §5.6.2 token characters.
bool IsTchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return IsTchar(static_cast<unsigned char>(c)); });
}

// Field values: visible characters, obs-text, space and tab (RFC 9110 §5.5). A CR, LF or NUL
// inside a value is how header injection and smuggling attempts look.
bool IsFieldValue(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || c >= 0x20 ? c != 0x7f : false;
  });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn(element) for each non-empty element of a comma-separated field value.
template <typename Fn>
void ForEachListElement(std::string_view v, Fn fn) {
  for (std::string_view part : SplitAny(v, ",")) {
    part = TrimOws(part);
    if (!part.empty()) fn(part);
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<RequestHead> Fail(ParseError* error, int status, std::string message) {
  if (error) *error = {status, std::move(message)};
  return std::nullopt;
}

}  // namespace

std::optional<std::string_view> Headers::Get(std::string_view name) const {
  for (const auto& [k, v] : fields_)
    if (EqualsIgnoreCase(k, name)) return std::string_view(v);
  return std::nullopt;
}

size_t Headers::Count(std::string_view name) const {
  return static_cast<size_t>(std::count_if(fields_.begin(), fields_.end(), [&](const auto& f) {
    return EqualsIgnoreCase(f.first, name);
  }));
}

void Headers::Remove(std::string_view name) {
  std::erase_if(fields_, [&](const auto& f) { return EqualsIgnoreCase(f.first, name); });
}

size_t FindHeadEnd(std::string_view buf, size_t* scanned) {
  // The head ends at an empty line: "\n\n" or "\n\r\n" (a bare LF is accepted as a line end,
  // RFC 9112 §2.2). Resume two bytes before where the last call stopped, so a terminator split
  // across reads is still seen.
  size_t i = *scanned > 2 ? *scanned - 2 : 0;
  for (; i < buf.size(); ++i) {
    if (buf[i] != '\n') continue;
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  *scanned = buf.size();
  return 0;
}

std::optional<RequestHead> ParseRequestHead(std::string_view head, const HeadLimits& limits,
                                            ParseError* error) {
  if (head.size() > limits.max_head_bytes)
    return Fail(error, 431,
                "request head of " + std::to_string(head.size()) + " bytes exceeds the limit of " +
                    std::to_string(limits.max_head_bytes));
  RequestHead out;
  size_t pos = 0;
  auto next_line = [&]() -> std::optional<std::string_view> {
    const size_t nl = head.find('\n', pos);
    if (nl == std::string_view::npos) return std::nullopt;
    std::string_view line = head.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    return line;
  };
  auto line = next_line();
  if (!line) return Fail(error, 400, "no request line");

  // request-line = method SP request-target SP HTTP-version
  const size_t sp1 = line->find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line->find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line->find(' ', sp2 + 1) != std::string_view::npos)
    return Fail(error, 400, "malformed request line (want METHOD TARGET HTTP/1.x)");
  const std::string_view method = line->substr(0, sp1);
  const std::string_view target = line->substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line->substr(sp2 + 1);
  if (!IsToken(method)) return Fail(error, 400, "malformed request method");
  if (version == "HTTP/1.1") {
    out.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    out.minor_version = 0;
    out.keep_alive = false;
  } else if (version.starts_with("HTTP/")) {
    return Fail(error, 505, "HTTP version " + std::string(version) + " is not supported");
  } else {
    return Fail(error, 400, "malformed HTTP version");
  }
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u < 0x7f;
      }))
    return Fail(error, 400, "malformed request target");
  out.method = std::string(method);
  out.target = std::string(target);

  std::string_view origin = target;
  if (origin.starts_with("http://") || origin.starts_with("https://")) {
    // absolute-form (RFC 9112 §3.2.2): the path starts after the authority.
    const size_t authority = origin.find("//") + 2;
    const size_t slash = origin.find_first_of("/?", authority);
    origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
    if (!origin.starts_with("/")) origin = "/";
  }
  if (origin == "*" && method == "OPTIONS") {
    out.path = "*";
  } else {
    if (!origin.starts_with("/")) return Fail(error, 400, "request target must start with '/'");
    const size_t q = origin.find('?');
    const std::string_view raw_path = origin.substr(0, q);
    if (q != std::string_view::npos) out.query = std::string(origin.substr(q + 1));
    auto decoded = PercentDecode(raw_path, /*plus_is_space=*/false);
    if (!decoded || decoded->find('\0') != std::string::npos)
      return Fail(error, 400, "malformed percent-encoding in the request path");
    out.path = std::move(*decoded);
  }

  while (auto field = next_line()) {
    if (field->empty()) break;
    if (field->front() == ' ' || field->front() == '\t')
      return Fail(error, 400, "obsolete line folding in header fields is not accepted");
    if (out.headers.size() >= limits.max_headers)
      return Fail(error, 431, "more than " + std::to_string(limits.max_headers) + " header fields");
    const size_t colon = field->find(':');
    if (colon == std::string_view::npos) return Fail(error, 400, "header field without ':'");
    const std::string_view name = field->substr(0, colon);
    if (!IsToken(name))
      return Fail(error, 400, "malformed header field name '" + PrintableText(name) + "'");
    const std::string_view value = TrimOws(field->substr(colon + 1));
    if (!IsFieldValue(value))
      return Fail(error, 400, "control character in header field '" + std::string(name) + "'");
    out.headers.Add(std::string(name), std::string(value));
  }

  // Framing (RFC 9112 §6).
  bool has_te = false;
  bool te_ok = true;
  std::string te_seen;
  std::optional<uint64_t> length;
  bool length_conflict = false;
  bool keep_alive_token = false;
  bool close_token = false;
  size_t hosts = 0;
  for (const auto& [name, value] : out.headers.fields()) {
    if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
      has_te = true;
      ForEachListElement(value, [&](std::string_view coding) {
        if (!te_seen.empty()) te_seen += ", ";
        te_seen += coding;
        if (!EqualsIgnoreCase(coding, "chunked")) te_ok = false;
      });
    } else if (EqualsIgnoreCase(name, "Content-Length")) {
      ForEachListElement(value, [&](std::string_view v) {
        const bool digits =
            std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
        auto n = digits && v.size() <= 19 ? ParseInt<uint64_t>(v) : std::nullopt;
        if (!n || (length && *length != *n)) length_conflict = true;
        length = n;
      });
      if (TrimOws(value).empty()) length_conflict = true;
    } else if (EqualsIgnoreCase(name, "Connection")) {
      ForEachListElement(value, [&](std::string_view t) {
        if (EqualsIgnoreCase(t, "close")) close_token = true;
        if (EqualsIgnoreCase(t, "keep-alive")) keep_alive_token = true;
      });
    } else if (EqualsIgnoreCase(name, "Expect")) {
      if (!EqualsIgnoreCase(TrimOws(value), "100-continue"))
        return Fail(error, 417, "expectation '" + PrintableText(value) + "' is not supported");
      out.expect_continue = true;
    } else if (EqualsIgnoreCase(name, "Host")) {
      ++hosts;
    }
  }
  if (has_te) {
    if (out.minor_version == 0) return Fail(error, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (!te_ok || te_seen.empty())
      return Fail(error, 501,
                  "Transfer-Encoding '" + te_seen + "' is not supported (only chunked)");
    if (length || length_conflict)
      return Fail(error, 400, "both Transfer-Encoding and Content-Length");
    out.chunked = true;
  } else if (length_conflict) {
    return Fail(error, 400, "invalid or conflicting Content-Length");
  } else {
    out.content_length = length;
  }
  if (out.minor_version == 1 && hosts != 1)
    return Fail(error, 400, hosts == 0 ? "HTTP/1.1 request without Host" : "more than one Host");
  if (close_token) out.keep_alive = false;
  if (out.minor_version == 0 && keep_alive_token && !close_token) out.keep_alive = true;
  return out;
}

size_t ChunkedDecoder::Fail(int status, std::string message, size_t used) {
  state_ = State::kError;
  error_ = {status, std::move(message)};
  return used;
}

size_t ChunkedDecoder::Feed(std::string_view in, std::string* out) {
  // Lines in the chunked framing are short: a size with extensions, an empty line, a trailer
  // field. Bound each so that a peer cannot make one grow without end.
  constexpr size_t kMaxLineBytes = 4096;
  constexpr size_t kMaxTrailerBytes = 16 * 1024;
  size_t i = 0;
  while (i < in.size() && state_ == State::kMore) {
    if (step_ == Step::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - i));
      out->append(in.data() + i, n);
      i += n;
      remaining_ -= n;
      if (remaining_ == 0) step_ = Step::kDataEnd;
      continue;
    }
    // Collect one line.
    const size_t nl = in.find('\n', i);
    const size_t take = (nl == std::string_view::npos ? in.size() : nl) - i;
    if (line_.size() + take > kMaxLineBytes)
      return Fail(400, "chunked encoding: a line longer than 4096 bytes", i);
    line_.append(in.data() + i, take);
    if (nl == std::string_view::npos) return in.size();
    i = nl + 1;
    std::string_view line = line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    switch (step_) {
      case Step::kSize: {
        const size_t end = line.find_first_of("; \t");
        const std::string_view hex = line.substr(0, end);
        if (hex.empty()) return Fail(400, "chunked encoding: missing chunk size", i);
        uint64_t size = 0;
        for (char c : hex) {
          const int d = HexDigit(c);
          if (d < 0) return Fail(400, "chunked encoding: chunk size is not hexadecimal", i);
          if (size > (UINT64_MAX >> 4))
            return Fail(413, "chunked encoding: chunk size too large", i);
          size = size << 4 | static_cast<uint64_t>(d);
        }
        if (size > max_body_bytes_ - body_bytes_)
          return Fail(
              413,
              "request body exceeds the limit of " + std::to_string(max_body_bytes_) + " bytes", i);
        body_bytes_ += static_cast<size_t>(size);
        remaining_ = size;
        step_ = size == 0 ? Step::kTrailer : Step::kData;
        break;
      }
      case Step::kDataEnd:
        if (!line.empty()) return Fail(400, "chunked encoding: chunk data longer than its size", i);
        step_ = Step::kSize;
        break;
      case Step::kTrailer:
        trailer_bytes_ += line_.size();
        if (trailer_bytes_ > kMaxTrailerBytes)
          return Fail(431, "chunked encoding: trailer fields exceed 16 KiB", i);
        if (line.empty()) state_ = State::kDone;
        break;
      case Step::kData:
        break;
    }
    line_.clear();
  }
  return i;
}

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%') {
      const int hi = i + 1 < s.size() ? HexDigit(s[i + 1]) : -1;
      const int lo = i + 2 < s.size() ? HexDigit(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi << 4 | lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::optional<std::vector<std::pair<std::string, std::string>>> ParseUrlEncoded(std::string_view s,
                                                                                ParseError* error) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view part : SplitAny(s, "&")) {
    const size_t eq = part.find('=');
    auto k = PercentDecode(part.substr(0, eq), true);
    auto v = eq == std::string_view::npos ? std::optional<std::string>("")
                                          : PercentDecode(part.substr(eq + 1), true);
    if (!k || !v) {
      if (error)
        *error = {400, "malformed percent-encoding in '" + PrintableText(part.substr(0, 64)) + "'"};
      return std::nullopt;
    }
    out.emplace_back(std::move(*k), std::move(*v));
  }
  return out;
}

}  // namespace gpuwatch::http
