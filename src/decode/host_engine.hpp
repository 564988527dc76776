// The engine's side of a run on several hosts (hosts/ has the protocol):
//   serve_expert_host: ranks 1..N-1 of `mpirun -n N deltafin run|serve|logits`: opens the
//     model's expert table, this host's expert reader (its drives), a backend (under CUDA its
//     machine's next GPU: hosts/local_device.hpp) and an expert store in this host's budget
//     (--memory-gb, else the machine's default; with CUDA the device's, --device-memory-gb, else
//     its share of the device's free memory; less working memory; --cache-gb exactly when given),
//     says Hello to rank 0 and serves it until stopped.
//   open_host_experts: rank 0: meets the other hosts (each must run the same build, model,
//     placement and backend) and returns the producer the model's routed experts go through.
#pragma once

#include <deltafin/engine.hpp>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "hosts/host_experts.hpp"
#include "io/expert_store.hpp"
#include "weights/expert_table.hpp"

namespace deltafin {

int serve_expert_host(const EngineOptions& options);

// `expert_source` as open_reader() names it (a manifest path, or "shards").
std::unique_ptr<hosts::HostExperts> open_host_experts(hosts::HostGroup& group, const EngineOptions& options,
                                                      Backend& backend, ExpertStore& store, const ExpertTable& experts,
                                                      const std::string& expert_source);

// The receipt's per-host lines (rank 0 first, with this engine's own counters).
std::vector<HostReport> host_reports(const hosts::HostExperts& producer, const EngineStats& own);

}  // namespace deltafin
