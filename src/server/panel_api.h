// The dashboard's panel endpoint (issue 18): one chart's data, downsampled on the server so a
// 30-day view never reads raw samples and a one-sample spike never disappears.
//
//   GET /api/v1/panel?match=<selector>&start=<t>&end=<t>&width=<px>[&max_series=<n>]
//
// The step is (end - start) / width, rounded up to a whole second and to a multiple of the
// tier read. Buckets are [k·step, (k+1)·step), aligned to multiples of the step, from the one
// holding `start` to the one holding `end`; each holds the min, max and last sample of a
// series in it (null where there was none). The tier is the coarsest whose width fits in the
// step and that reaches back to `start` (raw, 1m, 1h). Answer (docs/dashboard.md):
//
//   {"status":"success","data":{"step":60,"tier":"1m","times":[t0, t1, …],
//     "series":[{"metric":{…},"min":[…],"max":[…],"last":[…]}, …]}}
//
// `times` are Unix seconds of the bucket starts, shared by every series; values are JSON
// numbers, or null, or the strings "NaN", "+Inf", "-Inf". Errors are the query API's: 400
// bad_data naming the parameter, 422 execution when the selector selects more than
// max_series (default 500) series or series × buckets exceeds kPanelMaxCells. Thread-safe: no
// state; the Querier is thread-safe.
#pragma once

#include "server/query_api.h"
#include "store/querier.h"

namespace gpuwatch::server {

inline constexpr std::string_view kPanelApiPath = "/api/v1/panel";
inline constexpr int64_t kPanelMaxWidth = 10'000;       // points per series
inline constexpr int64_t kPanelDefaultMaxSeries = 500;  // a chart of more says nothing
inline constexpr int64_t kPanelMaxCells = 2'000'000;    // series × buckets in one answer

ApiResponse HandlePanelApi(const store::Querier& querier, const ApiRequest& request);

}  // namespace gpuwatch::server
