// One GPU's primary context with the probe's module loaded: the setup every
// probe mode shares.
#pragma once

#include "tests/gpu/probe/driver_api.hpp"

namespace cushare::gpuprobe {

class Device {
 public:
  // cuInit, device 0 (the orchestrator pins the card with CUDA_VISIBLE_DEVICES),
  // primary context, and the PTX module.
  explicit Device(const DriverApi& api);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DriverApi& api() const { return api_; }
  CUdevice device() const { return device_; }
  CUfunction spin() const { return spin_; }
  CUfunction empty() const { return empty_; }

  struct MemInfo {
    size_t free = 0;
    size_t total = 0;
  };
  MemInfo memInfo() const;

  // Launches cushare_spin(ns) (one thread) on `stream`.
  CUresult launchSpin(CUstream stream, unsigned long long ns) const;
  CUresult launchEmpty(CUstream stream) const;

 private:
  const DriverApi& api_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUfunction empty_ = nullptr;
};

}  // namespace cushare::gpuprobe
