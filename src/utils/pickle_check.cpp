// The length check of a pickle's opcodes (trainpack/utils/pickle_check.h), and the opcode table
// and argument decoder that it shares with pickle_tensors.cpp (trainpack/detail/pickle_opcodes.h).
#include "trainpack/utils/pickle_check.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "trainpack/detail/pickle_opcodes.h"

namespace trainpack {
namespace detail {
namespace {

// Every opcode of protocols 0-5, indexed by its byte.
struct OpcodeTable {
  Opcode op[256];

  OpcodeTable() {
    const auto set = [this](unsigned char code, const char* name, Arg arg, int fixed = 0) {
      op[code] = Opcode{name, arg, fixed};
    };
    // No argument.
    set('(', "MARK", Arg::kNone);
    set('.', "STOP", Arg::kNone);
    set('0', "POP", Arg::kNone);
    set('1', "POP_MARK", Arg::kNone);
    set('2', "DUP", Arg::kNone);
    set(')', "EMPTY_TUPLE", Arg::kNone);
    set('t', "TUPLE", Arg::kNone);
    set(0x85, "TUPLE1", Arg::kNone);
    set(0x86, "TUPLE2", Arg::kNone);
    set(0x87, "TUPLE3", Arg::kNone);
    set(']', "EMPTY_LIST", Arg::kNone);
    set('l', "LIST", Arg::kNone);
    set('a', "APPEND", Arg::kNone);
    set('e', "APPENDS", Arg::kNone);
    set('}', "EMPTY_DICT", Arg::kNone);
    set('d', "DICT", Arg::kNone);
    set('s', "SETITEM", Arg::kNone);
    set('u', "SETITEMS", Arg::kNone);
    set(0x8f, "EMPTY_SET", Arg::kNone);
    set(0x90, "ADDITEMS", Arg::kNone);
    set(0x91, "FROZENSET", Arg::kNone);
    set('N', "NONE", Arg::kNone);
    set(0x88, "NEWTRUE", Arg::kNone);
    set(0x89, "NEWFALSE", Arg::kNone);
    set('Q', "BINPERSID", Arg::kNone);
    set('R', "REDUCE", Arg::kNone);
    set('b', "BUILD", Arg::kNone);
    set('o', "OBJ", Arg::kNone);
    set(0x81, "NEWOBJ", Arg::kNone);
    set(0x92, "NEWOBJ_EX", Arg::kNone);
    set(0x93, "STACK_GLOBAL", Arg::kNone);
    set(0x94, "MEMOIZE", Arg::kNone);
    set(0x97, "NEXT_BUFFER", Arg::kNone);
    set(0x98, "READONLY_BUFFER", Arg::kNone);
    // Fixed-size arguments.
    set(0x80, "PROTO", Arg::kFixed, 1);
    set(0x95, "FRAME", Arg::kFixed, 8);
    set('K', "BININT1", Arg::kFixed, 1);
    set('M', "BININT2", Arg::kFixed, 2);
    set('J', "BININT", Arg::kFixed, 4);
    set('G', "BINFLOAT", Arg::kFixed, 8);
    set('h', "BINGET", Arg::kFixed, 1);
    set('j', "LONG_BINGET", Arg::kFixed, 4);
    set('q', "BINPUT", Arg::kFixed, 1);
    set('r', "LONG_BINPUT", Arg::kFixed, 4);
    set(0x82, "EXT1", Arg::kFixed, 1);
    set(0x83, "EXT2", Arg::kFixed, 2);
    set(0x84, "EXT4", Arg::kFixed, 4);
    // A length, then that many bytes.
    set('U', "SHORT_BINSTRING", Arg::kLength, 1);
    set('T', "BINSTRING", Arg::kLength, 4);
    set('C', "SHORT_BINBYTES", Arg::kLength, 1);
    set('B', "BINBYTES", Arg::kLength, 4);
    set(0x8e, "BINBYTES8", Arg::kLength, 8);
    set(0x8c, "SHORT_BINUNICODE", Arg::kLength, 1);
    set('X', "BINUNICODE", Arg::kLength, 4);
    set(0x8d, "BINUNICODE8", Arg::kLength, 8);
    set(0x96, "BYTEARRAY8", Arg::kLength, 8);
    set(0x8a, "LONG1", Arg::kLength, 1);
    set(0x8b, "LONG4", Arg::kLength, 4);
    // Text lines (protocol 0).
    set('I', "INT", Arg::kLine);
    set('L', "LONG", Arg::kLine);
    set('F', "FLOAT", Arg::kLine);
    set('S', "STRING", Arg::kLine);
    set('V', "UNICODE", Arg::kLine);
    set('P', "PERSID", Arg::kLine);
    set('g', "GET", Arg::kLine);
    set('p', "PUT", Arg::kLine);
    set('c', "GLOBAL", Arg::kTwoLines);
    set('i', "INST", Arg::kTwoLines);
  }
};

}  // namespace

const Opcode& pickle_opcode(unsigned char code) {
  static const OpcodeTable table;
  return table.op[code];
}

int64_t pickle_little_endian(const char* p, size_t n, bool is_signed) {
  uint64_t u = 0;
  for (size_t i = n; i-- > 0;) u = (u << 8) | static_cast<unsigned char>(p[i]);
  if (is_signed && n > 0 && n < 8 && (static_cast<unsigned char>(p[n - 1]) & 0x80) != 0) {
    u |= ~uint64_t{0} << (8 * n);  // sign extension
  }
  return static_cast<int64_t>(u);
}

PickleArgument pickle_argument(const char* data, size_t size, size_t at, unsigned char code) {
  const Opcode& op = pickle_opcode(code);
  PickleArgument arg;
  arg.data = data + at;
  const size_t remaining = size - at;
  // The length of the line that starts at `from`, or npos when it has no newline.
  const auto line = [&](size_t from) -> size_t {
    const void* nl = from < size ? std::memchr(data + from, '\n', size - from) : nullptr;
    return nl == nullptr ? std::string::npos
                         : static_cast<size_t>(static_cast<const char*>(nl) - (data + from));
  };
  switch (op.arg) {
    case Arg::kNone:
      arg.end = at;
      break;
    case Arg::kFixed:
      arg.size = static_cast<size_t>(op.fixed);
      if (remaining < arg.size) {
        arg.problem = fmt::format("needs {} bytes, but {} remain", op.fixed, remaining);
      }
      arg.end = at + arg.size;
      break;
    case Arg::kLength: {
      const auto width = static_cast<size_t>(op.fixed);
      if (remaining < width) {
        arg.problem = fmt::format("needs a {}-byte length, but {} bytes remain", width, remaining);
        break;
      }
      const auto length = static_cast<uint64_t>(pickle_little_endian(data + at, width, false));
      // BINSTRING and LONG4 have signed lengths: a negative one is as wrong as a long one.
      if (width == 4 && (code == 'T' || code == 0x8b) && (length & 0x80000000u) != 0) {
        arg.problem = "announces a negative length";
        break;
      }
      if (length > remaining - width) {
        arg.problem = fmt::format("announces {} bytes, but {} remain", length, remaining - width);
        break;
      }
      arg.data = data + at + width;
      arg.size = static_cast<size_t>(length);
      arg.end = at + width + arg.size;
      break;
    }
    case Arg::kLine:
    case Arg::kTwoLines: {
      arg.size = line(at);
      if (arg.size == std::string::npos) {
        arg.problem = "has no end of line";
        break;
      }
      arg.end = at + arg.size + 1;
      if (op.arg == Arg::kTwoLines) {
        const size_t second = line(arg.end);
        if (second == std::string::npos) {
          arg.problem = "has no end of line";
          break;
        }
        arg.second_line = std::string_view(data + arg.end, second);
        arg.end += second + 1;
      }
      break;
    }
  }
  return arg;
}

}  // namespace detail

namespace {

using detail::Opcode;

// The unpickler's stack, as Python's has it: the items since the last MARK are reachable, those
// below it are not until a mark-consuming opcode removes the mark. LibTorch's unpickler pops
// without looking (a REDUCE on a stack of one item frees memory it does not own, found by the
// fuzzer), so every opcode's needs are checked here first.
class StackModel {
 public:
  // Applies opcode `code`'s effect; "" or what it lacks.
  std::string apply(unsigned char code) {
    switch (code) {
      case '(':  // MARK
        frames_.push_back(depth_);
        depth_ = 0;
        return "";
      case '.':  // STOP: one object, no open mark
        if (!frames_.empty()) return "an unclosed MARK at STOP";
        return depth_ == 1 ? ""
                           : fmt::format("{} objects on the stack at STOP (1 expected)", depth_);
      case '0':  // POP
        return pop(1);
      case '1':  // POP_MARK
        return to_mark(0, 0);
      case '2':  // DUP
        return need(1, 1);
      case 't':   // TUPLE
      case 'l':   // LIST
      case 0x91:  // FROZENSET
        return to_mark(0, 1);
      case 'd':  // DICT: key, value pairs
        return to_mark(0, 1, /*pairs=*/true);
      case 'e':   // APPENDS: onto the list below the mark
      case 0x90:  // ADDITEMS
        return to_mark(1, 0);
      case 'u':  // SETITEMS
        return to_mark(1, 0, /*pairs=*/true);
      case 'o':  // OBJ: the class and its arguments
        return to_mark(0, 1, false, /*at_least=*/1);
      case 'i':  // INST
        return to_mark(0, 1);
      case 0x85:  // TUPLE1
        return replace(1, 1);
      case 0x86:  // TUPLE2
      case 'R':   // REDUCE
      case 0x81:  // NEWOBJ
      case 0x93:  // STACK_GLOBAL
      case 'b':   // BUILD
      case 'a':   // APPEND
        return replace(2, code == 'a' ? 0 : 1, code == 'a');
      case 0x87:               // TUPLE3
      case 0x92:               // NEWOBJ_EX
      case 's':                // SETITEM
        return replace(3, 1);  // SETITEM: -2, the dict stays (as 3 - 1)
      case 'Q':                // BINPERSID
      case 0x98:               // READONLY_BUFFER
        return replace(1, 1);
      case 0x94:  // MEMOIZE
      case 'q':   // BINPUT
      case 'r':   // LONG_BINPUT
        return need(1, 0);
      case 0x80:  // PROTO
      case 0x95:  // FRAME
        return "";
      default:  // everything else pushes one object (constants, GETs, GLOBAL, PERSID, EXTn)
        ++depth_;
        return "";
    }
  }

