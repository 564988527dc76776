// local_device and this_rank_device (see local_device.hpp).
#include "hosts/local_device.hpp"

#include "hosts/host_group.hpp"

namespace deltafin::hosts {

LocalDevice local_device(int local_rank, int local_size, int devices) {
  if (devices <= 0 || local_size <= 0 || local_rank < 0) return {};
  const int device = local_rank % devices;
  return {device, local_size / devices + (device < local_size % devices ? 1 : 0)};
}

LocalDevice this_rank_device(int devices) {
  const HostGroup* group = host_group();
  return group ? local_device(group->local_rank(), group->local_size(), devices) : local_device(0, 1, devices);
}

}  // namespace deltafin::hosts
