// The tensors of a pickle, read from its opcodes (trainpack/utils/pickle_tensors.h).
#include "trainpack/utils/pickle_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "trainpack/detail/pickle_opcodes.h"

namespace trainpack {

namespace {

using detail::Opcode;

// A value of the pickle as far as the tensors need it; everything else is kOther.
struct Value {
  enum Kind { kOther, kInt, kString, kTuple, kGlobal, kStorage, kTensor, kDict };
  Kind kind = kOther;
  int64_t integer = 0;  // kInt; kStorage: its element count; kTensor: its index in the result
  std::string text;     // kString; kGlobal: "module.name"; kStorage: its record's key
  std::vector<std::shared_ptr<const Value>> items;  // kTuple
  int depth = 0;  // kTuple: how deep tuples nest in it (kept small: see tuple())
};
using ValuePtr = std::shared_ptr<const Value>;

ValuePtr other() {
  static const ValuePtr value = std::make_shared<Value>();
  return value;
}

ValuePtr make(Value::Kind kind, int64_t integer = 0, std::string text = "") {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->integer = integer;
  v->text = std::move(text);
  return v;
}

// A tuple of `items`. A tensor's arguments nest tuples two deep (the arguments, then its sizes);
// deeper ones are kept as kOther, so that no crafted nesting makes a deep chain of values (whose
// destruction would recurse as deep).
ValuePtr tuple(std::vector<ValuePtr> items) {
  int depth = 1;
  for (const ValuePtr& item : items) depth = std::max(depth, item->depth + 1);
  if (depth > 3) return other();
  auto v = std::make_shared<Value>();
  v->kind = Value::kTuple;
  v->items = std::move(items);
  v->depth = depth;
  return v;
}

// The integers of a tuple of integers; false when it is not one.
bool integers(const Value& v, std::vector<int64_t>* out) {
  if (v.kind != Value::kTuple) return false;
  out->clear();
  for (const ValuePtr& item : v.items) {
    if (item->kind != Value::kInt) return false;
    out->push_back(item->integer);
  }
  return true;
}

// The interpreter: the unpickler's stack and memo over Values.
class Walker {
 public:
  std::vector<PickledTensor> tensors;

