// The SIMT emulator (simt.hpp) and the synchronisation functions msl_compat.hpp declares (which
// defines `kernel`, `device`, `thread`... as macros, so no name here may be one of them).
// Scheduling: every runnable lane runs, in lane order, until it blocks or finishes; then the
// blocked lanes are released: a simdgroup whose 32 lanes all wait at simd collectives, else a
// threadgroup whose lanes all wait at threadgroup_barrier. Nothing to release with lanes left:
// the kernel diverged at a barrier.
//
// Collectives: a lane deposits its value in its simdgroup's buffer of the current generation and
// blocks; on release every lane reads the 32 deposits. Two buffers alternate by generation, since
// a lane can run ahead into the next collective while slower ones still read the last one (never
// further: that collective needs them all).
#include "simt.hpp"

#include <ucontext.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compat/msl_compat.hpp"

namespace deltafin::simt {
namespace {

constexpr uint32_t kWidth = 32;
constexpr size_t kStackBytes = 64 * 1024;

enum class State : uint8_t { kRunnable, kBarrier, kSimd, kDone };
enum class Collective : uint8_t { kNone, kBarrier, kData };

struct Lane {
  ucontext_t context;
  State state = State::kRunnable;
  Collective waiting = Collective::kNone;
};

struct Scheduler {
  const LaneBody* body = nullptr;
  Group group{};
  std::byte* tg = nullptr;
  uint32_t threads = 0;
  uint32_t current = 0;
  ucontext_t main;
  std::vector<Lane> lanes;
  std::vector<char> stacks;
  std::vector<uint32_t> generation;   // per simdgroup
  std::vector<uint32_t> deposits[2];  // [threads] per generation parity
};

thread_local Scheduler* g_scheduler = nullptr;

void lane_entry() {
  Scheduler& s = *g_scheduler;
  const uint32_t lid = s.current;
  (*s.body)(s.group, lid, s.tg);
  s.lanes[lid].state = State::kDone;  // returning resumes the scheduler (uc_link)
}

void block(State state, Collective kind) {
  Scheduler& s = *g_scheduler;
  Lane& me = s.lanes[s.current];
  me.state = state;
  me.waiting = kind;
  swapcontext(&me.context, &s.main);
}

// The 32 values of the calling lane's simdgroup, in lane order, once all have deposited theirs.
const uint32_t* exchange(uint32_t bits) {
  if (!g_scheduler) throw std::logic_error("simd function called outside the SIMT emulator");
  Scheduler& s = *g_scheduler;
  const uint32_t lid = s.current, sg = lid / kWidth;
  std::vector<uint32_t>& buffer = s.deposits[s.generation[sg] & 1];
  buffer[lid] = bits;
  block(State::kSimd, Collective::kData);
  return s.deposits[(s.generation[sg] - 1) & 1].data() + sg * kWidth;
}

uint32_t lane_id() { return g_scheduler->current % kWidth; }

template <class T>
uint32_t bits_of(T v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
template <class T>
T of_bits(uint32_t b) {
  T v;
  std::memcpy(&v, &b, 4);
  return v;
}

// Releases what can be released; false when nothing could be and lanes remain.
bool release(Scheduler& s, const std::string& kernel_name) {
  bool all_done = true, released = false;
  for (uint32_t sg = 0; sg < s.threads / kWidth; ++sg) {
    uint32_t at_simd = 0, data = 0;
    for (uint32_t l = sg * kWidth; l < (sg + 1) * kWidth; ++l) {
      at_simd += s.lanes[l].state == State::kSimd;
      data += s.lanes[l].waiting == Collective::kData && s.lanes[l].state == State::kSimd;
    }
    if (at_simd == kWidth) {
      if (data != 0 && data != kWidth)
        throw std::runtime_error(kernel_name + ": lanes of a simdgroup wait at different simd collectives");
      for (uint32_t l = sg * kWidth; l < (sg + 1) * kWidth; ++l) s.lanes[l].state = State::kRunnable;
      ++s.generation[sg];
      released = true;
    }
  }
  if (released) return true;
  uint32_t at_barrier = 0, done = 0;
  for (const Lane& l : s.lanes) {
    at_barrier += l.state == State::kBarrier;
    done += l.state == State::kDone;
  }
  all_done = done == s.threads;
  if (all_done) return false;
  if (at_barrier == s.threads) {
    for (Lane& l : s.lanes) l.state = State::kRunnable;
    return true;
  }
  throw std::runtime_error(kernel_name + ": threadgroup (" + std::to_string(s.group.x) + ", " + std::to_string(s.group.y) +
                           ") diverged: " + std::to_string(at_barrier) + " lanes at threadgroup_barrier, " +
                           std::to_string(done) + " finished, the rest at simd functions of incomplete simdgroups");
}

void run_group(Scheduler& s, const std::string& kernel_name) {
  for (uint32_t lid = 0; lid < s.threads; ++lid) {
    Lane& lane = s.lanes[lid];
    lane = Lane{};
    getcontext(&lane.context);
    lane.context.uc_stack.ss_sp = s.stacks.data() + lid * kStackBytes;
    lane.context.uc_stack.ss_size = kStackBytes;
    lane.context.uc_link = &s.main;
    makecontext(&lane.context, lane_entry, 0);
  }
  std::fill(s.generation.begin(), s.generation.end(), 0u);
  do {
    for (uint32_t lid = 0; lid < s.threads; ++lid) {
      if (s.lanes[lid].state != State::kRunnable) continue;
      s.current = lid;
      swapcontext(&s.main, &s.lanes[lid].context);
    }
  } while (release(s, kernel_name));
}

}  // namespace

void run(const std::string& kernel_name, const uint32_t grid[3], uint32_t threads, uint32_t tg_bytes, const LaneBody& body) {
  if (threads == 0 || threads % kWidth != 0 || threads > 1024)
    throw std::runtime_error(kernel_name + ": " + std::to_string(threads) + " threads per threadgroup (a multiple of 32, at most 1024)");
  Scheduler s;
  s.body = &body;
  s.threads = threads;
  s.lanes.resize(threads);
  s.stacks.resize(threads * kStackBytes);
  s.generation.resize(threads / kWidth);
  s.deposits[0].resize(threads);
  s.deposits[1].resize(threads);
  std::vector<std::byte> tg(std::max<uint32_t>(tg_bytes, 16));
  Scheduler* outer = g_scheduler;
  g_scheduler = &s;
  try {
    for (uint32_t z = 0; z < grid[2]; ++z)
      for (uint32_t y = 0; y < grid[1]; ++y)
        for (uint32_t x = 0; x < grid[0]; ++x) {
          std::memset(tg.data(), 0xff, tg.size());  // NaN in every float
          s.group = {x, y, z};
          s.tg = tg.data();
          run_group(s, kernel_name);
        }
  } catch (...) {
    g_scheduler = outer;
    throw;
  }
  g_scheduler = outer;
}

}  // namespace deltafin::simt

// --- the functions msl_compat.hpp declares ----------------------------------------------------

namespace metal {

using deltafin::simt::block;
using deltafin::simt::Collective;
using deltafin::simt::exchange;
using deltafin::simt::lane_id;
using deltafin::simt::State;

void threadgroup_barrier(mem_flags) {
  if (!deltafin::simt::g_scheduler) throw std::logic_error("threadgroup_barrier outside the SIMT emulator");
  block(State::kBarrier, Collective::kBarrier);
}

void simdgroup_barrier(mem_flags) {
  if (!deltafin::simt::g_scheduler) throw std::logic_error("simdgroup_barrier outside the SIMT emulator");
  block(State::kSimd, Collective::kBarrier);
}

float simd_sum(float x) {
  const uint32_t* v = exchange(deltafin::simt::bits_of(x));
  float s = 0.0f;
  for (uint32_t l = 0; l < deltafin::simt::kWidth; ++l) s += deltafin::simt::of_bits<float>(v[l]);
  return s;
}

float simd_max(float x) {
  const uint32_t* v = exchange(deltafin::simt::bits_of(x));
  float m = deltafin::simt::of_bits<float>(v[0]);
  for (uint32_t l = 1; l < deltafin::simt::kWidth; ++l) m = std::fmax(m, deltafin::simt::of_bits<float>(v[l]));
  return m;
}

template <class T>
static T shuffle(T x, uint32_t src) {
  const uint32_t* v = exchange(deltafin::simt::bits_of(x));
  return deltafin::simt::of_bits<T>(v[src % deltafin::simt::kWidth]);
}

float simd_shuffle(float x, ushort lane) { return shuffle(x, lane); }
int simd_shuffle(int x, ushort lane) { return shuffle(x, lane); }
uint simd_shuffle(uint x, ushort lane) { return shuffle(x, lane); }
float simd_shuffle_xor(float x, ushort mask) { return shuffle(x, lane_id() ^ mask); }
int simd_shuffle_xor(int x, ushort mask) { return shuffle(x, lane_id() ^ mask); }
float simd_broadcast(float x, ushort lane) { return shuffle(x, lane); }
int simd_broadcast(int x, ushort lane) { return shuffle(x, lane); }
uint simd_broadcast(uint x, ushort lane) { return shuffle(x, lane); }

}  // namespace metal
