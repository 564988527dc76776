// The JSON document matcher of structured output (see json_matcher.hpp).
#include "text/json_matcher.hpp"

#include <algorithm>

namespace deltafin {
namespace {

enum Kind : uint8_t { kRoot, kValue, kObject, kArray, kString, kKeyName, kKeyFree, kLiteral, kNumber };
constexpr uint32_t kAdditional = 0xFFFFFFFF;  // object aux: the pending value is an additional property's
constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;

// Number phases: which bytes came last; the complete ones end at any other byte.
enum NumberPhase : uint8_t { kMinus = 1, kZero, kInt, kDot, kFrac, kExpMark, kExpSign, kExp };

bool is_ws(uint8_t b) { return b == ' ' || b == '\n' || b == '\r' || b == '\t'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
int hex_value(uint8_t b) {
  if (is_digit(b)) return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10;
  return -1;
}

uint64_t fnv(std::string_view s) {
  uint64_t h = kFnvOffset;
  for (unsigned char c : s) h = (h ^ c) * kFnvPrime;
  return h;
}

// One byte >= 0x80 of a string's UTF-8 (RFC 3629: no overlongs, surrogates or code points past
// U+10FFFF). f.utf8: continuation bytes due (bits 0-1), the allowed range of the next (bits 2-4).
// Returns false when the byte cannot come; `starts` is set when it begins a character.
bool utf8_byte(JsonMatcher::Frame& f, uint8_t b, bool& starts) {
  static constexpr uint8_t lo[] = {0x80, 0xA0, 0x80, 0x90, 0x80}, hi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
  const unsigned due = f.utf8 & 3, range = f.utf8 >> 2;
  starts = due == 0;
  if (due > 0) {
    if (b < lo[range] || b > hi[range]) return false;
    f.utf8 = static_cast<uint8_t>(due - 1);
    return true;
  }
  if (b >= 0xC2 && b <= 0xDF) f.utf8 = 1;
  else if (b == 0xE0) f.utf8 = 2 | (1 << 2);
  else if (b == 0xED) f.utf8 = 2 | (2 << 2);
  else if (b >= 0xE1 && b <= 0xEF) f.utf8 = 2;
  else if (b == 0xF0) f.utf8 = 3 | (3 << 2);
  else if (b >= 0xF1 && b <= 0xF3) f.utf8 = 3;
  else if (b == 0xF4) f.utf8 = 3 | (4 << 2);
  else return false;
  return true;
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const CompiledSchema> schema) : schema_(std::move(schema)) {
  for (const SchemaNode& node : schema_->nodes) {
    std::vector<uint64_t> hashes;
    for (const SchemaProperty& p : node.properties) hashes.push_back(fnv(p.name));
    key_hashes_.push_back(std::move(hashes));
  }
  Frame root;
  root.kind = kRoot;
  arena_.push_back(root);
  threads_.push_back(0);
}

int32_t JsonMatcher::add(const Frame& frame) {
  arena_.push_back(frame);
  return static_cast<int32_t>(arena_.size() - 1);
}

uint32_t JsonMatcher::depth(int32_t top) const {
  uint32_t d = 0;
  for (; top >= 0; top = arena_[top].parent) d += arena_[top].kind == kObject || arena_[top].kind == kArray;
  return d;
}

bool JsonMatcher::push(uint8_t byte) {
  const size_t arena_before = arena_.size();
  next_.clear();
  expansions_ = 0;
  for (int32_t top : threads_) step(top, byte, next_);
  if (next_.empty()) {
    arena_.resize(arena_before);
    return false;
  }
  if (next_.size() > kMaxThreads) next_.resize(kMaxThreads);
  history_.push_back({arena_before, thread_log_.size(), threads_.size()});
  thread_log_.insert(thread_log_.end(), threads_.begin(), threads_.end());
  threads_.swap(next_);
  return true;
}

void JsonMatcher::rewind(size_t mark) {
  if (mark >= history_.size()) return;
  const Undo u = history_[mark];
  arena_.resize(u.arena);
  threads_.assign(thread_log_.begin() + static_cast<ptrdiff_t>(u.log), thread_log_.begin() + static_cast<ptrdiff_t>(u.log + u.count));
  thread_log_.resize(u.log);
  history_.resize(mark);
}

bool JsonMatcher::complete() const {
  return std::any_of(threads_.begin(), threads_.end(), [&](int32_t t) { return arena_[t].kind == kRoot && arena_[t].phase == 1; });
}

bool JsonMatcher::closed() const {
  return std::all_of(threads_.begin(), threads_.end(), [&](int32_t t) { return arena_[t].kind == kRoot && arena_[t].phase == 1; });
}

uint32_t JsonMatcher::free_text() const {
  uint32_t most = 0;
  for (int32_t t : threads_) {
    const Frame& f = arena_[t];
    if (f.utf8 & 3) return 0;
    if (f.kind == kString && f.phase == 0) {
      most = std::max(most, schema_->nodes[f.node].max_length - f.count);
    } else if (f.kind == kKeyFree) {
      most = SchemaNode::kUnbounded;
    } else {
      return 0;
    }
  }
  return most;
}

void JsonMatcher::step(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  if (is_ws(b) && f.kind != kString && f.kind != kKeyName && f.kind != kKeyFree && f.kind != kLiteral && f.kind != kNumber) {
    if (f.kind == kRoot) return;  // the document starts at its "{" and ends at its "}"
    if (f.ws >= kMaxWhitespace) return;
    ++f.ws;
    out.push_back(add(f));
    return;
  }
  switch (f.kind) {
    case kRoot:
      if (f.phase == 0 && b == '{') {
        f.phase = 1;
        f.ws = 0;
        start_value(add(f), schema_->root, b, out, 0);
      }
      return;
    case kValue: start_value(f.parent, f.node, b, out, 0); return;
    case kObject: step_object(top, b, out); return;
    case kArray: step_array(top, b, out); return;
    case kString: step_string(top, b, out); return;
    case kKeyName:
    case kKeyFree: step_key(top, b, out); return;
    case kLiteral: {
      const std::string& text = schema_->literals[f.aux];
      if (static_cast<uint8_t>(text[f.count]) != b) return;
      if (++f.count == text.size()) out.push_back(f.parent);
      else out.push_back(add(f));
      return;
    }
    case kNumber: step_number(top, b, out); return;
  }
}

void JsonMatcher::start_value(int32_t parent, int32_t node_index, uint8_t b, std::vector<int32_t>& out, int hops) {
  // anyOf alternatives expanded per byte: bounded, so that nested alternatives (a small schema can
  // nest them exponentially through $ref) cost a bounded amount of work.
  if (node_index < 0 || hops > 16 || ++expansions_ > kMaxExpansions) return;
  const SchemaNode& n = schema_->nodes[node_index];
  if (!n.any_of.empty()) {
    for (int32_t alt : n.any_of) start_value(parent, alt, b, out, hops + 1);
    return;
  }
  Frame f;
  f.parent = parent;
  f.node = node_index;
  if (n.has_literals) {
    for (int32_t id : n.literals) {
      const std::string& text = schema_->literals[id];
      if (static_cast<uint8_t>(text[0]) != b) continue;
      if (text.size() == 1) {
        out.push_back(parent);
      } else {
        f.kind = kLiteral, f.aux = static_cast<uint32_t>(id), f.count = 1;
        out.push_back(add(f));
      }
    }
    return;
  }
  auto literal = [&](uint32_t id) {
    f.kind = kLiteral, f.aux = id, f.count = 1;
    out.push_back(add(f));
  };
  if (b == '{' && (n.types & kTypeObject) && depth(parent) < kMaxDepth) {
    f.kind = kObject;
    out.push_back(add(f));
  } else if (b == '[' && (n.types & kTypeArray) && depth(parent) < kMaxDepth) {
    f.kind = kArray;
    out.push_back(add(f));
  } else if (b == '"' && (n.types & kTypeString)) {
    f.kind = kString;
    out.push_back(add(f));
  } else if ((b == '-' || is_digit(b)) && (n.types & (kTypeInteger | kTypeNumber))) {
    f.kind = kNumber;
    f.aux = !(n.types & kTypeNumber);  // integers only
    f.phase = b == '-' ? kMinus : b == '0' ? kZero : kInt;
    f.count = 1;
    out.push_back(add(f));
  } else if (b == 't' && (n.types & kTypeBoolean)) {
    literal(0);
  } else if (b == 'f' && (n.types & kTypeBoolean)) {
    literal(1);
  } else if (b == 'n' && (n.types & kTypeNull)) {
    literal(2);
  }
}

void JsonMatcher::step_object(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  const SchemaNode& n = schema_->nodes[f.node];
  auto more_keys = [&] {
    if (n.additional != CompiledSchema::kNever) return true;
    for (size_t i = 0; i < n.properties.size(); ++i)
      if (!(f.bits >> i & 1) && n.properties[i].node != CompiledSchema::kNever) return true;
    return false;
  };
  auto required_seen = [&] {
    for (size_t i = 0; i < n.properties.size(); ++i)
      if (n.properties[i].required && !(f.bits >> i & 1)) return false;
    return true;
  };
  if ((f.phase == 0 || f.phase == 3) && b == '"') {
    Frame key;
    key.parent = top;
    key.node = f.node;
    for (size_t i = 0; i < n.properties.size(); ++i) {
      if ((f.bits >> i & 1) || n.properties[i].node == CompiledSchema::kNever) continue;
      key.kind = kKeyName, key.aux = static_cast<uint32_t>(i);
      out.push_back(add(key));
    }
    if (n.additional != CompiledSchema::kNever) {
      key.kind = kKeyFree, key.aux = kAdditional, key.bits = kFnvOffset;
      out.push_back(add(key));
    }
  } else if ((f.phase == 0 || f.phase == 2) && b == '}') {
    if (required_seen()) out.push_back(f.parent);
  } else if (f.phase == 1 && b == ':') {
    f.phase = 2, f.ws = 0;
    Frame value;
    value.parent = add(f);
    value.kind = kValue;
    value.node = f.aux == kAdditional ? n.additional : n.properties[f.aux].node;
    out.push_back(add(value));
  } else if (f.phase == 2 && b == ',') {
    if (!more_keys()) return;
    f.phase = 3, f.ws = 0;
    out.push_back(add(f));
  }
}

void JsonMatcher::step_array(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  const SchemaNode& n = schema_->nodes[f.node];
  if (b == ']' && f.phase != 2) {
    if (f.count >= n.min_items) out.push_back(f.parent);
  } else if (f.phase == 1) {
    if (b == ',' && f.count < n.max_items) {
      f.phase = 2, f.ws = 0;
      out.push_back(add(f));
    }
  } else if (f.count < n.max_items) {  // the first byte of an item
    f.phase = 1, f.ws = 0, ++f.count;
    start_value(add(f), n.items, b, out, 0);
  }
}

void JsonMatcher::step_string(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  const SchemaNode& n = schema_->nodes[f.node];
  switch (f.phase) {
    case 0:  // text
      if (f.utf8 & 3) {
        bool starts;
        if (!utf8_byte(f, b, starts)) return;
      } else if (b == '"') {
        if (f.count >= n.min_length) out.push_back(f.parent);
        return;
      } else if (b == '\\') {
        if (f.count >= n.max_length) return;
        f.phase = 1;
      } else if (b < 0x20 || f.count >= n.max_length) {
        return;
      } else {
        bool starts;
        if (b >= 0x80 && !utf8_byte(f, b, starts)) return;
        ++f.count;
      }
      break;
    case 1:  // after a backslash
      if (b == 'u') {
        f.phase = 2, f.aux = 0;
      } else if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
        f.phase = 0, ++f.count;
      } else {
        return;
      }
      break;
    case 2: case 3: case 4: case 5: {  // \u and its digits
      const int v = hex_value(b);
      if (v < 0) return;
      f.aux = f.aux * 16 + static_cast<uint32_t>(v);
      if (++f.phase < 6) break;
      const uint32_t cp = f.aux;
      const bool high = cp >= 0xD800 && cp <= 0xDBFF, low = cp >= 0xDC00 && cp <= 0xDFFF;
      if (f.ws) {  // a high surrogate came: this must be its low one
        if (!low) return;
        f.ws = 0, f.phase = 0;
      } else if (low) {
        return;
      } else {
        ++f.count;
        f.ws = high;
        f.phase = high ? 6 : 0;
      }
      break;
    }
    case 6:  // a low surrogate's "\u" is due
      if (b != '\\') return;
      f.phase = 7;
      break;
    case 7:
      if (b != 'u') return;
      f.phase = 2, f.aux = 0;
      break;
  }
  out.push_back(add(f));
}

void JsonMatcher::step_key(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  const SchemaNode& n = schema_->nodes[f.node];
  if (f.kind == kKeyName) {
    const std::string& text = n.properties[f.aux].key_text;
    if (static_cast<uint8_t>(text[f.count]) != b) return;
    if (++f.count == text.size()) {
      end_key(top, f.aux, out);
    } else {
      out.push_back(add(f));
    }
    return;
  }
  if (b == '"' && !(f.utf8 & 3)) {  // the end of a free key: not one of the declared ones
    const auto& hashes = key_hashes_[f.node];
    if (std::find(hashes.begin(), hashes.end(), f.bits) == hashes.end()) end_key(top, kAdditional, out);
    return;
  }
  bool starts;
  if (b == '\\' || b < 0x20 || (b == '"') || ((b >= 0x80 || (f.utf8 & 3)) && !utf8_byte(f, b, starts))) return;
  f.bits = (f.bits ^ b) * kFnvPrime;
  out.push_back(add(f));
}

void JsonMatcher::end_key(int32_t top, uint32_t property, std::vector<int32_t>& out) {
  Frame object = arena_[arena_[top].parent];
  object.phase = 1, object.ws = 0, object.aux = property;
  if (property != kAdditional) object.bits |= uint64_t{1} << property;
  out.push_back(add(object));
}

void JsonMatcher::step_number(int32_t top, uint8_t b, std::vector<int32_t>& out) {
  Frame f = arena_[top];
  const bool integer = f.aux != 0;
  uint8_t next = 0;
  const bool digit = is_digit(b);
  switch (f.phase) {
    case kMinus: next = b == '0' ? kZero : digit ? kInt : 0; break;
    case kZero: next = !integer && b == '.' ? kDot : !integer && (b == 'e' || b == 'E') ? kExpMark : 0; break;
    case kInt: next = digit ? kInt : !integer && b == '.' ? kDot : !integer && (b == 'e' || b == 'E') ? kExpMark : 0; break;
    case kDot: next = digit ? kFrac : 0; break;
    case kFrac: next = digit ? kFrac : (b == 'e' || b == 'E') ? kExpMark : 0; break;
    case kExpMark: next = (b == '+' || b == '-') ? kExpSign : digit ? kExp : 0; break;
    case kExpSign: next = digit ? kExp : 0; break;
    case kExp: next = digit ? kExp : 0; break;
  }
  if (next != 0) {
    if (f.count >= kMaxNumberBytes) return;
    f.phase = next, ++f.count;
    out.push_back(add(f));
    return;
  }
  const bool done = f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExp;
  if (done) step(f.parent, b, out);  // the byte after the number is its container's
}

}  // namespace deltafin