  // Applies opcode `code` with its argument `arg[0, n)` (for GLOBAL, `second` is the name line);
  // false when the pickle is not one this walk can follow any further.
  bool apply(unsigned char code, const char* arg, size_t n, const std::string& second) {
    switch (code) {
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return true;
      case '0':  // POP
        return pop() != nullptr;
      case '1':  // POP_MARK
        return since_mark() != nullptr;
      case '2':  // DUP
        if (stack_.empty()) return false;
        stack_.push_back(stack_.back());
        return true;
      case ')':  // EMPTY_TUPLE
        return push(tuple({}));
      case 't': {  // TUPLE
        auto items = since_mark();
        return items != nullptr && push(tuple(std::move(*items)));
      }
      case 0x85:    // TUPLE1
      case 0x86:    // TUPLE2
      case 0x87: {  // TUPLE3
        const size_t count = static_cast<size_t>(code - 0x84);
        if (stack_.size() < count + floor()) return false;
        std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(count),
                                    stack_.end());
        stack_.resize(stack_.size() - count);
        return push(tuple(std::move(items)));
      }
      case '}':  // EMPTY_DICT
        return push(make(Value::kDict));
      case 'd': {  // DICT
        auto items = since_mark();
        if (items == nullptr) return false;
        name_pairs(*items);
        return push(make(Value::kDict));
      }
      case 's': {  // SETITEM: the dict below the key and value stays
        if (stack_.size() < 3 + floor()) return false;
        std::vector<ValuePtr> pair(stack_.end() - 2, stack_.end());
        stack_.resize(stack_.size() - 2);
        if (stack_.back()->kind == Value::kDict) name_pairs(pair);
        return true;
      }
      case 'u': {  // SETITEMS
        auto items = since_mark();
        if (items == nullptr || stack_.size() < 1 + floor()) return false;
        if (stack_.back()->kind == Value::kDict) name_pairs(*items);
        return true;
      }
      case 'a':  // APPEND
        return stack_.size() >= 2 + floor() && pop() != nullptr;
      case 'e':   // APPENDS
      case 0x90:  // ADDITEMS
        return since_mark() != nullptr && stack_.size() >= 1 + floor();
      case 'l':   // LIST
      case 0x91:  // FROZENSET
      case 'o':   // OBJ
      case 'i':   // INST
        return since_mark() != nullptr && push(other());
      case 'b':  // BUILD: the object stays
        return stack_.size() >= 2 + floor() && pop() != nullptr;
      case 0x81:  // NEWOBJ
        return pop() != nullptr && pop() != nullptr && push(other());
      case 0x92:  // NEWOBJ_EX
        return pop() != nullptr && pop() != nullptr && pop() != nullptr && push(other());
      case 0x98:  // READONLY_BUFFER: the buffer stays
        return stack_.size() >= 1 + floor();
      case 0x93: {  // STACK_GLOBAL
        const ValuePtr name = pop();
        const ValuePtr module = pop();
        if (name == nullptr || module == nullptr) return false;
        if (name->kind == Value::kString && module->kind == Value::kString) {
          return push(make(Value::kGlobal, 0, module->text + "." + name->text));
        }
        return push(other());
      }
      case 'c':  // GLOBAL
        return push(make(Value::kGlobal, 0, std::string(arg, n) + "." + second));
      case 'Q':  // BINPERSID
        return persistent_id();
      case 'R':  // REDUCE
        return reduce();
      case 0x94:  // MEMOIZE
        if (stack_.empty()) return false;
        memo_.push_back(stack_.back());
        return true;
      case 'q':  // BINPUT
      case 'r':  // LONG_BINPUT
        return put(static_cast<uint64_t>(detail::pickle_little_endian(arg, n, false)));
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const auto id = static_cast<uint64_t>(detail::pickle_little_endian(arg, n, false));
        return id < memo_.size() && push(memo_[id]);
      }
      case 0x80:  // PROTO
      case 0x95:  // FRAME
        return true;
      case 'K':  // BININT1
      case 'M':  // BININT2
        return push(make(Value::kInt, detail::pickle_little_endian(arg, n, false)));
      case 'J':  // BININT
        return push(make(Value::kInt, detail::pickle_little_endian(arg, n, true)));
      case 0x8a:  // LONG1
      case 0x8b:  // LONG4
        return push(n <= 8 ? make(Value::kInt, detail::pickle_little_endian(arg, n, true))
                           : other());
      case 'I':  // INT
      case 'L':  // LONG
        return push(text_integer(std::string(arg, n)));
      case 0x8c:  // SHORT_BINUNICODE
      case 'X':   // BINUNICODE
      case 0x8d:  // BINUNICODE8
      case 'V':   // UNICODE
      case 'U':   // SHORT_BINSTRING
      case 'T':   // BINSTRING
        return push(make(Value::kString, 0, std::string(arg, n)));
      case '.':  // STOP (handled by the caller)
      case 'p':  // PUT, GET: refused by the bounds check
      case 'g':
        return false;
      default:  // the other constants: bytes, floats, None, booleans, EXTn, PERSID, buffers
        return push(other());
    }
  }

