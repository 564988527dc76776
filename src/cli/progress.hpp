// A progress line on stderr for steps that take more than a couple of seconds, shown only when
// stderr is a terminal (never in pipes or logs).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace deltafin::cli {

class Progress {
 public:
  Progress(std::string label, int64_t total)
      : label_(std::move(label)), total_(total), start_(std::chrono::steady_clock::now()), tty_(isatty(STDERR_FILENO)) {}
  ~Progress() { finish(); }

  void update(int64_t done) {
    if (!tty_ || std::chrono::steady_clock::now() - start_ < std::chrono::seconds(2)) return;
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : 0;
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld", label_.c_str(), filled, "##############################",
                 kWidth - filled, "", static_cast<long long>(done), static_cast<long long>(total_));
    std::fflush(stderr);
    shown_ = true;
  }

  void finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  std::string label_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_;
  bool tty_;
  bool shown_ = false;
};

}  // namespace deltafin::cli
