// HostGroup in a build without MPI (host_group.hpp): one host only; a launch by mpirun of more
// than one rank is refused in one line.
#include <cstdlib>
#include <string>

#include "hosts/host_group.hpp"
#include "util/error.hpp"

namespace deltafin::hosts {

bool hosts_supported() { return false; }

void start_hosts(int*, char***) {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* size = std::getenv(var);
    if (size && std::string(size) != "1")
      fail("started by mpirun with {} ranks, but this deltafin was built without MPI; install Open MPI "
           "(scripts/setup.sh: libopenmpi-dev on Debian, open-mpi on macOS) and build again",
           size);
  }
}

HostGroup* host_group() { return nullptr; }
void finish_hosts() {}
void abort_hosts() { std::exit(1); }

}  // namespace deltafin::hosts
