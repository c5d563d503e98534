#pragma once
// A per-request constraint on which tokens may come next (structured outputs:
// server/structured_output.h implements it with a grammar). The engine masks the
// logits with it before every sampling of the request, drafts' verification
// included (a draft outside the mask is rejected), and advances it past every
// emitted token. Used from the engine thread only.
#include <cstdint>

namespace mx {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets logits[v] = -inf for each token v that may not come next; the model's
  // end-of-sequence tokens are allowed only where the output is complete.
  virtual void mask(float* logits, int64_t vocab) = 0;
  // Advances past an emitted token (not called for the end-of-sequence token
  // that finishes the request). Throws mx::Error if the token was not allowed.
  virtual void accept(int32_t token) = 0;
  // Nothing but the end of the sequence may follow: the engine finishes the
  // request ("stop").
  virtual bool finished() const = 0;
};

}  // namespace mx
