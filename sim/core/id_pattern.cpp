// IdPattern (see id_pattern.h): a recursive-descent parser into a small syntax tree, Thompson's construction into a
// program of byte-set, split, jump and assertion states, and a simulation of all live states at once.
#include "sim/core/id_pattern.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "sim/core/error.h"

namespace gs {

struct IdPattern::Node {
  enum class Kind { kEmpty, kSet, kAssert, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  int set = 0;           // kSet: index in sets_
  Op assert_op = Op::kBol;  // kAssert
  std::vector<Node> kids;  // kConcat, kAlt: the parts; kRepeat: the one repeated
  int min = 0, max = 0;    // kRepeat: max < 0 = unbounded
};

namespace {

constexpr int kMaxCount = 1000;     // largest n, m of {n,m}
constexpr int kMaxNesting = 200;    // groups inside groups

bool is_word(unsigned char c) { return std::isalnum(c) != 0 || c == '_'; }

}  // namespace

class IdPatternParser {
 public:
  IdPatternParser(const std::string& p, std::vector<std::bitset<256>>& sets) : p_(p), sets_(sets) {}

  IdPattern::Node parse() {
    IdPattern::Node n = alternation(0);
    if (at_ < p_.size()) fail("unmatched \")\"");  // alternation stops only at ')' or the end
    return n;
  }

 private:
  using Node = IdPattern::Node;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{} at character {}", what, std::min(at_, p_.size()) + 1));
  }
  bool more() const { return at_ < p_.size(); }
  char peek() const { return p_[at_]; }

  int add_set(const std::bitset<256>& s) {
    sets_.push_back(s);
    return static_cast<int>(sets_.size() - 1);
  }
  Node set_node(const std::bitset<256>& s) {
    Node n;
    n.kind = Node::Kind::kSet;
    n.set = add_set(s);
    return n;
  }

  Node alternation(int depth) {
    std::vector<Node> alts;
    alts.push_back(concatenation(depth));
    while (more() && peek() == '|') {
      ++at_;
      alts.push_back(concatenation(depth));
    }
    if (alts.size() == 1) return std::move(alts.front());
    Node n;
    n.kind = Node::Kind::kAlt;
    n.kids = std::move(alts);
    return n;
  }

  Node concatenation(int depth) {
    Node n;
    n.kind = Node::Kind::kConcat;
    while (more() && peek() != '|' && peek() != ')') n.kids.push_back(repetition(depth));
    return n;
  }

  // Reads a decimal count of {n,m}; fails past kMaxCount.
  int count() {
    if (!more() || !std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number in {n,m}");
    long v = 0;
    while (more() && std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) fail(fmt::format("a count above {} in {{n,m}}", kMaxCount));
      ++at_;
    }
    return static_cast<int>(v);
  }

  Node repetition(int depth) {
    const size_t atom_at = at_;
    Node atom = this->atom(depth);
    while (more()) {
      int lo = 0, hi = -1;
      const char c = peek();
      if (c == '*') {
        ++at_;
      } else if (c == '+') {
        lo = 1;
        ++at_;
      } else if (c == '?') {
        hi = 1;
        ++at_;
      } else if (c == '{') {
        ++at_;
        lo = hi = count();
        if (more() && peek() == ',') {
          ++at_;
          hi = more() && peek() == '}' ? -1 : count();
        }
        if (!more() || peek() != '}') fail("expected \"}\" closing {n,m}");
        ++at_;
        if (hi >= 0 && hi < lo) fail(fmt::format("{{{},{}}}: the larger count comes second", lo, hi));
      } else {
        break;
      }
      if (atom.kind == Node::Kind::kAssert) {
        at_ = atom_at + 1;
        fail("a quantifier after an assertion (^ $ \\b \\B)");
      }
      if (more() && peek() == '?') ++at_;  // lazy: the same ids match
      Node r;
      r.kind = Node::Kind::kRepeat;
      r.min = lo;
      r.max = hi;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  // \d \w \s and their negations into s; false for another letter.
  static bool class_escape(char e, std::bitset<256>& s) {
    std::bitset<256> t;
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(e)));
    for (int c = 0; c < 256; ++c) {
      const auto u = static_cast<unsigned char>(c);
      if (lower == 'd') t[c] = std::isdigit(u) != 0;
      else if (lower == 'w') t[c] = is_word(u);
      else if (lower == 's') t[c] = c == ' ' || (c >= '\t' && c <= '\r');
      else return false;
    }
    s |= std::isupper(static_cast<unsigned char>(e)) ? ~t : t;
    return true;
  }

