// A drafter built into the target's engine that reads the target's own hidden rows (DSpark,
// EAGLE-3): K3Model copies the outputs of the drafter's target layers side by side during every
// pass and hands them over with the pass's tokens; Session::draft_block asks it for guesses after
// the pending token. Its per-timeline state lives in K3State and is forgotten when a state is
// loaded from bytes (no pass covered those positions).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <deltafin/engine.hpp>

#include "backend/backend.hpp"

namespace deltafin {

// One token timeline's drafter state.
struct DrafterState {
  virtual ~DrafterState() = default;
  virtual void forget() = 0;  // no pass covered the positions: no context, no guesses
};

// The guesses are Session::draft_block's BlockDraft, each picked by its ChooseGuess
// (include/deltafin/engine.hpp).
class HiddenDrafter {
 public:
  virtual ~HiddenDrafter() = default;
  // 0-based target layers whose outputs (the AttnRes block partial sum after the layer) it reads.
  virtual const std::vector<int64_t>& target_layers() const = 0;
  virtual uint64_t bytes() const = 0;  // weights it holds on the backend
  virtual std::unique_ptr<DrafterState> new_state() const = 0;
  // The target's pass over positions [start, start + rows.rows): rows [n, layers * target hidden]
  // in target_layers() order, tokens [n] the pass's tokens.
  virtual void add_context(DrafterState& state, const Tensor& rows, const int32_t* tokens, int64_t start) = 0;
  // Up to k guesses after `anchor`, the pending token at position `pos` (none when the state
  // lacks the context).
  virtual BlockDraft draft(DrafterState& state, int32_t anchor, int64_t pos, int k, const ChooseGuess& choose) = 0;
};

}  // namespace deltafin
