// Minimal leveled logging to stderr: one line per message, "2026-11-30T05:40:01.123Z W msg".
//
// Thread-safe: each line is written with one write(2). The level is set once at start-up by
// main (no global flag mutated at run time elsewhere).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace gpuwatch {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, std::string_view message);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

#define GW_LOG_DEBUG(...) ::gpuwatch::Log(::gpuwatch::LogLevel::kDebug, __VA_ARGS__)
#define GW_LOG_INFO(...) ::gpuwatch::Log(::gpuwatch::LogLevel::kInfo, __VA_ARGS__)
#define GW_LOG_WARN(...) ::gpuwatch::Log(::gpuwatch::LogLevel::kWarning, __VA_ARGS__)
#define GW_LOG_ERROR(...) ::gpuwatch::Log(::gpuwatch::LogLevel::kError, __VA_ARGS__)

}  // namespace gpuwatch
