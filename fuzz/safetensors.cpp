// libFuzzer target: a .safetensors file (header length, JSON header, offsets) as
// read_safetensors_file reads a mapped file.
#include "core/mapped_file.h"
#include "fuzz_common.h"
#include "formats/safetensors.h"

MXFUZZ_TARGET(safetensors) {
  mxfuzz::refusal_ok([&] {
    mx::TensorStore store;
    mx::read_safetensors_file(mx::MappedFile::from_bytes("fuzz.safetensors", mxfuzz::as_string(data, size)), store);
  });
  return 0;
}
