// Validators for the files the agent serves from its binary (the dashboard): an entity tag
// derived from the bytes, and the If-None-Match test (RFC 9110 §8.8.3, §13.1.2). Pure functions.
#pragma once

#include <string>
#include <string_view>

namespace gpuwatch::server {

// A strong entity tag for `body`, quoted as the header carries it: "<length>-<hash>" in hex. It
// changes whenever the bytes do; two builds that embed the same page give the same tag.
std::string AssetEtag(std::string_view body);

// True when an If-None-Match header value names `etag`, or is "*". The comparison is weak
// (RFC 9110 §13.1.2: a W/ prefix on either side is ignored), as the standard asks for GET.
bool EtagMatches(std::string_view if_none_match, std::string_view etag);

}  // namespace gpuwatch::server
