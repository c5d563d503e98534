#pragma once
// GGUF v3 writer (the layout src/formats/gguf.h reads; ggml's docs/gguf.md): header,
// metadata key/values, tensor infos, then the data section, every tensor at a
// multiple of general.alignment. Tensor bytes are produced one at a time while
// writing, so a converter never holds more than one converted tensor.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace mx {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  bool has_key(const std::string& key) const;

  // A tensor of ggml type `type` with GGUF dims (ne[0], the row length, first).
  // produce(out) must append exactly the tensor's byte size (checked).
  using Producer = std::function<void(std::vector<uint8_t>& out)>;
  void add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& dims, Producer produce);
  size_t tensor_count() const { return tensors_.size(); }

  // Writes the file (atomically: PATH.tmp then rename); throws mx::Error.
  void write(const std::string& path) const;

 private:
  struct TensorEntry {
    std::string name;
    uint32_t type;
    std::vector<int64_t> dims;
    uint64_t nbytes, offset;
    Producer produce;
  };
  void key(const std::string& k, uint32_t type);
  uint32_t alignment_;
  std::vector<std::string> keys_;
  std::vector<uint8_t> kv_;  // serialized key/values
  std::vector<TensorEntry> tensors_;
  uint64_t data_size_ = 0;
};

}  // namespace mx
