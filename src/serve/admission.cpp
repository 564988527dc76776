// The generation line (see admission.hpp).
#include "serve/admission.hpp"

namespace deltafin::serve {

std::unique_ptr<Admission::Ticket> Admission::admit() {
  std::lock_guard lock(mutex_);
  if (shutting_down_ || admitted_ >= max_waiting_ + 1) return nullptr;  // the running one and max_waiting_ more
  ++admitted_;
  return std::make_unique<Ticket>(*this);
}

bool Admission::Ticket::wait() {
  std::unique_lock lock(owner_.mutex_);
  owner_.changed_.wait(lock, [&] { return !owner_.running_ || owner_.shutting_down_; });
  if (owner_.shutting_down_) return false;
  owner_.running_ = running_ = true;
  return true;
}

Admission::Ticket::~Ticket() {
  std::lock_guard lock(owner_.mutex_);
  --owner_.admitted_;
  if (running_) owner_.running_ = false;
  owner_.changed_.notify_all();
}

void Admission::shut_down() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  changed_.notify_all();
}

bool Admission::shutting_down() const {
  std::lock_guard lock(mutex_);
  return shutting_down_;
}

int Admission::waiting() const {
  std::lock_guard lock(mutex_);
  return admitted_ - (running_ ? 1 : 0);
}

}  // namespace deltafin::serve
