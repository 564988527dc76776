// The JSON Schema compiler of structured output (see json_schema.hpp).
#include "text/json_schema.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

namespace deltafin {
namespace {

constexpr int kMaxDepth = 64;       // schema nesting (a deeper schema is refused)
constexpr size_t kMaxProperties = 64;

constexpr std::array<std::string_view, 12> kAnnotations = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions"};
constexpr std::array<std::string_view, 13> kSupported = {
    "type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "$ref",
    "minItems", "maxItems", "minLength", "maxLength"};

template <size_t N>
bool among(const std::array<std::string_view, N>& set, std::string_view key) {
  return std::find(set.begin(), set.end(), key) != set.end();
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

uint8_t type_bit(const std::string& name, const std::string& path) {
  if (name == "null") return kTypeNull;
  if (name == "boolean") return kTypeBoolean;
  if (name == "integer") return kTypeInteger;
  if (name == "number") return kTypeNumber | kTypeInteger;
  if (name == "string") return kTypeString;
  if (name == "array") return kTypeArray;
  if (name == "object") return kTypeObject;
  throw SchemaError(path, "unknown type \"" + name + "\"");
}

bool literal_has_type(const JsonValue& v, uint8_t types) {
  switch (v.type()) {
    case JsonValue::Type::Null: return types & kTypeNull;
    case JsonValue::Type::Bool: return types & kTypeBoolean;
    case JsonValue::Type::Integer: return types & (kTypeInteger | kTypeNumber);
    case JsonValue::Type::Float:
      return (types & kTypeNumber) || ((types & kTypeInteger) && v.as_number() == static_cast<double>(static_cast<int64_t>(v.as_number())));
    case JsonValue::Type::String: return types & kTypeString;
    case JsonValue::Type::Array: return types & kTypeArray;
    case JsonValue::Type::Object: return types & kTypeObject;
  }
  return false;
}

class Compiler {
 public:
  Compiler(const JsonValue& document, SchemaMode mode) : document_(document), strict_(mode == SchemaMode::kStrict) {}

  CompiledSchema run() {
    out_.root = compile(document_, "", 0);
    if (out_.root == CompiledSchema::kNever) throw SchemaError("", "no document satisfies the schema");
    SchemaNode& root = out_.nodes[out_.root];
    if (root.any_of.empty() && !root.has_literals && !(root.types & kTypeObject))
      throw SchemaError(document_.is_object() && document_.find("type") ? "type" : "", "the top level must be an object");
    return std::move(out_);
  }

 private:
  int32_t compile(const JsonValue& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) throw SchemaError(path, "nested too deeply (at most 64 levels)");
    if (s.type() == JsonValue::Type::Bool) return s.as_bool() ? CompiledSchema::kAnyNode : CompiledSchema::kNever;
    if (!s.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
    std::map<std::string_view, const JsonValue*> kw;
    for (const auto& [key, value] : s.members()) {
      if (among(kAnnotations, key)) continue;
      if (among(kSupported, key)) {
        kw.emplace(key, &value);
      } else if (!strict_ && key == "oneOf") {
        kw.emplace("anyOf", &value);  // lenient: oneOf read as anyOf (weaker, never wrong)
      } else if (strict_) {
        throw SchemaError(join(path, key), "keyword not supported for structured output");
      }
    }
    // Keywords that replace the node's own: the others beside them are refused (strict) or ignored.
    for (std::string_view lead : {"$ref", "anyOf"}) {
      if (!kw.count(lead)) continue;
      for (const auto& [key, value] : kw)
        if (key != lead && strict_) throw SchemaError(join(path, key), "not supported beside " + std::string(lead));
      return lead == "$ref" ? reference(*kw[lead], join(path, lead), depth) : any_of(*kw[lead], join(path, lead), depth);
    }
    const int32_t index = static_cast<int32_t>(out_.nodes.size());
    out_.nodes.emplace_back();
    SchemaNode node;
    if (auto it = kw.find("type"); it != kw.end()) node.types = types(*it->second, join(path, "type"));
    if (kw.count("enum") || kw.count("const")) {
      for (const auto& [key, value] : kw)
        if (key != "type" && key != "enum" && key != "const" && strict_)
          throw SchemaError(join(path, key), "not supported beside enum or const");
      literals(kw, path, node);
      out_.nodes[index] = std::move(node);
      return index;
    }
    count(kw, "minItems", path, node.min_items);
    count(kw, "maxItems", path, node.max_items);
    count(kw, "minLength", path, node.min_length);
    count(kw, "maxLength", path, node.max_length);
    if (node.min_items > node.max_items) throw SchemaError(join(path, "minItems"), "larger than maxItems");
    if (node.min_length > node.max_length) throw SchemaError(join(path, "minLength"), "larger than maxLength");
    if (auto it = kw.find("items"); it != kw.end()) {
      if (it->second->is_array()) {
        if (strict_) throw SchemaError(join(path, "items"), "items as a list (tuples) is not supported");
      } else {
        node.items = compile(*it->second, join(path, "items"), depth + 1);
        if (node.items == CompiledSchema::kNever) node.items = CompiledSchema::kAnyNode, node.max_items = 0;
      }
    }
    if (auto it = kw.find("additionalProperties"); it != kw.end())
      node.additional = compile(*it->second, join(path, "additionalProperties"), depth + 1);
    if (auto it = kw.find("properties"); it != kw.end()) {
      const std::string where = join(path, "properties");
      if (!it->second->is_object()) throw SchemaError(where, "must be an object");
      for (const JsonValue::Member& member : it->second->members()) {
        const std::string& name = member.first;
        if (std::any_of(node.properties.begin(), node.properties.end(), [&](const auto& p) { return p.name == name; }))
          continue;  // a repeated key: the first counts (as JsonValue::find)
        node.properties.push_back({name, python_json_string(name).substr(1), compile(member.second, join(where, name), depth + 1), false});
      }
    }
    if (auto it = kw.find("required"); it != kw.end()) required(*it->second, join(path, "required"), node);
    if (node.properties.size() > kMaxProperties) throw SchemaError(join(path, "properties"), "at most 64 properties");
    out_.nodes[index] = std::move(node);
    return index;
  }

  uint8_t types(const JsonValue& t, const std::string& path) {
    if (t.is_string()) return type_bit(t.as_string(), path);
    if (!t.is_array() || t.items().empty()) throw SchemaError(path, "must be a type name or a non-empty list of them");
    uint8_t bits = 0;
    for (const JsonValue& name : t.items()) {
      if (!name.is_string()) throw SchemaError(path, "must be a type name or a non-empty list of them");
      bits |= type_bit(name.as_string(), path);
    }
    return bits;
  }

  void count(const std::map<std::string_view, const JsonValue*>& kw, std::string_view key, const std::string& path,
             uint32_t& out) {
    auto it = kw.find(key);
    if (it == kw.end()) return;
    const JsonValue& v = *it->second;
    const bool integral = v.type() == JsonValue::Type::Integer ||
                          (v.type() == JsonValue::Type::Float && v.as_number() == static_cast<double>(static_cast<int64_t>(v.as_number())));
    if (!integral || v.as_number() < 0) throw SchemaError(join(path, key), "must be a non-negative integer");
    out = static_cast<uint32_t>(std::min(v.as_number(), 4294967294.0));
  }

  void literals(const std::map<std::string_view, const JsonValue*>& kw, const std::string& path, SchemaNode& node) {
    std::vector<const JsonValue*> values;
    if (auto it = kw.find("enum"); it != kw.end()) {
      if (!it->second->is_array()) throw SchemaError(join(path, "enum"), "must be a list");
      for (const JsonValue& v : it->second->items()) values.push_back(&v);
    }
    if (auto it = kw.find("const"); it != kw.end()) {
      const JsonValue* c = it->second;
      if (kw.count("enum")) {
        const bool listed = std::any_of(values.begin(), values.end(), [&](const JsonValue* v) { return *v == *c; });
        values.clear();
        if (listed) values.push_back(c);
      } else {
        values.push_back(c);
      }
    }
    node.has_literals = true;
    for (const JsonValue* v : values) {
      if (!literal_has_type(*v, node.types)) continue;
      const std::string text = write_json(*v, {.compact = true});
      auto it = std::find(out_.literals.begin(), out_.literals.end(), text);
      const int32_t id = static_cast<int32_t>(it - out_.literals.begin());
      if (it == out_.literals.end()) out_.literals.push_back(text);
      if (std::find(node.literals.begin(), node.literals.end(), id) == node.literals.end()) node.literals.push_back(id);
    }
    if (node.literals.empty())
      throw SchemaError(join(path, kw.count("enum") ? "enum" : "const"), "no value allowed (empty, or none of the allowed types)");
  }

  void required(const JsonValue& names, const std::string& path, SchemaNode& node) {
    if (!names.is_array()) throw SchemaError(path, "must be a list of property names");
    for (const JsonValue& name : names.items()) {
      if (!name.is_string()) throw SchemaError(path, "must be a list of property names");
      auto it = std::find_if(node.properties.begin(), node.properties.end(),
                             [&](const auto& p) { return p.name == name.as_string(); });
      if (it == node.properties.end()) {  // required but not described: its value is an additional property's
        node.properties.push_back({name.as_string(), python_json_string(name.as_string()).substr(1), node.additional, false});
        it = node.properties.end() - 1;
      }
      if (it->node == CompiledSchema::kNever)
        throw SchemaError(path, "\"" + name.as_string() + "\" is required but may not appear");
      it->required = true;
    }
  }

  int32_t any_of(const JsonValue& list, const std::string& path, int depth) {
    if (!list.is_array() || list.items().empty()) throw SchemaError(path, "must be a non-empty list of schemas");
    SchemaNode node;
    for (size_t i = 0; i < list.items().size(); ++i) {
      const int32_t alt = compile(list.items()[i], join(path, std::to_string(i)), depth + 1);
      if (alt != CompiledSchema::kNever && std::find(node.any_of.begin(), node.any_of.end(), alt) == node.any_of.end())
        node.any_of.push_back(alt);
    }
    if (node.any_of.empty()) throw SchemaError(path, "no alternative can be satisfied");
    out_.nodes.push_back(std::move(node));
    return static_cast<int32_t>(out_.nodes.size() - 1);
  }

  // A local reference ("#", "#/$defs/Name", any JSON pointer into this schema), compiled once:
  // recursive schemas refer to the node being compiled.
  int32_t reference(const JsonValue& ref, const std::string& path, int depth) {
    if (!ref.is_string()) throw SchemaError(path, "must be a string");
    const std::string& target = ref.as_string();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.empty() || target[0] != '#') {
      if (strict_) throw SchemaError(path, "only local references (\"#/...\") are supported");
      return CompiledSchema::kAnyNode;
    }
    const JsonValue* at = &document_;
    std::string where;
    for (size_t from = 1; from < target.size();) {
      if (target[from] != '/') throw SchemaError(path, "not a JSON pointer: " + target);
      size_t end = target.find('/', from + 1);
      if (end == std::string::npos) end = target.size();
      std::string token;  // ~1 is '/', ~0 is '~'
      for (size_t k = from + 1; k < end; ++k) {
        const bool escape = target[k] == '~' && k + 1 < end && (target[k + 1] == '0' || target[k + 1] == '1');
        token += escape ? (target[++k] == '0' ? '~' : '/') : target[k];
      }
      const JsonValue* next = nullptr;
      if (at->is_object()) {
        next = at->find(token);
      } else if (at->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 token.size() < 10 && std::stoul(token) < at->items().size()) {
        next = &at->items()[std::stoul(token)];
      }
      if (!next) throw SchemaError(path, "no schema at " + target);
      at = next;
      where = join(where, token);
      from = end;
    }
    // An alias node (anyOf of one), so that a recursive reference finds it while it is compiled.
    const int32_t alias = static_cast<int32_t>(out_.nodes.size());
    out_.nodes.emplace_back();
    refs_.emplace(target, alias);
    const int32_t compiled = compile(*at, where, depth + 1);
    if (compiled == CompiledSchema::kNever) {
      out_.nodes[alias].has_literals = true;  // no literal: nothing matches
    } else {
      out_.nodes[alias].any_of = {compiled};
    }
    return alias;
  }

  const JsonValue& document_;
  bool strict_;
  CompiledSchema out_;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

CompiledSchema compile_json_schema(const JsonValue& schema, SchemaMode mode) { return Compiler(schema, mode).run(); }

CompiledSchema json_object_schema() {
  CompiledSchema schema;
  SchemaNode object;
  object.types = kTypeObject;
  schema.nodes.push_back(object);
  schema.root = 1;
  return schema;
}

}  // namespace deltafin
