#include "spec/drafter.h"

#include "core/error.h"
#include "spec/mtp_drafter.h"
#include "spec/ngram.h"

namespace mx {

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "off") return SpecMode::off;
  if (s == "ngram") return SpecMode::ngram;
  if (s == "mtp") return SpecMode::mtp;
  fail("unknown speculative mode '{}' (expected off, ngram or mtp)", s);
}

const char* spec_mode_name(SpecMode m) {
  switch (m) {
    case SpecMode::ngram: return "ngram";
    case SpecMode::mtp: return "mtp";
    default: return "off";
  }
}

void SpecOptions::validate() const {
  MX_CHECK(steps >= 1 && steps <= 16, "--spec-steps must be in [1, 16], got {}", steps);
  MX_CHECK(ngram_min >= 1 && ngram_max >= ngram_min && ngram_max <= 64,
           "n-gram lookup sizes must satisfy 1 <= min <= max <= 64, got min {} max {}", ngram_min, ngram_max);
}

std::unique_ptr<Drafter> make_drafter(const SpecOptions& o, Model& model, KVPool& pool) {
  o.validate();
  switch (o.mode) {
    case SpecMode::ngram: return std::make_unique<NgramDrafter>(o);
    case SpecMode::mtp: return std::make_unique<MtpDrafter>(o, model, pool);
    default: return nullptr;
  }
}

}  // namespace mx