 private:
  // Needs `n` reachable objects; then pushes `push`.
  std::string need(uint64_t n, uint64_t push) {
    if (depth_ < n)
      return fmt::format("needs {} objects on the stack, but {} are there", n, depth_);
    depth_ += push;
    return "";
  }
  std::string pop(uint64_t n) {
    if (depth_ < n)
      return fmt::format("needs {} objects on the stack, but {} are there", n, depth_);
    depth_ -= n;
    return "";
  }
  // Pops `n` and pushes `push`. `keeps_one`: SETITEM/APPEND modify the object below what they
  // pop, so they pop n - 1 and keep it (counted in n).
  std::string replace(uint64_t n, uint64_t push, bool keeps_one = false) {
    if (depth_ < n)
      return fmt::format("needs {} objects on the stack, but {} are there", n, depth_);
    depth_ -= keeps_one ? n - 1 : n;
    depth_ += push;
    return "";
  }
  // Pops everything since the last MARK (at least `at_least`, an even count when `pairs`), and
  // the mark; then needs `below` objects under it and pushes `push`.
  std::string to_mark(uint64_t below, uint64_t push, bool pairs = false, uint64_t at_least = 0) {
    if (frames_.empty()) return "no MARK to consume";
    if (depth_ < at_least) return fmt::format("needs {} objects after its MARK", at_least);
    if (pairs && depth_ % 2 != 0) {
      return fmt::format("{} objects after its MARK, not key-value pairs", depth_);
    }
    depth_ = frames_.back();
    frames_.pop_back();
    return need(below, push);
  }

