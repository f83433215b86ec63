// A small JSON reader and writer for the runner's wire format (no third-party dependencies).
//
// The reader accepts one JSON value with bounded nesting; numbers keep whether they were written as
// integers (no '.', 'e' or 'E') so that scalar arguments keep their type. Strings accept the standard
// escapes; \u escapes outside ASCII are refused (the trusted side never sends them). The writer escapes
// every control character, so a reply is always one valid JSON object whatever text it carries.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ptxrunner {

struct Json {
  enum Kind { kNull, kBool, kInt, kFloat, kString, kArray, kObject } kind = kNull;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json& at(const std::string& key) const {
    auto it = fields.find(key);
    if (kind != kObject || it == fields.end()) throw std::runtime_error("missing field '" + key + "'");
    return it->second;
  }
  bool has(const std::string& key) const { return kind == kObject && fields.count(key) > 0; }
  int64_t as_int(const char* what) const {
    if (kind != kInt) throw std::runtime_error(std::string(what) + " must be an integer");
    return i;
  }
  const std::string& as_str(const char* what) const {
    if (kind != kString) throw std::runtime_error(std::string(what) + " must be a string");
    return s;
  }
  const std::vector<Json>& as_array(const char* what) const {
    if (kind != kArray) throw std::runtime_error(std::string(what) + " must be an array");
    return items;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : t_(text) {}

  Json parse() {
    Json v = value(0);
    ws();
    if (p_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 16;
  const std::string& t_;
  size_t p_ = 0;

  [[noreturn]] void fail(const char* why) const {
    throw std::runtime_error(std::string("bad JSON at byte ") + std::to_string(p_) + ": " + why);
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\n' || t_[p_] == '\r' || t_[p_] == '\t')) ++p_;
  }
  bool lit(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (t_.compare(p_, n, word) != 0) return false;
    p_ += n;
    return true;
  }
  Json value(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    ws();
    if (p_ >= t_.size()) fail("unexpected end");
    Json v;
    char c = t_[p_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      v.kind = Json::kString;
      v.s = string();
    } else if (lit("true")) {
      v.kind = Json::kBool;
      v.b = true;
    } else if (lit("false")) {
      v.kind = Json::kBool;
    } else if (lit("null")) {
      v.kind = Json::kNull;
    } else {
      v = number();
    }
    return v;
  }
  Json object(int depth) {
    Json v;
    v.kind = Json::kObject;
    ++p_;
    ws();
    if (p_ < t_.size() && t_[p_] == '}') return ++p_, v;
    while (true) {
      ws();
      if (p_ >= t_.size() || t_[p_] != '"') fail("expected a key");
      std::string key = string();
      ws();
      if (p_ >= t_.size() || t_[p_++] != ':') fail("expected ':'");
      v.fields[key] = value(depth + 1);
      ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == '}') return ++p_, v;
      fail("expected ',' or '}'");
    }
  }
  Json array(int depth) {
    Json v;
    v.kind = Json::kArray;
    ++p_;
    ws();
    if (p_ < t_.size() && t_[p_] == ']') return ++p_, v;
    while (true) {
      v.items.push_back(value(depth + 1));
      ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == ']') return ++p_, v;
      fail("expected ',' or ']'");
    }
  }
  std::string string() {
    std::string out;
    ++p_;
    while (p_ < t_.size() && t_[p_] != '"') {
      char c = t_[p_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) fail("unfinished escape");
      char e = t_[p_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (p_ + 4 > t_.size()) fail("short \\u escape");
          unsigned code = static_cast<unsigned>(std::strtoul(t_.substr(p_, 4).c_str(), nullptr, 16));
          if (code == 0 || code > 0x7f) fail("\\u escape outside ASCII");
          out += static_cast<char>(code);
          p_ += 4;
          break;
        }
        default: fail("unknown escape");
      }
    }
    if (p_ >= t_.size()) fail("unterminated string");
    ++p_;
    return out;
  }
  Json number() {
    size_t start = p_;
    bool is_float = false;
    if (p_ < t_.size() && t_[p_] == '-') ++p_;
    while (p_ < t_.size()) {
      char c = t_[p_];
      if (c == '.' || c == 'e' || c == 'E' || c == '+' || (c == '-' && p_ > start)) {
        is_float = true;
      } else if (c < '0' || c > '9') {
        break;
      }
      ++p_;
    }
    std::string tok = t_.substr(start, p_ - start);
    if (tok.empty() || tok == "-") fail("expected a value");
    Json v;
    char* end = nullptr;
    errno = 0;
    if (is_float) {
      v.kind = Json::kFloat;
      v.f = std::strtod(tok.c_str(), &end);
    } else {
      v.kind = Json::kInt;
      v.i = std::strtoll(tok.c_str(), &end, 10);
    }
    if (end != tok.c_str() + tok.size() || errno == ERANGE) fail("bad number");
    return v;
  }
};

// Builds one JSON object: add fields in order, then str().
class JsonWriter {
 public:
  JsonWriter& num(const char* key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonWriter& real(const char* key, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return raw(key, buf);
  }
  JsonWriter& boolean(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonWriter& text(const char* key, const std::string& v) { return raw(key, quote(v)); }
  JsonWriter& object(const char* key, const JsonWriter& inner) { return raw(key, inner.str()); }
  JsonWriter& null(const char* key) { return raw(key, "null"); }
  // A value already written as JSON text (by another writer of this runner, never by the candidate).
  JsonWriter& json(const char* key, const std::string& text) { return raw(key, text); }
  // Append every field of `other` (which must not repeat a key of this one).
  JsonWriter& merge(const JsonWriter& other) {
    if (!body_.empty() && !other.body_.empty()) body_ += ',';
    body_ += other.body_;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

  static std::string quote(const std::string& v) {
    std::string out = "\"";
    for (char c : v) {
      unsigned char u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (u < 0x20 || u >= 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", u);  // bytes past ASCII become code points <= 0xff
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }

 private:
  std::string body_;
  JsonWriter& raw(const char* key, const std::string& v) {
    if (!body_.empty()) body_ += ',';
    body_ += quote(key) + ":" + v;
    return *this;
  }
};

}  // namespace ptxrunner
