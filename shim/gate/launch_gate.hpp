// The launch gate: every kernel-launch hook of the shim passes through it so
// that an allocation submits work only while it holds its GPU's lease
// (docs/scheduler.md, "Launch gate").
#pragma once

#include <cuda.h>

#include <cstdint>

namespace cushare::shim {

// Before forwarding any launch (cuLaunchKernel, cuLaunchKernelEx,
// cuLaunchCooperativeKernel, cuGraphLaunch, _ptsz forms). May block until
// this allocation holds the lease of the current context's GPU. Returns
// CUDA_SUCCESS when the launch may be forwarded, an error to return instead.
CUresult launch_gate_enter(CUstream stream) noexcept;

// After the launch was forwarded (with the driver's result), so the gate can
// account the submission and track in-flight work.
void launch_gate_exit(CUstream stream, CUresult launch_result) noexcept;

// The gate's clock reading when the calling thread last entered the gate
// for a launch on any GPU (0: never; a launch that then failed too). Equal
// to a tracker's last launch stamp, the caller (almost surely) made that
// launch; a thread whose last launch failed or went to another GPU is taken
// for another thread, which only leaves a tail to the poller.
std::uint64_t launch_gate_thread_last_launch_ns() noexcept;

}  // namespace cushare::shim
