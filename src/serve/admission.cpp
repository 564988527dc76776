// The generation line (see admission.hpp).
#include "serve/admission.hpp"

#include <algorithm>

namespace deltafin::serve {

std::unique_ptr<Admission::Ticket> Admission::admit() {
  std::lock_guard lock(mutex_);
  // Room: the line may hold max_waiting_ behind a running generation (a ticket that is admitted
  // while the engine is idle starts at once).
  if (shutting_down_ || static_cast<int>(line_.size()) >= max_waiting_ + (running_ ? 0 : 1)) return nullptr;
  line_.push_back(next_number_);
  return std::make_unique<Ticket>(*this, next_number_++);
}

bool Admission::Ticket::wait() {
  std::unique_lock lock(owner_.mutex_);
  owner_.changed_.wait(lock, [&] { return owner_.shutting_down_ || (!owner_.running_ && owner_.line_.front() == number_); });
  if (owner_.shutting_down_) return false;
  owner_.line_.pop_front();
  owner_.running_ = running_ = true;
  return true;
}

Admission::Ticket::~Ticket() {
  std::lock_guard lock(owner_.mutex_);
  if (running_) owner_.running_ = false;
  else owner_.line_.erase(std::remove(owner_.line_.begin(), owner_.line_.end(), number_), owner_.line_.end());
  owner_.changed_.notify_all();
}

void Admission::shut_down() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  changed_.notify_all();
}

int Admission::waiting() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(line_.size());
}

bool Admission::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

}  // namespace deltafin::serve
