// Which GPU a rank of `mpirun -n N deltafin ...` takes on its machine: the ranks on one machine
// take its devices in turn (local rank r takes device r % D of D), so N ranks on a machine of N
// GPUs run one rank per GPU. With more ranks than devices some share a device; each then plans
// with its share of that device's memory (MemoryPool::sharers). A run without mpirun takes
// device 0. CUDA_VISIBLE_DEVICES narrows or reorders the devices as usual.
#pragma once

namespace deltafin::hosts {

struct LocalDevice {
  int device = 0;
  int sharers = 1;  // ranks of this run on that device, this one included
};

LocalDevice local_device(int local_rank, int local_size, int devices);
// This process's: host_group()'s local rank and size, or device 0 alone.
LocalDevice this_rank_device(int devices);

}  // namespace deltafin::hosts
