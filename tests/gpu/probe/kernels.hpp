// PTX for the probe's kernels, JIT-compiled by the driver at module load so
// one binary runs on any GPU the driver supports (and on fakegpu, which finds
// functions by name and times any function whose name contains "spin" by its
// first parameter).
#pragma once

namespace cushare::gpuprobe {

// cushare_spin(uint64 ns): one thread busy-waits on %globaltimer (wall-clock
// nanoseconds) for `ns`, so a kernel's duration is known without calibration.
// cushare_empty(): returns at once; used to time the launch path alone.
inline constexpr char kProbePtx[] = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry cushare_spin(.param .u64 cushare_spin_param_0)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [cushare_spin_param_0];
  mov.u64 %rd2, %globaltimer;
  add.u64 %rd3, %rd2, %rd1;
$L_spin:
  mov.u64 %rd4, %globaltimer;
  setp.lt.u64 %p1, %rd4, %rd3;
  @%p1 bra $L_spin;
  ret;
}

.visible .entry cushare_empty()
{
  ret;
}
)";

inline constexpr char kSpinKernel[] = "cushare_spin";
inline constexpr char kEmptyKernel[] = "cushare_empty";

}  // namespace cushare::gpuprobe
