#include "server/text_stream.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace mx::server {

namespace {
const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
}

std::string sanitize_utf8(std::string_view s, bool keep_incomplete_tail, std::string* tail) {
  std::string out;
  out.reserve(s.size());
  if (tail) tail->clear();
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(char(b));
      ++i;
      continue;
    }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;  // <= U+10FFFF
    }
    if (len == 0) {  // continuation byte or C0, C1, F5..FF: never valid here
      out += kReplacement;
      ++i;
      continue;
    }
    int j = 1;
    bool bad = false;
    for (; j < len; ++j) {
      if (i + j >= n) break;
      const auto c = static_cast<unsigned char>(s[i + j]);
      const bool ok = j == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) {
        bad = true;
        break;
      }
    }
    if (bad) {  // the maximal valid prefix [i, i + j) is one U+FFFD
      out += kReplacement;
      i += j;
    } else if (j < len) {  // ran out of bytes: an unfinished but so far valid sequence
      if (keep_incomplete_tail) {
        if (tail) tail->assign(s.substr(i));
      } else {
        out += kReplacement;
      }
      i = n;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

TextStream::TextStream(const Tokenizer* tok, std::vector<std::string> stop, std::vector<int32_t> shown_controls)
    : tok_(tok), stop_(std::move(stop)), shown_(std::move(shown_controls)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

std::string TextStream::piece(int32_t token) const {
  if (!tok_) return {};
  return tok_->token_piece(token, std::find(shown_.begin(), shown_.end(), token) != shown_.end());
}

std::string TextStream::push(int32_t token) {
  if (stopped_ || !tok_) return {};
  return push_bytes(piece(token));
}

std::string TextStream::push_bytes(std::string_view bytes) {
  if (stopped_) return {};
  raw_.append(bytes);
  std::string tail;
  held_ += sanitize_utf8(raw_, true, &tail);
  raw_ = std::move(tail);
  return release();
}

std::string TextStream::release() {
  if (stop_.empty()) {
    std::string out = std::move(held_);
    held_.clear();
    emitted_ += out.size();
    return out;
  }
  // The earliest complete stop string (ties: the longest) ends the text.
  size_t best = std::string::npos;
  for (const auto& s : stop_) {
    const size_t p = held_.find(s);
    if (p != std::string::npos && (p < best || (p == best && s.size() > matched_.size()))) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    raw_.clear();
    emitted_ += out.size();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  const size_t lim = std::min(held_.size(), max_stop_ - 1);
  for (size_t k = lim; k > 0 && keep == 0; --k) {
    const std::string_view suffix = std::string_view(held_).substr(held_.size() - k);
    for (const auto& s : stop_)
      if (s.size() > k && std::string_view(s).substr(0, k) == suffix) {
        keep = k;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  emitted_ += out.size();
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  std::string out = std::move(held_);
  held_.clear();
  out += sanitize_utf8(raw_);
  raw_.clear();
  emitted_ += out.size();
  return out;
}

}  // namespace mx::server
