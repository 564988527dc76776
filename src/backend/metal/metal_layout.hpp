// The host's view of kernels/metal/metal_shared.h: the argument structs the kernels read, with
// static_asserts on their sizes and field offsets (plain 32-bit fields, so MSL lays them out as
// C++ does; a field added on one side only fails to compile here), and the weight format codes
// checked against WeightFormat.
#pragma once

#include <cstddef>

#include "cpu/weight_view.hpp"
#include "metal/metal_shared.h"

namespace deltafin::metal {

static_assert(dfm::kF32 == uint32_t(WeightFormat::F32) && dfm::kF16 == uint32_t(WeightFormat::F16) &&
              dfm::kBF16 == uint32_t(WeightFormat::BF16) && dfm::kF8E4M3Block128 == uint32_t(WeightFormat::F8_E4M3_BLOCK128) &&
              dfm::kMXFP4 == uint32_t(WeightFormat::MXFP4) && dfm::kINT4G32 == uint32_t(WeightFormat::INT4_G32));
static_assert(dfm::kThreads % dfm::kSimdWidth == 0 && dfm::kMlaCtxTile == dfm::kThreads);

static_assert(sizeof(dfm::MatArgs) == 12 && sizeof(dfm::WeightArgs) == 20 && sizeof(dfm::ActArgs) == 12);
static_assert(sizeof(dfm::FillArgs) == 16 && offsetof(dfm::FillArgs, value) == 12);
static_assert(sizeof(dfm::CopyArgs) == 24 && offsetof(dfm::CopyArgs, dst) == 12);
static_assert(sizeof(dfm::BinaryArgs) == 52 && offsetof(dfm::BinaryArgs, op) == 36 && offsetof(dfm::BinaryArgs, act) == 40);
static_assert(sizeof(dfm::EmbedArgs) == 44 && offsetof(dfm::EmbedArgs, ids) == 20 && offsetof(dfm::EmbedArgs, out) == 32);
static_assert(sizeof(dfm::RmsnormArgs) == 28 && offsetof(dfm::RmsnormArgs, eps) == 24);
static_assert(sizeof(dfm::RopeArgs) == 36 && offsetof(dfm::RopeArgs, start) == 28 && offsetof(dfm::RopeArgs, factor) == 32);
static_assert(sizeof(dfm::MatmulArgs) == 96 && offsetof(dfm::MatmulArgs, w1) == 20 && offsetof(dfm::MatmulArgs, x) == 40 &&
              offsetof(dfm::MatmulArgs, pair) == 64 && offsetof(dfm::MatmulArgs, out_by_slot) == 80 &&
              offsetof(dfm::MatmulArgs, act) == 84);
static_assert(sizeof(dfm::ExpertSlotsArgs) == 16 && offsetof(dfm::ExpertSlotsArgs, count) == 12);
static_assert(sizeof(dfm::CombineArgs) == 36 && offsetof(dfm::CombineArgs, out) == 24);
static_assert(sizeof(dfm::RouteArgs) == 64 && offsetof(dfm::RouteArgs, experts) == 36 && offsetof(dfm::RouteArgs, scaling) == 60);
static_assert(sizeof(dfm::MlaArgs) == 96 && offsetof(dfm::MlaArgs, q) == 20 && offsetof(dfm::MlaArgs, heads) == 68 &&
              offsetof(dfm::MlaArgs, scale) == 92);
static_assert(sizeof(dfm::KdaArgs) == 120 && offsetof(dfm::KdaArgs, heads) == 96 && offsetof(dfm::KdaArgs, norm_eps) == 116);
static_assert(sizeof(dfm::MixArgs) == 20 && offsetof(dfm::MixArgs, eps) == 16);

}  // namespace deltafin::metal
