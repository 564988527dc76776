// The persistent prefix cache of an engine (--prefix-cache DIR, issue 36 item 3): session states
// (Session::save_state) saved in a PrefixStore (io/prefix_store.hpp: atomic writes, checksums,
// LRU eviction under a byte budget, shared safely by several processes) under their tokens and
// the engine's state fingerprint (decode/state_fingerprint.hpp: model, backend and kernels,
// build) with kPrefixStateFormat, so an entry is only ever loaded by an engine that would have
// computed the same bits.
//   restore  the longest saved prefix of a prompt that is shorter than the prompt (the last
//            token's logits come from a pass), loaded into the session; an entry of the whole
//            prompt serves all but its last position where the state is append-only (K2: loaded,
//            then rewound by one position), so running one prompt again hits; a K3 prompt is
//            saved at all but its last position for that (prompt_save_point). An entry the
//            session refuses is passed over with one warning.
//   save     the session's state under the tokens it holds (an entry of the same tokens is only
//            marked recently used).
// Only entries whose tokens are a prefix of the prompt (or the whole of it) serve it. A K2 entry
// that shares only part of its tokens with the prompt could serve that part, a K3 one never (its
// recurrent state is only valid at its own length); finding such entries would read every
// entry's tokens on each restore, and run and serve save at the end of each prompt and answer,
// where the next turn's prompt continues, so it is not done.
// Thread-safe: one lock around the store (serve's sessions share one cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <deltafin/engine.hpp>

#include "io/prefix_store.hpp"

namespace deltafin {

// The layout of the state bytes entries hold (model/state_bytes.hpp); entries of another are foreign.
constexpr uint32_t kPrefixStateFormat = 1;

struct PrefixCacheStats {
  uint64_t hits = 0;              // restores that loaded an entry
  uint64_t positions_saved = 0;   // prompt positions those hits spared the prefill
  uint64_t saves = 0;             // entries written
  uint64_t bytes_written = 0;     // their state bytes
  uint64_t evictions = 0;         // entries removed to keep the budget
  uint64_t ignored = 0;           // damaged, truncated or foreign entries passed over
};

class PrefixCache {
 public:
  static constexpr double kDefaultGb = 10;  // --prefix-cache-gb's default

  // Opens (creates) `dir` with a budget of `gb` GB (> 0) for `engine`'s sessions. Throws
  // deltafin::Error in one line naming the directory when it is unusable.
  PrefixCache(const std::string& dir, double gb, Engine& engine);

  // Loads the longest saved prefix of `prompt` shorter than it into `session` (replacing what the
  // session held); the positions loaded, 0 when none (the session is then untouched).
  int64_t restore(Session& session, std::span<const int32_t> prompt);
  // Saves `session`'s state under `held` (held.size() == session.position()). A failed write
  // (a full disk) is a warning: nothing the session computes depends on the cache.
  void save(Session& session, std::span<const int32_t> held);
  // Saves state bytes taken from a session holding `held` (save() in two steps: the bytes can be
  // taken at once and written later, from another thread).
  void save(std::span<const int32_t> held, std::span<const std::byte> state);
  // Where a prompt's state is best saved before its answer: all of it where the state is
  // append-only (K2: that entry also serves the prompt run again), else all but its last
  // position (K3: the prompt run again loads it and runs only its last position; the caller
  // prefills up to there, saves, and runs the last position in a pass of its own).
  int64_t prompt_save_point(std::span<const int32_t> prompt) const {
    return static_cast<int64_t>(prompt.size()) - (append_only_ || prompt.size() < 2 ? 0 : 1);
  }
  // Whether an entry of exactly `held` exists (it is marked recently used then): save() would only touch it.
  bool saved(std::span<const int32_t> held);

  PrefixCacheStats stats() const;
  const std::string& dir() const { return store_.dir(); }

 private:
  mutable std::mutex mutex_;
  PrefixStore store_;
  bool append_only_;  // the engine's sessions rewind freely (K2): a whole-prompt entry serves
  PrefixCacheStats stats_;
};

}  // namespace deltafin
