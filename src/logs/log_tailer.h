// LogTailer: follows one log file by path, the way `tail -F` does, and hands out whole lines.
//
// It keeps the file open and reads new bytes with pread from where it stopped. Rotation is
// noticed when the path's (st_dev, st_ino) changes (logrotate's default rename + create, or a
// delete + recreate): the old descriptor is first read to its end — so lines written just
// before the rename are not lost — and then the new file is read from offset 0. Truncation
// (size below the read offset: logrotate's copytruncate, or `> file`) restarts at offset 0. A
// missing file is retried on every Poll. Reads are bounded per Poll so one chatty file cannot
// stall the agent's loop; what is left comes on the next Poll.
//
// Limits shared with tail -F, by construction rather than by choice:
//  * A writer that never reopens its log (a job's stdout redirected to a file) keeps writing
//    into the renamed file after a rename rotation. Those lines are read only until the
//    tailer switches to the new file, which happens on the Poll that sees the new path.
//  * After copytruncate, a writer without O_APPEND keeps its old offset, so the file grows a
//    hole of NUL bytes that is read as text. `>>` redirections use O_APPEND and are safe.
//  * A truncate followed by more writes than were there before, all between two Polls, looks
//    like growth; it is told apart by the last 32 bytes read before the offset, which a
//    rewrite changes — unless it wrote those very bytes again at the same place.
//
// No I/O happens in the constructor; the first Poll is the tailer's start.
//
// Thread-safety: none. One thread owns a LogTailer.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpuwatch::logs {

struct TailedLine {
  std::string text;  // without its '\n' and a '\r' before it; arbitrary bytes, not UTF-8-checked
  // The text is not exactly one whole line of the file: a piece of a line longer than
  // max_line_bytes (every piece of such a line is flagged, the last one included), or the
  // unterminated end of a file that was rotated, truncated or flushed, or the tail of a line
  // that was already under way where start_at_end began reading.
  bool cut = false;
};

struct LogTailerOptions {
  // Where reading begins in a file that exists at the first Poll. false (the default): at its
  // start, because the agent tails job logs declared when the job starts, and whatever the job
  // wrote before the first Poll is part of the job. true: at its end, for long-lived files
  // whose history is not news. A file that appears only after the first Poll, and every file
  // after a rotation, is always read from its start: all of it is new.
  bool start_at_end = false;
  // A line longer than this is handed out in pieces of at most this many bytes, each flagged
  // cut; the pieces end on a UTF-8 character boundary when the bytes are UTF-8.
  // REQUIRES: >= 16.
  size_t max_line_bytes = 16 << 10;
  // Upper bound on the bytes read by one Poll. REQUIRES: > 0.
  size_t max_bytes_per_poll = 1 << 20;
  // Run on every newly opened file, with its fstat, before a byte is read; a non-OK status
  // refuses the file (the agent checks that the owner is the job's uid). Non-regular files
  // (FIFOs, directories, devices) are refused before `check` is called.
  std::function<Status(const struct stat&)> check;
  // Run on every newly opened file with the path it really has (read back from
  // /proc/self/fd, every symbolic link resolved), before a byte is read; a non-OK status
  // refuses the file (the agent allows only paths under --job-log-roots). The final
  // component is never followed as a symbolic link.
  std::function<Status(const std::string& real_path)> path_check;
};

struct LogTailerStats {
  uint64_t lines = 0;        // TailedLines handed out, cut pieces included
  uint64_t cut_lines = 0;    // of which flagged cut
  uint64_t bytes = 0;        // bytes read from files
  uint64_t rotations = 0;    // switches to a new file at the path
  uint64_t truncations = 0;  // restarts at offset 0 of the same file
};

class LogTailer {
 public:
  explicit LogTailer(std::string path, LogTailerOptions options = {});
  ~LogTailer();
  LogTailer(const LogTailer&) = delete;
  LogTailer& operator=(const LogTailer&) = delete;

  // Appends the lines completed since the last Poll to `out`. Errors are reported once per
  // change of condition: the first Poll that finds the file missing returns NotFound, later
  // Polls return Ok while it stays missing (and keep retrying); the same holds for a refused
  // file (InvalidArgument for a non-regular file, or whatever `check` returned) and for
  // open/read errors. Lines read before an error are still appended.
  Status Poll(std::vector<TailedLine>* out);

  // Hands out a held partial line (bytes after the last '\n'), flagged cut. For when the
  // writer is known to be done, e.g. the job ended.
  void FlushPartial(std::vector<TailedLine>* out);

  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }
  const LogTailerStats& stats() const { return stats_; }

 private:
  // Opens path_, checks it and positions the read offset. `from_end` applies start_at_end.
  Status Open(bool from_end);
  void Close();
  // Reads from offset_ until EOF or until the budget is spent.
  Status Drain(size_t* budget, std::vector<TailedLine>* out);
  // Hands out partial_ (flagged cut) and forgets it.
  void EmitHeld(std::vector<TailedLine>* out);
  void Consume(const char* data, size_t n, std::vector<TailedLine>* out);
  void Emit(std::string text, bool cut, std::vector<TailedLine>* out);
  // Reports `st` unless it repeats the last reported error; clears it when `st` is OK.
  Status Report(Status st);

  std::string path_;
  LogTailerOptions options_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  uint64_t offset_ = 0;
  bool started_ = false;      // the first Poll has run
  std::string partial_;       // bytes of the line under way
  bool partial_cut_ = false;  // the line under way already had pieces handed out
  std::string buf_;           // read buffer, reused
  static constexpr size_t kTailCheckBytes = 32;
  std::string tail_;  // the last (up to) kTailCheckBytes bytes before offset_
  StatusCode last_error_code_ = StatusCode::kOk;
  std::string last_error_message_;
  LogTailerStats stats_;
};

}  // namespace gpuwatch::logs
