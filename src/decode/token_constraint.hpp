// What generation may produce next, decided token by token: constrained sampling for structured
// output (response_format) and for tool calls a request forces (tool_choice). The target scores
// every token as always; the constraint then masks the tokens that cannot continue, and the
// sampler picks among the rest. A generation with a constraint decodes plainly (no drafts).
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens that cannot come next to -infinity.
  virtual void mask(std::vector<float>& logits) = 0;
  // Takes the sampled token (one that mask() left).
  virtual void accept(int32_t token) = 0;
  // Nothing may follow what was accepted: generation ends ("stop").
  virtual bool finished() const = 0;
};

}  // namespace deltafin
