// Test support: a strict reader of TensorFlow event files (TFRecord framing of Event protobufs).
// Every record's length CRC and data CRC are checked, every record is parsed as an Event, and the
// first must be the file-version record `brain.Event:2`. Any problem throws std::runtime_error
// naming the file and the byte offset of the record (and of the field) that is wrong.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/utils/crc32c.h"
#include "trainpack_tfevent.pb.h"

namespace trainpack {
namespace testing {

namespace tfpb = ::trainpack::tfevent;

inline uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Parses the bytes of a whole event file; `name` is used in the error messages.
inline std::vector<tfpb::Event> parse_event_records(const std::string& data,
                                                    const std::string& name) {
  auto fail = [&](size_t offset, const std::string& what) {
    throw std::runtime_error(name + ": offset " + std::to_string(offset) + ": " + what);
  };
  std::vector<tfpb::Event> events;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t record = pos;
    if (data.size() - pos < 12) fail(record, "truncated record header");
    const uint64_t len = read_le(data, pos, 8);
    const auto len_crc = static_cast<uint32_t>(read_le(data, pos + 8, 4));
    if (crc32c::mask(crc32c::value(data.data() + pos, 8)) != len_crc) {
      fail(pos + 8, "length CRC mismatch");
    }
    pos += 12;
    if (len > data.size() - pos || data.size() - pos - len < 4) {
      fail(record, "record of " + std::to_string(len) + " bytes runs past the end of the file");
    }
    const auto data_crc = static_cast<uint32_t>(read_le(data, pos + len, 4));
    if (crc32c::mask(crc32c::value(data.data() + pos, len)) != data_crc) {
      fail(pos + len, "data CRC mismatch");
    }
    tfpb::Event e;
    if (!e.ParseFromArray(data.data() + pos, static_cast<int>(len))) {
      fail(pos, "the record is not an Event protobuf");
    }
    if (events.empty() && e.file_version() != "brain.Event:2") {
      fail(record,
           "the first record is not file_version brain.Event:2 (got '" + e.file_version() + "')");
    }
    events.push_back(std::move(e));
    pos += len + 4;
  }
  if (events.empty()) fail(0, "no records");
  return events;
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<tfpb::Event> read_event_file(const std::string& path) {
  return parse_event_records(read_file_bytes(path), path);
}

}  // namespace testing
}  // namespace trainpack
