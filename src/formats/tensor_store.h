#pragma once
// A named collection of tensor views plus whatever keeps their memory alive
// (mmapped files, converted buffers). Every checkpoint format (safetensors,
// llama2.c, later GGUF) is read into one; models take their weights from it.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace mx {

class TensorStore {
 public:
  // Throws if name is already present.
  void add(const std::string& name, const Tensor& t, const std::string& origin);
  // Adds a tensor that owns its memory (converted or synthesised data).
  void add_owned(const std::string& name, OwnedTensor t, const std::string& origin);
  // Replaces an existing tensor (throws naming it if absent), e.g. a trained MTP
  // head over the checkpoint's own layer.
  void replace(const std::string& name, const Tensor& t, const std::string& origin);
  void keep_alive(std::shared_ptr<const void> resource) { resources_.push_back(std::move(resource)); }

  const Tensor* find(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // throws naming the tensor
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  const std::string& origin(const std::string& name) const;
  size_t size() const { return entries_.size(); }
  size_t total_bytes() const;

  std::map<std::string, std::string> metadata;  // e.g. safetensors __metadata__

 private:
  struct Entry {
    Tensor t;
    std::string origin;  // file the tensor came from, for error messages
  };
  std::map<std::string, Entry> entries_;
  std::vector<std::shared_ptr<const void>> resources_;
};

}  // namespace mx
