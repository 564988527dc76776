// The sessions the server keeps between requests, each with the tokens it holds, so that several
// conversations (two agents taking turns) each keep their prefix. A request takes the held session
// that its prompt continues, the one with the longest common prefix, which is rewound to that
// prefix (the generation loop, decode/generation.hpp, prefills the rest), or else a fresh one.
// A prompt continues a session when it shares the whole first prompt that session served (a
// later turn of its conversation, or an edit of a later turn) or everything the session holds;
// a prompt that departs earlier (another conversation with the same system prompt) gets a fresh
// session, and the other keeps its state.
// Memory: the held sessions share the state share of the memory plan (ModelSummary::
// planned_state_bytes). Before a generation the least recently used other sessions are dropped
// until they fit beside the running one counted at the positions its request may reach (or at
// its bytes now, if more); after it, until all of them fit by their bytes (Session::state_bytes).
// The running session is never dropped.
// With a persistent prefix cache (--prefix-cache, decode/prefix_cache.hpp): a prompt that no held
// session continues gets a fresh session loaded with the longest saved prefix of the prompt; the
// state after each prompt's prefill is saved (its bytes taken before the first token, written
// while the answer decodes), and so are a finished turn's and a dropped session's, so that a
// dropped or restarted conversation finds its prefix on disk (a K3 prompt is saved at all but its
// last position, so that the prompt run again finds it). Writes run on another thread; the next
// take() waits for them.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

#include "decode/prefix_cache.hpp"

namespace deltafin::serve {

struct SessionCacheStats {
  uint64_t hits = 0;              // requests that kept a prefix a held session had
  uint64_t positions_saved = 0;   // prompt positions those kept (not prefilled again)
  uint64_t dropped = 0;           // sessions dropped to keep the held ones within the budget
  uint64_t sessions = 0;          // held now
  uint64_t bytes = 0;             // their KV cache and state now
  uint64_t budget_bytes = 0;      // what they share
  bool disk = false;              // a prefix cache is in use; its counters:
  PrefixCacheStats disk_stats;
};

class SessionCache {
 public:
  // reuse false: one session, every prompt prefilled from position 0 (for measuring what reuse
  // saves). budget_bytes: what the held sessions share (the plan's planned state). disk: the
  // prefix cache (nullptr: none; not with reuse false); it must outlive this.
  SessionCache(Engine& engine, bool reuse, uint64_t budget_bytes, PrefixCache* disk = nullptr);
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Takes the session for `prompt` (see above), rewound to the prefix it keeps, short of the
  // prompt's last token (whose logits the generation needs); returns that prefix's length.
  // reach: the positions the request may reach (prompt + max_tokens), counted for memory.
  int64_t take(std::span<const int32_t> prompt, int64_t reach);

  // Where the prompt's state is saved to the prefix cache (PrefixCache::prompt_save_point: all of
  // it, or K3 all but its last position); the prompt's length without a cache.
  int64_t prompt_save_point(std::span<const int32_t> prompt) const;
  // Once the taken session holds `prefix` (the prompt up to its save point): saved to the prefix cache.
  void prompt_prefilled(std::span<const int32_t> prefix);

  // After the generation: the tokens the taken session holds, `committed` (prompt and generated
  // tokens) cut to its position (saved to the prefix cache); then drops others beyond the budget.
  void record(std::span<const int32_t> committed);

  Session& session() { return *held_[current_].session; }
  SessionCacheStats stats() const;

 private:
  struct Held {
    std::unique_ptr<Session> session;
    std::vector<int32_t> tokens;  // at positions 0 .. position()-1
    size_t first_prompt = 0;      // the length of the first prompt it served (from position 0)
    uint64_t last_used = 0;
  };

  // Drops least recently used sessions other than the current one while they and the current
  // one, counted at current_bytes, exceed the budget.
  void drop_beyond_budget(uint64_t current_bytes);
  // Saves the state of `session`, which holds `tokens`, to the prefix cache (on another thread).
  void save_to_disk(Session& session, std::span<const int32_t> tokens);
  void wait_for_writes();

  Engine& engine_;
  bool reuse_;
  PrefixCache* disk_;
  std::vector<std::future<void>> writes_;
  uint64_t budget_;
  uint64_t per_position_;
  std::vector<Held> held_;
  size_t current_ = 0;
  uint64_t clock_ = 0;
  uint64_t hits_ = 0, positions_saved_ = 0, dropped_ = 0;
};

}  // namespace deltafin::serve
