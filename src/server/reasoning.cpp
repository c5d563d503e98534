#include "server/reasoning.h"

namespace mx::server {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool ReasoningSplitter::prompt_opens_reasoning(std::string_view prompt) {
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

void ReasoningSplitter::push(std::string_view text, std::string& reasoning, std::string& content) {
  held_ += text;
  for (;;) {
    switch (state_) {
      case Start: {
        // Only whitespace and (a prefix of) "<think>" may come before reasoning.
        size_t i = 0;
        while (i < held_.size() && is_space(held_[i])) ++i;
        const std::string_view rest = std::string_view(held_).substr(i);
        if (rest.size() >= kOpen.size() && rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, i + kOpen.size());
          state_ = Reasoning;
          continue;
        }
        if (rest.empty() || kOpen.substr(0, rest.size()) == rest) return;  // undecided yet
        state_ = Content;
        continue;
      }
      case Reasoning: {
        const size_t at = held_.find(kClose);
        if (at != std::string::npos) {
          reasoning += held_.substr(0, at);
          held_.erase(0, at + kClose.size());
          state_ = AfterReasoning;
          continue;
        }
        const size_t keep = partial_tag(held_, kClose);
        reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case AfterReasoning: {
        size_t i = 0;
        while (i < held_.size() && held_[i] == '\n') ++i;
        held_.erase(0, i);
        if (held_.empty()) return;
        state_ = Content;
        continue;
      }
      case Content:
        content += held_;
        held_.clear();
        return;
    }
  }
}

void ReasoningSplitter::finish(std::string& reasoning, std::string& content) {
  if (state_ == Reasoning) reasoning += held_;
  else if (state_ != AfterReasoning) content += held_;
  held_.clear();
}

}  // namespace mx::server
