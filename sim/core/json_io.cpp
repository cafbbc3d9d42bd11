// Size-capped, depth-limited JSON file reading and bounded dumps for error text (see json_io.h).
#include "sim/core/json_io.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "sim/core/error.h"

namespace gs {

std::optional<JsonLimitProblem> json_limit_problem(const std::string& text) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    // nlohmann's parser stops at a NUL byte as at the end of the text: whatever follows would be ignored.
    if (ch == '\0') return JsonLimitProblem{i, "not valid JSON: a NUL byte (0x00); JSON text holds none"};
    if (in_string) {
      if (escape) escape = false;
      else if (ch == '\\') escape = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxJsonDepth)
        return JsonLimitProblem{i, fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth)};
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

void json_line_col(const std::string& text, size_t byte, size_t& line, size_t& col) {
  line = 1;
  col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
}

std::string read_json_file_text(const std::string& file, std::uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (ec || !fs::exists(st)) throw Error(fmt::format("{}: cannot open the file: no such file", file));
  if (fs::is_directory(st)) throw Error(fmt::format("{}: is a folder, not a JSON file", file));
  if (!fs::is_regular_file(st))
    throw Error(fmt::format("{}: is not a regular file (a device, pipe or socket); expected a JSON file", file));
  const std::uintmax_t size = fs::file_size(file, ec);
  if (!ec && size > max_bytes)
    throw Error(fmt::format("{}: larger than {} bytes ({} MiB), the most gradsweep reads from a JSON file", file,
                            max_bytes, max_bytes >> 20));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the file: {}", file, std::strerror(errno)));
  // Read at most max_bytes + 1 even if the file grew after the size check.
  std::string text;
  text.resize(static_cast<size_t>(std::min<std::uintmax_t>(ec ? max_bytes + 1 : size + 1, max_bytes + 1)));
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_bytes) {
    throw Error(fmt::format("{}: larger than {} bytes ({} MiB), the most gradsweep reads from a JSON file", file,
                            max_bytes, max_bytes >> 20));
  }
  if (in.bad()) throw Error(fmt::format("{}: cannot read the file: {}", file, std::strerror(errno)));
  return text;
}

std::string bounded_text(const std::string& text, size_t max_chars) {
  if (max_chars < 4) max_chars = 4;
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "...";
}

std::string readable_syntax_error(const std::string& message) {
  // nlohmann 3.x: "syntax error while parsing CONTEXT - DETAIL[; last read: 'TOKEN'][; expected EXPECTED]" (the
  // parser's syntax_error message, nlohmann/detail/input/parser.hpp); anything else is returned as it is.
  const std::string lead = "syntax error while parsing ";
  const size_t dash = message.find(" - ");
  if (message.rfind(lead, 0) != 0 || dash == std::string::npos) return message;
  const std::string context = message.substr(lead.size(), dash - lead.size());
  std::string detail, token, expected;
  // The rest in its "; "-separated segments: "last read: 'TOKEN'" (TOKEN may itself hold "; "), "expected ..." (the
  // first one), the detail (everything else, in order).
  const std::string rest = message.substr(dash + 3), last_read = "last read: '", expected_lead = "expected ";
  std::vector<std::string> segments;
  for (size_t from = 0;;) {
    const size_t to = rest.find("; ", from);
    segments.push_back(rest.substr(from, to == std::string::npos ? std::string::npos : to - from));
    if (to == std::string::npos) break;
    from = to + 2;
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    std::string seg = segments[i];
    if (seg.rfind(last_read, 0) == 0) {
      seg = seg.substr(last_read.size());
      while ((seg.empty() || seg.back() != '\'') && i + 1 < segments.size()) seg += "; " + segments[++i];
      if (!seg.empty() && seg.back() == '\'') seg.pop_back();
      token = seg;
    } else if (seg.rfind(expected_lead, 0) == 0 && expected.empty() && !detail.empty()) {
      expected = seg.substr(expected_lead.size());
    } else {
      detail += (detail.empty() ? "" : "; ") + seg;
    }
  }
  const std::string where = context == "value"              ? "where a value should be"
                            : context == "object key"       ? "where a key should be"
                            : context == "object separator" ? "between a key and its value"
                            : context == "object"           ? "inside an object"
                            : context == "array"            ? "inside an array"
                                                            : "while reading " + context;
  // The token is what the lexer read since it last started one, which can reach back over earlier text ('"a": tru}'):
  // what follows its last blank or separator, at most 12 bytes.
  const size_t cut = token.find_last_of(" \t\r\n:,[{");
  if (cut != std::string::npos && cut + 1 < token.size()) token = token.substr(cut + 1);
  if (token.size() > 12) token = "..." + token.substr(token.size() - 12);
  std::string out;
  const bool trailing = expected == "end of input";
  if (trailing) {
    out = "more text after the JSON value ends (a file holds one JSON value)";
    expected.clear();
  } else if (detail == "invalid literal" && token == "'") {
    out = "a single quote " + where;
  } else if (detail == "invalid literal" && !token.empty()) {
    out = "'" + token + "' is not JSON " + where;
  } else if (detail == "unexpected end of input") {
    out = "the text ends " + where;
  } else {
    out = detail + " " + where + (token.empty() ? "" : " (read '" + token + "')");
  }
  if (expected == "string literal")
    expected = "a key in double quotes";
  else if (expected == "'[', '{', or a literal")
    expected = "a value: {...}, [...], a \"string\", a number, true, false or null";
  else if (expected == "'}'" && context == "object")
    expected = "',' or '}'";
  else if (expected == "']'" && context == "array")
    expected = "',' or ']'";
  if (!expected.empty()) out += "; expected " + expected;
  if (trailing) return out;
  const bool closes = detail == "unexpected '}'" || detail == "unexpected ']'";
  const char first = token.empty() ? '\0' : token[0];
  if (closes && (context == "object key" || context == "value"))
    out += " (a comma before '}' or ']' is not JSON)";
  else if (detail == "invalid literal" && (first == '/' || first == '#'))
    out += " (comments are not JSON)";
  else if (detail == "invalid literal" && token.find('\'') != std::string::npos)
    out += " (strings and keys take double quotes in JSON)";
  else if (detail == "invalid literal" && std::isalpha(static_cast<unsigned char>(first)) != 0)
    out += " (strings and keys take double quotes; YAML and Python literals are not JSON)";
  return out;
}

