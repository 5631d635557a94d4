// The launch gate: every kernel-launch hook of the shim passes through it so
// that an allocation submits work only while it holds its GPU's lease
// (docs/scheduler.md, "Launch gate").
#pragma once

#include <cuda.h>

namespace cushare::shim {

// Before forwarding any launch (cuLaunchKernel, cuLaunchKernelEx,
// cuLaunchCooperativeKernel, cuGraphLaunch, _ptsz forms). May block until
// this allocation holds the lease of the current context's GPU. Returns
// CUDA_SUCCESS when the launch may be forwarded, an error to return instead.
CUresult launch_gate_enter(CUstream stream) noexcept;

// After the launch was forwarded (with the driver's result), so the gate can
// account the submission and track in-flight work.
void launch_gate_exit(CUstream stream, CUresult launch_result) noexcept;

}  // namespace cushare::shim