  // The byte of a one-byte escape (\t, \n, \., ...), or -1 when e is none.
  static int literal_escape(char e) {
    switch (e) {
      case 't': return '\t';
      case 'n': return '\n';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      default: break;
    }
    const auto u = static_cast<unsigned char>(e);
    if (u >= 0x80 || std::isalnum(u) || e == '_') return -1;
    return u;
  }

  [[noreturn]] void unsupported_escape(char e) {
    if (e >= '1' && e <= '9') fail(fmt::format("backreference \\{} is not supported", e));
    fail(fmt::format("unsupported escape \\{}", e));
  }

  Node atom(int depth) {
    const char c = peek();
    ++at_;
    std::bitset<256> s;
    switch (c) {
      case '(': {
        if (depth >= kMaxNesting) fail(fmt::format("groups nested deeper than {}", kMaxNesting));
        if (more() && peek() == '?') {
          if (at_ + 1 < p_.size() && p_[at_ + 1] == ':') {
            at_ += 2;
          } else {
            fail("lookarounds and named groups ((?= (?! (?<) are not supported");
          }
        }
        Node inner = alternation(depth + 1);
        if (!more() || peek() != ')') fail("unmatched \"(\"");
        ++at_;
        return inner;
      }
      case ')': fail("unmatched \")\"");
      case '*': case '+': case '?': --at_; fail("a quantifier with nothing to repeat");
      case '{': --at_; fail("a quantifier with nothing to repeat (write \\{ for the character)");
      case '^': case '$': {
        Node n;
        n.kind = Node::Kind::kAssert;
        n.assert_op = c == '^' ? IdPattern::Op::kBol : IdPattern::Op::kEol;
        return n;
      }
      case '.':
        s.set();
        s['\n'] = s['\r'] = false;
        return set_node(s);
      case '[': return bracket();
      case '\\': {
        if (!more()) fail("a \"\\\" at the end of the pattern");
        const char e = peek();
        ++at_;
        if (e == 'b' || e == 'B') {
          Node n;
          n.kind = Node::Kind::kAssert;
          n.assert_op = e == 'b' ? IdPattern::Op::kWordBoundary : IdPattern::Op::kNotWordBoundary;
          return n;
        }
        if (class_escape(e, s)) return set_node(s);
        const int b = literal_escape(e);
        if (b < 0) {
          at_ -= 2;  // at the backslash
          unsupported_escape(e);
        }
        s[static_cast<size_t>(b)] = true;
        return set_node(s);
      }
      default:
        s[static_cast<unsigned char>(c)] = true;
        return set_node(s);
    }
  }

  // After "[": the class up to its "]".
  Node bracket() {
    std::bitset<256> s;
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++at_;
    }
    // One member: a byte (>= 0), or -1 after adding a class escape (\d) to s.
    auto member = [&]() -> int {
      const char c = peek();
      ++at_;
      if (c != '\\') return static_cast<unsigned char>(c);
      if (!more()) fail("unmatched \"[\"");
      const char e = peek();
      ++at_;
      if (class_escape(e, s)) return -1;
      if (e == 'b') return '\b';
      const int b = literal_escape(e);
      if (b < 0) {
        at_ -= 2;  // at the backslash
        unsupported_escape(e);
      }
      return b;
    };
    while (true) {
      if (!more()) fail("unmatched \"[\"");
      if (peek() == ']') {
        ++at_;
        break;
      }
      const int lo = member();
      if (lo >= 0 && at_ + 1 < p_.size() && peek() == '-' && p_[at_ + 1] != ']') {
        ++at_;
        const size_t hi_at = at_;
        const int hi = member();
        if (hi < 0) fail("a range that ends in a class escape");
        if (hi < lo) {
          at_ = hi_at;
          fail(fmt::format("range {}-{} out of order", static_cast<char>(lo), static_cast<char>(hi)));
        }
        for (int c = lo; c <= hi; ++c) s[static_cast<size_t>(c)] = true;
      } else if (lo >= 0) {
        s[static_cast<size_t>(lo)] = true;
      }
    }
    return set_node(negate ? ~s : s);
  }

  const std::string& p_;
  std::vector<std::bitset<256>>& sets_;
  size_t at_ = 0;
};

