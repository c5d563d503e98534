#pragma once
// GGUF (v2 and v3) reader. The file is memory-mapped; metadata strings and
// tensor data are views into the mapping, which GgufFile keeps alive (share it
// with mapping() to keep tensor data alive past the GgufFile).
//
// Every count, length, offset and size is validated against the file before it
// is used, so a truncated or corrupt file is an mx::Error naming the file and
// the field, never a crash or a huge allocation. Layout: docs/architectures.md §6.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mx {

class MappedFile;

// Metadata value types (GGUF spec numbering).
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);  // "UINT32", "STRING", ...; "?" if unknown

class GgufValue;

// An array value. Numeric and bool elements stay in the file (little-endian,
// possibly unaligned: read them with the accessors); string elements are views
// into the file; nested arrays are parsed.
struct GgufArray {
  GgufType elem_type = GgufType::UINT8;
  uint64_t count = 0;
  const uint8_t* data = nullptr;           // numeric/bool elements: count * element size bytes
  std::vector<std::string_view> strings;   // STRING elements
  std::vector<GgufValue> arrays;           // ARRAY elements

  bool is_numeric() const;  // integer, float or bool elements
  // Element i converted (throw mx::Error if the elements are not numeric/bool,
  // or the value does not fit the requested type).
  int64_t int_at(uint64_t i) const;
  double float_at(uint64_t i) const;
};

class GgufValue {
 public:
  GgufValue() = default;
  GgufType type() const { return type_; }
  bool is_integer() const;  // UINT8..INT64 (not BOOL)
  bool is_float() const { return type_ == GgufType::FLOAT32 || type_ == GgufType::FLOAT64; }

  // Typed access; a wrong type or an out-of-range integer is an mx::Error
  // naming `what` (normally the key).
  uint64_t as_u64(std::string_view what = "value") const;  // any non-negative integer
  int64_t as_i64(std::string_view what = "value") const;   // any integer that fits
  uint32_t as_u32(std::string_view what = "value") const;
  int32_t as_i32(std::string_view what = "value") const;
  double as_f64(std::string_view what = "value") const;    // FLOAT32/FLOAT64
  bool as_bool(std::string_view what = "value") const;
  std::string_view as_string(std::string_view what = "value") const;
  const GgufArray& as_array(std::string_view what = "value") const;

  std::string to_string(size_t max_array_items = 8) const;  // short human-readable form

 private:
  friend class GgufParser;
  GgufType type_ = GgufType::UINT8;
  uint64_t u_ = 0;  // unsigned integers, bool; signed integers as two's complement
  double f_ = 0;
  std::string_view s_;
  std::shared_ptr<GgufArray> arr_;  // shared: values are cheap to copy
};

// ggml tensor types (ggml.h numbering) with their block geometry.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;     // "F32", "Q4_K", ...
  int64_t block_size;   // elements per block
  uint64_t type_size;   // bytes per block
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);  // nullptr for unknown/removed ids
std::vector<GgmlTypeInfo> ggml_types();           // every type this reader knows

// A file without general.alignment aligns its tensor data to 32 bytes (GGUF spec).
inline constexpr uint32_t kGgufDefaultAlignment = 32;

namespace ggml_type {
constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
                   Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, IQ2_XXS = 16,
                   IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
                   IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
                   TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40;
}

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;          // ggml type id
  const GgmlTypeInfo* type_info = nullptr;
  std::vector<int64_t> dims;  // ne[0] first: fastest-varying (row length) first
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t nbytes = 0;        // numel / block_size * type_size
  const uint8_t* data = nullptr;

  int64_t numel() const;
  int64_t row_size() const { return dims.empty() ? 1 : dims[0]; }
  std::string shape_str() const;  // "[4096, 32000]" (GGUF order)
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // parses and validates; throws mx::Error
  explicit GgufFile(std::shared_ptr<MappedFile> file);  // a mapping already made (MappedFile::from_bytes)
  ~GgufFile();
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  const GgufValue& get(std::string_view key) const;  // throws naming the missing key

  // Typed getters: missing key or wrong type is an mx::Error naming the key and
  // the type found. The _or forms return `def` when the key is absent (a
  // present key of the wrong type is still an error).
  std::string get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string_view def) const;
  uint64_t get_u64(std::string_view key) const;
  uint64_t get_u64_or(std::string_view key, uint64_t def) const;
  uint32_t get_u32(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t def) const;
  int64_t get_i64(std::string_view key) const;
  int64_t get_i64_or(std::string_view key, int64_t def) const;
  double get_f64(std::string_view key) const;
  double get_f64_or(std::string_view key, double def) const;
  bool get_bool(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool def) const;
  const GgufArray& get_array(std::string_view key) const;
  // Array getters check the element type (any integer type for the integer forms).
  const std::vector<std::string_view>& get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;

  // Tensors, in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor(std::string_view name) const;  // throws naming it

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace mx
