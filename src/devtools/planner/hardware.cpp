#include "devtools/planner/hardware.h"

#include "core/error.h"

namespace mx::plan {

WeightDType parse_weight_dtype(const std::string& s) {
  if (s == "bf16") return WeightDType::BF16;
  if (s == "fp8") return WeightDType::FP8;
  if (s == "mxfp4") return WeightDType::MXFP4;
  fail("unknown weight dtype '{}' (bf16, fp8, mxfp4)", s);
}

const char* dtype_name(WeightDType d) {
  switch (d) {
    case WeightDType::BF16: return "bf16";
    case WeightDType::FP8: return "fp8";
    case WeightDType::MXFP4: return "mxfp4";
  }
  return "?";
}

double bytes_per_weight(WeightDType d) {
  switch (d) {
    case WeightDType::BF16: return 2.0;
    case WeightDType::FP8: return 1.0 + 4.0 / (128.0 * 128.0);
    case WeightDType::MXFP4: return 4.25 / 8.0;  // 4-bit E2M1 + one 8-bit E8M0 scale per 32
  }
  return 2.0;
}

double Hardware::tflops(WeightDType d) const {
  if (d == WeightDType::MXFP4 && tflops_fp4 > 0) return tflops_fp4;
  if (d != WeightDType::BF16 && tflops_fp8 > 0) return tflops_fp8;
  return tflops_bf16;
}

// Vendor figures (dense, no sparsity), per accelerator. link_gbs is one
// direction of the accelerator's total scale-up bandwidth (NVLink / Infinity
// Fabric), i.e. half the bidirectional figure vendors quote.
//  - AMD Instinct MI355X datasheet (2025): 288 GB HBM3E, 8.0 TB/s; FP16/BF16
//    2.5 PFLOPS, FP8 5.0 PFLOPS, MXFP4 10 PFLOPS (dense); 7 Infinity Fabric
//    links, 1075 GB/s aggregate bidirectional.
//  - AMD Instinct MI300X datasheet (2023): 192 GB HBM3, 5.3 TB/s; BF16
//    1307.4 TFLOPS, FP8 2614.9 TFLOPS (dense), no FP4; 7 IF links x 128 GB/s
//    = 896 GB/s aggregate bidirectional.
//  - NVIDIA H100 SXM datasheet: 80 GB HBM3, 3.35 TB/s; BF16 989 TFLOPS, FP8
//    1979 TFLOPS (dense; the sheet's 1979 / 3958 are with sparsity); NVLink 4
//    900 GB/s bidirectional.
//  - NVIDIA H200 SXM datasheet: 141 GB HBM3e, 4.8 TB/s; compute as H100; NVLink 900 GB/s.
//  - NVIDIA HGX B200 (per GPU of the 8-GPU board): 180 GB HBM3e, 7.7 TB/s
//    (62 TB/s / 8); BF16 2.25, FP8 4.5, FP4 9 PFLOPS dense; NVLink 5 1.8 TB/s bidirectional.
//  - NVIDIA HGX B300 (Blackwell Ultra, per GPU): 288 GB HBM3e, 8 TB/s; BF16
//    2.25, FP8 4.5, FP4 13.5 PFLOPS dense (108 PFLOPS / 8); NVLink 5 1.8 TB/s bidirectional.
//  - cpu: this machine, measured (BENCHMARKS.md, 2026-12-02, 2 threads):
//    STREAM read 32.5 GB/s, bf16 GEMM ~330 GFLOP/s, FP8 GEMM ~260, MXFP4 GEMM
//    ~480 (the medians of its GEMM table); 24 GiB RAM. The measured figures
//    already are achieved rates, so its bandwidth efficiency is 1; its matrix
//    efficiency is calibrated (below).
const std::vector<Hardware>& hardware_table() {
  static const std::vector<Hardware> t = [] {
    std::vector<Hardware> v;
    auto add = [&](Hardware h) { v.push_back(std::move(h)); };
    add({"mi355x", 8, 288, 8000, 2500, 5000, 10000, 1075.0 / 2, 5, 0.8, 0.7, 0.7, 256, 0,
         "AMD Instinct MI355X datasheet"});
    add({"mi300x", 8, 192, 5300, 1307.4, 2614.9, 0, 896.0 / 2, 5, 0.8, 0.7, 0.7, 256, 0,
         "AMD Instinct MI300X datasheet"});
    add({"b300", 8, 288, 8000, 2250, 4500, 13500, 1800.0 / 2, 3, 0.8, 0.7, 0.7, 256, 0,
         "NVIDIA HGX B300 specifications"});
    add({"b200", 8, 180, 7700, 2250, 4500, 9000, 1800.0 / 2, 3, 0.8, 0.7, 0.7, 256, 0,
         "NVIDIA HGX B200 specifications"});
    add({"h200", 8, 141, 4800, 989, 1979, 0, 900.0 / 2, 3, 0.8, 0.7, 0.7, 256, 0, "NVIDIA H200 SXM datasheet"});
    add({"h100", 8, 80, 3350, 989, 1979, 0, 900.0 / 2, 3, 0.8, 0.7, 0.7, 256, 0, "NVIDIA H100 SXM datasheet"});
    // cpu mm_eff 0.66 is fitted, not a vendor figure: the dense qwen3-medium model prefills at
    // 300.8 tok/s in a quiet window (BENCHMARKS.md) where the GEMM rate alone predicts 457; the
    // rest of a forward (norms, RoPE, attention, activations) runs below GEMM speed.
    add({"cpu", 1, 24 * 1.073741824, 32.5, 0.330, 0.260, 0.480, 0, 0, 1.0, 0.66, 1.0, 0, 0,
         "measured on this machine, BENCHMARKS.md"});
    return v;
  }();
  return t;
}

const Hardware& find_hardware(const std::string& name) {
  std::string known;
  for (const Hardware& h : hardware_table()) {
    if (h.name == name) return h;
    known += (known.empty() ? "" : ", ") + h.name;
  }
  fail("unknown hardware '{}' (known: {})", name, known);
}

}  // namespace mx::plan
