// The start of a run on several hosts: every host sends rank 0 a Hello saying what it runs, and
// rank 0 refuses, in one line naming the host, a host that could not open its experts or runs
// another build (wire version, deltafin version, commit), another model, another placement or
// another backend (a different SIMD target gives different bits; DELTAFIN_SIMD sets one).
#pragma once

#include <string>
#include <vector>

#include "hosts/host_group.hpp"
#include "hosts/wire.hpp"

namespace deltafin::hosts {

// This build's version: the wire version, deltafin's version and the commit it was built from.
std::string build_version();

// Rank 0: the Hello of every rank (index = rank; rank 0's is `mine`), waiting at most `timeout`
// seconds in all. Throws deltafin::Error naming the first host that does not match or answer.
std::vector<Hello> meet_hosts(HostGroup& group, const Hello& mine, double timeout);

// "host <name> (rank r)", as every message names a host.
std::string host_label(const std::string& name, int rank);

}  // namespace deltafin::hosts
