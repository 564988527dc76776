// encode / decode of the hosts' messages (see wire.hpp).
#include "hosts/wire.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "util/error.hpp"

namespace deltafin::hosts {
namespace {

class Writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof v);
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    append(v.data(), v.size() * sizeof(T));
  }
  void put(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  Bytes out;

 private:
  void append(const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n) std::memcpy(out.data() + at, p, n);
  }
};

class Reader {
 public:
  Reader(const Bytes& b, int from) : bytes_(b), from_(from) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof v);
    return v;
  }
  template <class T>
  std::vector<T> vec() {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / sizeof(T)) bad("a list of {} items is longer than the message", n);
    std::vector<T> v(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  std::string str() {
    const uint64_t n = get<uint64_t>();
    if (n > bytes_.size() - at_) bad("a text of {} bytes is longer than the message", n);
    std::string s(n, '\0');
    take(s.data(), n);
    return s;
  }
  void end() const {
    if (at_ != bytes_.size()) bad("{} bytes left over", bytes_.size() - at_);
  }
  template <class... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> what, Args&&... args) const {
    fail("a message from rank {} is malformed: {}", from_, fmt::format(what, std::forward<Args>(args)...));
  }

 private:
  void take(void* dst, size_t n) {
    if (n > bytes_.size() - at_) bad("truncated at byte {} of {}", at_, bytes_.size());
    if (n) std::memcpy(dst, bytes_.data() + at_, n);
    at_ += n;
  }
  const Bytes& bytes_;
  int from_;
  size_t at_ = 0;
};

struct Encoder {
  Writer& w;
  void operator()(const Hello& m) {
    w.put(m.version), w.put(m.host), w.put(m.model), w.put(m.placement), w.put(m.backend), w.put(m.error);
  }
  void operator()(const Request& m) { w.put(m.layer), w.put(m.experts), w.put(m.first); }
  void operator()(const Run& m) {
    w.put(m.layer), w.put(m.n), w.put(m.k), w.put(m.in), w.put(m.width);
    w.put<uint8_t>(m.act.kind), w.put(m.act.beta), w.put(m.act.linear_beta);
    w.put(m.experts), w.put(m.all), w.put(m.ids), w.put(m.x);
  }
  void operator()(const Result& m) { w.put(m.layer), w.put(m.in), w.put(m.slots), w.put(m.rows), w.put(m.failed), w.put(m.failure), w.put(m.counters); }
  void operator()(const Stop&) {}
  void operator()(const Failure& m) { w.put(m.message); }
};

void check_ascending(Reader& r, const std::vector<int32_t>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || (i && v[i] <= v[i - 1])) r.bad("{} are not ascending and distinct ids", what);
}

}  // namespace

std::vector<int32_t> result_slots(std::span<const int32_t> ids, std::span<const int32_t> experts,
                                  std::span<const int32_t> failed) {
  std::vector<int32_t> slots;
  for (size_t s = 0; s < ids.size(); ++s)
    if (std::binary_search(experts.begin(), experts.end(), ids[s]) && !std::binary_search(failed.begin(), failed.end(), ids[s]))
      slots.push_back(static_cast<int32_t>(s));
  return slots;
}

Bytes encode(const Message& message) {
  Writer w;
  w.put<uint8_t>(static_cast<uint8_t>(message.index()));
  std::visit(Encoder{w}, message);
  return std::move(w.out);
}

Message decode(const Bytes& bytes, int from) {
  Reader r(bytes, from);
  const auto kind = r.get<uint8_t>();
  Message m;
  switch (kind) {
    case 0: {
      Hello h;
      h.version = r.str(), h.host = r.str(), h.model = r.str(), h.placement = r.str(), h.backend = r.str(), h.error = r.str();
      m = std::move(h);
      break;
    }
    case 1: {
      Request q;
      q.layer = r.get<int64_t>(), q.experts = r.vec<int32_t>(), q.first = r.vec<int64_t>();
      check_ascending(r, q.experts, "a request's experts");
      if (q.first.size() != q.experts.size()) r.bad("{} first positions for {} experts", q.first.size(), q.experts.size());
      m = std::move(q);
      break;
    }
    case 2: {
      Run u;
      u.layer = r.get<int64_t>(), u.n = r.get<int64_t>(), u.k = r.get<int64_t>(), u.in = r.get<int64_t>(), u.width = r.get<int64_t>();
      const auto act = r.get<uint8_t>();
      if (act > GatedActivation::kSiTU) r.bad("activation {} is unknown", act);
      u.act.kind = static_cast<GatedActivation::Kind>(act), u.act.beta = r.get<float>(), u.act.linear_beta = r.get<float>();
      u.experts = r.vec<int32_t>(), u.all = r.vec<int32_t>(), u.ids = r.vec<int32_t>(), u.x = r.vec<float>();
      check_ascending(r, u.experts, "a run's experts");
      check_ascending(r, u.all, "a run's union");
      for (int32_t e : u.experts)
        if (!std::binary_search(u.all.begin(), u.all.end(), e)) r.bad("a run's expert {} is not in its union", e);
      constexpr int64_t kMost = int64_t{1} << 40;
      if (u.layer < 0 || u.n < 1 || u.k < 1 || u.in < 1 || u.width < 1 || u.n > kMost / u.k || u.n > kMost / u.in)
        r.bad("a run of layer {} over [{}, {}] with input {} and width {}", u.layer, u.n, u.k, u.in, u.width);
      if (u.ids.size() != static_cast<size_t>(u.n * u.k) || u.x.size() != static_cast<size_t>(u.n * u.in))
        r.bad("a run over {} positions carries {} ids and {} inputs", u.n, u.ids.size(), u.x.size());
      m = std::move(u);
      break;
    }
    case 3: {
      Result s;
      s.layer = r.get<int64_t>(), s.in = r.get<int64_t>(), s.slots = r.vec<int32_t>(), s.rows = r.vec<float>();
      s.failed = r.vec<int32_t>(), s.failure = r.str(), s.counters = r.get<HostCounters>();
      check_ascending(r, s.slots, "a result's slots");
      check_ascending(r, s.failed, "a result's failed experts");
      if (s.in < 1 || s.rows.size() != s.slots.size() * static_cast<size_t>(s.in))
        r.bad("a result of {} slots carries {} values (input {})", s.slots.size(), s.rows.size(), s.in);
      m = std::move(s);
      break;
    }
    case 4: m = Stop{}; break;
    case 5: m = Failure{r.str()}; break;
    default: r.bad("kind {} is unknown", kind);
  }
  r.end();
  return m;
}

}  // namespace deltafin::hosts
