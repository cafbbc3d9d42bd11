// Reading JSON files within limits: every JSON file gradsweep reads (scenarios, hardware and storage profiles, the
// report and journal read back by --resume) goes through read_json_file / parse_json_text; every "got ..." text of an
// error is built with bounded_dump. A new JSON input calls read_json_file; a new limit goes into json_limit_problem.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gs {

// Largest JSON input file read (bytes): 64 MiB. Larger files are refused before reading ("file: larger than ...").
constexpr std::uint64_t kMaxJsonFileBytes = 64ull << 20;
// Report and journal read back by --resume may hold many runs: 1 GiB.
constexpr std::uint64_t kMaxReportFileBytes = 1ull << 30;
// Deepest nesting of arrays/objects accepted in any JSON input (the parser and the serializer recurse per level).
constexpr int kMaxJsonDepth = 64;

// Where and why a JSON text breaks a limit (byte offset of the offending bracket; message without the file).
struct JsonLimitProblem {
  size_t byte = 0;
  std::string message;
};

// Scans text (strings skipped) for nesting deeper than kMaxJsonDepth and for a NUL byte (the parser would stop there
// and ignore the rest); returns the first violation, or nothing.
// Linear time, no recursion.
std::optional<JsonLimitProblem> json_limit_problem(const std::string& text);

// 1-based line and column of a byte offset in text.
void json_line_col(const std::string& text, size_t byte, size_t& line, size_t& col);

// Reads a whole file as text. Throws Error "<file>: ..." when it is missing or unreadable, is a folder or any other
// non-regular file (device, FIFO, socket: /dev/zero would never end), or is larger than max_bytes.
std::string read_json_file_text(const std::string& file, std::uint64_t max_bytes = kMaxJsonFileBytes);

// text cut to at most max_chars bytes ("..." at the end when cut; never inside a UTF-8 character). Every message text
// built from user input (parser reasons, raw option values) goes through it or bounded_dump.
std::string bounded_text(const std::string& text, size_t max_chars = 200);

// Where and why nlohmann's parser refused text: byte offset (std::string::npos when unknown) and its reason without
// the "[json.exception...]" prefix, cut by bounded_text. A number overflow gives no offset: its token is located.
struct JsonParseProblem {
  size_t byte = std::string::npos;
  std::string reason;
};
JsonParseProblem json_parse_problem(const nlohmann::json::exception& e, const std::string& text);
// nlohmann's "syntax error while parsing CONTEXT - DETAIL; last read: 'T'; expected E" in words a user acts on:
// "'h' is not JSON where a value should be (strings and keys take double quotes; YAML and Python literals are not
// JSON)", "unexpected '}' where a key should be; expected a key in double quotes (a comma before '}' or ']' is not
// JSON)", "the text ends inside an object; expected ',' or '}'". Other messages are returned unchanged.
std::string readable_syntax_error(const std::string& message);

// Parses JSON text read from `file` after json_limit_problem (depth, NUL byte). Errors "<file>:<line>:<col>: ..." Throws Error "<file>:<line>:<col>: JSON nested deeper
// than 64 levels" or "<file>:<line>:<col>: not valid JSON: <parser's reason>" or "<file>: not valid JSON: ...".
nlohmann::json parse_json_text(const std::string& text, const std::string& file);

// read_json_file_text + parse_json_text.
nlohmann::json read_json_file(const std::string& file, std::uint64_t max_bytes = kMaxJsonFileBytes);

// Why a JSON number cannot be held as a float32 (inline samples, explicit initial weights, optimizer and loss-scaler
// scalars): "" when x rounds to a finite float, else "<x> is outside float32's range (...) and would become inf as a
// float32". With nonzero_required (a field that must be > 0), also a value that rounds to 0 in float32.
std::string float32_range_problem(double x, bool nonzero_required = false);

// JSON text of j cut to at most max_chars characters ("..." at the end when cut). Walks only as far as it prints, so
// a huge or deeply nested value costs O(max_chars) and recurses at most max_chars levels.
std::string bounded_dump(const nlohmann::json& j, size_t max_chars = 60);
std::string bounded_dump(const nlohmann::ordered_json& j, size_t max_chars = 60);

}  // namespace gs
