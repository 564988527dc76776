// One generation at a time, with a bounded line of waiters served in arrival order. admit()
// returns a ticket when the line has room (nullptr: answer 503); the ticket's wait() blocks until
// the engine is its holder's, or returns false when the server shuts down first. Dropping a
// ticket leaves the line, or hands the engine to the next in line.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

namespace deltafin::serve {

class Admission {
 public:
  explicit Admission(int max_waiting) : max_waiting_(max_waiting) {}

  class Ticket {
   public:
    Ticket(Admission& owner, uint64_t number) : owner_(owner), number_(number) {}
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();
    bool wait();  // true: this ticket holds the engine until it is dropped

   private:
    Admission& owner_;
    uint64_t number_;
    bool running_ = false;
  };

  std::unique_ptr<Ticket> admit();
  void shut_down();  // wakes every waiter; wait() returns false from now on
  int waiting() const;  // admitted, not yet running
  bool running() const;  // a generation holds the engine

 private:
  const int max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<uint64_t> line_;  // numbers of the tickets not yet running, in arrival order
  uint64_t next_number_ = 0;
  bool running_ = false;
  bool shutting_down_ = false;
};

}  // namespace deltafin::serve
