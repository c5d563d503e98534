#pragma once
// safetensors: https://github.com/huggingface/safetensors (format described in
// its README): u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the byte buffer the offsets index (relative to its start).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/tensor_store.h"

namespace mx {

class MappedFile;

// Maps one .safetensors file and adds its tensors (zero copy) to `store`.
// Validates the header length, the JSON, every dtype, shape and offset range
// against the file size, and that tensors neither overlap nor leave holes.
void read_safetensors_file(const std::string& path, TensorStore& store);
// The same for a mapping already made (MappedFile::from_bytes: fuzzers, tests).
void read_safetensors_file(std::shared_ptr<MappedFile> file, TensorStore& store);

// A model directory or file: DIR/model.safetensors.index.json (sharded),
// DIR/model.safetensors, DIR/*.safetensors (no index), or a single file path.
// With an index, every tensor of the weight map must be in the file it names
// and every tensor of the shards must be in the weight map.
TensorStore load_safetensors(const std::string& path);

struct NamedTensor {
  std::string name;
  Tensor t;
};

// Writes one file. Tensors are laid out in the given order, header padded to 8 bytes.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes DIR/model-0000i-of-0000n.safetensors shards of at most max_shard_bytes
// each (a tensor larger than that gets a shard of its own) plus
// DIR/model.safetensors.index.json, as HF's save_pretrained does. With a single
// shard it writes DIR/model.safetensors and no index.
void write_safetensors_sharded(const std::string& dir, const std::vector<NamedTensor>& tensors,
                               size_t max_shard_bytes,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace mx
