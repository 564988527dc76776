// The Metal Shading Language subset of kernels/metal as C++, for the Linux checks (tests/metal).
// Two modes, one set of declarations:
//   MSL_COMPAT_CHECK  clang -fsyntax-only type checking: device, constant and threadgroup are
//                     clang address spaces 1, 2 and 3, so passing a pointer of one space where
//                     another is expected is an error, as under Apple's compiler;
//   otherwise         the kernels compiled as host code for the SIMT emulator (simt.hpp): the
//                     address spaces vanish and the simd_* and barrier functions call the
//                     emulator's scheduler.
// Vectors are structs with explicit constructors; they load from any address space but are
// stored into device or threadgroup memory component by component (a rule of the subset that
// the check enforces). No double, no half arithmetic: half is a storage type read through
// as_type and widened with float(h).
#pragma once

#ifndef __METAL_VERSION__
#define __METAL_VERSION__ 240  // the pinned language version, MSL 2.4
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef MSL_COMPAT_CHECK
#define device __attribute__((address_space(1)))
#define constant const __attribute__((address_space(2)))  // read-only, as in MSL
#define threadgroup __attribute__((address_space(3)))
#else
#define device
#define constant
#define threadgroup
#endif
#define thread
#define kernel

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

namespace metal {

// 16-bit IEEE binary16 storage (no arithmetic in the subset).
struct half {
  ushort bits;
  explicit operator float() const {
    const uint sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu;
    uint out;
    if (exp == 0x1f) out = sign | 0x7f800000u | (man << 13);  // inf, NaN
    else if (exp != 0) out = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) out = sign;
    else {  // subnormal: normalise
      int e = -1;
      uint m = man;
      do { m <<= 1; ++e; } while ((m & 0x400u) == 0);
      out = sign | ((uint)(112 - e) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
  }
};

template <class T, int N>
struct vec;

#define MSL_VEC_LOADS(V)                             \
  V() = default;                                     \
  V(const V&) = default;                             \
  V& operator=(const V&) = default;                  \
  MSL_VEC_LOADS_SPACES(V)

#ifdef MSL_COMPAT_CHECK
#define MSL_VEC_LOADS_SPACES(V)                      \
  V(const device V& o) { std::memcpy(this, (const void*)&o, sizeof(V)); } \
  V(constant V& o) { std::memcpy(this, (const void*)&o, sizeof(V)); } \
  V(const threadgroup V& o) { std::memcpy(this, (const void*)&o, sizeof(V)); }
#else
#define MSL_VEC_LOADS_SPACES(V)
#endif

template <class T>
struct vec<T, 2> {
  T x, y;
  MSL_VEC_LOADS(vec)
  constexpr explicit vec(T s) : x(s), y(s) {}
  constexpr explicit vec(T a, T b) : x(a), y(b) {}
  template <class U> constexpr explicit vec(vec<U, 2> o) : x(T(o.x)), y(T(o.y)) {}
  T operator[](int i) const { return i == 0 ? x : y; }
};

template <class T>
struct vec<T, 3> {
  T x, y, z;
  MSL_VEC_LOADS(vec)
  constexpr explicit vec(T s) : x(s), y(s), z(s) {}
  constexpr explicit vec(T a, T b, T c) : x(a), y(b), z(c) {}
  template <class U> constexpr explicit vec(vec<U, 3> o) : x(T(o.x)), y(T(o.y)), z(T(o.z)) {}
  T operator[](int i) const { return i == 0 ? x : i == 1 ? y : z; }
};

template <class T>
struct vec<T, 4> {
  T x, y, z, w;
  MSL_VEC_LOADS(vec)
  constexpr explicit vec(T s) : x(s), y(s), z(s), w(s) {}
  constexpr explicit vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  template <class U> constexpr explicit vec(vec<U, 4> o) : x(T(o.x)), y(T(o.y)), z(T(o.z)), w(T(o.w)) {}
  T operator[](int i) const { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

// Component-wise arithmetic of same-typed vectors and of a vector with its scalar.
#define MSL_VEC_OP(op)                                                                             \
  template <class T, int N> vec<T, N> operator op(vec<T, N> a, vec<T, N> b) {                      \
    vec<T, N> r; T* pr = &r.x; const T* pa = &a.x; const T* pb = &b.x;                              \
    for (int i = 0; i < N; ++i) pr[i] = pa[i] op pb[i];                                             \
    return r;                                                                                      \
  }                                                                                                \
  template <class T, int N> vec<T, N> operator op(vec<T, N> a, T s) { return a op vec<T, N>(s); }  \
  template <class T, int N> vec<T, N> operator op(T s, vec<T, N> a) { return vec<T, N>(s) op a; }
MSL_VEC_OP(+)
MSL_VEC_OP(-)
MSL_VEC_OP(*)
MSL_VEC_OP(/)
#undef MSL_VEC_OP

template <class T, int N> T dot(vec<T, N> a, vec<T, N> b) {
  const T* pa = &a.x; const T* pb = &b.x;
  T s = pa[0] * pb[0];
  for (int i = 1; i < N; ++i) s = std::fma(pa[i], pb[i], s);
  return s;
}

// Bit reinterpretation between types of one size.
template <class To, class From> To as_type(From v) {
  static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
  To t;
  std::memcpy((void*)&t, (const void*)&v, sizeof(To));
  return t;
}

// Math: the precise (no fast-math) functions of float the kernels use.
inline float exp(float x) { return std::exp(x); }
inline float tanh(float x) { return std::tanh(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float sin(float x) { return std::sin(x); }
inline float cos(float x) { return std::cos(x); }
inline float floor(float x) { return std::floor(x); }
inline float rint(float x) { return std::rint(x); }
inline float abs(float x) { return std::fabs(x); }
inline bool isnan(float x) { return std::isnan(x); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline uint popcount(uint x) { return (uint)__builtin_popcount(x); }

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }

// Synchronisation and simdgroup functions (simdgroup width 32). In the emulator they block the
// calling lane until every lane of its threadgroup (barriers) or simdgroup (simd_*) arrives;
// reductions run over lanes 0..31 in that order, so results are the same on every run.
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);
float simd_sum(float x);
float simd_max(float x);
float simd_shuffle(float x, ushort lane);
int simd_shuffle(int x, ushort lane);
uint simd_shuffle(uint x, ushort lane);
float simd_shuffle_xor(float x, ushort mask);
int simd_shuffle_xor(int x, ushort mask);
float simd_broadcast(float x, ushort lane);
int simd_broadcast(int x, ushort lane);
uint simd_broadcast(uint x, ushort lane);

}  // namespace metal

typedef metal::half half;
typedef metal::vec<float, 2> float2;
typedef metal::vec<float, 3> float3;
typedef metal::vec<float, 4> float4;
typedef metal::vec<int, 2> int2;
typedef metal::vec<int, 4> int4;
typedef metal::vec<uint, 2> uint2;
typedef metal::vec<uint, 3> uint3;
typedef metal::vec<uint, 4> uint4;
typedef metal::vec<uchar, 4> uchar4;
typedef metal::vec<ushort, 2> ushort2;
typedef metal::vec<ushort, 4> ushort4;

// Metal has no double: any use fails the type check.
#ifdef MSL_COMPAT_CHECK
#define double msl_subset_has_no_double
#endif
