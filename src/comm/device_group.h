#pragma once
// Opening a device communicator (backends/device_comm.h: NCCL / RCCL) for the
// ranks of a host group (comm/comm.h), as vLLM and sglang do: rank 0 makes
// the unique id, the host communicator (MPI under mpirun, or the one-rank self
// group) broadcasts it, every rank joins on its own device. Then a self-check
// runs each collective once on tiny buffers and compares with what it must
// give, so a broken library or topology fails at load with a clear error, and
// the device path runs at least once even with one rank (--tp 1 --comm nccl,
// where the model itself has nothing to reduce).
#include <memory>

#include "backends/device_comm.h"
#include "comm/comm.h"

namespace mx {

class Backend;

// Collective over `host`: every rank calls it. Errors on rank 0 (no library,
// no id) reach every rank as an mx::Error instead of a hang.
std::unique_ptr<DeviceComm> open_device_group(Backend& b, Comm& host);

// allreduce, allgather and all-to-all on device buffers of b, checked; throws
// mx::Error naming the collective that gave a wrong value.
void check_device_group(Backend& b, DeviceComm& dc);

}  // namespace mx
