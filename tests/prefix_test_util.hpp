// Helpers of the prefix cache's tests (test_prefix_store, test_prefix_cache): a fresh temporary
// directory removed at the end, and a capture of what spdlog prints.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

namespace deltafin::test {

// A fresh directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int serial = 0;
    path = std::filesystem::temp_directory_path() /
           ("deltafin-prefix-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
    std::filesystem::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// Captures what spdlog prints while it lives.
struct LogCapture {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  LogCapture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    sink->set_pattern("%l %v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  }
  ~LogCapture() { spdlog::set_default_logger(previous); }
  int lines() const {
    const std::string s = text.str();
    return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  }
};

}  // namespace deltafin::test
