// Every kernel of kernels/metal compiled as host C++ (msl_compat.hpp, address spaces empty) and
// bound by position: the convention of metal_shared.h puts the [[buffer(i)]] arguments first in
// index order, then the threadgroup pointer, the threadgroup position and the thread index, so
// parameter i < N - 3 is buffer i, whatever its type. The sources are the copies CMake prepared
// (METAL_PREPARED_DIR: [[threadgroup(0)]] renamed, as `threadgroup` is a macro here).
#include "emulated_kernels.hpp"

#include <map>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "compat/msl_compat.hpp"

#include "attn_res_mix.metal"
#include "elementwise.metal"
#include "embed.metal"
#include "experts.metal"
#include "kda.metal"
#include "matmul.metal"
#include "mla_attention.metal"
#include "norm.metal"
#include "rope.metal"
#include "router.metal"

namespace deltafin::simt {
namespace {

template <class T>
T buffer_arg(std::byte* p) {
  if constexpr (std::is_reference_v<T>) return *reinterpret_cast<std::remove_reference_t<T>*>(p);
  else return reinterpret_cast<T>(p);
}

template <class... P, size_t... I>
Kernel adapt(void (*f)(P...), std::index_sequence<I...>) {
  using Params = std::tuple<P...>;
  constexpr size_t n = sizeof...(P);
  static_assert(n >= 3 && sizeof...(I) == n - 3, "kernel parameters: buffers, threadgroup pointer, group, lid");
  using Tg = std::tuple_element_t<n - 3, Params>;
  static_assert(std::is_pointer_v<Tg>, "the threadgroup memory parameter comes after the buffers");
  return [f](const Buffers& b, Group g, uint32_t lid, std::byte* tg) {
    f(buffer_arg<std::tuple_element_t<I, Params>>(b[I])..., reinterpret_cast<Tg>(tg), uint3(g.x, g.y, g.z), lid);
  };
}

template <class... P>
Kernel adapt(void (*f)(P...)) {
  return adapt(f, std::make_index_sequence<sizeof...(P) - 3>());
}

const std::map<std::string, Kernel>& kernels() {
  static const std::map<std::string, Kernel> table = {
      {"df_fill", adapt(&df_fill)},
      {"df_copy", adapt(&df_copy)},
      {"df_binary", adapt(&df_binary)},
      {"df_embed", adapt(&df_embed)},
      {"df_rmsnorm", adapt(&df_rmsnorm)},
      {"df_rope", adapt(&df_rope)},
      {"df_matmul", adapt(&df_matmul)},
      {"df_expert_slots", adapt(&df_expert_slots)},
      {"df_expert_combine", adapt(&df_expert_combine)},
      {"df_route", adapt(&df_route)},
      {"df_mla_attention", adapt(&df_mla_attention)},
      {"df_kda_conv", adapt(&df_kda_conv)},
      {"df_kda_delta", adapt(&df_kda_delta)},
      {"df_attn_res_mix", adapt(&df_attn_res_mix)},
  };
  return table;
}

}  // namespace

std::vector<std::string> emulated_kernel_names() {
  std::vector<std::string> names;
  for (const auto& entry : kernels()) names.push_back(entry.first);  // (`kernel` is a macro here)
  return names;
}

const Kernel& emulated_kernel(const std::string& name) {
  const auto it = kernels().find(name);
  if (it == kernels().end()) throw std::runtime_error("SIMT emulator: no kernel " + name);
  return it->second;
}

}  // namespace deltafin::simt