IdPattern::IdPattern(const std::string& pattern) {
  IdPatternParser parser(pattern, sets_);
  const Node root = parser.parse();
  compile(root);
  emit({Op::kMatch});
}

int IdPattern::emit(Inst i) {
  if (prog_.size() >= kMaxPatternStates)
    throw Error(fmt::format("the pattern expands to more than {} states (counted repetitions {{n,m}} multiply)",
                            kMaxPatternStates));
  prog_.push_back(i);
  return static_cast<int>(prog_.size() - 1);
}

void IdPattern::compile(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
      return;
    case Node::Kind::kSet:
      emit({Op::kByte, n.set});
      return;
    case Node::Kind::kAssert:
      emit({n.assert_op});
      return;
    case Node::Kind::kConcat:
      for (const auto& k : n.kids) compile(k);
      return;
    case Node::Kind::kAlt: {
      // split L1, next; L1: a; jump end; next: split L2, ...; last: z; end:
      std::vector<int> jumps;
      for (size_t i = 0; i + 1 < n.kids.size(); ++i) {
        const int split = emit({Op::kSplit});
        prog_[split].x = split + 1;
        compile(n.kids[i]);
        jumps.push_back(emit({Op::kJump}));
        prog_[split].y = static_cast<int>(prog_.size());
      }
      compile(n.kids.back());
      for (int j : jumps) prog_[j].x = static_cast<int>(prog_.size());
      return;
    }
    case Node::Kind::kRepeat: {
      const Node& k = n.kids.front();
      for (int i = 0; i < n.min; ++i) compile(k);
      if (n.max < 0) {
        // loop: split body, end; body: k; jump loop; end:
        const int loop = emit({Op::kSplit});
        prog_[loop].x = loop + 1;
        compile(k);
        emit({Op::kJump, loop});
        prog_[loop].y = static_cast<int>(prog_.size());
        return;
      }
      std::vector<int> splits;  // each optional copy may be skipped to the end
      for (int i = n.min; i < n.max; ++i) {
        const int split = emit({Op::kSplit});
        prog_[split].x = split + 1;
        splits.push_back(split);
        compile(k);
      }
      for (int s : splits) prog_[s].y = static_cast<int>(prog_.size());
      return;
    }
  }
}

bool IdPattern::search(const std::string& text) const {
  const size_t n = prog_.size();
  std::vector<int> current, next, stack;  // byte states alive before position pos; the closure's work list
  std::vector<size_t> seen(n, static_cast<size_t>(-1));  // seen[pc] = the position whose closure visited pc
  bool matched = false;
  // Follows split, jump and assertion states from pc at position pos; byte states go to out.
  auto closure = [&](int pc0, size_t pos, std::vector<int>& out) {
    stack.push_back(pc0);
    while (!stack.empty() && !matched) {
      const int pc = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(pc)] == pos) continue;
      seen[static_cast<size_t>(pc)] = pos;
      const Inst& i = prog_[static_cast<size_t>(pc)];
      const bool before = pos > 0 && is_word(static_cast<unsigned char>(text[pos - 1]));
      const bool after = pos < text.size() && is_word(static_cast<unsigned char>(text[pos]));
      switch (i.op) {
        case Op::kByte: out.push_back(pc); break;
        case Op::kMatch: matched = true; break;
        case Op::kJump: stack.push_back(i.x); break;
        case Op::kSplit:
          stack.push_back(i.y);
          stack.push_back(i.x);
          break;
        case Op::kBol: if (pos == 0) stack.push_back(pc + 1); break;
        case Op::kEol: if (pos == text.size()) stack.push_back(pc + 1); break;
        case Op::kWordBoundary: if (before != after) stack.push_back(pc + 1); break;
        case Op::kNotWordBoundary: if (before == after) stack.push_back(pc + 1); break;
      }
    }
    stack.clear();
  };
  for (size_t pos = 0;; ++pos) {
    closure(0, pos, current);  // a match may start at every position
    if (matched) return true;
    if (pos == text.size()) return false;
    next.clear();
    const auto byte = static_cast<unsigned char>(text[pos]);
    for (int pc : current)
      if (sets_[static_cast<size_t>(prog_[static_cast<size_t>(pc)].x)][byte]) closure(pc + 1, pos + 1, next);
    if (matched) return true;
    current.swap(next);
  }
}

}  // namespace gs
