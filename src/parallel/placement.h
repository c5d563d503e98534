#pragma once
// Which device each rank of each data-parallel replica runs on (issue 23): with
// R ranks per replica (max of --tp, --ep), rank r of replica i takes device
// first + i * R + r, as vLLM and sglang lay out DP x TP on one node (replica i on
// GPUs i*TP .. i*TP + TP - 1). `first` is the index in the --backend spec
// ("cuda:4": from device 4; "cuda": from 0), so two `mpirun -np 4` launches with
// --backend cuda:0 and cuda:4 split an 8-GPU node the same way. CUDA_VISIBLE_DEVICES /
// HIP_VISIBLE_DEVICES renumber what the runtime sees first, as usual.
//
// Specs other than cuda / hip ("cpu", registered test backends) are returned unchanged. A device index past the
// devices found is an error, except when exactly one device is found: then every
// rank shares it (HIP-CPU's one device in CI, or a single GPU running several
// ranks, slower but correct). n_devices <= 0 (unknown) checks nothing.
#include <string>

namespace mx {

std::string device_for_rank(const std::string& spec, int replica, int ranks_per_replica, int rank, int n_devices);

}  // namespace mx