  uint64_t depth_ = 0;
  std::vector<uint64_t> frames_;  // the depth below each open MARK
};

}  // namespace

std::string pickle_bounds_problem(const char* data, size_t size) {
  // Memo entries so far: a PUT may add the next one or replace one, a GET read one that exists
  // (LibTorch's unpickler sizes its memo table by the index it is given).
  uint64_t memo_count = 0;
  StackModel stack;
  size_t at = 0;
  while (at < size) {
    const auto code = static_cast<unsigned char>(data[at]);
    const Opcode& op = detail::pickle_opcode(code);
    if (op.name == nullptr) {
      return fmt::format("byte {} holds 0x{:02x}, which is not a pickle opcode", at, code);
    }
    const size_t start = at++;
    if (const std::string problem = stack.apply(code); !problem.empty()) {
      return fmt::format("opcode {} at byte {}: {}", op.name, start, problem);
    }
    if (code == 'p' || code == 'g') {
      return fmt::format(
          "opcode {} at byte {} is protocol 0's text memo, which LibTorch's pickles do not use",
          op.name, start);
    }
    const detail::PickleArgument arg = detail::pickle_argument(data, size, at, code);
    if (!arg.problem.empty())
      return fmt::format("opcode {} at byte {} {}", op.name, start, arg.problem);
    if (code == '.') return "";
    if (code == 0x94) ++memo_count;  // MEMOIZE
    if (code == 'q' || code == 'r' || code == 'h' || code == 'j') {
      const auto id =
          static_cast<uint64_t>(detail::pickle_little_endian(arg.data, arg.size, false));
      const bool put = code == 'q' || code == 'r';
      if (put ? id > memo_count : id >= memo_count) {
        return fmt::format("opcode {} at byte {} uses memo entry {}, but the memo holds {}",
                           op.name, start, id, memo_count);
      }
      if (put && id == memo_count) ++memo_count;
    }
    at = arg.end;
  }
  return "the pickle ends without its STOP opcode";
}

}  // namespace trainpack
