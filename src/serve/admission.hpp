// One generation at a time, with a bounded line of waiters. admit() returns a ticket when the
// line has room (nullptr: answer 503); the ticket's wait() blocks until the engine is its
// holder's, or returns false when the server shuts down first. Dropping a ticket leaves the
// line, or hands the engine on.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

namespace deltafin::serve {

class Admission {
 public:
  explicit Admission(int max_waiting) : max_waiting_(max_waiting) {}

  class Ticket {
   public:
    explicit Ticket(Admission& owner) : owner_(owner) {}
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();
    bool wait();  // true: this ticket holds the engine until it is dropped

   private:
    Admission& owner_;
    bool running_ = false;
  };

  std::unique_ptr<Ticket> admit();
  void shut_down();  // wakes every waiter; wait() returns false from now on
  bool shutting_down() const;
  int waiting() const;  // admitted, not yet running

 private:
  const int max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int admitted_ = 0;  // tickets alive (waiting or running)
  bool running_ = false;
  bool shutting_down_ = false;
};

}  // namespace deltafin::serve
