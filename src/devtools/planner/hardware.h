#pragma once
// Accelerator figures for the planner's roofline model. Vendor peak figures,
// dense (no 2:4 sparsity), per accelerator; sources in hardware.cpp and
// docs/planner.md. "cpu" is this project's 2-core dev machine, from figures
// measured in BENCHMARKS.md (not a vendor sheet).
#include <string>
#include <vector>

namespace mx::plan {

enum class WeightDType { BF16, FP8, MXFP4 };
WeightDType parse_weight_dtype(const std::string& s);  // bf16 | fp8 | mxfp4; mx::Error otherwise
const char* dtype_name(WeightDType d);
double bytes_per_weight(WeightDType d);  // incl. block scales: bf16 2, fp8 1 (+1 f32 scale per 128x128 block), mxfp4 4.25/8

struct Hardware {
  std::string name;
  int per_node = 8;            // accelerators in one node (scale-up domain)
  double mem_gb = 0;           // capacity per accelerator, GB (1e9 bytes)
  double mem_bw_gbs = 0;       // memory bandwidth, GB/s
  double tflops_bf16 = 0, tflops_fp8 = 0, tflops_fp4 = 0;  // dense matrix throughput; 0: no native support
  double link_gbs = 0;         // scale-up bandwidth per accelerator, one direction, GB/s (0: single device)
  double link_latency_us = 0;  // per step of a collective
  // Achievable fractions of the peaks (roofline efficiencies, see docs/planner.md).
  double bw_eff = 0.8, mm_eff = 0.7, link_eff = 0.7;
  // A GEMM whose per-accelerator output width is w runs at mm_eff * w / (w + mm_half_width):
  // narrow shards (high TP) fill fewer tiles / compute units. 0: no width penalty.
  double mm_half_width = 256;
  double price_per_hour = 0;   // default $/accelerator-hour: 0 (set --price-per-hour)
  std::string source;

  // Matrix TFLOP/s for weights of this dtype: the native rate, else the next
  // wider supported one (e.g. MXFP4 weights on H100 compute in FP8).
  double tflops(WeightDType d) const;
};

const std::vector<Hardware>& hardware_table();
const Hardware& find_hardware(const std::string& name);  // mx::Error listing the known names

}  // namespace mx::plan
