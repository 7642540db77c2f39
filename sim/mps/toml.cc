#include "sim/mps/toml.h"

#include <charconv>
#include <set>

namespace gpuslice::sim::mps {
namespace {

bool IsBareKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<TomlTable> Run() {
    auto root = std::make_shared<TomlTable>();
    current_ = root.get();
    size_t start = 0;
    while (start <= text_.size()) {
      size_t end = text_.find('\n', start);
      if (end == std::string_view::npos) end = text_.size();
      ++line_;
      line_text_ = text_.substr(start, end - start);
      if (!line_text_.empty() && line_text_.back() == '\r') line_text_.remove_suffix(1);
      pos_ = 0;
      if (Status s = Line(root.get()); !s.ok()) return s;
      start = end + 1;
    }
    return std::move(*root);
  }

 private:
  Status Error(const std::string& message) const {
    return InvalidArgument("line " + std::to_string(line_) + ": " + message);
  }
  void SkipSpace() {
    while (pos_ < line_text_.size() && (line_text_[pos_] == ' ' || line_text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool AtEnd() const { return pos_ >= line_text_.size(); }
  // Only whitespace and a comment may follow.
  Status ExpectEnd() {
    SkipSpace();
    if (AtEnd() || line_text_[pos_] == '#') return Status::Ok();
    return Error("unexpected '" + std::string(line_text_.substr(pos_)) + "'");
  }

  Status Line(TomlTable* root) {
    SkipSpace();
    if (AtEnd() || line_text_[pos_] == '#') return Status::Ok();
    if (line_text_[pos_] == '[') return Header(root);
    return KeyValue();
  }

  StatusOr<std::string> BasicString() {
    // REQUIRES: at the opening quote.
    ++pos_;
    std::string out;
    while (!AtEnd()) {
      const char c = line_text_[pos_++];
      if (c == '"') return out;
      if (c == '\\') {
        if (AtEnd()) break;
        const char e = line_text_[pos_++];
        switch (e) {
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          default:
            return Error(std::string("unsupported escape \\") + e);
        }
        continue;
      }
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') {
        return Error("control character in a string");
      }
      out += c;
    }
    return Error("unterminated string");
  }

  StatusOr<std::string> Key() {
    SkipSpace();
    if (AtEnd()) return Error("missing key");
    if (line_text_[pos_] == '"') {
      GS_ASSIGN_OR_RETURN(std::string k, BasicString());
      if (k.empty()) return Error("empty key");
      return k;
    }
    const size_t begin = pos_;
    while (!AtEnd() && IsBareKeyChar(line_text_[pos_])) ++pos_;
    if (pos_ == begin) return Error("bad key at '" + std::string(line_text_.substr(begin)) + "'");
    return std::string(line_text_.substr(begin, pos_ - begin));
  }

  StatusOr<std::vector<std::string>> DottedKey() {
    std::vector<std::string> keys;
    for (;;) {
      GS_ASSIGN_OR_RETURN(std::string k, Key());
      keys.push_back(std::move(k));
      SkipSpace();
      if (AtEnd() || line_text_[pos_] != '.') return keys;
      ++pos_;
    }
  }

  Status Header(TomlTable* root) {
    ++pos_;
    const bool array = !AtEnd() && line_text_[pos_] == '[';
    if (array) ++pos_;
    GS_ASSIGN_OR_RETURN(std::vector<std::string> path, DottedKey());
    SkipSpace();
    for (int i = 0; i < (array ? 2 : 1); ++i) {
      if (AtEnd() || line_text_[pos_] != ']') return Error("missing ']' in a table header");
      ++pos_;
    }
    GS_RETURN_IF_ERROR(ExpectEnd());
    TomlTable* t = root;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      GS_ASSIGN_OR_RETURN(t, Descend(t, path[i]));
    }
    const std::string& last = path.back();
    auto it = t->find(last);
    if (array) {
      if (it == t->end()) {
        TomlValue v{std::make_shared<TomlTableArray>(), line_};
        it = t->emplace(last, std::move(v)).first;
      } else if (!it->second.is_table_array()) {
        return Error("'" + last + "' is already defined as something else than an array of tables");
      }
      auto& arr = *std::get<std::shared_ptr<TomlTableArray>>(it->second.v);
      arr.emplace_back();
      current_ = &arr.back();
      explicit_.insert(current_);
      return Status::Ok();
    }
    if (it == t->end()) {
      TomlValue v{std::make_shared<TomlTable>(), line_};
      it = t->emplace(last, std::move(v)).first;
    } else if (!it->second.is_table()) {
      return Error("'" + last + "' is already defined as something else than a table");
    }
    TomlTable* next = std::get<std::shared_ptr<TomlTable>>(it->second.v).get();
    if (!explicit_.insert(next).second) return Error("table '" + last + "' defined twice");
    current_ = next;
    return Status::Ok();
  }

  // Into `key` of `t`: a table (created implicitly when absent) or the last
  // table of an array of tables.
  StatusOr<TomlTable*> Descend(TomlTable* t, const std::string& key) {
    auto it = t->find(key);
    if (it == t->end()) {
      TomlValue v{std::make_shared<TomlTable>(), line_};
      it = t->emplace(key, std::move(v)).first;
    }
    if (it->second.is_table()) return std::get<std::shared_ptr<TomlTable>>(it->second.v).get();
    if (it->second.is_table_array()) {
      auto& arr = *std::get<std::shared_ptr<TomlTableArray>>(it->second.v);
      if (arr.empty()) return Error("empty array of tables '" + key + "'");
      return &arr.back();
    }
    return Error("'" + key + "' is a value, not a table");
  }

  Status KeyValue() {
    GS_ASSIGN_OR_RETURN(std::string key, Key());
    SkipSpace();
    if (!AtEnd() && line_text_[pos_] == '.') return Error("dotted keys are not supported");
    if (AtEnd() || line_text_[pos_] != '=') return Error("expected '=' after '" + key + "'");
    ++pos_;
    SkipSpace();
    if (AtEnd()) return Error("missing value for '" + key + "'");
    TomlValue value;
    value.line = line_;
    const char c = line_text_[pos_];
    if (c == '"') {
      if (line_text_.substr(pos_).starts_with(R"(""")")) {
        return Error("multi-line strings are not supported");
      }
      GS_ASSIGN_OR_RETURN(std::string s, BasicString());
      value.v = std::move(s);
    } else if (line_text_.substr(pos_).starts_with("true") &&
               (pos_ + 4 == line_text_.size() || !IsBareKeyChar(line_text_[pos_ + 4]))) {
      value.v = true;
      pos_ += 4;
    } else if (line_text_.substr(pos_).starts_with("false") &&
               (pos_ + 5 == line_text_.size() || !IsBareKeyChar(line_text_[pos_ + 5]))) {
      value.v = false;
      pos_ += 5;
    } else if (c == '+' || c == '-' || (c >= '0' && c <= '9')) {
      const size_t begin = pos_;
      if (c == '+' || c == '-') ++pos_;
      const size_t digits = pos_;
      while (!AtEnd() && line_text_[pos_] >= '0' && line_text_[pos_] <= '9') ++pos_;
      if (pos_ == digits) return Error("bad number for '" + key + "'");
      if (line_text_[digits] == '0' && pos_ - digits > 1) {
        return Error("leading zero in '" + key + "'");
      }
      if (!AtEnd() && (IsBareKeyChar(line_text_[pos_]) || line_text_[pos_] == '.')) {
        return Error("only decimal integers are supported ('" + key + "')");
      }
      std::string_view num = line_text_.substr(begin, pos_ - begin);
      if (num.front() == '+') num.remove_prefix(1);
      int64_t n = 0;
      auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
      if (ec != std::errc() || end != num.data() + num.size()) {
        return Error("integer out of range for '" + key + "'");
      }
      value.v = n;
    } else {
      return Error("unsupported value for '" + key + "'");
    }
    GS_RETURN_IF_ERROR(ExpectEnd());
    if (!current_->emplace(key, std::move(value)).second) {
      return Error("key '" + key + "' defined twice");
    }
    return Status::Ok();
  }

  std::string_view text_;
  std::string_view line_text_;
  size_t pos_ = 0;
  int line_ = 0;
  TomlTable* current_ = nullptr;
  std::set<const TomlTable*> explicit_;  // tables named by a header
};

}  // namespace

StatusOr<TomlTable> ParseToml(std::string_view text) { return Parser(text).Run(); }

}  // namespace gpuslice::sim::mps