 private:
  // The stack's bottom above the last MARK: what the opcodes that do not take a mark can reach.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  bool push(ValuePtr v) {
    stack_.push_back(std::move(v));
    return true;
  }

  ValuePtr pop() {
    if (stack_.size() <= floor()) return nullptr;
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }

  // The values since the last MARK, removed with the mark; nullptr when there is no mark.
  std::unique_ptr<std::vector<ValuePtr>> since_mark() {
    if (marks_.empty()) return nullptr;
    const size_t mark = marks_.back();
    marks_.pop_back();
    auto items = std::make_unique<std::vector<ValuePtr>>(
        stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  bool put(uint64_t id) {
    if (stack_.empty() || id > memo_.size()) return false;
    if (id == memo_.size()) {
      memo_.push_back(stack_.back());
    } else {
      memo_[id] = stack_.back();
    }
    return true;
  }

  static ValuePtr text_integer(std::string text) {
    if (!text.empty() && text.back() == 'L') text.pop_back();
    if (text.empty()) return other();
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end != text.c_str() + text.size()) return other();
    return make(Value::kInt, value);
  }

  // Key-value pairs entered into a dict: a tensor under a string key is named.
  void name_pairs(const std::vector<ValuePtr>& items) {
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      const Value& key = *items[i];
      const Value& value = *items[i + 1];
      if (key.kind == Value::kString && value.kind == Value::kTensor) {
        tensors[static_cast<size_t>(value.integer)].name = key.text;
      }
    }
  }

  // ('storage', <type>, key, location, numel): a storage; anything else kOther.
  bool persistent_id() {
    const ValuePtr id = pop();
    if (id == nullptr) return false;
    const auto& items = id->items;
    if (id->kind == Value::kTuple && items.size() == 5 && items[0]->kind == Value::kString &&
        items[0]->text == "storage" && items[2]->kind == Value::kString &&
        items[4]->kind == Value::kInt) {
      return push(make(Value::kStorage, items[4]->integer, items[2]->text));
    }
    return push(other());
  }

  // _rebuild_tensor_v2(storage, offset, sizes, strides, ...): a tensor; any other call kOther.
  bool reduce() {
    const ValuePtr args = pop();
    const ValuePtr callable = pop();
    if (args == nullptr || callable == nullptr) return false;
    const auto& a = args->items;
    PickledTensor t;
    if (callable->kind == Value::kGlobal &&
        (callable->text == "torch._utils._rebuild_tensor_v2" ||
         callable->text == "torch._utils._rebuild_tensor") &&
        args->kind == Value::kTuple && a.size() >= 4 && a[0]->kind == Value::kStorage &&
        a[1]->kind == Value::kInt && integers(*a[2], &t.sizes) && integers(*a[3], &t.strides)) {
      t.storage_key = a[0]->text;
      t.storage_numel = a[0]->integer;
      t.storage_offset = a[1]->integer;
      tensors.push_back(std::move(t));
      return push(make(Value::kTensor, static_cast<int64_t>(tensors.size() - 1)));
    }
    return push(other());
  }

  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;  // the stack's size at each open MARK
  std::vector<ValuePtr> memo_;
};

// "[2, 3]"
std::string dims(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace

std::string tensor_fit_problem(int64_t storage_offset, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, int64_t storage_numel) {
  using Wide = __int128;
  if (storage_offset < 0) return fmt::format("has a negative storage offset ({})", storage_offset);
  if (sizes.size() != strides.size()) {
    return fmt::format("has {} sizes but {} strides", sizes.size(), strides.size());
  }
  bool empty = false;
  Wide last = storage_offset;  // the index of the last element
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) {
      return fmt::format("has a negative size or stride (sizes {}, strides {})", dims(sizes),
                         dims(strides));
    }
    if (sizes[i] == 0) empty = true;
    last += static_cast<Wide>(sizes[i] > 0 ? sizes[i] - 1 : 0) * strides[i];
  }
  if (empty ? storage_offset > storage_numel : last >= storage_numel) {
    return fmt::format(
        "does not fit in its storage (storage offset {}, sizes {}, strides {}, "
        "but the storage holds {} elements)",
        storage_offset, dims(sizes), dims(strides), storage_numel);
  }
  return "";
}

std::string PickledTensor::fit_problem() const {
  return tensor_fit_problem(storage_offset, sizes, strides, storage_numel);
}

std::vector<PickledTensor> pickled_tensors(const char* data, size_t size) {
  Walker walker;
  size_t at = 0;
  while (at < size) {
    const auto code = static_cast<unsigned char>(data[at]);
    const Opcode& op = detail::pickle_opcode(code);
    if (op.name == nullptr || code == '.') break;
    ++at;
    const detail::PickleArgument arg = detail::pickle_argument(data, size, at, code);
    if (!arg.problem.empty()) break;
    at = arg.end;
    if (!walker.apply(code, arg.data, arg.size, std::string(arg.second_line))) break;
  }
  return std::move(walker.tensors);
}

}  // namespace trainpack