JsonParseProblem json_parse_problem(const nlohmann::json::exception& e, const std::string& text) {
  const std::string what = e.what();
  JsonParseProblem p;
  if (const auto* pe = dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
    p.byte = pe->byte == 0 ? 0 : pe->byte - 1;
    // After "[json.exception.parse_error.101] parse error at line L, column C: " (the caller says where).
    const size_t colon = what.find(": ");
    p.reason = bounded_text(readable_syntax_error(colon == std::string::npos ? what : what.substr(colon + 2)));
    return p;
  }
  // e.g. "number overflow parsing '<token>'" (1e400, a 5000-digit number): no byte offset given, locate the token.
  const size_t close = what.find("] ");
  const std::string reason = close == std::string::npos ? what : what.substr(close + 2);
  p.reason = bounded_text(reason);
  const size_t open_quote = reason.find('\''), close_quote = reason.rfind('\'');
  if (open_quote != std::string::npos && close_quote > open_quote + 1)
    p.byte = text.find(reason.substr(open_quote + 1, close_quote - open_quote - 1));
  return p;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& file) {
  if (auto problem = json_limit_problem(text)) {
    size_t line = 0, col = 0;
    json_line_col(text, problem->byte, line, col);
    throw Error(fmt::format("{}:{}:{}: {}", file, line, col, problem->message));
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    const JsonParseProblem p = json_parse_problem(e, text);
    if (p.byte == std::string::npos) throw Error(fmt::format("{}: not valid JSON: {}", file, p.reason));
    size_t line = 0, col = 0;
    json_line_col(text, p.byte, line, col);
    throw Error(fmt::format("{}:{}:{}: not valid JSON: {}", file, line, col, p.reason));
  }
}

nlohmann::json read_json_file(const std::string& file, std::uint64_t max_bytes) {
  return parse_json_text(read_json_file_text(file, max_bytes), file);
}

namespace {

// JSON text of a scalar; a string cut inside a UTF-8 sequence is shown with a replacement character, not refused.
template <class Json>
std::string text_of(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Appends j's JSON text to out while out.size() < limit; returns false once the limit is reached.
template <class Json>
bool dump_into(const Json& j, std::string& out, size_t limit) {
  if (out.size() >= limit) return false;
  if (j.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& x : j) {
      if (!first) out += ',';
      first = false;
      if (!dump_into(x, out, limit)) return false;
    }
    out += ']';
  } else if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ',';
      first = false;
      const std::string key = text_of(Json(it.key().substr(0, std::min(it.key().size(), limit + 1))));
      out.append(key, 0, limit + 1 - out.size());
      if (out.size() >= limit) return false;
      out += ':';
      if (!dump_into(it.value(), out, limit)) return false;
    }
    out += '}';
  } else if (j.is_string()) {
    const auto& s = j.template get_ref<const std::string&>();
    // Dump only a prefix of a long string (the escaped form is at most 6 bytes a byte).
    const std::string shown = text_of(Json(s.substr(0, std::min(s.size(), limit + 1))));
    if (s.size() > limit + 1) out.append(shown, 0, shown.size() - 1);  // drop the closing quote: it was cut
    else out += shown;
  } else {
    out += text_of(j);  // number, bool, null, binary: short
  }
  return out.size() < limit;
}

template <class Json>
std::string bounded_dump_impl(const Json& j, size_t max_chars) {
  if (max_chars < 4) max_chars = 4;
  std::string out;
  dump_into(j, out, max_chars + 1);
  if (out.size() > max_chars) {
    size_t cut = max_chars - 3;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    out = out.substr(0, cut) + "...";
  }
  return out;
}

}  // namespace

std::string bounded_dump(const nlohmann::json& j, size_t max_chars) { return bounded_dump_impl(j, max_chars); }
std::string bounded_dump(const nlohmann::ordered_json& j, size_t max_chars) {
  return bounded_dump_impl(j, max_chars);
}

std::string float32_range_problem(double x, bool nonzero_required) {
  // A double rounds to a finite float iff |x| < 2^128 - 2^103 (float's largest value plus half an ulp; the tie rounds
  // to the even 2^128, that is inf). The cast is only made once the value is known to fit.
  const double limit = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  if (!std::isfinite(x) || std::fabs(x) >= limit)
    return fmt::format("{} is outside float32's range (magnitudes up to {:.8g}) and would become {} as a float32",
                       format_number(x), 3.4028234663852886e38, x < 0 ? "-inf" : "inf");
  if (nonzero_required && x != 0.0 && static_cast<float>(x) == 0.0f)
    return fmt::format("{} rounds to 0 as a float32, whose smallest positive value is {:.8g}", format_number(x),
                       1.401298464324817e-45);
  return "";
}

}  // namespace gs
