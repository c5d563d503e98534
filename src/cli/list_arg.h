#pragma once
// Comma-separated command-line lists (--isas avx2,avx512, --workloads a,b).
#include <sstream>
#include <string>
#include <vector>

namespace mx::cli {

// The non-empty items of "a,b,,c" in order: {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');)
    if (!p.empty()) out.push_back(p);
  return out;
}

}  // namespace mx::cli
