#pragma once
// Incremental detokenization for streamed completions.
//
// Tokens arrive one at a time; their pieces (Tokenizer::token_piece) are raw
// bytes that may end inside a UTF-8 character (byte-level BPE splits
// characters across tokens). TextStream turns the byte stream into text that
// is safe to send now:
//   * an incomplete UTF-8 sequence at the end is held back until the bytes that
//     complete it arrive; bytes that can never form valid UTF-8 become U+FFFD,
//     so every emitted string is valid UTF-8 (JSON needs it);
//   * with stop strings, a tail that could still grow into a stop string is held
//     back too; when one appears, the text is cut right before it and stopped()
//     turns true. Nothing after the stop string is ever emitted.
// The concatenation of everything push() and finish() return is the request's
// whole completion text, whatever the chunking.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mx {
class Tokenizer;
}

namespace mx::server {

class TextStream {
 public:
  // tok may be null (a model without tokenizer): then every token's text is "".
  // shown_controls: control tokens whose text is output (they decode to nothing
  // otherwise), e.g. the tool-call tags a request with tools parses.
  TextStream(const Tokenizer* tok, std::vector<std::string> stop, std::vector<int32_t> shown_controls = {});

  // Appends one token; returns the text that became safe to emit (often "").
  // After a stop string matched, further tokens are ignored and return "".
  std::string push(int32_t token);
  // The bytes push appends for a token.
  std::string piece(int32_t token) const;
  // Appends raw bytes (what push does with the token's piece).
  std::string push_bytes(std::string_view bytes);
  // End of generation: returns what is still held (a stop-string prefix that
  // never completed; an unfinished UTF-8 sequence as U+FFFD).
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_matched() const { return matched_; }  // the stop string that matched
  size_t emitted_bytes() const { return emitted_; }             // bytes returned so far

 private:
  std::string release();  // moves the safe part of held_ out

  const Tokenizer* tok_;
  std::vector<std::string> stop_;
  std::vector<int32_t> shown_;
  size_t max_stop_ = 0;
  std::string raw_;   // bytes not yet decoded: an incomplete UTF-8 sequence
  std::string held_;  // valid UTF-8 withheld because it may start a stop string
  std::string matched_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Valid UTF-8 from arbitrary bytes: each maximal invalid subsequence becomes
// U+FFFD (the WHATWG / Unicode "substitution of maximal subparts" practice).
// If keep_incomplete_tail, a valid but unfinished sequence at the end is not
// converted: it is left in *tail (when tail is non-null) instead.
std::string sanitize_utf8(std::string_view bytes, bool keep_incomplete_tail = false, std::string* tail = nullptr);

}  // namespace mx::server
